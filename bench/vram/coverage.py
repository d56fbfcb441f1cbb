"""Which torch.nn layers and common ops the estimator models: probe each through the estimator and write
docs/estimator-coverage.md.

Every module class of torch.nn (torch 2.13) is built with representative arguments and called on a representative
input inside a tiny script, which the estimator interprets as it interprets user code (no torch here). A layer is
*modelled* when its parameters and its output shape come out known; otherwise the page names what the estimator
reports instead (it never guesses: the layer is listed as unknown and the estimate becomes a lower bound).
tests/test_estimator_coverage.py checks the page is fresh and, where torch is installed, that every shape and
parameter count agrees with torch on the meta device.

Usage: python bench/vram/coverage.py [--write]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "estimator-coverage.md"

# the module classes of torch.nn in torch 2.13 (`vars(torch.nn)`; a test compares it with the installed torch)
TORCH_NN = (
    "AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveLogSoftmaxWithLoss AdaptiveMaxPool1d AdaptiveMaxPool2d "
    "AdaptiveMaxPool3d AlphaDropout AvgPool1d AvgPool2d AvgPool3d BCELoss BCEWithLogitsLoss BatchNorm1d BatchNorm2d "
    "BatchNorm3d Bilinear CELU CTCLoss ChannelShuffle CircularPad1d CircularPad2d CircularPad3d ConstantPad1d ConstantPad2d "
    "ConstantPad3d Container Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d CosineEmbeddingLoss "
    "CosineSimilarity CrossEntropyLoss CrossMapLRN2d DataParallel Dropout Dropout1d Dropout2d Dropout3d ELU Embedding "
    "EmbeddingBag FeatureAlphaDropout Flatten Fold FractionalMaxPool2d FractionalMaxPool3d GELU GLU GRU GRUCell "
    "GaussianNLLLoss GroupNorm Hardshrink Hardsigmoid Hardswish Hardtanh HingeEmbeddingLoss HuberLoss Identity "
    "InstanceNorm1d InstanceNorm2d InstanceNorm3d KLDivLoss L1Loss LPPool1d LPPool2d LPPool3d LSTM LSTMCell LayerNorm "
    "LazyBatchNorm1d LazyBatchNorm2d LazyBatchNorm3d LazyConv1d LazyConv2d LazyConv3d LazyConvTranspose1d "
    "LazyConvTranspose2d LazyConvTranspose3d LazyInstanceNorm1d LazyInstanceNorm2d LazyInstanceNorm3d LazyLinear LeakyReLU "
    "Linear LinearCrossEntropyLoss LocalResponseNorm LogSigmoid LogSoftmax MSELoss MarginRankingLoss MaxPool1d MaxPool2d "
    "MaxPool3d MaxUnpool1d MaxUnpool2d MaxUnpool3d Mish Module ModuleDict ModuleList MultiLabelMarginLoss "
    "MultiLabelSoftMarginLoss MultiMarginLoss MultiheadAttention NLLLoss NLLLoss2d PReLU PairwiseDistance ParameterDict "
    "ParameterList PixelShuffle PixelUnshuffle PoissonNLLLoss RMSNorm RNN RNNBase RNNCell RNNCellBase RReLU ReLU ReLU6 "
    "ReflectionPad1d ReflectionPad2d ReflectionPad3d ReplicationPad1d ReplicationPad2d ReplicationPad3d SELU Sequential "
    "SiLU Sigmoid SmoothL1Loss SoftMarginLoss Softmax Softmax2d Softmin Softplus Softshrink Softsign SyncBatchNorm Tanh "
    "Tanhshrink Threshold Transformer TransformerDecoder TransformerDecoderLayer TransformerEncoder TransformerEncoderLayer "
    "TripletMarginLoss TripletMarginWithDistanceLoss Unflatten Unfold Upsample UpsamplingBilinear2d UpsamplingNearest2d "
    "ZeroPad1d ZeroPad2d ZeroPad3d"
).split()
# base classes and containers: not layers with a forward of their own
STRUCTURE = {"Module", "Container", "RNNBase", "RNNCellBase", "ModuleDict", "ModuleList", "ParameterDict", "ParameterList",
             "Sequential", "DataParallel"}
LOSS = {n for n in TORCH_NN if n.endswith("Loss") or n == "NLLLoss2d"}

# representative constructor arguments (source text) and input shape for the layers that need them
ARGS: dict[str, tuple[str, tuple[int, ...]]] = {
    "Linear": ("16, 8", (2, 16)), "LazyLinear": ("8", (2, 16)), "Bilinear": ("16, 16, 8", (2, 16)),
    **{f"Conv{d}d": ("4, 8, 3, padding=1", (2, 4, *(6,) * d)) for d in (1, 2, 3)},
    **{f"ConvTranspose{d}d": ("4, 8, 3, stride=2", (2, 4, *(5,) * d)) for d in (1, 2, 3)},
    **{f"LazyConv{d}d": ("8, 3", (2, 4, *(6,) * d)) for d in (1, 2, 3)},
    **{f"LazyConvTranspose{d}d": ("8, 3", (2, 4, *(5,) * d)) for d in (1, 2, 3)},
    **{f"BatchNorm{d}d": ("4", (2, 4, *(5,) * d)) for d in (1, 2, 3)},
    **{f"InstanceNorm{d}d": ("4", (2, 4, *(5,) * d)) for d in (1, 2, 3)},
    **{f"LazyBatchNorm{d}d": ("", (2, 4, *(5,) * d)) for d in (1, 2, 3)},
    **{f"LazyInstanceNorm{d}d": ("", (2, 4, *(5,) * d)) for d in (1, 2, 3)},
    "SyncBatchNorm": ("4", (2, 4, 5, 5)),
    "LayerNorm": ("16", (2, 3, 16)), "RMSNorm": ("16", (2, 3, 16)), "GroupNorm": ("2, 4", (2, 4, 5, 5)),
    "LocalResponseNorm": ("2", (2, 4, 5, 5)), "CrossMapLRN2d": ("2", (2, 4, 5, 5)),
    "Embedding": ("100, 8", (2, 5)), "EmbeddingBag": ("100, 8", (2, 5)),
    "RNN": ("16, 8, 2", (5, 2, 16)), "LSTM": ("16, 8, 2", (5, 2, 16)), "GRU": ("16, 8, 2", (5, 2, 16)),
    "RNNCell": ("16, 8", (2, 16)), "LSTMCell": ("16, 8", (2, 16)), "GRUCell": ("16, 8", (2, 16)),
    "MultiheadAttention": ("16, 2", (5, 2, 16)),
    "TransformerEncoderLayer": ("16, 2, 32", (5, 2, 16)), "TransformerDecoderLayer": ("16, 2, 32", (5, 2, 16)),
    "TransformerEncoder": ("nn.TransformerEncoderLayer(16, 2, 32), 2", (5, 2, 16)),
    "TransformerDecoder": ("nn.TransformerDecoderLayer(16, 2, 32), 2", (5, 2, 16)),
    "Transformer": ("16, 2, 1, 1, 32", (5, 2, 16)),
    **{f"MaxPool{d}d": ("2", (2, 4, *(6,) * d)) for d in (1, 2, 3)},
    **{f"AvgPool{d}d": ("2", (2, 4, *(6,) * d)) for d in (1, 2, 3)},
    **{f"LPPool{d}d": ("2, 2", (2, 4, *(6,) * d)) for d in (1, 2, 3)},
    **{f"AdaptiveAvgPool{d}d": ("3", (2, 4, *(6,) * d)) for d in (1, 2, 3)},
    **{f"AdaptiveMaxPool{d}d": ("3", (2, 4, *(6,) * d)) for d in (1, 2, 3)},
    **{f"MaxUnpool{d}d": ("2", (2, 4, *(3,) * d)) for d in (1, 2, 3)},
    "FractionalMaxPool2d": ("2, output_size=3", (2, 4, 6, 6)), "FractionalMaxPool3d": ("2, output_size=3", (2, 4, 6, 6, 6)),
    **{f"{k}Pad{d}d": ("1", (2, 4, *(5,) * d)) for k in ("Reflection", "Replication", "Zero", "Circular") for d in (1, 2, 3)},
    **{f"ConstantPad{d}d": ("1, 0.0", (2, 4, *(5,) * d)) for d in (1, 2, 3)},
    "PixelShuffle": ("2", (2, 8, 3, 3)), "PixelUnshuffle": ("2", (2, 2, 6, 6)), "ChannelShuffle": ("2", (2, 4, 3, 3)),
    "Upsample": ("scale_factor=2", (2, 4, 3, 3)), "UpsamplingNearest2d": ("scale_factor=2", (2, 4, 3, 3)),
    "UpsamplingBilinear2d": ("scale_factor=2", (2, 4, 3, 3)),
    "Flatten": ("", (2, 4, 3, 3)), "Unflatten": ("1, (2, 2)", (2, 4, 3)), "Fold": ("(4, 4), 2", (2, 16, 9)),
    "Unfold": ("2", (2, 4, 5, 5)), "Softmax": ("dim=-1", (2, 8)), "LogSoftmax": ("dim=-1", (2, 8)), "Softmin": ("dim=-1", (2, 8)),
    "Softmax2d": ("", (2, 4, 3, 3)), "GLU": ("", (2, 8)), "Threshold": ("0.1, 0.0", (2, 8)), "PReLU": ("", (2, 8)),
    "CosineSimilarity": ("", (2, 8)), "PairwiseDistance": ("", (2, 8)), "AdaptiveLogSoftmaxWithLoss": ("8, 10, [4]", (2, 8)),
}


def probe(name: str) -> tuple[str, tuple[int, ...] | None, int | None, str]:
    """(status, output shape, parameter count, note) of one torch.nn class as the estimator reads it."""
    from torch_preflight.core.parse import parse
    from torch_preflight.core.semantic import build
    from torch_preflight.core.source import SourceText
    from torch_preflight.estimator.interp import Interpreter
    from torch_preflight.estimator.values import Module, Tensor

    if name in STRUCTURE:
        return "structure", None, None, "a base class or container: its contents are estimated"
    args, shape = ARGS.get(name, ("", (2, 8)))
    call = "layer(x, x)" if name in ("Bilinear", "CosineSimilarity", "PairwiseDistance", "TransformerDecoderLayer",
                                     "TransformerDecoder", "Transformer") else "layer(x, x, x)" if name == "MultiheadAttention" else "layer(x)"
    if name in LOSS:
        call = "layer(x, x)"
    text = f"import torch\nimport torch.nn as nn\nlayer = nn.{name}({args})\nx = torch.randn{shape}\ny = {call}\n"
    source = SourceText(text)
    model = build(parse(source).tree, source, "probe.py")
    it = Interpreter(model, model.tree, device="cpu")
    it.run()
    layer, out = it.globals.vars.get("layer"), it.globals.vars.get("y")
    if isinstance(out, tuple) and out:
        out = out[0]
    unknown = layer.args.get("incomplete") if isinstance(layer, Module) else "not built"
    if isinstance(layer, Module) and not unknown and isinstance(out, Tensor) and not it.problems:
        return "modelled", tuple(out.shape), layer.param_count(), ""
    reason = str(unknown or (it.problems[0][0] if it.problems else "its output is not known"))
    return "unknown", None, None, reason


# ---- functional and tensor ops ---------------------------------------------------------------------------------------
# the tensors an op's probe reads: name -> (shape, dtype, role); activations require grad, parameters are leaves the
# optimizer owns (what an op saves of them is not an activation: neither the estimator nor the check counts it)
TENSORS: dict[str, tuple[tuple[int, ...], str, str]] = {
    "x": ((2, 3, 8), "float32", "activation"), "z": ((2, 3, 8), "float32", "activation"),
    "y": ((2, 8, 5), "float32", "activation"), "m": ((8, 8), "float32", "activation"),
    "v": ((8,), "float32", "activation"), "l": ((4, 10), "float32", "activation"),
    "img": ((2, 4, 6, 6), "float32", "activation"), "q": ((2, 2, 5, 8), "float32", "activation"),
    "c": ((2, 3, 8), "bool", "data"), "i": ((2, 3), "int64", "data"), "t": ((4,), "int64", "data"),
    "w": ((5, 8), "float32", "parameter"), "b": ((5,), "float32", "parameter"), "g": ((8,), "float32", "parameter"),
    "e": ((10, 8), "float32", "parameter"), "k": ((4, 4, 3, 3), "float32", "parameter"),
}
# (the op as written, the probe expression, the shape rule); `x` is a (2, 3, 8) activation, the others as TENSORS says
OPS: tuple[tuple[str, str, str], ...] = (
    # torch.nn.functional
    *((f"F.{a}", f"F.{a}(x)", "the input's") for a in ("relu", "relu6", "gelu", "silu", "mish", "elu", "leaky_relu", "softplus",
                                                        "hardswish", "hardsigmoid", "selu", "celu", "tanh", "sigmoid", "logsigmoid",
                                                        "hardtanh", "softsign", "tanhshrink")),
    ("F.softmax", "F.softmax(x, dim=-1)", "the input's"), ("F.log_softmax", "F.log_softmax(x, dim=-1)", "the input's"),
    ("F.dropout", "F.dropout(x, 0.1)", "the input's"), ("F.linear", "F.linear(x, w, b)", "(*x[:-1], w[0])"),
    ("F.embedding", "F.embedding(i, e)", "(*i, e[1])"), ("F.layer_norm", "F.layer_norm(x, (8,), g)", "the input's"),
    ("F.rms_norm", "F.rms_norm(x, (8,), g)", "the input's"), ("F.group_norm", "F.group_norm(img, 2)", "the input's"),
    ("F.normalize", "F.normalize(x, dim=-1)", "the input's"), ("F.pad", "F.pad(x, (1, 2))", "last dims grown by the padding"),
    ("F.one_hot", "F.one_hot(i, 8)", "(*i, num_classes)"), ("F.interpolate", "F.interpolate(img, scale_factor=2)", "spatial dims scaled"),
    ("F.max_pool2d", "F.max_pool2d(img, 2)", "pooling arithmetic"), ("F.avg_pool2d", "F.avg_pool2d(img, 2)", "pooling arithmetic"),
    ("F.adaptive_avg_pool2d", "F.adaptive_avg_pool2d(img, 1)", "(N, C, *output_size)"),
    ("F.adaptive_max_pool2d", "F.adaptive_max_pool2d(img, 1)", "(N, C, *output_size)"),
    ("F.scaled_dot_product_attention", "F.scaled_dot_product_attention(q, q, q, is_causal=True)", "(*q[:-1], v[-1])"),
    ("F.cross_entropy", "F.cross_entropy(l, t)", "() (mean)"), ("F.nll_loss", "F.nll_loss(l, t)", "() (mean)"),
    ("F.mse_loss", "F.mse_loss(x, z)", "() (mean)"), ("F.l1_loss", "F.l1_loss(x, z)", "() (mean)"),
    ("F.smooth_l1_loss", "F.smooth_l1_loss(x, z)", "() (mean)"),
    ("F.binary_cross_entropy_with_logits", "F.binary_cross_entropy_with_logits(x, z)", "() (mean)"),
    ("F.conv1d", "F.conv1d(x, torch.randn(4, 3, 3))", "convolution arithmetic"), ("F.conv2d", "F.conv2d(img, k)", "convolution arithmetic"),
    ("F.conv_transpose2d", "F.conv_transpose2d(img, k)", "convolution arithmetic"), ("F.unfold", "F.unfold(img, 2)", "(N, C*k*k, L)"),
    ("F.cosine_similarity", "F.cosine_similarity(x, z)", "the input's without `dim`"),
    ("F.glu", "F.glu(x)", "the last dim halved"), ("F.pixel_shuffle", "F.pixel_shuffle(img, 2)", "(N, C/r^2, H*r, W*r)"),
    # torch.*: creation
    ("torch.zeros", "torch.zeros(2, 3)", "the sizes"), ("torch.ones", "torch.ones(2, 3)", "the sizes"),
    ("torch.randn", "torch.randn(2, 3)", "the sizes"), ("torch.empty", "torch.empty(2, 3)", "the sizes"),
    ("torch.full", "torch.full((2, 3), 1.0)", "the sizes"), ("torch.arange", "torch.arange(8)", "(len(range),)"),
    ("torch.zeros_like", "torch.zeros_like(x)", "the input's"), ("torch.randint", "torch.randint(0, 8, (2, 3))", "the sizes"),
    ("torch.tensor", "torch.tensor([[1.0, 2.0], [3.0, 4.0]])", "the literal's"),
    ("torch.eye", "torch.eye(3)", "(n, n)"), ("torch.linspace", "torch.linspace(0, 1, 5)", "(steps,)"),
    # torch.*: joining, slicing, views
    ("torch.cat", "torch.cat([x, z], dim=1)", "the sizes along dim summed"), ("torch.stack", "torch.stack([x, z])", "a new dim of len(tensors)"),
    ("torch.flatten", "torch.flatten(x, 1)", "dims from start_dim multiplied"), ("torch.transpose", "torch.transpose(x, 1, 2)", "two dims swapped"),
    ("torch.permute", "torch.permute(x, (0, 2, 1))", "dims reordered"), ("torch.reshape", "torch.reshape(x, (6, 8))", "the sizes (-1 inferred)"),
    ("torch.chunk", "torch.chunk(x, 2, -1)", "dim split in chunks"), ("torch.split", "torch.split(x, 4, -1)", "dim split by size"),
    ("torch.unsqueeze", "torch.unsqueeze(x, 0)", "a dim of 1 inserted"), ("torch.squeeze", "torch.squeeze(torch.unsqueeze(x, 0), 0)", "dims of 1 removed"),
    ("torch.tril", "torch.tril(m)", "the input's"), ("torch.triu", "torch.triu(m)", "the input's"),
    ("torch.where", "torch.where(c, x, z)", "the inputs broadcast"), ("torch.gather", "torch.gather(x, 2, i.unsqueeze(-1))", "the index's"),
    ("torch.index_select", "torch.index_select(x, 2, t)", "dim resized to the index's length"),
    ("torch.roll", "torch.roll(x, 1, -1)", "the input's"),
    # torch.*: elementwise and matmul
    *((f"torch.{a}", f"torch.{a}(x, z)", "the inputs broadcast") for a in ("add", "sub", "mul", "div", "maximum", "minimum")),
    *((f"torch.{a}", f"torch.{a}(x)", "the input's") for a in ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "sin", "cos",
                                                                "neg", "erf", "square", "sign", "floor", "round")),
    ("torch.clamp", "torch.clamp(x, min=0.0)", "the input's"), ("torch.pow", "torch.pow(x, 2)", "the input's"),
    ("torch.matmul", "torch.matmul(x, y)", "batch dims broadcast, (.., n, k) @ (.., k, m)"), ("torch.bmm", "torch.bmm(x, y)", "(b, n, m)"),
    ("torch.mm", "torch.mm(m, m)", "(n, m)"), ("torch.einsum", "torch.einsum('bij,bjk->bik', x, y)", "the output subscripts"),
    ("torch.outer", "torch.outer(v, v)", "(n, m)"), ("torch.baddbmm", "torch.baddbmm(torch.zeros(2, 3, 5), x, y)", "(b, n, m)"),
    # torch.*: reductions
    ("torch.sum", "torch.sum(x, -1)", "dim removed (kept with keepdim)"), ("torch.mean", "torch.mean(x, dim=1)", "dim removed (kept with keepdim)"),
    ("torch.amax", "torch.amax(x, -1)", "dim removed"), ("torch.max", "torch.max(x, dim=-1)", "(values, indices), dim removed"),
    ("torch.logsumexp", "torch.logsumexp(x, -1)", "dim removed"), ("torch.var", "torch.var(x, -1)", "dim removed"),
    ("torch.std", "torch.std(x, -1)", "dim removed"), ("torch.norm", "torch.norm(x, dim=-1)", "dim removed"),
    ("torch.argmax", "torch.argmax(x, -1)", "dim removed (int64)"), ("torch.cumsum", "torch.cumsum(x, -1)", "the input's"),
    ("torch.topk", "torch.topk(x, 2)", "(values, indices), last dim k"), ("torch.sort", "torch.sort(x, -1)", "(values, indices)"),
    # Tensor methods
    ("Tensor.view", "x.view(6, 8)", "the sizes (-1 inferred)"), ("Tensor.reshape", "x.reshape(-1, 8)", "the sizes (-1 inferred)"),
    ("Tensor.transpose", "x.transpose(1, 2)", "two dims swapped"), ("Tensor.permute", "x.permute(0, 2, 1)", "dims reordered"),
    ("Tensor.contiguous", "x.transpose(1, 2).contiguous()", "the input's (a copy when not contiguous)"),
    ("Tensor.unsqueeze", "x.unsqueeze(1)", "a dim of 1 inserted"), ("Tensor.expand", "x.unsqueeze(0).expand(4, -1, -1, -1)", "the sizes (-1 kept)"),
    ("Tensor.repeat", "x.repeat(1, 2, 1)", "each dim times its count"), ("Tensor.flatten", "x.flatten(1)", "dims from start_dim multiplied"),
    ("Tensor.chunk", "x.chunk(2, -1)", "dim split in chunks"), ("Tensor.split", "x.split(4, -1)", "dim split by size"),
    ("Tensor.narrow", "x.narrow(1, 0, 2)", "dim cut to length"), ("Tensor.unbind", "x.unbind(0)", "one dim removed, a tuple"),
    ("Tensor.sum", "x.sum(-1)", "dim removed (kept with keepdim)"), ("Tensor.mean", "x.mean()", "()"), ("Tensor.max", "x.max(-1)", "(values, indices)"),
    ("Tensor.softmax", "x.softmax(-1)", "the input's"), ("Tensor.masked_fill", "x.masked_fill(c, 0.0)", "the input's"),
    ("Tensor.float", "x.half().float()", "the input's, float32"), ("Tensor.half", "x.half()", "the input's, float16"),
    ("Tensor.to", "x.to(torch.bfloat16)", "the input's, the dtype"), ("Tensor.clone", "x.clone()", "the input's"),
    ("Tensor.detach", "x.detach()", "the input's (no grad)"), ("Tensor.pow", "x.pow(2)", "the input's"), ("Tensor.sqrt", "x.sqrt()", "the input's"),
    ("Tensor.exp", "x.exp()", "the input's"), ("Tensor.eq", "x.eq(z)", "the inputs broadcast, bool"), ("Tensor.gt", "x.gt(0)", "the input's, bool"),
    ("Tensor.norm", "x.norm(dim=-1)", "dim removed"), ("Tensor.var", "x.var(-1)", "dim removed"), ("Tensor.argmax", "x.argmax(-1)", "dim removed"),
    ("Tensor.new_zeros", "x.new_zeros(2, 3)", "the sizes"), ("Tensor.type_as", "x.type_as(z)", "the input's"), ("Tensor.t", "m.t()", "(m, n)"),
    ("Tensor.index_select", "x.index_select(2, t)", "dim resized to the index's length"), ("Tensor.gather", "x.gather(2, i.unsqueeze(-1))", "the index's"),
    ("Tensor.cumsum", "x.cumsum(-1)", "the input's"), ("Tensor.sort", "x.sort(-1)", "(values, indices)"),
    ("Tensor.masked_fill_", "x.clone().masked_fill_(c, 0.0)", "the input's (in place)"), ("Tensor.add_", "x.clone().add_(z)", "the input's (in place)"),
    ("x @ y", "x @ y", "as torch.matmul"), ("x + z", "x + z", "the inputs broadcast"), ("x * z", "x * z", "the inputs broadcast"),
    ("x / 2", "x / 2", "the input's"), ("x ** 2", "x ** 2", "the input's"), ("x[:, 1:]", "x[:, 1:]", "the slice's"),
    ("x[..., None]", "x[..., None]", "a dim of 1 inserted"), ("x[i]", "x[t % 2]", "the index's, then the rest"),
)


# ops whose saved tensors on the meta device are not what the estimator models, and why (the check skips their bytes)
META_DIFFERS = {
    "F.scaled_dot_product_attention": "saved bytes not compared: the meta device runs the math path; the estimator models "
                                      "CUDA's fused kernels and the scores the CPU's backward materialises",
}


def probe_op(expr: str) -> tuple[str, tuple[int, ...] | None, str, int, str]:
    """(status, output shape, output dtype, bytes it saves for backward, note) of one op expression as the estimator
    reads it inside a forward (the tensors of TENSORS bound; the saved bytes are activations', parameters' excluded,
    each storage once)."""
    from torch_preflight.core.parse import parse
    from torch_preflight.core.semantic import build
    from torch_preflight.core.source import SourceText
    from torch_preflight.estimator.interp import Interpreter
    from torch_preflight.estimator.record import Recorder
    from torch_preflight.estimator.values import Module, Tensor

    text = f"import torch\nimport torch.nn.functional as F\nout = {expr}\n"
    source = SourceText(text)
    model = build(parse(source).tree, source, "probe.py")
    it = Interpreter(model, model.tree, device="cpu")
    owner = Module("Probe", 0, 0, params={n: s for n, (s, _, role) in TENSORS.items() if role == "parameter"})
    for name, (shape, dtype, role) in TENSORS.items():
        it.globals.vars[name] = t = Tensor(shape, dtype, requires_grad=role == "activation", is_param=role == "parameter")
        if role == "parameter":
            t._owner = owner  # type: ignore[attr-defined]  # as a layer's parameter: its gradient is the layer's
    it.recorder, it.forward_depth = Recorder(), 1
    it.exec_block(model.tree.body, it.globals)  # type: ignore[union-attr]
    out = it.globals.vars.get("out")
    first = out[0] if isinstance(out, (tuple, list)) and out else out
    if not isinstance(first, Tensor) or it.problems:
        return "unknown", None, "", 0, str(it.problems[0][0] if it.problems else f"`{expr}` gives a value the estimator does not know")
    saved = {sid: size for op in it.recorder.ops for sid, size in op.saved}
    return "modelled", tuple(first.shape), first.dtype, sum(saved.values()), ""


def op_rows() -> list[tuple[str, str, str, str, tuple[int, ...] | None, str, int, str]]:
    return [(name, expr, rule, *probe_op(expr)) for name, expr, rule in OPS]


def page() -> str:
    rows = [(name, *probe(name)) for name in TORCH_NN]
    modelled = [r for r in rows if r[1] == "modelled"]
    unknown = [r for r in rows if r[1] == "unknown"]
    ops = op_rows()
    ops_modelled = sum(1 for r in ops if r[3] == "modelled")
    lines = [
        "# Estimator coverage of torch.nn and of the common ops",
        "",
        "Generated by `python bench/vram/coverage.py --write` (a test checks it is fresh).",
        "",
        "## torch.nn layers",
        "",
        "Each module class of torch.nn",
        "(torch 2.13) is built with representative arguments and called on a representative input in a tiny script that",
        "the estimator interprets. **modelled**: its parameters and output shape are known (and, in the dev venv, equal",
        "torch's on the meta device: tests/test_estimator_coverage.py). **unknown**: the estimator lists the layer by",
        "name with this reason, and the estimate of a model that uses it is a lower bound (`Peak at least ...`, exit 3).",
        "",
        f"{len(modelled)} modelled, {len(unknown)} reported as unknown, {len(rows) - len(modelled) - len(unknown)} base classes "
        "and containers.",
        "",
        "| torch.nn | status | probe output | parameters | note |",
        "|---|---|---|---:|---|",
    ]
    for name, status, shape, count, note in rows:
        shown = "x".join(str(d) for d in shape) if shape is not None else ""
        lines.append(f"| {name} | {status} | {shown} | {count if count is not None else ''} | {note} |")
    lines += [
        "",
        "## Functional and tensor ops",
        "",
        "Each op is evaluated inside a forward on the tensors below, as the estimator reads model code. **modelled**: its",
        "output shape and dtype are known, and so are the bytes it saves for backward (activations only: what it saves of",
        "a parameter is the parameter itself; each storage once); in the dev venv both equal torch's on the meta device,",
        "the saved tensors read with `torch.autograd.graph.saved_tensors_hooks` (tests/test_estimator_coverage.py).",
        "**unknown**: the estimator names the op with this reason, and the estimate is a lower bound.",
        "",
        "Tensors: " + ", ".join(f"`{n}` {'x'.join(map(str, s)) or '()'} {d}{' (parameter)' if r == 'parameter' else ''}"
                                for n, (s, d, r) in TENSORS.items()) + ".",
        "",
        f"{ops_modelled} modelled, {len(ops) - ops_modelled} reported as unknown.",
        "",
        "| op | probe | shape rule | status | output | saved for backward | note |",
        "|---|---|---|---|---|---:|---|",
    ]
    for name, expr, rule, status, shape, dtype, saved, note in ops:
        note = note or META_DIFFERS.get(name, "")
        shown = ("x".join(str(d) for d in shape) or "()") + f" {dtype}" if shape is not None else ""
        cell = f"{saved:,} B" if status == "modelled" else ""
        lines.append(f"| {name.replace('|', '&#124;')} | `{expr}` | {rule} | {status} | {shown} | {cell} | {note.replace('|', '&#124;')} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    text = page()
    if args.write:
        PAGE.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
