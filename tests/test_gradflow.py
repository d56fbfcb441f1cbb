"""core/gradflow.py: which modules a backward pass writes gradients into, from the data flow of its loss."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from torch_preflight.core.gradflow import backward_modules, related
from torch_preflight.core.parse import parse
from torch_preflight.core.semantic import EventKind, ModuleModel, build
from torch_preflight.core.source import SourceText

PRELUDE = """\
import torch
import torch.nn as nn
G = nn.Linear(4, 4)
D = nn.Linear(4, 1)
bce = nn.BCEWithLogitsLoss()
"""


def _model(body: str) -> ModuleModel:
    source = SourceText(PRELUDE + body)
    return build(parse(source).tree, source, "t.py")


def _modules(body: str) -> list[list[str]]:
    model = _model(body)
    return [sorted(backward_modules(model, e)) for fn in model.functions.values() for e in fn.events if e.kind is EventKind.BACKWARD]


def test_a_loss_through_both_networks_writes_into_both() -> None:
    assert _modules("z = torch.randn(2, 4)\nfake = G(z)\ng_loss = bce(D(fake), torch.ones(2, 1))\ng_loss.backward()\n") == [["D", "G"]]


def test_detach_and_no_grad_cut_the_graph() -> None:
    assert _modules("fake = G(torch.randn(2, 4))\nd_loss = bce(D(fake.detach()), torch.zeros(2, 1))\nd_loss.backward()\n") == [["D"]]
    body = "with torch.no_grad():\n    fake = G(torch.randn(2, 4))\nloss = bce(D(fake), torch.zeros(2, 1))\nloss.backward()\n"
    assert _modules(body) == [["D"]]


def test_accumulated_terms_scaled_losses_and_framework_backwards() -> None:
    body = "loss = bce(D(x), y)\nloss += bce(G(x).sum(1, keepdim=True), y)\nscaler.scale(loss).backward()\naccelerator.backward(bce(D(G(x)), y))\n"
    assert _modules(body) == [["D", "G"], ["D", "G"]]


def test_a_helper_is_read_with_the_modules_its_callers_pass() -> None:
    body = (
        "def update_d(netD, netG, real, z):\n"
        "    loss = bce(netD(real), ones) + bce(netD(netG(z).detach()), zeros)\n"
        "    loss.backward()\n"
        "update_d(D, G, real, z)\n"
    )
    assert _modules(body) == [["D", "netD"]]


def test_unknown_values_add_nothing() -> None:
    assert _modules("def step(loss):\n    loss.backward()\n") == [[]]


def test_related_names() -> None:
    assert related("self.netD", "netD") and related("model", "model.encoder") and not related("netG", "netD")


def test_tpf001_messages_do_not_depend_on_the_hash_seed() -> None:
    """Owned modules come from a set: a message naming two of them must name them in one order
    whatever PYTHONHASHSEED is (the blind corpus's infoGAN finding changed between runs)."""
    script = (
        "import glob, sys\n"
        "from torch_preflight.analyze import analyze\n"
        "from torch_preflight.core.config import Config\n"
        "for p in sorted(glob.glob(sys.argv[1] + '/*.py')):\n"
        "    for d in analyze(open(p).read(), p, Config()).diagnostics:\n"
        "        if d.code == 'TPF001': print(p, d.span.start.line, d.message)\n"
    )
    folder = str(Path(__file__).parent / "fixtures" / "TPF001")
    outputs = {
        subprocess.run([sys.executable, "-c", script, folder], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2", "3", "4")
    }
    assert len(outputs) == 1
    assert " and " in next(iter(outputs)) or "`, `" in next(iter(outputs))  # some message names several modules
