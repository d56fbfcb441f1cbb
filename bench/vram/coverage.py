"""Which torch.nn layers the estimator models: probe each through the estimator and write docs/estimator-coverage.md.

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


def page() -> str:
    rows = [(name, *probe(name)) for name in TORCH_NN]
    modelled = [r for r in rows if r[1] == "modelled"]
    unknown = [r for r in rows if r[1] == "unknown"]
    lines = [
        "# Estimator coverage of torch.nn",
        "",
        "Generated by `python bench/vram/coverage.py --write` (a test checks it is fresh). Each module class of torch.nn",
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
