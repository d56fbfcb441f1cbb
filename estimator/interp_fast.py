"""The interpreter's loops over many concrete values, compiled: each statement and expression of a loop's body (and of
the script's functions it calls) becomes a closure once, which evaluates its operands through their closures and
combines plain Python values (str, int, float, bool, None, lists, tuples, dicts) as Python does; any other value, and
any other kind of node, goes to the interpreter's own method for that node with the operands already evaluated. So the
result is the general interpreter's (tests/test_interp_fast.py checks it on generated programs), without its per-node
dispatch: a data-preparation loop over a text corpus (a vocabulary built word by word) runs in seconds.

Nothing of the user's code is executed natively: the closures are this module's, made from the syntax tree.
A compiled statement costs FAST_STEP of the interpreter's work budget (a slow step is one node); a block returns None,
or BREAK, CONTINUE or a returned value (a 1-tuple) instead of raising them (a slow statement inside it still raises them).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch_preflight.estimator import configs
from torch_preflight.estimator.interp_exprs import BINOPS, COMPARE
from torch_preflight.estimator.scope import Budget, Scope, _Break, _Continue, _Return
from torch_preflight.estimator.values import UNKNOWN, ClassValue, Function, MethodRef, Obj, Qualified, Unknown

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter

Expr = Callable[[Scope], Any]
Stmt = Callable[[Scope], Any]

# a compiled statement's (or pass's, or call's) share of the work budget: as one node of the general interpreter, which
# it costs as much time as (measured on wikitext-2's word-level files: ~1.2 us per unit in either path; the general
# path takes 4x the units for the same loop, see docs/vram-accuracy.md)
FAST_STEP = 1
# a loop over at least this many items runs compiled (a shorter one is not worth compiling its body)
FAST_ITEMS = 64

# values the compiled closures combine themselves (anything else goes to the interpreter)
PLAIN = frozenset({str, int, float, bool, type(None), list, tuple, dict})
SEQUENCES = frozenset({str, list, tuple, dict})


# a compiled `return`: its value in a 1-tuple, handed up through the blocks (making a tuple calls no Python code)
Returned = tuple

BREAK = object()
CONTINUE = object()


class Compiler:
    """The closures of one interpreter's compiled nodes, made on first use and kept by node."""

    def __init__(self, it: Interpreter) -> None:
        self.it = it
        self.exprs: dict[int, tuple[ast.AST, Expr]] = {}
        self.blocks: dict[int, tuple[list[ast.stmt], Stmt]] = {}
        # a function's node -> its positional parameters and compiled body (None, None: it takes other arguments)
        self.functions: dict[int, tuple[ast.AST, tuple[str, ...] | None, Stmt | None]] = {}

    # ---- entry points --------------------------------------------------------------------------
    def usable(self) -> bool:
        """Whether the compiled closures run here: not while shapes are checked (the checker follows every node) nor
        in a no_grad forward (it frees each expression's temporaries)."""
        return self.it.checker is None and self.it.evaluation is None

    def block(self, stmts: list[ast.stmt]) -> Stmt:
        """The statements `stmts` compiled: each is a unit of work and runs as the interpreter's exec_stmt runs one
        (an error in it is said, and the next runs). No shape checker and no no_grad forward are running: the entry
        points (loop, call) check usable(), and a layer called inside ends its no_grad forward before it returns."""
        key = id(stmts)
        found = self.blocks.get(key)
        if found is not None and found[0] is stmts:
            return found[1]
        it = self.it
        # an expression statement is its expression's closure, whose value is dropped (not a flow)
        compiled = [(s, s.lineno - 1, self.expr(s.value) if isinstance(s, ast.Expr) else self._stmt(s), isinstance(s, ast.Expr))
                    for s in stmts]

        def run(scope: Scope) -> Any:
            for node, line, inner, dropped in compiled:
                it.steps_left -= FAST_STEP
                if it.steps_left <= 0:
                    raise Budget
                it.line = line
                it.scope = scope
                try:
                    flow = inner(scope)
                    if dropped:
                        continue
                except (_Return, _Break, _Continue, Budget):
                    raise
                except RecursionError:
                    raise Budget from None
                except Exception as exc:  # as the general interpreter: said, and the next statement runs
                    it.internal_error(exc, node)
                    continue
                if flow is not None:
                    return flow
            return None

        self.blocks[key] = (stmts, run)
        return run

    def expr(self, node: ast.expr) -> Expr:
        found = self.exprs.get(id(node))
        if found is not None and found[0] is node:
            return found[1]
        compiled = self._expr(node)
        self.exprs[id(node)] = (node, compiled)
        return compiled

    def call(self, fn: Function, args: list[Any]) -> Any:
        """A call of the script's function `fn` with positional `args` only, compiled; the interpreter's call when
        its parameters take defaults, keywords or rest arguments, or it is a lambda, a no_grad or Hydra function."""
        it = self.it
        node = fn.node
        plan = self.functions.get(id(node))
        if plan is None or plan[0] is not node:
            a = node.args
            simple = isinstance(node, ast.FunctionDef) and not (a.vararg or a.kwarg or a.kwonlyargs)
            params = tuple(p.arg for p in [*a.posonlyargs, *a.args]) if simple else None
            plan = self.functions[id(node)] = (node, params, self.block(node.body) if simple else None)
        _, params, body = plan
        if (params is None or body is None or len(params) != len(args) or fn.no_grad or fn.config is not None
                or it.checker is not None or it.evaluation is not None):  # (usable(), inlined: a call is the hot path)
            return it.call_function(fn, args, {})
        it.steps_left -= FAST_STEP
        if it.steps_left <= 0:
            raise Budget
        saved = it.cur_path
        it.cur_path = getattr(fn.env, "path", "") or saved
        scope = Scope(fn.env)
        if fn.owner is not None:
            scope.vars["__class__"] = fn.owner
        scope.vars.update(zip(params, args, strict=True))
        it.frames.append(scope)
        try:
            flow = body(scope)
        except _Return as ret:
            return ret.value
        except (_Break, _Continue):
            return None
        finally:
            if it.recorder is None and it.evaluation is None:
                it.frames.pop()  # leave_frame, with nothing to release
            else:
                it.leave_frame(scope)
            it.cur_path = saved
        return flow[0] if type(flow) is tuple else None

    # ---- statements ----------------------------------------------------------------------------
    def _stmt(self, node: ast.stmt) -> Stmt:
        it = self.it
        if isinstance(node, ast.Assign) and not it.supplied:
            return self.assign(node, node.targets, self.expr(node.value))
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            return self.augassign(node, node.target)
        if isinstance(node, ast.Return):
            returned = self.expr(node.value) if node.value is not None else None

            def ret(scope: Scope) -> Any:
                return (returned(scope) if returned is not None else None,)

            return ret
        if isinstance(node, ast.If):
            return self.if_(node)
        if isinstance(node, ast.For):
            return self.for_(node)
        if isinstance(node, ast.Pass):
            return lambda scope: None
        if isinstance(node, ast.Break):
            return lambda scope: BREAK
        if isinstance(node, ast.Continue):
            return lambda scope: CONTINUE

        def general(scope: Scope) -> Any:
            it._exec_stmt(node, scope)

        return general

    def assign(self, node: ast.Assign, targets: list[ast.expr], value: Expr) -> Stmt:
        it = self.it
        stores = [self.store(t, node) for t in targets]

        def assign(scope: Scope) -> Any:
            v = value(scope)
            if type(v) is Unknown:
                v = it.named_unknown(node, targets, v)
            for store in stores:
                store(scope, v)

        return assign

    def store(self, target: ast.expr, node: ast.AST) -> Callable[[Scope, Any], None]:
        """Binding `target` to a value, as the interpreter's assign."""
        it = self.it
        if isinstance(target, ast.Name):
            name = target.id

            def store_name(scope: Scope, v: Any) -> None:
                if type(v) in PLAIN and it.recorder is None and it.evaluation is None:
                    scope.vars[name] = v  # nothing to release, register or track
                else:
                    it.assign(target, v, scope, node)

            return store_name
        if isinstance(target, ast.Subscript) and not isinstance(target.slice, ast.Slice):
            obj, key = self.expr(target.value), self.expr(target.slice)

            def store_item(scope: Scope, v: Any) -> None:
                it.store_item(obj(scope), key(scope), v)

            return store_item
        if isinstance(target, ast.Attribute):
            base, attr = self.expr(target.value), target.attr

            def store_attr(scope: Scope, v: Any) -> None:
                it.setattr(base(scope), attr, v, node)

            return store_attr
        return lambda scope, v: it.assign(target, v, scope, node)

    def augassign(self, node: ast.AugAssign, target: ast.Name) -> Stmt:
        it = self.it
        current, value, store = self.expr(target), self.expr(node.value), self.store(target, node)
        combine = BINOPS[type(node.op)]

        def augassign(scope: Scope) -> Any:
            left, right = current(scope), value(scope)
            if type(left) in PLAIN and type(right) in PLAIN:
                try:
                    result = combine(left, right)
                except Exception:
                    result = UNKNOWN
            else:
                result = it.binop(node.op, left, right, node, inplace=True)
            store(scope, result)

        return augassign

    def if_(self, node: ast.If) -> Stmt:
        it = self.it
        test, body, orelse = self.expr(node.test), self.block(node.body), self.block(node.orelse)

        def if_(scope: Scope) -> Any:
            v = test(scope)
            cond = bool(v) if type(v) in PLAIN else it.truth(v)
            if cond is None:
                it.unknown_branch(node, scope)
                return None
            if cond:
                return body(scope)
            return orelse(scope) if node.orelse else None

        return if_

    def for_(self, node: ast.For) -> Stmt:
        it = self.it
        iterable = self.expr(node.iter)

        def for_(scope: Scope) -> Any:
            return it.exec_for(node, scope, iterable(scope), compiled=True)

        return for_

    def loop(self, node: ast.For | ast.AsyncFor, scope: Scope, items: list[Any]) -> Any:
        """A for loop's passes over `items`, all of them, its body compiled: None, or the Returned value of a
        `return` in it (which the caller hands on)."""
        it = self.it
        body = self.block(node.body)
        store = self.store(node.target, node)
        for item in items:
            it.steps_left -= FAST_STEP
            if it.steps_left <= 0:
                raise Budget
            store(scope, item)
            try:
                flow = body(scope)
            except _Break:
                return None
            except _Continue:
                continue
            if flow is None or flow is CONTINUE:
                continue
            return None if flow is BREAK else flow
        orelse = self.block(node.orelse)
        return orelse(scope) if node.orelse else None

    # ---- expressions ---------------------------------------------------------------------------
    def _expr(self, node: ast.expr) -> Expr:
        it = self.it
        if isinstance(node, ast.Constant):
            constant = node.value
            return lambda scope: constant
        if isinstance(node, ast.Name):
            return self.name(node)
        if isinstance(node, ast.Attribute) and node.attr != "__dict__":
            return self.attribute(node)
        if isinstance(node, ast.Call) and not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args):
            return self.call_expr(node)
        if isinstance(node, ast.BinOp):
            return self.binop(node)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return self.compare(node)
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
            return self.subscript(node)
        if isinstance(node, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in node.elts):
            elts = [self.expr(e) for e in node.elts]
            if isinstance(node, ast.Tuple):
                return lambda scope: tuple([e(scope) for e in elts])
            return lambda scope: [e(scope) for e in elts]
        return lambda scope: it.eval(node, scope)

    def name(self, node: ast.Name) -> Expr:
        it, ident = self.it, node.id

        def name(scope: Scope) -> Any:
            found = scope.vars
            if ident in found:
                return found[ident]
            s = scope.parent
            while s is not None:
                found = s.vars
                if ident in found:
                    return found[ident]
                s = s.parent
            return it.eval(node, scope)  # a builtin or an imported name

        return name

    def attribute(self, node: ast.Attribute) -> Expr:
        it, base, attr = self.it, self.expr(node.value), node.attr

        def read(obj: Any) -> Any:  # an object's own attribute directly, anything else through the interpreter
            if type(obj) is Obj and obj.type != "shape":
                found = obj.attrs
                if attr in found:
                    return found[attr]
            return it.getattr(obj, attr, node)

        if isinstance(node.value, ast.Name):  # `self.word2idx`: a local name looked up here, one closure less
            ident = node.value.id

            def attribute_of_name(scope: Scope) -> Any:
                found = scope.vars
                return read(found[ident] if ident in found else base(scope))

            return attribute_of_name
        return lambda scope: read(base(scope))

    def call_expr(self, node: ast.Call) -> Expr:
        it = self.it
        args = [self.expr(a) for a in node.args]
        one = args[0] if len(args) == 1 else None  # the usual one argument, evaluated without a comprehension's frame
        line, col = node.lineno - 1, node.col_offset
        if isinstance(node.func, ast.Attribute):  # a method call: the receiver's method found without binding it
            receiver, method = self.expr(node.func.value), node.func.attr
            appends = method == "append" and len(args) == 1

            def method_call(scope: Scope) -> Any:
                obj = receiver(scope)
                kind = type(obj)
                # the method first, then the arguments, as the interpreter (reading a property runs code)
                if kind is Obj and obj.type != "shape" and method not in obj.attrs:
                    cls = obj.attrs.get("__class__")
                    found = cls.lookup(method) if isinstance(cls, ClassValue) else None
                    if isinstance(found, Function) and not found.classmethod:
                        return self.call(found, [obj, one(scope)] if one is not None else [obj, *[a(scope) for a in args]])
                elif kind in SEQUENCES:  # a method of a plain value: no code runs to find it
                    values = [one(scope)] if one is not None else [a(scope) for a in args]
                    if appends and kind is list:
                        obj.append(values[0])  # as the interpreter's list.append
                        return None
                    if kind is str:
                        return configs.str_method(obj, method, values, {})
                    return it.ops.call_method(it, obj, method, values, {}, node)
                func = it.getattr(obj, method, node.func)
                return self.invoke(func, [one(scope)] if one is not None else [a(scope) for a in args], node, line, col)

            return method_call
        func = self.expr(node.func)

        def call(scope: Scope) -> Any:
            f = func(scope)
            return self.invoke(f, [one(scope)] if one is not None else [a(scope) for a in args], node, line, col)

        return call

    def invoke(self, func: Any, args: list[Any], node: ast.Call, line: int, col: int) -> Any:
        it = self.it
        if type(func) is Function:
            return self.call(func, args)
        if type(func) is MethodRef and type(func.obj) in SEQUENCES:
            return it.ops.call_method(it, func.obj, func.name, args, {}, node)
        if type(func) is Qualified and func.name == "len" and len(args) == 1 and type(args[0]) in SEQUENCES and not it.unread_data:
            return len(args[0])  # the builtin (no scope binds `len`), as estimator.builtins has it
        return it.call(func, args, {}, node, line=line, col=col)  # (cur_node is the shape checker's, which runs slow)

    def binop(self, node: ast.BinOp) -> Expr:
        it = self.it
        left, right, op = self.expr(node.left), self.expr(node.right), node.op
        combine = BINOPS[type(op)]

        def binop(scope: Scope) -> Any:
            lv, rv = left(scope), right(scope)
            if type(lv) in PLAIN and type(rv) in PLAIN:
                try:
                    return combine(lv, rv)
                except Exception:
                    return UNKNOWN
            return it.binop(op, lv, rv, node)

        return binop

    def compare(self, node: ast.Compare) -> Expr:
        it = self.it
        left, right = self.expr(node.left), self.expr(node.comparators[0])
        op = node.ops[0]
        test = COMPARE[type(op)]
        negated = isinstance(op, ast.NotIn)

        def values(lv: Any, rv: Any) -> Any:
            if type(lv) in PLAIN and type(rv) in PLAIN:
                try:
                    return bool(test(lv, rv))
                except Exception:
                    return UNKNOWN
            return it.compare(op, lv, rv)

        def member(scope: Scope) -> Any:  # `word not in vocab` on a dict: the test written out
            lv, rv = left(scope), right(scope)
            if type(rv) is dict and type(lv) in PLAIN:
                try:
                    return (lv in rv) is not negated
                except Exception:  # an unhashable key: as COMPARE's
                    return UNKNOWN
            return values(lv, rv)

        def compare(scope: Scope) -> Any:
            return values(left(scope), right(scope))

        return member if isinstance(op, (ast.In, ast.NotIn)) else compare

    def subscript(self, node: ast.Subscript) -> Expr:
        it = self.it
        value, key = self.expr(node.value), self.expr(node.slice)

        def subscript(scope: Scope) -> Any:
            container = value(scope)
            if type(container) in SEQUENCES:  # as the interpreter's subscript: an unknown key, or none, is unknown
                k = key(scope)
                if type(k) is Unknown:
                    return UNKNOWN
                try:
                    return container[k]
                except Exception:
                    return UNKNOWN
            return it.subscript(container, node.slice, scope, node)

        return subscript
