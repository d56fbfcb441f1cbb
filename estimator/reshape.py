"""Shape rules of layers and ops that move elements without weights: pixel (un)shuffle, padding, einops patterns.

Pure functions from shapes (and constructor arguments) to the output shape, or None when the input does not fit;
the interpreter records the op (a copy that autograd saves nothing for).
"""

from __future__ import annotations

import math
import re
from typing import Any

PAD_LAYERS = {f"{kind}Pad{d}d": d for kind in ("Reflection", "Replication", "Zero", "Constant", "Circular") for d in (1, 2, 3)}


def pixel_shuffle(shape: tuple[int, ...], r: Any, inverse: bool = False) -> tuple[int, ...] | None:
    """nn.PixelShuffle(r): (*, C·r², H, W) -> (*, C, H·r, W·r); PixelUnshuffle the other way."""
    if not isinstance(r, int) or r <= 0 or len(shape) < 3:
        return None
    *lead, c, h, w = shape
    if inverse:
        return (*lead, c * r * r, h // r, w // r) if h % r == 0 and w % r == 0 else None
    return (*lead, c // (r * r), h * r, w * r) if c % (r * r) == 0 else None


def padded(shape: tuple[int, ...], padding: Any, dims: int) -> tuple[int, ...] | None:
    """nn.ReflectionPad2d(padding) and its kin: an int pads every side of the last `dims` dimensions; a tuple
    is (left, right, top, bottom, front, back) from the last dimension backwards."""
    pads = (padding,) * (2 * dims) if isinstance(padding, int) else tuple(padding) if isinstance(padding, (tuple, list)) else None
    if pads is None or len(pads) != 2 * dims or not all(isinstance(p, int) for p in pads) or len(shape) < dims:
        return None
    out = list(shape)
    for i in range(dims):
        out[-1 - i] += pads[2 * i] + pads[2 * i + 1]
    return tuple(out)


def _groups(side: str) -> list[list[str]] | None:
    """'b c (h p1) (w p2)' -> [['b'], ['c'], ['h', 'p1'], ['w', 'p2']]; '1' is an axis of size 1."""
    groups: list[list[str]] = []
    for token in re.findall(r"\([^)]*\)|\S+", side):
        if token.startswith("("):
            groups.append(token[1:-1].split())
        elif token == "...":
            return None  # an ellipsis pattern is not modelled
        else:
            groups.append([token])
    return groups


def rearrange(shape: tuple[int, ...], pattern: str, sizes: dict[str, Any]) -> tuple[int, ...] | None:
    """einops.rearrange(x, pattern, **sizes): the output shape, or None when it cannot be read."""
    if not isinstance(pattern, str) or "->" not in pattern:
        return None
    left, right = (_groups(s) for s in pattern.split("->"))
    if left is None or right is None or len(left) != len(shape):
        return None
    known: dict[str, int] = {k: v for k, v in sizes.items() if isinstance(v, int)}
    for group, dim in zip(left, shape, strict=True):
        names = [n for n in group if n != "1"]
        missing = [n for n in names if n not in known]
        rest = math.prod(known[n] for n in names if n in known)
        if len(missing) > 1 or (missing and (rest == 0 or dim % rest)):
            return None
        if missing:
            known[missing[0]] = dim // rest
        elif rest != dim:
            return None
    try:
        return tuple(math.prod(known[n] if n != "1" else 1 for n in group) for group in right)
    except KeyError:
        return None
