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
    assert work <= shapes.SHAPE_STEPS + 4  # each of the three runs may overstep by the tick that raises
    # the mismatch proven before the budget ran out stands
    assert [(m.kind, m.expected) for m in found] == [("linear", "in_features=64")]  # type: ignore[attr-defined]


def test_budget_is_a_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    _, small = _check(UNROLLED, monkeypatch, steps=4_000)
    assert small <= 4_000 + 4
