"""CUDA-only terms of the estimate, as measured on an H200 (bench/vram/cuda_results.json). No torch needed."""

from __future__ import annotations

import textwrap

from torch_preflight.core.memory import MemoryReport
from torch_preflight.estimator import EstimateOptions, estimate_source
from torch_preflight.estimator.kernels import cudnn_conv_workspace
from torch_preflight.estimator.options import (
    CUBLAS_WORKSPACE_HOPPER,
    CUBLAS_WORKSPACE_OLDER,
    CUBLASLT_WORKSPACE,
    cublas_workspace,
)
from torch_preflight.estimator.values import Tensor

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
    # plus cuBLASLt's own workspace (the biased Linear on a 2-D input runs addmm through cuBLASLt)
    assert cuda.peak_bytes < cpu.peak_bytes + 2 * CUBLAS_WORKSPACE_HOPPER + CUBLASLT_WORKSPACE + 64 * 1024  # the rest is 512 B rounding
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


def _peak_and_other(src: str, **opts: object) -> tuple[int, int]:
    r = one(src, **opts)
    return r.peak_bytes, r.breakdown["other"]


def test_cublaslt_workspace_only_for_a_biased_linear_on_a_contiguous_input() -> None:
    # measured on the H200 (torch 2.11): the first biased Linear's forward allocates a 1 MiB block right
    # after the 32 MiB cuBLAS workspace, kept for the run; lstm_lm (its Linear reads the transposed
    # batch_first LSTM output) has none
    assert CUBLASLT_WORKSPACE == 2**20
    biased = STEP.format(model="nn.Linear(64, 4)", inp="64")
    unbiased = STEP.format(model="nn.Linear(64, 4, bias=False)", inp="64")
    with_lt, without = one(biased, device="cuda"), one(unbiased, device="cuda")
    assert any("cuBLASLt workspace: 1 MiB" in a.text for a in with_lt.assumptions)
    assert not any("cuBLASLt" in a.text for a in without.assumptions)
    # the rest of the difference is the bias (its grad and the 512 B blocks of the peak's transients)
    assert 0 <= with_lt.peak_bytes - without.peak_bytes - CUBLASLT_WORKSPACE <= 4 * 512
    assert not any("cuBLASLt" in a.text for a in one(biased, device="cpu").assumptions)
    transposed = STEP.format(model="nn.Linear(64, 4)", inp="64").replace("model(x)", "model(x.reshape(8, 1, 64).transpose(0, 1))")
    assert not any("cuBLASLt" in a.text for a in one(transposed, device="cuda").assumptions)


RNN_LM = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        self.rnn = nn.GRU(32, 64, batch_first={batch_first})
        self.out = nn.Linear(64, 100)

    def forward(self, x):
        h, _ = self.rnn(self.emb(x))
        return self.out(h)

model = LM()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x = torch.randint(0, 100, (16, 20))
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x).reshape(-1, 100), x.reshape(-1))
    loss.backward()
    optimizer.step()
"""


def test_cudnn_rnn_saves_its_output_and_a_batch_first_output_is_copied_by_the_next_linear() -> None:
    # H200 snapshots: _cudnn_rnn's backward keeps the output (freed by the autograd thread after the
    # GRU's backward), and a batch_first output is a transposed view, which linear copies before mm
    # (gru_seq2seq b16: a 16x25x128 fp32 copy of 204800 B from linear.py, freed in backward)
    out_bytes = 16 * 20 * 64 * 4
    bf = {lay.name: lay for lay in one(RNN_LM.format(batch_first=True), device="cuda").layers}
    sf = {lay.name: lay for lay in one(RNN_LM.format(batch_first=False), device="cuda").layers}
    assert bf["out"].activation_bytes == out_bytes  # the contiguous copy (the view is not what mm saves)
    assert bf["rnn"].activation_bytes - sf["rnn"].activation_bytes == 0  # both save the output itself
    # ... so batch_first costs one more copy of the output (seq-first: the Linear saves the output itself)
    assert sum(lay.activation_bytes or 0 for lay in bf.values()) - sum(lay.activation_bytes or 0 for lay in sf.values()) == out_bytes
    cuda_rnn = sf["rnn"].activation_bytes
    cpu_rnn = {lay.name: lay for lay in one(RNN_LM.format(batch_first=False), device="cpu").layers}["rnn"].activation_bytes
    assert cuda_rnn >= int(24.0 * 16 * 64 * 20) + out_bytes  # the cuDNN reserve space plus the output
    assert cpu_rnn != cuda_rnn


def test_cross_entropy_under_cuda_autocast_keeps_a_bf16_log_softmax_and_a_float32_cast() -> None:
    src = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    model = nn.Linear(64, 100)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(32, 64)
        y = torch.randint(0, 100, (32,))
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    """
    linear = 32 * 64 * 2 + 100 * 64 * 2  # the bf16 casts of the input and the weight
    # CUDA: log_softmax runs in bf16 (its output saved, 6400 B in a 6656 B block) and nll_loss saves a
    # float32 cast of it; no float32 copy of the logits (lstm_lm b128 bf16 snapshot: 17920000 B then
    # 35840000 B from cross_entropy). CPU autocast keeps the float32 log_softmax only.
    assert one(src, device="cuda").breakdown["activations"] == linear + 6656 + 32 * 100 * 4
    assert one(src, device="cpu").breakdown["activations"] == linear + 32 * 100 * 4


def test_mse_and_bce_hold_a_float32_buffer_of_their_input_for_the_whole_step_on_cuda() -> None:
    # dcgan / vae snapshots: freed only when `loss` is rebound in the next iteration
    def src(loss: str) -> str:
        return STEP.format(model="nn.Sequential(nn.Linear(64, 64), nn.Sigmoid())", inp="64").replace(
            "loss = model(x).float().pow(2).mean()", f"loss = {loss}")
    mse, l1 = one(src("F.mse_loss(model(x), x)"), device="cuda"), one(src("F.l1_loss(model(x), x)"), device="cuda")
    bce = one(src("F.binary_cross_entropy(model(x), x)"), device="cuda")
    assert mse.breakdown["other"] - l1.breakdown["other"] == 8 * 64 * 4
    assert bce.breakdown["other"] - l1.breakdown["other"] == 8 * 64 * 4
    mse_cpu, l1_cpu = one(src("F.mse_loss(model(x), x)"), device="cpu"), one(src("F.l1_loss(model(x), x)"), device="cpu")
    assert mse_cpu.breakdown["other"] == l1_cpu.breakdown["other"]


def test_cudnn_conv_workspace_is_the_nhwc_copies_with_16_bit_channels_padded_to_8() -> None:
    # cnn_bn b64 fp32, the 64->64 3x3 layer: 8536080 B measured = in + out + w + 16
    x, out, w = Tensor((64, 64, 16, 16)), Tensor((64, 64, 16, 16)), Tensor((64, 64, 3, 3))
    assert cudnn_conv_workspace(x, out, w, 2) == 8536080 - 16
    # dcgan b128 bf16, ConvTranspose2d(32, 3, 4, 2, 1): 4202643 B measured = in + out padded to 8 channels
    # + w padded to 32x8 + 147
    x, out, w = Tensor((128, 32, 16, 16), "bfloat16"), Tensor((128, 3, 32, 32), "bfloat16"), Tensor((32, 3, 4, 4), "bfloat16")
    assert cudnn_conv_workspace(x, out, w, 2) == 4202643 - 147
    # the same layer in fp32 is not padded
    x, out, w = Tensor((16, 32, 16, 16)), Tensor((16, 3, 32, 32)), Tensor((32, 3, 4, 4))
    assert cudnn_conv_workspace(x, out, w, 2) == 16 * 32 * 256 * 4 + 16 * 3 * 1024 * 4 + 32 * 3 * 16 * 4


def test_the_report_says_what_cudnn_decides_at_run_time() -> None:
    conv_cuda, conv_cpu, mlp_cuda = one(CONV, device="cuda"), one(CONV, device="cpu"), one(MLP, device="cuda")
    assert any("cuDNN convolution workspaces" in a.text and "weight-gradient" in a.text for a in conv_cuda.assumptions)
    assert not any("cuDNN" in a.text for a in (*conv_cpu.assumptions, *mlp_cuda.assumptions))
    gru = one(STEP.format(model="nn.GRU(16, 32)", inp="5, 16").replace("model(x).float()", "model(x)[0].float()"), device="cuda")
    assert any("cuDNN RNN workspace" in a.text for a in gru.assumptions)
