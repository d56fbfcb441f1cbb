"""The interpreter's expressions: names, attributes, operators, comparisons, subscripts, comprehensions and f-strings
(methods the Interpreter inherits; its calls are estimator.interp's). estimator.interp_fast compiles the same
semantics for loops over many plain values, and reads BINOPS and COMPARE from here."""

from __future__ import annotations

import ast
import operator
from typing import TYPE_CHECKING, Any

from torch_preflight.estimator import configs
from torch_preflight.estimator.scope import LONG_ITERABLE, Scope
from torch_preflight.estimator.values import (
    UNKNOWN,
    BoundMethod,
    ClassValue,
    Dataset,
    Function,
    Loader,
    MethodRef,
    Module,
    Obj,
    Optimizer,
    ParamValue,
    Qualified,
    Tensor,
    Unknown,
    is_unknown,
)

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter


class Expressions:
    """Methods of the Interpreter (it inherits them); `self` is the Interpreter."""

    def truth(self: Interpreter, value: Any) -> bool | None:
        if is_unknown(value) or isinstance(value, (Tensor, Obj, Qualified)):
            return None
        try:
            return bool(value)
        except Exception:
            return None

    def eval(self: Interpreter, node: ast.AST | None, scope: Scope) -> Any:
        ev = self.evaluation
        if ev is None or not isinstance(node, (ast.Call, ast.BinOp, ast.UnaryOp)):
            return self._eval(node, scope)
        # under a no_grad forward: the operands' results are freed when this expression is done with them
        mark = len(ev.pending)
        value = self._eval(node, scope)
        del ev.pending[mark:]
        if isinstance(value, Tensor) and value.storage is not None:
            ev.pending.append((value.storage.id, value.storage.nbytes))
        return value

    def _eval(self: Interpreter, node: ast.AST | None, scope: Scope) -> Any:
        if node is None:
            return None
        self.tick()
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            try:
                return scope.lookup(node.id)
            except KeyError:
                pass
            if self.bind_late(scope, node.id):
                try:
                    return scope.lookup(node.id)
                except KeyError:
                    pass
            if node.id in BUILTINS:
                return Qualified(node.id)
            imports = scope.imports or self.model.imports
            resolved = imports.resolve(node.id)
            if resolved and imports.is_imported(node.id):
                return Qualified(resolved)
            return Unknown(f"name `{node.id}`")
        if isinstance(node, ast.Attribute):
            base = self.eval(node.value, scope)
            return self.getattr(base, node.attr, node)
        if isinstance(node, ast.Call):
            return self.eval_call(node, scope)
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.eval(node.left, scope), self.eval(node.right, scope), node)
        if isinstance(node, ast.UnaryOp):
            value = self.eval(node.operand, scope)
            if isinstance(value, Tensor):
                return self.elementwise([value], value.shape, "neg")
            if is_unknown(value):
                return value
            try:
                unary: Any = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert}[type(node.op)]
                return unary(value)
            except Exception:
                return UNKNOWN
        if isinstance(node, ast.BoolOp):
            values = [self.eval(v, scope) for v in node.values]
            result: Any = values[0]
            for v in values[1:]:
                t = self.truth(result)
                if t is None:
                    return UNKNOWN
                if isinstance(node.op, ast.And):
                    result = v if t else result
                else:
                    result = result if t else v
            return result
        if isinstance(node, ast.Compare):
            left = self.eval(node.left, scope)
            for op, comp in zip(node.ops, node.comparators, strict=False):
                right = self.eval(comp, scope)
                result = self.compare(op, left, right)
                if result is not True:
                    return result
                left = right
            return True
        if isinstance(node, ast.IfExp):
            t = self.truth(self.eval(node.test, scope))
            if t is None:
                self.doubt("a conditional expression that is not known")
                self.guessing += 1
                try:
                    return self.eval(node.body, scope)
                finally:
                    self.guessing -= 1
            return self.eval(node.body if t else node.orelse, scope)
        if isinstance(node, (ast.Tuple, ast.List)):
            items: list[Any] = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    inner = self.eval(elt.value, scope)
                    items.extend(self.iterate(inner, elt) or [])
                else:
                    items.append(self.eval(elt, scope))
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Dict):
            return {self.eval(k, scope): self.eval(v, scope) for k, v in zip(node.keys, node.values, strict=False) if k is not None}
        if isinstance(node, ast.Set):
            elements = [self.eval(e, scope) for e in node.elts]
            return set(elements) if all(isinstance(e, (str, int, float, bool, tuple)) for e in elements) else UNKNOWN
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return self.comprehension(node, scope)
        if isinstance(node, ast.DictComp):
            pairs = self.comprehension(ast.ListComp(ast.Tuple([node.key, node.value], ast.Load()), node.generators), scope)
            return {k: v for k, v in pairs if not is_unknown(k)} if all(isinstance(p, tuple) for p in pairs) else UNKNOWN
        if isinstance(node, ast.Slice):
            parts = [self.eval(p, scope) if p is not None else None for p in (node.lower, node.upper, node.step)]
            return slice(*parts) if all(p is None or isinstance(p, int) for p in parts) else UNKNOWN
        if isinstance(node, ast.Subscript):
            return self.subscript(self.eval(node.value, scope), node.slice, scope, node)
        if isinstance(node, ast.Lambda):
            return Function(node, scope)
        if isinstance(node, ast.JoinedStr):
            return self.fstring(node, scope)
        if isinstance(node, ast.Starred):
            return self.eval(node.value, scope)
        if isinstance(node, ast.NamedExpr):
            value = self.eval(node.value, scope)
            self.assign(node.target, value, scope, node)
            return value
        return UNKNOWN

    def compare(self: Interpreter, op: ast.cmpop, left: Any, right: Any) -> Any:
        """`left op right`: True, False, a mask (a bool tensor) or UNKNOWN."""
        if isinstance(op, (ast.Is, ast.IsNot)) and (isinstance(left, Tensor) or isinstance(right, Tensor)):
            if is_unknown(left) or is_unknown(right):
                return UNKNOWN
            return bool(COMPARE[type(op)](left, right))  # `targets is not None`: identity, not an elementwise comparison
        if isinstance(left, Tensor) or isinstance(right, Tensor):
            t = left if isinstance(left, Tensor) else right
            return Tensor(t.shape, "bool")
        if is_unknown(left) or is_unknown(right):
            return UNKNOWN
        try:
            return bool(COMPARE[type(op)](left, right))
        except Exception:
            return UNKNOWN

    def fstring(self: Interpreter, node: ast.JoinedStr, scope: Scope) -> str:
        """An f-string of known plain values is that string; otherwise an opaque "<str>"."""
        parts: list[str] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
                continue
            if not isinstance(value, ast.FormattedValue):
                return "<str>"
            v = self.eval(value.value, scope)
            spec = self.fstring(value.format_spec, scope) if isinstance(value.format_spec, ast.JoinedStr) else ""
            if not isinstance(v, (str, int, float, bool)) or spec == "<str>":
                return "<str>"
            try:
                convert: dict[int, Any] = {115: str, 114: repr, 97: ascii}
                shown = convert[value.conversion](v) if value.conversion in convert else v
                parts.append(format(shown, spec))
            except (ValueError, TypeError):
                return "<str>"
        return "".join(parts)

    def comprehension(self: Interpreter, node: ast.ListComp | ast.GeneratorExp | ast.SetComp, scope: Scope) -> list[Any]:
        results: list[Any] = []

        def rec(i: int, inner: Scope) -> None:
            if i == len(node.generators):
                results.append(self.eval(node.elt, inner))
                return
            gen = node.generators[i]
            items = self.iterate(self.eval(gen.iter, inner), gen.iter)
            if items is not None and len(items) > LONG_ITERABLE and len(node.generators) == 1 and not gen.ifs:
                # `[stoi[c] for c in text]` over a whole corpus: as many values as items, their values not read
                results.extend([UNKNOWN] * len(items))
                return
            for item in items or []:
                self.tick()
                s = Scope(inner)
                self.assign(gen.target, item, s, gen.iter)
                if all(self.truth(self.eval(c, s)) is not False for c in gen.ifs):
                    rec(i + 1, s)

        saved_script = self.in_script
        self.in_script = 0
        try:
            rec(0, Scope(scope))
        finally:
            self.in_script = saved_script
        return results

    def subscript(self: Interpreter, value: Any, slice_node: ast.AST, scope: Scope, node: ast.AST) -> Any:
        if isinstance(value, ParamValue):  # `self.logits[idx]`: indexing a parameter
            value = self.param_tensor(value)
        if isinstance(value, Tensor):
            return self.tensor_index(value, slice_node, scope)
        key = self.eval(slice_node, scope)
        if isinstance(value, Obj) and value.type == "hf_dataset":  # a split of a Hugging Face dataset: dataset["train"]
            return value
        if isinstance(value, Obj) and value.type == "config" and isinstance(key, str):  # a YAML config: cfg["model"]
            return value.attrs.get(key, Unknown(f"config value `{key}`"))
        if isinstance(value, Module):
            items = list(value.children.values())
            if value.type == "ModuleDict":
                return value.children.get(str(key), UNKNOWN)
            if isinstance(key, int):
                return items[key] if -len(items) <= key < len(items) else UNKNOWN
            if isinstance(key, slice):
                seq = Module("Sequential", value.line, value.col, catalog=True)
                seq.children = {str(i): m for i, m in enumerate(items[key])}
                return seq
            return UNKNOWN
        if isinstance(value, Obj) and value.type == "shape":
            dims = value.attrs["dims"]
            try:
                picked = dims[key]
            except Exception:
                return UNKNOWN
            return Obj("shape", {"dims": picked}) if isinstance(picked, tuple) else picked
        if is_unknown(value) or is_unknown(key):
            return value if isinstance(value, Unknown) and value.reason else UNKNOWN  # a part of it: not known, for that reason
        try:
            return value[key]
        except Exception:
            return UNKNOWN

    def _class_attribute(self: Interpreter, cls: ClassValue, name: str, instance: Any) -> Any:
        """`instance.name` found on its class: a bound method, a property's value, or the
        class attribute itself; None when the class does not define it."""
        found = cls.lookup(name)
        if isinstance(found, Function):
            return found if found.staticmethod else BoundMethod(found, cls if found.classmethod else instance)
        if isinstance(found, Obj) and found.type == "property":
            return self.call_function(found.attrs["fget"], [instance], {})
        return found

    def getattr(self: Interpreter, base: Any, name: str, node: ast.AST) -> Any:
        if isinstance(base, Qualified):
            if base.name == "sys" and name == "argv":
                return [self.model.path, *(self.argv or [])]
            user = (self.user_value(base.name) or self.library_value(base.name)) if "." in base.name else None
            if user is not None and not isinstance(user, Qualified):  # `GPT.get_default_config` of an imported class
                return self.getattr(user, name, node)
            return Qualified(f"{base.name}.{name}")
        if isinstance(base, configs.Parser):
            return MethodRef(base, name)
        if name == "__dict__" and isinstance(base, (Obj, Module)):
            return base.attrs  # live: `self.__dict__.update(kwargs)` sets attributes
        if isinstance(base, Module):
            if name in base.children:
                return base.children[name]
            if name in base.attrs:
                return base.attrs[name]
            if name in base.params:
                return ParamValue(base.params[name], base, name)
            if name in base.buffers:
                shape, dtype = base.buffers[name]
                return Tensor(shape, dtype, external=True)
            if base.catalog and name in base.args:
                return base.args[name]
            if base.cls is not None:
                found = self._class_attribute(base.cls, name, base)
                if found is not None:
                    return found
            if base.type in ("Linear",) and name in ("in_features", "out_features"):
                return base.args.get(name, UNKNOWN)
            return MethodRef(base, name)
        if isinstance(base, Obj):
            if base.type == "shape":
                return MethodRef(base, name)
            if name in base.attrs:
                return base.attrs[name]
            cls = base.attrs.get("__class__")
            if isinstance(cls, ClassValue):
                found = self._class_attribute(cls, name, base)
                if found is not None:
                    return found
            if base.type in ("Namespace", "SimpleNamespace", "dict", "config") and not (base.type == "config" and name == "get"):
                return Unknown(f"config value `{name}`")
            return MethodRef(base, name)
        if isinstance(base, ClassValue):
            found = base.lookup(name)
            if isinstance(found, Function) and found.classmethod:
                return BoundMethod(found, base)
            return found if found is not None else UNKNOWN
        if isinstance(base, Tensor):
            if name == "shape":
                return Obj("shape", {"dims": base.shape, "tensor": base})
            if name == "dtype":
                return Qualified(f"torch.{base.dtype}")
            if name == "T":
                return base.view(tuple(reversed(base.shape)), contiguous=False)
            if name in ("ndim",):
                return len(base.shape)
            if name in ("device", "grad", "data"):
                return base if name == "data" else UNKNOWN
            return MethodRef(base, name)
        if isinstance(base, ParamValue):
            if name == "shape":
                return Obj("shape", {"dims": base.shape})
            if name == "data":
                return base
            return MethodRef(base, name)
        if isinstance(base, (list, dict, str, Optimizer, Loader, Dataset, int, float, tuple, set)):
            return MethodRef(base, name)
        return Unknown(f"attribute `{name}`")

    def binop(self: Interpreter, op: ast.operator, left: Any, right: Any, node: ast.AST, inplace: bool = False) -> Any:
        if isinstance(left, ParamValue):
            left = self.param_tensor(left)
        if isinstance(right, ParamValue):
            right = self.param_tensor(right)
        if isinstance(left, Tensor) or isinstance(right, Tensor):
            if isinstance(op, ast.MatMult):
                return self.matmul(left, right)
            if self.checker is not None and not self.checker.binop(op, left, right, node):
                self.problem("tensor shapes do not broadcast")
                return UNKNOWN
            out = self.tensor_binop(op, left, right, inplace)
            if self.checker is not None and isinstance(out, Tensor):
                first = left if isinstance(left, Tensor) else right
                if out is not first:
                    out.trail = first.trail
                    out.guessed = any(isinstance(t, Tensor) and t.guessed for t in (left, right))
                if any(is_unknown(v) and not v.reason.startswith("config value") for v in (left, right)):
                    out.guessed = True  # broadcast with a value of unknown shape (a config value is a number): unknown
            return out
        if isinstance(left, Obj) and left.type == "shape" and isinstance(right, tuple):
            left = left.attrs["dims"]
        if is_unknown(left) or is_unknown(right):
            return UNKNOWN
        try:
            return BINOPS[type(op)](left, right)
        except Exception:
            return UNKNOWN


BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift,
    ast.RShift: operator.rshift, ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor,
}
COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not, ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


BUILTINS = {
    "range", "len", "int", "float", "min", "max", "list", "tuple", "dict", "enumerate", "zip", "isinstance", "print", "super",
    "getattr", "hasattr", "setattr", "sum", "abs", "round", "str", "bool", "sorted", "reversed", "any", "all", "iter", "next",
    "type", "open", "map", "set", "divmod", "pow", "vars", "globals", "exec",
}
