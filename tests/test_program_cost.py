"""What the whole-program model costs and how it is bounded (core/project.py): a callee's module is
modelled as a slice around the function, which must answer every question about it as the whole
module does; what one analysis reads of other modules is bounded by a budget, past which a callee
is unknown (rules stay silent), never "does nothing"; and the files of one CLI run share what they read."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from torch_preflight.core import project as project_module
from torch_preflight.core.config import Config
from torch_preflight.core.parse import parse
from torch_preflight.core.project import Budget, Project, _slice
from torch_preflight.core.semantic import Event, build
from torch_preflight.core.source import SourceText
from torch_preflight.core.training import TrainingModel

from torch_preflight.analyze import analyze

FIXTURES = Path(__file__).parent / "fixtures"

HELPERS = """\
import torch
from torch import nn

LR = 0.1


class Meter:
    def update(self, value):
        self.total = helper_only_meter_calls(value)


class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def fit_batch(self, batch):
        self.optimizer.zero_grad()
        self.model(batch).sum().backward()
        self.optimizer.step()


def helper_only_meter_calls(value):
    return value


def unrelated(model):
    model.eval()


def clear(optimizer):
    optimizer.zero_grad()


def keep(optimizer):
    return optimizer


def run_trainer(model, optimizer, batch):
    if isinstance(batch, Meter):
        return
    Trainer(model, optimizer).fit_batch(batch)
"""

SCRIPT = """\
import torch
from helpers import {name}

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for batch in loader:
    loss = model(batch).sum()
    loss.backward()
    optimizer.step()
    {name}(optimizer)
"""


def write(root: Path, files: dict[str, str]) -> None:
    (root / "pyproject.toml").write_text("")
    for name, text in files.items():
        (root / name).write_text(text)


def codes(path: Path, project: Project | None = None) -> list[tuple[str, int]]:
    result = analyze(path.read_text(), str(path), Config(select=("ALL",)), project=project)
    return [(d.code, d.span.start.line + 1) for d in result.diagnostics]


# --- the slice -------------------------------------------------------------------------


def test_slice_keeps_what_the_function_reaches_by_name() -> None:
    tree = ast.parse(HELPERS)
    kept = {getattr(s, "name", type(s).__name__): s for s in _slice(tree, "run_trainer").body}
    assert set(kept) == {"Import", "ImportFrom", "Meter", "Trainer", "run_trainer"}  # not `unrelated`, `clear`, `LR`...
    trainer, meter = kept["Trainer"], kept["Meter"]
    assert isinstance(trainer, ast.ClassDef) and isinstance(meter, ast.ClassDef)
    assert len(trainer.body[1].body) == 3  # called (`Trainer(...)`): whole, its methods can be reached
    assert [type(s).__name__ for s in meter.body[0].body] == ["Pass"]  # only mentioned: its methods are left unread
    assert "helper_only_meter_calls" not in kept
    assert [type(s).__name__ for s in _slice(tree, "Trainer").body] == ["Import", "ImportFrom"]  # a class: only re-exports count


def _normalised(events: tuple[Event, ...]) -> list[Event]:
    """Events with loop ids renumbered by first appearance (a slice numbers its loops from 0)."""
    ids: dict[int, int] = {}
    return [dataclasses.replace(e, loops=tuple(ids.setdefault(i, len(ids)) for i in e.loops)) for e in events]


def _fixture_files() -> list[Path]:
    files = sorted(FIXTURES.rglob("*.py"))
    return files[:: max(1, len(files) // 60)]  # a spread over every rule's fixtures


@pytest.mark.parametrize("path", _fixture_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_slice_answers_like_the_whole_module(path: Path) -> None:
    """For every top-level function of a fixture: the same expansion, the same summary, the same
    return kind from the slice as from the whole module, both read as another module of the project
    (as core/project.py reads them: the importer may call any public function)."""
    source = SourceText(path.read_text())
    tree = parse(source).tree
    whole = build(tree, source, str(path), imported=True)
    imports = whole.imports
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for name in names:
        part = build(_slice(tree, name), source, str(path), imports=imports, imported=True)
        assert _normalised(TrainingModel(part).expanded(name)) == _normalised(TrainingModel(whole).expanded(name)), name
        a, b = Project().view(), Project().view()
        assert a.summary(part, name) == b.summary(whole, name), name


def test_a_callee_is_modelled_from_a_slice_and_the_module_parsed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, {"helpers.py": HELPERS, "a.py": SCRIPT.format(name="clear"), "b.py": SCRIPT.format(name="keep")})
    parsed: list[int] = []
    original = project_module._Parsed.of
    monkeypatch.setattr(project_module._Parsed, "of", classmethod(lambda cls, source: parsed.append(1) or original(source)))
    project = Project()
    assert [c for c in codes(tmp_path / "a.py", project) if c[0] == "TPF001"] == []  # clear() zero_grads
    assert ("TPF001", 6) in codes(tmp_path / "b.py", project)  # keep() does not
    assert parsed == [1]  # helpers.py parsed once for both scripts and both functions


# --- the budget ------------------------------------------------------------------------


def test_budget_cut_makes_the_callee_unknown_and_the_rule_silent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, {"helpers.py": HELPERS, "b.py": SCRIPT.format(name="keep")})
    script = tmp_path / "b.py"
    assert ("TPF001", 6) in codes(script)  # read: keep() clears nothing
    monkeypatch.setattr(project_module, "FOREIGN_BUDGET_BYTES", len(HELPERS) - 1)
    # not read: keep(optimizer) may clear, so TPF001 stays silent rather than assume it does nothing
    assert [c for c in codes(script) if c[0] == "TPF001"] == []


def test_budget_cut_summary_is_partial_and_not_memoised(tmp_path: Path) -> None:
    caller = "from helpers import clear\n\n\ndef step(optimizer):\n    clear(optimizer)\n"
    write(tmp_path, {"helpers.py": HELPERS, "caller.py": caller})
    source = SourceText(caller)
    model = build(parse(source).tree, source, str(tmp_path / "caller.py"))
    project = Project()
    poor = project.view()
    poor.budget = Budget(10)
    cut = poor.summary(model, "step")
    assert cut is not None and cut.partial and cut.clears == () and poor.budget.cuts == 1
    full = project.view().summary(model, "step")  # the cut answer was not memoised
    assert full is not None and not full.partial and full.clears == ("optimizer",)
    replay = project.view()
    replay.budget = Budget(10)  # a memoised answer charges what computing it read: cut again, alike
    again = replay.summary(model, "step")
    assert again == cut and replay.budget.cuts > 0


def test_budget_charges_a_cached_module_too(tmp_path: Path) -> None:
    """Answers never depend on what an earlier analysis of the same run read."""
    write(tmp_path, {"helpers.py": HELPERS})
    importer = str(tmp_path / "x.py")
    project = Project()
    assert project.view().resolve_function(importer, "helpers.clear") is not None
    poor = project.view()
    poor.budget = Budget(10)
    assert poor.resolve_function(importer, "helpers.clear") is None and poor.budget.cuts == 1


# --- one CLI run -----------------------------------------------------------------------


def test_cli_run_reads_a_shared_helper_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_preflight.main import main

    write(tmp_path, {"helpers.py": HELPERS, "a.py": SCRIPT.format(name="clear"), "b.py": SCRIPT.format(name="keep")})
    parsed: list[str] = []
    original = project_module._Parsed.of
    monkeypatch.setattr(project_module._Parsed, "of", classmethod(lambda cls, source: parsed.append("x") or original(source)))
    rc = main(["check", "--no-cache", "-j", "1", "--select", "TPF001", "--format", "concise", str(tmp_path / "a.py"), str(tmp_path / "b.py")])
    assert rc == 1
    assert parsed == ["x"]


# --- summaries kept across processes (SummaryStore, the CLI's cache) -------------------

STEPS = """\
def train_step(model, batch, optimizer):
    model(batch).sum().backward()
    optimizer.step()
"""

ENGINE = """\
from steps import train_step


def train_one_epoch(model, loader, optimizer):
    for batch in loader:
        train_step(model, batch, optimizer)
"""

MAIN = """\
import torch
from engine import train_one_epoch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for batch in loader:
    train_one_epoch(model, [batch], optimizer)
"""


def _parsed_names(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []
    original = project_module._Parsed.of

    def of(cls: type, source: SourceText) -> object:
        names.append("steps.py" if source.text.startswith("def train_step") else "engine.py")
        return original(source)

    monkeypatch.setattr(project_module._Parsed, "of", classmethod(of))
    return names


def test_stored_answers_are_reused_by_a_later_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_preflight.core.program import SummaryStore

    write(tmp_path, {"steps.py": STEPS, "engine.py": ENGINE, "train.py": MAIN})
    script = tmp_path / "train.py"
    parsed = _parsed_names(monkeypatch)
    first = SummaryStore()
    before = codes(script, Project(store=first))
    assert sorted(parsed) == ["engine.py", "steps.py"] and first.added
    parsed.clear()
    # a later run: engine.py is parsed to find the function, the events it contributes come from the store
    again = codes(script, Project(store=SummaryStore(json_roundtrip(first.entries))))
    assert again == before and parsed == ["engine.py"]


def test_stored_answers_go_stale_when_a_callee_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from torch_preflight.core.program import SummaryStore

    write(tmp_path, {"steps.py": STEPS, "engine.py": ENGINE, "train.py": MAIN})
    script = tmp_path / "engine.py"
    store = SummaryStore()
    assert ("TPF001", 5) in codes(script, Project(store=store))  # nothing clears the gradients
    parsed = _parsed_names(monkeypatch)
    assert ("TPF001", 5) in codes(script, Project(store=SummaryStore(json_roundtrip(store.entries))))
    assert parsed == ["steps.py"]  # to find the function; what it does comes from the store
    parsed.clear()
    steps = tmp_path / "steps.py"
    mtime = steps.stat().st_mtime_ns
    steps.write_text(STEPS.replace("    model(batch)", "    optimizer.zero_grad()\n    model(batch)"))
    os.utime(steps, ns=(mtime + 10_000_000, mtime + 10_000_000))
    fresh = SummaryStore(json_roundtrip(store.entries))
    assert ("TPF001", 5) not in codes(script, Project(store=fresh))  # the stored entry rests on steps.py: not used
    assert parsed == ["steps.py"] and fresh.added  # read and summarised again


def json_roundtrip(entries: dict[str, object]) -> dict[str, object]:
    import json

    return dict(json.loads(json.dumps(entries)))


def test_cli_cache_keeps_summaries_for_the_next_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_preflight.main import main

    engine = "from steps import train_step\n\n\ndef run_step(model, batch, optimizer):\n    train_step(model, batch, optimizer)\n"
    main_text = MAIN.replace("train_one_epoch", "run_step").replace("[batch]", "batch")
    write(tmp_path, {"steps.py": STEPS, "engine.py": engine, "train.py": main_text})
    args = ["check", "--cache-dir", str(tmp_path / "cache"), "--select", "TPF001", "--format", "concise", str(tmp_path / "train.py")]
    parsed = _parsed_names(monkeypatch)
    assert main(args) == 1  # the step two files away is seen, with no zero_grad
    assert list((tmp_path / "cache").rglob("*.summaries.json"))
    parsed.clear()
    (tmp_path / "train.py").write_text(main_text + "\n# edited\n")  # only the script changed
    assert main(args) == 1
    assert parsed == ["engine.py"]  # steps.py, two files away, is not read again
