"""The CLI pauses the cyclic garbage collector while it analyses one file, and only then."""

from __future__ import annotations

import gc

import pytest
from torch_preflight.core.config import Config

from torch_preflight import runner


def _work() -> runner.Work:
    return runner.Work(0, "train.py", "import torch\n\nmodel = torch.nn.Linear(2, 2)\n", Config(), fix=False, unsafe=False)


def test_collector_paused_during_one_file_and_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    real = runner._process

    def spy(work: runner.Work) -> runner.Outcome:
        seen.append(gc.isenabled())
        return real(work)

    monkeypatch.setattr(runner, "_process", spy)
    assert gc.isenabled()
    outcome = runner.process(_work())
    assert seen == [False]
    assert gc.isenabled()
    assert outcome.error is None


def test_collector_left_off_when_it_was_off(monkeypatch: pytest.MonkeyPatch) -> None:
    gc.disable()
    try:
        runner.process(_work())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_collector_restored_when_the_analysis_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(work: runner.Work) -> runner.Outcome:
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "_process", boom)
    with pytest.raises(KeyboardInterrupt):
        runner.process(_work())
    assert gc.isenabled()
