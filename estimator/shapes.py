"""Static shape checking (TPF501) on top of the interpreter's shape propagation.

`check_shapes(model, tree)` runs the file's script with a `ShapeChecker` attached to the
interpreter: every layer that is built for a given input size (Linear, Conv, BatchNorm,
LSTM/GRU/RNN, MultiheadAttention) and every `torch.cat`, broadcasting operator and
`view`/`reshape` compares what it receives with what it needs. A mismatch is kept only when
nothing it depends on was guessed: no unknown branch, no default dataset shape, no problem
earlier in the same forward, no layer built from arguments that could not be read.

Mismatches that the layers alone decide (a `Linear(784, 256)` followed by a `Linear(128,
10)`) need no input: each model is also run on two different probe inputs sized for its first
layer, and only a mismatch both probes hit identically is kept, so nothing that depends on
the (unknown) batch or spatial size is reported.
"""

from __future__ import annotations

import ast
import math
from dataclasses import replace
from typing import Any

from torch_preflight.core.memory import ShapeMismatch, ShapeStep
from torch_preflight.core.semantic import ModuleModel
from torch_preflight.core.source import Span
from torch_preflight.estimator.interp import Interpreter
from torch_preflight.estimator.scope import Budget
from torch_preflight.estimator.values import MethodRef, Module, Qualified, Tensor

__all__ = ["ShapeChecker", "check_shapes"]

_CONTAINERS = {"Sequential", "ModuleList", "ModuleDict", "TransformerEncoder", "TransformerDecoder", "Transformer"}
_QUIET_OPS = {"contiguous", "to", "float", "half", "bfloat16", "double", "cuda", "cpu", "clone", "detach", "type_as",
              "requires_grad_", "compile"}
PROBE = "<probe input>"
_FLATTENING = {"flatten", "view", "reshape", "Flatten"}


def _dims(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def flatten_detail(before: tuple[int, ...], after: tuple[int, ...]) -> str:
    """`16×4×4 = 256` when the last dim of `after` is the product of several trailing dims of `before`."""
    if not after or len(after) >= len(before):
        return ""
    last = after[-1]
    for k in range(len(before) - 1):
        tail = before[k:]
        if len(tail) > 1 and math.prod(tail) == last:
            return "×".join(str(d) for d in tail) + f" = {last}"
    return ""


class ShapeChecker:
    def __init__(self, it: Interpreter) -> None:
        self.it = it
        self.source = it.model.source
        self.found: list[ShapeMismatch] = []
        self.probe_wrong = False  # a check failed on the raw probe input: the probe was sized wrongly

    # ---- positions and labels -------------------------------------------------------------------
    def span(self, line: int, col: int, end: tuple[int, int] | None) -> Span:
        try:
            c = self.source.char_col(line, col)
            if end is None:
                return Span.of(line, c, line, c)
            return Span.of(line, c, end[0], self.source.char_col(end[0], end[1]))
        except (IndexError, ValueError):
            return Span.of(line, 0, line, 0)

    def node_span(self, node: ast.AST | None) -> Span | None:
        if node is None or not hasattr(node, "lineno"):
            return None
        line = node.lineno - 1  # type: ignore[attr-defined]
        end = ((getattr(node, "end_lineno", None) or line + 1) - 1, getattr(node, "end_col_offset", None) or 0)
        return self.span(line, node.col_offset, end)  # type: ignore[attr-defined]

    def mod_span(self, mod: Module) -> Span:
        return self.span(mod.line, mod.col, mod.end)

    @staticmethod
    def label(mod: Module) -> str:
        if mod.path and not all(part.isdigit() for part in mod.path.split(".")):
            return mod.path
        if mod.path:
            return f"{mod.type}[{mod.path}]"
        return mod.type

    def note(self, ok: bool, t: Tensor) -> None:
        if not ok and t.trail and t.trail[0].label == PROBE:
            self.probe_wrong = True

    # ---- certainty -------------------------------------------------------------------------------
    def certain(self, tensors: list[Tensor], consumer: Module | None = None) -> bool:
        it = self.it
        if it.forward_depth <= 0 or it.fwd_doubt or it.fwd_guessed:
            return False
        if any(t.guessed for t in tensors):
            return False
        if consumer is not None and consumer.doubtful:
            return False
        return not any(m.doubtful for m in it.mstack)

    # ---- forward bookkeeping (called by the interpreter) -------------------------------------------
    def enter(self, mod: Module, args: list[Any], kwargs: dict[str, Any]) -> None:
        it = self.it
        it.fwd_doubt = 0
        inputs = [a for a in [*args, *kwargs.values()] if isinstance(a, Tensor)]
        it.fwd_guessed = it.guessing > 0 or any(t.guessed for t in inputs)
        for name, m in mod.walk():
            if not m.path:
                m.path = name

    def leave(self, mod: Module, args: list[Any], kwargs: dict[str, Any], out: Any, top: bool) -> None:
        outs = [o for o in (out if isinstance(out, tuple) else (out,)) if isinstance(o, Tensor)]
        if not outs:
            return
        first = outs[0]
        x = next((a for a in [*args, *kwargs.values()] if isinstance(a, Tensor)), None)
        if mod.type not in _CONTAINERS and first is not x:
            step = ShapeStep(self.label(mod), self.mod_span(mod),
                             flatten_detail(x.shape, first.shape) if x is not None and mod.type == "Flatten" else "")
            if mod.catalog and not mod.params and x is not None:
                first.trail = (*x.trail, step)  # a layer without weights: the path goes on
            else:
                first.trail = (step,)
        if top and (self.it.fwd_doubt or self.it.fwd_guessed):
            for o in outs:
                o.guessed = True

    def follow(self, func: Any, args: list[Any], out: Any, node: ast.AST) -> None:
        """After a torch function or tensor method: extend the path and carry the guessed flag."""
        if isinstance(func, MethodRef):
            if not isinstance(func.obj, Tensor):
                return
            x: Tensor | None = func.obj
            name = func.name
        elif isinstance(func, Qualified) and func.name.startswith(("torch.", "F.")):
            flat = [t for a in args for t in (a if isinstance(a, (list, tuple)) else (a,))]
            x = next((t for t in flat if isinstance(t, Tensor)), None)
            name = func.name.rsplit(".", 1)[-1]
        else:
            return
        if x is None:
            return
        flat_args = [t for a in args for t in (a if isinstance(a, (list, tuple)) else (a,)) if isinstance(t, Tensor)]
        guessed = x.guessed or any(t.guessed for t in flat_args)
        outs = [o for o in (out if isinstance(out, tuple) else (out,)) if isinstance(o, Tensor)]
        for o in outs:
            if o is x:
                continue
            o.guessed = o.guessed or guessed
            if name in _QUIET_OPS:
                o.trail = x.trail
                continue
            span = self.node_span(node)
            detail = flatten_detail(x.shape, o.shape) if name in _FLATTENING else ""
            o.trail = (*x.trail, ShapeStep(name, span, detail)) if span is not None else x.trail

    # ---- checks -----------------------------------------------------------------------------------
    def _add(self, kind: str, layer: str, type_: str, span: Span, expected: str, actual: str, x: Tensor | None,
             fix_span: Span | None = None, fix_value: int | None = None) -> None:
        trail = x.trail if x is not None else ()
        detail = trail[-1].detail if trail else ""
        found = ShapeMismatch(kind, layer, type_, span, expected, actual, x.shape if x is not None else None, tuple(trail), detail,
                              fix_span, fix_value)
        if not any((f.span, f.kind, f.expected, f.actual) == (found.span, found.kind, found.expected, found.actual) for f in self.found):
            self.found.append(found)

    def layer(self, mod: Module, x: Tensor, args: list[Any], kwargs: dict[str, Any]) -> bool:
        """Check a layer's input; False when it does not fit (reported when certain)."""
        kind, a = mod.type, mod.args
        rank = len(x.shape)
        checks: list[tuple[str, str, Any, int | None, Tensor]] = []  # (kind, parameter, expected, dim or None for rank, input)
        if kind == "Linear":
            checks.append(("linear", "in_features", a.get("in_features"), -1 if rank >= 1 else None, x))
        elif kind.startswith(("Conv1d", "Conv2d", "Conv3d", "ConvTranspose")):
            d = int(kind[-2])
            checks.append(("conv", "in_channels", a.get("in_channels"), -(d + 1) if rank in (d + 1, d + 2) else None, x))
        elif kind.startswith("BatchNorm"):
            d = int(kind[-2])
            ok_rank = rank in ((2, 3) if d == 1 else (d + 2,))
            checks.append(("norm", "num_features", a.get("num_features"), 1 if ok_rank else None, x))
        elif kind in ("RNN", "LSTM", "GRU"):
            checks.append(("rnn", "input_size", a.get("input_size"), -1 if rank in (2, 3) else None, x))
        elif kind == "MultiheadAttention":
            q = x
            k = args[1] if len(args) > 1 else kwargs.get("key", q)
            v = args[2] if len(args) > 2 else kwargs.get("value", k)
            e = a.get("embed_dim")
            checks.append(("attention", "embed_dim", e, -1 if rank in (2, 3) else None, q))
            if isinstance(k, Tensor):
                checks.append(("attention", "kdim", a.get("kdim") or e, -1, k))
            if isinstance(v, Tensor):
                checks.append(("attention", "vdim", a.get("vdim") or e, -1, v))
        else:
            return True
        fits = True
        for check_kind, param, expected, dim, t in checks:
            if not isinstance(expected, int) or isinstance(expected, bool):
                continue
            if dim is None:
                self.note(False, t)  # wrong rank: not reported
                fits = False
                continue
            actual = t.shape[dim]
            ok = actual == expected
            self.note(ok, t)
            fits = fits and ok
            if ok or not self.certain([t], mod):
                continue
            fix_span = fix_value = None
            literal = mod.literals.get(param)
            if param in ("in_features", "in_channels") and literal is not None and a.get("groups", 1) == 1:
                fix_span, fix_value = self.node_span(literal), actual
            what = {"linear": "features", "conv": "channels", "norm": "channels", "rnn": "features", "attention": "features"}[check_kind]
            self._add(check_kind, self.label(mod), kind, self.mod_span(mod), f"{param}={expected}", f"{actual} {what}", t,
                      fix_span, fix_value)
        return fits

    def cat(self, short: str, items: list[Tensor], dim: Any, node: ast.AST | None) -> bool:
        if not isinstance(dim, int) or isinstance(dim, bool):
            return True
        shapes = [t.shape for t in items]
        rank = len(shapes[0])
        if any(len(s) != rank for s in shapes):
            ok = False
        elif short == "stack":
            ok = all(s == shapes[0] for s in shapes)
        else:
            if rank == 0:
                return True
            d = dim + rank if dim < 0 else dim
            if not 0 <= d < rank:
                return True
            ok = all(s[:d] + s[d + 1:] == shapes[0][:d] + shapes[0][d + 1:] for s in shapes)
        for t in items:
            self.note(ok, t)
        span = self.node_span(node)
        if not ok and span is not None and self.certain(items):
            need = "the same shape" if short == "stack" else f"the same sizes in every dim but {dim}"
            self._add("cat", f"torch.{short}", short, span, need, ", ".join(_dims(s) for s in shapes), items[0])
        return ok

    def binop(self, op: ast.operator, left: Any, right: Any, node: ast.AST) -> bool:
        from torch_preflight.estimator.record import broadcast

        if not (isinstance(left, Tensor) and isinstance(right, Tensor)):
            return True
        if not isinstance(op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)):
            return True
        ok = broadcast(left.shape, right.shape) is not None
        self.note(ok, left)
        self.note(ok, right)
        span = self.node_span(node)
        if not ok and span is not None and self.certain([left, right]):
            symbol = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}[type(op)]
            self._add("broadcast", symbol, symbol, span, "shapes that broadcast", f"{_dims(left.shape)} {symbol} {_dims(right.shape)}", left)
        return ok

    def unpack(self, shape: Any, n: int, node: ast.AST) -> None:
        """`a, b, c = x.shape` with a rank other than 3: reported when the tensor's shape is certain."""
        t = shape.attrs.get("tensor")
        if not isinstance(t, Tensor):
            return
        self.note(False, t)
        span = self.node_span(node)
        if span is not None and self.certain([t]):
            self._add("unpack", "shape", "shape", span, f"a {n}-D tensor ({n} names)", f"{_dims(t.shape)} ({len(t.shape)}-D)", t)

    def view(self, t: Tensor, name: str, dims: list[int]) -> bool:
        if any(d < 0 for d in dims):
            return True  # -1: torch infers it; not checked
        ok = math.prod(dims) == t.numel
        self.note(ok, t)
        span = self.node_span(self.it.cur_node)
        if not ok and span is not None and self.certain([t]):
            self._add("view", name, name, span, f"{_dims(tuple(dims))} ({math.prod(dims)} elements)",
                      f"{_dims(t.shape)} ({t.numel} elements)", t)
        return ok


# ---- entry ---------------------------------------------------------------------------------------
# The interpreter's work budget for one file's shape check, in statements and loop iterations: half
# for the script (and the configured input shape), a quarter for each probe input. Past it the rest
# stays unknown: what was proven before is kept, nothing after is checked. 40k steps are ~0.1 s of
# CPU; a notebook that unrolls a 12-block model over many experts runs into it, the fixtures need 2k.
SHAPE_STEPS = 40_000


def _interpreter(model: ModuleModel, tree: ast.Module, input_shape: tuple[int, ...] | None, steps: int) -> tuple[Interpreter, ShapeChecker]:
    it = Interpreter(model, tree, device="cuda", input_shape=input_shape, max_steps=steps)
    checker = ShapeChecker(it)
    it.checker = checker
    it.run()
    return it, checker


def _models(it: Interpreter) -> list[Module]:
    """The models of the file: instantiated in its script, or classes that can be built without arguments."""
    found: list[Module] = []
    seen: set[int] = set()
    for inst in it.instances:
        if inst.module.id not in seen and inst.module.type not in ("ModuleList", "ModuleDict"):
            seen.add(inst.module.id)
            found.append(inst.module)
    inner = {m.id for mod in found for m in mod.modules() if m is not mod}
    found = [m for m in found if m.id not in inner]
    built = {m.type for m in found}
    for cls in list(it.classes.values()):
        if cls.is_module and cls.name not in built:
            mod = it.construct_class(cls, cls.node.lineno - 1, cls.node.col_offset)
            if isinstance(mod, Module):
                mod.end = ((cls.node.end_lineno or cls.node.lineno) - 1, cls.node.end_col_offset or 0)
                found.append(mod)
    return found


def probe(mod: Module, variant: int) -> Tensor | None:
    """An input sized for the model's first layer; batch, spatial and sequence sizes differ per variant."""
    b, s, t = (2, 3)[variant], (224, 256)[variant], (5, 7)[variant]
    for _, m in mod.walk():
        if m is mod and not m.catalog:
            continue
        if not m.catalog or m.doubtful:
            return None
        k, a = m.type, m.args
        if k in _CONTAINERS or a.get("incomplete"):
            if a.get("incomplete"):
                return None
            continue
        if k == "Linear":
            n = a.get("in_features")
            return Tensor((b, n)) if isinstance(n, int) else None
        if k.startswith(("Conv1d", "Conv2d", "Conv3d", "ConvTranspose", "BatchNorm")):
            d = int(k[-2])
            c = a.get("num_features") if k.startswith("BatchNorm") else a.get("in_channels")
            return Tensor((b, c, *[s] * d)) if isinstance(c, int) else None
        if k in ("RNN", "LSTM", "GRU", "MultiheadAttention", "TransformerEncoderLayer", "TransformerDecoderLayer"):
            n = a.get("input_size", a.get("embed_dim", a.get("d_model")))
            if not isinstance(n, int) or k == "TransformerDecoderLayer":
                return None
            return Tensor((b, t, n) if a.get("batch_first") else (t, b, n))
        if k == "Embedding":
            return Tensor((b, t), "int64")
        if m.params:
            return None  # a first layer it cannot size an input for
    return None


def _probe_findings(model: ModuleModel, tree: ast.Module, variant: int, steps: int, ran: Interpreter | None = None) -> list[list[ShapeMismatch]]:
    """The mismatches of each model of the file on probe input `variant`, in a run of the script with a
    budget of `steps`. `ran`: an interpreter that has run the script already (without an input shape), as
    a fresh one with this budget would have, and is not used again (see `_reusable`)."""
    it = ran if ran is not None else _interpreter(model, tree, None, steps)[0]
    try:
        return _probe_models(it, variant)
    finally:
        _release(it)


def _probe_models(it: Interpreter, variant: int) -> list[list[ShapeMismatch]]:
    results: list[list[ShapeMismatch]] = []
    try:
        models = _models(it)
    except Budget:
        return results
    for mod in models:
        x = probe(mod, variant)
        if x is None:
            results.append([])
            continue
        x.trail = (ShapeStep(PROBE, Span.of(0, 0, 0, 0)),)
        checker = ShapeChecker(it)
        it.checker = checker
        it.grad_enabled, it.guessing, it.in_script = False, 0, 1
        try:
            it.call_module(mod, [x], {}, None)
        except Budget:
            results.append([])
            continue
        results.append([] if checker.probe_wrong else checker.found)
    return results


def _release(it: Interpreter) -> None:
    """Drop what an interpreter holds once its findings are read. Its objects point at each other (and
    at the model and its tree), so without this the whole run, the model and the tree outlive the check
    until the cyclic collector scans them all (a third of the collector's work in a run of the CLI)."""
    it.__dict__.clear()


def _key(m: ShapeMismatch) -> tuple[Any, ...]:
    return (m.span, m.kind, m.expected, m.actual)


def check_shapes(model: ModuleModel, tree: ast.Module, input_shape: tuple[int, ...] | None = None,
                 steps: int = SHAPE_STEPS) -> list[ShapeMismatch]:
    """Shape mismatches in the file; [] when it builds no nn.Module or cannot be read. Never raises.
    `steps`: the interpreter's work budget (statements and loop iterations, all runs together)."""
    try:
        return _check(model, tree, input_shape, steps)
    except (RecursionError, Budget):
        return []
    except Exception:  # the interpreter is best-effort; a crash must not become a finding
        return []


def _reusable(it: Interpreter, input_shape: tuple[int, ...] | None, steps: int) -> Interpreter | None:
    """The script's interpreter `it`, left as a fresh run with a budget of `steps` would leave it, when
    that run would be the same: no input shape was given (the probes run without one) and the script
    ran to its end in fewer steps (the interpreter is deterministic, and its budget is the only thing
    that tells the two apart). None otherwise: the probe runs the script again."""
    used = it.max_steps - it.steps_left
    if input_shape is not None or it.out_of_budget or used >= steps:
        return None
    it.max_steps, it.steps_left = steps, steps - used
    return it


def _script_findings(it: Interpreter, checker: ShapeChecker, input_shape: tuple[int, ...] | None) -> list[ShapeMismatch]:
    """The mismatches of the script's own run, then of its models on the configured input shape."""
    found = list(checker.found)
    if input_shape is not None:
        try:
            for mod in _models(it):
                it.guessing, it.in_script = 0, 1
                it.call_module(mod, [Tensor((2, *input_shape))], {}, None)
        except Budget:
            pass  # what was proven before the budget ran out stands
        found.extend(f for f in checker.found if f not in found)
    return found


def _check(model: ModuleModel, tree: ast.Module, input_shape: tuple[int, ...] | None, steps: int) -> list[ShapeMismatch]:
    it, checker = _interpreter(model, tree, input_shape, steps // 2)
    try:
        found = _script_findings(it, checker, input_shape)
        first = _probe_findings(model, tree, 0, steps // 4, _reusable(it, input_shape, steps // 4))
    finally:
        _release(it)
    second = _probe_findings(model, tree, 1, steps // 4)
    for a, b in zip(first, second, strict=False):
        keys = {_key(m) for m in b}
        found.extend(replace(m, input_shape=None) for m in a if _key(m) in keys)  # the probe's shape is not the user's
    out: list[ShapeMismatch] = []
    seen: set[tuple[Any, ...]] = set()
    for m in found:
        k = (m.span, m.kind)
        if k not in seen:
            seen.add(k)
            out.append(m)
    out.sort(key=lambda m: (m.span.start.line, m.span.start.col))
    return out
