"""The interpreter's statements: blocks, loops, with, assignment and unpacking, attribute stores, class definitions (methods
the Interpreter inherits)."""

from __future__ import annotations

import ast
import os
from typing import TYPE_CHECKING, Any

from torch_preflight.estimator import catalog, configs
from torch_preflight.estimator.scope import (
    FILE_LINES,
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
    Loader,
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
            self.problem(f"internal error in estimator ({type(exc).__name__}: {str(exc)[:60]}) at "
                         f"`{ast.unparse(node).splitlines()[0][:60]}`", node)
        finally:
            if ev is not None:  # a statement's temporaries are gone when it is done
                del ev.pending[mark:]

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
                if self.in_script:
                    self.guessed_block(node.body, scope)  # script code: take the main branch
                else:
                    taken = self.decide(node.test)
                    self.problem(f"condition `{ast.unparse(node.test)[:50]}` is not known; took its "
                                 f"{'first' if taken else 'second'} branch", node)
                    self.guessed_block(node.body if taken else node.orelse, scope)
            elif cond:
                self.exec_block(node.body, scope)
            else:
                self.exec_block(node.orelse, scope)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self.exec_for(node, scope)
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

    def exec_for(self: Interpreter, node: ast.For | ast.AsyncFor, scope: Scope) -> None:
        iterable = self.eval(node.iter, scope)
        items = self.iterate(iterable, node)
        if items is None:
            return
        # script loops run once (one pass is one training step), but a loop over plain values that trains nothing
        # runs through (a configurator reading sys.argv, a list of layer sizes)
        every = len(items) <= 256 and all(isinstance(v, (str, int, float, bool)) for v in items) and not _trains(node)
        # a pass that only recomputes values (an evaluation loop drawing batches) repeats its first ones: two suffice
        passes = 2 if every and len(items) > 2 and self.in_script and self.forward_depth == 0 and self.repeats(node, scope) else None
        self.loop_counts.append(len(iterable) if isinstance(iterable, range) else None)
        try:
            self.run_for(node, scope, items, every, passes)
        finally:
            self.loop_counts.pop()

    def run_for(self: Interpreter, node: ast.For | ast.AsyncFor, scope: Scope, items: list[Any], every: bool, passes: int | None) -> None:
        for index, item in enumerate(items):
            if self.in_script and self.forward_depth == 0 and index >= 1 and not every:
                break
            if passes is not None and index >= passes:
                self.assign(node.target, items[-1], scope, node)  # the loop variable ends as the last pass leaves it
                break
            self.tick()
            self.assign(node.target, item, scope, node)
            try:
                self.exec_block(node.body, scope)
            except _Break:
                return
            except _Continue:
                continue
        else:
            self.exec_block(node.orelse, scope)
            return
        if passes is not None:
            self.exec_block(node.orelse, scope)

    def repeats(self: Interpreter, node: ast.For | ast.AsyncFor, scope: Scope) -> bool:
        """Whether every pass of a counted loop does the same work and leaves nothing behind but its own variables: its
        body is straight-line code that reads no value an earlier pass left (`x = f(x)`) and the loop variable only as
        the index it stores into a tensor (`losses[k] = loss.item()`), and it calls only library functions, models and
        the script's functions that change nothing outside their own variables."""
        if not isinstance(node.iter, ast.Call) or not isinstance(node.iter.func, ast.Name) or node.iter.func.id != "range":
            return False
        if not isinstance(node.target, ast.Name):
            return False
        stored = {n.id for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        defined: set[str] = set()
        for stmt in _straight(node.body):
            if stmt is None:
                return False
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
            value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr)) else None
            reads: list[ast.expr] = [value] if value is not None else []
            for target in targets:
                for part in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(part, ast.Subscript):  # a slot of a tensor made before the loop
                        if not (isinstance(part.value, ast.Name) and isinstance(_lookup(scope, part.value.id), Tensor)):
                            return False
                        reads.append(part.slice)
                    elif not isinstance(part, ast.Name):
                        return False
            for read in reads:
                for n in ast.walk(read):
                    if isinstance(n, ast.Name) and ((n.id == node.target.id and not _indexes(n, stmt)) or n.id in stored - defined):
                        return False
                if not self.harmless_calls(read, scope, 0):
                    return False
            defined |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        return True

    def harmless_calls(self: Interpreter, tree: ast.AST, scope: Scope, depth: int, local: frozenset[str] = frozenset()) -> bool:
        """Whether the calls in `tree` change nothing a later pass or a memory figure reads: library functions (not classes),
        models (or values not known, which calling leaves unknown), and the script's functions (up to 3 deep) that store only into their own variables."""
        for n in ast.walk(tree):
            if isinstance(n, (ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Delete)):
                return False
            if isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, ast.Store):
                if not (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in local):
                    return False
            if not isinstance(n, ast.Call):
                continue
            func = n.func
            if isinstance(func, ast.Attribute):
                receiver = func.value.id if isinstance(func.value, ast.Name) else None
                if (func.attr in _CHANGES and receiver not in local) or func.attr[:1].isupper():
                    return False
                continue
            if not isinstance(func, ast.Name) or func.id in local:
                return False
            callee = _lookup(scope, func.id)
            if isinstance(callee, Function) and isinstance(callee.node, ast.FunctionDef) and depth < 3:
                args = callee.node.args
                names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a is not None}
                names |= {m.id for m in ast.walk(callee.node) if isinstance(m, ast.Name) and isinstance(m.ctx, ast.Store)}
                if not all(self.harmless_calls(stmt, callee.env, depth + 1, frozenset(names)) for stmt in callee.node.body):
                    return False
            elif not (isinstance(callee, Module) or is_unknown(callee) or (isinstance(callee, Qualified) and not callee.name.rsplit(".", 1)[-1][:1].isupper())
                      or (callee is _BUILTIN and func.id in _PURE_BUILTINS)):
                return False
        return True

    def iterate(self: Interpreter, value: Any, node: ast.AST) -> list[Any] | None:
        if isinstance(value, range):
            if len(value) > 10_000 and not self.in_script:
                raise Budget
            return list(value)
        if isinstance(value, (list, tuple)):
            return list(value)
        if isinstance(value, dict):
            return [k for k in value if k != "__class__"]  # an instance's __dict__ holds its class for the interpreter
        if isinstance(value, (set, frozenset)):
            return sorted(value, key=repr)
        if isinstance(value, str):
            return list(value)
        if isinstance(value, Obj) and value.type in ("enumerate", "zip"):
            return value.attrs["items"]
        if isinstance(value, Obj) and value.type == "items":
            return value.attrs["items"]
        if isinstance(value, Loader):
            batch = self.loader_batch(value, node)
            return [batch]
        if isinstance(value, Module) and value.type in ("ModuleList", "Sequential"):
            return list(value.children.values())
        if isinstance(value, Module) and value.type == "ModuleDict":
            return list(value.children)
        if isinstance(value, Obj) and value.type == "file":  # `for line in f:` over a short text file of the project
            text = configs.read_text(value.attrs["path"], os.path.dirname(self.model.path), value.attrs.get("mode", "r"))
            lines = text.splitlines(keepends=True) if isinstance(text, str) else None
            if lines is not None and len(lines) <= FILE_LINES:
                return lines
            if lines is not None:  # a longer one (a corpus read word by word) would take the whole work budget: unknown
                self.problem(f"`{value.attrs['path']}` is read line by line at run time ({len(lines):,} lines, more than the "
                             f"estimate reads); supply what the script computes from it with --set NAME=VALUE", node)
                return None
        if isinstance(value, Obj) and value.type == "parameters":
            return [p for _, p in value.attrs["module"].named_parameters()]
        if isinstance(value, Tensor):
            if not value.shape:
                return None
            # a tensor iterates over its first dimension: as many items as it has rows (a batch of indices)
            count = value.shape[0] if self.forward_depth == 0 and isinstance(value.shape[0], int) and value.shape[0] <= 4096 else 1
            return [value.view(value.shape[1:]) for _ in range(count)]
        if self.in_script:
            return [UNKNOWN]
        self.problem(f"cannot iterate `{ast.unparse(getattr(node, 'iter', node))[:40]}`", node)
        return None

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
            value = self.eval(node.value, scope)
            if (isinstance(value, Unknown) and (not value.reason or isinstance(value, Unread)) and self.in_script
                    and len(targets) == 1 and isinstance(targets[0], ast.Name) and node.value is not None):
                # a value made at run time (a pickle the script loads) is named where it is made, as unknown values are
                # name the value where it is made, so a layer that gets it says what to supply
                where = f"{os.path.basename(self.cur_path)}:{node.lineno}"
                why = f" ({value.reason})" if value.reason and not value.reason.endswith("a file read at run time") else ""
                value = Unread(f"`{targets[0].id} = {ast.unparse(node.value)[:40]}` at {where} is not known statically{why}; "
                                f"supply it with --set {targets[0].id}=VALUE")
            return value
        text = self.supplied[name]
        supplied = configs.supplied_value(text)
        if isinstance(supplied, ast.expr):
            here = Scope(imports=self.model.imports, path=self.model.path)
            here.vars.update({"torch": Qualified("torch"), "np": Qualified("numpy"), "numpy": Qualified("numpy")})
            supplied = self.eval(supplied, here)
        self.assume(f"`{name}` = {text} (supplied) instead of `{ast.unparse(node.value)[:50] if node.value else ''}`",
                    node.lineno - 1)
        return supplied

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
            obj = self.eval(target.value, scope)
            key = self.eval(target.slice, scope)
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


def _trains(node: ast.AST) -> bool:
    """Whether a loop's body calls backward() or step() itself."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("backward", "step")
               for n in ast.walk(node))


_CHANGES = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem", "remove", "clear", "discard",
                      "add_module", "register_module", "register_buffer", "register_parameter", "add_param_group", "backward",
                      "step", "zero_grad", "load_state_dict", "apply", "write", "save"})
_PURE_BUILTINS = frozenset({"len", "range", "int", "float", "str", "bool", "min", "max", "abs", "round", "sum", "tuple", "list",
                            "dict", "enumerate", "zip", "isinstance", "print", "sorted", "reversed", "divmod", "pow"})
_BUILTIN = object()


def _lookup(scope: Scope, name: str) -> Any:
    """`name` in `scope`, or _BUILTIN when no scope binds it."""
    try:
        return scope.lookup(name)
    except KeyError:
        return _BUILTIN


def _straight(body: list[ast.stmt]) -> list[ast.stmt | None]:
    """The simple statements of straight-line code, `with` blocks opened (their context expressions as statements);
    None in place of a statement that branches, loops or jumps."""
    out: list[ast.stmt | None] = []
    for stmt in body:
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            out += [ast.Expr(item.context_expr) for item in stmt.items if item.optional_vars is None]
            out += [None for item in stmt.items if item.optional_vars is not None]
            out += _straight(stmt.body)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr, ast.Pass)):
            out.append(stmt)
        else:
            out.append(None)
    return out


def _indexes(name: ast.Name, stmt: ast.stmt) -> bool:
    """Whether `name` is only the index of a slot that `stmt` stores into."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else []
    return any(isinstance(part, ast.Subscript) and part.slice is name
               for target in targets for part in (target.elts if isinstance(target, ast.Tuple) else [target]))
