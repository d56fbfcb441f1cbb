"""Def-use and provenance within one file: which split a value comes from, and which
fitted statistic or resampling it has been through.

The semantic model summarises expressions; provenance needs their shape (tuple positions,
slices, keyword literals), so this analysis reads the syntax tree the model keeps. It is
flow-insensitive inside loops and deliberately small:

- a *definition* is a binding of a dotted name (`X`, `self.x`): an assignment (tuple
  positions kept), a `for` target, an augmented assignment or a subscript store (both
  *update* the previous binding), a parameter;
- a use reads the latest definition of its name before it in the same scope, else the
  enclosing scopes' last one;
- `Info` of a value is the union over what it reads: split *sides* (train/val/test),
  *origins* (the definitions it derives from, transitively) and *taints* (the fit,
  statistic or resampling nodes whose result flows into it);
- split calls (`train_test_split`, `random_split`, `KFold().split`), slices assigned to
  train/test names, `Subset`, and datasets built with `train=False` / `split="test"` give
  sides; same-file function calls give the info of what the function returns.

Nothing unknown is guessed: a parameter without call sites has empty info, and rules stay
silent on empty info.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from torch_preflight.core.names import DISPLAYS, blocks, breadth_first, child_nodes, dotted, long_display, piecewise, tail
from torch_preflight.core.semantic import ModuleModel
from torch_preflight.core.source import Span

# node types without child nodes, which `DataFlow._walk` only files under their scope
_LEAVES: frozenset[type] = frozenset(
    {ast.Constant, ast.Load, ast.Store, ast.Del, *ast.operator.__subclasses__(), *ast.unaryop.__subclasses__(), *ast.boolop.__subclasses__(), *ast.cmpop.__subclasses__()}
)

TRAIN, VAL, TEST = "train", "val", "test"
_SIDE_WORDS = (
    (TEST, re.compile(r"test|holdout|hold_out|tst", re.I)),
    (VAL, re.compile(r"(^|_|[a-z])val(id|idation)?($|_|s|set|[A-Z0-9])|(^|_)dev($|_)|Val", re.I)),
    (TRAIN, re.compile(r"train|trn", re.I)),
)
SPLIT_FUNCTIONS = frozenset(
    {
        "sklearn.model_selection.train_test_split",
        "sklearn.cross_validation.train_test_split",
        "torch.utils.data.random_split",
        "torch.utils.data.dataset.random_split",
    }
)
CV_FUNCTIONS = frozenset(
    {
        "sklearn.model_selection.cross_val_score",
        "sklearn.model_selection.cross_validate",
        "sklearn.model_selection.cross_val_predict",
    }
)
SPLITTER_CLASS = re.compile(r"^(Repeated)?(Stratified)?(Group)?(KFold|ShuffleSplit|LeaveOneOut|LeaveOneGroupOut|LeavePOut|TimeSeriesSplit|PredefinedSplit)$")
TRANSFORMER_CLASS = re.compile(
    r"^(StandardScaler|MinMaxScaler|MaxAbsScaler|RobustScaler|QuantileTransformer|PowerTransformer|KBinsDiscretizer|Normalizer_?|"
    r"PCA|IncrementalPCA|KernelPCA|TruncatedSVD|FastICA|NMF|LatentDirichletAllocation|"
    r"SelectKBest|SelectPercentile|SelectFpr|SelectFdr|SelectFwe|GenericUnivariateSelect|VarianceThreshold|RFE|RFECV|SelectFromModel|"
    r"TfidfVectorizer|TfidfTransformer|CountVectorizer|HashingVectorizer_?|SimpleImputer|KNNImputer|IterativeImputer|TargetEncoder)$"
)
OVERSAMPLER_CLASS = re.compile(r"^(SMOTE|SMOTEN|SMOTENC|SVMSMOTE|BorderlineSMOTE|KMeansSMOTE|ADASYN|RandomOverSampler|SMOTETomek|SMOTEENN)$")
RESAMPLE_FUNCTIONS = frozenset({"sklearn.utils.resample", "sklearn.utils._indexing.resample"})
STAT_METHODS = frozenset({"mean", "std", "var", "min", "max", "nanmean", "nanstd", "amin", "amax", "median", "quantile", "percentile"})
_Pos = tuple[int, int]
_GROUPINGS = frozenset({"groupby", "resample", "rolling", "expanding", "ewm", "pivot_table"})
# a dataset constructor's arguments that pass functions, not rows: what they carry taints the
# data (a Normalize fitted elsewhere), but the rows do not come from them
_FUNCTION_KEYWORDS = frozenset({"transform", "target_transform", "transforms", "pre_transform", "collate_fn"})


def side_of_name(name: str) -> str | None:
    last = tail(name)
    for side, pattern in _SIDE_WORDS:
        if pattern.search(last):
            return side
    return None


def pos(node: ast.AST) -> _Pos:
    return (node.lineno, node.col_offset)  # type: ignore[attr-defined]


def end(node: ast.AST) -> _Pos:
    return (node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]


@dataclass(eq=False)  # hashed by identity; never assigned to (not `frozen`: see Info)
class Def:
    name: str
    scope: str
    at: _Pos  # where the binding takes effect (end of its statement)
    value: ast.expr | None
    kind: str  # assign | for | update | param | with
    index: int | None = None  # position in a tuple target
    arity: int | None = None
    stmt: ast.AST | None = None


@dataclass(unsafe_hash=True)  # never assigned to; not `frozen`, whose field-by-field `object.__setattr__` made it slow to build
class Info:
    sides: frozenset[str] = frozenset()
    origins: frozenset[Def] = frozenset()
    taints: frozenset[ast.AST] = frozenset()

    def __or__(self, other: Info) -> Info:
        if not (other.sides or other.origins or other.taints):  # most unions add nothing: no new object
            return self
        if not (self.sides or self.origins or self.taints):
            return other
        return Info(self.sides | other.sides, self.origins | other.origins, self.taints | other.taints)

    @property
    def split(self) -> bool:
        return bool(self.sides)


EMPTY = Info()


@dataclass
class Scope:
    qualname: str
    node: ast.AST
    parent: str | None
    owner: str | None = None  # class qualname for methods
    defs: dict[str, list[Def]] = field(default_factory=dict)
    returns: list[ast.expr] = field(default_factory=list)
    calls: list[ast.Call] = field(default_factory=list)


@dataclass
class _Part:
    """What indexing one top-level statement adds (see `DataFlow._index_reusing`)."""

    module: Scope  # its module-level definitions, returns and calls
    scopes: dict[str, Scope]
    scope_of_node: dict[int, str]
    for_nodes: dict[int, ast.For | ast.AsyncFor]
    classes: dict[str, ast.ClassDef]
    fits: list[tuple[str, str, _Pos, ast.Call]]
    # `resolve_call` of every call in the statement, and the answers of `calls_where` / `defs_where`
    # for its scopes, under the import map `resolved_for`
    resolved: dict[int, tuple[ast.Call, str | None]] = field(default_factory=dict)
    resolved_for: object = None
    memo: dict[tuple[str, int], Any] = field(default_factory=dict)
    owner: str | None = None  # a class-body statement's piece: the class's qualname
    # a split statement's piece (`_split_part`): its members' pieces in order (headers too), and those
    # of its kept statements by the id of their node
    members: list[_Part] = field(default_factory=list)
    pieces: dict[int, _Part] = field(default_factory=dict)


def piece_nodes(stmt: ast.stmt) -> Iterator[ast.AST]:
    """The nodes whose pieces `DataFlow._index_reusing` keeps for a top-level statement: the
    statement itself, and for a split one (`_split_part`: a class, and the statements that run
    their blocks once, `names.PIECEWISE`) the statements it keeps pieces of."""
    yield stmt
    if piecewise(stmt):
        yield from _kept(stmt)


def _kept(node: ast.AST) -> Iterator[ast.AST]:
    for child in blocks(node):
        if isinstance(node, ast.ClassDef) or not piecewise(child):
            yield child
        else:
            yield from _kept(child)



def _absorb(target: Any, module: Scope, piece: _Part) -> None:
    """Merge a piece's index into `target` (a DataFlow, or the _Part of a class) and its module scope."""
    for name, defs in piece.module.defs.items():
        module.defs.setdefault(name, []).extend(defs)
    module.returns.extend(piece.module.returns)
    module.calls.extend(piece.module.calls)
    target.scopes.update(piece.scopes)
    target.scope_of_node.update(piece.scope_of_node)
    target.for_nodes.update(piece.for_nodes)
    target.classes.update(piece.classes)
    target.fits.extend(piece.fits)

# The key of a callable in a model's `__dict__` that a long provenance search calls now and then
# (`def_info`): the language server's check that the version is still the latest, which raises
# to abandon the search (torch_preflight/scoped.py sets it for the whole-module rules).
CHECKPOINT = "_tpf_checkpoint"


class DataFlow:
    """Provenance facts for one module; build once per model with `DataFlow.of(model)`."""

    def __init__(self, model: ModuleModel) -> None:
        self.model = model
        self.imports = model.imports
        self.scopes: dict[str, Scope] = {}
        self.scope_of_node: dict[int, str] = {}
        self.for_nodes: dict[int, ast.For | ast.AsyncFor] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self._info: dict[tuple[int, str, int | None], Info] = {}
        self._def_info: dict[int, Info] = {}
        self._busy: set[int] = set()
        self._asked = 0  # `def_info` calls, for `CHECKPOINT`
        self._resolved: dict[int, tuple[ast.Call, str | None]] = {}  # resolve_call, by node (the entry keeps it alive)
        self._taints: dict[tuple[int, str], tuple[ast.Call, str | None]] = {}  # taint_kind, asked by several rules for the same calls
        self._local: dict[tuple[str, str], Scope | None] = {}  # local_function
        self.fits: list[tuple[str, str, _Pos, ast.Call]] = []  # (object, scope, where, the fit call)
        self._parts: list[_Part] | None = None  # the pieces of `_index_reusing`, in order
        self._parents: dict[int, dict[int, ast.AST]] = {}  # `parents` by statement index, without pieces
        self._whole: dict[str, list[ast.AST]] = {}  # `nodes_where` by key without pieces ("": every node)
        self._part_of: dict[int, _Part] = {}  # id of a piece's scope (its module-level one too) -> the piece
        self._sides_arise: bool | None = None  # `sides_arise`, computed on first use
        self._split_points: list[tuple[ast.expr, str, ast.AST]] | None = None  # `split_points`, found on first use
        # what `_walk_element` read of each element of a long display, by node (set by core/incremental.py, like the parts)
        self._elements: dict[int, tuple[ast.AST, tuple[int, ...] | None]] | None = model.__dict__.get("_tpf_dataflow_elements")
        if model.tree is not None:
            parts = model.__dict__.get("_tpf_dataflow_parts")  # set by core/incremental.py
            if parts is None:
                self._index(model.tree, "", None, None)
            else:
                self._index_reusing(model.tree, parts)

    @classmethod
    def of(cls, model: ModuleModel) -> DataFlow:
        cached = model.__dict__.get("_tpf_dataflow")
        if cached is None:
            cached = cls(model)
            model.__dict__["_tpf_dataflow"] = cached
        return cached

    # --- indexing -----------------------------------------------------------------------

    def _index(self, node: ast.AST, qualname: str, parent: str | None, owner: str | None) -> None:
        scope = Scope(qualname, node, parent, owner)
        self.scopes[qualname] = scope
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                if a is not None:
                    self._add(scope, Def(a.arg, qualname, pos(node), None, "param"))
            body: list[ast.AST] = list(node.body) if isinstance(node.body, list) else [node.body]
        else:
            body = list(getattr(node, "body", []))
        for stmt in body:
            self._walk(stmt, scope)

    def _index_reusing(self, tree: ast.Module, parts: dict[int, tuple[ast.stmt, _Part]]) -> None:
        """`_index` of a module, merged from one piece per top-level statement. A piece is
        a function of the statement's node alone (top-level qualnames do not depend on the
        statements around it), so the language server keeps the pieces of unchanged
        statements between edits in `parts` (id of the node -> (node, piece))."""
        module = Scope("", tree, None, None)
        self.scopes[""] = module
        imports = tuple(sorted(self.imports.aliases.items()))
        self._parts = parts_in_order = []
        for stmt in tree.body:
            entry = parts.get(id(stmt))
            if entry is None or entry[0] is not stmt:
                entry = (stmt, self._split_part(stmt, parts) if piecewise(stmt) else self._part(stmt, elements=self._elements))
                parts[id(stmt)] = entry
            part = entry[1]
            self._resolve_part(part, imports)
            self._resolved.update(part.resolved)
            parts_in_order.append(part)
            self._part_of[id(part.module)] = part
            for piece in part.members or [part]:  # a method's scopes keep their answers in its own piece
                self._part_of.update((id(scope), piece) for scope in piece.scopes.values())
            _absorb(self, module, part)

    def _resolve_part(self, part: _Part, imports: object) -> None:
        """Resolve the piece's calls once per import map, not per version."""
        if part.resolved_for == imports:
            return
        if part.members:
            for member in part.members:
                self._resolve_part(member, imports)
            part.resolved = {k: v for member in part.members for k, v in member.resolved.items()}
        else:
            calls = (c for scope in (part.module, *part.scopes.values()) for c in scope.calls)  # all but lambdas'
            part.resolved = {id(c): (c, self._resolve(c)) for c in calls}
        part.resolved_for, part.memo = imports, {}

    @staticmethod
    def _part(stmt: ast.stmt, owner: str | None = None, elements: dict[int, tuple[ast.AST, tuple[int, ...] | None]] | None = None) -> _Part:
        """The piece of a top-level statement, or (`owner`) of one statement of that class's body,
        indexed as `_walk` indexes the class's body; `elements` as `_walk_elements` reads it."""
        scratch = DataFlow._scratch(elements)
        module = Scope("", stmt, None, None)
        if owner is not None and isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scratch._index(stmt, f"{owner}.{stmt.name}", None, owner)
        else:
            scratch._walk(stmt, module)
        return _Part(module, scratch.scopes, scratch.scope_of_node, scratch.for_nodes, scratch.classes, scratch.fits, owner=owner)

    @staticmethod
    def _split_part(stmt: ast.stmt, parts: dict[int, tuple[ast.stmt, _Part]]) -> _Part:
        """`_part` of a top-level class, `if`, `try` or `with` statement, merged from one piece
        per statement of its blocks (and of the blocks of the `if`, `try`, `with` statements and
        classes there, and one piece of each such statement's own header), kept in `parts` too:
        an edit inside one function or method gives the other statements as the previous
        version's very nodes (core/incremental.py), whose pieces, resolved calls and per-scope
        answers are reused. The pieces index what `_walk` indexes of the statement, in its order."""
        part = _Part(Scope("", stmt, None, None), {}, {}, {}, {}, [])
        DataFlow._split_into(part, stmt, parts)
        return part

    @staticmethod
    def _split_into(part: _Part, node: ast.AST, parts: dict[int, tuple[ast.stmt, _Part]]) -> None:
        head = _Part(Scope("", node, None, None), {}, {}, {}, {}, [])
        owner = None
        if isinstance(node, ast.ClassDef):
            head.classes[node.name] = node
            owner = node.name
        else:  # what `_walk` indexes of the statement itself, and of its children that are no block statements
            scratch = DataFlow._scratch(None)
            scratch.scopes, scratch.scope_of_node, scratch.for_nodes, scratch.classes, scratch.fits = head.scopes, head.scope_of_node, head.for_nodes, head.classes, head.fits
            scratch._walk(node, head.module, whole=False)
        part.members.append(head)
        _absorb(part, part.module, head)
        for child in blocks(node):
            if owner is None and piecewise(child):
                DataFlow._split_into(part, child, parts)
                continue
            assert isinstance(child, ast.stmt)  # an `except` clause is split above
            entry = parts.get(id(child))
            if entry is None or entry[0] is not child or entry[1].owner != owner:
                entry = parts[id(child)] = (child, DataFlow._part(child, owner))
            piece = entry[1]
            part.members.append(piece)
            part.pieces[id(child)] = piece
            _absorb(part, part.module, piece)

    @staticmethod
    def _scratch(elements: dict[int, tuple[ast.AST, tuple[int, ...] | None]] | None) -> DataFlow:
        """An empty index for `_walk` to fill (a piece's)."""
        scratch = DataFlow.__new__(DataFlow)
        scratch.scopes, scratch.scope_of_node, scratch.for_nodes, scratch.classes, scratch.fits = {}, {}, {}, {}, []
        scratch._elements = elements
        return scratch

    def _walk_element(self, node: ast.AST, scope: Scope) -> bool:
        """`_walk` of one element of a long display (`names.long_display`) at module level when all it adds is
        the scope of its nodes (no call, binding, lambda's or comprehension's scope ...): those
        nodes are kept by the element's node while it stays (`_elements`, carried from version to
        version by core/incremental.py: an edit inside one element of a generated table gives the
        others as the last version's nodes). False when it adds more: the caller walks it."""
        elements = self._elements
        assert elements is not None
        entry = elements.get(id(node))
        if entry is None or entry[0] is not node:
            scratch = DataFlow._scratch(None)
            alone = Scope(scope.qualname, scope.node, scope.parent, scope.owner)
            scratch._walk(node, alone)
            plain = not (alone.defs or alone.returns or alone.calls or scratch.scopes or scratch.for_nodes or scratch.classes or scratch.fits)
            entry = elements[id(node)] = (node, tuple(scratch.scope_of_node) if plain else None)
        if entry[1] is None:
            return False
        self.scope_of_node.update(dict.fromkeys(entry[1], scope.qualname))
        return True

    def _child_name(self, scope: Scope, name: str, owner: str | None) -> str:
        prefix = owner or scope.qualname
        return f"{prefix}.{name}" if prefix else name

    def _walk(self, node: ast.AST, scope: Scope, whole: bool = True) -> None:
        """Index `node` into `scope`; `whole` False: a compound statement's header only, not
        the statements of its blocks (`_split_into` indexes those apart)."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                self._walk(d, scope)
            self._index(node, self._child_name(scope, node.name, None), scope.qualname or None, None)
            return
        if isinstance(node, ast.ClassDef):
            qualname = self._child_name(scope, node.name, None)
            self.classes[qualname] = node
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self._index(stmt, f"{qualname}.{stmt.name}", None, qualname)
                else:
                    self._walk(stmt, scope)
            return
        if isinstance(node, ast.Lambda):
            return
        self.scope_of_node[id(node)] = scope.qualname
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._bind(scope, target, node.value, node)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self._bind(scope, node.target, node.value, node)
        elif isinstance(node, ast.AugAssign):
            name = dotted(node.target)
            if name:
                self._add(scope, Def(name, scope.qualname, end(node), node.value, "update", stmt=node))
        elif isinstance(node, ast.NamedExpr):
            self._bind(scope, node.target, node.value, node)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self.for_nodes[node.lineno - 1] = node
            self._bind(scope, node.target, node.iter, node, kind="for", at=end(node.iter))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    self._bind(scope, item.optional_vars, item.context_expr, node, kind="with", at=end(item.context_expr))
        elif isinstance(node, ast.Return) and node.value is not None:
            scope.returns.append(node.value)
        elif isinstance(node, ast.Call):
            scope.calls.append(node)
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("fit", "fit_transform") and dotted(func.value):
                self.fits.append((dotted(func.value) or "", scope.qualname, pos(node), node))
        scope_of_node = self.scope_of_node
        children = child_nodes(node)
        if not whole:
            inside = {id(c) for c in blocks(node)}
            children = [c for c in children if id(c) not in inside]
        by_element = type(node) in DISPLAYS and self._elements is not None and not scope.qualname and long_display(node, children)  # what core/incremental.py splices
        for child in children:
            kind = type(child)
            if kind in _LEAVES:  # what `_walk` would do for it, without the call
                scope_of_node[id(child)] = scope.qualname
            elif kind is ast.Name:
                scope_of_node[id(child)] = scope.qualname
                scope_of_node[id(child.ctx)] = scope.qualname  # type: ignore[attr-defined]
            elif not (by_element and self._walk_element(child, scope)):
                self._walk(child, scope)

    def _bind(self, scope: Scope, target: ast.AST, value: ast.expr, stmt: ast.AST, kind: str = "assign", at: _Pos | None = None) -> None:
        at = at or end(stmt)
        if isinstance(target, (ast.Tuple, ast.List)):
            elts = target.elts
            for i, elt in enumerate(elts):
                if isinstance(elt, ast.Starred):
                    elt = elt.value
                name = dotted(elt)
                if name:
                    self._add(scope, Def(name, scope.qualname, at, value, kind, i, len(elts), stmt))
                elif isinstance(elt, (ast.Tuple, ast.List)):
                    for sub in elt.elts:  # nested: (a, (b, c)) = ... keeps the outer position only
                        subname = dotted(sub)
                        if subname:
                            self._add(scope, Def(subname, scope.qualname, at, value, kind, i, len(elts), stmt))
            return
        if isinstance(target, ast.Subscript):
            base = target.value
            while isinstance(base, ast.Subscript):
                base = base.value
            name = dotted(base)
            if name:
                self._add(scope, Def(name, scope.qualname, at, value, "update", stmt=stmt))
            return
        name = dotted(target)
        if name:
            self._add(scope, Def(name, scope.qualname, at, value, kind, stmt=stmt))

    @staticmethod
    def _add(scope: Scope, d: Def) -> None:
        scope.defs.setdefault(d.name, []).append(d)

    # --- lookups ------------------------------------------------------------------------

    def scope_at(self, node: ast.AST) -> str:
        return self.scope_of_node.get(id(node), "")

    def reaching(self, name: str, scope: str, at: _Pos) -> Def | None:
        """The definition of `name` a use at `at` in `scope` reads, if the file shows one."""
        current: str | None = scope
        first = True
        while current is not None:
            sc = self.scopes.get(current)
            if sc is None:
                break
            defs = sc.defs.get(name, [])
            if first:
                # the last definition before `at`, else the last parameter (read from the end: most uses follow their definition)
                param: Def | None = None
                for d in reversed(defs):
                    if d.kind == "param":
                        param = param or d
                    elif d.at <= at:
                        return d
                if param is not None:
                    return param
            elif defs:
                return defs[-1]
            if name.startswith("self.") and sc.owner:
                for method in self.scopes.values():
                    if method.owner == sc.owner and method.qualname != current and name in method.defs:
                        return method.defs[name][-1]
            first = False
            current = sc.parent if sc.parent is not None else ("" if current else None)
        return None

    def defs_in(self, scope: str) -> Iterator[Def]:
        sc = self.scopes.get(scope)
        if sc:
            for defs in sc.defs.values():
                yield from defs

    def all_defs(self) -> Iterator[Def]:
        for scope in self.scopes:
            yield from self.defs_in(scope)

    # --- module-wide searches that the language server answers per top-level statement ---

    def calls_where(self, key: str, keep: Callable[[ast.Call], bool]) -> Iterator[tuple[Scope, ast.Call]]:
        """Every call of every scope (in `scopes` order) that `keep` accepts. `keep` may read the
        call node and `resolve_call` only, nothing else of the module: under the language server
        each top-level statement keeps its answers (by `key`) across edits of the others."""
        for scope in list(self.scopes.values()):
            for call in self._per_piece(key, scope, lambda sc: [c for c in sc.calls if keep(c)]):
                yield scope, call

    def defs_where(self, key: str, keep: Callable[[Def], bool]) -> list[Def]:
        """Every definition that `keep` accepts (in no particular order), on the same terms."""
        return [d for scope in self.scopes.values() for d in self._per_piece(key, scope, lambda sc: [d for ds in sc.defs.values() for d in ds if keep(d)])]

    def nodes_where(self, key: str, keep: Callable[[ast.AST], bool]) -> list[ast.AST]:
        """Every node of the module (inside lambdas too) that `keep` accepts, top-level statement by
        statement, each in `ast.walk` order (a class's body statement by statement, under the
        language server); `keep` reads only the node and `resolve_call`, as for `calls_where`,
        and the language server keeps each statement's answers likewise."""
        tree = self.model.tree
        if tree is None:
            return []
        if self._parts is None:  # one walk of the whole tree, kept for every key, and each key's answer
            found = self._whole.get(key)
            if found is None:
                nodes = self._whole.get("")
                if nodes is None:
                    nodes = self._whole[""] = breadth_first(tree)
                found = self._whole[key] = [n for n in nodes if keep(n)]
            return list(found)
        found = []
        for stmt, part in zip(tree.body, self._parts, strict=True):
            if not part.members:
                found.extend(self._memo(key, part, stmt, lambda s: [n for n in breadth_first(s) if keep(n)]))
                continue
            found.extend(self._split_nodes(stmt, part, key, keep))
        return found

    def _split_nodes(self, node: ast.AST, part: _Part, key: str, keep: Callable[[ast.AST], bool]) -> list[ast.AST]:
        """`nodes_where` of a split statement (`_split_part`): its header, then each block
        statement's nodes, kept in that statement's piece (a split one likewise, in turn)."""
        statements = blocks(node)
        inside = {id(c) for c in statements}
        found = [n for n in (node, *(m for c in ast.iter_child_nodes(node) if id(c) not in inside for m in ast.walk(c))) if keep(n)]
        for child in statements:
            piece = part.pieces.get(id(child))
            if piece is None:
                found.extend(self._split_nodes(child, part, key, keep))
            else:
                found.extend(self._memo(key, piece, child, lambda s: [n for n in breadth_first(s) if keep(n)]))
        return found

    def statement_memo(self, key: str, node: ast.stmt, search: Callable[[ast.stmt], Any]) -> Any:
        """`search(node)` for a top-level statement (a class, say), kept with its piece under the
        language server, so an edit of another statement finds it again; `search` reads only the
        node and `resolve_call`, as for `calls_where`, and gives something other than None. Any
        other statement, and every statement without pieces (the command line), is searched."""
        tree = self.model.tree
        if tree is None or not tree.body or self._parts is None:
            return search(node)
        index = max(0, bisect.bisect_right(self._statement_lines, getattr(node, "lineno", 1)) - 1)
        if tree.body[index] is not node:
            return search(node)
        return self._memo(key, self._parts[index], node, search)

    def parents(self, node: ast.AST) -> dict[int, ast.AST]:
        """Child id -> parent node, within the top-level statement that holds `node` (the
        statement itself has no parent here), kept with the statement's piece."""
        tree = self.model.tree
        if tree is None or not tree.body:
            return {}
        index = max(0, bisect.bisect_right(self._statement_lines, getattr(node, "lineno", 1)) - 1)
        stmt = tree.body[index]
        if self._parts is None:
            found = self._parents.get(index)
            if found is None:
                found = self._parents[index] = _parent_map(stmt)
            return found
        part = self._parts[index]
        result: dict[int, ast.AST] = self._memo("parents", part, stmt, lambda s: self._split_parents(s, part) if part.members else _parent_map(s))
        return result

    def _split_parents(self, node: ast.AST, part: _Part) -> dict[int, ast.AST]:
        """`_parent_map` of a split statement (`_split_part`), from its block statements' maps,
        kept in their pieces (a split one's made likewise, in turn)."""
        inside = {id(c) for c in blocks(node)}
        found: dict[int, ast.AST] = {}
        for child in ast.iter_child_nodes(node):
            found[id(child)] = node
            piece = part.pieces.get(id(child))
            if piece is not None:
                found.update(self._memo("parents", piece, child, _parent_map))
            else:
                found.update(self._split_parents(child, part) if id(child) in inside else _parent_map(child))
        return found

    @cached_property
    def _statement_lines(self) -> list[int]:
        """First line (decorators included, 1-based) of each top-level statement."""
        body = self.model.tree.body if self.model.tree is not None else []
        return [min([s.lineno, *(d.lineno for d in getattr(s, "decorator_list", ()))]) for s in body]

    def _per_piece(self, key: str, scope: Scope, search: Callable[[Scope], list[Any]]) -> list[Any]:
        if not scope.qualname and self._parts is not None:  # the module scope, merged from every piece's
            return [found for part in self._parts for found in self._memo(key, part, part.module, search)]
        part = self._part_of.get(id(scope))
        return search(scope) if part is None else self._memo(key, part, scope, search)

    @staticmethod
    def _memo(key: str, part: _Part, holder: Any, search: Callable[[Any], Any]) -> Any:
        """`search(holder)` for a scope or statement of the piece, kept in the piece (which holds
        its scopes and is kept with its statement, so their ids stay theirs)."""
        found = part.memo.get((key, id(holder)))
        if found is None:
            found = part.memo[(key, id(holder))] = search(holder)
        return found

    def local_function(self, callee: str | None, scope: str) -> Scope | None:
        if not callee or "." in callee:
            return None
        key = (callee, scope)
        if key not in self._local:  # asked for every call the provenance reads: memoised (scopes never change)
            self._local[key] = self._local_function(callee, scope)
        return self._local[key]

    def _local_function(self, callee: str, scope: str) -> Scope | None:
        current: str | None = scope
        while current is not None:
            candidate = f"{current}.{callee}" if current else callee
            if candidate in self.scopes and isinstance(self.scopes[candidate].node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return self.scopes[candidate]
            sc = self.scopes.get(current)
            current = sc.parent if sc and sc.parent is not None else ("" if current else None)
        return None

    def resolve_call(self, call: ast.Call) -> str | None:
        seen = self._resolved.get(id(call))
        if seen is None or seen[0] is not call:
            seen = self._resolved[id(call)] = (call, self._resolve(call))
        return seen[1]

    def _resolve(self, call: ast.Call) -> str | None:
        name = dotted(call.func)
        return self.imports.resolve(name) if name else None

    def constructor(self, name: str, scope: str, at: _Pos) -> str | None:
        """The resolved class a name was built from (`sc = StandardScaler()` -> sklearn...)."""
        d = self.reaching(name, scope, at)
        if d is None or d.value is None or d.index is not None:
            return None
        value = d.value
        if isinstance(value, ast.Call):
            return self.resolve_call(value)
        return None

    # --- provenance ---------------------------------------------------------------------

    def info(self, expr: ast.AST | None, scope: str, _depth: int = 0) -> Info:
        if expr is None or _depth > 12 or isinstance(expr, ast.Constant):  # a literal reads nothing, at any depth
            return EMPTY
        key = (id(expr), scope, None)
        cached = self._info.get(key)
        if cached is not None:
            return cached
        result = self._info_expr(expr, scope, _depth)
        self._info[key] = result
        return result

    def _info_expr(self, expr: ast.AST, scope: str, depth: int) -> Info:
        name = dotted(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else None
        if name:
            d = self.reaching(name, scope, pos(expr))
            if d is None and "." in name:
                return self.info(expr.value, scope, depth + 1) if isinstance(expr, ast.Attribute) else EMPTY  # type: ignore[union-attr]
            return self.def_info(d, depth + 1) | Info(origins=frozenset({d})) if d else EMPTY
        out = EMPTY
        if isinstance(expr, ast.Call):
            if self.taint_kind(expr, scope):
                out = Info(taints=frozenset({expr}))
            fitted = self.fitted_by(expr, scope)
            if fitted is not None:
                out = out | Info(taints=frozenset({fitted}))
            callee = self.resolve_call(expr)
            side = _keyword_side(expr)
            if side:
                out = out | Info(sides=frozenset({side}))
            fn = self.local_function(callee, scope)
            if fn is not None and depth < 8:
                for ret in fn.returns:
                    out = out | self.info(ret, fn.qualname, depth + 1)
            func = expr.func
            if isinstance(func, ast.Attribute):
                out = out | self.info(func.value, scope, depth + 1)
            for arg in expr.args:
                out = out | self.info(arg.value if isinstance(arg, ast.Starred) else arg, scope, depth + 1)
            for keyword in expr.keywords:
                found = self.info(keyword.value, scope, depth + 1)
                out = out | (Info(taints=found.taints) if keyword.arg in _FUNCTION_KEYWORDS else found)
            return out
        if isinstance(expr, (ast.Lambda, ast.FunctionDef)):
            return out
        for child in child_nodes(expr):
            if isinstance(child, (ast.expr, ast.comprehension, ast.keyword, ast.slice)):  # type: ignore[attr-defined]
                out = out | self.info(child, scope, depth + 1)
        return out

    def def_info(self, d: Def, _depth: int = 0) -> Info:
        cached = self._def_info.get(id(d))
        if cached is not None:
            return cached
        self._asked += 1
        if not self._asked & 63:
            checkpoint = self.model.__dict__.get(CHECKPOINT)
            if checkpoint is not None:
                checkpoint()  # may raise: nothing of this search is kept yet (each memo entry is written once complete)
        if id(d) in self._busy or _depth > 12:
            return EMPTY
        self._busy.add(id(d))
        try:
            result = self._compute_def(d, _depth)
        finally:
            self._busy.discard(id(d))
        self._def_info[id(d)] = result
        return result

    def _compute_def(self, d: Def, depth: int) -> Info:
        if d.kind == "param":
            return self._param_info(d, depth)
        if d.value is None:
            return EMPTY
        value = d.value
        if d.kind == "for":
            value = unwrap_iter(value)
        if d.index is not None and isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == d.arity:
            return self.info(value.elts[d.index], d.scope, depth + 1)
        base = self.info(value, d.scope, depth + 1)
        if d.kind == "update":
            previous = self._previous(d)
            if previous is not None:
                base = base | self.def_info(previous, depth + 1) | Info(origins=frozenset({previous}))
        split = self.split_input(value, d.scope)
        if split is not None and d.index is not None:
            side = side_of_name(d.name) or _position_side(split[1], d.index, d.arity or 0)
            if side:
                return Info(frozenset({side}), base.origins, base.taints)
        if not base.sides and _is_partition(value):
            side = side_of_name(d.name)
            if side:
                return Info(frozenset({side}), base.origins, base.taints)
        return base

    def _param_info(self, d: Def, depth: int) -> Info:
        """A plain function's parameter: the union of what its same-file call sites pass."""
        sites = self._arguments(d) if depth <= 8 else None
        out = EMPTY
        for caller, passed in sites or ():
            if passed is not None:
                out = out | self.info(passed, caller, depth + 1)
        return out

    def passed(self, d: Def) -> list[tuple[str, ast.expr]] | None:
        """What the same-file call sites of a plain function pass for parameter `d`, as
        (caller scope, expression); None when a call site passes it in a way not seen
        (`*args`, `**kwargs`, left to its default) or `d` is no such parameter."""
        sites = self._arguments(d) if d.kind == "param" else None
        if sites is None or any(passed is None for _, passed in sites):
            return None
        return [(caller, passed) for caller, passed in sites if passed is not None]

    def _arguments(self, d: Def) -> list[tuple[str, ast.expr | None]] | None:
        """(caller scope, the expression passed for `d` or None) per same-file call site of the plain
        function that has parameter `d`, in file order; None when `d` belongs to no such function."""
        sc = self.scopes.get(d.scope)
        if sc is None or sc.owner or not isinstance(sc.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        args = sc.node.args
        positional = [a.arg for a in (*args.posonlyargs, *args.args)]
        index = positional.index(d.name) if d.name in positional else None
        out: list[tuple[str, ast.expr | None]] = []
        for caller, call in self._call_sites().get(id(sc), ()):
            passed: ast.expr | None = None
            if index is not None and index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
                passed = call.args[index]
            for keyword in call.keywords:
                if keyword.arg == d.name:
                    passed = keyword.value
            out.append((caller.qualname, passed))
        return out

    def _call_sites(self) -> dict[int, list[tuple[Scope, ast.Call]]]:
        """id(callee scope) -> its same-file call sites (caller scope, call), in the order
        the scopes and their calls were indexed; built once, on first use."""
        sites = self.__dict__.get("_sites")
        if sites is None:
            sites = {}
            for caller in self.scopes.values():
                for call in caller.calls:
                    func = call.func
                    if not isinstance(func, ast.Name):  # local_function() takes plain names only
                        continue
                    callee = self.local_function(func.id, caller.qualname)
                    if callee is not None:
                        sites.setdefault(id(callee), []).append((caller, call))
            self.__dict__["_sites"] = sites
        return sites

    def _previous(self, d: Def) -> Def | None:
        sc = self.scopes.get(d.scope)
        defs = sc.defs.get(d.name, []) if sc else []
        earlier = [x for x in defs if x.at < d.at and x is not d]
        return earlier[-1] if earlier else None

    # --- taints: fitted statistics and resampling ----------------------------------------

    def taint_kind(self, call: ast.Call, scope: str) -> str | None:
        """"fit" (a transformer fitted on data), "stat" (a dataset statistic) or
        "resample" (oversampling that copies rows), else None."""
        key = (id(call), scope)
        seen = self._taints.get(key)
        if seen is None or seen[0] is not call:
            seen = self._taints[key] = (call, self._taint_kind(call, scope))  # the entry keeps the node alive: its id stays its own
        return seen[1]

    def _taint_kind(self, call: ast.Call, scope: str) -> str | None:
        func = call.func
        if isinstance(func, ast.Attribute):
            method = func.attr
            if method in ("fit", "fit_transform") and call.args and self.is_transformer(func.value, scope, pos(call)):
                return "fit"
            if method == "fit_resample" and call.args and self.is_oversampler(func.value, scope, pos(call)):
                return "resample"
            if (
                method in STAT_METHODS
                and not self.imports.is_imported(dotted(func.value) or "")
                and _global_axis(call, 0)
                and not self._grouped(func.value, scope, pos(call))
                and not self._offset_only(call)
            ):
                return "stat"
        callee = self.resolve_call(call)
        if callee and tail(callee) in STAT_METHODS and callee.split(".")[0] in ("numpy", "torch") and call.args and _global_axis(call, 1):
            return "stat"
        if callee in RESAMPLE_FUNCTIONS and call.args:
            replace = next((k.value for k in call.keywords if k.arg == "replace"), None)
            if not (isinstance(replace, ast.Constant) and replace.value is False):
                return "resample"
        return None

    def _grouped(self, receiver: ast.expr, scope: str, at: _Pos) -> bool:
        """The statistic aggregates per group or window (`df.groupby("k").mean()`,
        `s.rolling(7).max()`, also through a name bound to the grouping): it builds a new table
        whose rows are the groups, not a fitted feature of the rows."""
        node: ast.AST | None = receiver
        for _ in range(8):
            if isinstance(node, ast.Subscript):
                node = node.value
            elif isinstance(node, ast.Call):
                if isinstance(node.func, ast.Attribute) and node.func.attr in _GROUPINGS:
                    return True
                node = node.func.value if isinstance(node.func, ast.Attribute) else None
            elif isinstance(node, ast.Attribute):
                node = node.value
            elif isinstance(node, ast.Name):
                d = self.reaching(node.id, scope, at)
                node = d.value if d is not None and d.kind == "assign" and d.index is None else None
            else:
                return False
        return False

    def _offset_only(self, call: ast.Call) -> bool:
        """`x - x.min()` (or `.max()`), not scaled further: a shift of the values (labels
        re-indexed to start at 0), which no model learns from, not a fitted statistic."""
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr in ("min", "max", "amin", "amax")):
            return False
        parents = self.parents(call)
        node: ast.expr = call
        parent = parents.get(id(node))
        while isinstance(parent, ast.expr) and _is_conversion(parent, node):  # `int(df["age"].min())`, `x.min().item()`
            node = parent
            parent = parents.get(id(node))
            if isinstance(parent, ast.Call) and parent.func is node:  # the `()` of `.item()`
                node = parent
                parent = parents.get(id(node))
        if not (isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Sub) and parent.right is node):
            return False
        if ast.dump(_unconverted(parent.left)) != ast.dump(_unconverted(func.value)):
            return False
        outer = parents.get(id(parent))
        return not (isinstance(outer, ast.BinOp) and isinstance(outer.op, (ast.Div, ast.Mult, ast.FloorDiv)))

    def tainted_input(self, call: ast.Call) -> ast.expr | None:
        """The data a taint node reads: the fitted / resampled array or the statistic's receiver."""
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in STAT_METHODS and not self.imports.is_imported(dotted(func.value) or ""):
            return func.value
        return call.args[0] if call.args else None

    def fitted_by(self, call: ast.Call, scope: str) -> ast.Call | None:
        """For `sc.transform(x)`: the call that fitted `sc` before, when the file shows one."""
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr in ("transform", "inverse_transform")):
            return None
        name = dotted(func.value)
        if not name:
            return None
        at = pos(call)
        chain = self._scope_chain(scope)
        best: tuple[_Pos, ast.Call] | None = None
        for obj, fit_scope, where, fit in self.fits:
            if obj == name and fit_scope in chain and (fit_scope != scope or where < at) and self.taint_kind(fit, fit_scope) == "fit":
                if best is None or where > best[0]:
                    best = (where, fit)
        return best[1] if best else None

    def _scope_chain(self, scope: str) -> list[str]:
        chain: list[str] = []
        current: str | None = scope
        while current is not None:
            chain.append(current)
            sc = self.scopes.get(current)
            current = sc.parent if sc and sc.parent is not None else ("" if current else None)
        return chain

    def built_from(self, receiver: ast.expr, scope: str, at: _Pos) -> str | None:
        if isinstance(receiver, ast.Call):
            return self.resolve_call(receiver)
        name = dotted(receiver)
        return self.constructor(name, scope, at) if name else None

    def is_transformer(self, receiver: ast.expr, scope: str, at: _Pos) -> bool:
        ctor = self.built_from(receiver, scope, at)
        return bool(ctor and TRANSFORMER_CLASS.match(tail(ctor)))

    def is_oversampler(self, receiver: ast.expr, scope: str, at: _Pos) -> bool:
        ctor = self.built_from(receiver, scope, at)
        return bool(ctor and OVERSAMPLER_CLASS.match(tail(ctor)))

    def split_input(self, expr: ast.AST, scope: str) -> tuple[ast.expr, str] | None:
        """(the data being split, the splitter kind) when `expr` is a split call."""
        if not isinstance(expr, ast.Call):
            return None
        callee = self.resolve_call(expr)
        if callee in SPLIT_FUNCTIONS or tail(callee) in ("train_test_split", "random_split"):
            if expr.args:
                return (expr.args[0], "random_split" if tail(callee) == "random_split" else "train_test_split")
            return None
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr == "split" and expr.args:
            receiver = func.value
            ctor = self.resolve_call(receiver) if isinstance(receiver, ast.Call) else None
            if ctor is None and dotted(receiver):
                ctor = self.constructor(dotted(receiver) or "", scope, pos(expr))
            if ctor and SPLITTER_CLASS.match(tail(ctor)):
                return (expr.args[0], "kfold")
        return None

    def cv_input(self, expr: ast.Call, scope: str) -> ast.expr | None:
        """The data a cross-validation call splits internally."""
        callee = self.resolve_call(expr)
        if (callee in CV_FUNCTIONS or tail(callee) in ("cross_val_score", "cross_validate", "cross_val_predict")) and len(expr.args) >= 2:
            return expr.args[1]
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr == "fit" and expr.args:
            receiver = func.value
            ctor = self.resolve_call(receiver) if isinstance(receiver, ast.Call) else self.constructor(dotted(receiver) or "", scope, pos(expr))
            if ctor and tail(ctor).endswith("SearchCV"):
                return expr.args[0]
        return None

    def split_points(self) -> list[tuple[ast.expr, str, ast.AST]]:
        """Every place data gets split: (input, scope, the split node); found once per module
        (`leak_site` asks for every statistic of the file)."""
        if self._split_points is None:
            self._split_points = list(self._find_split_points())
        return self._split_points

    def _find_split_points(self) -> Iterator[tuple[ast.expr, str, ast.AST]]:
        seen: set[int] = set()
        for d in self.all_defs():
            if d.value is None or id(d.value) in seen:
                continue
            value = unwrap_iter(d.value) if d.kind == "for" else d.value
            split = self.split_input(value, d.scope)
            if split is not None:
                seen.add(id(d.value))
                yield split[0], d.scope, value
            elif _is_partition(d.value) and side_of_name(d.name) and isinstance(d.value, ast.Subscript):
                seen.add(id(d.value))
                yield d.value.value, d.scope, d.value
        for sc in self.scopes.values():
            for call in sc.calls:
                cv = self.cv_input(call, sc.qualname)
                if cv is not None:
                    yield cv, sc.qualname, call

    def leak_site(self, taint: ast.Call, scope: str, sides: frozenset[str]) -> ast.AST | None:
        """Where the result of `taint`, computed on unsplit data, reaches a part on `sides`
        derived from that same data (or goes into cross-validation); None when nowhere."""
        if not self.may_split:
            return None
        data = self.tainted_input(taint)
        data_info = self.info(data, scope)
        if data is None or data_info.sides:
            return None
        lineage: set[Def] = set(data_info.origins)
        name = dotted(data)
        if name:
            d = self.reaching(name, scope, pos(data))
            if d is not None:
                lineage.add(d)
        if not lineage:
            return None
        for d in self.all_defs() if self.sides_arise() else ():  # no part on any side: no def reaches one
            info = self.def_info(d)
            if taint in info.taints and info.sides & sides and info.origins & lineage and d.stmt is not None:
                return d.stmt
        for data_in, split_scope, node in self.split_points() if self._may_have_split_points else ():
            info = self.info(data_in, split_scope)
            if taint in info.taints and (info.origins & lineage or data_in is data):
                return node
        return None

    @cached_property
    def may_split(self) -> bool:
        """Whether any value of the file can come from one side of a split, or any data is split
        (`split_points`): a call naming its side (`train=False`, `split="val"`), a split or
        cross-validation call, a slice, sample or `Subset` bound to a name that says its side.
        An over-approximation from each node and definition alone, answered per top-level
        statement (`nodes_where`, `defs_where`), so cheap on every version. When it is False no
        provenance has a side, whatever order the memoised provenance is asked in (sides enter
        only at those places), and `leak_site` finds nothing without asking for any."""
        return any(_keyword_side(c) is not None for c in self._split_calls) or self._may_have_split_points

    @cached_property
    def _may_have_split_points(self) -> bool:
        """Whether `split_points()` may find anything or `own_side` give a definition a side: a split
        or cross-validation call, or a slice, sample or `Subset` bound to a name that says its side."""
        if any(self._may_split_call(c) for c in self._split_calls):
            return True
        if self.defs_where("dataflow.side-defs", lambda d: d.value is not None and any(_is_partition(v) for v in (d.value, unwrap_iter(d.value))) and side_of_name(d.name) is not None):
            return True
        # `x.split(...)` / `x.fit(...)` on a name split only when the name was built by a splitter / a *SearchCV
        return any(self._may_split_by_name(c) for c in self._split_calls) and bool(
            self.defs_where("dataflow.splitter-defs", lambda d: isinstance(d.value, ast.Call) and _splitter(self.resolve_call(d.value)))
        )

    @cached_property
    def _split_calls(self) -> list[ast.Call]:
        """The calls `may_split` reads (one walk of each top-level statement, kept by the language server)."""
        found = self.nodes_where(
            "dataflow.split-calls",
            lambda n: isinstance(n, ast.Call) and (_keyword_side(n) is not None or self._may_split_call(n) or self._may_split_by_name(n)),
        )
        return [n for n in found if isinstance(n, ast.Call)]

    def _may_split_call(self, node: ast.AST) -> bool:
        """A call that `split_input` / `cv_input` may read as a split without asking which class a
        name was built from (`_may_split_by_name` covers that)."""
        if not isinstance(node, ast.Call):
            return False
        callee = self.resolve_call(node)
        if callee in SPLIT_FUNCTIONS or callee in CV_FUNCTIONS or tail(callee) in ("train_test_split", "random_split", "cross_val_score", "cross_validate", "cross_val_predict"):
            return True
        func = node.func
        return isinstance(func, ast.Attribute) and func.attr in ("split", "fit") and isinstance(func.value, ast.Call) and _splitter(self.resolve_call(func.value))

    @staticmethod
    def _may_split_by_name(node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("split", "fit") and bool(node.args) and not isinstance(node.func.value, ast.Call)

    def own_side(self, d: Def) -> str | None:
        """The side a definition gives its value by itself, whatever it reads: a position
        (or name) in a split's result, or a slice named after a side. `def_info` also
        applies the latter only when nothing read has a side."""
        if d.value is None or d.kind == "param":
            return None
        value = unwrap_iter(d.value) if d.kind == "for" else d.value
        split = self.split_input(value, d.scope)
        if split is not None:
            if d.index is None:
                return None
            return side_of_name(d.name) or _position_side(split[1], d.index, d.arity or 0)
        return side_of_name(d.name) if _is_partition(value) else None

    def sides_arise(self) -> bool:
        """Whether any value of the module can come from a side (train/val/test): a side arises only
        at a call with a side keyword (`train=False`), a named or positional part of a split, or
        a slice named after a side (`_info_expr`, `_compute_def`); everything else unions what it
        reads. Without one, no `def_info` has a side and the searches for one need not compute
        them (a large module without any split computed the provenance of every definition)."""
        if self._sides_arise is None:
            self._sides_arise = any(_keyword_side(c) for sc in self.scopes.values() for c in sc.calls) or any(
                self._makes_side(d) for d in self.all_defs()
            )
        return self._sides_arise

    def _makes_side(self, d: Def) -> bool:
        """Whether `_compute_def` can give `d` a side of its own (not one read from its value)."""
        if d.value is None or d.kind == "param":
            return False
        value = unwrap_iter(d.value) if d.kind == "for" else d.value
        split = self.split_input(value, d.scope)
        if split is not None and d.index is not None and (side_of_name(d.name) or _position_side(split[1], d.index, d.arity or 0)):
            return True
        return _is_partition(value) and side_of_name(d.name) is not None

    def split_sides(self) -> frozenset[str]:
        """The sides any value in the file is known to come from."""
        if not self.may_split or not self.sides_arise():  # the cheap over-approximation first
            return frozenset()
        sides: set[str] = set()
        for d in self.all_defs():
            sides |= self.def_info(d).sides
        return frozenset(sides)


def _splitter(ctor: str | None) -> bool:
    """A class whose `.split` gives folds or whose `.fit` cross-validates (`split_input`, `cv_input`)."""
    return bool(ctor) and (bool(SPLITTER_CLASS.match(tail(ctor))) or tail(ctor).endswith("SearchCV"))


def _global_axis(call: ast.Call, positional: int) -> bool:
    """A statistic over the sample axis (no axis, axis 0/None, or a tuple holding 0): the
    kind that mixes rows. Per-row statistics (axis=1, dim=-1) are not dataset statistics."""
    axis: ast.expr | None = None
    for keyword in call.keywords:
        if keyword.arg in ("axis", "dim"):
            axis = keyword.value
    if axis is None and len(call.args) > positional:
        axis = call.args[positional]
    if axis is None:
        return True
    if isinstance(axis, ast.Constant):
        return axis.value is None or axis.value == 0
    if isinstance(axis, (ast.Tuple, ast.List)):
        return any(isinstance(e, ast.Constant) and e.value == 0 for e in axis.elts)
    return False


def unwrap_iter(value: ast.expr) -> ast.expr:
    """`enumerate(x)`, `tqdm(x)`, `zip(x, ...)`'s first argument: what a loop really iterates."""
    while isinstance(value, ast.Call) and value.args and tail(dotted(value.func)) in ("enumerate", "tqdm", "iter", "list", "trange"):
        value = value.args[0]
    return value


def keyword_side(call: ast.Call) -> str | None:
    """The side a dataset constructor's own arguments name: `train=False`, `split="val"`."""
    return _keyword_side(call)


def _keyword_side(call: ast.Call) -> str | None:
    if dotted(call.func) in ("partial", "functools.partial"):
        return None  # `partial(sample_inputs, train=True)` binds a function's argument: it makes no data
    for keyword in call.keywords:
        if keyword.arg == "train" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, bool):
            return TRAIN if keyword.value.value else TEST
        if keyword.arg in ("split", "subset") and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            word = keyword.value.value.split("[")[0].lower()
            if word in ("test", "testing", "eval"):
                return TEST
            if word in ("val", "valid", "validation", "dev"):
                return VAL
            if word in ("train", "training"):
                return TRAIN
    return None


def _position_side(kind: str, index: int, arity: int) -> str | None:
    if kind == "train_test_split":
        return TRAIN if index % 2 == 0 else TEST
    if kind == "kfold":
        return TRAIN if index == 0 else TEST
    if kind == "random_split":
        if arity == 2:
            return (TRAIN, TEST)[index]
        if arity == 3:
            return (TRAIN, VAL, TEST)[index]
    return None


def _is_partition(value: ast.expr) -> bool:
    """A slice, a row sample or a Subset of something: one part of a whole."""
    if isinstance(value, ast.Subscript):
        sl = value.slice
        return isinstance(sl, ast.Slice) or (isinstance(sl, ast.Tuple) and any(isinstance(e, ast.Slice) for e in sl.elts)) or isinstance(
            sl, (ast.Name, ast.Attribute, ast.Call)
        )
    if isinstance(value, ast.Call):
        name = tail(dotted(value.func))
        return name in ("Subset", "sample", "drop", "iloc", "loc", "take", "select", "head", "tail")
    return False


def span_of(model: ModuleModel, node: ast.AST) -> Span:
    source = model.source
    line = node.lineno - 1  # type: ignore[attr-defined]
    end_line = (getattr(node, "end_lineno", None) or node.lineno) - 1  # type: ignore[attr-defined]
    col = source.char_col(line, node.col_offset)  # type: ignore[attr-defined]
    end_col = source.char_col(end_line, getattr(node, "end_col_offset", None) or 0)
    return Span.of(line, col, end_line, end_col)


# --- nn.Module facts -----------------------------------------------------------------------

NOT_MODULES = frozenset({"Parameter", "ParameterList", "ParameterDict", "Buffer", "UninitializedParameter", "UninitializedBuffer"})


def is_module_constructor(flow: DataFlow, node: ast.AST | None, scope: str, _depth: int = 0) -> bool:
    """True when `node` builds an `nn.Module` (torch.nn layers, same-file Module classes,
    torchvision/timm models), or names a local bound to one."""
    if node is None or _depth > 4:
        return False
    if isinstance(node, ast.Call):
        callee = flow.resolve_call(node)
        if not callee:
            return False
        last = tail(callee)
        if callee.startswith("torch.nn.") and last[:1].isupper() and last not in NOT_MODULES:
            return not callee.startswith(("torch.nn.functional.", "torch.nn.init.", "torch.nn.utils.", "torch.nn.parameter."))
        if callee.startswith(("torchvision.models.", "timm.create_model")):
            return True
        return flow.model.is_module_class(callee)
    if isinstance(node, ast.Name):
        d = flow.reaching(node.id, scope, pos(node))
        if d is not None and d.kind == "assign" and d.index is None:
            return is_module_constructor(flow, d.value, d.scope, _depth + 1)
    return False


def class_method(flow: DataFlow, cls: str, method: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    node = flow.classes.get(cls)
    return None if node is None else own_method(node, method)


def own_method(cls: ast.ClassDef, method: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The first definition of `method` in the class's own body."""
    return next((s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == method), None)


def _parent_map(root: ast.AST) -> dict[int, ast.AST]:
    return {id(child): parent for parent in breadth_first(root) for child in child_nodes(parent)}


def walk_function(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function body, not descending into nested functions or classes."""
    stack = list(reversed(getattr(fn, "body", [])))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(reversed(child_nodes(node)))


_CONVERSIONS = frozenset({"int", "float", "round"})
_SAME_VALUES = frozenset({"values", "to_numpy", "astype", "item", "long", "int", "float", "double", "numpy"})


def _is_conversion(parent: ast.AST | None, node: ast.expr) -> bool:
    """`parent` only changes the type of `node`'s values: `int(node)`, `node.item()`."""
    if isinstance(parent, ast.Call) and len(parent.args) == 1 and parent.args[0] is node:
        return isinstance(parent.func, ast.Name) and parent.func.id in _CONVERSIONS
    return isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in ("item", "astype")


def _unconverted(node: ast.expr) -> ast.expr:
    """`df["age"].values.astype(int)` -> `df["age"]`: the same values under another type."""
    for _ in range(6):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _SAME_VALUES:
            node = node.func.value
        elif isinstance(node, ast.Attribute) and node.attr in _SAME_VALUES:
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CONVERSIONS and len(node.args) == 1:
            node = node.args[0]
        else:
            break
    return node

