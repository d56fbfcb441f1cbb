"""The .vsix carries its own server: unpacked, its launcher runs under a bare Python (a venv with
nothing installed, started isolated) and publishes diagnostics for a buggy file, with rule links
to pages inside the bundle."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, rule_page
from lsp_stdio import first_diagnostics

VSCODE = ROOT / "vscode-client"
BAD = ROOT / "tests" / "editors" / "bad_train.py"

pytestmark = pytest.mark.skipif(shutil.which("npm") is None, reason="`make vsix` needs Node.js and npm")


@pytest.fixture(scope="module")
def extension(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make vsix`, unpacked: the folder VS Code installs (`extension/` inside the zip)."""
    done = subprocess.run(["make", "-s", "vsix"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    version = json.loads((VSCODE / "package.json").read_text(encoding="utf-8"))["version"]
    vsix = VSCODE / f"torch-preflight-{version}.vsix"
    out = tmp_path_factory.mktemp("vsix")
    with zipfile.ZipFile(vsix) as z:
        names = z.namelist()
        assert not [n for n in names if n.endswith((".so", ".pyd", ".dylib", ".pyc"))], "the bundle must be pure Python"
        z.extractall(out)
    return out / "extension"


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv of the base interpreter with nothing installed (no pip, no torch_preflight)."""
    root = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True)
    python = root / "bin" / "python"
    probe = subprocess.run([str(python), "-I", "-c", "import torch_preflight"], capture_output=True, text=True)
    assert probe.returncode == 1 and "No module named 'torch_preflight'" in probe.stderr
    return python


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TORCH_PREFLIGHT_IMPORT_STRATEGY")}


def test_bundled_server_runs_under_a_bare_python(extension: Path, bare_python: Path, tmp_path: Path) -> None:
    launcher = extension / "bundled" / "tool" / "launch.py"
    script = tmp_path / "train.py"
    script.write_text(BAD.read_text(encoding="utf-8"), encoding="utf-8")
    found = first_diagnostics([str(bare_python), "-I", str(launcher), "server"], script, env=_env())
    assert {"TPF001", "TPF007"} <= {d["code"] for d in found}
    for d in found:
        page = rule_page(d["codeDescription"]["href"])
        assert page.is_relative_to(extension / "bundled" / "libs" / "torch_preflight" / "docs" / "rules")


def test_bundled_cli_and_import_strategies(extension: Path, bare_python: Path) -> None:
    launcher = str(extension / "bundled" / "tool" / "launch.py")
    check = subprocess.run([str(bare_python), "-I", launcher, "check", "--format", "json", str(BAD)], capture_output=True, text=True, env=_env())
    assert check.returncode == 1, check.stderr
    assert {"TPF001", "TPF007"} <= {item["code"] for item in json.loads(check.stdout)}
    where = "import runpy, sys; runpy.run_path(sys.argv[1])['use_libs'](sys.argv[2]); import torch_preflight; print(torch_preflight.__file__)"
    # useBundled puts the bundle ahead of an installed copy; fromEnvironment runs the installed one
    # (this checkout, installed editable for the test interpreter) and falls back to the bundle
    for strategy, python, expected in (
        ("useBundled", sys.executable, extension),
        ("fromEnvironment", sys.executable, ROOT),
        ("fromEnvironment", str(bare_python), extension),
    ):
        done = subprocess.run([python, "-c", where, launcher, strategy], capture_output=True, text=True, env=_env(), cwd=extension)
        assert done.returncode == 0, done.stderr
        assert Path(done.stdout.strip()).is_relative_to(expected), (strategy, python, done.stdout)


def test_launcher_refuses_an_old_python_with_a_clear_message() -> None:
    launcher = VSCODE / "bundled" / "tool" / "launch.py"
    code = "import runpy, sys; sys.version_info = (3, 10, 0); runpy.run_path(sys.argv[1], run_name='__main__')"
    done = subprocess.run([sys.executable, "-I", "-c", code, str(launcher), "server"], capture_output=True, text=True)
    assert done.returncode == 1 and "torch-preflight needs Python >= 3.11" in done.stderr
