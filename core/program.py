"""The whole-program model: per-function summaries over the user's project.

A `FunctionSummary` is small, serializable data about one function (or method, closure,
lambda): which names it steps, clears (`zero_grad`), runs forward, back-propagates, puts in
train/eval mode or calls `set_epoch` on; whether it runs under `no_grad` (a context or a
decorator, the project's own decorators included); whether it is itself a decorator that
turns gradients off (`def smart_inference_mode(): ... torch.inference_mode()(fn)`); and what
kind of value it returns (an optimizer from `get_optimizer(cfg)`, a model from
`build_model()`). Facts of callees are composed into their callers with the callee's
parameters renamed to the caller's arguments, through calls in the same file and calls into
the user's other modules (resolved on disk by `Project.resolve_function`, to any depth).

Summaries are keyed by content: the function's text and the keys of the callees it reached,
so an edit to a helper changes the key of every caller and nothing else. `Program` memoises
them per key and per (file version, qualname); it lives in the `Project`, which is shared by
every file of a CLI run and by every document of a language-server session, so a helper
imported by twenty scripts is read and summarised once. Computing one summary reads only the
files it reaches, and every file read is recorded in the asking `ProjectView` (also on a
memo hit), so result caches are invalidated when a dependency changes.

Unknown stays unknown: a callee that cannot be resolved marks the summary `partial`, and
rules treat partial facts as "may do anything". So does a callee in a module past the
analysis's budget of bytes read (`core.project.Budget`); such a summary is not memoised, and a
memoised one replays the charges of its computation, so that answers never depend on what an
earlier analysis read. A `SummaryStore`, when the `Project` has one, keeps summaries (and the
training model's events of calls into other modules) across processes: the CLI's cache.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from torch_preflight.core.names import tail
from torch_preflight.core.semantic import NO_GRAD_CONTEXTS, Context, Event, EventKind, Guard, Kind, ModuleModel, Value
from torch_preflight.core.source import Span

if TYPE_CHECKING:
    from torch_preflight.core.project import Budget, Dependency, Project

MAX_DEPTH = 8  # call-chain depth followed across files (cycles stop earlier)
_TOKEN = re.compile(r"[A-Za-z_][\w.]*")


@dataclass(frozen=True, slots=True)
class FunctionSummary:
    """What a function does, in its own names (parameters, attributes, globals)."""

    key: str  # content hash: the function's text and its callees' keys
    path: str
    qualname: str
    params: tuple[str, ...] = ()
    steps: tuple[str, ...] = ()  # optimizers stepped (`opt.step()`, `scaler.step(opt)`)
    clears: tuple[str, ...] = ()  # receivers of `zero_grad()` (optimizers or modules), `grad=None` as "*"
    forwards: tuple[str, ...] = ()  # models called on inputs
    backwards: int = 0
    modes: tuple[tuple[str, str], ...] = ()  # (receiver, "train" | "eval")
    set_epoch: tuple[str, ...] = ()  # receivers of `set_epoch()` (`train_loader.sampler`)
    disables_grad: bool = False  # decorated with no_grad / inference_mode (the project's own wrappers too)
    grad_decorator: bool = False  # a decorator, or a factory of one, that applies no_grad / inference_mode
    returns: str = Kind.UNKNOWN.value  # Kind of what every `return` gives
    partial: bool = False  # some callee could not be read: its facts are missing
    dependencies: tuple[str, ...] = ()  # other files whose text this summary rests on

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FunctionSummary:
        fields: dict[str, Any] = {
            k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v for k, v in data.items()
        }
        return cls(**fields)

    @property
    def trains(self) -> bool:
        """It back-propagates, steps or clears gradients: training code."""
        return bool(self.backwards or self.steps or self.clears)


class SummaryStore:
    """Answers of the whole-program model that outlive one process, as JSON data under stable keys
    (the file's path, a hash of its text, the function): a function's summary, and the events a
    call into another module contributes to a loop (`TrainingModel._load_foreign`). Each entry
    lists the files it rests on by stat and what it charged to the budget; an entry is used only
    while those files are unchanged, so a callee edited since makes its callers' entries miss.
    The CLI keeps the store beside its result cache (torch_preflight/cache.py): a run in which
    one file changed does not summarise the unchanged helpers of the project again. A language
    server can hand the same store to its `Project` (`Project(store=...)`) and save `added` when
    it likes. Editor buffers are never stored (their dependencies are not files)."""

    def __init__(self, entries: dict[str, Any] | None = None) -> None:
        self.entries: dict[str, Any] = dict(entries or {})
        self.added: dict[str, Any] = {}  # entries made since the store was loaded (or `drain`ed)

    def get(self, key: str) -> Any:
        return self.entries.get(key)

    def put(self, key: str, value: Any) -> None:
        self.entries[key] = value
        self.added[key] = value

    def drain(self) -> dict[str, Any]:
        """The entries added since the last call (what a worker process sends back)."""
        added, self.added = self.added, {}
        return added


def _store_key(kind: str, model: ModuleModel, name: str) -> str:
    """A SummaryStore key: what is stored, the file, a stable hash of its text (Python's `hash` of a
    string differs between processes), the function."""
    digest = model.__dict__.get("_tpf_digest")
    if digest is None:
        digest = model.__dict__["_tpf_digest"] = hashlib.blake2b(model.source.text.encode(), digest_size=16).hexdigest()
    return f"{kind}\0{model.path}\0{digest}\0{name}"


@dataclass
class Program:
    """The project's summaries, memoised by file version and by content key."""

    project: Project
    store: SummaryStore | None = None  # answers kept across processes (the CLI's cache), when given
    _by_site: dict[tuple[str, int, str], FunctionSummary | None] = field(default_factory=dict, repr=False)
    _deps: dict[tuple[str, int, str], dict[str, Dependency]] = field(default_factory=dict, repr=False)
    _charges: dict[tuple[str, int, str], tuple[tuple[str, int], ...]] = field(default_factory=dict, repr=False)
    by_key: dict[str, FunctionSummary] = field(default_factory=dict, repr=False)
    _memos: dict[str, dict[Any, Any]] = field(default_factory=dict, repr=False)

    def memo(self, name: str) -> dict[Any, Any]:
        """A named project-wide memo for facts derived from summaries (entries carry their own
        dependencies: the training model keys them by file version and checks its files)."""
        return self._memos.setdefault(name, {})

    def summary(
        self, model: ModuleModel, qualname: str, used: dict[str, Dependency], _stack: tuple[str, ...] = (), budget: Budget | None = None
    ) -> FunctionSummary | None:
        """The summary of `qualname` in `model`, or None when the function does not exist.
        `budget` bounds what other modules are read (`core.project.Budget`): a callee in a module
        past it makes the summary `partial`, and such a summary is not memoised."""
        site = (model.path, hash(model.source.text), qualname)
        if site not in self._by_site and self.store is not None and not model.path.startswith("<"):
            self._from_store(site, _store_key("summary", model, qualname))
        if site in self._by_site and all(self.project.unchanged(d) for d in self._deps[site].values()):
            if budget is None or budget.replay(self._charges[site]):
                used.update(self._deps[site])
                return self._by_site[site]
        if f"{model.path}:{qualname}" in _stack or len(_stack) >= MAX_DEPTH:
            return None  # a cycle, or too deep: the caller marks itself partial
        deps: dict[str, Dependency] = {}
        mark = budget.mark() if budget is not None else None
        found = _Summarizer(self, model, deps, (*_stack, f"{model.path}:{qualname}"), budget).run(qualname)
        used.update(deps)
        if budget is not None and mark is not None:
            if budget.cut_since(mark):
                return found  # partial (see _Summarizer.run): what the budget left out is unknown
            self._charges[site] = budget.since(mark)
        if found is not None:
            found = self.by_key.setdefault(found.key, found)
        self._by_site[site] = found
        self._deps[site] = deps
        self._charges.setdefault(site, ())
        if self.store is not None and not model.path.startswith("<"):
            self._to_store(_store_key("summary", model, qualname), found.to_json() if found is not None else None, deps, self._charges[site])
        return found

    def _from_store(self, site: tuple[str, int, str], key: str) -> None:
        stored: Any = self.store.get(key) if self.store is not None else None
        deps = self._stored_deps(stored)
        if deps is None:
            return
        try:
            summary = FunctionSummary.from_json(stored["v"]) if stored["v"] is not None else None
            charges = tuple((str(p), int(n)) for p, n in stored["c"])
        except (TypeError, KeyError, ValueError):
            return  # not an entry this version wrote: computed again
        self._by_site[site], self._deps[site], self._charges[site] = summary, deps, charges

    def _stored_deps(self, stored: Any) -> dict[str, Dependency] | None:
        """The dependencies of a stored entry when it is well formed and they are all unchanged."""
        from torch_preflight.core.project import Dependency

        try:
            deps = {str(p): Dependency(str(p), int(m), int(n)) for p, m, n in stored["d"]}
        except (TypeError, KeyError, ValueError):
            return None
        return deps if all(self.project.unchanged(d) for d in deps.values()) else None

    def _to_store(self, key: str, value: Any, deps: dict[str, Dependency], charges: tuple[tuple[str, int], ...]) -> None:
        from torch_preflight.core.project import OVERRIDE

        if self.store is None or any(d.mtime_ns == OVERRIDE for d in deps.values()):
            return  # none kept, or an editor buffer: not a file a later process could check
        self.store.put(key, {"v": value, "d": [[d.path, d.mtime_ns, d.size] for d in deps.values()], "c": [list(c) for c in charges]})

    def stored_foreign(self, model: ModuleModel, name: str) -> tuple[Any, dict[str, Dependency], tuple[tuple[str, int], ...]] | None:
        """What `TrainingModel._load_foreign` found for `name` in `model` in an earlier process: (the
        callee's parameters and kept events, or None when unknown; the files it rests on; the budget
        it charged), or None when nothing valid is stored."""
        if self.store is None or model.path.startswith("<"):
            return None
        stored = self.store.get(_store_key("foreign", model, name))
        deps = self._stored_deps(stored)
        if deps is None:
            return None
        try:
            value = stored["v"]
            found = (tuple(value[0]), tuple(_event(e) for e in value[1])) if value is not None else None
            return found, deps, tuple((str(p), int(n)) for p, n in stored["c"])
        except (TypeError, KeyError, ValueError, IndexError):
            return None

    def store_foreign(
        self, model: ModuleModel, name: str, found: tuple[tuple[str, ...], tuple[Event, ...]] | None,
        deps: dict[str, Dependency], charges: tuple[tuple[str, int], ...],
    ) -> None:
        if self.store is None or model.path.startswith("<"):
            return
        value = [list(found[0]), [_event_json(e) for e in found[1]]] if found is not None else None
        self._to_store(_store_key("foreign", model, name), value, deps, charges)

    def resolve(
        self, model: ModuleModel, name: str, scope: str, used: dict[str, Dependency], budget: Budget | None = None
    ) -> tuple[ModuleModel, str] | None:
        """The function a called name reaches: in the same file, else in another module of the
        user's project through the file's imports (`from utils import train_step`)."""
        local = model.resolve_function(name, scope)
        if local:
            return model, local
        if "." not in name:  # `from helpers import *`
            if model.assignments(name, scope):
                return None
            for module in model.imports.stars:
                found = self.project.resolve_function(model.path, f"{module}.{name}", used, budget)
                if found is not None:
                    return found
            return None
        # call names are already qualified through the file's imports (`b.helper` for `from b import helper`)
        if name.startswith(("torch.", "torchvision.")) or not model.comes_from_import(name):
            return None
        return self.project.resolve_function(model.path, name, used, budget)


class _Summarizer:
    def __init__(
        self, program: Program, model: ModuleModel, deps: dict[str, Dependency], stack: tuple[str, ...], budget: Budget | None = None
    ) -> None:
        self.program = program
        self.model = model
        self.deps = deps
        self.stack = stack
        self.budget = budget

    def run(self, qualname: str) -> FunctionSummary | None:
        model = self.model
        fn = model.functions.get(qualname)
        if fn is None:
            return None
        steps: list[str] = []
        clears: list[str] = []
        forwards: list[str] = []
        modes: list[tuple[str, str]] = []
        set_epoch: list[str] = []
        backwards = 0
        partial = False
        callee_keys: list[str] = []
        for event in fn.events:
            if event.kind is EventKind.STEP and event.receiver:
                kind = model.kind_of(event.receiver, qualname)
                if kind is Kind.SCALER and event.args and event.args[0].base:
                    steps.append(event.args[0].base)
                elif kind is Kind.OPTIMIZER:
                    steps.append(event.receiver)
            elif event.kind is EventKind.ZERO_GRAD:
                clears.append("*" if event.name == "grad=None" or ".grad" in (event.receiver or "") else event.receiver or "*")
            elif event.kind is EventKind.BACKWARD:
                backwards += 1
            elif event.kind in (EventKind.TRAIN_MODE, EventKind.EVAL_MODE) and event.receiver:
                modes.append((event.receiver, "train" if event.kind is EventKind.TRAIN_MODE else "eval"))
            elif event.kind is EventKind.CALL and event.name:
                if tail(event.name) == "set_epoch" and event.receiver:
                    set_epoch.append(event.receiver)
                    continue
                if not event.receiver and model.kind_of(event.name, qualname) is Kind.MODEL and not model.resolve_function(event.name, qualname):
                    forwards.append(event.name)
                    continue
                if event.receiver and tail(event.name) == "forward" and event.receiver not in ("self", "super()"):
                    forwards.append(event.receiver)
                    continue
                cuts = self.budget.cuts if self.budget is not None else 0
                target = self.program.resolve(model, event.name, qualname, self.deps, self.budget)
                if target is None:
                    partial = partial or (self.budget is not None and self.budget.cuts > cuts)  # not read: unknown
                    continue
                other, name = target
                inner = self.program.summary(other, name, self.deps, self.stack, self.budget)
                if inner is None:
                    partial = True
                    continue
                callee_keys.append(inner.key)
                partial = partial or inner.partial
                binding = _binding(event, inner.params, other.functions[name].owner is not None)
                steps += [_rename(s, binding) for s in inner.steps]
                clears += [_rename(c, binding) for c in inner.clears]
                forwards += [_rename(f, binding) for f in inner.forwards]
                modes += [(_rename(r, binding), m) for r, m in inner.modes]
                set_epoch += [_rename(s, binding) for s in inner.set_epoch]
                backwards += inner.backwards
        text = model.source.slice(fn.span)
        key = hashlib.sha1("\0".join((text, *callee_keys)).encode()).hexdigest()[:20]
        return FunctionSummary(
            key=key,
            path=model.path,
            qualname=qualname,
            params=fn.params,
            steps=tuple(dict.fromkeys(steps)),
            clears=tuple(dict.fromkeys(clears)),
            forwards=tuple(dict.fromkeys(forwards)),
            backwards=backwards,
            modes=tuple(dict.fromkeys(modes)),
            set_epoch=tuple(dict.fromkeys(set_epoch)),
            disables_grad=fn.disables_grad or any(self._decorator_disables(d) for d in fn.decorators),
            grad_decorator=_applies_no_grad(model, text) and not fn.owner,
            returns=return_kind(model, qualname).value,
            partial=partial,
            dependencies=tuple(sorted(p for p in self.deps if p != model.path)),
        )

    def _decorator_disables(self, decorator: str) -> bool:
        """A decorator of the user's project that applies no_grad / inference_mode."""
        if decorator in NO_GRAD_CONTEXTS:
            return False  # already counted by Function.disables_grad
        return decorator_disables_grad(self.program, self.model, decorator, self.deps)


def decorator_disables_grad(program: Program, model: ModuleModel, decorator: str, used: dict[str, Dependency]) -> bool:
    """`decorator` (a resolved decorator name, `utils.smart_inference_mode`) is a function of the
    project that wraps what it decorates in no_grad / inference_mode."""
    local = model.resolve_function(decorator, "")
    if local:
        target: tuple[ModuleModel, str] | None = (model, local)
    elif "." in decorator and not decorator.startswith("torch.") and program.project.may_define_grad_decorator(model.path, decorator):
        target = program.project.resolve_function(model.path, decorator, used)
    else:
        target = None
    if target is None:
        return False
    other, qualname = target
    fn = other.functions[qualname]  # its own text decides: no need to compose its callees' summaries
    return not fn.owner and _applies_no_grad(other, other.source.slice(fn.span))


def _applies_no_grad(model: ModuleModel, text: str) -> bool:
    """The function's text names no_grad or inference_mode (through the file's imports) and
    never re-enables gradients: a decorator built on them."""
    if "enable_grad" in text or "set_grad_enabled" in text:
        return False
    return any(model.imports.resolve(token) in NO_GRAD_CONTEXTS for token in set(_TOKEN.findall(text)))


def return_kind(model: ModuleModel, qualname: str) -> Kind:
    """The kind every `return` of a function gives (UNKNOWN when they differ or none is known)."""
    memo: dict[tuple[str, bool], Kind] = model.__dict__.setdefault("_tpf_returns", {})
    key = (qualname, model.__dict__.get("_tpf_external", False))  # see ModuleModel.external_kinds
    if key in memo:
        return memo[key]
    memo[key] = Kind.UNKNOWN  # cycle guard
    fn = model.functions.get(qualname)
    kinds = set()
    if fn is not None:
        for event in fn.events:
            if event.kind is EventKind.RETURN and event.function == qualname and event.value is not None:
                kinds.add(model.kind_of_value(event.value, qualname, 1))
    result = kinds.pop() if len(kinds) == 1 else Kind.UNKNOWN
    memo[key] = result
    return result


def returned_elements(model: ModuleModel, qualname: str) -> tuple[str | None, ...] | None:
    """The local name each position of a function's result holds, when every `return` agrees on
    the shape: `return train_set, val_set, train_loader` gives its three names (None where an
    element is no plain name), `return loader` one. None when the returns differ in length, give
    no tuple or name, or the tree is not kept. With `kind_of` in the callee's model, the caller's
    `a, b, loader = build(cfg)` learns what each target holds."""
    fn = model.functions.get(qualname)
    node = _def_node(model.tree, fn.header.start.line + 1) if fn is not None and model.tree is not None and not fn.is_lambda else None
    if fn is None or node is None or node.name != fn.name:
        return None
    shapes: set[tuple[str | None, ...]] = set()
    pending: list[ast.stmt] = list(node.body)
    while pending:  # statements only: a `return` is one, and nested defs return for themselves
        child = pending.pop()
        if isinstance(child, ast.Return) and child.value is not None:
            items = child.value.elts if isinstance(child.value, ast.Tuple) else [child.value]
            shapes.add(tuple(i.id if isinstance(i, ast.Name) else None for i in items))
        elif not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            pending.extend(_statements_in(child))
    return shapes.pop() if len(shapes) == 1 else None


def _statements_in(stmt: ast.stmt) -> list[ast.stmt]:
    """The statements of a compound statement's blocks (bodies, `else`, `finally`, handlers, cases)."""
    return [
        s for field in ("body", "orelse", "finalbody", "handlers", "cases") for item in getattr(stmt, field, None) or ()
        for s in (item.body if isinstance(item, (ast.ExceptHandler, ast.match_case)) else [item]) if isinstance(s, ast.stmt)
    ]


def _def_node(tree: ast.Module, lineno: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The `def` on line `lineno`, found through the statements that hold it (no expression is walked)."""
    body: list[ast.stmt] = tree.body
    while body:
        holder = next((s for s in body if s.lineno <= lineno <= (s.end_lineno or s.lineno)), None)
        if holder is None:
            return None
        if isinstance(holder, (ast.FunctionDef, ast.AsyncFunctionDef)) and holder.lineno == lineno:
            return holder
        body = _statements_in(holder)
    return None


def _binding(call: Any, params: tuple[str, ...], method: bool) -> dict[str, str]:
    """Callee parameter -> the caller's plain dotted argument."""
    binding: dict[str, str] = {}
    positional = params[1:] if method else params
    for index, param in enumerate(positional):
        value = call.keyword(param) or (call.args[index] if index < len(call.args) else None)
        if value is not None and value.base and not value.callee and not value.method and _TOKEN.fullmatch(value.text):
            binding[param] = value.base
    return binding


def _rename(name: str, binding: dict[str, str]) -> str:
    head, dot, rest = name.partition(".")
    return binding[head] + dot + rest if head in binding else name


# --- events as JSON data (SummaryStore) ------------------------------------------------


def _span_json(span: Span) -> list[int]:
    return [span.start.line, span.start.col, span.end.line, span.end.col]


def _value_json(v: Value | None) -> list[Any] | None:
    if v is None:
        return None
    return [v.text, _span_json(v.span), v.callee, v.receiver, v.method, v.base, list(v.names), list(v.methods), list(v.calls),
            v.is_literal, v.is_binop]


def _value(data: list[Any] | None) -> Value | None:
    if data is None:
        return None
    text, span, callee, receiver, method, base, names, methods, calls, literal, binop = data
    return Value(str(text), Span.of(*span), callee, receiver, method, base, tuple(names), tuple(methods), tuple(calls), bool(literal),
                 bool(binop))


def _event_json(e: Event) -> list[Any]:
    return [
        e.kind.value, _span_json(e.span), _span_json(e.stmt), e.function, e.receiver, e.name, [_value_json(a) for a in e.args],
        [[k, _value_json(v)] for k, v in e.keywords], _value_json(e.value), list(e.targets),
        [[g.text, _span_json(g.span), g.cadence, g.negated] for g in e.guards],
        [[c.name, _span_json(c.span), list(c.args)] for c in e.contexts], list(e.loops), list(e.via), e.inner,
    ]


def _event(data: list[Any]) -> Event:
    kind, span, stmt, function, receiver, name, args, keywords, value, targets, guards, contexts, loops, via, inner = data
    return Event(
        EventKind(kind), Span.of(*span), Span.of(*stmt), str(function), receiver, name,
        tuple(v for v in map(_value, args) if v is not None), tuple((str(k), v) for k, d in keywords if (v := _value(d)) is not None),
        _value(value), tuple(targets), tuple(Guard(str(t), Span.of(*sp), bool(c), bool(n)) for t, sp, c, n in guards),
        tuple(Context(str(n), Span.of(*sp), tuple(a)) for n, sp, a in contexts), tuple(int(i) for i in loops), tuple(via), bool(inner),
    )
