"""The memory of a forward under `torch.no_grad()` between training steps (an evaluation), and nn.LSTMCell /
GRUCell / RNNCell, against torch 2.13 CPU peaks measured with bench/vram/measure.py (one thread; no torch here)."""

from __future__ import annotations

import pytest
from torch_preflight.estimator import EstimateOptions, estimate_source

EVAL = '''
import collections
import torch
import torch.nn as nn
import torch.nn.functional as F

EVAL_BATCH = 2048

model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 4096))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
hooks = collections.defaultdict(list)


def evaluate():
    with torch.no_grad():
        x = torch.randn(EVAL_BATCH, 64)
        logits = model(x)
        return logits.argmax(dim=1).float().mean().item()


hooks["step_end"].append(evaluate)
for step in range(3):
    x = torch.randn(8, 64)
    y = torch.randint(0, 4096, (8,))
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    for hook in hooks.get("step_end", []):
        score = hook()
'''


def test_an_evaluation_between_steps_sets_the_peak() -> None:
    # the 2048x4096 fp32 logits of the evaluation, next to the parameters, the gradients (zero_grad clears them
    # only before the next forward) and Adam's state: measured 53,286,996 bytes; the step alone peaks at 25.5 MB
    r = estimate_source(EVAL, "eval.py", EstimateOptions(device="cpu"))[0]
    assert r.complete
    assert r.phase == "evaluation"
    assert r.peak_bytes == pytest.approx(53_286_996, rel=0.01)
    assert r.breakdown["gradients"] > 0 and r.breakdown["optimizer_state"] > 0


def test_gradients_cleared_to_none_after_the_step_are_not_held_by_the_evaluation() -> None:
    text = EVAL.replace("    optimizer.zero_grad()\n", "").replace("    optimizer.step()\n", "    optimizer.step()\n    optimizer.zero_grad()\n")
    held = estimate_source(EVAL, "eval.py", EstimateOptions(device="cpu"))[0]
    cleared = estimate_source(text, "eval.py", EstimateOptions(device="cpu"))[0]
    assert cleared.phase == "evaluation" and cleared.breakdown["gradients"] == 0
    assert held.peak_bytes - cleared.peak_bytes == held.breakdown["gradients"]


def test_a_small_evaluation_leaves_the_peak_in_the_step() -> None:
    r = estimate_source(EVAL.replace("EVAL_BATCH = 2048", "EVAL_BATCH = 8"), "eval.py", EstimateOptions(device="cpu"))[0]
    assert r.phase != "evaluation"


def test_expression_temporaries_of_a_no_grad_forward_are_live_until_consumed() -> None:
    # `0.5 * x * (1.0 + torch.tanh(...))` (minGPT's GELU) holds `0.5 * x` while the parenthesis is computed
    gelu = EVAL.replace("nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 4096))", "Net()").replace(
        "model = ", '''
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 4096)

    def forward(self, x):
        x = self.fc(x)
        return 0.5 * x * (1.0 + torch.tanh(0.79 * (x + 0.044715 * torch.pow(x, 3.0))))


model = ''', 1)
    r = estimate_source(gelu, "eval.py", EstimateOptions(device="cpu"))[0]
    out = 2048 * 4096 * 4
    assert r.phase == "evaluation"
    # x, 0.5*x, and two operands of the parenthesis at its deepest point, next to the op's output: measured 139,003,992
    assert r.breakdown["other"] >= 4 * out
    assert r.peak_bytes == pytest.approx(139_003_992, rel=0.01)


CELLS = '''
import torch
import torch.nn as nn

KIND = "LSTMCell"


class Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = getattr(nn, KIND)(16, 256)
        self.head = nn.Linear(256, 1)

    def forward(self, x):
        h = torch.zeros(x.size(0), 256)
        c = torch.zeros(x.size(0), 256)
        outs = []
        for t in range(x.size(1)):
            if KIND == "LSTMCell":
                h, c = self.cell(x[:, t], (h, c))
            else:
                h = self.cell(x[:, t], h)
            outs.append(self.head(h))
        return torch.stack(outs, 1)


model = Seq()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(64, 50, 16)
    y = torch.randn(64, 50, 1)
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
'''


@pytest.mark.parametrize(("kind", "measured"), [("LSTMCell", 26_790_928), ("GRUCell", 25_836_560), ("RNNCell", 4_594_704)])
def test_rnn_cells_stepped_in_a_python_loop(kind: str, measured: int) -> None:
    r = estimate_source(CELLS.replace('KIND = "LSTMCell"', f'KIND = "{kind}"'), "cells.py", EstimateOptions(device="cpu"))[0]
    # the weights' gradients, one per time step, summed as autograd sums them (out of place): complete, and within 4%
    # over the measured peak (docs/vram-accuracy.md)
    assert r.complete, [u.text for u in r.unknowns]
    assert measured <= r.peak_bytes <= measured * 1.04
