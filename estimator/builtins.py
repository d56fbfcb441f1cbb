"""Python's builtins as the interpreter's registry reads them (estimator.ops dispatches to `builtin`): `len`, `range`,
`super()` along the instance's method resolution order, `isinstance` and `hasattr` on the layers the estimator built,
`getattr`/`setattr`, `iter`/`next` of loaders, numbers and containers."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from torch_preflight.estimator import catalog, configs
from torch_preflight.estimator.values import (
    UNKNOWN,
    ClassValue,
    Function,
    Loader,
    Module,
    Obj,
    Qualified,
    Tensor,
    Unknown,
    is_unknown,
)

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter

# what every nn.Module has (`hasattr(m, "forward")`)
MODULE_API = {
    "forward", "parameters", "named_parameters", "modules", "named_modules", "children", "named_children", "buffers",
    "named_buffers", "state_dict", "load_state_dict", "train", "eval", "training", "to", "cuda", "cpu", "apply",
    "register_buffer", "register_parameter", "register_module", "add_module", "zero_grad", "requires_grad_", "half",
    "float", "double", "bfloat16", "type", "extra_repr", "get_submodule", "get_parameter",
}


def after_in_mro(me: Any, owner: Any, name: str) -> Function | None:
    """The method `name` that `super()` in a method of class `owner` finds for instance `me`: the first class after
    `owner` in the instance's method resolution order that defines it; None when that is a torch (or other
    library) class the estimator models itself."""
    cls = me.cls if isinstance(me, Module) else me.attrs.get("__class__") if isinstance(me, Obj) else None
    if not isinstance(cls, ClassValue) or not isinstance(owner, ClassValue):
        return None
    order: list[Any] = []

    def walk(c: Any) -> None:  # depth first, a class kept at its last occurrence (C3's order for the usual diamonds)
        if c in order:
            order.remove(c)
        order.append(c)
        for base in c.bases if isinstance(c, ClassValue) else ():
            walk(base)

    walk(cls)
    after = order[order.index(owner) + 1:] if owner in order else []
    for c in after:
        if not isinstance(c, ClassValue):
            return None
        found = c.attrs.get(name)
        if found is not None:
            return found if isinstance(found, Function) else None
    return None


def derives(cls: Any, kind: Any) -> bool:
    """Whether class `cls` is `kind` or derives from it."""
    return cls is kind or (isinstance(cls, ClassValue) and any(derives(b, kind) for b in cls.bases))


def builtin(it: Interpreter, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any:
    if name == "range":
        if all(isinstance(a, int) for a in args):
            return range(*args)
        return UNKNOWN
    if name == "len":
        v = args[0] if args else None
        if isinstance(v, Tensor):
            return v.shape[0] if v.shape else UNKNOWN
        if isinstance(v, Module):
            return len(v.children)
        if isinstance(v, Obj) and v.type == "shape":
            return len(v.attrs["dims"])
        cls = v.attrs.get("__class__") if isinstance(v, Obj) else None
        method = cls.lookup("__len__") if isinstance(cls, ClassValue) else None
        if it.unread_data and (isinstance(v, (list, dict, set)) or method is not None):
            return UNKNOWN  # a container a loop over the data file the estimate did not read may have filled
        if isinstance(method, Function):  # an instance of the script's own class: its __len__
            return it.call_function(method, [v], {})
        try:
            return len(v)  # type: ignore[arg-type]
        except Exception:
            return UNKNOWN
    if name == "super":
        try:
            me = it.scope.lookup("self")
        except KeyError:
            me = None
        owner = args[0] if args and isinstance(args[0], ClassValue) else it.scope.vars.get("__class__")  # super(Cls, self)
        return Obj("super", {"self": me, "class": owner})
    if name in ("str", "os.fspath") and args and isinstance(args[0], Obj) and args[0].type == "path":
        return args[0].attrs["path"]  # a pathlib.Path's text
    if name in ("int", "float", "bool", "str", "abs", "round"):
        if args and not is_unknown(args[0]) and not isinstance(args[0], (Tensor, Obj)):
            try:
                fn: Any = {"int": int, "float": float, "bool": bool, "str": str, "abs": abs, "round": round}[name]
                return fn(*args)
            except Exception:
                return UNKNOWN
        return UNKNOWN if args else {"int": 0, "float": 0.0, "bool": False, "str": "", "abs": UNKNOWN, "round": UNKNOWN}[name]
    if name == "sorted" and args and isinstance(args[0], (list, tuple, set)) and all(isinstance(v, str) for v in args[0]):
        return sorted(args[0], reverse=kwargs.get("reverse") is True)
    if name in ("min", "max", "sum", "sorted", "any", "all", "divmod", "pow"):
        vals = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple, range)) else args
        if (vals and all(isinstance(v, (int, float)) for v in vals)) or (name in ("sum", "any", "all", "sorted") and all(isinstance(v, (int, float)) for v in vals)):
            try:
                if name in ("divmod", "pow"):
                    return (divmod if name == "divmod" else pow)(*vals)
                reducer: Any = {"min": min, "max": max, "sum": sum, "sorted": sorted, "any": any, "all": all}[name]
                return reducer(vals)
            except Exception:
                return UNKNOWN
        if name == "sum" and vals and all(isinstance(v, Tensor) for v in vals):
            out = vals[0]
            for v in vals[1:]:
                out = it.tensor_binop(ast.Add(), out, v, False)
            return out
        return UNKNOWN
    if name in ("list", "tuple"):
        if not args:
            return [] if name == "list" else ()
        if isinstance(args[0], Unknown):  # runs no code per item: an unknown list, a problem only where it is iterated
            return args[0]
        items = it.iterate(args[0], node) if not isinstance(args[0], Obj) or args[0].type != "shape" else list(args[0].attrs["dims"])
        if items is None:
            return UNKNOWN
        return list(items) if name == "list" else tuple(items)
    if name == "dict":
        return dict(kwargs)
    if name in ("enumerate", "zip"):
        seqs = [it.iterate(a, node) for a in args]
        if any(s is None for s in seqs):
            return UNKNOWN
        items = list(enumerate(seqs[0])) if name == "enumerate" else list(zip(*seqs, strict=False))  # type: ignore[arg-type]
        return Obj(name, {"items": items})
    if name == "reversed":
        seq = it.iterate(args[0], node) if args else None
        return list(reversed(seq)) if seq is not None else UNKNOWN
    if name == "isinstance":
        kinds = args[1] if len(args) == 2 and isinstance(args[1], tuple) else args[1:2]
        plain = {"int": int, "float": float, "bool": bool, "str": str, "list": list, "tuple": tuple, "dict": dict}
        if args and kinds and all(isinstance(k, Qualified) and k.name in plain for k in kinds) and isinstance(
                args[0], (int, float, bool, str, list, tuple, dict, type(None))):
            return isinstance(args[0], tuple(plain[k.name] for k in kinds))
        if args and isinstance(args[0], Module) and kinds and all(isinstance(k, Qualified) and k.name.startswith("torch.nn.")
                                                                  for k in kinds):
            # a layer's class among torch.nn classes (minGPT's weight-decay lists): a catalog layer is exactly its type
            names = {k.name.rsplit(".", 1)[-1] for k in kinds}
            return "Module" in names or (args[0].catalog and args[0].type in names)
        if args and isinstance(args[0], Module) and kinds and all(isinstance(k, ClassValue) for k in kinds):
            return any(derives(args[0].cls, k) for k in kinds)  # `isinstance(m, Bottleneck)` of the model's own classes
        return UNKNOWN
    if name == "vars":
        return args[0].attrs if args and isinstance(args[0], Obj) else UNKNOWN  # the live __dict__
    if name == "globals":
        return it.module_vars()
    if name in ("open", "io.open", "builtins.open", "codecs.open"):
        mode = args[1] if len(args) > 1 else kwargs.get("mode", "r")
        return Obj("file", {"path": args[0], "mode": mode}) if args and isinstance(args[0], str) else UNKNOWN
    if name == "exec":
        if args and isinstance(args[0], configs.FileText):
            it.exec_file(args[0].path, node)
        else:
            it.problem("exec() of code that is not a file of the project", node)
        return None
    if name in ("getattr",):
        if len(args) >= 2 and isinstance(args[1], str):
            value = it.getattr(args[0], args[1], node or ast.Pass())
            if is_unknown(value) and len(args) == 3:
                return args[2]
            return value
        return UNKNOWN
    if name == "hasattr":
        # feature tests on torch (`hasattr(F, "scaled_dot_product_attention")`): the estimate models torch 2.x
        if args and isinstance(args[0], Qualified) and args[0].name.split(".")[0] == "torch":
            return True
        if len(args) == 2 and isinstance(args[0], Module) and isinstance(args[1], str) and not args[0].doubtful:
            mod, attr = args[0], args[1]  # a layer the estimator built: it has what its __init__ set, and nn.Module's API
            if (attr in (*mod.children, *mod.attrs, *mod.params, *mod.buffers) or attr in MODULE_API
                    or (mod.cls is not None and mod.cls.lookup(attr) is not None)):
                return True
            # a container holds its layers only; another torch.nn layer has attributes the estimator does not keep
            return False if not mod.catalog or mod.type in catalog.CONTAINERS else UNKNOWN
        return UNKNOWN
    if name == "setattr":
        if len(args) == 3 and isinstance(args[1], str):
            it.setattr(args[0], args[1], args[2], node or ast.Pass())
        return None
    if name == "set":
        items = it.iterate(args[0], node) if args else []
        return set(items) if items is not None and all(isinstance(v, (str, int, float, tuple)) for v in items) else UNKNOWN
    if name == "iter" and args and isinstance(args[0], (Loader, list, tuple)):
        return Obj("iterator", {"source": args[0]})
    if name == "next" and args and isinstance(args[0], (Obj, Loader)) and (isinstance(args[0], Loader) or args[0].type == "iterator"):
        source = args[0] if isinstance(args[0], Loader) else args[0].attrs["source"]
        items = it.iterate(source, node or ast.Pass())  # a loader's next batch; a list's first item
        return items[0] if items else (args[1] if len(args) > 1 else UNKNOWN)
    if name in ("print", "iter", "next", "type", "map"):
        return UNKNOWN if name != "print" else None
    return Unknown(f"call `{name}`")
