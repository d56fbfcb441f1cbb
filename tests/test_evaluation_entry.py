"""The helpers TPF007 and TPF008 share to find where an evaluation starts (rules/training/_evaluation.py),
and the core facts they rest on: a parameter every call passes a model to, the functions an ignite
Engine runs, bookkeeping meters reached through a subscript."""

from __future__ import annotations

from torch_preflight.core.config import Config
from torch_preflight.core.incremental import parse_statements
from torch_preflight.core.project import Project
from torch_preflight.core.semantic import EventKind, Kind, build
from torch_preflight.core.source import SourceText
from torch_preflight.core.training import TrainingModel
from torch_preflight.rules.training._evaluation import (
    after_training,
    evaluation_entry,
    handed_over,
    region_start,
    returns_no_graph,
    trains,
)
from torch_preflight.rules.training._modes import TRAIN, mode_trace

from torch_preflight.analyze import analyze


def training_model(text: str) -> TrainingModel:
    source = SourceText(text)
    return TrainingModel(build(parse_statements(source).tree, source, "train.py"), Project().view())


RETURNS = """\
import torch


def mean_loss(loader, model, num_batches=None):
    total = 0.0
    if num_batches is None:
        num_batches = len(loader)
    else:
        num_batches = min(num_batches, len(loader))
    for x, y in loader:
        total += model(x).sum().item()
    return total / num_batches


def summed(loader, model):
    total = 0.0
    for x, y in loader:
        total += model(x).sum()
    return total


def kept(loader, model):
    outs = []
    for x in loader:
        outs.append(model(x))
    return outs


def as_numpy(loader, model):
    outs = []
    for x in loader:
        outs.append(model(x))
    outs = torch.cat(outs).numpy()
    return outs


def given(model, scale):
    return model.count / scale
"""


def test_returns_no_graph_follows_every_binding_and_store() -> None:
    training = training_model(RETURNS)
    assert returns_no_graph(training, "mean_loss")  # `n = min(n, len(loader))` reads itself: plain when the rest are
    assert not returns_no_graph(training, "summed")  # `total += model(x).sum()` keeps the graph
    assert not returns_no_graph(training, "kept")  # a list of outputs
    assert returns_no_graph(training, "as_numpy")  # the container leaves as numpy
    assert not returns_no_graph(training, "given")  # a parameter without a plain default may be a tensor


CHAIN = """\
import torch


def helper(loader, model):
    outs = []
    with torch.no_grad():
        for x in loader:
            outs.append(model(x))
    return outs


def evaluate(model, loader):
    return helper(loader, model)


def train_epoch(model, loader, optimizer):
    model.train()
    for x in loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    return evaluate(model, loader)
"""


def test_the_entry_is_the_outermost_caller_that_does_not_train() -> None:
    training = training_model(CHAIN)
    assert trains(training, "train_epoch") and not trains(training, "evaluate")
    events = training.expanded("helper")
    forward = next(e for e in events if training.is_forward(e))
    mode, setter, chain = mode_trace(training, "helper", events.index(forward), "model")
    assert mode == TRAIN and setter is not None and setter.kind is EventKind.TRAIN_MODE
    assert [c.function for c in chain] == ["evaluate", "train_epoch"]
    entry, into = evaluation_entry(training, "helper", chain)
    assert entry == "evaluate" and into is chain[1]
    assert after_training(training, into)  # called after the epoch's backward passes
    assert evaluation_entry(training, "helper", ()) == ("helper", None)


def test_a_parameter_every_call_passes_a_model_to_runs_a_model() -> None:
    text = """\
import torch.nn as nn


def validate(loader, backbone, linear_head):
    for x in loader:
        print(linear_head(backbone(x)))


def main(loader):
    head = nn.Linear(8, 2)
    validate(loader, nn.Linear(4, 8), head)
    validate(loader, nn.Linear(4, 8), head)
"""
    training = training_model(text)
    call = next(e for e in training.model.functions["validate"].events if e.name == "linear_head")
    assert training.is_forward(call)
    other = text.replace("    validate(loader, nn.Linear(4, 8), head)\n", "    validate(loader, nn.Linear(4, 8), print)\n", 1)
    training = training_model(other)
    call = next(e for e in training.model.functions["validate"].events if e.name == "linear_head")
    assert not training.is_forward(call)  # one call passes a function: nothing known


def test_engine_functions_are_the_functions_an_engine_runs() -> None:
    text = """\
from ignite.engine import Engine


def run(model):
    def train_step(engine, batch):
        return model(batch)

    def test_step(engine, batch):
        return model(batch)

    trainer = Engine(train_step)
    evaluator = Engine(test_step)
    helper = print(test_step)
"""
    training = training_model(text)
    assert training.engine_functions == {"run.train_step": frozenset({"trainer"}), "run.test_step": frozenset({"evaluator"})}


def test_a_meter_reached_through_a_subscript_is_bookkeeping() -> None:
    text = """\
import torch
import utils


def evaluate(model, loader):
    model.eval()
    metric_logger = utils.MetricLogger()
    for x, y in loader:
        out = model(x)
        metric_logger.meters['acc1'].update((out.argmax(1) == y).float().mean().item(), n=x.shape[0])


def main(model, loader, optimizer):
    for epoch in range(3):
        for x, y in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
        evaluate(model, loader)
"""
    codes = [d.code for d in analyze(text, "train.py", Config(select=("TPF007",))).diagnostics]
    assert codes == ["TPF007"]


def test_a_model_moved_right_after_its_constructor_is_a_model() -> None:
    """`G = Generator().cuda()`: what the constructor makes, not what the name says."""
    training = training_model(
        "import torch.nn as nn\n\n\nclass Generator(nn.Module):\n    pass\n\n\n"
        "G = Generator().cuda()\nH = nn.DataParallel(Generator()).to('cuda')\nn = len([1]).real\n"
    )
    assert training.model.kind_of("G", "") is Kind.MODEL
    assert training.model.kind_of("H", "") is Kind.MODEL
    assert training.model.kind_of("n", "") is not Kind.MODEL


def test_an_engine_step_handed_to_a_factory_is_its_own_entry() -> None:
    text = """\
import torch
from ignite.engine import Engine


def create_evaluator(model):
    @torch.no_grad()
    def evaluate_step(engine, batch):
        return model(batch)

    return Engine(evaluate_step)


def helper(model, x):
    return model(x)


def outer(model, x):
    return helper(model, x)
"""
    training = training_model(text)
    [handed] = training.model.calls_to["create_evaluator.evaluate_step"]
    [called] = training.model.calls_to["helper"]
    assert handed_over(training, handed, "create_evaluator.evaluate_step")
    assert not handed_over(training, called, "helper")


def test_what_numpy_computes_carries_no_graph() -> None:
    """numpy refuses a tensor that requires grad: `np.mean(accs)` hands no graph out of its function."""
    training = training_model("import numpy as np\nimport torch\n\n\ndef f(accs):\n    m = np.mean(accs)\n    t = torch.stack(accs)\n    return m, t\n")
    assert training.model.kind_of("m", "f") is Kind.DETACHED
    assert training.model.kind_of("t", "f") is not Kind.DETACHED


REGION = """\
import torch


def fill(loader, crops, model):
    n = 0
    with torch.no_grad():
        for x in loader:
            for c in crops:
                model(x[c])


def epochs(loader, val_loader, model, opt):
    for epoch in range(3):
        for x in loader:
            model(x).sum().backward()
            opt.step()
        with torch.no_grad():
            for x in val_loader:
                model(x)
"""


def test_the_evaluation_region_starts_at_the_outermost_statement_that_only_evaluates() -> None:
    training = training_model(REGION)
    model = training.model
    lines = REGION.splitlines()
    inner = next(loop for loop in model.loops.values() if lines[loop.header.start.line].strip() == "for c in crops:")
    outer, start = region_start(model, inner, lambda loop: True)
    assert lines[outer.header.start.line].strip() == "for x in loader:"
    assert lines[start.start.line].strip() == "with torch.no_grad():" and start.start.line == 5
    val = next(loop for loop in model.loops.values() if lines[loop.header.start.line].strip() == "for x in val_loader:")
    trains_too = lambda loop: not any(e.kind is EventKind.BACKWARD for e in training.iteration(loop))  # noqa: E731
    outer, start = region_start(model, val, trains_too)
    assert outer is val  # not the epoch loop, whose pass trains
    assert start.start.line == 16  # the `with` inside the epoch loop, not anything above it
