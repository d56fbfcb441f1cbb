"""`DataFlow.may_split`: the cheap test that lets TPF201 / TPF203 (and `leak_site`) skip the
provenance search on files that split nothing. It must over-approximate: whenever it says
False, the full search finds nothing either."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import FIXTURES
from torch_preflight.core.dataflow import DataFlow

from torch_preflight.analyze import analyze


def _flow(code: str) -> DataFlow:
    model = analyze(textwrap.dedent(code), "t.py").model
    assert model is not None
    return DataFlow(model)


@pytest.mark.parametrize(
    "code",
    [
        "from torchvision.datasets import MNIST\ntest = MNIST('.', train=False)\n",
        "ds = load('x', split='validation')\n",
        "from sklearn.model_selection import train_test_split\nparts = train_test_split(X, y)\n",
        "import torch\nparts = torch.utils.data.random_split(ds, [8, 2])\n",
        "from sklearn.model_selection import KFold\nkf = KFold(5)\nfor a, b in kf.split(X):\n    pass\n",
        "from sklearn.model_selection import KFold\nfor a, b in KFold(5).split(X):\n    pass\n",
        "from sklearn.model_selection import GridSearchCV\ngs = GridSearchCV(m, {})\ngs.fit(X, y)\n",
        "from sklearn.model_selection import cross_val_score\ncross_val_score(m, X, y)\n",
        "X_test = X[800:]\n",
        "val_set = Subset(ds, idx)\n",
    ],
)
def test_a_split_or_a_side_is_seen(code: str) -> None:
    assert _flow(code).may_split


@pytest.mark.parametrize(
    "code",
    [
        # a training script: loaders, a `.fit` of a trainer, strings split, statistics
        """
        import torch
        import lightning as L
        words = line.split(",")
        trainer = L.Trainer()
        trainer.fit(model, loader)
        mean = x.mean()
        for batch in loader:
            loss = model(batch).mean()
        """,
        # a name built by something that is no splitter, then split
        "kf = make_folds()\nfor a, b in kf.split(X):\n    pass\n",
        # `partial(fn, train=True)` binds a function's argument (torch's OpInfo sample inputs): no side
        "from functools import partial\nsample = partial(sample_inputs_dropout, train=True)\nmean = x.mean()\n",
    ],
)
def test_no_split_and_no_side(code: str) -> None:
    assert not _flow(code).may_split


CASES = sorted(p for code in ("TPF201", "TPF202", "TPF203") for p in (FIXTURES / code).glob("*.py"))


@pytest.mark.parametrize("path", CASES, ids=[str(p.relative_to(FIXTURES)) for p in CASES])
def test_the_search_finds_nothing_when_nothing_may_split(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the data rules' fixtures: every leak the full search finds is in a file where
    `may_split` is True; forcing it True changes no finding."""
    text = path.read_text(encoding="utf-8")
    found = analyze(text, str(path)).diagnostics
    monkeypatch.setattr(DataFlow, "may_split", True)
    forced = analyze(text, str(path)).diagnostics
    assert [(d.code, d.span, d.message) for d in found] == [(d.code, d.span, d.message) for d in forced]
    if any(d.code in ("TPF201", "TPF203") for d in forced):
        monkeypatch.undo()
        assert _flow(text).may_split


ALL = sorted(FIXTURES.rglob("*.py"))


@pytest.mark.parametrize("path", ALL, ids=[str(p.relative_to(FIXTURES)) for p in ALL])
def test_over_approximates_on_every_fixture(path: Path) -> None:
    """Where `may_split` is False no definition's provenance has a side and nothing is split;
    the split points listed once per version are `split_points()`."""
    flow = _flow(path.read_text(encoding="utf-8"))
    points = [(id(a), s, id(n)) for a, s, n in flow.split_points()]
    assert [(id(a), s, id(n)) for a, s, n in flow._split_points] == points
    if not flow.may_split:
        assert not points
        assert not any(flow.def_info(d).sides for d in flow.all_defs())
