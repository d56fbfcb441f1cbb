"""The interpreter's tensor semantics: recording an autograd op, elementwise ops and operators, matmul, autocast's
casts, indexing and views (methods the Interpreter inherits)."""

from __future__ import annotations

import ast
import math
from typing import TYPE_CHECKING, Any

from torch_preflight.estimator.record import Op, broadcast, dims_of, norm_dim, promote
from torch_preflight.estimator.values import (
    UNKNOWN,
    Loader,
    Module,
    ParamValue,
    Qualified,
    Tensor,
    is_unknown,
)

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter
    from torch_preflight.estimator.scope import Scope

FLOATS = ("float32", "float16", "bfloat16", "float64")


class TensorSemantics:
    """Methods of the Interpreter (it inherits them); `self` is the Interpreter."""

    def param_tensor(self: Interpreter, p: ParamValue) -> Tensor:
        dtype = p.owner.dtype if p.owner is not None else "float32"
        t = Tensor(p.shape, dtype, requires_grad=True, external=True, is_param=True)
        t._owner = p.owner  # type: ignore[attr-defined]
        return t

    # ---- tensor primitives (used by ops) ---------------------------------------------------------
    def tensor_view(self: Interpreter, t: Tensor, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return _view(self, t, name, *args, **kwargs)
        except (TypeError, IndexError, KeyError, ValueError, ZeroDivisionError):
            self.problem(f"tensor.{name}() with arguments that are not known")
            return UNKNOWN

    def loader_batch(self: Interpreter, loader: Loader, node: ast.AST) -> Any:
        b = loader.batch_size
        if self.batch_override:
            self.assume(f"batch_size={b} (--batch-size)", None)
        elif loader.batch_known:  # an unknown batch size is reported as unknown where the loader is built
            self.assume(f"batch_size={b}", loader.line, loader.file)
        if self.input_shape is not None:
            return (Tensor((b, *self.input_shape), external=True), Tensor((b,), "int64", external=True))
        if loader.dataset is None:
            self.problem("the DataLoader's dataset is not known (pass --input-shape)", node)
            return UNKNOWN
        if loader.dataset.unknown:
            self.problem(loader.dataset.unknown, node)
        guessed = loader.guessed or loader.dataset.guessed or self.guessing > 0
        items = tuple(Tensor((b, *shape), dtype, external=True, guessed=guessed) for shape, dtype in loader.dataset.sample)
        if loader.dataset.keys:  # the default collate keeps a dict sample's keys
            return dict(zip(loader.dataset.keys, items, strict=True))
        return items if len(items) != 1 else items[0]

    def record(self: Interpreter, out: Tensor, inputs: list[Any], saved: list[Tensor], params: Module | None = None,
               extra_transient: int = 0, recompute: int = 0, backward_transient: int = 0) -> Tensor:
        """Register one autograd op producing `out`; mark `out` as requiring grad when it does."""
        tensors = [t for t in inputs if isinstance(t, Tensor)]
        owners = [t._owner for t in tensors if t.is_param and getattr(t, "_owner", None) is not None]  # type: ignore[attr-defined]
        has_params = (params is not None and params.own_param_count() > 0) or bool(owners)
        requires = any(t.requires_grad and not t.is_param for t in tensors) or has_params
        rec = self.recorder
        if self.evaluation is not None and not self.grad_enabled:
            self.evaluation.op(out.storage.id if out.storage is not None else 0, out.nbytes, extra_transient)
        if not (self.grad_enabled and requires and rec is not None):
            return out
        out.requires_grad = True
        layer = rec.stack[-1] if rec.stack else None
        layer_name = layer.name if layer is not None else ""
        entries: list[tuple[int, int]] = []
        for t in saved:
            if t.external or t.is_param or t.storage is None:
                continue
            sid = t.storage.id
            entries.append((sid, t.storage.nbytes))
            if sid not in rec.saved:
                rec.saved[sid] = (t.storage.nbytes, layer_name)
                if layer is not None:
                    layer.saved_bytes += t.storage.nbytes
        grads: list[tuple[int, int]] = []
        for m in {id(m): m for m in [*([params] if params is not None else []), *owners]}.values():
            grads.extend((m.id * 1000 + i, size * 4 if m.dtype == "float32" else size * 2) for i, size in enumerate(m.own_param_sizes()))
        # autocast's cast copies of weights: their gradient (in the cast dtype) is converted to the
        # parameter's dtype by the cast's own backward node, after this op's backward has released
        # what it saved; it does not flow on to the ops before this one
        casts = sum(t.nbytes for t in tensors if t.requires_grad and not t.is_param and getattr(t, "_owner", None) is not None)
        in_grad = sum(t.nbytes for t in tensors if t.requires_grad and not t.is_param) - casts
        in_grads = [(t.storage.id if t.storage is not None else 0, t.nbytes) for t in tensors
                    if t.requires_grad and not t.is_param and getattr(t, "_owner", None) is None]
        rec.ops.append(Op(layer_name, entries, out.nbytes, in_grad, grads, out.nbytes + extra_transient, recompute, backward_transient, casts,
                          out.storage.id if out.storage is not None else 0, in_grads))
        return out

    def elementwise(self: Interpreter, inputs: list[Tensor], shape: tuple[int, ...], kind: str, saved: list[Tensor] | None = None) -> Tensor:
        dtype = next((t.dtype for t in inputs if isinstance(t, Tensor) and t.dtype in FLOATS), None)
        dtype = dtype or next((t.dtype for t in inputs if isinstance(t, Tensor)), "float32")
        out = Tensor(shape, dtype)
        return self.record(out, list(inputs), saved or [])

    def tensor_binop(self: Interpreter, op: ast.operator, left: Any, right: Any, inplace: bool) -> Any:
        lt, rt = isinstance(left, Tensor), isinstance(right, Tensor)
        shape = broadcast(left.shape if lt else (), right.shape if rt else ())
        if shape is None:
            self.problem("tensor shapes do not broadcast")
            return UNKNOWN
        tensors = [t for t in (left, right) if isinstance(t, Tensor)]
        saved: list[Tensor] = []
        if isinstance(op, ast.Mult):
            if lt and rt:
                saved = [t for t in (left, right) if t.requires_grad or (left.requires_grad or right.requires_grad)]
                saved = [right] if left.requires_grad and not right.requires_grad else [left] if right.requires_grad and not left.requires_grad else [left, right]
        elif isinstance(op, ast.Div) and rt:
            saved = [left, right] if lt else [right]
        elif isinstance(op, ast.Pow):
            saved = [left] if lt else []
        out = self.elementwise(tensors, shape, "binop", saved)
        if lt and rt and left.dtype != right.dtype:
            out.dtype = promote(left.dtype, right.dtype)
        elif lt and not rt:
            out.dtype = left.dtype if not isinstance(right, float) or left.dtype in FLOATS else "float32"
        if inplace and lt and not left.requires_grad and shape == left.shape:
            return left
        return out

    def matmul(self: Interpreter, left: Any, right: Any) -> Any:
        if isinstance(left, ParamValue):
            left = self.param_tensor(left)
        if isinstance(right, ParamValue):
            right = self.param_tensor(right)
        if not (isinstance(left, Tensor) and isinstance(right, Tensor)):
            return UNKNOWN
        a, b = left.shape, right.shape
        if len(a) == 0 or len(b) == 0:
            return UNKNOWN
        if len(b) == 1:
            shape = a[:-1]
        elif len(a) == 1:
            shape = b[:-2] + b[-1:]
        else:
            batch = broadcast(a[:-2], b[:-2])
            if batch is None or a[-1] != b[-2]:
                self.problem(f"matmul shapes {a} @ {b} do not match")
                return UNKNOWN
            shape = (*batch, a[-2], b[-1])
        left, right = self.autocast_inputs([left, right])
        out = Tensor(shape, promote(left.dtype, right.dtype))
        # a non-contiguous operand is copied before the bmm, and the copy is what gets saved
        saved = [t if t.contiguous else Tensor(t.shape, t.dtype) for t in (left, right)]
        return self.record(out, [left, right], saved)

    def autocast_inputs(self: Interpreter, tensors: list[Tensor]) -> list[Tensor]:
        """Under autocast, matmul-class ops run on casts of their float32 inputs (weights cached)."""
        if not self.autocast or not self.grad_enabled:
            return tensors
        out: list[Tensor] = []
        for t in tensors:
            if t.dtype != "float32":
                out.append(t)
                continue
            if t.is_param and self.recorder is not None:
                key = id(getattr(t, "_owner", t)) * 31 + hash(t.shape)
                cached = self.recorder.weight_casts.get(key)
                if cached is None:
                    cached = Tensor(t.shape, self.autocast, requires_grad=True)
                    cached._owner = getattr(t, "_owner", None)  # type: ignore[attr-defined]
                    self.recorder.weight_casts[key] = cached
                out.append(cached)
            else:
                cast = Tensor(t.shape, self.autocast, requires_grad=t.requires_grad)
                out.append(cast)
        return out

    def tensor_index(self: Interpreter, t: Tensor, slice_node: ast.AST, scope: Scope) -> Any:
        items = list(slice_node.elts) if isinstance(slice_node, ast.Tuple) else [slice_node]
        shape = list(t.shape)
        out: list[int] = []
        dim = 0
        copy = False
        indices: list[Tensor] = []  # advanced indexing: the gather copies, and its backward reads the indices
        for item in items:
            if isinstance(item, ast.Constant) and item.value is Ellipsis:
                rest = len(items) - items.index(item) - 1
                keep = len(shape) - dim - sum(1 for i in items[items.index(item) + 1:] if not (isinstance(i, ast.Constant) and i.value is None))
                out.extend(shape[dim:dim + keep])
                dim += keep
                _ = rest
                continue
            if isinstance(item, ast.Constant) and item.value is None:
                out.append(1)
                continue
            if dim >= len(shape):
                return UNKNOWN
            if isinstance(item, ast.Slice):
                lo = self.eval(item.lower, scope) if item.lower else None
                hi = self.eval(item.upper, scope) if item.upper else None
                st = self.eval(item.step, scope) if item.step else None
                if any(is_unknown(v) or isinstance(v, Tensor) for v in (lo, hi, st)):
                    width = _offset_width(item, lambda e: self.eval(e, scope))
                    if width is None or st is not None:
                        return UNKNOWN
                    out.append(min(width, shape[dim]))  # x[i:i + k]: k wide, wherever i is (a window of a sequence)
                    dim += 1
                    continue
                out.append(len(range(*slice(lo, hi, st).indices(shape[dim]))))
                dim += 1
                continue
            value = self.eval(item, scope)
            if value is None or (isinstance(value, Qualified) and value.name in ("numpy.newaxis", "torch.newaxis")):
                out.append(1)  # `x[:, np.newaxis]`, as `x[:, None]`
                continue
            if isinstance(value, int):
                dim += 1
                continue
            if isinstance(value, Tensor):
                copy = True
                indices.append(value)
                if value.dtype == "bool":
                    return UNKNOWN
                out.extend(value.shape)
                dim += 1
                continue
            return UNKNOWN
        out.extend(shape[dim:])
        if copy:
            return self.elementwise([t], tuple(out), "index", indices)
        return t.view(tuple(out), contiguous=False if tuple(out) != t.shape[len(t.shape) - len(out):] else t.contiguous)


def _view(it: Interpreter, t: Tensor, name: str, *args: Any, **kwargs: Any) -> Any:
    shape = list(t.shape)
    n = len(shape)
    if name in ("view", "reshape"):
        dims = dims_of(list(args)) if args else list(kwargs.get("shape", ()))
        if any(not isinstance(d, int) for d in dims):
            return UNKNOWN
        raw = list(dims)
        if -1 in dims:
            known = math.prod(d for d in dims if d != -1)
            dims = [t.numel // known if d == -1 else d for d in dims]
        if it.checker is not None and not it.checker.view(t, name, raw):
            it.problem(f"cannot view {tuple(shape)} as {tuple(dims)}")
            return UNKNOWN
        if math.prod(dims) != t.numel:
            it.problem(f"cannot view {tuple(shape)} as {tuple(dims)}")
            return UNKNOWN
        if name == "reshape" and not t.contiguous:
            return it.record(Tensor(tuple(dims), t.dtype), [t], [])
        return t.view(tuple(dims))
    if name in ("view_as", "reshape_as", "expand_as"):
        other = args[0] if args else None
        return t.view(other.shape, contiguous=name != "expand_as") if isinstance(other, Tensor) else UNKNOWN
    if name == "expand":
        dims = dims_of(list(args))
        dims = [shape[i - (len(dims) - n)] if d == -1 else d for i, d in enumerate(dims)]
        return t.view(tuple(dims), contiguous=False) if all(isinstance(d, int) for d in dims) else UNKNOWN
    if name == "repeat":
        dims = dims_of(list(args))
        base = [1] * (len(dims) - n) + shape
        return it.elementwise([t], tuple(b * d for b, d in zip(base, dims, strict=False)), "repeat")
    if name == "flatten":
        start = args[0] if args else kwargs.get("start_dim", 0)
        end = args[1] if len(args) > 1 else kwargs.get("end_dim", -1)
        if n == 0:
            return t.view((1,))
        start, end = norm_dim(start, n), norm_dim(end, n)
        new = (*shape[:start], math.prod(shape[start:end + 1]), *shape[end + 1:])
        if not t.contiguous:
            return it.record(Tensor(new, t.dtype), [t], [])
        return t.view(new)
    if name == "unflatten":
        dim, sizes = args[0], list(args[1])
        dim = norm_dim(dim, n)
        if -1 in sizes:
            known = math.prod(s for s in sizes if s != -1)
            sizes = [shape[dim] // known if s == -1 else s for s in sizes]
        return t.view((*shape[:dim], *sizes, *shape[dim + 1:]))
    if name in ("transpose", "swapaxes"):
        d0, d1 = (norm_dim(args[0], n), norm_dim(args[1], n)) if len(args) >= 2 else (0, 1)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        return t.view(tuple(shape), contiguous=False)
    if name in ("t", "mT"):
        return t.view(tuple(shape[:-2] + shape[-2:][::-1]), contiguous=False)
    if name == "permute":
        dims = dims_of(list(args))
        return t.view(tuple(shape[norm_dim(d, n)] for d in dims), contiguous=False)
    if name == "movedim":
        src, dst = norm_dim(args[0], n), norm_dim(args[1], n)
        d = shape.pop(src)
        shape.insert(dst, d)
        return t.view(tuple(shape), contiguous=False)
    if name == "unsqueeze":
        d = norm_dim(args[0] if args else kwargs["dim"], n + 1)
        return t.view((*shape[:d], 1, *shape[d:]), contiguous=t.contiguous)
    if name == "squeeze":
        if args:
            d = norm_dim(args[0], n)
            return t.view(tuple(s for i, s in enumerate(shape) if not (i == d and s == 1)))
        return t.view(tuple(s for s in shape if s != 1))
    if name in ("chunk", "split", "unbind"):
        dim = norm_dim(kwargs.get("dim", args[1] if len(args) > 1 else 0), n)
        if name == "unbind":
            dim = norm_dim(args[0] if args else 0, n)
            return tuple(t.view((*shape[:dim], *shape[dim + 1:]), contiguous=False) for _ in range(shape[dim]))
        if name == "chunk":
            k = args[0]
            size = -(-shape[dim] // k)
            sizes = [size] * (shape[dim] // size) + ([shape[dim] % size] if shape[dim] % size else [])
        else:
            arg = args[0]
            if isinstance(arg, int):
                sizes = [arg] * (shape[dim] // arg) + ([shape[dim] % arg] if shape[dim] % arg else [])
            else:
                sizes = list(arg)
        return tuple(t.view((*shape[:dim], s, *shape[dim + 1:]), contiguous=dim == 0 and t.contiguous) for s in sizes)
    if name == "narrow":
        dim, _, length = args
        shape[norm_dim(dim, n)] = length
        return t.view(tuple(shape), contiguous=False)
    return UNKNOWN


def _offset_width(item: ast.Slice, evaluate: Any) -> int | None:
    """The width of `x[a:a + k]`, `x[i + 1:i + k + 1]` and the like: upper minus lower, their common unknown terms
    cancelled and the rest known integers; None for other slices."""
    if item.lower is None or item.upper is None:
        return None
    upper, lower = _terms(item.upper), _terms(item.lower)
    for t in [t for t in lower if isinstance(t, str)]:
        if t in upper:  # `i` on both sides: whatever it is, it cancels
            upper.remove(t)
            lower.remove(t)
    width = 0
    for terms, sign in ((upper, 1), (lower, -1)):
        for t in terms:
            value = t if isinstance(t, int) else evaluate(ast.parse(t.lstrip("-"), mode="eval").body)
            if not isinstance(value, int) or isinstance(value, bool):
                return None
            width += sign * (-value if isinstance(t, str) and t.startswith("-") else value)
    return width if width >= 0 else None


def _terms(node: ast.expr, sign: int = 1) -> list[Any]:
    """`i + block_size + 1` -> ['i', 'block_size', 1]: an additive expression's terms, constants as ints, the rest as
    source text ('-' in front when subtracted)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _terms(node.left, sign) + _terms(node.right, sign if isinstance(node.op, ast.Add) else -sign)
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return [sign * node.value]
    return [("-" if sign < 0 else "") + ast.unparse(node)]
