"""The mode that reaches a training forward round the loops around it (rules/training/_mode_flow.py):
callee names renamed through the calls that inline them, the walk back through the pass and round
each loop's back edge, `if`/`else` branches, and evaluations that end the run."""

from __future__ import annotations

import ast

from torch_preflight.core.semantic import EventKind, build
from torch_preflight.core.source import SourceText
from torch_preflight.core.training import TrainingModel
from torch_preflight.rules.training._mode_flow import Names, leaves_after, loop_evals

HEADER = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

def accuracy(net, loader):
    net.eval()
    return sum(net(x).argmax(1).eq(y).sum() for x, y in loader)

def evaluate(model, loader):
    acc = accuracy(model, loader)
    return acc

def evaluate_and_back(model, loader):
    model.eval()
    acc = sum(model(x).sum() for x in loader)
    model.train()
    return acc
"""


def training(text: str) -> TrainingModel:
    return TrainingModel(build(ast.parse(text), SourceText(text), "t.py"))


def evals(text: str, scope: str) -> list[tuple[str, int]]:
    """(model, line of the eval()) for each forward an eval() reaches round a loop."""
    return [(found.name, found.evaluation.span.start.line + 1) for found in loop_evals(training(text), scope)]


def test_names_are_renamed_through_every_call_of_the_chain() -> None:
    text = HEADER + """\
def fit(loader, epochs):
    gcn = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1))
    optimizer = torch.optim.SGD(gcn.parameters(), lr=0.1)
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(gcn(x), y).backward()
            optimizer.step()
        evaluate(gcn, loader)
"""
    model = training(text)
    events = model.expanded("fit")
    names = Names(model.model, events)
    index = next(i for i, e in enumerate(events) if e.kind is EventKind.EVAL_MODE)
    assert events[index].via == ("evaluate", "accuracy") and events[index].receiver == "net"
    assert [c.name for c in names.chain(index) or ()] == ["evaluate", "accuracy"]
    assert names.outer(index, "net") == "gcn"
    assert names.outer(index, "net.module") == "gcn.module"
    assert evals(text, "fit") == [("gcn", 6)]


def test_a_train_round_the_inner_loop_does_not_hide_the_outer_eval() -> None:
    # the evaluation inside the batch loop switches back; the accuracy pass after it does not
    text = HEADER + """\
def fit(model, loader, optimizer, epochs):
    step = 0
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            step += 1
            if step % 100 == 0:
                evaluate_and_back(model, loader)
        accuracy(model, loader)
"""
    assert evals(text, "fit") == [("model", 6)]


def test_train_at_the_top_of_the_pass_settles_it() -> None:
    text = HEADER + """\
def fit(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        accuracy(model, loader)
"""
    assert evals(text, "fit") == []


def test_train_after_the_eval_settles_the_back_edge() -> None:
    text = HEADER + """\
def fit(model, loader, optimizer, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        evaluate_and_back(model, loader)
"""
    assert evals(text, "fit") == []


def test_an_if_else_that_trains_in_one_branch_counts_as_train() -> None:
    text = HEADER + """\
def fit(model, loader, optimizer, steps, sampling):
    for step in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(loader[step]), loader[step]).backward()
        optimizer.step()
        if step % sampling == 0:
            model.eval()
        else:
            model.train()
"""
    assert evals(text, "fit") == []


def test_an_eval_that_ends_the_run_reaches_no_later_pass() -> None:
    text = HEADER + """\
def fit(model, loader, optimizer, steps):
    for step in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(loader[step]), loader[step]).backward()
        optimizer.step()
        if step == steps - 1:
            model.eval()
            print(model(loader[0]))
            break
"""
    assert evals(text, "fit") == []
    tree_model = training(text).model
    stmt = next(e.stmt for e in tree_model.functions["fit"].events if e.kind is EventKind.EVAL_MODE)
    assert leaves_after(tree_model, stmt, inside=False)
    assert not leaves_after(tree_model, stmt, inside=True)  # only a `raise` leaves from a called function


def test_a_forward_without_gradients_is_no_training_point() -> None:
    text = HEADER + """\
def fit(model, loader, optimizer, steps):
    teacher = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1))
    for step in range(steps):
        with torch.no_grad():
            soft = teacher(loader[step])
        optimizer.zero_grad()
        F.mse_loss(model(loader[step]), soft).backward()
        optimizer.step()
        teacher.eval()
"""
    assert evals(text, "fit") == []
    assert evals(text.replace("        with torch.no_grad():\n            soft", "        if True:\n            soft"), "fit") == [("teacher", 26)]


def test_a_train_under_another_condition_does_not_undo_the_eval() -> None:
    text = HEADER + """\
def fit(model, loader, optimizer, steps, sample_every, eval_every):
    for step in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(loader[step]), loader[step]).backward()
        optimizer.step()
        if step % sample_every == 0:
            model.eval()
            print(model(loader[0]))
        if step % eval_every == 0:
            evaluate_and_back(model, loader)
"""
    assert evals(text, "fit") == [("model", 24)]
    # two blocks under the same test run together: the second always follows the first
    assert evals(text.replace("step % sample_every == 0", "step % eval_every == 0"), "fit") == []
    assert evals(text.replace("            print(model(loader[0]))\n", "            print(model(loader[0]))\n            model.train()\n"), "fit") == []
