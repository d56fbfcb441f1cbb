"""`TrainingModel.may_hold`: which kinds of event a function's expansion can hold, answered
without expanding it (issue 19: the rules that ask every function of a module, TPF002's
`step_units` and TPF009's `trains`, expand only those that can back-propagate and step)."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch_preflight.core.parse import parse
from torch_preflight.core.project import Project
from torch_preflight.core.semantic import EventKind, build
from torch_preflight.core.source import SourceText
from torch_preflight.core.training import TrainingModel

FIXTURES = sorted((Path(__file__).parent / "fixtures").rglob("*.py"))


def training_of(text: str, path: str = "t.py", project: Project | None = None) -> TrainingModel:
    source = SourceText(text)
    return TrainingModel(build(parse(source).tree, source, path), (project or Project()).view())


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_kind_an_expansion_holds_is_announced(path: Path) -> None:
    training = training_of(path.read_text(encoding="utf-8"), str(path))
    for qualname in training.model.functions:
        for event in training.expanded(qualname):
            assert training.may_hold(qualname, event.kind), (qualname, event.kind, event.name)


CHAIN = """def outer(model, x, optimizer):
    middle(model, x)
    optimizer.step()


def middle(model, x):
    inner(model, x)


def inner(model, x):
    if x:
        middle(model, x[1:])
    model(x).sum().backward()


def log(x):
    print(x)
"""


def test_kinds_travel_up_the_call_graph_through_a_cycle() -> None:
    training = training_of(CHAIN)
    assert all(training.may_hold(q, EventKind.BACKWARD) for q in ("outer", "middle", "inner"))
    assert training.may_hold("outer", EventKind.STEP)
    assert not training.may_hold("middle", EventKind.STEP)
    assert not training.may_hold("log", EventKind.BACKWARD)


def test_a_call_into_the_project_may_hold_any_kind(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    (tmp_path / "helpers.py").write_text("def step(model, batch, optimizer):\n    model(batch).sum().backward()\n    optimizer.step()\n", encoding="utf-8")
    text = "from helpers import step\n\n\ndef train(model, loader, optimizer):\n    for batch in loader:\n        step(model, batch, optimizer)\n"
    training = training_of(text, str(tmp_path / "train.py"), Project())
    assert training.may_hold("train", EventKind.STEP) and training.may_hold("train", EventKind.BACKWARD)
    assert any(e.kind is EventKind.STEP for e in training.expanded("train"))
