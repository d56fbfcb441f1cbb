"""A loader built in another module of the project and returned (alone or in a tuple) carries
what it is to the caller: TPF014 sees a DataLoader over a shuffling DistributedSampler in
`train_set, val_set, train_loader, val_loader = build_loader(cfg)` and reports the epoch loop's
first use of it when no `set_epoch` reaches its sampler."""

from __future__ import annotations

import ast
from pathlib import Path

from torch_preflight.core.config import Config
from torch_preflight.core.program import returned_elements
from torch_preflight.core.semantic import build
from torch_preflight.core.source import SourceText

from torch_preflight.analyze import analyze

DATA = """\
import torch
from torch.utils.data import DataLoader, DistributedSampler


def build_loader(config, shuffle=True):
    dataset_train, dataset_val = config.train_set, config.val_set
    sampler_train = DistributedSampler(dataset_train, num_replicas=config.world, rank=config.rank, shuffle={shuffle})
    sampler_val = DistributedSampler(dataset_val, shuffle=False)
    data_loader_train = DataLoader(dataset_train, sampler=sampler_train, batch_size=8)
    data_loader_val = DataLoader(dataset_val, sampler=sampler_val, batch_size=8)
    return dataset_train, dataset_val, data_loader_train, data_loader_val, None


def build_single(config):
    loader = DataLoader(config.train_set, sampler=DistributedSampler(config.train_set), batch_size=8)
    return loader
"""

MAIN = """\
import torch
from data import build_loader, build_single


def train_one_epoch(config, model, data_loader, optimizer, epoch):
    model.train()
    for x, y in data_loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


def main(config, model, optimizer):
    dataset_train, dataset_val, data_loader_train, data_loader_val, mixup_fn = build_loader(config)
    for epoch in range(config.start, config.epochs):
        print(epoch)
{set_epoch}        train_one_epoch(config, model, data_loader_train, optimizer, epoch)
"""

SINGLE = """\
import torch
from data import build_single


def main(config, model, optimizer):
    loader = build_single(config)
    for epoch in range(config.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
"""


def check(root: Path, main: str, shuffle: str = "True") -> list[tuple[int, str, tuple[int, ...]]]:
    (root / "pyproject.toml").write_text("")
    (root / "data.py").write_text(DATA.replace("{shuffle}", shuffle))
    script = root / "main.py"
    script.write_text(main)
    result = analyze(main, str(script), Config(select=("TPF014",)))
    return [(d.span.start.line + 1, d.message, tuple(r.span.start.line + 1 for r in d.related)) for d in result.diagnostics]


def test_loader_returned_in_a_tuple_without_set_epoch(tmp_path: Path) -> None:
    found = check(tmp_path, MAIN.replace("{set_epoch}", ""))
    assert [(line, related) for line, _, related in found] == [(17, (14, 15, 7))]  # the call; the build, epoch loop, callee's loop
    assert "`data_loader_train`" in found[0][1]


def test_set_epoch_on_the_returned_loader_is_clean(tmp_path: Path) -> None:
    assert check(tmp_path, MAIN.replace("{set_epoch}", "        data_loader_train.sampler.set_epoch(epoch)\n")) == []


def test_set_epoch_on_the_validation_loader_does_not_count(tmp_path: Path) -> None:
    found = check(tmp_path, MAIN.replace("{set_epoch}", "        data_loader_val.sampler.set_epoch(epoch)\n"))
    assert [line for line, _, _ in found] == [18] and "only on `data_loader_val.sampler`" in found[0][1]


def test_sampler_without_shuffle_is_clean(tmp_path: Path) -> None:
    assert check(tmp_path, MAIN.replace("{set_epoch}", ""), shuffle="False") == []


def test_single_returned_loader(tmp_path: Path) -> None:
    assert [line for line, _, _ in check(tmp_path, SINGLE)] == [8]  # the inner loop over it


def test_without_the_other_module_it_is_silent(tmp_path: Path) -> None:
    check(tmp_path, SINGLE)
    (tmp_path / "data.py").unlink()
    result = analyze(SINGLE, str(tmp_path / "main.py"), Config(select=("TPF014",)))
    assert not result.diagnostics


def test_returned_elements() -> None:
    text = (
        "def pair(a):\n    if a:\n        return x, y.z\n    return x, y.z\n"
        "def differ(a):\n    if a:\n        return x, y\n    return p, q\n"
        "def mixed(a):\n    if a:\n        return x\n    return x, y\n"
        "def nested():\n    def inner():\n        return 1, 2, 3\n    return loader\n"
    )
    model = build(ast.parse(text), SourceText(text), "m.py")
    assert returned_elements(model, "pair") == ("x", None)  # `y.z` is no plain name
    assert returned_elements(model, "differ") is None
    assert returned_elements(model, "mixed") is None
    assert returned_elements(model, "nested") == ("loader",)
