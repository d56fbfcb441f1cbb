"""The `pytorch-preflight` distribution: the sdist and the wheel built from it carry the rule
pages, and the wheel installed into a clean venv (no torch, nothing from this checkout) runs
`check`, `estimate` and the language server, with rule links that resolve to installed files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, rule_page
from lsp_stdio import first_diagnostics

BAD = ROOT / "tests" / "editors" / "bad_train.py"
DIST = "pytorch-preflight"


def _run(*argv: str | Path, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, **kwargs)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist, and the wheel built from that sdist (as `make dist` does, without its isolated env)."""
    out = tmp_path_factory.mktemp("dist")
    done = _run(sys.executable, "-m", "build", "--no-isolation", "--skip-dependency-check", "--outdir", out, ROOT)
    assert done.returncode == 0, done.stderr
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def venv(built: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with nothing but the wheel and its runtime dependencies."""
    root = tmp_path_factory.mktemp("venv") / "v"
    assert _run(sys.executable, "-m", "venv", "--without-pip", root).returncode == 0
    python = root / "bin" / "python"
    done = _run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", built[1])
    assert done.returncode == 0, done.stderr
    return root


def test_names_and_rule_pages_in_sdist_and_wheel(built: tuple[Path, Path]) -> None:
    sdist, wheel = built
    assert sdist.name.startswith("pytorch_preflight-") and wheel.name.startswith("pytorch_preflight-")
    pages = sorted(p.name for p in (ROOT / "docs" / "rules").glob("*.md"))
    assert "TPF001.md" in pages
    with tarfile.open(sdist) as tar:
        in_sdist = sorted(Path(n).name for n in tar.getnames() if "/docs/rules/" in n and n.endswith(".md"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        in_wheel = sorted(Path(n).name for n in names if n.startswith("torch_preflight/docs/rules/"))
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert in_sdist == pages and in_wheel == pages
    assert f"Name: {DIST}\n" in metadata
    assert "torch-preflight = torch_preflight.main:run" in entry_points
    assert not [n for n in names if n.split("/")[0] not in ("torch_preflight",) and ".dist-info/" not in n]


def test_clean_venv_has_no_torch_and_the_checkout_is_not_on_its_path(venv: Path) -> None:
    code = "import importlib.util as u, torch_preflight; print(u.find_spec('torch') is None, torch_preflight.__file__)"
    done = _run(venv / "bin" / "python", "-c", code, cwd=venv)
    assert done.returncode == 0, done.stderr
    no_torch, where = done.stdout.split()
    assert no_torch == "True"
    assert Path(where).is_relative_to(venv) and not Path(where).is_relative_to(ROOT)


def test_check_from_the_wheel_links_to_installed_pages(venv: Path) -> None:
    done = _run(venv / "bin" / "torch-preflight", "check", "--format", "json", BAD, cwd=venv)
    assert done.returncode == 1, done.stderr  # findings
    items = json.loads(done.stdout)
    assert {"TPF001", "TPF007"} <= {i["code"] for i in items}
    for item in items:
        page = rule_page(item["url"])
        assert page.is_relative_to(venv) and page.name == f"{item['code']}.md"
        assert page.read_text(encoding="utf-8").startswith(f"# {item['code']} ")


def test_rule_and_estimate_from_the_wheel(venv: Path) -> None:
    rule = _run(venv / "bin" / "torch-preflight", "rule", "TPF001", cwd=venv)
    assert rule.returncode == 0 and rule.stdout.startswith("# TPF001 missing-zero-grad"), rule.stderr
    done = _run(venv / "bin" / "torch-preflight", "estimate", "--format", "json", BAD, cwd=venv)
    assert done.returncode == 0, done.stderr
    (model,) = json.loads(done.stdout)["models"]
    assert model["model"] == "Net"
    assert sum(layer["params"] for layer in model["layers"]) == 784 * 4096 + 4096 + 4096 * 10 + 10  # fc1, fc2
    assert model["peak_bytes"] > model["breakdown"]["parameters"] >= 4 * (784 * 4096 + 4096 * 10)


def test_server_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(BAD.read_text(encoding="utf-8"), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    found = first_diagnostics([str(venv / "bin" / "torch-preflight"), "server"], script, env=env)
    assert {"TPF001", "TPF007"} <= {d["code"] for d in found}
    for d in found:
        assert rule_page(d["codeDescription"]["href"]).is_relative_to(venv)
