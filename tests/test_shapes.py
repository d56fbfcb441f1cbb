"""The shape checker (TPF501) outside its fixtures: its work budget."""

from __future__ import annotations

import textwrap

import pytest
from torch_preflight.core.parse import parse
from torch_preflight.core.semantic import build
from torch_preflight.core.source import SourceText
from torch_preflight.estimator import interp, shapes

# Every block is unrolled: 3000 experts built by a comprehension, each run in a loop per block.
UNROLLED = """
import torch
import torch.nn as nn

class Expert(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(64, 128)
        self.down = nn.Linear(128, 64)

    def forward(self, x):
        return self.down(self.up(x))

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleList([Expert() for _ in range(3000)])

    def forward(self, x):
        return sum(e(x) for e in self.experts)

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(12)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x

class Wrong(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(64, 8)

    def forward(self, x):
        return self.b(self.a(x))

Wrong()(torch.randn(4, 16))
Model()(torch.randn(4, 64))
"""


def _check(src: str, monkeypatch: pytest.MonkeyPatch, steps: int = shapes.SHAPE_STEPS) -> tuple[list[object], int]:
    """(mismatches, statements and iterations the interpreter ran)."""
    work = [0]
    tick = interp.Interpreter.tick

    def counted(self: interp.Interpreter) -> None:
        work[0] += 1
        tick(self)

    monkeypatch.setattr(interp.Interpreter, "tick", counted)
    text = textwrap.dedent(src)
    source = SourceText(text)
    tree = parse(source).tree
    found = shapes.check_shapes(build(tree, source, "t.py"), tree, None, steps)
    return list(found), work[0]


def test_budget_bounds_an_unrolled_model(monkeypatch: pytest.MonkeyPatch) -> None:
    found, work = _check(UNROLLED, monkeypatch)
    # each of the three runs may overstep by the tick that raises, and a script that runs out gets a
    # tenth of its budget more to build the models it names
    assert work <= shapes.SHAPE_STEPS * 1.1 + 4
    # the mismatch proven before the budget ran out stands
    assert [(m.kind, m.expected) for m in found] == [("linear", "in_features=64")]  # type: ignore[attr-defined]


def test_budget_is_a_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    _, small = _check(UNROLLED, monkeypatch, steps=4_000)
    assert small <= 4_000 * 1.1 + 4


def _fixture_shapes(path: str, reuse: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[object], int]:
    """(mismatches of a file, how many times the script was interpreted), with the first probe reusing the
    script's run (as `check_shapes` does) or forced to run the script again (as it did before)."""
    runs = [0]
    original = shapes._interpreter

    def counted(*args: object) -> object:
        runs[0] += 1
        return original(*args)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:
        patch.setattr(shapes, "_interpreter", counted)
        if not reuse:
            patch.setattr(shapes, "_reusable", lambda *args: None)
        source = SourceText(open(path, encoding="utf-8").read())
        tree = parse(source).tree
        found = shapes.check_shapes(build(tree, source, path), tree, None)
    return [repr(m) for m in found], runs[0]


def test_first_probe_reuses_the_script_run_with_the_same_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first probe continues the script's own run when a fresh run with the probe's budget would be the
    same (no input shape, the script ran to its end within the probe's budget): every TPF501 fixture and
    every estimator example gives the same mismatches, and the script is interpreted twice instead of three
    times there; an unrolled model that runs out of budget is interpreted three times, as before."""
    from pathlib import Path

    root = Path(__file__).parent
    files = sorted(str(p) for p in (*(root / "fixtures" / "TPF501").glob("*.py"), *(root.parent / "examples").rglob("*.py")))
    reused = 0
    for path in files:
        new, new_runs = _fixture_shapes(path, True, monkeypatch)
        old, old_runs = _fixture_shapes(path, False, monkeypatch)
        assert new == old, path
        assert old_runs == 3
        reused += new_runs == 2
    assert reused >= 5
    with monkeypatch.context() as patch:
        runs = [0]
        original = shapes._interpreter
        patch.setattr(shapes, "_interpreter", lambda *a: (runs.__setitem__(0, runs[0] + 1), original(*a))[1])
        _check(UNROLLED, patch)
        assert runs[0] == 3
