"""Shared sources and helpers for the CLI and reporter tests."""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent

# TPF001 (line 16, unsafe fix), TPF005 (line 21, safe fix), TPF007 (line 24, safe fix)
BAD = '''import torch
import torch.nn as nn
from torch import optim

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 2)
    def forward(self, x):
        return self.fc(x)

model = Net()
opt = optim.Adam(model.parameters())
crit = nn.CrossEntropyLoss()
total = 0
for x, y in loader:
    out = model(x)
    loss = crit(out, y)
    loss.backward()
    opt.step()
    total += loss

model.eval()
for x, y in val_loader:
    pred = model(x)
'''
BAD_EXPECTED = [("TPF001", 16, 1), ("TPF005", 21, 5), ("TPF007", 24, 1)]
# The rules these tests exercise; pinned so that rules added later do not change the expectations.
RULES = ("TPF001", "TPF005", "TPF007")
SELECT = 'select = ["TPF001", "TPF005", "TPF007"]'

CLEAN = '''import torch
import torch.nn as nn

model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
crit = nn.MSELoss()
total = 0.0
for x, y in loader:
    opt.zero_grad()
    loss = crit(model(x), y)
    loss.backward()
    opt.step()
    total += loss.item()

with torch.no_grad():
    for x, y in val_loader:
        pred = model(x)
'''


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *, cwd: Path, stdin: bytes | None = None) -> CliResult:
    """Run `torch-preflight ARGS` in this process (through the top-level entry point)."""
    from torch_preflight.main import main

    monkeypatch.chdir(cwd)
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    capsys.readouterr()
    code = main(args)
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def make_project(root: Path, files: dict[str, str | bytes], config: str | None = SELECT) -> Path:
    """A temp project: a pyproject.toml (with `[tool.torch-preflight]` + `config` when not None) and files."""
    root.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (root / "pyproject.toml").write_text(f'[project]\nname = "demo"\n\n[tool.torch-preflight]\n{config}\n', encoding="utf-8")
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root
