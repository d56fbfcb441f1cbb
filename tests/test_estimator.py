"""The static VRAM estimator: exact parameter counts, shapes, the step timeline, budgets. No torch needed."""

from __future__ import annotations

import json
import textwrap

import pytest
from torch_preflight.core.memory import MemoryReport
from torch_preflight.estimator import EstimateOptions, estimate_source, gpu_memory
from torch_preflight.estimator.catalog import bind, count, layer_params
from torch_preflight.estimator.timeline import cuda_round, optimizer_bytes, simulate

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


def one(src: str, **opts: object) -> MemoryReport:
    reports = estimate_source(HEAD + textwrap.dedent(src), "t.py", EstimateOptions(**opts))  # type: ignore[arg-type]
    assert len(reports) == 1, reports
    return reports[0]


def params_of(layer: str, **opts: object) -> int:
    """Parameter count of `nn.<layer>` built at module level, through the whole estimator."""
    report = one(f"model = nn.Sequential(nn.{layer})\n", **opts)
    return sum(lay.params for lay in report.layers)


# ---- parameter catalog, by hand ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("layer", "expected"),
    [
        ("Linear(10, 20)", 10 * 20 + 20),
        ("Linear(10, 20, bias=False)", 200),
        ("Bilinear(3, 4, 5)", 3 * 4 * 5 + 5),
        ("Conv1d(4, 8, 3)", 8 * 4 * 3 + 8),
        ("Conv2d(3, 16, 3)", 16 * 3 * 3 * 3 + 16),
        ("Conv2d(8, 16, (3, 5), groups=4, bias=False)", 16 * (8 // 4) * 3 * 5),
        ("Conv3d(2, 4, 3)", 4 * 2 * 27 + 4),
        ("ConvTranspose2d(16, 8, 4, stride=2)", 16 * 8 * 16 + 8),
        ("ConvTranspose1d(6, 4, 3, groups=2)", 6 * (4 // 2) * 3 + 4),
        ("BatchNorm2d(64)", 2 * 64),
        ("BatchNorm1d(10, affine=False)", 0),
        ("LayerNorm(128)", 2 * 128),
        ("LayerNorm([4, 8], bias=False)", 32),
        ("GroupNorm(4, 32)", 64),
        ("RMSNorm(64)", 64),
        ("Embedding(1000, 64)", 64_000),
        ("EmbeddingBag(100, 16)", 1600),
        ("PReLU()", 1),
        ("ReLU()", 0),
        ("Dropout(0.5)", 0),
        ("MaxPool2d(2)", 0),
        ("Flatten()", 0),
        ("Identity()", 0),
    ],
)
def test_catalog_parameter_counts(layer: str, expected: int) -> None:
    assert params_of(layer) == expected


def lstm_expected(gates: int, inp: int, h: int, layers: int, dirs: int, proj: int = 0) -> int:
    total = 0
    out = proj or h
    for layer in range(layers):
        in_size = inp if layer == 0 else out * dirs
        per_dir = gates * h * in_size + gates * h * out + 2 * gates * h + (proj * h if proj else 0)
        total += per_dir * dirs
    return total


def test_rnn_family_counts() -> None:
    # LSTM(10, 20): 4*20*10 + 4*20*20 + 2*4*20 = 800 + 1600 + 160
    assert params_of("LSTM(10, 20)") == 2560 == lstm_expected(4, 10, 20, 1, 1)
    assert params_of("LSTM(10, 20, num_layers=2, bidirectional=True)") == lstm_expected(4, 10, 20, 2, 2)
    # proj_size: w_hh is (4h, proj), w_hr is (proj, h), the next layer's input is proj*dirs
    assert params_of("LSTM(10, 20, num_layers=2, bidirectional=True, proj_size=5)") == lstm_expected(4, 10, 20, 2, 2, proj=5)
    assert params_of("GRU(8, 16, num_layers=3)") == lstm_expected(3, 8, 16, 3, 1)
    assert params_of("RNN(8, 16, bias=False)") == 16 * 8 + 16 * 16
    assert params_of("LSTMCell(8, 16)") == 4 * 16 * 8 + 4 * 16 * 16 + 2 * 4 * 16


def test_attention_and_transformer_counts() -> None:
    e = 64
    mha = 3 * e * e + 3 * e + e * e + e  # in_proj weight and bias, out_proj
    assert params_of("MultiheadAttention(64, 8)") == mha
    assert params_of("MultiheadAttention(64, 8, kdim=32, vdim=16)") == e * e + e * 32 + e * 16 + 3 * e + e * e + e
    assert params_of("MultiheadAttention(64, 8, add_bias_kv=True)") == mha + 2 * e
    ff = 256
    layer = mha + (e * ff + ff) + (ff * e + e) + 2 * (2 * e)
    assert params_of("TransformerEncoderLayer(64, 8, dim_feedforward=256)") == layer
    dec = 2 * mha + (e * ff + ff) + (ff * e + e) + 3 * (2 * e)
    assert params_of("TransformerDecoderLayer(64, 8, dim_feedforward=256)") == dec
    report = one("enc = nn.TransformerEncoderLayer(64, 8, 256)\nmodel = nn.TransformerEncoder(enc, 3, norm=nn.LayerNorm(64))\n")
    assert sum(lay.params for lay in report.layers) == 3 * layer + 2 * e
    full = one("model = nn.Transformer(d_model=64, nhead=8, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=256)\n")
    assert sum(lay.params for lay in full.layers) == 2 * layer + 2 * e + dec + 2 * e


def test_catalog_direct() -> None:
    p, buffers = layer_params("BatchNorm2d", bind("BatchNorm2d", [32], {}))
    assert count(p) == 64
    assert buffers == {"running_mean": ((32,), "float32"), "running_var": ((32,), "float32"), "num_batches_tracked": ((), "int64")}


# ---- values from configs, defaults and the instantiation site --------------------------------------
def test_values_from_config_dataclass_and_instantiation_site() -> None:
    src = """
    from dataclasses import dataclass

    WIDTH = 32

    @dataclass
    class Cfg:
        d_in: int = 16
        hidden: int = 64
        n_layer: int = 2

    def block(d):
        return nn.Sequential(nn.Linear(d, d), nn.ReLU())

    class Net(nn.Module):
        def __init__(self, cfg, out=WIDTH):
            super().__init__()
            self.inp = nn.Linear(cfg.d_in, cfg.hidden)
            self.blocks = nn.ModuleList([block(cfg.hidden) for _ in range(cfg.n_layer)])
            self.scale = nn.Parameter(torch.ones(cfg.hidden))
            self.register_buffer("mask", torch.zeros(10, 10))
            self.out = nn.Linear(cfg.hidden, out)

        def forward(self, x):
            x = self.inp(x)
            for b in self.blocks:
                x = b(x) * self.scale
            return self.out(x)

    model = Net(Cfg(n_layer=3), out=8)
    """
    report = one(src)
    h = 64
    expected = (16 * h + h) + 3 * (h * h + h) + h + (h * 8 + 8)
    assert sum(lay.params for lay in report.layers) == expected
    assert report.model == "Net"
    assert report.model_line == src.count("\n", 0, src.index("model = Net")) + 3  # 0-based, after the 3 header lines
    lines = {lay.name: lay.line for lay in report.layers}
    assert lines["blocks.0.0"] == lines["blocks.2.0"]  # built by the same helper line


def test_weight_tying_counted_once() -> None:
    report = one("""
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(100, 16)
            self.head = nn.Linear(16, 100, bias=False)
            self.head.weight = self.emb.weight
    model = LM()
    """)
    assert sum(lay.params for lay in report.layers) == 1600


# ---- shapes and activations --------------------------------------------------------------------
CNN = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 16 * 16, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv(x)))
        x = x.view(x.size(0), -1)
        return self.fc(x)

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    x = torch.randn(4, 3, 32, 32)
    y = torch.randint(0, 10, (4,))
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
"""


def test_shape_propagation_and_saved_activations() -> None:
    report = one(CNN, device="cpu")
    by_name = {lay.name: lay for lay in report.layers}
    assert by_name["conv"].output_shape == (4, 8, 32, 32)
    assert by_name["pool"].output_shape == (4, 8, 16, 16)
    assert by_name["fc"].output_shape == (4, 10)
    # conv saves the batch (already counted as input); the functional relu saves its output (in Net);
    # max-pool saves its input (the same relu output, counted once) and int64 indices; fc saves the pooled output
    relu_out = 4 * 8 * 32 * 32 * 4
    indices = 4 * 8 * 16 * 16 * 8
    pooled = 4 * 8 * 16 * 16 * 4
    assert by_name["conv"].activation_bytes == 0
    assert by_name["(model)"].activation_bytes == relu_out
    assert by_name["pool"].activation_bytes == indices
    assert by_name["fc"].activation_bytes == pooled
    assert report.complete


def test_timeline_peak_on_a_tiny_case() -> None:
    report = one(CNN, device="cpu")
    params = (8 * 3 * 9 + 8) * 4 + (8 * 16 * 16 * 10 + 10) * 4
    batch = 4 * 3 * 32 * 32 * 4 + 4 * 8  # x and the int64 targets
    relu_out = 4 * 8 * 32 * 32 * 4
    fc_grads = (8 * 16 * 16 * 10 + 10) * 4
    # SGD without momentum keeps no state. The peak is in backward, at the relu: its saved output is
    # still live while the gradient flowing into it and the gradient it produces (both relu-sized)
    # are allocated; fc's gradients exist already, conv's not yet.
    assert report.breakdown["optimizer_state"] == 0
    assert report.breakdown["parameters"] == params
    assert report.breakdown["activations"] == relu_out
    assert report.breakdown["gradients"] == fc_grads
    assert report.peak_bytes == sum(report.breakdown.values()) == params + batch + relu_out + 2 * relu_out + fc_grads


def test_timeline_simulation_units() -> None:
    assert cuda_round(1) == 512 and cuda_round(512) == 512 and cuda_round(513) == 1024
    from torch_preflight.estimator.values import Optimizer

    adam = Optimizer("Adam", None)
    assert optimizer_bytes(adam, [1000, 10], 4, "cpu") == (2 * 4040, 2 * 4000)  # per-param loop: 2x the largest
    assert optimizer_bytes(adam, [1000, 10], 4, "cuda") == (2 * (4096 + 512), 4096 + 512)  # foreach: 1x, rounded
    assert optimizer_bytes(Optimizer("SGD", None, momentum=True), [100], 4, "cpu") == (400, 0)
    assert optimizer_bytes(Optimizer("Adam", None, fused=True), [100], 4, "cuda")[1] == 0
    tl = simulate(None, params=100, grads=100, state=200, opt_transient=50, batch=10, grads_persist=False, device="cpu")
    assert (tl.peak, tl.phase) == (100 + 200 + 10 + 100 + 50, "step")


def test_autocast_and_cuda_round() -> None:
    fp32 = one(CNN, device="cuda")
    assert fp32.peak_bytes % 512 == 0
    bf16 = one(CNN.replace("    loss = F.cross_entropy(model(x), y)", "    with torch.autocast('cuda', dtype=torch.bfloat16):\n        loss = F.cross_entropy(model(x), y)"), device="cuda")
    assert bf16.peak_bytes < fp32.peak_bytes
    assert any("autocast bfloat16" in a.text for a in bf16.assumptions)


def test_batch_size_override_scales_activations() -> None:
    small = one(CNN, device="cpu")
    big = one(CNN, device="cpu", batch_size=8)
    assert big.breakdown["activations"] == pytest.approx(2 * small.breakdown["activations"], rel=0.01)


def test_input_shape_for_a_bare_model_class() -> None:
    src = """
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(32, 16)
        def forward(self, x):
            return F.gelu(self.fc(x))
    """
    without = one(src)
    assert not without.complete and without.layers[0].activation_bytes is None
    with_shape = one(src, input_shape=(32,), batch_size=2, device="cpu")
    assert with_shape.complete
    assert {lay.name: lay.output_shape for lay in with_shape.layers}["fc"] == (2, 16)


# ---- budget, remedies, JSON -----------------------------------------------------------------------
def test_budget_fit_max_batch_and_remedies() -> None:
    report = one(CNN, device="cpu", budget_bytes=500_000)
    assert report.fits is False and report.budget_bytes == 500_000
    remedies = {s.remedy: s.peak_bytes for s in report.suggestions}
    assert remedies["bf16 autocast"] < report.peak_bytes
    assert any(k.startswith("micro-batch 2 x 2") for k in remedies)
    assert any(k.startswith("ZeRO-3") for k in remedies)
    assert report.max_batch_size is not None
    roomy = one(CNN, device="cpu", budget_bytes=10**9)
    assert roomy.fits is True and roomy.max_batch_size is not None and roomy.max_batch_size > 4
    assert gpu_memory("A100-80GB") == 80 * 1024**3 and gpu_memory("nope") is None
    assert one(CNN, gpu="t4").budget_bytes == 16 * 1024**3


def test_json_shape() -> None:
    data = json.loads(json.dumps(one(CNN).to_json()))
    assert set(data["breakdown"]) == {"parameters", "gradients", "optimizer_state", "activations", "other"}
    assert {"name", "type", "line", "params", "param_bytes", "activation_bytes"} <= set(data["layers"][0])
    assert isinstance(data["peak_bytes"], int) and isinstance(data["assumptions"], list) and isinstance(data["suggestions"], list)


@pytest.mark.parametrize("text", ["", "def f(:\n", "class A(nn.Module):\n    def __init__(self):\n        self.x = nn.Linear(a, b)\n", "x = 1\n" * 5,
                                  "import torch\nwhile True:\n    pass\n", "class M(nn.Module):\n    def forward(self, x):\n        return self(x)\nm = M()\nm(torch.randn(2))\n"])
def test_never_raises_on_odd_input(text: str) -> None:
    reports = estimate_source(text)
    assert all(isinstance(r, MemoryReport) for r in reports)


def test_saved_activations_per_layer_are_one_steps_when_the_loop_calls_a_function() -> None:
    # the epoch loop calls train_one_epoch, whose loop the interpreter runs more than once: the per-layer
    # figures must stay those of one step (64x256 fp32 relu/dropout outputs), not add up over the passes
    report = one("""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 256)
            self.dropout = nn.Dropout(0.2)
            self.fc2 = nn.Linear(256, 10)

        def forward(self, x):
            return self.fc2(self.dropout(F.relu(self.fc1(x))))

    def train_one_epoch(model, optimizer):
        for _ in range(8):
            optimizer.zero_grad()
            F.cross_entropy(model(torch.randn(64, 784)), torch.randint(0, 10, (64,))).backward()
            optimizer.step()

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        train_one_epoch(model, optimizer)
    """, device="cpu")
    by_name = {lay.name: lay.activation_bytes for lay in report.layers}
    assert by_name["dropout"] == by_name["fc2"] == 64 * 256 * 4


def test_a_gradient_used_twice_waits_for_its_producer() -> None:
    from torch_preflight.estimator.record import Op, Recorder

    k8 = 8 * 1024

    def peak(ops: list[Op]) -> int:
        return simulate(Recorder(ops=ops), params=0, grads=0, state=0, opt_transient=0, batch=0, grads_persist=False, device="cpu").peak

    # a = f(x); b = g(a); c = h(b); out = a + c. The add hands `a` a gradient at once; it waits while h and
    # g run backward, and g (with an 8 x 8 KiB workspace) produces the second one
    f = Op("f", [], k8, 0, [], out_id=1)
    g = Op("g", [(1, k8)], k8, k8, [], backward_transient=8 * k8, out_id=2, in_grads=[(1, k8)])
    h = Op("h", [(2, k8)], k8, k8, [], out_id=3, in_grads=[(2, k8)])
    add = Op("add", [], k8, 2 * k8, [], out_id=4, in_grads=[(1, k8), (3, k8)])
    # at g's backward: a (saved), the waiting gradient of a, b's gradient coming in, g's new gradient, the workspace
    assert peak([f, g, h, add]) == (1 + 1 + 1 + 1 + 8) * k8
    # without the skip: no waiting gradient
    add_chain = Op("add", [], k8, k8, [], out_id=4, in_grads=[(3, k8)])
    assert peak([f, g, h, add_chain]) == (1 + 1 + 1 + 8) * k8
