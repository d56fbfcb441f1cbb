"""Model facts and messages behind the graph and evaluation rules (issues 16 and 17):
one-pass loops, who can read a local container, values computed without gradients,
loops that back-propagate without stepping, framework step hooks, and what TPF007 and
TPF009 tell the user."""

from __future__ import annotations

from torch_preflight.core.config import config_from_table
from torch_preflight.core.parse import parse
from torch_preflight.core.semantic import Kind, ModuleModel, build
from torch_preflight.core.source import SourceText
from torch_preflight.core.training import TrainingModel

from torch_preflight.analyze import analyze

PRELUDE = (
    "import torch\nimport torch.nn as nn\nmodel = nn.Sequential(nn.Linear(4, 2), nn.Dropout(0.1))\ncriterion = nn.CrossEntropyLoss()\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nloader = []\n"
)


def model_of(text: str) -> ModuleModel:
    source = SourceText(text)
    return build(parse(source).tree, source)


def findings(text: str, code: str) -> list:
    return [d for d in analyze(text, "t.py", config_from_table({"select": [code]})).diagnostics if d.code == code]


def test_a_loop_whose_body_always_leaves_runs_once() -> None:
    model = model_of("for b in loader:\n    print(b)\n    break\nfor b in loader:\n    if b:\n        break\n")
    assert [loop.runs_once for loop in model.loops.values()] == [True, False]


def test_a_local_container_is_read_only_where_it_lives_unless_handed_out() -> None:
    model = model_of(
        "def a():\n    losses = []\n    losses.append(1)\n    return len(losses)\n"
        "def b():\n    kept = []\n    helper(kept)\n"
        "def helper(x):\n    pass\n"
        "def c(losses):\n    losses.append(1)\n"
    )
    assert [f.qualname for f in model.readers("losses", "a")] == ["a"]
    assert len(model.readers("kept", "b")) == len(model.functions)  # passed to a function of the file
    assert len(model.readers("losses", "c")) == len(model.functions)  # a parameter: the caller's object
    assert len(model.readers("self.losses", "a")) == len(model.functions)


def test_a_value_computed_without_gradients_is_detached_after_the_block() -> None:
    model = model_of(PRELUDE + "with torch.no_grad():\n    out = model(x)\nfree = model(x)\n")
    assert model.kind_of("out", "") is Kind.DETACHED
    assert model.kind_of("free", "") is Kind.OUTPUT


def test_gradients_with_their_own_graph_carry_one() -> None:
    model = model_of(PRELUDE + "g = torch.autograd.grad(l, x, create_graph=True)\nh = torch.autograd.grad(l, x)\n")
    assert model.kind_of("g", "") is Kind.OUTPUT
    assert model.kind_of("h", "") is Kind.UNKNOWN


def test_backward_loops_include_loops_that_step_elsewhere_and_step_hooks() -> None:
    text = PRELUDE + (
        "for x, y in loader:\n    criterion(model(x), y).backward()\noptimizer.step()\n"
        "with torch.no_grad():\n    for x, y in loader:\n        criterion(model(x), y).backward()\n"
        "import lightning as L\nclass Lit(L.LightningModule):\n    def training_step(self, batch, i):\n"
        "        for part in batch:\n            self.seen.append(part)\n        return self.loss(batch)\n"
    )
    training = TrainingModel(model_of(text))
    assert not training.training_loops
    assert [tl.loop.id for tl in training.backward_loops] == [0]  # not the one under no_grad
    ((qualname, events),) = training.step_hooks
    assert qualname == "Lit.training_step"
    assert [e.inner for e in events if e.receiver == "self.seen"] == [True]


def test_tpf007_names_the_training_loop_that_calls_an_evaluation_helper() -> None:
    text = PRELUDE + (
        "def evaluate():\n    hits = 0\n    for x, y in loader:\n        hits += (model(x).argmax(1) == y).sum().item()\n"
        "    return hits\n"
        "for x, y in loader:\n    optimizer.zero_grad()\n    criterion(model(x), y).backward()\n    optimizer.step()\n"
        "    print(evaluate())\n"
    )
    (finding,) = findings(text, "TPF007")
    assert finding.span.start.line == 8
    assert [r.message for r in finding.related] == ["model forward", "or decorate `evaluate()` with `@torch.no_grad()`", "called from the training loop here"]
    assert finding.related[1].span.start.line == 6  # the def line, where `@torch.no_grad()` goes
    assert finding.related[2].span.start.line == 15


def test_tpf009_says_when_the_first_iteration_already_trains_in_eval_mode() -> None:
    before = PRELUDE + (
        "for epoch in range(3):\n    model.eval()\n    for x, y in loader:\n        optimizer.zero_grad()\n"
        "        criterion(model(x), y).backward()\n        optimizer.step()\n"
    )
    after = PRELUDE + (
        "for epoch in range(3):\n    for x, y in loader:\n        optimizer.zero_grad()\n"
        "        criterion(model(x), y).backward()\n        optimizer.step()\n    model.eval()\n"
    )
    (first,) = findings(before, "TPF009")
    (second,) = findings(after, "TPF009")
    # reported at the batch loop that trains in eval mode, so counted in epochs of the epoch loop
    assert "from the first epoch on" in first.message and "before the training" in first.message
    assert "from the second epoch on" in second.message and "before" not in second.message


def test_a_local_container_bound_to_another_name_is_handed_out() -> None:
    model = model_of("def a():\n    losses = []\n    kept = losses\n    return kept\n")
    assert len(model.readers("losses", "a")) == len(model.functions)
