"""Memory-report data types: what the VRAM estimator produces and rules/front ends read.

Plain frozen dataclasses in the core layer, so that rules (which may not import the
estimator) and the language server can consume a report. Lines and columns are 0-based here;
`MemoryReport.to_json` gives them 1-based, as the CLI's other JSON (`check --format json`) does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from torch_preflight.core.source import Span

BREAKDOWN_KEYS = ("parameters", "gradients", "optimizer_state", "activations", "other")


@dataclass(frozen=True)
class LayerEstimate:
    name: str  # dotted path inside the model, e.g. "blocks.0.attn.c_attn"
    type: str  # "Linear", "Conv2d", a user class name, ...
    line: int  # 0-based line of the layer's construction in __init__
    col: int
    params: int
    param_bytes: int
    activation_bytes: int | None  # bytes autograd saves for this layer in one step; None when unknown
    output_shape: tuple[str | int, ...] | None = None
    file: str | None = None  # set when the layer is built in another file (a model class from the user's module): line/col are there
    unknown: str | None = None  # why this layer's memory is not known (its size or its forward); None when it is


@dataclass(frozen=True)
class Assumption:
    text: str  # e.g. "batch_size=64 from train.py:12"
    line: int | None = None  # 0-based source line it came from, None for a default


@dataclass(frozen=True)
class Suggestion:
    remedy: str  # e.g. "bf16 autocast"
    peak_bytes: int  # the estimated peak after applying it
    note: str = ""


@dataclass(frozen=True)
class MemoryReport:
    model: str  # the class name of the model
    model_line: int  # 0-based line of the instantiation site, or of the class definition
    peak_bytes: int
    breakdown: dict[str, int]  # keys: BREAKDOWN_KEYS
    layers: tuple[LayerEstimate, ...]
    assumptions: tuple[Assumption, ...]
    suggestions: tuple[Suggestion, ...]
    complete: bool  # False when any part of the model or step could not be read
    budget_bytes: int | None = None
    fits: bool | None = None
    max_batch_size: int | None = None
    device: str = "cuda"
    model_col: int = 0
    overhead_bytes: int = 0  # what nvidia-smi shows on top of peak_bytes (CUDA context + allocator reserve)
    # what could not be read (a layer, a value, a call, an internal error): when any, peak_bytes is only a lower bound
    unknowns: tuple[Assumption, ...] = ()
    phase: str = ""  # where the peak is: forward | backward | step
    saved_activation_bytes: int | None = None  # all that forward saves for backward (the table's column summed)

    @property
    def unknown_layers(self) -> tuple[LayerEstimate, ...]:
        return tuple(layer for layer in self.layers if layer.unknown)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON: lines and columns 1-based; `peak_is_lower_bound` when anything is unknown."""
        data = asdict(self)
        data["model_line"] += 1
        data["model_col"] += 1
        data["layers"] = [
            {**layer, "line": layer["line"] + 1, "col": layer["col"] + 1,
             "output_shape": list(layer["output_shape"]) if layer["output_shape"] is not None else None}
            for layer in data["layers"]
        ]
        for item in (*data["assumptions"], *data["unknowns"]):
            if item["line"] is not None:
                item["line"] += 1
        data["peak_is_lower_bound"] = not self.complete
        return data


@dataclass(frozen=True)
class ShapeStep:
    """One layer or op on the way to a shape mismatch (`conv2`, `max_pool2d`, `flatten`)."""

    label: str
    span: Span  # code-point positions: the layer's construction in __init__, or the op's call
    detail: str = ""  # e.g. "16×4×4 = 256" for a flatten that produced the mismatching dimension


@dataclass(frozen=True)
class ShapeMismatch:
    """A layer or op that static shape propagation proves receives an incompatible tensor (TPF501)."""

    kind: str  # linear, conv, norm, rnn, attention, cat, broadcast, view
    layer: str  # consumer: the layer's dotted name ("fc1", "features.3") or the op ("torch.cat", "+", "view")
    type: str  # "Linear", "Conv2d", "cat", "+", "view", ...
    span: Span  # where to report: the consumer layer's construction, or the op's call in forward()
    expected: str  # what the consumer was built for, e.g. "in_features=400"
    actual: str  # what it receives, e.g. "256"
    input_shape: tuple[int, ...] | None  # the consumer's input shape (first operand for ops)
    path: tuple[ShapeStep, ...] = ()  # the layers/ops since the last layer with weights, in order
    detail: str = ""  # how `actual` came about, e.g. "16×4×4 = 256"
    fix_span: Span | None = None  # the single in_features/in_channels literal to replace, when that is the cause
    fix_value: int | None = None  # the propagated value to put there


def format_bytes(n: int | float | None) -> str:
    """1536 -> '1.5 KiB' (binary units)."""
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover


__all__ = ["BREAKDOWN_KEYS", "Assumption", "LayerEstimate", "MemoryReport", "ShapeMismatch", "ShapeStep", "Suggestion", "format_bytes"]
