"""action.yml runs exactly the command line docs/ci.md documents, and that line works."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ci.md"
ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))


def documented(marker: str, lang: str) -> str:
    match = re.search(rf"<!-- test: {re.escape(marker)} -->\s*```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert match, f"docs/ci.md has no ```{lang} block after <!-- test: {marker} -->"
    return match.group(1).strip()


def check_step() -> dict:
    return next(s for s in ACTION["runs"]["steps"] if s.get("id") == "check")


def test_action_is_composite_and_uploads_sarif() -> None:
    assert ACTION["runs"]["using"] == "composite"
    uploads = [s for s in ACTION["runs"]["steps"] if str(s.get("uses", "")).startswith("github/codeql-action/upload-sarif@")]
    assert len(uploads) == 1
    assert uploads[0]["with"]["sarif_file"] == "${{ inputs.sarif-file }}"
    assert "always()" in uploads[0]["if"]


def test_action_command_line_is_the_documented_one() -> None:
    assert check_step()["run"].strip() == documented("action-command", "bash")


def test_documented_defaults_expand_from_the_action_inputs() -> None:
    step = check_step()
    inputs = {name: spec.get("default", "") for name, spec in ACTION["inputs"].items()}
    env = {k: re.sub(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", lambda m: str(inputs[m.group(1)]), v) for k, v in step["env"].items()}
    line = step["run"].strip()
    for name, value in env.items():
        line = line.replace(f'"${name}"', value).replace(f"${name}", value)
    assert " ".join(line.split()) == documented("action-command-defaults", "bash")


def test_documented_workflow_uses_existing_inputs() -> None:
    workflow = yaml.safe_load(
        re.search(r"```yaml\n(name: torch-preflight.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL).group(1)
    )
    steps = workflow["jobs"]["torch-preflight"]["steps"]
    action = next(s for s in steps if str(s.get("uses", "")).startswith("torch-preflight/torch-preflight@"))
    assert set(action.get("with", {})) <= set(ACTION["inputs"])
    assert workflow["permissions"]["security-events"] == "write"


def test_documented_command_runs_and_writes_sarif(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "demo"\n', encoding="utf-8")
    (tmp_path / "train.py").write_text(
        "def train(model, loader, optimizer, criterion):\n"
        "    for x, y in loader:\n"
        "        loss = criterion(model(x), y)\n"
        "        loss.backward()\n"
        "        optimizer.step()\n",
        encoding="utf-8",
    )
    argv = shlex.split(documented("action-command-defaults", "bash"))
    assert argv[0] == "torch-preflight"
    exe = Path(sys.executable).parent / "torch-preflight"
    proc = subprocess.run([str(exe), *argv[1:]], cwd=tmp_path, capture_output=True, text=True, env=os.environ, timeout=120)
    assert proc.returncode == 0, proc.stderr  # --exit-zero: findings do not fail the step
    sarif = json.loads((tmp_path / "torch-preflight.sarif").read_text(encoding="utf-8"))
    assert sarif["version"] == "2.1.0"
    results = sarif["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["TPF001"]
    assert results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("train.py")
