"""Cross-file training model: a loop that calls a function imported from the user's own
module (`from utils import train_step, evaluate`) sees that function's zero_grad / step /
backward / mode / set_epoch events, and the analysis records the file it read."""

from __future__ import annotations

import os
from pathlib import Path

from torch_preflight.core.config import Config
from torch_preflight.core.project import Project

from torch_preflight.analyze import analyze

UTILS = """\
import torch


def train_step(model, batch, optimizer):
    loss = model(batch).sum()
    loss.backward()
    optimizer.step()


def train_step_cleared(model, batch, optimizer):
    optimizer.zero_grad()
    loss = model(batch).sum()
    loss.backward()
    optimizer.step()


def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        for x in loader:
            model(x)


def train_epoch(model, loader, sampler, optimizer, epoch):
    sampler.set_epoch(epoch)
    model.train()
    for x in loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
"""

HEADER = """\
import torch
from torch.utils.data import DataLoader, DistributedSampler

from utils import evaluate, train_epoch, train_step, train_step_cleared

net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.1))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
"""

MISSING_ZERO_GRAD = HEADER + """\
for batch in loader:
    train_step(net, batch, opt)
"""

CLEARED = HEADER + """\
for batch in loader:
    train_step_cleared(net, batch, opt)
"""

EVAL_IN_EPOCH = HEADER + """\
for epoch in range(10):
    for batch in loader:
        train_step_cleared(net, batch, opt)
    evaluate(net, val_loader)
"""

EVAL_AND_TRAIN = HEADER + """\
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, sampler=sampler, batch_size=8)
for epoch in range(10):
    train_epoch(net, loader, sampler, opt, epoch)
    evaluate(net, val_loader)
"""


def write(root: Path, main: str, utils: str = UTILS) -> Path:
    (root / "pyproject.toml").write_text("")
    (root / "utils.py").write_text(utils)
    script = root / "train.py"
    script.write_text(main)
    return script


def codes(script: Path, project: Project | None = None) -> list[tuple[str, int]]:
    result = analyze(script.read_text(), str(script), Config(select=("ALL",)), project=project)
    return [(d.code, d.span.start.line + 1) for d in result.diagnostics]


def test_imported_step_without_zero_grad_is_a_training_loop(tmp_path: Path) -> None:
    script = write(tmp_path, MISSING_ZERO_GRAD)
    assert ("TPF001", 8) in codes(script)


def test_imported_step_that_clears_is_clean(tmp_path: Path) -> None:
    script = write(tmp_path, CLEARED)
    assert [c for c in codes(script) if c[0] in ("TPF001", "TPF002", "TPF003")] == []


def test_imported_evaluate_in_epoch_loop_without_train(tmp_path: Path) -> None:
    script = write(tmp_path, EVAL_IN_EPOCH)
    found = codes(script)
    assert ("TPF009", 9) in found  # the batch loop that trains in eval mode, inside the epoch loop
    result = analyze(script.read_text(), str(script), Config(select=("TPF009",)))
    assert "`net.eval()`" in result.diagnostics[0].message  # the callee's `model` named as passed


def test_imported_train_epoch_sets_mode_and_epoch(tmp_path: Path) -> None:
    script = write(tmp_path, EVAL_AND_TRAIN)
    found = codes(script)
    assert not [c for c in found if c[0] in ("TPF001", "TPF009", "TPF014")], found


def test_without_the_other_file_the_rules_stay_silent(tmp_path: Path) -> None:
    script = write(tmp_path, MISSING_ZERO_GRAD)
    (tmp_path / "utils.py").unlink()
    assert [c for c in codes(script) if c[0] == "TPF001"] == []  # opaque call: silent


def test_dependency_is_recorded_and_goes_stale(tmp_path: Path) -> None:
    script = write(tmp_path, MISSING_ZERO_GRAD)
    result = analyze(script.read_text(), str(script), Config(select=("ALL",)))
    assert [Path(d.path).name for d in result.dependencies] == ["utils.py"]
    dep = result.dependencies[0]
    assert dep.unchanged()
    utils = tmp_path / "utils.py"
    utils.write_text(UTILS.replace("    loss = model(batch).sum()\n", "    optimizer.zero_grad()\n    loss = model(batch).sum()\n", 1))
    os.utime(utils, ns=(dep.mtime_ns + 10_000_000, dep.mtime_ns + 10_000_000))
    assert not dep.unchanged()
    assert [c for c in codes(script) if c[0] == "TPF001"] == []


def test_shared_project_rereads_a_changed_file(tmp_path: Path) -> None:
    script = write(tmp_path, MISSING_ZERO_GRAD)
    project = Project()
    assert ("TPF001", 8) in codes(script, project)
    utils = tmp_path / "utils.py"
    before = utils.stat().st_mtime_ns
    utils.write_text(UTILS.replace("def train_step(model, batch, optimizer):\n", "def train_step(model, batch, optimizer):\n    optimizer.zero_grad()\n", 1))
    os.utime(utils, ns=(before + 10_000_000, before + 10_000_000))
    assert [c for c in codes(script, project) if c[0] == "TPF001"] == []


def test_calls_that_do_not_matter_read_nothing(tmp_path: Path) -> None:
    """A call outside any loop that passes no model or optimizer does not parse the other file."""
    main = "import torch\nfrom utils import evaluate\n\nevaluate(None, [])\nprint('done')\n"
    script = write(tmp_path, main)
    result = analyze(script.read_text(), str(script), Config(select=("ALL",)))
    assert result.dependencies == ()


def test_cli_cache_invalidated_by_dependency(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from torch_preflight.cli import main

    script = write(tmp_path, MISSING_ZERO_GRAD)
    cache = tmp_path / "cache"
    args = ["check", "--select", "TPF001", "--cache-dir", str(cache), "--output-format", "concise", str(script)]
    main(args)
    assert "TPF001" in capsys.readouterr().out
    utils = tmp_path / "utils.py"
    before = utils.stat().st_mtime_ns
    utils.write_text(UTILS.replace("def train_step(model, batch, optimizer):\n", "def train_step(model, batch, optimizer):\n    optimizer.zero_grad()\n", 1))
    os.utime(utils, ns=(before + 10_000_000, before + 10_000_000))
    main(args)
    assert "TPF001" not in capsys.readouterr().out
