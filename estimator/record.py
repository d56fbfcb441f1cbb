"""What the interpreter records of a training step, and the shape arithmetic the interpreter and the ops share.

Plain data and pure functions: `estimator.interp` (the interpreter) and `estimator.ops` (what torch calls do, a
registry the interpreter reads through `Ops`) both import this module and neither imports the other.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from torch_preflight.estimator.values import Module, Obj, Tensor

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter


class Ops(Protocol):
    """The torch semantics the interpreter dispatches to (estimator.ops; wired in by the estimator package)."""

    def call_qualified(self, it: Interpreter, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None,
                       line: int, col: int) -> Any: ...

    def call_method(self, it: Interpreter, obj: Any, name: str, args: list[Any], kwargs: dict[str, Any],
                    node: ast.AST | None) -> Any: ...

    def catalog_forward(self, it: Interpreter, mod: Module, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any: ...

    def container_base(self, mod: Module) -> str | None: ...


@dataclass
class Op:
    layer: str  # the module the op is attributed to
    saved: list[tuple[int, int]]  # (storage id, bytes) this op keeps for backward
    out_bytes: int  # its output (the gradient flowing back has this size)
    in_grad_bytes: int  # gradients it produces for its inputs
    params: list[tuple[int, int]]  # (param key, grad bytes) of parameters it uses
    transient: int = 0  # unsaved bytes live while it runs in forward (its output, extra buffers)
    recompute: int = 0  # activation checkpointing: bytes re-saved when its backward recomputes
    backward_transient: int = 0  # workspace its backward holds besides the incoming and produced grads
    cast_grad_bytes: int = 0  # grads of autocast weight casts it produces (converted to .grad after its backward)
    out_id: int = 0  # storage id of its output
    in_grads: list[tuple[int, int]] = field(default_factory=list)  # (storage id, bytes) of the inputs it produces grads for


@dataclass
class Recorder:
    ops: list[Op] = field(default_factory=list)
    saved: dict[int, tuple[int, str]] = field(default_factory=dict)  # storage id -> (bytes, first layer)
    stack: list[Module] = field(default_factory=list)
    models: list[Module] = field(default_factory=list)
    weight_casts: dict[int, Tensor] = field(default_factory=dict)
    autocast: str | None = None
    batch: list[Tensor] = field(default_factory=list)
    cublaslt: bool = False  # a GEMM of the step took cuBLASLt (addmm with a bias): its workspace is allocated
    # storage id -> (number of ops recorded when the last variable holding it was rebound or went out of scope,
    # bytes): a tensor a function keeps in a local variable (`emb = self.wte(idx)`) is live until then
    released: dict[int, tuple[int, int]] = field(default_factory=dict)
    line: int = -1  # 0-based line of the forward that started it


@dataclass
class Evaluation:
    """A forward of the model run under `torch.no_grad()` (an evaluation between training steps, `model.generate`):
    it saves nothing for backward, but each op's output is allocated while the next op reads it, next to whatever
    the training step still holds then (the gradients, until zero_grad sets them to None; the optimizer's state)."""
    model: Module
    grads_live: bool  # a backward ran before it and no zero_grad(set_to_none=True) since
    stepped: bool  # an optimizer step ran before it: its state is allocated
    inputs: int = 0  # the tensors passed to the forward, live throughout
    peak: int = 0  # the most bytes it holds at once
    # what is allocated while an op runs, as CPython frees it: the results of sub-expressions not yet consumed
    # (`0.5 * x * (1 + torch.tanh(...))` holds `0.5 * x` through the parenthesis), and the tensors bound to the
    # running frames' variables, (frame, name) -> (storage id, bytes)
    pending: list[tuple[int, int]] = field(default_factory=list)
    bound: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)
    prev: tuple[int, int] = (0, 0)  # the previous op's output: the input of the next (a Sequential's layers)

    def op(self, out_id: int, out_bytes: int, extra: int) -> None:
        live = dict([self.prev, *self.pending])
        live.update(self.bound.values())
        live[out_id] = out_bytes
        self.peak = max(self.peak, self.inputs + sum(live.values()) + extra)
        self.prev = (out_id, out_bytes)


@dataclass
class StepRecord:
    recorder: Recorder
    loss: Tensor | None
    line: int
    autocast: str | None
    batch: list[Tensor] = field(default_factory=list)
    held: list[tuple[int, int]] = field(default_factory=list)  # (storage id, bytes) of forward outputs the script still holds
    grads_live: bool = False  # an earlier backward's gradients are still allocated (a second loss of the same step)


def broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    out: list[int] = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))


def promote(a: str, b: str) -> str:
    order = ["bool", "uint8", "int8", "int16", "int32", "int64", "bfloat16", "float16", "float32", "float64"]
    if {a, b} == {"bfloat16", "float16"}:
        return "float32"
    return a if order.index(a) >= order.index(b) else b


def norm_dim(d: int, n: int) -> int:
    return d + n if d < 0 else d


def dims_of(args: list[Any]) -> list[Any]:
    """`view(2, 3)`, `view((2, 3))` and `view(x.shape)` alike: the list of sizes."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return list(args[0])
    if len(args) == 1 and isinstance(args[0], Obj) and args[0].type == "shape":
        return list(args[0].attrs["dims"])
    return list(args)
