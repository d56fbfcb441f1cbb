"""Per-method units: which methods of an edited class an edit cannot have changed.

The unit of the language server's caches below a top-level statement is a function or method
(with the functions nested in it). The contract, for a rule or a memo of the training model
that uses it: what it says about a unit depends only on the unit's own text and position, the
import map, and what the unit reaches by name (callees, the attributes and names it reads);
what it says about a unit's loops may also depend on the unit's callers (a function every
caller runs under `no_grad`, the modules an optimizer parameter owns). `settled_members`
tells, for one edited top-level class, which of its units an edit cannot have changed in
that sense, by name links between its methods, as `scoped._dirty` does between top-level
statements: the training model's `reuse` takes their memos over (`TrainingModel.loop_memo`,
`function_memo` are the rules' way in).

What travels between methods is narrowed to what an edit can change: a method that changed
passes on its own name (its callers inline its events) and the attributes whose *binding*
changed: a statement that stores one, with the headers of the blocks around it (`if`, `for`,
`with` lines), differs from the last version, or reads a local name or an attribute that did.
A trainer's methods share dozens of `self.*` attributes; a digit typed into one method's
literal leaves every attribute it stores as it was, and its readers keep their facts.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import NamedTuple

_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")  # fields holding nested statements, not the header
RETURN = "<return>"  # what a `return` or `yield` binds: the value a caller's `x = self.method()` receives
# A number in a binding (`self.lr = 0.01`, `range(10)`) decides no kind, callee or name the analyses
# follow between methods: a digit typed into one is no change for the method's readers.
_NUMBER = re.compile(r"Constant\(value=[-+0-9.ej]+\)")


class _Header:
    """A statement's header (the whole of a simple statement) under the headers of the blocks
    around it; `key`, its text without positions or numbers, is only built when an edited
    method's versions are compared."""

    __slots__ = ("_key", "fields", "kind", "parent")

    def __init__(self, kind: str, fields: list[object], parent: _Header | None) -> None:
        self.kind, self.fields, self.parent = kind, fields, parent
        self._key: str | None = None

    @property
    def key(self) -> str:
        if self._key is None:
            own = _NUMBER.sub("#", f"{self.kind}:" + ";".join(map(_dump, self.fields)))
            self._key = f"{self.parent.key}\n{own}" if self.parent is not None else own
        return self._key


class Binding(NamedTuple):
    """One statement (its own header, for a block) that binds names."""

    outward: frozenset[str]  # what other methods can read: attributes it stores, names it declares global
    local: frozenset[str]  # the local names it binds
    reads: frozenset[str]  # every name and attribute it and the headers around it read
    header: _Header


class Names(NamedTuple):
    """What one method binds (its name, the attributes it stores or deletes, the names it declares
    `global`) and reads (every name and attribute it mentions, and every string constant that
    could name one: `getattr(self, "fit")`), and its binding statements."""

    binds: frozenset[str]
    reads: frozenset[str]
    bindings: tuple[Binding, ...]


def _names_in(nodes: list[ast.AST]) -> tuple[set[str], set[str], set[str]]:
    """(outward binds, local binds, reads) of some expressions and simple statements."""
    outward: set[str] = set()
    local: set[str] = set()
    reads: set[str] = set()
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute):
                (reads if isinstance(sub.ctx, ast.Load) else outward).add(sub.attr)
            elif isinstance(sub, ast.AugAssign) and isinstance(sub.target, ast.Attribute):
                reads.add(sub.target.attr)  # `self.n += 1` reads it too
            elif isinstance(sub, ast.Name):
                (reads if isinstance(sub.ctx, ast.Load) else local).add(sub.id)
            elif isinstance(sub, ast.Global):
                outward.update(sub.names)
            elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value.isidentifier():
                reads.add(sub.value)
            elif isinstance(sub, ast.arg):
                local.add(sub.arg)
    return outward, local, reads


def member_names(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Names:
    """The method's `Names`: each statement at any depth is read by its header (a block's fields
    other than its nested statements), under the headers of the blocks around it."""
    binds: set[str] = {node.name}
    reads: set[str] = set()
    bindings: list[Binding] = []

    def visit(stmt: ast.AST, around: frozenset[str], context: _Header | None) -> None:
        header = [v for f, v in ast.iter_fields(stmt) if f not in _BLOCKS]
        parts = [n for v in header for n in (v if isinstance(v, list) else [v]) if isinstance(n, ast.AST)]
        outward, local, mine = _names_in(parts)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or (
            isinstance(stmt, ast.ExceptHandler) and stmt.name
        ):
            local.add(stmt.name)  # type: ignore[arg-type]
        binds.update(outward)
        reads.update(mine | local)  # a method "reads" the names it assigns too, as the units of `scoped._names` do
        returns = isinstance(stmt, ast.Return) or (
            isinstance(stmt, ast.Expr) and isinstance(stmt.value, (ast.Yield, ast.YieldFrom))
        )
        blocks = [child for field in _BLOCKS for child in getattr(stmt, field, ())]
        if not (outward or local or returns or blocks):
            return
        own = _Header(type(stmt).__name__, header, context)
        if outward or local or returns:
            bindings.append(
                Binding(frozenset(outward | ({RETURN} if returns else set())), frozenset(local), frozenset(mine) | around, own)
            )
        inner = around | mine
        for child in blocks:
            visit(child, inner, own)

    outward, _, mine = _names_in([*node.decorator_list, node.args, *([node.returns] if node.returns else [])])
    binds.update(outward)
    reads.update(mine)
    for stmt in node.body:
        visit(stmt, frozenset(mine), None)
    return Names(frozenset(binds), frozenset(reads), tuple(bindings))


def _dump(value: object) -> str:
    if isinstance(value, ast.AST):
        return ast.dump(value)
    if isinstance(value, list):
        return "[" + ",".join(map(_dump, value)) + "]"
    return repr(value)


def _rebound(before: Names, after: Names) -> tuple[set[str], set[str]]:
    """(outward, local) names whose binding statements differ between two versions of a method."""

    def keys(names: Names) -> dict[str, list[str]]:
        by_name: dict[str, list[str]] = {}
        for b in names.bindings:
            for name in b.outward | {f"\0{n}" for n in b.local}:
                by_name.setdefault(name, []).append(b.header.key)
        return by_name

    old, new = keys(before), keys(after)
    differ = {n for n in old.keys() | new.keys() if old.get(n) != new.get(n)}
    return {n for n in differ if not n.startswith("\0")}, {n[1:] for n in differ if n.startswith("\0")}


def _passed_on(names: Names, spread: set[str], outward: set[str], local: set[str]) -> set[str]:
    """The attributes a method's bindings change, given the names `spread` from elsewhere and its own
    `outward` / `local` names already known to change: each binding that reads one changes too."""
    outward, local = set(outward), set(local)
    grown = True
    while grown:
        grown = False
        for b in names.bindings:
            if (b.reads & spread or b.reads & local) and not (b.outward <= outward and b.local <= local):
                outward |= b.outward
                local |= b.local
                grown = True
    return outward


_TYPE_CHECKS = frozenset({"isinstance", "issubclass"})


def _type_names(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) or (isinstance(node, ast.Tuple) and all(isinstance(e, ast.Name) for e in node.elts))


class Uses(NamedTuple):
    """How a function uses the names it reads: its `Names`, its calls of plain names (the name, the
    names the call reads, the call) in the order of a walk, and the names it reads otherwise
    (annotations aside: where such a value goes is not followed). A decorator or default value
    runs where the function is defined, where none of its locals lives: each name it reads counts
    as called by it, with what it reads (`@register(flip, Image)` passes `flip` nothing new)."""

    names: Names
    calls: tuple[tuple[str, frozenset[str], ast.expr], ...]
    values: frozenset[str]


def uses_of(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Uses:
    calls: list[tuple[str, frozenset[str], ast.expr]] = []
    for outer in (*fn.decorator_list, *fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)):
        reads = frozenset(n.id for n in ast.walk(outer) if isinstance(n, ast.Name))
        calls.extend((name, reads, outer) for name in sorted(reads))
    values: set[str] = set()
    stack: list[ast.AST] = list(fn.body)  # its parameters hold annotations only
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            calls.append((node.func.id, frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name)), node))
            args = node.args
            if node.func.id in _TYPE_CHECKS and len(args) == 2 and _type_names(args[1]):
                args = args[:1]  # `isinstance(x, C)`, `isinstance(x, (A, B))`: the classes are passed nothing
            stack.extend((*args, *node.keywords))
            continue
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                values.add(node.id)
            continue
        skip = (
            node.returns if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            else node.annotation if isinstance(node, (ast.arg, ast.AnnAssign))
            else None
        )
        stack.extend(child for child in ast.iter_child_nodes(node) if child is not skip)
    return Uses(member_names(fn), tuple(calls), frozenset(values))


def class_uses(cls: ast.ClassDef, method: Callable[[ast.FunctionDef | ast.AsyncFunctionDef], Uses] = uses_of) -> Uses:
    """A class's `Uses`: its methods' together (what one method binds, another reads through `self`),
    and every name its other statements, header and decorators read as a value. `method`: each
    method's `Uses` (the language server's remembers those of the methods an edit kept)."""
    methods = [method(m) for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
    rest = [*cls.decorator_list, *cls.bases, *cls.keywords, *(s for s in cls.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))]
    values = {n.id for node in rest for n in ast.walk(node) if isinstance(n, ast.Name)}
    names = Names(
        frozenset().union(*(u.names.binds for u in methods)),
        frozenset().union(*(u.names.reads for u in methods)),
        tuple(b for u in methods for b in u.names.bindings),
    )
    return Uses(names, tuple(c for u in methods for c in u.calls), frozenset(values).union(*(u.values for u in methods)))


def changed_calls(
    before: ast.FunctionDef | ast.AsyncFunctionDef, after: ast.FunctionDef | ast.AsyncFunctionDef, old: Uses, new: Uses, callees: frozenset[str]
) -> frozenset[str] | None:
    """For two versions of a function (and their `Uses`): the names it may pass other values to
    (see `passes_changed`) among `callees` and the names it reads otherwise, or None when its name
    or signature changed. A call passes the same values when its text is the same but for numbers
    and positions (in the same order among the calls of that name) and it reads no name whose
    binding changed (see the module's docstring)."""
    if before.name != after.name or _signature(before) != _signature(after):
        return None
    outward, local = _rebound(old.names, new.names)
    changed = _spread(new.names, local | (outward - {RETURN}))

    def texts(uses: Uses, changed: frozenset[str]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for name, reads, call in uses.calls:
            if name in callees:
                found.setdefault(name, []).append("\0changed" if reads & changed else _NUMBER.sub("#", ast.dump(call)))
        return found

    was, now = texts(old, frozenset()), texts(new, changed)
    return frozenset(n for n in was.keys() | now.keys() if was.get(n) != now.get(n)) | old.values | new.values


def returns_same(old: Uses, new: Uses) -> bool:
    """Two versions of a function hand their callers the same values: no `return`, `yield` or
    `global` binding differs, nor reads a local whose binding does (numbers aside, as in
    `changed_calls`)."""
    outward, local = _rebound(old.names, new.names)
    return not _passed_on(new.names, set(), outward, local)


def passes_changed(uses: Uses, names: frozenset[str]) -> frozenset[str]:
    """The names an unchanged function (its `Uses`) may pass changed values to, when the values of
    `names` may have changed: those it calls with an argument that reads one of them (directly or
    through a local bound from one), and those it reads otherwise. The parameters of every other
    function it calls receive what they received: what the data flow and the kinds make of them
    comes from the call sites."""
    changed = _spread(uses.names, set(names))
    return frozenset(name for name, reads, _ in uses.calls if reads & changed) | uses.values


def _spread(names: Names, changed: set[str]) -> frozenset[str]:
    """`changed` and the names bound from them, transitively, by the function's binding statements."""
    grown = True
    while grown:
        grown = False
        for b in names.bindings:
            bound = b.local | (b.outward - {RETURN})
            if b.reads & changed and not bound <= changed:
                changed |= bound
                grown = True
    return frozenset(changed)


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    return _NUMBER.sub("#", "\n".join(ast.dump(n) for n in (*fn.decorator_list, fn.args, *([fn.returns] if fn.returns else []))))


def _header(cls: ast.ClassDef, text: Callable[[ast.AST], str]) -> tuple[object, ...]:
    """The class without its methods (header, position, other body statements), for comparison: where each part
    is and the text of its lines (`text`), which at the same place parses into the same nodes."""
    rest = [s for s in cls.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
    parts = (*cls.decorator_list, *cls.bases, *cls.keywords, *rest)
    return cls.name, cls.lineno, [(n.lineno, n.col_offset, n.end_lineno, n.end_col_offset, text(n)) for n in parts]  # type: ignore[attr-defined]


def settled_members(
    old: ast.ClassDef,
    new: ast.ClassDef,
    same: Callable[[str], bool],
    outside: frozenset[str],
    text: Callable[[ast.AST, bool], str],
    names: dict[str, Names],
    known: Callable[[ast.FunctionDef | ast.AsyncFunctionDef], Names | None] = lambda node: None,
) -> tuple[frozenset[str], frozenset[str]] | None:
    """For a top-level class, the only top-level statement an edit changed (`old` and `new`
    versions): the names of its methods whose facts the edit cannot have changed, as
    (settled, with their loops), or None when the class changed outside its methods (header,
    bases, another body statement, its methods' order or names) and every method must be taken
    as changed. `same(method)`: the model holds the very objects of the last version for that
    method and the functions nested in it. `outside`: the names bound by the other top-level
    statements whose facts may have changed (they are re-checked). `text(node, is_new)`: the
    source lines of a node (a method, a part of the class's header) in the new or the old
    version. `names`: `member_names` by method text
    (they hold no position), read and left holding this call's (a keystroke typed and then
    deleted finds the method's text of two calls ago); `known(method)`: its `Names` where the
    caller has them otherwise (the language server's `Uses` of the very node), or None.

    A method is unsettled when its objects changed, or it reads a name an unsettled method passes
    on: its own name (a caller inlines it), or an attribute whose binding changed in it (see the
    module's docstring), or a name in `outside`. A binding changes when it reads a changed value:
    such an attribute, a name in `outside`, or the name of a method whose `return` changed. Its
    loops are unsettled also when an unsettled method reads a name it binds (a callee,
    transitively: its callers' contexts may have changed)."""
    def methods(cls: ast.ClassDef) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        return [s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]

    before, after = methods(old), methods(new)
    if [m.name for m in before] != [m.name for m in after] or _header(old, lambda n: text(n, False)) != _header(new, lambda n: text(n, True)):
        return None  # a method added, removed, renamed or moved; the class changed outside its methods

    seen: dict[str, Names] = {}

    def unit(node: ast.FunctionDef | ast.AsyncFunctionDef, is_new: bool) -> Names:
        key = text(node, is_new)
        found = seen.get(key) or names.get(key) or known(node)
        if found is None:
            found = member_names(node)
        seen[key] = found
        return found

    units = [unit(node, True) for node in after]  # by position: a property and its setter share a name
    changed = {i: _rebound(unit(before[i], False), units[i]) for i, node in enumerate(after) if not same(node.name)}
    names.clear()
    names.update(seen)
    # `spread`: names whose readers are unsettled (a caller inlines the events of a method that
    # changed); `values`: names whose value may have changed, so a binding that reads one does too.
    spread, values = set(outside), set(outside)
    moved: set[int] = set()

    def move(i: int, outward: set[str]) -> None:
        moved.add(i)
        spread.add(after[i].name)
        if RETURN in outward:
            values.add(after[i].name)
        spread.update(outward - {RETURN})
        values.update(outward - {RETURN})

    for i, (outward, _) in changed.items():
        move(i, outward)
    grown = True
    while grown:
        grown = False
        for i, (_, reads, _) in enumerate(units):
            if i not in moved and reads & spread:
                move(i, set())
                grown = True
        for i in sorted(moved):  # what each unsettled method's bindings pass on, as `values` grows
            outward, local = changed.get(i, (set(), set()))
            more = _passed_on(units[i], values, outward, local)
            if more - values - {RETURN} or (RETURN in more and after[i].name not in values):
                move(i, more)
                grown = True
    reach: set[str] = set()
    for i in moved:
        reach |= units[i].reads
    called: set[int] = set()
    grown = True
    while grown:
        grown = False
        for i, (binds, reads, _) in enumerate(units):
            if i not in moved and i not in called and binds & reach:
                called.add(i)
                reach |= reads
                grown = True
    unsettled = {after[i].name for i in moved}
    settled = frozenset(m.name for m in after) - unsettled
    return settled, settled - {after[i].name for i in called}
