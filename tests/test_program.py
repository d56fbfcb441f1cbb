"""The whole-program model (core/program.py): summaries over the user's project, helpers
followed across files to any depth, the project's own no_grad decorators, factories whose
return kind comes from their summary, star imports and import cycles."""

from __future__ import annotations

import json
import os
from pathlib import Path

from torch_preflight.core.config import Config
from torch_preflight.core.parse import parse
from torch_preflight.core.program import FunctionSummary
from torch_preflight.core.project import Project
from torch_preflight.core.semantic import build
from torch_preflight.core.source import SourceText

from torch_preflight.analyze import analyze

STEPS = """\
def train_step(model, batch, optimizer, criterion):
    x, y = batch
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""

STEPS_CLEARED = STEPS.replace("    x, y = batch\n", "    optimizer.zero_grad()\n    x, y = batch\n")

ENGINE = """\
from steps import train_step


def train_one_epoch(model, loader, optimizer, criterion):
    for batch in loader:
        train_step(model, batch, optimizer, criterion)
"""

MAIN = """\
import torch
from engine import train_one_epoch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = torch.nn.CrossEntropyLoss()
for epoch in range(10):
    train_one_epoch(model, loader, optimizer, criterion)
"""

UTILS = """\
import torch


def smart_inference_mode(torch_1_9=True):
    def decorate(fn):
        return (torch.inference_mode if torch_1_9 else torch.no_grad)()(fn)

    return decorate


def make_opt(model, lr):
    return torch.optim.SGD(model.parameters(), lr=lr)
"""

VAL = """\
import torch
from utils import smart_inference_mode


@smart_inference_mode()
def run(model, loader):
    outs = []
    for x in loader:
        outs.append(model(x))
    return outs


def run_plain(model, loader):
    outs = []
    for x in loader:
        outs.append(model(x))
    return outs
"""


def write(root: Path, files: dict[str, str]) -> None:
    (root / "pyproject.toml").write_text("")
    for name, text in files.items():
        (root / name).write_text(text)


def findings(script: Path, project: Project | None = None, select: str = "ALL") -> list[tuple[str, int]]:
    result = analyze(script.read_text(), str(script), Config(select=(select,)), project=project)
    return [(d.code, d.span.start.line + 1) for d in result.diagnostics]


def test_step_two_files_away_without_zero_grad(tmp_path: Path) -> None:
    write(tmp_path, {"steps.py": STEPS, "engine.py": ENGINE, "train.py": MAIN})
    script = tmp_path / "train.py"
    assert ("TPF001", 7) not in findings(script)  # the epoch loop sees the batch loop as inner
    engine = tmp_path / "engine.py"
    assert ("TPF001", 5) in findings(engine)  # the batch loop, whose step lives in steps.py
    result = analyze(engine.read_text(), str(engine), Config(select=("ALL",)))
    assert [Path(d.path).name for d in result.dependencies] == ["steps.py"]


def test_step_two_files_away_is_seen_from_the_script(tmp_path: Path) -> None:
    main = MAIN.replace("for epoch in range(10):\n    train_one_epoch", "for batch in loader:\n    train_step")
    main = main.replace("from engine import train_one_epoch", "from engine import train_step")
    main = main.replace("(model, loader, optimizer, criterion)", "(model, batch, optimizer, criterion)")
    write(tmp_path, {"steps.py": STEPS, "engine.py": "from steps import *\n", "train.py": main})
    script = tmp_path / "train.py"
    # engine.py re-exports steps.train_step through a star import: not followed there, so silent
    assert [c for c in findings(script) if c[0] == "TPF001"] == []
    (tmp_path / "engine.py").write_text("from steps import train_step\n")
    assert ("TPF001", 7) in findings(script, Project())


def test_cleared_deeper_in_the_project_is_clean(tmp_path: Path) -> None:
    write(tmp_path, {"steps.py": STEPS_CLEARED, "engine.py": ENGINE, "train.py": MAIN})
    for name in ("train.py", "engine.py"):
        assert [c for c in findings(tmp_path / name) if c[0] in ("TPF001", "TPF002", "TPF003")] == []


def test_star_import_of_a_helper(tmp_path: Path) -> None:
    main = "import torch\nfrom steps import *\n\nmodel = torch.nn.Linear(4, 2)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    main += "criterion = torch.nn.CrossEntropyLoss()\nfor batch in loader:\n    train_step(model, batch, optimizer, criterion)\n"
    write(tmp_path, {"steps.py": STEPS, "train.py": main})
    assert ("TPF001", 7) in findings(tmp_path / "train.py")
    (tmp_path / "steps.py").write_text(STEPS_CLEARED)
    assert [c for c in findings(tmp_path / "train.py", Project()) if c[0] == "TPF001"] == []


def test_import_cycle_terminates(tmp_path: Path) -> None:
    a = "from b import helper\n\n\ndef step(model, batch, optimizer):\n    helper(model, batch, optimizer)\n"
    b = "from a import step\n\n\ndef helper(model, batch, optimizer):\n    step(model, batch, optimizer)\n"
    main = "import torch\nfrom a import step\n\nmodel = torch.nn.Linear(4, 2)\noptimizer = torch.optim.SGD(model.parameters())\n"
    main += "for batch in loader:\n    step(model, batch, optimizer)\n"
    write(tmp_path, {"a.py": a, "b.py": b, "train.py": main})
    assert [c for c in findings(tmp_path / "train.py") if c[0] == "TPF001"] == []  # no step anywhere: not a training loop


def test_project_decorator_that_wraps_inference_mode(tmp_path: Path) -> None:
    write(tmp_path, {"utils.py": UTILS, "val.py": VAL})
    found = findings(tmp_path / "val.py", select="TPF007")
    assert ("TPF007", 8) not in found  # @smart_inference_mode() from utils.py turns gradients off
    assert ("TPF007", 15) in found  # the undecorated twin still records a graph


def test_decorator_that_reenables_gradients_does_not_count(tmp_path: Path) -> None:
    utils = UTILS.replace("(torch.inference_mode if torch_1_9 else torch.no_grad)()(fn)", "torch.enable_grad()(fn)")
    write(tmp_path, {"utils.py": utils, "val.py": VAL})
    assert ("TPF007", 8) in findings(tmp_path / "val.py", select="TPF007")


def test_factory_in_another_module_builds_an_optimizer(tmp_path: Path) -> None:
    main = "import torch\nfrom utils import make_opt\n\nmodel = torch.nn.Linear(4, 2)\nfor x in loader:\n"
    main += "    opt = make_opt(model, 0.1)\n    opt.zero_grad()\n    model(x).sum().backward()\n    opt.step()\n"
    write(tmp_path, {"utils.py": UTILS, "train.py": main})
    assert ("TPF010", 6) in findings(tmp_path / "train.py")


def test_summaries_are_content_keyed_and_serializable(tmp_path: Path) -> None:
    write(tmp_path, {"steps.py": STEPS, "engine.py": ENGINE})
    engine = tmp_path / "engine.py"
    project = Project()
    view = project.view()
    source = SourceText(engine.read_text())
    model = build(parse(source).tree, source, str(engine))
    summary = view.summary(model, "train_one_epoch")
    assert summary is not None
    assert summary.steps == ("optimizer",) and summary.backwards == 1 and summary.clears == ()
    assert summary.dependencies == (str(tmp_path / "steps.py"),) and not summary.partial
    assert str(tmp_path / "steps.py") in view.used
    again = FunctionSummary.from_json(json.loads(json.dumps(summary.to_json())))
    assert again == summary
    # the helper changes: the caller's key changes with it, and the new facts show
    steps = tmp_path / "steps.py"
    mtime = steps.stat().st_mtime_ns
    steps.write_text(STEPS_CLEARED + "\n")
    os.utime(steps, ns=(mtime + 10_000_000, mtime + 10_000_000))
    changed = project.view().summary(model, "train_one_epoch")
    assert changed is not None and changed.key != summary.key and changed.clears == ("optimizer",)


def test_unreadable_callee_makes_the_summary_partial(tmp_path: Path) -> None:
    a = "from b import helper\n\n\ndef step(model, batch, optimizer):\n    helper(model, batch, optimizer)\n"
    b = "from a import step\n\n\ndef helper(model, batch, optimizer):\n    step(model, batch, optimizer)\n"
    write(tmp_path, {"a.py": a, "b.py": b})
    source = SourceText(a)
    model = build(parse(source).tree, source, str(tmp_path / "a.py"))
    summary = Project().view().summary(model, "step")
    assert summary is not None and summary.partial  # the cycle back into `step` is cut


def test_a_change_two_files_away_rechecks_the_script(tmp_path: Path) -> None:
    engine = "from steps import train_step\n\n\ndef run_step(model, batch, optimizer, criterion):\n"
    engine += "    train_step(model, batch, optimizer, criterion)\n"
    main = MAIN.replace("from engine import train_one_epoch", "from engine import run_step")
    main = main.replace("for epoch in range(10):\n    train_one_epoch(model, loader, optimizer, criterion)",
                        "for batch in loader:\n    run_step(model, batch, optimizer, criterion)")
    write(tmp_path, {"steps.py": STEPS, "engine.py": engine, "train.py": main})
    script = tmp_path / "train.py"
    project = Project()  # one per CLI run: the helpers are read and summarised once
    result = analyze(script.read_text(), str(script), Config(select=("TPF001",)), project=project)
    assert [(d.code, d.span.start.line + 1) for d in result.diagnostics] == [("TPF001", 7)]
    assert sorted(Path(d.path).name for d in result.dependencies) == ["engine.py", "steps.py"]
    steps = tmp_path / "steps.py"
    mtime = steps.stat().st_mtime_ns
    steps.write_text(STEPS_CLEARED)
    os.utime(steps, ns=(mtime + 10_000_000, mtime + 10_000_000))
    assert not all(d.unchanged() for d in result.dependencies)  # the CLI cache entry of train.py goes stale
    assert findings(script, project, "TPF001") == []  # and the shared project re-reads the helper
