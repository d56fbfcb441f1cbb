"""torch.* functions and tensor methods: shapes, dtypes, what each op saves, and backward()."""

from __future__ import annotations

import ast
import math
from typing import TYPE_CHECKING, Any

from torch_preflight.estimator.kernels import (
    SAVE_INPUT,
    SAVE_OUTPUT,
    activation,
    adaptive_pool,
    conv,
    cuda_linear_input,
    dtype_of,
    interpolate,
    ints,
    loss,
    norm,
    pool,
    sdpa,
)
from torch_preflight.estimator.record import StepRecord, broadcast, norm_dim
from torch_preflight.estimator.values import (
    UNKNOWN,
    Obj,
    ParamValue,
    Tensor,
    Unknown,
    is_unknown,
)

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter


def _flat(data: Any) -> list[Any]:
    return [v for item in data for v in _flat(item)] if isinstance(data, (list, tuple)) else [data]


def _literal_shape(data: Any, values_known: bool = True) -> tuple[int, ...] | None:
    """The shape of a (nested) list of numbers, or of a number; None when it is not one. With `values_known` False,
    an unread value counts as a number (`torch.tensor(encode(text), dtype=torch.long)`: the length is what matters)."""
    if (isinstance(data, (int, float)) and not isinstance(data, bool)) or (not values_known and is_unknown(data)):
        return ()
    if isinstance(data, (list, tuple)) and data:
        inner = {_literal_shape(v, values_known) for v in (data if len(data) <= 64 else (data[0], data[-1]))}
        if len(inner) == 1 and None not in inner:
            return (len(data), *next(iter(inner)))  # type: ignore[misc]
    return None


def new_tensor(it: Interpreter, shape: tuple[int, ...] | None, dtype: str, node: ast.AST | None, batch: bool = True) -> Any:
    if shape is None:
        it.problem("a tensor of unknown shape", node)
        return UNKNOWN
    external = it.forward_depth == 0
    if external and batch and it.batch_override and shape and it.recorder is None:
        shape = (it.batch_override, *shape[1:])
    if external and shape and it.recorder is None and it.in_script:
        it.batch_sizes.append((shape[0], getattr(node, "lineno", 1) - 1))
    return Tensor(shape, dtype, external=external, guessed=it.guessing > 0)


def torch_function(it: Interpreter, short: str, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any:
    args = [it.param_tensor(a) if isinstance(a, ParamValue) else a for a in args]
    dtype = dtype_of(kwargs.get("dtype")) or "float32"
    if short in ("randn", "rand", "zeros", "ones", "empty", "full"):
        dims = args[:-1] if short == "full" else args
        return new_tensor(it, ints(dims) if dims else ints([kwargs.get("size", ())]), dtype, node)
    if short in ("randn_like", "zeros_like", "ones_like", "empty_like", "rand_like"):
        t = args[0] if args else None
        return Tensor(t.shape, dtype_of(kwargs.get("dtype")) or t.dtype, external=it.forward_depth == 0) if isinstance(t, Tensor) else UNKNOWN
    if short == "randint":
        size = kwargs.get("size", args[-1] if args else None)
        return new_tensor(it, ints([size]) if size is not None else None, dtype_of(kwargs.get("dtype")) or "int64", node)
    if short == "eye" and args and isinstance(args[0], int):
        m = args[1] if len(args) > 1 else kwargs.get("m", args[0])
        return Tensor((args[0], m), dtype, external=it.forward_depth == 0) if isinstance(m, int) else UNKNOWN
    if short in ("linspace", "logspace"):
        steps = args[2] if len(args) > 2 else kwargs.get("steps")
        return Tensor((steps,), dtype, external=it.forward_depth == 0) if isinstance(steps, int) else UNKNOWN
    if short == "randperm" and args and isinstance(args[0], int):
        return Tensor((args[0],), dtype_of(kwargs.get("dtype")) or "int64", external=True)
    if short == "arange":
        nums = [a for a in args if isinstance(a, int)]
        n = len(range(*nums)) if nums else None
        return Tensor((n,), "int64", external=True) if n is not None else UNKNOWN
    if short in ("tensor", "as_tensor", "from_numpy"):
        data = args[0] if args else kwargs.get("data")
        wanted = dtype_of(kwargs.get("dtype"))
        if isinstance(data, Tensor):  # a numpy array modelled as a tensor, or a tensor
            return Tensor(data.shape, wanted or data.dtype, external=True, guessed=data.guessed)
        literal = _literal_shape(data, values_known=wanted is None)  # with a dtype, unread values are fine
        if literal is not None:
            is_float = any(isinstance(v, float) for v in _flat(data))
            return Tensor(literal, wanted or ("float32" if is_float or short == "from_numpy" else "int64"), external=True)
        if it.checker is not None:
            it.doubt("the shape of torch.tensor(data) is not known")
            return Tensor((), wanted or "float32", external=True, guessed=True)
        why = f" ({data.reason})" if isinstance(data, Unknown) and data.reason else ""
        it.problem(f"the shape of torch.{short}(...) is not known{why}", node)
        return UNKNOWN
    if short == "multinomial" and args and isinstance(args[0], Tensor):
        n = kwargs.get("num_samples", args[1] if len(args) > 1 else None)
        return Tensor((*args[0].shape[:-1], n), "int64", external=it.forward_depth == 0) if isinstance(n, int) else UNKNOWN
    if short in ("tril", "triu") and args and isinstance(args[0], Tensor):
        return Tensor(args[0].shape, args[0].dtype, external=args[0].external)
    if short in ("device", "manual_seed", "set_float32_matmul_precision", "compile", "is_available", "set_num_threads", "clip_grad_norm_", "clip_grad_value_"):
        return args[0] if short == "compile" and args else None
    tensors = [a for a in args if isinstance(a, Tensor)]
    if short in ("cat", "concat", "stack"):
        seq = args[0] if args else kwargs.get("tensors")
        items = [t.tensor if False else t for t in (seq or []) if isinstance(t, Tensor)] if isinstance(seq, (list, tuple)) else []
        if not items or len(items) != len(seq):  # type: ignore[arg-type]
            it.problem(f"torch.{short} of unknown tensors", node)
            return UNKNOWN
        dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
        if it.checker is not None and not it.checker.cat(short, items, dim, node):
            it.problem(f"torch.{short} of tensors whose shapes do not match", node)
            return UNKNOWN
        base = list(items[0].shape)
        if short == "stack":
            d = norm_dim(dim, len(base) + 1)
            shape = (*base[:d], len(items), *base[d:])
        else:
            d = norm_dim(dim, len(base))
            base[d] = sum(t.shape[d] for t in items)
            shape = tuple(base)
        out = it.elementwise(items, shape, "cat")
        # the script's data joined outside a step (a corpus tokenized line by line) is data it keeps, as its parts; a
        # stack of samples is a batch, which the step's accounting counts where a model takes it
        out.external = short != "stack" and all(t.external for t in items) and it.recorder is None and it.forward_depth == 0
        return out
    if short in ("matmul", "bmm", "mm"):
        return it.matmul(args[0], args[1]) if len(args) >= 2 else UNKNOWN
    if short == "baddbmm" and len(args) >= 3 and isinstance(args[1], Tensor) and isinstance(args[2], Tensor):
        b1, b2 = args[1], args[2]  # input + batch1 @ batch2: the batches are saved, the input is not
        return it.record(Tensor((*b1.shape[:-1], b2.shape[-1]), b1.dtype), [a for a in args[:3] if isinstance(a, Tensor)], [b1, b2])
    if short == "einsum" and args and isinstance(args[0], str):
        return einsum(it, args[0], list(args[1][:]) if len(args) == 2 and isinstance(args[1], (list, tuple)) else args[1:], node)
    if short == "linear":
        x, w = args[0], args[1]
        b = args[2] if len(args) > 2 else kwargs.get("bias")
        if not isinstance(x, Tensor) or not isinstance(w, Tensor):
            return UNKNOWN
        xs, ws = it.autocast_inputs([x, w])
        xs = cuda_linear_input(it, x, xs, isinstance(b, Tensor))
        out = Tensor((*x.shape[:-1], w.shape[0]), xs.dtype)
        return it.record(out, [xs, ws, *([b] if isinstance(b, Tensor) else [])], [xs, ws])
    if not tensors:
        return Unknown(f"`{name}` on unknown values")
    x = tensors[0]
    if short in SAVE_OUTPUT or short in SAVE_INPUT or short in ("dropout", "softmax", "log_softmax"):
        return activation(it, short, x, kwargs, args)
    if short in ("add", "sub", "mul", "div", "maximum", "minimum", "where"):
        ops_ = {"add": ast.Add(), "sub": ast.Sub(), "mul": ast.Mult(), "div": ast.Div()}
        if short in ops_ and len(args) >= 2:
            return it.tensor_binop(ops_[short], args[0], args[1], False)
        shape = x.shape
        for t in tensors[1:]:
            shape = broadcast(shape, t.shape) or shape
        # where's backward needs only the condition; maximum's and minimum's both inputs
        return it.elementwise(tensors, shape, short, tensors[:1] if short == "where" else tensors)
    if short in ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "binary_cross_entropy_with_logits",
                 "binary_cross_entropy", "huber_loss", "kl_div"):
        return loss(it, short, args[0], args[1] if len(args) > 1 else kwargs.get("target"), kwargs)
    if short in ("layer_norm", "rms_norm", "group_norm", "batch_norm"):
        groups = args[1] if short == "group_norm" and len(args) > 1 else kwargs.get("num_groups", 1)
        return norm(it, short, x, tensors[1:], kwargs, n_groups=groups if isinstance(groups, int) else 1)
    if short == "embedding":
        idx, w = args[0], args[1]
        if isinstance(idx, Tensor) and isinstance(w, Tensor):
            return it.record(Tensor((*idx.shape, w.shape[1]), w.dtype), [w], [idx])
    if short in ("scaled_dot_product_attention",):
        return sdpa(it, args, kwargs)
    if short in ("max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d"):
        d = int(short[-2])
        k = args[1] if len(args) > 1 else kwargs.get("kernel_size")
        s = args[2] if len(args) > 2 else kwargs.get("stride")
        p = args[3] if len(args) > 3 else kwargs.get("padding", 0)
        return pool(it, x, d, k, s or k, p, 1, short.startswith("max"), False)
    if short.startswith("adaptive_avg_pool") or short.startswith("adaptive_max_pool"):
        d = int(short[-2])
        size = args[1] if len(args) > 1 else kwargs.get("output_size")
        return adaptive_pool(it, x, d, size, "max" in short)
    if short in ("interpolate", "upsample"):
        return interpolate(it, x, kwargs.get("size", args[1] if len(args) > 1 else None), kwargs.get("scale_factor"))
    if short in ("flatten",):
        return tensor_method(it, x, "flatten", args[1:], kwargs, node)
    if short in ("sum", "mean", "amax", "max", "min", "var", "std", "logsumexp", "norm", "transpose", "permute", "reshape",
                 "chunk", "split", "unsqueeze", "squeeze", "masked_fill", "clamp", "pad", "one_hot", "normalize", "argmax", "topk",
                 "outer", "repeat_interleave", "sign", "floor", "round", "square", "neg", "roll", "erf", "gather", "index_select",
                 "topk", "sort", "cumsum", "glu", "pixel_shuffle", "logsigmoid"):
        if short == "pad":
            pads = args[1] if len(args) > 1 else kwargs.get("pad")
            padded = list(x.shape)
            if isinstance(pads, (tuple, list)) and all(isinstance(v, int) for v in pads):
                for i in range(len(pads) // 2):
                    padded[-1 - i] += pads[2 * i] + pads[2 * i + 1]
            return it.elementwise([x], tuple(padded), "pad")
        if short == "one_hot":
            n = args[1] if len(args) > 1 else kwargs.get("num_classes")
            return Tensor((*x.shape, n), "int64") if isinstance(n, int) else UNKNOWN
        if short == "normalize":  # x / norm(x).clamp_min(eps): the input, the norm and its clamp are saved
            d = kwargs.get("dim", args[2] if len(args) > 2 else 1)
            stats = tuple(1 if i == norm_dim(d, len(x.shape)) else n for i, n in enumerate(x.shape)) if isinstance(d, int) else x.shape
            return it.elementwise([x], x.shape, "normalize", [x, Tensor(stats, x.dtype), Tensor(stats, x.dtype)])
        return tensor_method(it, x, short, args[1:], kwargs, node)
    if short.startswith(("conv1d", "conv2d", "conv3d", "conv_transpose")) and short[-2:-1].isdigit():
        # F.conv2d(input, weight, bias, stride, padding, dilation, groups); the transposed take output_padding before groups
        transposed = short.startswith("conv_transpose")
        names = ("weight", "bias", "stride", "padding", *(("output_padding", "groups", "dilation") if transposed else ("dilation", "groups")))
        a = {**{"stride": 1, "padding": 0, "dilation": 1, "groups": 1, "output_padding": 0}, **dict(zip(names, args[1:], strict=False)), **kwargs}
        out = conv(it, x, [a.get("weight"), a.get("bias")], int(short[-2]), transposed, a["stride"], a["padding"], a["dilation"],
                   a["groups"], a["output_padding"])
        if out is UNKNOWN:
            it.problem(f"F.{short} with arguments that are not known", node)
        return out
    it.problem(f"`{name}` is not modelled", node)
    return Unknown(f"`{name}`")


COMPARISONS = ("eq", "ne", "gt", "lt", "ge", "le", "isnan", "isinf", "isfinite", "logical_not", "logical_and", "logical_or",
               "greater", "less", "equal", "not_equal", "greater_equal", "less_equal")


def tensor_method(it: Interpreter, t: Tensor, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any:
    shape = t.shape
    n = len(shape)
    if name in ("size",):
        if args and isinstance(args[0], int):
            return shape[norm_dim(args[0], n)]
        return Obj("shape", {"dims": shape})
    if name in ("dim", "ndimension"):
        return n
    if name in COMPARISONS:  # a mask: no gradient, nothing saved
        other = args[0] if args else None
        mask = broadcast(shape, other.shape) if isinstance(other, Tensor) else shape
        return Tensor(mask, "bool", external=it.forward_depth == 0) if mask is not None else UNKNOWN
    if name == "numel":
        return t.numel
    if name in ("item", "tolist", "backward", "detach", "cpu", "cuda", "to", "float", "half", "bfloat16", "long", "int", "bool",
                "type_as", "clone", "requires_grad_", "numpy", "contiguous", "zero_", "fill_", "normal_", "uniform_", "retain_grad",
                "pin_memory", "astype", "share_memory_") or (name == "type" and (args or kwargs)):
        if name == "backward":
            return backward(it, t, node)
        if name == "tolist" and 0 < len(t.shape) <= 2 and math.prod(t.shape) <= 1_000_000:
            # as many (unread) values as the tensor holds: iterating it works, reading a value does not
            return [UNKNOWN] * t.shape[0] if len(t.shape) == 1 else [[UNKNOWN] * t.shape[1] for _ in range(t.shape[0])]
        if name in ("item", "tolist", "numpy"):
            return UNKNOWN
        if name == "detach":
            return Tensor(t.shape, t.dtype, False, t.storage, t.external, t.contiguous)
        if name in ("float", "half", "bfloat16", "long", "int", "bool", "to", "astype", "type"):
            dtype = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "long": "int64", "int": "int32", "bool": "bool"}.get(name)
            if name in ("to", "astype", "type"):  # `t.type(torch.int64)`: a dtype (a type's name such as "torch.LongTensor" is not read)
                dtype = next((dtype_of(a) for a in [*args, kwargs.get("dtype")] if dtype_of(a)), None)
            if dtype is None and name == "type":
                it.problem("tensor.type() of a type that is not a dtype is not modelled", node)
                return UNKNOWN
            if dtype is None or dtype == t.dtype:
                return t
            out = Tensor(t.shape, dtype, external=t.external)
            return it.record(out, [t], [])
        # a copy the script makes of its data outside a step (`data.t().contiguous()`) is data it keeps, as the original
        kept = t.external and it.recorder is None and it.forward_depth == 0
        if name == "contiguous":
            if t.contiguous:
                return t
            return it.record(Tensor(t.shape, t.dtype, external=kept), [t], [])
        if name == "clone":
            return it.record(Tensor(t.shape, t.dtype, external=kept), [t], [])
        return t
    if name in ("view", "reshape", "view_as", "reshape_as", "expand", "expand_as", "flatten", "unflatten", "transpose", "permute",
                "unsqueeze", "squeeze", "t", "mT", "repeat", "chunk", "split", "unbind", "narrow", "movedim"):
        return it.tensor_view(t, name, *args, **kwargs)
    if name in ("masked_fill", "masked_fill_"):
        mask = args[0] if args else None
        if name.endswith("_") and not t.requires_grad:
            return t
        return it.record(Tensor(t.shape, t.dtype), [t], [mask] if isinstance(mask, Tensor) else [])
    if name in ("sum", "mean", "amax", "max", "min", "var", "std", "logsumexp", "norm", "argmax", "prod", "all", "any"):
        dim = kwargs.get("dim", args[0] if args else None)
        keep = kwargs.get("keepdim", args[1] if len(args) > 1 and isinstance(args[1], bool) else False)
        if dim is None:
            out_shape: tuple[int, ...] = ()
        else:
            dims = {norm_dim(d, n) for d in (dim if isinstance(dim, (tuple, list)) else [dim]) if isinstance(d, int)}
            out_shape = tuple((1 if keep else None) if i in dims else s for i, s in enumerate(shape))  # type: ignore[misc]
            out_shape = tuple(s for s in out_shape if s is not None)
        dtype = "int64" if name == "argmax" else t.dtype
        saved = [t] if name in ("var", "std", "norm", "logsumexp", "prod") else []
        out = Tensor(out_shape, dtype)
        if name in ("max", "min") and dim is not None:
            res = it.record(out, [t], [Tensor(out_shape, "int64")])
            return (res, Tensor(out_shape, "int64"))
        if name in ("amax", "max", "min", "std", "norm", "logsumexp"):  # their backward reads the result too
            saved = [*saved, out] if saved else [t, out]
        return it.record(out, [t], saved)
    if name in ("softmax", "log_softmax", "relu", "sigmoid", "tanh", "exp", "sqrt", "rsqrt", "abs", "log", "pow", "sin", "cos"):
        if name == "pow":
            return it.tensor_binop(ast.Pow(), t, args[0] if args else 2, False)
        return activation(it, name, t, kwargs, [])
    if name in ("add", "sub", "mul", "div", "add_", "mul_", "sub_", "div_"):
        op = {"add": ast.Add(), "sub": ast.Sub(), "mul": ast.Mult(), "div": ast.Div()}[name.rstrip("_")]
        return it.tensor_binop(op, t, args[0] if args else UNKNOWN, name.endswith("_"))
    if name in ("matmul", "mm", "bmm"):
        return it.matmul(t, args[0]) if args else UNKNOWN
    if name in ("clamp", "clamp_", "clip", "neg", "round", "floor", "sign", "square", "erf", "roll", "flip", "tril", "triu", "tril_",
                "triu_"):
        return it.elementwise([t], shape, name, [t] if name in ("clamp", "clip", "square", "erf") else [])
    if name in ("gather", "index_select", "topk", "sort", "cumsum", "outer", "glu", "pixel_shuffle", "logsigmoid"):
        return _indexing(it, t, name, args, kwargs) or _not_modelled(it, f"tensor.{name}()", node)
    if name == "repeat_interleave":
        it.problem(f"tensor.{name}() shape is not modelled", node)
        return UNKNOWN
    if name in ("new_zeros", "new_ones", "new_empty", "new_full"):
        new_dims = ints(args[:1] if name == "new_full" else args)
        return Tensor(new_dims, t.dtype) if new_dims is not None else UNKNOWN
    it.problem(f"tensor.{name}() is not modelled", node)
    return Unknown(f"tensor.{name}()")


def _not_modelled(it: Interpreter, what: str, node: ast.AST | None) -> Any:
    it.problem(f"{what} is not modelled for these arguments", node)
    return UNKNOWN


def _indexing(it: Interpreter, t: Tensor, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Ops whose output shape comes from an index, a count or a dim: gather, index_select, topk, sort, cumsum, outer,
    glu, pixel_shuffle, logsigmoid (what each saves as torch's autograd does, checked on the meta device); None when
    an argument is not known."""
    n = len(t.shape)
    dim = kwargs.get("dim", args[0] if args and name in ("gather", "index_select", "cumsum", "sort", "glu") else -1)
    if name == "topk":
        dim = kwargs.get("dim", args[1] if len(args) > 1 else -1)
    if not isinstance(dim, int) or not -n <= dim < max(n, 1):
        return None
    d = norm_dim(dim, n)
    if name in ("gather", "index_select"):
        index = kwargs.get("index", args[1] if len(args) > 1 else None)
        if not isinstance(index, Tensor):
            return None
        shape = index.shape if name == "gather" else (*t.shape[:d], index.numel, *t.shape[d + 1:])
        return it.record(Tensor(shape, t.dtype), [t], [t, index] if name == "gather" else [index])  # gather's backward reads self
    if name in ("topk", "sort"):
        k = kwargs.get("k", args[0] if args else None) if name == "topk" else t.shape[d]
        if not isinstance(k, int):
            return None
        shape = (*t.shape[:d], k, *t.shape[d + 1:])
        indices = Tensor(shape, "int64")
        return it.record(Tensor(shape, t.dtype), [t], [indices]), indices
    if name == "cumsum":
        return it.record(Tensor(t.shape, t.dtype), [t], [])
    if name == "outer":
        other = args[0] if args else kwargs.get("vec2")
        return it.record(Tensor((t.numel, other.numel), t.dtype), [t, other], [t, other]) if isinstance(other, Tensor) else None
    if name == "glu":
        return it.record(Tensor((*t.shape[:d], t.shape[d] // 2, *t.shape[d + 1:]), t.dtype), [t], [t])
    if name == "logsigmoid":  # saves its input and a buffer of the input's size
        return it.record(Tensor(t.shape, t.dtype), [t], [t, Tensor(t.shape, t.dtype)])
    r = args[0] if args else kwargs.get("upscale_factor")  # pixel_shuffle: (N, C r^2, H, W) -> (N, C, H r, W r), a copy
    if not isinstance(r, int) or n < 3 or t.shape[-3] % (r * r):
        return None
    return it.record(Tensor((*t.shape[:-3], t.shape[-3] // (r * r), t.shape[-2] * r, t.shape[-1] * r), t.dtype), [t], [])


def einsum(it: Interpreter, equation: str, operands: list[Any], node: ast.AST | None) -> Any:
    """torch.einsum without an ellipsis: the output's sizes from the subscripts; the operands are saved."""
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    terms = inputs.split(",")
    if "." in equation or len(terms) != len(operands) or not all(isinstance(o, Tensor) for o in operands):
        return _not_modelled(it, "torch.einsum", node)
    sizes: dict[str, int] = {}
    for term, op in zip(terms, operands, strict=True):
        if len(term) != len(op.shape):
            return _not_modelled(it, "torch.einsum", node)
        for letter, size in zip(term, op.shape, strict=True):
            sizes[letter] = max(sizes.get(letter, size), size)
    letters = output if arrow else "".join(sorted(c for c in sizes if inputs.count(c) == 1))
    if any(c not in sizes for c in letters):
        return _not_modelled(it, "torch.einsum", node)
    return it.record(Tensor(tuple(sizes[c] for c in letters), operands[0].dtype), operands, operands)


def backward(it: Interpreter, loss_t: Tensor, node: ast.AST | None) -> None:
    rec = it.recorder
    if rec is None:
        it.problem("backward() on a loss no forward was seen for", node)
        return None
    it.step_records.append(StepRecord(rec, loss_t, getattr(node, "lineno", 1) - 1, rec.autocast, rec.batch,
                                      it.held_outputs(rec, loss_t), grads_live=it.grads_live))
    it.recorder = None
    it.grads_live = True
    return None
