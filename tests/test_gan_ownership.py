"""Which parameters a clear resets and which calls cannot train, known from where the values
were made in the user's other modules: GAN networks built by a project's classes, a training
function whose meters come from a `utils` module (issue 16)."""

from __future__ import annotations

from pathlib import Path

from torch_preflight.core.config import Config
from torch_preflight.core.incremental import parse_statements
from torch_preflight.core.project import Project
from torch_preflight.core.semantic import EventKind, build
from torch_preflight.core.source import SourceText
from torch_preflight.core.training import TrainingModel

from torch_preflight.analyze import analyze

MODELS = """\
import torch.nn as nn


class Generator(nn.Module):
    def __init__(self, z_dim):
        super().__init__()
        self.net = nn.Linear(z_dim, 784)

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(784, 1)

    def forward(self, x):
        return self.net(x)
"""

UTILS = """\
import torch


def cuda(xs):
    if torch.cuda.is_available():
        return xs.cuda() if not isinstance(xs, (list, tuple)) else [x.cuda() for x in xs]
    return xs


class AverageMeter:
    def __init__(self):
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n


def calculate_accuracy(outputs, targets):
    return outputs.argmax(1).eq(targets).float().mean().item()
"""

GAN = """\
import torch

import models
import utils

G = models.Generator(100)
D = models.Discriminator()
utils.cuda([G, D])
g_optimizer = torch.optim.Adam(G.parameters(), lr=2e-4)
d_optimizer = torch.optim.Adam(D.parameters(), lr=2e-4)
loader = []

for epoch in range(100):
    for x, _ in loader:
        z = utils.cuda(torch.randn(x.size(0), 100))
        D.zero_grad()
        d_loss = -D(x).mean() + D(G(z).detach()).mean()
        d_loss.backward()
        d_optimizer.step()

        G.zero_grad()
        g_loss = -D(G(z)).mean()
        g_loss.backward()
        g_optimizer.step()
"""

TRAIN_EPOCH = """\
from utils import AverageMeter, calculate_accuracy


def train_epoch(epoch, data_loader, model, criterion, optimizer, device):
    model.train()
    losses = AverageMeter()
    accuracies = AverageMeter()
    for i, (inputs, targets) in enumerate(data_loader):
        targets = targets.to(device)
        outputs = model(inputs)
        loss = criterion(outputs, targets)
        acc = calculate_accuracy(outputs, targets)
        losses.update(loss.item(), inputs.size(0))
        accuracies.update(acc, inputs.size(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def write(root: Path, files: dict[str, str]) -> None:
    (root / "pyproject.toml").write_text("")
    for name, text in files.items():
        (root / name).write_text(text)


def findings(script: Path, text: str) -> list[tuple[str, int]]:
    result = analyze(text, str(script), Config(select=("TPF001", "TPF002")), project=Project())
    return [(d.code, d.span.start.line + 1) for d in result.diagnostics]


def without(text: str, line: str) -> str:
    assert text.count(line + "\n") == 1
    return text.replace(line + "\n", "")


def test_a_clear_resets_the_module_a_project_class_built(tmp_path: Path) -> None:
    write(tmp_path, {"models.py": MODELS, "utils.py": UTILS, "train.py": GAN})
    script = tmp_path / "train.py"
    source = SourceText(GAN)
    training = TrainingModel(build(parse_statements(source).tree, source, str(script)), Project().view())
    clears = [e for tl in training.training_loops for e in tl.events if e.kind is EventKind.ZERO_GRAD]
    assert [training.cleared_modules(c) for c in clears] == [frozenset({"D"}), frozenset({"G"})]
    assert findings(script, GAN) == []


def test_dropping_either_networks_clear_is_found(tmp_path: Path) -> None:
    write(tmp_path, {"models.py": MODELS, "utils.py": UTILS, "train.py": GAN})
    script = tmp_path / "train.py"
    # the finding sits at the backward whose gradients pile up
    assert findings(script, without(GAN, "        G.zero_grad()")) == [("TPF001", 22)]
    assert findings(script, without(GAN, "        D.zero_grad()")) == [("TPF001", 17)]


def test_meters_of_a_utils_module_do_not_silence_a_missing_clear(tmp_path: Path) -> None:
    write(tmp_path, {"utils.py": UTILS, "training.py": TRAIN_EPOCH})
    script = tmp_path / "training.py"
    assert findings(script, TRAIN_EPOCH) == []
    assert findings(script, without(TRAIN_EPOCH, "        optimizer.zero_grad()")) == [("TPF001", 8)]


def test_meters_of_a_module_that_cannot_be_read_are_built_from_nothing(tmp_path: Path) -> None:
    # without utils.py: `AverageMeter()` is handed nothing, so its `update` cannot step or clear
    write(tmp_path, {"training.py": TRAIN_EPOCH})
    script = tmp_path / "training.py"
    assert findings(script, without(TRAIN_EPOCH, "        optimizer.zero_grad()")) == [("TPF001", 8)]


TRACKER = """\
class Tracker:
    def __init__(self, optimizer):
        self.optimizer = optimizer

    def update(self, val, n=1):
        self.optimizer.zero_grad()
"""


def test_an_object_whose_update_clears_stays_opaque(tmp_path: Path) -> None:
    # built with the optimizer, and its class (read from utils.py) clears it: not a meter
    text = (
        without(TRAIN_EPOCH, "        optimizer.zero_grad()")
        .replace("    accuracies = AverageMeter()\n", "    accuracies = Tracker(optimizer)\n")
        .replace(
            "from utils import AverageMeter, calculate_accuracy", "from utils import AverageMeter, Tracker, calculate_accuracy"
        )
    )
    write(tmp_path, {"utils.py": UTILS + "\n\n" + TRACKER, "training.py": text})
    assert findings(tmp_path / "training.py", text) == []
    # the same class without the clear: known not to train
    quiet = TRACKER.replace("        self.optimizer.zero_grad()\n", "        self.last = val\n")
    write(tmp_path, {"utils.py": UTILS + "\n\n" + quiet})
    assert findings(tmp_path / "training.py", text) == [("TPF001", 8)]
