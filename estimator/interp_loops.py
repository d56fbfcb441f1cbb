"""The interpreter's for loops: what a loop iterates (lists, ranges, loaders, the lines of a file of the project), how
many passes it runs (a script's loop once, a loop over plain values through, an evaluation loop twice), and which
run compiled (estimator.interp_fast); methods the Interpreter inherits."""

from __future__ import annotations

import ast
import os
from typing import TYPE_CHECKING, Any

from torch_preflight.estimator import configs
from torch_preflight.estimator.interp_fast import FAST_ITEMS, Returned
from torch_preflight.estimator.scope import FILE_LINES, STEPS_PER_BYTE, Budget, Scope, _Break, _Continue
from torch_preflight.estimator.values import UNKNOWN, Function, Loader, Module, Obj, Qualified, Tensor, is_unknown

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter


class Loops:
    """Methods of the Interpreter (it inherits them); `self` is the Interpreter."""

    def exec_for(self: Interpreter, node: ast.For | ast.AsyncFor, scope: Scope, iterable: Any, compiled: bool = False) -> Returned | None:
        """A for loop over `iterable`: None, or what a `return` in its body returns when the body ran compiled (it
        does over many items, or in compiled code)."""
        items = self.iterate(iterable, node)
        if items is None:
            return None
        # script loops run once (one pass is one training step), but a loop over plain values that trains nothing
        # runs through (a configurator reading sys.argv, a list of layer sizes, the lines of a file when they run
        # compiled: not while shapes are checked, on the general path); a loop elsewhere runs through anyway: `every`
        # is only read in script code
        every = (self.in_script > 0 and self.forward_depth == 0
                 and (len(items) <= 256 or (_is_file(iterable) and self.fast.usable()))
                 and all(isinstance(v, (str, int, float, bool)) for v in items) and not _trains(node))
        # a pass that only recomputes values (an evaluation loop drawing batches) repeats its first ones: two suffice
        passes = 2 if every and len(items) > 2 and self.in_script and self.forward_depth == 0 and self.repeats(node, scope) else None
        self.loop_counts.append(len(iterable) if isinstance(iterable, range) else None)
        try:
            if (passes is None and (every or not self.in_script or self.forward_depth > 0)
                    and (compiled or len(items) >= FAST_ITEMS) and self.fast.usable()):
                return self.fast.loop(node, scope, items)  # every pass, over many values: compiled
            self.run_for(node, scope, items, every, passes)
        finally:
            self.loop_counts.pop()
        return None

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
            if lines is not None and self.fast.usable() and self.corpus_bytes + len(text) <= self.corpus_limit:
                self.corpus_bytes += len(text)  # a corpus: the loop runs compiled, with the work its size takes
                self.steps_left += len(text) * STEPS_PER_BYTE
                return lines
            if lines is not None:  # a longer one would take the whole work budget: unknown, and what it fills too
                self.unread_data = True
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


def _is_file(value: Any) -> bool:
    return isinstance(value, Obj) and value.type == "file"


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
