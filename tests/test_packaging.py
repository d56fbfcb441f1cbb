"""The package installs under one namespace, and the runtime never imports torch or LSP
types outside the server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

RUNTIME = ("core", "rules", "estimator", "torch_preflight")


def test_non_editable_install_has_one_namespace(tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target", str(target), str(ROOT)],
        check=True,
        capture_output=True,
    )
    top = sorted(p.name for p in target.iterdir() if not p.name.endswith((".dist-info", ".egg-info")) and p.name != "bin")
    assert top == ["torch_preflight"], top
    code = "import torch_preflight.rules, torch_preflight.core, torch_preflight.estimator, torch_preflight.server\ntry:\n    import rules\nexcept ImportError:\n    print('ok')\n"
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


# the one exemption: `torch-preflight measure` (the `measure` extra) runs the user's script under torch,
# and only this module imports it (lazily, from the `measure` subcommand)
EXEMPT = {"torch": {"torch_preflight/measure/runtime.py"}}


@pytest.mark.parametrize("forbidden", ["pygls", "lsprotocol", "torch"])
def test_runtime_layers_do_not_import(forbidden: str) -> None:
    pattern = re.compile(rf"^\s*(from\s+{forbidden}\b|import\s+{forbidden}\b)", re.M)
    offenders, exempt = [], []
    for folder in RUNTIME:
        for path in (ROOT / folder).rglob("*.py"):
            if pattern.search(path.read_text(encoding="utf-8")):
                name = path.relative_to(ROOT).as_posix()
                (exempt if name in EXEMPT.get(forbidden, ()) else offenders).append(name)
    assert not offenders
    assert sorted(exempt) == sorted(EXEMPT.get(forbidden, ())), "a stale exemption: drop it from EXEMPT"
