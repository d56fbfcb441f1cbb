"""The interpreter's statements: blocks, branches, with, assignment and unpacking, attribute stores, class definitions
(methods the Interpreter inherits; its for loops are estimator.interp_loops')."""

from __future__ import annotations

import ast
import os
from typing import TYPE_CHECKING, Any

from torch_preflight.estimator import catalog, configs
from torch_preflight.estimator.scope import (
    Budget,
    Instance,
    Scope,
    _Break,
    _Continue,
    _Return,
)
from torch_preflight.estimator.values import (
    UNKNOWN,
    ClassValue,
    ContextValue,
    Function,
    Module,
    Obj,
    ParamValue,
    Qualified,
    Tensor,
    Unknown,
    Unread,
    is_unknown,
)

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter


class Statements:
    """Methods of the Interpreter (it inherits them); `self` is the Interpreter."""

    def construct_class(self: Interpreter, cls: ClassValue, line: int, col: int) -> Any:
        return self.call(cls, [], {}, None, line=line, col=col)

    # ---- statements ---------------------------------------------------------------------------
    def exec_block(self: Interpreter, stmts: list[ast.stmt], scope: Scope) -> None:
        for stmt in stmts:
            self.exec_stmt(stmt, scope)

    def exec_stmt(self: Interpreter, node: ast.stmt, scope: Scope) -> None:
        self.tick()
        self.line = node.lineno - 1
        self.scope = scope
        ev = self.evaluation
        mark = len(ev.pending) if ev is not None else 0
        try:
            self._exec_stmt(node, scope)
        except (_Return, _Break, _Continue, Budget):
            raise
        except RecursionError:
            raise Budget from None
        except Exception as exc:  # a bug or a gap in the interpreter: say so, and go on with the next statement
            self.internal_error(exc, node)
        finally:
            if ev is not None:  # a statement's temporaries are gone when it is done
                del ev.pending[mark:]

    def internal_error(self: Interpreter, exc: Exception, node: ast.stmt) -> None:
        self.problem(f"internal error in estimator ({type(exc).__name__}: {str(exc)[:60]}) at "
                     f"`{ast.unparse(node).splitlines()[0][:60]}`", node)

    def _exec_stmt(self: Interpreter, node: ast.stmt, scope: Scope) -> None:
        if isinstance(node, ast.Expr):
            self.eval(node.value, scope)
        elif isinstance(node, ast.Assign):
            value = self.assigned_value(node, node.targets, scope)
            for target in node.targets:
                self.assign(target, value, scope, node)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.assign(node.target, self.assigned_value(node, [node.target], scope), scope, node)
        elif isinstance(node, ast.AugAssign):
            current = self.eval(node.target, scope) if not isinstance(node.target, ast.Subscript) else UNKNOWN
            value = self.binop(node.op, current, self.eval(node.value, scope), node, inplace=True)
            self.assign(node.target, value, scope, node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn: Any = Function(node, scope)
            for dec in reversed(node.decorator_list):
                name = self.qualify(dec, scope)
                if name in ("property", "functools.cached_property"):
                    fn = Obj("property", {"fget": fn})
                elif isinstance(fn, Function) and {name, self.qualify(dec.func, scope) if isinstance(dec, ast.Call) else None} & {
                        "torch.no_grad", "torch.inference_mode"}:
                    fn.no_grad = True  # runs without recording: an evaluation helper
                elif isinstance(fn, Function) and isinstance(dec, ast.Call) and self.qualify(dec.func, scope) == "hydra.main":
                    a = {k.arg: self.eval(k.value, scope) for k in dec.keywords if k.arg}
                    fn.config = configs.hydra_config(a.get("config_path"), a.get("config_name"), os.path.dirname(self.model.path),
                                                     self.argv)
                    if isinstance(fn.config, Unknown):
                        self.problem(f"{fn.config.reason} is not known", dec)
                elif name in ("classmethod", "staticmethod") and isinstance(fn, Function):
                    setattr(fn, name, True)
                elif name == "functools.wraps":
                    continue
            scope.vars[node.name] = fn
        elif isinstance(node, ast.ClassDef):
            scope.vars[node.name] = self.define_class(node, scope)
        elif isinstance(node, ast.Return):
            raise _Return(self.eval(node.value, scope) if node.value is not None else None)
        elif isinstance(node, ast.If):
            cond = self.truth(self.eval(node.test, scope))
            if cond is None:
                self.unknown_branch(node, scope)
            elif cond:
                self.exec_block(node.body, scope)
            else:
                self.exec_block(node.orelse, scope)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            flow = self.exec_for(node, scope, self.eval(node.iter, scope))
            if flow is not None:  # a `return` in a compiled body
                raise _Return(flow[0])
        elif isinstance(node, ast.While):
            if self.in_script and self.forward_depth == 0:
                self.loop_counts.append(None)  # passes not known
                try:
                    self.exec_block(node.body, scope)
                except _Break:
                    pass
                except _Continue:
                    pass
                finally:
                    self.loop_counts.pop()
            else:
                self.problem("a while loop in model code is not modelled", node)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            self.exec_with(node, scope)
        elif isinstance(node, ast.Try):
            self.exec_block(node.body, scope)
            self.exec_block(node.orelse, scope)
            self.exec_block(node.finalbody, scope)
        elif isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            self.import_star(node, scope)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                # the import map knows the file's own imports; an exec'd file's are read from the statement
                if isinstance(node, ast.Import):
                    here = alias.name if alias.asname else local
                elif node.module and not node.level:
                    here = f"{node.module}.{alias.name}"
                else:  # a relative import: the import map knows the package
                    here = (scope.imports or self.model.imports).resolve(local) or local
                scope.vars[local] = Qualified(here)
        elif isinstance(node, ast.Break):
            raise _Break
        elif isinstance(node, ast.Continue):
            raise _Continue
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    scope.vars.pop(target.id, None)
        elif isinstance(node, (ast.Pass, ast.Global, ast.Nonlocal, ast.Assert, ast.Raise)):
            pass
        else:
            self.problem(f"statement `{type(node).__name__}` is not modelled", node)

    def unknown_branch(self: Interpreter, node: ast.If, scope: Scope) -> None:
        """`if` on a condition that is not known: script code takes its main branch; other code the branch decided
        for the same condition before (see decide), said in a problem."""
        if self.in_script:
            self.guessed_block(node.body, scope)  # script code: take the main branch
        else:
            taken = self.decide(node.test)
            self.problem(f"condition `{ast.unparse(node.test)[:50]}` is not known; took its "
                         f"{'first' if taken else 'second'} branch", node)
            self.guessed_block(node.body if taken else node.orelse, scope)

    def exec_with(self: Interpreter, node: ast.With | ast.AsyncWith, scope: Scope) -> None:
        saved = (self.grad_enabled, self.autocast)
        for item in node.items:
            value = self.eval(item.context_expr, scope)
            if isinstance(value, ContextValue):
                if value.kind == "no_grad":
                    self.grad_enabled = False
                elif value.kind == "enable_grad":
                    self.grad_enabled = True
                elif value.kind == "autocast" and value.enabled:
                    self.autocast = value.dtype or ("float16" if self.device == "cuda" else "bfloat16")
                    self.assume(f"autocast {self.autocast}", node.lineno - 1)
            if item.optional_vars is not None:
                self.assign(item.optional_vars, value, scope, node)
        try:
            self.exec_block(node.body, scope)
        finally:
            self.grad_enabled, self.autocast = saved
            if self.force_autocast:
                self.autocast = self.force_autocast

    def release(self: Interpreter, value: Any) -> None:
        """A variable that held `value` is rebound or goes out of scope: a tensor it held (or a short list or tuple of
        them) is live until now, as CPython frees it when its last reference goes."""
        rec = self.recorder
        if rec is None or not rec.ops:
            return
        for t in value if isinstance(value, (tuple, list)) and len(value) <= 64 else (value,):
            if isinstance(t, Tensor) and t.storage is not None and t.requires_grad and not t.is_param:
                rec.released[t.storage.id] = (len(rec.ops), t.storage.nbytes)

    def assigned_value(self: Interpreter, node: ast.Assign | ast.AnnAssign, targets: list[ast.expr], scope: Scope) -> Any:
        """The value an assignment binds: its right side, or the value the user supplied for its target (`--set
        NAME=VALUE` names a variable, an attribute `obj.NAME`, or a dotted target such as `self.train`), which then
        is not read at all."""
        # a name whose variable holds a known tensor is computed, not replaced: the value supplied for a dataset's
        # `idx = self.ixes[idx].item()` is not what a model's `generate` means by `idx = torch.cat((idx, nxt), 1)`
        name = next((n for t in targets if isinstance(t, (ast.Name, ast.Attribute))
                     and not (isinstance(t, ast.Name) and isinstance(scope.vars.get(t.id), Tensor))
                     for n in (t.id if isinstance(t, ast.Name) else t.attr, ast.unparse(t)) if n in self.supplied),
                    None) if self.supplied else None
        if name is None:
            return self.named_unknown(node, targets, self.eval(node.value, scope))
        text = self.supplied[name]
        supplied = configs.supplied_value(text)
        if isinstance(supplied, ast.expr):
            here = Scope(imports=self.model.imports, path=self.model.path)
            here.vars.update({"torch": Qualified("torch"), "np": Qualified("numpy"), "numpy": Qualified("numpy")})
            supplied = self.eval(supplied, here)
        self.assume(f"`{name}` = {text} (supplied) instead of `{ast.unparse(node.value)[:50] if node.value else ''}`",
                    node.lineno - 1)
        return supplied

    def named_unknown(self: Interpreter, node: ast.Assign | ast.AnnAssign, targets: list[ast.expr], value: Any) -> Any:
        """The value an assignment binds, `value` its right side's: one made at run time is named where it is made."""
        if (isinstance(value, Unknown) and (not value.reason or isinstance(value, Unread)) and self.in_script
                and len(targets) == 1 and isinstance(targets[0], ast.Name) and node.value is not None):
            # a value made at run time (a pickle the script loads) is named where it is made, so a layer that gets it
            # says what to supply
            where = f"{os.path.basename(self.cur_path)}:{node.lineno}"
            why = f" ({value.reason})" if value.reason and not value.reason.endswith("a file read at run time") else ""
            value = Unread(f"`{targets[0].id} = {ast.unparse(node.value)[:40]}` at {where} is not known statically{why}; "
                           f"supply it with --set {targets[0].id}=VALUE")
        return value

    def assign(self: Interpreter, target: ast.expr, value: Any, scope: Scope, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            old = scope.vars.get(target.id)
            scope.vars[target.id] = value
            if self.evaluation is not None:  # a no_grad forward: the variable keeps its tensor until it is rebound
                key = (id(scope), target.id)
                if isinstance(value, Tensor) and value.storage is not None:
                    self.evaluation.bound[key] = (value.storage.id, value.storage.nbytes)
                else:
                    self.evaluation.bound.pop(key, None)
            if old is not None and old is not value:
                self.release(old)
            if self.in_script and self.forward_depth == 0 and isinstance(value, Module) and not getattr(value, "_registered", False):
                if value.type not in catalog.LOSSES:
                    value._registered = True  # type: ignore[attr-defined]
                    self.instances.append(Instance(value, getattr(node, "lineno", 1) - 1, getattr(node, "col_offset", 0), target.id))
        elif isinstance(target, (ast.Tuple, ast.List)):
            starred = any(isinstance(elt, ast.Starred) for elt in target.elts)
            values = self.unpack(value, len(target.elts), node, exact=not starred)
            for elt, v in zip(target.elts, values, strict=False):
                if isinstance(elt, ast.Starred):
                    self.assign(elt.value, UNKNOWN, scope, node)
                else:
                    self.assign(elt, v, scope, node)
        elif isinstance(target, ast.Attribute):
            obj = self.eval(target.value, scope)
            self.setattr(obj, target.attr, value, node)
        elif isinstance(target, ast.Subscript):
            self.store_item(self.eval(target.value, scope), self.eval(target.slice, scope), value)

    def store_item(self: Interpreter, obj: Any, key: Any, value: Any) -> None:
        """`obj[key] = value`"""
        if isinstance(obj, (list, dict)) and not is_unknown(key):
            try:
                obj[key] = value
            except (IndexError, TypeError):
                pass
        elif isinstance(obj, Module) and obj.type == "ModuleDict" and isinstance(value, Module):
            obj.children[str(key)] = value

    def unpack(self: Interpreter, value: Any, n: int, node: ast.AST, exact: bool = False) -> list[Any]:
        if exact and isinstance(value, Obj) and value.type == "shape" and len(value.attrs["dims"]) != n:
            # `b, n, d = x.shape` on a tensor of another rank: a ValueError at run time when the shape is
            # known, and nothing known about b, n, d either way
            if self.checker is not None:
                self.checker.unpack(value, n, node)
            self.problem(f"unpacking a {len(value.attrs['dims'])}-D shape into {n} names", node)
            return [UNKNOWN] * n
        if isinstance(value, (tuple, list)):
            return list(value) + [UNKNOWN] * (n - len(value))
        if isinstance(value, Tensor):
            if value.shape and value.shape[0] == n:
                return [value.view(value.shape[1:]) for _ in range(n)]
            return [UNKNOWN] * n
        if isinstance(value, Obj) and value.type == "shape":
            return list(value.attrs["dims"])
        return [UNKNOWN] * n

    def setattr(self: Interpreter, obj: Any, name: str, value: Any, node: ast.AST) -> None:
        if isinstance(obj, Module):
            if isinstance(value, Module):
                obj.children[name] = value
                obj.attrs.pop(name, None)
            elif isinstance(value, ParamValue):
                if value.owner is not None and value.owner is not obj:
                    if name in obj.params:
                        obj.tied.add(name)  # weight tying: counted once, at its owner
                    else:
                        obj.attrs[name] = value
                else:
                    obj.params[name] = value.shape
                    value.owner, value.name = obj, name
            else:
                if name in obj.children and value is None:
                    del obj.children[name]
                obj.attrs[name] = value
        elif isinstance(obj, Obj):
            obj.attrs[name] = value

    # ---- classes -------------------------------------------------------------------------------
    def define_class(self: Interpreter, node: ast.ClassDef, scope: Scope) -> ClassValue:
        bases = tuple(self.eval(b, scope) for b in node.bases)
        bases = tuple(self.user_value(b.name) or self.library_value(b.name) or b if isinstance(b, Qualified) else b for b in bases)
        is_module = any(
            (isinstance(b, Qualified) and b.name in ("torch.nn.Module", "torch.nn.modules.module.Module", "pytorch_lightning.LightningModule",
                                                      "lightning.LightningModule", "lightning.pytorch.LightningModule",
                                                      "torch.nn.Sequential", "torch.nn.modules.container.Sequential"))
            or (isinstance(b, Qualified) and b.name.startswith("torch.nn.") and b.name.rsplit(".", 1)[-1] in catalog.SIGNATURES)
            or (isinstance(b, ClassValue) and b.is_module)
            for b in bases
        )
        is_dc = any(self.qualify(d.func if isinstance(d, ast.Call) else d, scope) in ("dataclasses.dataclass", "dataclass") for d in node.decorator_list)
        cls = ClassValue(node, scope, bases, is_module, is_dc)
        body_scope = Scope(scope)
        saved_script = self.in_script
        self.in_script = 0
        try:
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    cls.attrs.setdefault("__fields__", []).append(stmt.target.id)
                    if stmt.value is not None:
                        default = self.eval(stmt.value, body_scope)
                        if isinstance(default, Obj) and default.type == "field":
                            default = default.attrs.get("default", UNKNOWN)
                        cls.attrs[stmt.target.id] = default
                        body_scope.vars[stmt.target.id] = default
                    continue
                self.exec_stmt(stmt, body_scope)
        finally:
            self.in_script = saved_script
        for name, value in body_scope.vars.items():
            fn = value.attrs.get("fget") if isinstance(value, Obj) and value.type == "property" else value
            if isinstance(fn, Function):
                fn.owner = cls
                if fn.env is body_scope:
                    fn.env = scope  # as in Python, a method does not see the class body's names (`next` is the builtin)
            cls.attrs.setdefault(name, value)
        if scope.path == self.model.path:
            self.classes[node.name] = cls  # the file's own classes (the fallback models when nothing is trained)
        return cls
