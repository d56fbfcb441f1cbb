"""The layer catalog: constructor signatures and exact parameter/buffer shapes of torch.nn layers.

`build_layer("Linear", args, kwargs)` returns the parameter shapes torch would create. The counts
are pinned by tests computed by hand; nothing here imports torch.
"""

from __future__ import annotations

import math
from typing import Any

from torch_preflight.estimator.values import Unknown

# positional parameter names and defaults, as in torch.nn
SIGNATURES: dict[str, tuple[tuple[str, Any], ...]] = {
    "Linear": (("in_features", None), ("out_features", None), ("bias", True)),
    "LazyLinear": (("out_features", None), ("bias", True)),
    "Bilinear": (("in1_features", None), ("in2_features", None), ("out_features", None), ("bias", True)),
    **{
        f"Conv{d}d": (("in_channels", None), ("out_channels", None), ("kernel_size", None), ("stride", 1), ("padding", 0),
                      ("dilation", 1), ("groups", 1), ("bias", True), ("padding_mode", "zeros"))
        for d in (1, 2, 3)
    },
    **{
        f"ConvTranspose{d}d": (("in_channels", None), ("out_channels", None), ("kernel_size", None), ("stride", 1), ("padding", 0),
                               ("output_padding", 0), ("groups", 1), ("bias", True), ("dilation", 1))
        for d in (1, 2, 3)
    },
    **{f"BatchNorm{d}d": (("num_features", None), ("eps", 1e-5), ("momentum", 0.1), ("affine", True), ("track_running_stats", True)) for d in (1, 2, 3)},
    **{f"InstanceNorm{d}d": (("num_features", None), ("eps", 1e-5), ("momentum", 0.1), ("affine", False), ("track_running_stats", False)) for d in (1, 2, 3)},
    "LayerNorm": (("normalized_shape", None), ("eps", 1e-5), ("elementwise_affine", True), ("bias", True)),
    "GroupNorm": (("num_groups", None), ("num_channels", None), ("eps", 1e-5), ("affine", True)),
    "RMSNorm": (("normalized_shape", None), ("eps", None), ("elementwise_affine", True)),
    "Embedding": (("num_embeddings", None), ("embedding_dim", None), ("padding_idx", None), ("max_norm", None)),
    "EmbeddingBag": (("num_embeddings", None), ("embedding_dim", None), ("max_norm", None), ("norm_type", 2.0),
                     ("scale_grad_by_freq", False), ("mode", "mean")),
    **{
        rnn: (("input_size", None), ("hidden_size", None), ("num_layers", 1), ("bias", True), ("batch_first", False),
              ("dropout", 0.0), ("bidirectional", False))
        for rnn in ("RNN", "LSTM", "GRU")
    },
    "LSTMCell": (("input_size", None), ("hidden_size", None), ("bias", True)),
    "GRUCell": (("input_size", None), ("hidden_size", None), ("bias", True)),
    "RNNCell": (("input_size", None), ("hidden_size", None), ("bias", True)),
    "MultiheadAttention": (("embed_dim", None), ("num_heads", None), ("dropout", 0.0), ("bias", True), ("add_bias_kv", False),
                           ("add_zero_attn", False), ("kdim", None), ("vdim", None), ("batch_first", False)),
    "TransformerEncoderLayer": (("d_model", None), ("nhead", None), ("dim_feedforward", 2048), ("dropout", 0.1),
                                ("activation", "relu"), ("layer_norm_eps", 1e-5), ("batch_first", False), ("norm_first", False), ("bias", True)),
    "TransformerDecoderLayer": (("d_model", None), ("nhead", None), ("dim_feedforward", 2048), ("dropout", 0.1),
                                ("activation", "relu"), ("layer_norm_eps", 1e-5), ("batch_first", False), ("norm_first", False), ("bias", True)),
    "TransformerEncoder": (("encoder_layer", None), ("num_layers", None), ("norm", None)),
    "TransformerDecoder": (("decoder_layer", None), ("num_layers", None), ("norm", None)),
    "Transformer": (("d_model", 512), ("nhead", 8), ("num_encoder_layers", 6), ("num_decoder_layers", 6), ("dim_feedforward", 2048),
                    ("dropout", 0.1), ("activation", "relu"), ("custom_encoder", None), ("custom_decoder", None),
                    ("layer_norm_eps", 1e-5), ("batch_first", False), ("norm_first", False), ("bias", True)),
    **{d: (("p", 0.5), ("inplace", False)) for d in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout")},
    **{a: (("inplace", False),) for a in ("ReLU", "ReLU6", "SiLU", "Hardswish", "Hardsigmoid", "Mish", "SELU", "CELU")},
    "LeakyReLU": (("negative_slope", 0.01), ("inplace", False)),
    "ELU": (("alpha", 1.0), ("inplace", False)),
    "GELU": (("approximate", "none"),),
    "PReLU": (("num_parameters", 1), ("init", 0.25)),
    "Softmax": (("dim", None),),
    "LogSoftmax": (("dim", None),),
    **{a: () for a in ("Tanh", "Sigmoid", "Softplus", "Identity", "Softsign", "Tanhshrink")},
    **{f"MaxPool{d}d": (("kernel_size", None), ("stride", None), ("padding", 0), ("dilation", 1), ("return_indices", False), ("ceil_mode", False)) for d in (1, 2, 3)},
    **{f"AvgPool{d}d": (("kernel_size", None), ("stride", None), ("padding", 0), ("ceil_mode", False)) for d in (1, 2, 3)},
    **{f"AdaptiveAvgPool{d}d": (("output_size", None),) for d in (1, 2, 3)},
    **{f"AdaptiveMaxPool{d}d": (("output_size", None), ("return_indices", False)) for d in (1, 2, 3)},
    "Upsample": (("size", None), ("scale_factor", None), ("mode", "nearest"), ("align_corners", None)),
    "Flatten": (("start_dim", 1), ("end_dim", -1)),
    "PixelShuffle": (("upscale_factor", None),),
    "PixelUnshuffle": (("downscale_factor", None),),
    **{f"{k}Pad{d}d": (("padding", None),) for k in ("Reflection", "Replication", "Zero", "Circular") for d in (1, 2, 3)},
    **{f"ConstantPad{d}d": (("padding", None), ("value", 0.0)) for d in (1, 2, 3)},
    "UpsamplingNearest2d": (("size", None), ("scale_factor", None)),
    "UpsamplingBilinear2d": (("size", None), ("scale_factor", None)),
    "Unflatten": (("dim", None), ("unflattened_size", None)),
    "CrossEntropyLoss": (("weight", None),),
    "NLLLoss": (("weight", None),),
    "MSELoss": (), "L1Loss": (), "SmoothL1Loss": (), "HuberLoss": (), "BCELoss": (("weight", None),),
    "BCEWithLogitsLoss": (("weight", None),), "KLDivLoss": (),
    "Sequential": (), "ModuleList": (("modules", None),), "ModuleDict": (("modules", None),),
}
LOSSES = {"CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss", "BCEWithLogitsLoss", "KLDivLoss"}
CONTAINERS = {"Sequential", "ModuleList", "ModuleDict"}


class CatalogError(ValueError):
    """A constructor argument the catalog needs is missing or not a number."""


def bind(kind: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Map positional and keyword arguments onto the layer's signature, with defaults."""
    sig = SIGNATURES.get(kind, ())
    bound: dict[str, Any] = {name: default for name, default in sig}
    for (name, _), value in zip(sig, args, strict=False):
        bound[name] = value
    bound.update(kwargs)
    return bound


def tup(value: Any, n: int) -> tuple[Any, ...]:
    if isinstance(value, (tuple, list)):
        return tuple(value) if len(value) == n else tuple(value) + (value[-1],) * (n - len(value))
    return (value,) * n


def _int(a: dict[str, Any], key: str) -> int:
    value = a.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        why = getattr(value, "reason", "") if isinstance(value, Unknown) else ""
        raise CatalogError(f"`{key}` is not a known integer" + (f" ({why})" if why else ""))
    return value


def _shape(value: Any) -> tuple[int, ...]:
    shape = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in shape):
        raise CatalogError("normalized_shape is not known")
    return shape


def layer_params(kind: str, a: dict[str, Any]) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[tuple[int, ...], str]]]:
    """Own parameter shapes and buffer (shape, dtype) of one catalog layer (not its sub-layers)."""
    p: dict[str, tuple[int, ...]] = {}
    b: dict[str, tuple[tuple[int, ...], str]] = {}
    if kind == "Linear":
        p["weight"] = (_int(a, "out_features"), _int(a, "in_features"))
        if a.get("bias", True):
            p["bias"] = (_int(a, "out_features"),)
    elif kind == "Bilinear":
        p["weight"] = (_int(a, "out_features"), _int(a, "in1_features"), _int(a, "in2_features"))
        if a.get("bias", True):
            p["bias"] = (_int(a, "out_features"),)
    elif kind.startswith(("Conv1d", "Conv2d", "Conv3d", "ConvTranspose")):
        d = int(kind[-2])
        k = tup(a.get("kernel_size"), d)
        if not all(isinstance(v, int) for v in k):
            raise CatalogError("`kernel_size` is not known")
        cin, cout, g = _int(a, "in_channels"), _int(a, "out_channels"), _int(a, "groups")
        if kind.startswith("ConvTranspose"):
            p["weight"] = (cin, cout // g, *k)
        else:
            p["weight"] = (cout, cin // g, *k)
        if a.get("bias", True):
            p["bias"] = (cout,)
    elif kind.startswith(("BatchNorm", "InstanceNorm")):
        c = _int(a, "num_features")
        if a.get("affine"):
            p["weight"], p["bias"] = (c,), (c,)
        if a.get("track_running_stats"):
            b["running_mean"], b["running_var"], b["num_batches_tracked"] = ((c,), "float32"), ((c,), "float32"), ((), "int64")
    elif kind == "LayerNorm":
        shape = _shape(a.get("normalized_shape"))
        if a.get("elementwise_affine", True):
            p["weight"] = shape
            if a.get("bias", True):
                p["bias"] = shape
    elif kind == "RMSNorm":
        shape = _shape(a.get("normalized_shape"))
        if a.get("elementwise_affine", True):
            p["weight"] = shape
    elif kind == "GroupNorm":
        c = _int(a, "num_channels")
        if a.get("affine", True):
            p["weight"], p["bias"] = (c,), (c,)
    elif kind in ("Embedding", "EmbeddingBag"):
        p["weight"] = (_int(a, "num_embeddings"), _int(a, "embedding_dim"))
    elif kind in ("RNN", "LSTM", "GRU"):
        gates = {"RNN": 1, "LSTM": 4, "GRU": 3}[kind]
        h, layers = _int(a, "hidden_size"), _int(a, "num_layers")
        proj = a.get("proj_size", 0) or 0
        dirs = 2 if a.get("bidirectional") else 1
        real_h = proj if proj else h
        for layer in range(layers):
            in_size = _int(a, "input_size") if layer == 0 else real_h * dirs
            for direction in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if direction else "")
                p["weight_ih" + sfx] = (gates * h, in_size)
                p["weight_hh" + sfx] = (gates * h, real_h)
                if a.get("bias", True):
                    p["bias_ih" + sfx] = (gates * h,)
                    p["bias_hh" + sfx] = (gates * h,)
                if proj:
                    p["weight_hr" + sfx] = (proj, h)
    elif kind in ("RNNCell", "LSTMCell", "GRUCell"):
        gates = {"RNNCell": 1, "LSTMCell": 4, "GRUCell": 3}[kind]
        h = _int(a, "hidden_size")
        p["weight_ih"], p["weight_hh"] = (gates * h, _int(a, "input_size")), (gates * h, h)
        if a.get("bias", True):
            p["bias_ih"], p["bias_hh"] = (gates * h,), (gates * h,)
    elif kind == "MultiheadAttention":
        e = _int(a, "embed_dim")
        kdim = a.get("kdim") or e
        vdim = a.get("vdim") or e
        if kdim == e and vdim == e:
            p["in_proj_weight"] = (3 * e, e)
        else:
            p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"] = (e, e), (e, kdim), (e, vdim)
        if a.get("bias", True):
            p["in_proj_bias"] = (3 * e,)
        if a.get("add_bias_kv"):
            p["bias_k"], p["bias_v"] = (1, 1, e), (1, 1, e)
    elif kind == "PReLU":
        p["weight"] = (_int(a, "num_parameters"),)
    return p, b


def count(shapes: dict[str, tuple[int, ...]]) -> int:
    return sum(math.prod(s) if s else 1 for s in shapes.values())


def conv_out(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def conv_transpose_out(size: int, k: int, s: int, p: int, d: int, op: int) -> int:
    return (size - 1) * s - 2 * p + d * (k - 1) + op + 1


def pool_out(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    num = size + 2 * p - d * (k - 1) - 1
    out = (-(-num // s) if ceil else num // s) + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out
