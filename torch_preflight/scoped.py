"""Rule results cached per top-level statement, for the language server (issue 6).

After an edit, only the *dirty* top-level statements are checked again:

- the statements whose text changed (matched by the common prefix and suffix of the old
  and new statement lists; unchanged statements after the edit keep their text and move
  by a whole number of lines);
- closed under name links: a statement that reads a module-level name another dirty
  statement binds (before or after the edit), binds one too (a redefinition), or binds a
  name a dirty statement reads (callers and callees in the file, module-level variables,
  base classes), is dirty too.
  Import statements only bind: they never pull in the statements that read them, and an
  edit to one (or to anything that changes the import map, or to a statement that calls
  `torch.set_grad_enabled`) makes the whole file dirty.

The `LOCAL_RULES` run over a model of the dirty statements plus the imports
(`IncrementalBuilder.submodel`); their findings in clean statements come from the cache,
moved by the statement's line delta. Every other rule reads something of the whole module
(a text search over the file, a module-wide fact such as "a validation split exists",
attribute reads anywhere, the VRAM estimate, another file of the project) and runs over
the whole model on every change. A rule not listed is treated as whole-module, so a new
rule is correct before anyone audits it.

tests/lsp/test_incremental.py checks with hypothesis that the result equals a fresh
`analyze()` after random edit sequences.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from torch_preflight.core.config import Config
from torch_preflight.core.dataflow import CHECKPOINT, piece_nodes
from torch_preflight.core.diagnostics import Diagnostic, Edit, Fix, Related
from torch_preflight.core.incremental import IncrementalBuilder
from torch_preflight.core.members import (
    Names,
    Uses,
    changed_calls,
    class_uses,
    passes_changed,
    returns_same,
    settled_members,
    uses_of,
)
from torch_preflight.core.memory import ShapeMismatch
from torch_preflight.core.names import DISPLAYS, blocks, child_nodes, long_display, piecewise
from torch_preflight.core.noqa import scan
from torch_preflight.core.project import Dependency, Project
from torch_preflight.core.semantic import ModuleModel
from torch_preflight.core.source import Position, SourceText, Span
from torch_preflight.core.training import TrainingModel
from torch_preflight.rules.base import Context, Rule

from .analyze import Result, _memory, _shapes, certain, enabled_rules, runnable

# Rules whose findings inside a top-level statement depend only on that statement, the
# statements linked to it by module-level names, and the imports (audited by reading them).
# Not TPF008 / TPF009: a function reached only from other modules is judged by its siblings in the
# file (another function handed the same model, another method of the same trainer class), which
# no name links to it.
LOCAL_RULES = frozenset(
    {
        "TPF001", "TPF002", "TPF003", "TPF005", "TPF010", "TPF011", "TPF013", "TPF015", "TPF016",
        "TPF101", "TPF102", "TPF103", "TPF104", "TPF301",
    }
)  # fmt: skip
NARROWED_LINES = 200  # see `_dirty`


@dataclass(frozen=True)
class _Unit:
    text: str
    binds: frozenset[str]  # module-level names the statement binds
    reads: frozenset[str]  # every name and attribute it mentions
    is_import: bool
    plain: bool  # defines no function, class or lambda: nothing it exports depends on who reads it
    grad_switch: bool = False  # calls `set_grad_enabled` outside every function (see `_global`)
    imported: str = ""  # an import statement's nodes without positions: what it brings in, in order
    function: ast.FunctionDef | ast.AsyncFunctionDef | None = field(default=None, compare=False)  # the statement, when a function
    cls: ast.ClassDef | None = field(default=None, compare=False)  # the statement, when a class


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> frozenset[str]:
    args = node.args
    return frozenset(a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a is not None)


_Names = tuple[frozenset[str], frozenset[str], bool]  # (binds, reads, plain) of some nodes
_Elements = dict[int, tuple[ast.AST, tuple[bool, frozenset[str]], _Names]]  # `_names` of long displays' elements, by node


def _unit(text: str, body: list[ast.stmt], members: dict[int, tuple[ast.AST, _Names]] | None = None, elements: _Elements | None = None) -> _Unit:
    """What a top-level statement binds at module level and which names it reads. A read of
    a parameter of the function it occurs in is not a read of a module-level name (both the
    semantic model and the data flow stop at parameters); every other read counts, even of a
    local, since a read before the local assignment may reach the module-level binding.
    `members`: the names of the statements of a class's body or of a top-level block's
    (`core.names.PIECEWISE`) by node (id -> (node, names)), read and filled: an edit inside one
    method or function gives the other statements as the very nodes of the previous version
    (core/incremental.py), so only the edited one is walked; `elements`: likewise the names of
    the elements of long displays (`_names`)."""
    binds: set[str] = set()
    reads: set[str] = set()
    plain = True
    roots: list[ast.AST] = []
    for stmt in body:
        if members is None or not piecewise(stmt):
            roots.append(stmt)
            continue
        b, r, p = _split_names(stmt, members)
        binds |= b
        reads |= r
        plain = plain and p
    b, r, p = _names(roots, True, elements=elements)
    binds |= b
    reads |= r
    is_import = bool(body) and all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in body)  # a statement the repair dropped is none
    imported = "\n".join(ast.dump(s) for s in body) if is_import else ""
    function = body[0] if len(body) == 1 and isinstance(body[0], (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    cls = body[0] if len(body) == 1 and isinstance(body[0], ast.ClassDef) else None
    return _Unit(text, frozenset(binds), frozenset(reads), is_import, plain and p, "set_grad_enabled" in text and _grad_switch(body), imported, function, cls)


def _split_names(node: ast.AST, members: dict[int, tuple[ast.AST, _Names]]) -> _Names:
    """`_names([node], True)` of a class or a statement that runs its blocks once, at the top
    level: its header's, and its block statements' from `members` (a block's nested ones and
    the classes there split in turn, as `core.dataflow.piece_nodes` keeps them)."""
    is_class = isinstance(node, ast.ClassDef)
    binds: set[str] = {node.name} if is_class else set()  # type: ignore[attr-defined]
    reads: set[str] = set()
    plain = not is_class
    held = {id(s) for s in blocks(node)}
    for child in ast.iter_child_nodes(node):
        if id(child) not in held:
            b, r, p = _names([child], not is_class)
        elif not is_class and piecewise(child):
            b, r, p = _split_names(child, members)
        else:
            entry = members.get(id(child))
            if entry is None or entry[0] is not child:
                entry = members[id(child)] = (child, _names([child], not is_class))
            b, r, p = entry[1]
        binds |= b
        reads |= r
        plain = plain and p
    return frozenset(binds), frozenset(reads), plain


def _grad_switch(body: list[ast.stmt]) -> bool:
    """A `set_grad_enabled` call outside every function and lambda (module or class level): it
    decides whether the module-level loops after it record graphs. Inside a function it is one
    of that function's events, which only its own loops, and those reaching it by name, read."""
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend((*node.decorator_list, *node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)))
            continue
        if isinstance(node, ast.Lambda):
            continue
        if (isinstance(node, ast.Attribute) and node.attr == "set_grad_enabled") or (isinstance(node, ast.Name) and node.id == "set_grad_enabled"):
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def _names(roots: list[ast.AST], top: bool, params: frozenset[str] = frozenset(), elements: _Elements | None = None) -> _Names:
    """(binds, reads, plain) of `roots` (see `_unit`), at module level when `top`; a class
    body's statement is not (`top` False), like the statements nested in it; `params`: of the
    function they are in. `elements`: the names of each element of a long display
    (`names.long_display`) by node, read and filled: an edit inside one element of a generated
    table gives the others as the last version's nodes (core/incremental.py)."""
    binds: set[str] = set()
    reads: set[str] = set()
    plain = True
    none: frozenset[str] = frozenset()
    stack: list[tuple[ast.AST, bool, frozenset[str]]] = [(node, top, params) for node in roots]  # (node, module level, params)
    while stack:
        node, top, params = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            plain = False
        if isinstance(node, ast.Name):
            if node.id not in params:
                reads.add(node.id)
            if top and not isinstance(node.ctx, ast.Load):
                binds.add(node.id)
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            if top and not isinstance(node, ast.Lambda):
                binds.add(node.name)
            inner = _params(node)
            for field in ("decorator_list", "args", "returns"):  # evaluated in the enclosing scope
                value = getattr(node, field, None)
                for child in value if isinstance(value, list) else [value]:
                    if child is not None:
                        stack.append((child, top, params))
            for child in node.body if isinstance(node.body, list) else [node.body]:
                stack.append((child, False, inner))
            continue
        if isinstance(node, ast.ClassDef):
            if top:
                binds.add(node.name)
            for child in ast.iter_child_nodes(node):
                stack.append((child, False, none))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)) and top:  # one in a function binds a local (the import map is keyed)
            for alias in node.names:
                binds.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.Global):
            binds.update(node.names)
        elif elements is not None and top and type(node) in DISPLAYS:  # at module level: what core/incremental.py splices
            children = child_nodes(node)
            if long_display(node, children):
                for child in children:
                    entry = elements.get(id(child))
                    if entry is None or entry[0] is not child or entry[1] != (top, params):
                        entry = elements[id(child)] = (child, (top, params), _names([child], top, params))
                    binds |= entry[2][0]
                    reads |= entry[2][1]
                    plain = plain and entry[2][2]
                continue
        for child in ast.iter_child_nodes(node):
            stack.append((child, top, params))
    return frozenset(binds), frozenset(reads), plain


@dataclass
class _State:
    key: tuple[object, ...]  # config, import map, rule set
    units: list[_Unit]
    starts: list[int]
    lines: int
    found: list[list[Diagnostic]]  # raw (unsuppressed) findings of the local rules, per statement
    # the other files of the project that those findings, and the training models kept with them, rest on
    # (filled on while the version is checked): the state is kept while every one is unchanged
    deps: dict[str, Dependency]


class ScopedChecker:
    """Checks one document's successive versions, reusing the local rules' findings of
    statements an edit cannot affect."""

    def __init__(self) -> None:
        self._state: _State | None = None
        self.rechecked = 0  # statements checked by the local rules in the last run (for tests)
        self._shapes: tuple[tuple[object, ...], tuple[ShapeMismatch, ...]] | None = None  # TPF501's facts, by _shape_key
        self._training: TrainingModel | None = None  # the whole-module rules' training model of the last run
        self.shapes_computed = 0  # times the shape facts were computed (for tests)
        self._members: dict[int, tuple[ast.AST, _Names]] = {}  # see `_unit`: the last version's class-body statements
        self._elements: _Elements = {}  # see `_unit`: the elements of the last version's long displays
        self._member_names: dict[str, dict[str, Names]] = {}  # by top-level class name: see `core.members.settled_members`
        self._local_training: TrainingModel | None = None  # the local rules' training model of the last run, over a submodel
        self._uses: dict[str, Uses] = {}  # `members.uses_of` of the function statements of the last two versions, by text
        self._method_uses: dict[int, tuple[ast.AST, Uses]] = {}  # of the methods whose nodes the builder keeps, by node

    def check(
        self,
        builder: IncrementalBuilder,
        model: ModuleModel,
        config: Config,
        path: str,
        project: Project | None = None,
        early: Callable[[Result], None] | None = None,
        between: Callable[[], None] | None = None,
    ) -> Result:
        """`early`, when given and whole-module rules are enabled, receives the local rules'
        result before those rules run (the server publishes it first); it may raise to
        abandon the rest, the local rules' cache kept. `between` is called before each
        whole-module rule, and may raise likewise (a newer version arrived)."""
        source = model.source
        rules = runnable(enabled_rules(config, path), source.text)
        local = [r for r in rules if r.code in LOCAL_RULES]
        whole = [r for r in rules if r.code not in LOCAL_RULES]
        last = previous = self._state
        previous_training, previous_local = self._training, self._local_training
        self._state = self._training = self._local_training = None
        view = (project if project is not None else Project()).view()
        if previous is not None and not all(view.project.unchanged(d) for d in previous.deps.values()):
            previous = previous_training = previous_local = None  # a file the last findings read changed
        units: list[_Unit] = []
        current: set[int] = set()  # the ids of the nodes the builder keeps pieces of (a class's methods ...)
        for (_, code, body), old in zip(builder.units, _reuse(last, builder), strict=True):
            units.append(old if old is not None and old.text == code else _unit(code, body, self._members, self._elements))
            current.update(id(c) for s in body for c in piece_nodes(s))
        self._members = {k: v for k, v in self._members.items() if k in current}
        self._elements = {k: v for k, v in self._elements.items() if builder.holds_element(k)}
        starts = [chunk[0] for chunk, _, _ in builder.units]
        key = (config, tuple(sorted(model.imports.aliases.items())), tuple(r.code for r in local))
        lines = len(source.line_starts)
        diff = _diff(previous, units, starts, lines) if previous is not None and previous.key == key else None
        uses: dict[str, Uses] = {}

        method_uses: dict[int, tuple[ast.AST, Uses]] = {}

        def uses_of_unit(unit: _Unit | ast.FunctionDef | ast.AsyncFunctionDef) -> Uses:
            if not isinstance(unit, _Unit):  # a method
                known = method_uses.get(id(unit)) or self._method_uses.get(id(unit))
                if known is None or known[0] is not unit:
                    known = (unit, uses_of(unit))
                method_uses[id(unit)] = known
                return known[1]
            found = uses.get(unit.text) or self._uses.get(unit.text)
            if found is None:
                found = uses_of(unit.function) if unit.function is not None else class_uses(unit.cls, uses_of_unit)  # type: ignore[arg-type]
            uses[unit.text] = found
            return found

        def known_names(method: ast.FunctionDef | ast.AsyncFunctionDef) -> Names | None:
            """The `Names` of a method whose `Uses` this check or the last one found."""
            known = method_uses.get(id(method)) or self._method_uses.get(id(method))
            return known[1].names if known is not None and known[0] is method else None

        closures = None
        if previous is not None and diff is not None:
            # the plain closure first: when it leaves a submodel to check, or the edit is not inside one
            # function (whose calls say what it passes on), narrowing it costs more than it saves; so it
            # does for a method of a class that is most of the module (over two thirds of its lines: the
            # callees it could spare are few, and `settled_members` settles its other methods anyway)
            closures = _dirty(previous, units, diff, None)
            one = (
                diff.prefix + diff.suffix + 1 == len(units) == len(previous.units)
                and _edited_function(previous.units[diff.prefix], units[diff.prefix]) is not None
                and (units[diff.prefix].cls is None or 3 * _span(builder, diff.prefix) <= 2 * lines)
            )
            if closures is not None and one and not _small(closures[1], builder, lines):
                closures = _dirty(previous, units, diff, uses_of_unit)
        kept = {u.text for u in units} | ({u.text for u in last.units} if last is not None else set())
        self._uses = {t: u for t, u in {**self._uses, **uses}.items() if t in kept}  # a reader's, while its text stays
        # a method's `Uses` while its node stays: the next edit's old version, and what `settled_members`
        # knows of the methods an edit of their class leaves alone, also when the last edits were elsewhere
        self._method_uses = {**{k: v for k, v in self._method_uses.items() if k in current}, **method_uses}
        moved, dirty, silent = closures if closures is not None else (None, None, set())
        found: list[list[Diagnostic]] = [[] for _ in units]
        if dirty is None or not _small(dirty, builder, lines):
            # most of the module (by statements or by lines: one large class): the whole model,
            # whose training model the whole-module rules share, rather than a submodel with its own
            dirty = set(range(len(units)))
            sub = model
        elif silent:
            sub = model  # a callee checked again without its other callers and callees: only the whole model holds them
        else:
            keep = sorted(dirty | {i for i, u in enumerate(units) if u.is_import})
            sub = builder.submodel(keep)
        self.rechecked = len(dirty)
        shared: Context | None = None  # over the whole model: the whole-module rules', and the local rules' when they re-check it all
        if whole or sub is model:
            shared = Context(model, config, _memory(model, config, path) if whole else (), view)  # TPF501's shapes: after `early`
        classes = {u.cls.name for u in units if u.cls is not None}
        self._member_names = {name: names for name, names in self._member_names.items() if name in classes}
        settled = _settled(previous_training or previous_local, builder, model, units, diff, moved, silent, self._member_names, known_names) if diff is not None and moved is not None else None
        if silent:  # their callers pass what they passed: their expansions stand, not their loops' facts
            settled = (builder.owned(silent)[0] | (settled[0] if settled else frozenset()), settled[1] if settled else frozenset())
        reusable = settled is not None and bool(settled[0])
        if shared is not None and previous_training is not None and moved is not None and (len(moved) < len(units) or reusable):
            _reuse_training(shared.training, previous_training, builder, set(range(len(units))) - moved, settled)
        if shared is not None and previous_training is not None:
            shared.training.carry_kinds(previous_training)  # what each function may reach, when no call can resolve otherwise
        if dirty and local:
            ctx = shared if sub is model and shared is not None else Context(sub, config, (), view)
            if ctx is not shared and reusable and previous_local is not None:  # the methods' expansions only: their loops' callers may differ in a submodel
                _reuse_training(ctx.training, previous_local, builder, set(), (settled[0], frozenset()))  # type: ignore[index]
            if ctx is not shared:
                if previous_local is not None:
                    ctx.training.carry_kinds(previous_local)
                self._local_training = ctx.training
            for rule in local:
                for diagnostic in rule.check(ctx):
                    index = _owner(starts, diagnostic.span.start.line)
                    if index in dirty:
                        found[index].append(diagnostic)
        if previous is not None and diff is not None and len(dirty) < len(units):
            _carry(previous, units, diff, dirty, found)
        diagnostics = [d for per in found for d in per]
        # what the carried findings and the reused training models read, and what this check reads
        deps = {**previous.deps, **view.used} if previous is not None and diff is not None else dict(view.used)
        self._state = _State(key, units, starts, lines, found, deps)
        if shared is not None and "training" in shared.__dict__:
            self._training = shared.training  # kept even when a newer version abandons the whole-module rules
        if shared is not None and early is not None and whole:
            early(_result(diagnostics, model, builder, path, deps))
        if shared is not None:
            if any(r.code == "TPF501" for r in whole):
                shared.shapes = self._shape_facts(builder, units, model, config, path)
            self._whole_rules(whole, shared, diagnostics, between)
            if "training" in shared.__dict__:
                self._training = shared.training
        deps.update(view.used)
        return _result(diagnostics, model, builder, path, deps)

    @staticmethod
    def _whole_rules(rules: list[Rule], ctx: Context, diagnostics: list[Diagnostic], between: Callable[[], None] | None) -> None:
        """Run the whole-module rules. `between` is called before each, and inside the long
        provenance searches of the data-flow facts (`dataflow.CHECKPOINT`), so a newer version
        need not wait for one to end; when it raises there, the model's data-flow facts, which
        may hold part of that search, are dropped (built again if this model is checked again)."""
        if between is None:
            for rule in rules:
                diagnostics.extend(rule.check(ctx))
            return
        model = ctx.model
        model.__dict__[CHECKPOINT] = between
        try:
            for rule in rules:
                between()
                try:
                    diagnostics.extend(rule.check(ctx))
                except BaseException:
                    model.__dict__.pop("_tpf_dataflow", None)
                    raise
        finally:
            model.__dict__.pop(CHECKPOINT, None)

    def _shape_facts(self, builder: IncrementalBuilder, units: list[_Unit], model: ModuleModel, config: Config, path: str) -> tuple[ShapeMismatch, ...]:
        """`analyze._shapes`, reused while `_shape_key` is unchanged."""
        key = _shape_key(builder, units, model, config)
        if self._shapes is not None and self._shapes[0] == key:
            return self._shapes[1]
        found = _shapes(model, config, path)
        self.shapes_computed += 1
        self._shapes = (key, found)
        return found


def _result(diagnostics: list[Diagnostic], model: ModuleModel, builder: IncrementalBuilder, path: str, deps: dict[str, Dependency]) -> Result:
    """The findings outside the regions the error recovery made uncertain, less the suppressed ones, in order."""
    diagnostics = certain(diagnostics, model, builder.repaired)
    suppressions = scan(model.source)
    kept = [d for d in diagnostics if not suppressions.suppresses(d)]
    kept.sort(key=Diagnostic.sort_key)
    return Result(path, model.source, kept, [], model, len(diagnostics) - len(kept), tuple(deps.values()))


def _settled(
    previous: TrainingModel | None,
    builder: IncrementalBuilder,
    model: ModuleModel,
    units: list[_Unit],
    diff: _Diff,
    moved: set[int],
    silent: set[int],
    names: dict[str, dict[str, Names]],
    known: Callable[[ast.FunctionDef | ast.AsyncFunctionDef], Names | None],
) -> tuple[frozenset[str], frozenset[str]] | None:
    """Per-method units (`core.members.settled_members`): when the one statement an edit
    changed is a top-level class, the qualnames of the functions in it (methods and the
    functions nested in them) whose training facts the edit cannot have changed, as (settled,
    with their loops too). A `silent` statement keeps what it exports (`_dirty`): its names
    change no method that reads them. `names`: `settled_members`'s memo of each class, by name."""
    changed = range(diff.prefix, len(units) - diff.suffix)
    if previous is None or len(changed) != 1 or previous.model.tree is None:
        return None
    body = builder.units[changed[0]][2]
    if len(body) != 1 or not isinstance(body[0], ast.ClassDef):
        return None
    new, old_model = body[0], previous.model
    old = next((s for s in old_model.tree.body if isinstance(s, ast.ClassDef) and s.name == new.name and s.lineno == new.lineno), None)
    if old is None:
        return None

    def by_method(functions: dict[str, object]) -> dict[str, dict[str, object]]:  # the class's functions, by the method holding them
        groups: dict[str, dict[str, object]] = {}
        for q, f in functions.items():
            if q.startswith(new.name + "."):
                groups.setdefault(q.split(".")[1], {})[q] = f
        return groups

    now, before = by_method(model.functions), by_method(old_model.functions)

    def same(method: str) -> bool:
        mine, old_mine = now.get(method, {}), before.get(method, {})
        return bool(mine) and mine.keys() == old_mine.keys() and all(old_mine[q] is f for q, f in mine.items())

    def text(node: ast.AST, is_new: bool) -> str:
        source = model.source if is_new else old_model.source
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))]) - 1  # type: ignore[attr-defined]
        end = node.end_lineno or node.lineno  # type: ignore[attr-defined]
        starts = source.line_starts
        return source.text[starts[first] : starts[end] if end < len(starts) else len(source.text)]

    outside = frozenset().union(*(units[j].binds for j in moved - silent if j != changed[0]))
    found = settled_members(old, new, same, outside, text, names.setdefault(new.name, {}), known)
    if found is None:
        return None

    def of(methods: frozenset[str]) -> frozenset[str]:
        return frozenset(q for method in methods for q in now.get(method, ()))

    return of(found[0]), of(found[1])


def _reuse_training(
    training: TrainingModel,
    previous: TrainingModel,
    builder: IncrementalBuilder,
    clean: set[int],
    settled: tuple[frozenset[str], frozenset[str]] | None = None,
) -> None:
    """Seed the training model (and the module's call index) with the previous run's results
    for the functions and loops of clean statements (the same reasoning that lets the local rules' findings there be reused),
    and for the `settled` functions of an edited class (`_settled`: (functions, functions whose
    loops too)), when the builder reused their very objects."""
    owned, loops = builder.owned(clean)
    new, old = training.model, previous.model
    if settled is not None:
        owned |= settled[0]
        loops |= {i for i, loop in new.loops.items() if loop.function in settled[1]}
    functions = frozenset(q for q in owned if old.functions.get(q) is new.functions[q])
    new.reuse_calls(old, functions)
    training.reuse(previous, functions, frozenset(i for i in loops if old.loops.get(i) is new.loops[i]), builder.module_events(clean))


def _shape_key(builder: IncrementalBuilder, units: list[_Unit], model: ModuleModel, config: Config) -> tuple[object, ...]:
    """What the shape facts (estimator/shapes.py) depend on. They come from interpreting the
    module's script (estimator/interp.py): top-level statements run in order, classes are
    built, and a function's body runs only when something calls it. Defining a function
    evaluates neither its defaults nor its decorators (and costs one step of the budget per
    statement), so a top-level function that no other top-level code or class reaches by name
    enters the key only by its name; every statement that runs or can be reached enters with
    its text and first line (the findings' positions are absolute). Also: the import map, the
    config and the textual gates of `analyze._shapes`."""
    text = model.source.text
    defs_only = [bool(body) and all(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) for s in body) for _, _, body in builder.units]
    reach = {i for i, only in enumerate(defs_only) if not only}
    reads: set[str] = set()
    for i in reach:
        reads |= units[i].reads
    grown = True
    while grown:
        grown = False
        for i, u in enumerate(units):
            if i not in reach and u.binds & reads:
                reach.add(i)
                reads |= u.reads
                grown = True
    parts = tuple(
        (chunk[0], code) if i in reach else tuple((type(s).__name__, getattr(s, "name", "")) for s in body)
        for i, (chunk, code, body) in enumerate(builder.units)
    )
    gates = ("torch" in text, "Sequential(" in text, any(c.is_module for c in model.classes.values()))
    return (config, tuple(sorted(model.imports.aliases.items())), gates, parts)


def _reuse(previous: _State | None, builder: IncrementalBuilder) -> list[_Unit | None]:
    """Old units by text, so unchanged statements are not walked again."""
    by_text = {u.text: u for u in previous.units} if previous is not None else {}
    return [by_text.get(code) for _, code, _ in builder.units]


def _owner(starts: list[int], line: int) -> int:
    """Index of the top-level statement holding `line` (starts[0] is 0)."""
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= line:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class _Diff:
    prefix: int  # statements unchanged at the start (same text, same line)
    suffix: int  # statements unchanged at the end (same text, moved by `delta` lines)
    old_end: int  # first old line of the unchanged end
    new_end: int  # first old line after the unchanged start
    delta: int

    def line(self, old: int) -> int | None:
        """Where an old line is now; None inside the edited statements."""
        if old < self.new_end:
            return old
        if old >= self.old_end:
            return old + self.delta
        return None


def _diff(previous: _State, units: list[_Unit], starts: list[int], lines: int) -> _Diff:
    old = previous.units
    n = min(len(old), len(units))
    prefix = 0
    while prefix < n and old[prefix].text == units[prefix].text and previous.starts[prefix] == starts[prefix]:
        prefix += 1
    suffix = 0
    while suffix < n - prefix and old[-1 - suffix].text == units[-1 - suffix].text:
        suffix += 1
    old_end = previous.starts[len(old) - suffix] if suffix else previous.lines
    new_end = previous.starts[prefix] if prefix < len(old) else previous.lines
    return _Diff(prefix, suffix, old_end, new_end, lines - previous.lines)


def _global(unit: _Unit) -> bool:
    """An edit to this statement can change the findings of any other: an import, or a
    `torch.set_grad_enabled(...)` call at module level, which decides whether the statements
    after it record graphs (TPF005 and friends ask `grad_enabled_at`)."""
    return unit.is_import or unit.grad_switch


def _span(builder: IncrementalBuilder, index: int) -> int:
    """The lines of one top-level statement."""
    (a, b), _, _ = builder.units[index]
    return b - a


def _small(dirty: set[int], builder: IncrementalBuilder, lines: int) -> bool:
    """Whether the local rules check `dirty` on a submodel: under half the module's statements and lines."""
    return len(dirty) * 2 <= len(builder.units) and 2 * sum(_span(builder, i) for i in dirty) <= lines


def _dirty(
    previous: _State, units: list[_Unit], diff: _Diff, uses: Callable[[_Unit | ast.FunctionDef | ast.AsyncFunctionDef], Uses] | None
) -> tuple[set[int], set[int], set[int]] | None:
    """The statements to check again, as (moved, dirty, silent): the edited ones, closed under
    module-level name links (below). `dirty` is what the local rules re-check (their findings
    in a statement may read any statement linked to it); `moved` ⊆ `dirty` is the statements
    whose training-model facts may have changed, for `_reuse_training`; `silent` ⊆ `moved`: callees
    checked again whose other callers and callees are not (below), so the local rules check the
    whole model (and keep the findings of the dirty statements), and only their loops' facts are
    recomputed. None: an import (or a `set_grad_enabled` statement) changed."""
    old = previous.units
    changed_old = old[diff.prefix : len(old) - diff.suffix]
    changed = set(range(diff.prefix, len(units) - diff.suffix))
    if len(changed_old) == len(changed) and all(u.is_import and units[i].is_import and u.imported == units[i].imported for i, u in zip(sorted(changed), changed_old, strict=True)):
        return set(), changed, set()  # imports whose text changed, not what they bring in (`GIT,(` repaired to `GIT,`): only they are re-checked
    if any(_global(u) for u in changed_old) or any(_global(units[i]) for i in changed):
        return None
    # `binds` / `reads`: the names of the statements whose dirt spreads. A statement that reads
    # a name one of them binds (a caller, a user of a variable) spreads it: what it exports
    # (its expansion, its values' provenance) may have changed; so does one that binds such a
    # name too (two definitions of a class: the later one wins). So does a function or class
    # that one of them reads (a callee: its callers' contexts and arguments changed, and its
    # returns may carry them). For `moved`, a plain statement that one of them reads
    # (`d2l = sys.modules[__name__]`, `model = Net()`) is dirty but spreads nothing: what it
    # binds does not depend on who reads it, so the readers of a shared module-level name are
    # not all pulled in. `dirty` is the same closure with every statement spreading: it goes
    # on from `moved`, its quiet statements now spreading.
    # What a function spreads to its callees (a callee is checked again: its callers' contexts and
    # arguments changed, and its returns may carry them) is narrowed to the callees it may pass other
    # values to (`members.changed_calls` for the edited function, `members.passes_changed` for one
    # that spreads unchanged): another callee has the same parameters, so what it exports (its
    # expansion, its return's provenance) is the same; it is checked again (`silent`) but spreads nothing.
    # An edited function (or the one edited method of a class) that returns what it returned
    # (`members.returns_same`) changes its callers' expansions, not the values they pass on: its name
    # is no changed value for `passes_changed`.
    # (Not for a function over `NARROWED_LINES` lines: comparing its versions costs more than it saves.)
    # (`uses` None: no narrowing, every callee spreads.)
    edited: dict[int, frozenset[str]] = {}  # index -> the reads it spreads, for an edited function
    same: frozenset[str] = frozenset()  # what the edited statement binds, when its readers receive what they received
    pair = _edited_function(changed_old[0], units[diff.prefix]) if uses is not None and len(changed_old) == 1 and len(changed) == 1 else None
    if uses is not None and pair is not None and (pair[1].end_lineno or pair[1].lineno) - pair[1].lineno < NARROWED_LINES:
        before, after = pair
        callees = frozenset().union(*(u.binds for u in units if not u.is_import))
        old_uses, new_uses = (uses(changed_old[0]), uses(units[diff.prefix])) if before is changed_old[0].function else (uses(before), uses(after))
        loud = changed_calls(before, after, old_uses, new_uses, callees)
        if loud is not None:
            edited[diff.prefix] = (changed_old[0].reads | units[diff.prefix].reads) & loud
            mine = units[diff.prefix].binds
            if returns_same(old_uses, new_uses) and not any(u.binds & mine for i, u in enumerate(units) if i != diff.prefix):
                same = mine
    old_reads: set[str] = set()
    for u in changed_old:
        old_reads |= u.reads
    binds: set[str] = set()
    for u in changed_old:
        binds |= u.binds
    # `valued` ⊆ `binds`: the names whose values (not only facts) may have changed, what `passes_changed`
    # follows. A reader joins `binds` (its expansion inlines a changed callee) but passes on no changed
    # value unless it reads one; `carrying`: the statements whose names are valued.
    valued = binds - same
    carrying = set(changed)

    passed: dict[tuple[int, frozenset[str]], frozenset[str]] = {}

    def spread_reads(i: int) -> frozenset[str]:
        if i in edited:
            return edited[i]
        if uses is None or (units[i].function is None and units[i].cls is None) or i in changed:
            return units[i].reads
        key = (i, frozenset(valued & units[i].reads))
        if key not in passed:
            passed[key] = units[i].reads & passes_changed(uses(units[i]), key[1])
        return passed[key]

    spreading: set[int] = set()
    quiet: set[int] = set()  # dirty, spreading nothing (unless a later round finds it reads a changed name)
    silent: set[int] = set()  # dirty, spreading nothing in either closure (a callee passed the same values)
    moved: set[int] | None = None
    frontier = list(changed)
    while frontier or moved is None:
        if not frontier:  # `moved` is complete: let its quiet statements spread, for `dirty`
            moved = spreading | quiet | silent
            frontier, quiet = sorted(quiet), set()
            if not frontier:
                break
        spreading.update(frontier)
        quiet.difference_update(frontier)
        silent.difference_update(frontier)
        for i in frontier:
            binds |= units[i].binds
        grown = True
        while grown:  # a spreading statement that reads a valued name carries its own
            grown = False
            for i in spreading:
                own = units[i].binds - same if i in changed else units[i].binds
                if (i in carrying or units[i].reads & valued) and not own <= valued:
                    carrying.add(i)
                    valued |= own
                    grown = True
        reads = set(old_reads) if not edited else set()  # an edited function's old reads are in `edited`
        heard: set[str] = set()  # every name the spreading statements read
        for i in spreading:
            reads |= spread_reads(i)
            heard |= units[i].reads
        frontier = []
        for i, u in enumerate(units):
            if i in spreading or u.is_import:
                continue
            if u.binds & binds or not _movable(previous.found[_old_index(i, diff, len(old), len(units))], diff):
                frontier.append(i)  # a redefinition (which of the two wins may have changed), a moved finding
                carrying.add(i)
            elif u.reads & binds:
                frontier.append(i)  # a reader
            elif u.binds & reads:
                if u.plain and moved is None:
                    quiet.add(i)
                else:
                    frontier.append(i)
                    carrying.add(i)  # a callee passed other values
            elif u.binds & heard:
                silent.add(i)
    assert moved is not None
    return moved, spreading | silent, silent


def _edited_function(old: _Unit, new: _Unit) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.FunctionDef | ast.AsyncFunctionDef] | None:
    """The two versions of the function an edit changed: the statement itself, or the one method of
    a class whose other body statements are the very nodes of the last version (core/incremental.py
    reuses them) under the same header. None otherwise."""
    if old.function is not None and new.function is not None:
        return old.function, new.function
    a, b = old.cls, new.cls
    if a is None or b is None or a.name != b.name or len(a.body) != len(b.body):
        return None
    if [ast.dump(n) for n in (*a.decorator_list, *a.bases, *a.keywords)] != [ast.dump(n) for n in (*b.decorator_list, *b.bases, *b.keywords)]:
        return None
    changed = [(x, y) for x, y in zip(a.body, b.body, strict=True) if x is not y]
    if len(changed) != 1:
        return None
    x, y = changed[0]
    methods = (ast.FunctionDef, ast.AsyncFunctionDef)
    return (x, y) if isinstance(x, methods) and isinstance(y, methods) else None


def _old_index(i: int, diff: _Diff, old_count: int, new_count: int) -> int:
    return i if i < diff.prefix else i + old_count - new_count


def _positions(d: Diagnostic) -> list[Span]:
    spans = [d.span, *(r.span for r in d.related)]
    if d.fix is not None:
        spans.extend(e.span for e in d.fix.edits)
    return spans


def _movable(found: list[Diagnostic], diff: _Diff) -> bool:
    """Every position of these findings lies outside the edited statements."""
    return all(diff.line(s.start.line) is not None and diff.line(s.end.line) is not None for d in found for s in _positions(d))


def _carry(previous: _State, units: list[_Unit], diff: _Diff, dirty: set[int], found: list[list[Diagnostic]]) -> None:
    """Move the cached findings of clean statements to their new lines."""
    for i in range(len(units)):
        if i not in dirty:
            old = previous.found[_old_index(i, diff, len(previous.units), len(units))]
            found[i] = [_shift(d, diff) for d in old] if diff.delta else list(old)


def carried(findings: list[Diagnostic], old: SourceText, new: SourceText) -> list[Diagnostic]:
    """The findings of `old` that lie outside the lines an edit changed, moved to their lines
    in `new` (the lines are compared: the unchanged start and end of the text)."""
    a, b = old.text.split("\n"), new.text.split("\n")
    n = min(len(a), len(b))
    prefix = next((i for i in range(n) if a[i] != b[i]), n)
    suffix = next((i for i in range(n - prefix) if a[-1 - i] != b[-1 - i]), n - prefix)
    diff = _Diff(prefix, suffix, len(a) - suffix, prefix, len(b) - len(a))
    return [_shift(d, diff) if diff.delta else d for d in findings if _movable([d], diff)]


def _move(span: Span, diff: _Diff) -> Span:
    start, end = diff.line(span.start.line), diff.line(span.end.line)
    assert start is not None and end is not None
    return Span(Position(start, span.start.col), Position(end, span.end.col))


def _shift(d: Diagnostic, diff: _Diff) -> Diagnostic:
    fix = d.fix
    if fix is not None:
        fix = Fix(fix.title, tuple(Edit(_move(e.span, diff), e.content) for e in fix.edits), fix.applicability)
    return replace(d, span=_move(d.span, diff), fix=fix, related=tuple(Related(_move(r.span, diff), r.message) for r in d.related))
