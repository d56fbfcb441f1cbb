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


_LEAKY = """\
import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

X = np.load("x.npy")
y = np.load("y.npy")
X = StandardScaler().fit_transform(X)
X_train, X_test, y_train, y_test = train_test_split(X, y)
"""


def test_model_freed_by_reference_counting_after_a_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memos that the rules leave on the model point back at it (the data-flow index, the
    oracle of imported callees): `analyze` releases them, so the model and its syntax tree go
    as soon as the check ends, not at the next full scan of the cyclic collector."""
    import weakref

    from torch_preflight import analyze as analysis

    refs: list[weakref.ref[object]] = []
    real = analysis.build

    def spy(*args: object, **kwargs: object) -> object:
        model = real(*args, **kwargs)  # type: ignore[arg-type]
        refs.append(weakref.ref(model))
        return model

    monkeypatch.setattr(analysis, "build", spy)
    gc.disable()
    try:
        codes = {d.code for d in analysis.analyze(_LEAKY, "prep.py", Config(select=("ALL",))).diagnostics}
        assert refs and refs[0]() is None
    finally:
        gc.enable()
    assert "TPF201" in codes  # the data-flow index was built
