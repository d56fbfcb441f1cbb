"""Memory-report data types: what the VRAM estimator produces and rules/front ends read.

Plain frozen dataclasses in the core layer, so that rules (which may not import the
estimator) and the language server can consume a report. Lines and columns are 0-based.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

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

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["layers"] = [
            {**layer, "output_shape": list(layer["output_shape"]) if layer["output_shape"] is not None else None}
            for layer in data["layers"]
        ]
        return data


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


__all__ = ["BREAKDOWN_KEYS", "Assumption", "LayerEstimate", "MemoryReport", "Suggestion", "format_bytes"]
