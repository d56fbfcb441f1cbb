"""A script's counted loop whose passes repeat the same work (an evaluation loop drawing batches) runs two passes, not
all of them; a loop whose passes build or accumulate something still runs through."""

from __future__ import annotations

from torch_preflight.core.parse import parse
from torch_preflight.core.semantic import build
from torch_preflight.core.source import SourceText
from torch_preflight.estimator import EstimateOptions, _interpret, estimate_source

SCRIPT = '''
import torch
import torch.nn as nn

eval_iters = {iters}
block_size = 64
batch_size = 12
data = torch.zeros(10000, dtype=torch.long)
model = nn.Sequential(nn.Embedding(100, 32), nn.Linear(32, 100))

def get_batch(split):
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    return x

@torch.no_grad()
def estimate_loss():
    out = {{}}
    for split in ['train', 'val']:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X = get_batch(split)
            logits = model(X)
            losses[k] = logits.mean().item()
        out[split] = losses.mean()
    return out

opt = torch.optim.AdamW(model.parameters())
for it in range(10):
    losses = estimate_loss()
    loss = model(get_batch('train')).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
'''


def _steps(text: str) -> int:
    source = SourceText(text)
    model = build(parse(source).tree, source, "train.py")
    assert model.tree is not None
    it = _interpret(model, model.tree, EstimateOptions())
    assert not it.out_of_budget
    return it.max_steps - it.steps_left


def test_an_evaluation_loop_costs_the_same_for_200_passes_as_for_3() -> None:
    few, many = _steps(SCRIPT.format(iters=3)), _steps(SCRIPT.format(iters=200))
    assert many == few


def test_the_estimate_of_an_evaluation_loop_does_not_change() -> None:
    few = estimate_source(SCRIPT.format(iters=3), "train.py")
    many = estimate_source(SCRIPT.format(iters=200), "train.py")
    assert [r.peak_bytes for r in few] == [r.peak_bytes for r in many] and few[0].peak_bytes > 0


def test_a_loop_that_builds_layers_runs_every_pass() -> None:
    text = '''
import torch.nn as nn
layers = []
for i in range(6):
    layers.append(nn.Linear(64, 64))
model = nn.Sequential(*layers)
'''
    reports = estimate_source(text, "m.py")
    assert sum(x.params for x in reports[0].layers) == 6 * (64 * 64 + 64)


def test_a_loop_that_carries_a_value_runs_every_pass() -> None:
    text = '''
import torch.nn as nn
size = 256
for _ in range(4):
    size = size // 2
model = nn.Linear(size, 8)
'''
    reports = estimate_source(text, "m.py")
    assert sum(x.params for x in reports[0].layers) == 16 * 8 + 8


def test_the_loop_variable_ends_at_the_last_pass() -> None:
    text = '''
import torch
import torch.nn as nn
for k in range(50):
    x = torch.zeros(4)
model = nn.Linear(k + 1, 8)
'''
    reports = estimate_source(text, "m.py")
    assert sum(x.params for x in reports[0].layers) == 50 * 8 + 8
