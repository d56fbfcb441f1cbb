"""CUDA-only terms of the estimate, as measured on an H200 (bench/vram/cuda_results.json). No torch needed."""

from __future__ import annotations

import textwrap

from torch_preflight.core.memory import MemoryReport
from torch_preflight.estimator import EstimateOptions, estimate_source
from torch_preflight.estimator.options import CUBLAS_WORKSPACE_HOPPER, CUBLAS_WORKSPACE_OLDER, cublas_workspace

STEP = """
import torch
import torch.nn as nn
import torch.nn.functional as F

model = {model}
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x = torch.randn(8, {inp})
    optimizer.zero_grad()
    loss = model(x).float().pow(2).mean()
    loss.backward()
    optimizer.step()
"""
MLP = STEP.format(model="nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))", inp="64")
CONV = STEP.format(model="nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())", inp="3, 16, 16")


def one(src: str, **opts: object) -> MemoryReport:
    (report,) = estimate_source(textwrap.dedent(src), "t.py", EstimateOptions(**opts))  # type: ignore[arg-type]
    return report


def test_a_linear_model_holds_two_cublas_workspaces_on_cuda_only() -> None:
    cuda, cpu = one(MLP, device="cuda"), one(MLP, device="cpu")
    # the forward thread's and the autograd thread's workspaces live from the first step on
    assert cuda.breakdown["other"] - cpu.breakdown["other"] >= 2 * CUBLAS_WORKSPACE_HOPPER
    assert cuda.peak_bytes < cpu.peak_bytes + 2 * CUBLAS_WORKSPACE_HOPPER + 64 * 1024  # the rest is 512 B rounding
    assert any("cuBLAS workspaces: 2 x 32 MiB" in a.text for a in cuda.assumptions)


def test_the_workspace_follows_the_gpu_and_skips_conv_only_models() -> None:
    hopper = one(MLP, device="cuda", gpu="h100-80gb")
    ampere = one(MLP, device="cuda", gpu="a100-80gb")
    assert hopper.peak_bytes - ampere.peak_bytes == 2 * (CUBLAS_WORKSPACE_HOPPER - CUBLAS_WORKSPACE_OLDER)
    assert cublas_workspace(None) == cublas_workspace("h200") == 32 * 2**20
    assert cublas_workspace("rtx-4090") == 2 * 4 * 2**20 + 8 * 16 * 2**10
    conv = one(CONV, device="cuda")
    assert not any("cuBLAS" in a.text for a in conv.assumptions)
    assert conv.breakdown["other"] < 2**20


def test_batch_norm_keeps_the_input_dtype_under_cuda_autocast() -> None:
    src = """
    import torch
    import torch.nn as nn

    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(4, 3, 32, 32)
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().mean()
        loss.backward()
        optimizer.step()
    """
    bn = {lay.name: lay for lay in one(src, device="cuda").layers}["1"]
    # BatchNorm saves its bf16 input (the conv's output) plus two float32 stats of 16 channels each
    assert bn.activation_bytes == 4 * 16 * 32 * 32 * 2 + 2 * 16 * 4


def test_sdpa_on_cuda_saves_no_score_matrix() -> None:
    src = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(64, 192)

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            return F.scaled_dot_product_attention(q, k, v)

    model = Attn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(4, 128, 64)
        optimizer.zero_grad()
        model(x).float().pow(2).mean().backward()
        optimizer.step()
    """
    layers = {lay.name: lay.activation_bytes for lay in one(src, device="cuda").layers}
    cpu = {lay.name: lay.activation_bytes for lay in one(src, device="cpu").layers}
    qkv, out, lse = 4 * 128 * 192 * 4, 4 * 128 * 64 * 4, 4 * 128 * 4
    # the fused kernel keeps q, k, v (views of the projection), its output and the log-sum-exp; the CPU's
    # math path also keeps the 128 x 128 attention probabilities
    assert layers["(model)"] == qkv + out + lse
    assert cpu["(model)"] >= qkv + 4 * 128 * 128 * 4
