"""`--device cpu` estimates of the bench/vram scripts against their torch 2.13 CPU measurements.

The peaks below were measured with bench/vram/measure.py (torch 2.13.0 CPU wheel, one thread,
the profiler's allocator events replayed into a running peak) on the variants `make bench-vram`
writes. Each case exercises one rule of docs/vram-accuracy.md's notes; no torch is needed here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from torch_preflight.estimator import EstimateOptions, estimate_source
from torch_preflight.estimator.kernels import cpu_conv_uses_onednn
from torch_preflight.estimator.values import Tensor

BENCH = Path(__file__).resolve().parents[1] / "bench" / "vram"


def variant(name: str, batch: int, opt: str, autocast: bool) -> str:
    text = (BENCH / f"{name}.py").read_text(encoding="utf-8")
    for key, value in {"BATCH": str(batch), "OPT": f'"{opt}"', "AUTOCAST": str(autocast)}.items():
        text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, count=1, flags=re.M)
    return text


@pytest.mark.parametrize(
    ("name", "batch", "opt", "autocast", "measured"),
    [
        ("unet", 4, "adam", False, 36_569_980),  # oneDNN convolution workspaces in backward
        ("resnet", 16, "adam", False, 92_111_492),  # + batch_norm backward's temporary
        ("dcgan", 16, "adam", False, 7_050_052),  # ConvTranspose through oneDNN too
        ("cnn_bn", 32, "adam", False, 50_661_512),
        ("cnn_bn", 32, "adamw", True, 36_947_272),  # weight-cast grads become .grad after the op's backward
        ("gpt", 8, "adamw", True, 19_288_712),  # norms keep the fp32 stream; cross-entropy's fp32 cast
        ("vit", 8, "adam", False, 22_206_820),  # MultiheadAttention's CPU path
        ("vit", 8, "adamw", True, 17_317_432),  # the math attention upcasts bf16 q, k, v
        ("gru_seq2seq", 16, "adamw", True, 14_699_184),  # GRU cells in bf16, with a cast of h per step
        ("lstm_lm", 16, "adamw", True, 50_578_676),  # oneDNN LSTM workspace in bf16
    ],
)
def test_cpu_estimate_matches_the_measured_peak(name: str, batch: int, opt: str, autocast: bool, measured: int) -> None:
    reports = estimate_source(variant(name, batch, opt, autocast), f"<{name}>", EstimateOptions(device="cpu"))
    assert len(reports) == 1 and reports[0].complete
    error = (reports[0].peak_bytes - measured) / measured
    assert abs(error) <= 0.03, f"{name}: {error:+.1%}"


def test_cpu_convolution_path_selection() -> None:
    x = Tensor((4, 32, 64, 64))
    assert cpu_conv_uses_onednn(x, (3, 3), (1, 1), (1, 1), 1)
    # 1x1, stride 1, batch < 16, single-threaded: the native path, no oneDNN reorders
    assert not cpu_conv_uses_onednn(x, (1, 1), (1, 1), (1, 1), 1)
    assert cpu_conv_uses_onednn(Tensor((16, 32, 64, 64)), (1, 1), (1, 1), (1, 1), 1)
    assert cpu_conv_uses_onednn(x, (1, 1), (2, 2), (1, 1), 1)
    assert cpu_conv_uses_onednn(Tensor((4, 32, 64, 64), "bfloat16"), (1, 1), (1, 1), (1, 1), 1)
    # batch 1, small input, 3x3: the native path is faster, torch keeps it
    assert not cpu_conv_uses_onednn(Tensor((1, 3, 8, 8)), (3, 3), (1, 1), (1, 1), 1)


def test_conv_backward_workspace_at_the_peak() -> None:
    """The unet peak is dec1.0's backward (input 4x64x64x64, output 4x32x64x64, fp32): besides the batch,
    the incoming grad (out) and grad_input (in), oneDNN holds reordered copies of grad_output and the input."""
    report = estimate_source(variant("unet", 4, "adam", False), "<unet>", EstimateOptions(device="cpu"))[0]
    inp, out, batch = 4 * 64 * 64 * 64 * 4, 4 * 32 * 64 * 64 * 4, 2 * 4 * 64 * 64 * 4
    assert report.breakdown["other"] == batch + out + inp + (inp + out)


LOCAL = '''\
import torch
import torch.nn as nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(100, 256)
        self.fc = nn.Linear(256, 256)

    def forward(self, idx):
{body}
        for _ in range(32):
            h = torch.tanh(self.fc(h))
        return h.sum()


model = M()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
idx = torch.randint(0, 100, (16, 64))
loss = model(idx)
loss.backward()
opt.step()
'''


@pytest.mark.parametrize(
    ("body", "measured"),
    [
        # `emb` holds the 1 MiB embedding output (nothing saves it) until forward returns: the peak is at the end of
        # forward, with it and the 32 steps' saved activations
        ("        emb = self.wte(idx)\n        h = emb.mean(1)", 1_979_392),
        # consumed at once, it is freed after the mean: the peak is in backward, 1 MiB lower in forward
        ("        h = self.wte(idx).mean(1)", 1_787_912),
    ],
)
def test_a_forward_local_lives_until_its_function_returns(body: str, measured: int) -> None:
    reports = estimate_source(LOCAL.format(body=body), "<local>", EstimateOptions(device="cpu"))
    assert len(reports) == 1 and reports[0].complete
    assert abs(reports[0].peak_bytes - measured) <= 16, reports[0].peak_bytes - measured
