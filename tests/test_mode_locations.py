"""TPF008 / TPF009 report where the wrong mode runs and name, as related locations, the place
where the missing mode call belongs (the first statement of the function entered in the wrong
mode) and the call that set the other mode; also across files of the user's project."""

from __future__ import annotations

from pathlib import Path

from torch_preflight.core.config import Config
from torch_preflight.core.diagnostics import Diagnostic

from torch_preflight.analyze import analyze

FIXTURES = Path(__file__).parent / "fixtures"


def findings(text: str, code: str, path: str = "train.py") -> list[Diagnostic]:
    return [d for d in analyze(text, path, Config(select=(code,))).diagnostics if d.code == code]


def line_of(text: str, needle: str, after: int = 0) -> int:
    """0-based line of the first line at or after `after` that contains `needle`."""
    return next(i for i, line in enumerate(text.splitlines()) if i >= after and needle in line)


def related_lines(d: Diagnostic) -> dict[str, int]:
    return {r.message: r.span.start.line for r in d.related}


def test_eval_loop_names_the_function_start_and_the_train_call() -> None:
    text = (FIXTURES / "TPF008" / "entry_in_training_mode.py").read_text()
    [d] = findings(text, "TPF008")
    related = related_lines(d)
    assert related["`test()` starts with `model` in training mode"] == line_of(text, "test_loss = 0")  # after the docstring
    assert related["training mode set here"] == line_of(text, "model.train()")
    loop = line_of(text, "for a, b, targets in test_loader:")
    assert d.span.start.line == loop - 1  # the `with torch.no_grad():` the evaluation starts with
    assert related["evaluation loop"] == loop


def test_nested_batch_loop_is_reported_with_the_epoch_loop_related() -> None:
    text = (FIXTURES / "TPF009" / "where_it_trains.py").read_text()
    found = {d.span.start.line: d for d in findings(text, "TPF009")}
    nested = found[line_of(text, "for x, y in train_loader:  # error")]
    assert related_lines(nested)["epoch loop"] == line_of(text, "for epoch in range(epochs):")
    assert related_lines(nested)["switches to eval mode"] == line_of(text, "model.eval()")
    step = found[line_of(text, "output = model(features)")]
    start = "`train_iter()` starts without switching the model back with `train()`"
    assert related_lines(step)[start] == line_of(text, "optimizer.zero_grad()", line_of(text, "def train_iter("))
    assert "this step trains in eval mode" in step.message


def test_a_training_function_called_from_two_epoch_loops_is_reported_once() -> None:
    text = """\
import torch
import torch.nn as nn


def train_epoch(model, loader, optimizer):
    for x in loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()


def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        for x in loader:
            model(x)


def run(loader, val_loader, epochs):
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        train_epoch(model, loader, optimizer)
        evaluate(model, val_loader)
    for epoch in range(epochs):
        train_epoch(model, loader, optimizer)
        evaluate(model, val_loader)
"""
    assert [d.span.start.line for d in findings(text, "TPF009")] == [5]


def test_evaluation_after_an_imported_training_function(tmp_path: Path) -> None:
    """The training mode comes from `train_epoch` in utils.py, which the project's training model reads."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "utils.py").write_text(
        "def train_epoch(model, loader, optimizer):\n"
        "    model.train()\n"
        "    for x in loader:\n"
        "        optimizer.zero_grad()\n"
        "        model(x).sum().backward()\n"
        "        optimizer.step()\n"
    )
    main = """\
import torch
import torch.nn as nn
from utils import train_epoch


def validate(model, loader):
    total = 0.0
    with torch.no_grad():
        for x in loader:
            total += model(x).sum().item()
    return total


net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for epoch in range(3):
    train_epoch(net, loader, opt)
    validate(net, val_loader)
"""
    script = tmp_path / "train.py"
    script.write_text(main)
    [d] = findings(main, "TPF008", str(script))
    assert d.span.start.line == 7  # the `with torch.no_grad():` around the loop
    assert related_lines(d)["`validate()` starts with `model` in training mode"] == 6
    (tmp_path / "utils.py").write_text((tmp_path / "utils.py").read_text().replace("model.train()", "model.eval()"))
    assert findings(main, "TPF008", str(script)) == []  # imported code leaves it in eval mode: fine


def test_evaluation_entered_through_a_helper_is_reported_where_its_eval_belongs() -> None:
    text = (FIXTURES / "TPF008" / "evaluation_entered_from_training.py").read_text()
    found = {d.span.start.line: d for d in findings(text, "TPF008")}
    entry = found[line_of(text, "with torch.no_grad():", line_of(text, "def evaluate_model("))]
    assert "`evaluate_model()` evaluates `model`" in entry.message
    related = related_lines(entry)
    assert related["evaluation loop"] == line_of(text, "for x, y in data_loader:")
    assert related["called here with the model in training mode"] == line_of(text, "print(evaluate_model(")
    assert related["training mode set here"] == line_of(text, "model.train()", line_of(text, "for epoch in range(epochs):"))
    restored = found[line_of(text, "encoded = torch.tensor(prompt)")]
    assert related_lines(restored)["`model.train()` switches back to training here"] == line_of(text, "model.train()", line_of(text, "def print_sample("))
    assert related_lines(restored)["the model runs here"] == line_of(text, "token_ids = generate_text(")


def test_a_restore_after_the_evaluation_is_silent_once_eval_is_called() -> None:
    text = """\
import torch
import torch.nn as nn
from generation import generate_text


def sample(model, prompt):
    model.eval()
    with torch.no_grad():
        out = generate_text(model, prompt)
    model.train()
    return out


def train(model, loader, optimizer):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    print(sample(model, [1, 2]))
"""
    assert findings(text, "TPF008") == []
    broken = text.replace("    model.eval()\n", "")
    [d] = findings(broken, "TPF008")
    assert d.span.start.line == line_of(broken, "with torch.no_grad():")
