"""The semantic model of one module: functions, classes, loops, bindings and events.

The builder walks the syntax tree once and records, for every function (and the module
body), what happens in it in source order: calls, assignments, `backward()`, `step()`,
`zero_grad()`, mode switches and so on, each as an `Event` that carries its position, the
`if` guards and `with` contexts around it and the loops that enclose it. Rules read these
facts; they never walk the syntax tree again. Functions, classes, loops and events hold
only names, positions and summaries, so a different front end could produce them. The
one exception is `ModuleModel.tree`, kept for the provenance analysis (core/dataflow.py)
and the estimator, which need expression shapes the summaries drop.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from enum import StrEnum
from functools import cached_property

from torch_preflight.core.names import DISPLAYS, ImportMap, breadth_first, child_nodes, dotted, tail
from torch_preflight.core.source import SourceText, Span


class EventKind(StrEnum):
    CALL = "call"
    BACKWARD = "backward"
    STEP = "step"
    ZERO_GRAD = "zero_grad"
    SCHEDULER_STEP = "scheduler_step"
    TRAIN_MODE = "train_mode"
    EVAL_MODE = "eval_mode"
    ASSIGN = "assign"
    AUG_ASSIGN = "aug_assign"
    STORE = "store"
    RETURN = "return"


class Kind(StrEnum):
    """What a name is bound to, as far as the file tells."""

    OPTIMIZER = "optimizer"
    SCHEDULER = "scheduler"
    SCALER = "scaler"
    MODEL = "model"
    LOSS_FN = "loss_fn"
    LOADER = "loader"
    SAMPLER = "sampler"
    LOSS = "loss"  # a graph-carrying tensor computed by a loss
    OUTPUT = "output"  # a graph-carrying model output
    SCALAR = "scalar"  # a Python number (.item(), float(), len())
    DETACHED = "detached"  # a tensor without graph (.detach(), no_grad result)
    UNKNOWN = "unknown"


GRAPH_KINDS = frozenset({Kind.LOSS, Kind.OUTPUT})
NO_GRAD_CONTEXTS = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad"})
AUTOCAST_CONTEXTS = frozenset({"torch.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast", "torch.cpu.amp.autocast"})
MODULE_BASES = frozenset(
    {
        "torch.nn.Module",
        "torch.nn.modules.module.Module",
        "torch.nn.Sequential",
        "torch.nn.ModuleList",
        "torch.nn.ModuleDict",
        "pytorch_lightning.LightningModule",
        "pytorch_lightning.core.LightningModule",
        "lightning.LightningModule",
        "lightning.pytorch.LightningModule",
        "lightning.pytorch.core.LightningModule",
    }
)
LOOP_OWNING_BASES = frozenset(
    {
        "pytorch_lightning.LightningModule",
        "pytorch_lightning.core.LightningModule",
        "lightning.LightningModule",
        "lightning.pytorch.LightningModule",
        "lightning.pytorch.core.LightningModule",
        "transformers.Trainer",
        "transformers.trainer.Trainer",
    }
)
OPTIMIZER_NAME = re.compile(r"^(opt|optim|optimi[sz]er)(s?|_?\w*)$|^\w*_(opt|optim|optimi[sz]er)$|^\w*Optimi[sz]er$", re.I)
SCHEDULER_NAME = re.compile(r"sched|lr_|warmup", re.I)
MODEL_NAME = re.compile(r"^(model|net|network|module|classifier|encoder|decoder|generator|discriminator|backbone|net[A-Z_]\w*|model_\w+|\w+_model|\w+_net)$")
SCALER_NAME = re.compile(r"^\w*scaler$", re.I)
LOSS_CALL = re.compile(r"(loss|cross_entropy|nll|mse|l1|kl_div|bce|hinge|margin|criterion|triplet|ctc)", re.I)
OPTIMIZER_CLASS = re.compile(r"^(SGD|Adam|AdamW|Adamax|NAdam|RAdam|Adagrad|Adadelta|RMSprop|Rprop|LBFGS|SparseAdam|ASGD|Adafactor|Lion|LAMB|Lamb|AdamW8bit|Adam8bit|PagedAdamW\w*|FusedAdam|FusedLAMB|Muon|\w*Optimizer)$")
# `loss.backward()`, `accelerator.backward(loss)`, `fabric.backward(loss)`, Lightning's `self.manual_backward(loss)`
_BACKWARD_METHODS = frozenset({"backward", "manual_backward"})
# Factories named for what they return, trusted only when the callee cannot be read (a tie-break).
_FACTORY = re.compile(r"^_*(create|get|build|make|init|setup|configure|construct|prepare)_?(?P<what>optimi[sz]ers?|optim|lr_scheduler|scheduler|model|net|network)$", re.I)
_CONSTRUCTED = re.compile(r"([A-Za-z_][\w.]*)\(.*\)", re.S)  # a receiver that is a plain call: `Net(cfg)`
_WRAPPERS = frozenset({"to", "cuda", "cpu", "half", "float", "bfloat16", "double", "train", "eval", "requires_grad_", "module"})
_DETACHING = frozenset({"item", "detach", "tolist", "numpy", "detach_", "__float__"})
_BUILTINS = frozenset(dir(builtins))
_CREATE_GRAPH = re.compile(r"\bcreate_graph\s*=\s*True\b")


# Value, Guard and Context: not `frozen` (never assigned to all the same), as Event below and
# core.source.Position; `unsafe_hash` keeps the field-wise hash.
@dataclass(slots=True, unsafe_hash=True)
class Value:
    """A summary of an expression."""

    text: str
    span: Span
    callee: str | None = None  # resolved name of a plain call, e.g. torch.optim.Adam or criterion
    receiver: str | None = None  # for a method call: the dotted receiver, e.g. loss
    method: str | None = None  # for a method call: its name, e.g. item
    base: str | None = None  # the dotted name the value starts from, after stripping methods
    names: tuple[str, ...] = ()  # every Name the expression reads
    methods: tuple[str, ...] = ()  # every method called anywhere in it
    calls: tuple[str, ...] = ()  # every callee (resolved) called anywhere in it
    is_literal: bool = False
    is_binop: bool = False


@dataclass(slots=True, unsafe_hash=True)
class Guard:
    text: str
    span: Span
    cadence: bool  # the condition tests a modulo (an accumulation or logging cadence)
    negated: bool = False


@dataclass(slots=True, unsafe_hash=True)
class Context:
    name: str  # resolved qualified name, or dotted text for a method (accelerator.accumulate)
    span: Span
    args: tuple[str, ...] = ()

    @property
    def disables_grad(self) -> bool:
        if self.name in NO_GRAD_CONTEXTS:
            return True
        return self.name == "torch.set_grad_enabled" and self.args[:1] == ("False",)

    @property
    def is_autocast(self) -> bool:
        return self.name in AUTOCAST_CONTEXTS or self.name.endswith(".autocast")


# Not `frozen`: a frozen dataclass sets each field through `object.__setattr__`, which made
# building an event about 30x slower than plain attribute stores (Python 3.11), and the training
# model copies events by the thousand per analysis (`seen_through`). Events are never assigned
# to after construction all the same; `unsafe_hash` keeps the field-wise hash `frozen` gave.
@dataclass(slots=True, unsafe_hash=True)
class Event:
    kind: EventKind
    span: Span  # the expression (call) itself
    stmt: Span  # the enclosing simple statement
    function: str  # qualname of the enclosing function, "" for module level
    receiver: str | None = None  # dotted receiver of a method call
    name: str | None = None  # resolved callee for CALL/FORWARD; target text for assignments
    args: tuple[Value, ...] = ()
    keywords: tuple[tuple[str, Value], ...] = ()
    value: Value | None = None  # assigned / returned value
    targets: tuple[str, ...] = ()  # assignment targets (dotted text)
    guards: tuple[Guard, ...] = ()
    contexts: tuple[Context, ...] = ()
    loops: tuple[int, ...] = ()  # enclosing loops, outermost first
    via: tuple[str, ...] = ()  # call chain when inlined from a called function
    inner: bool = False  # (in an iteration view) nested in a loop inside the viewed loop

    def keyword(self, name: str) -> Value | None:
        for key, value in self.keywords:
            if key == name:
                return value
        return None

    @property
    def no_grad(self) -> bool:
        return any(c.disables_grad for c in self.contexts)

    def with_inner(self, inner: bool) -> Event:
        """This event with `inner` set (a positional copy, as `seen_through`)."""
        return Event(
            self.kind, self.span, self.stmt, self.function, self.receiver, self.name, self.args, self.keywords, self.value,
            self.targets, self.guards, self.contexts, self.loops, self.via, inner,
        )

    def seen_through(self, call: Event, callee: str) -> Event:
        """This event of `callee` as it runs at `call`: under the call's guards, contexts and
        loops, with the callee in front of its call chain (a positional copy: the training
        model makes many, and `dataclasses.replace` costs several times more)."""
        return Event(
            self.kind, self.span, self.stmt, self.function, self.receiver, self.name, self.args, self.keywords, self.value,
            self.targets, call.guards + self.guards, call.contexts + self.contexts, call.loops + self.loops,
            (callee, *self.via), self.inner,
        )


@dataclass(slots=True)
class Loop:
    id: int
    kind: str  # "for" | "while"
    span: Span
    header: Span  # `for x in y:` up to the colon
    body: Span
    function: str
    targets: tuple[str, ...]
    iter: Value | None
    parent: int | None
    guards: tuple[Guard, ...]
    contexts: tuple[Context, ...]
    body_indent: str
    indent: str
    has_multiline_strings: bool = False
    runs_once: bool = False  # its body leaves the loop unconditionally (`break`, `return`, `raise`): one pass


@dataclass(slots=True)
class Function:
    qualname: str
    name: str
    span: Span
    header: Span
    params: tuple[str, ...]
    defaults: dict[str, Value]
    decorators: tuple[str, ...]
    owner: str | None  # class qualname for methods
    parent: str | None  # enclosing function qualname for nested functions
    body_indent: str
    first_body_line: int
    events: list[Event] = field(default_factory=list)
    is_lambda: bool = False

    @property
    def disables_grad(self) -> bool:
        return any(d in NO_GRAD_CONTEXTS for d in self.decorators)


@dataclass(slots=True)
class ClassInfo:
    qualname: str
    name: str
    span: Span
    bases: tuple[str, ...]
    methods: dict[str, str] = field(default_factory=dict)  # method name -> function qualname
    is_module: bool = False
    owns_loop: bool = False  # Lightning / HF Trainer: the framework runs the loop


@dataclass
class ModuleModel:
    source: SourceText
    path: str
    imports: ImportMap
    functions: dict[str, Function]
    classes: dict[str, ClassInfo]
    loops: dict[int, Loop]
    tree: ast.Module | None = None  # the syntax tree, for analyses that need more than events (core/dataflow.py)
    # What an imported callee returns, from the whole-program summaries (set by the training model when it
    # has the project); None: unknown. Never part of the model's identity.
    external_kind: Callable[[str], Kind | None] | None = field(default=None, compare=False, repr=False)
    # Built as another module of the project, which the checked file imports: its `__main__` block does
    # not run and the importer may call any of its public functions (core/arguments.py: callers unknown).
    imported: bool = field(default=False, compare=False, repr=False)

    # --- queries -----------------------------------------------------------------------

    def function(self, qualname: str) -> Function:
        return self.functions[qualname]

    @cached_property
    def calls_to(self) -> dict[str, list[Event]]:
        """Function qualname -> the events that call it."""
        result: dict[str, list[Event]] = {}
        known = self.__dict__.pop("_tpf_calls_from", {})  # see reuse_calls
        for qualname, fn in self.functions.items():
            calls = known.get(qualname)
            if calls is None:
                calls = tuple((t, e) for e in fn.events if e.kind in (EventKind.CALL, EventKind.STEP) for t in self.call_targets(e))
            for target, event in calls:
                result.setdefault(target, []).append(event)
        return result

    def reuse_calls(self, previous: ModuleModel, functions: frozenset[str]) -> None:
        """Let `calls_to` take the calls made by `functions` from `previous` (a model of an
        earlier version of the same document) instead of resolving them again: the caller
        vouches that those functions and everything they reach by name are unchanged."""
        if "calls_to" not in previous.__dict__:
            return
        calls: dict[str, list[tuple[str, Event]]] = {q: [] for q in functions}
        for target, events in previous.calls_to.items():
            for event in events:
                if event.function in calls:
                    calls[event.function].append((target, event))
        self.__dict__["_tpf_calls_from"] = calls

    def call_targets(self, event: Event) -> list[str]:
        """Local functions an event calls, including closures passed as arguments."""
        targets: list[str] = []
        if event.kind == EventKind.CALL and event.name:
            resolved = self.resolve_function(event.name, event.function)
            if resolved:
                targets.append(resolved)
        for arg in (*event.args, *(v for _, v in event.keywords)):
            if arg.base and not arg.callee and not arg.method:
                resolved = self.resolve_function(arg.base, event.function)
                fn = self.functions[resolved] if resolved else None
                if fn is None:
                    continue
                closure = bool(event.function) and fn.parent == event.function  # defined where it is passed
                # a script's `optimizer.step(closure)` (L-BFGS) with a top-level closure runs it in that step
                script_step = event.kind == EventKind.STEP and not event.function and fn.parent is None and not fn.owner
                if closure or script_step:
                    targets.append(fn.qualname)
        return targets

    def resolve_function(self, name: str, scope: str) -> str | None:
        """Resolve a called name (`train`, `self.step`, `helper`) to a local function."""
        memo: dict[tuple[str, str], str | None] = self.__dict__.setdefault("_tpf_resolved", {})  # rules ask the same names often
        key = (name, scope)
        if key not in memo:
            memo[key] = self._resolve_function(name, scope)
        return memo[key]

    def _resolve_function(self, name: str, scope: str) -> str | None:
        if name.startswith("self.") and name.count(".") == 1:
            fn = self.functions.get(scope)
            owner = fn.owner if fn else None
            while fn and not owner and fn.parent:
                fn = self.functions.get(fn.parent)
                owner = fn.owner if fn else None
            cls = self.classes.get(owner) if owner else None
            method = tail(name)
            while cls:
                if method in cls.methods:
                    return cls.methods[method]
                cls = next((self.classes[b] for b in cls.bases if b in self.classes), None)
            return None
        if "." in name:
            return self._resolve_method(name, scope)
        current: str | None = scope
        while current:
            candidate = f"{current}.{name}"
            if candidate in self.functions:
                return candidate
            current = self.functions[current].parent if current in self.functions else None
        if name in self.functions:
            return name
        return self._resolve_partial(name, scope)

    def _resolve_method(self, name: str, scope: str) -> str | None:
        """`trainer.train_epoch` where `trainer = Trainer(...)` builds a class of this file (also
        `self.trainer`): that class's method, following its bases in the file."""
        head, _, method = name.rpartition(".")
        if "." in method or not head or head in ("self", "super()") or self.imports.is_imported(head):
            return None
        assigned = self.assignments(head, scope)
        classes = {e.value.callee for e in assigned if e.value is not None and len(e.targets) == 1}
        if len(classes) != 1:
            return None
        cls = self.classes.get(next(iter(classes)) or "")
        while cls is not None:
            if method in cls.methods:
                return cls.methods[method]
            cls = next((self.classes[b] for b in cls.bases if b in self.classes), None)
        return None

    def _resolve_partial(self, name: str, scope: str) -> str | None:
        """`step = functools.partial(train_step, model=model)`: calling `step` runs `train_step`."""
        assigned = self.assignments(name, scope)
        if len(assigned) != 1 or assigned[0].value is None or assigned[0].value.callee != "functools.partial":
            return None
        value = assigned[0].value
        first = value.text[value.text.index("(") + 1 :].split(",")[0].strip() if "(" in value.text else ""
        if not first or first == name or not first.replace(".", "").replace("_", "").isalnum():
            return None
        return self.resolve_function(first, scope)

    def enclosing_class(self, scope: str) -> ClassInfo | None:
        fn = self.functions.get(scope)
        while fn:
            if fn.owner:
                return self.classes.get(fn.owner)
            fn = self.functions.get(fn.parent) if fn.parent else None
        return None

    def assignments(self, name: str, scope: str) -> list[Event]:
        """Assignments to `name` visible from `scope`: that function first, then outward."""
        chain: list[str] = []
        current: str | None = scope
        while current is not None:
            chain.append(current)
            fn = self.functions.get(current)
            current = fn.parent if fn and fn.parent else ("" if current else None)
        found: list[Event] = []
        for qualname in chain:
            fn = self.functions.get(qualname)
            if fn is None:
                continue
            hits = self._assigns_by_target(qualname).get(name)
            if hits:
                return list(hits)
            if name in fn.params and qualname == scope:
                return []
        if "." in name and name.startswith("self."):
            cls = self.enclosing_class(scope)
            if cls:
                # every method's assignments to `self.x`, asked for many names of the same class: memoised per model
                memo: dict[tuple[str, str], list[Event]] = self.__dict__.setdefault("_tpf_self_assigns", {})
                hits = memo.get((cls.qualname, name))
                if hits is None:
                    hits = memo[(cls.qualname, name)] = [e for method in cls.methods.values() for e in self._assigns_by_target(method).get(name, ())]
                found.extend(hits)
        return found

    def _assigns_by_target(self, qualname: str) -> dict[str, list[Event]]:
        """A function's ASSIGN events indexed by target, in event order (memoised per model)."""
        index = self.__dict__.setdefault("_assign_index", {})
        found = index.get(qualname)
        if found is None:
            found = {}
            for e in self.functions[qualname].events:
                if e.kind == EventKind.ASSIGN:
                    for target in dict.fromkeys(e.targets):
                        found.setdefault(target, []).append(e)
            index[qualname] = found
        return found

    def release(self) -> None:
        """Drop what the checks memoised on the model (the data-flow index, kinds, returns) and the
        oracle of imported callees. Those point back at the model, so without this the model, its
        syntax tree and every event outlive the check until the cyclic collector finds them: one
        scan of all a large file allocated (`runner.process` pauses the collector while it
        analyses). Each memo is rebuilt when asked again; the oracle is gone until set again."""
        self.external_kind = None
        kept = {f.name for f in fields(self)}
        for key in [k for k in self.__dict__ if k not in kept]:
            del self.__dict__[key]

    def set_external_kind(self, oracle: Callable[[str], Kind | None] | None) -> None:
        """Install what imported callees return (see `external_kind`); the kinds memoised so far are dropped."""
        self.external_kind = oracle
        for memo in ("_tpf_kinds", "_tpf_returns", "_tpf_values", "_tpf_params"):
            self.__dict__.pop(memo, None)

    @contextmanager
    def external_kinds(self) -> Iterator[None]:
        """Within this block `kind_of` may also ask what imported callees return (`external_kind`,
        which reads other files of the project). Only the questions where that decides something
        open it (is this an optimizer's step, a model's forward, a factory): every other question
        is answered from this file alone and never reads another."""
        previous = self.__dict__.get("_tpf_external", False)
        self.__dict__["_tpf_external"] = True
        try:
            yield
        finally:
            self.__dict__["_tpf_external"] = previous

    def kind_of(self, name: str | None, scope: str, _depth: int = 0) -> Kind:
        """What `name` holds at `scope`: from its assignments, else from its spelling.
        Memoised per model (with the depth, which bounds the search, and whether other files may
        be read, see `external_kinds`): a chain of expressions that read many names asks about the
        same names again and again."""
        if not name or _depth > 6:
            return Kind.UNKNOWN
        memo: dict[tuple[str, str, int, bool], Kind] = self.__dict__.setdefault("_tpf_kinds", {})
        key = (name, scope, _depth, self.__dict__.get("_tpf_external", False))
        found = memo.get(key)
        if found is None:
            found = memo[key] = self._kind_of(name, scope, _depth)
        return found

    def _kind_of(self, name: str, scope: str, _depth: int) -> Kind:
        assigned = self.assignments(name, scope)
        for event in reversed(assigned):
            if event.value is not None and len(event.targets) == 1:
                kind = self.kind_of_value(event.value, event.function, _depth + 1)
                if kind in GRAPH_KINDS and event.no_grad:
                    return Kind.DETACHED  # computed under no_grad / inference_mode: no graph, wherever it goes
                if kind is not Kind.UNKNOWN:
                    return kind
        if not assigned:
            from torch_preflight.core.arguments import param_kind  # it builds on this module

            passed = param_kind(self, name, scope)  # a parameter: what every caller of the file passes
            if passed is not None:
                return passed
        return self.kind_from_spelling(name)

    @staticmethod
    def kind_from_spelling(name: str) -> Kind:
        last = tail(name)
        if SCHEDULER_NAME.search(last):
            return Kind.SCHEDULER
        if OPTIMIZER_NAME.match(last):
            return Kind.OPTIMIZER
        if SCALER_NAME.match(last):
            return Kind.SCALER
        if MODEL_NAME.match(last):
            return Kind.MODEL
        if last in ("criterion", "loss_fn", "loss_func", "loss_function", "criteria"):
            return Kind.LOSS_FN
        return Kind.UNKNOWN

    def kind_of_value(self, value: Value, scope: str, _depth: int = 0) -> Kind:
        if value.is_literal:
            return Kind.SCALAR
        if value.method:
            if value.method in _DETACHING:
                return Kind.SCALAR if value.method in ("item", "tolist") else Kind.DETACHED
            if value.method in _WRAPPERS and value.receiver:
                built = _CONSTRUCTED.fullmatch(value.receiver)
                callee = next((c for c in value.calls if built and tail(c) == tail(built.group(1))), None)
                if callee is not None:  # `Generator().cuda()`: what the constructor makes
                    return self.kind_of_callee(Value(value.receiver, value.span, callee=callee), scope, _depth + 1)
                return self.kind_of(value.receiver, scope, _depth + 1)
            if value.method == "step":
                return Kind.UNKNOWN
            if value.method in ("configure_optimizers", "optimizers"):
                return Kind.OPTIMIZER  # Lightning's API: `self.optimizers()`, `model.configure_optimizers()`
            method = self.resolve_function(f"{value.receiver}.{value.method}", scope) if value.receiver else None
            if method is not None:
                from torch_preflight.core.program import return_kind

                kind = return_kind(self, method)
                if kind is not Kind.UNKNOWN:
                    return kind
            receiver_kind = self.kind_of(value.receiver, scope, _depth + 1)
            if receiver_kind in GRAPH_KINDS and value.method in ("sum", "mean", "float", "squeeze", "view", "reshape", "clone"):
                return receiver_kind
            return Kind.UNKNOWN
        if value.callee:
            return self.kind_of_callee(value, scope, _depth)
        if value.base and not value.is_binop:
            return self.kind_of(value.base, scope, _depth + 1)
        if value.is_binop:
            for name in value.names:
                kind = self.kind_of(name, scope, _depth + 1)
                if kind in GRAPH_KINDS:
                    return Kind.LOSS
        return Kind.UNKNOWN

    def kind_of_callee(self, value: Value, scope: str, _depth: int) -> Kind:
        callee = value.callee or ""
        last = tail(callee)
        if callee.startswith("torch.optim.lr_scheduler.") or (callee.startswith("transformers.get_") and "schedule" in callee):
            return Kind.SCHEDULER
        if callee.startswith("torch.optim.") or (OPTIMIZER_CLASS.match(last) and self.imports.is_imported(callee)):
            return Kind.OPTIMIZER
        if last == "GradScaler":
            return Kind.SCALER
        if callee in ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"):
            return Kind.LOADER
        if "Sampler" in last and callee.startswith("torch.utils.data"):
            return Kind.SAMPLER
        if callee.startswith("torch.nn.functional."):
            return Kind.LOSS if LOSS_CALL.search(last) else Kind.OUTPUT
        if callee.startswith("torch.nn.") and last[:1].isupper():
            if last.endswith("Loss") or last in ("CrossEntropyLoss", "NLLLoss"):
                return Kind.LOSS_FN
            return Kind.MODEL  # a layer, a container or a wrapper (DataParallel, DistributedDataParallel)
        if callee == "torch.compile" and self._compiles_function(value, scope):
            return Kind.UNKNOWN  # `torch.compile(create_block_mask)`: a compiled function, not a model
        if callee in ("torch.compile",) or last in ("DistributedDataParallel", "DDP", "FSDP", "FullyShardedDataParallel"):
            return Kind.MODEL
        if callee.startswith(("torchvision.models.", "timm.create_model")):
            return Kind.MODEL
        if callee.startswith("numpy."):
            return Kind.DETACHED  # numpy refuses a tensor that requires grad: what it computes carries no graph
        if callee in ("float", "int", "len", "round", "bool"):
            return Kind.SCALAR
        if callee == "torch.autograd.grad" and _CREATE_GRAPH.search(value.text):
            return Kind.OUTPUT  # gradients with their own graph (a gradient penalty back-propagates through them)
        cls = self.classes.get(callee)
        if cls is not None:
            if cls.is_module:
                return Kind.MODEL
            # a class of the file that steps and clears like an optimizer (`ScheduledOptim(Adam(...))`)
            return Kind.OPTIMIZER if {"step", "zero_grad"} <= set(self._all_methods(cls)) else Kind.UNKNOWN
        imported = self.comes_from_import(callee)
        local = self.resolve_function(callee, scope) if not imported else None
        if local is not None:
            from torch_preflight.core.program import return_kind  # the summaries build on this module

            kind = return_kind(self, local)
            if kind is not Kind.UNKNOWN:
                return kind
        elif self.external_kind is not None and imported and self.__dict__.get("_tpf_external", False):
            kind = self.external_kind(callee)
            if kind is not None:
                return kind
        factory = _FACTORY.match(last)
        if factory and local is None:
            what = factory.group("what").lower()
            return Kind.SCHEDULER if "sched" in what else Kind.OPTIMIZER if what.startswith("optim") else Kind.MODEL
        # Calling a bound name: a loss function gives a loss, a model gives an output.
        called = self.kind_of(callee, scope, _depth + 1) if "." not in callee or callee.startswith("self.") else Kind.UNKNOWN
        if called is Kind.LOSS_FN:
            return Kind.LOSS
        if called is Kind.MODEL:
            return Kind.OUTPUT
        return Kind.UNKNOWN

    def _compiles_function(self, value: Value, scope: str) -> bool:
        """`torch.compile(f)` where `f` (not called) is a function of this file or imported `from x import f`."""
        for name in value.names:
            if name in value.calls or self.imports.resolve(name) in value.calls:
                continue
            target = self.imports.aliases.get(name)
            if self.resolve_function(name, scope) or (target and target.endswith("." + name) and name[:1].islower()):
                return True
        return False

    def comes_from_import(self, qualified: str) -> bool:
        """A resolved call name that an import of the file brought in (`utils.make_opt`)."""
        return self.imports.brings_in(qualified)

    def _all_methods(self, cls: ClassInfo) -> list[str]:
        names = list(cls.methods)
        for base in cls.bases:
            if base in self.classes and base != cls.qualname:
                names += self._all_methods(self.classes[base])
        return names

    def is_module_class(self, qualified: str) -> bool:
        cls = self.classes.get(qualified)
        return bool(cls and cls.is_module)

    def covered_by_no_grad(
        self, scope: str, _seen: frozenset[str] = frozenset(), disables: Callable[[Function], bool] | None = None
    ) -> bool:
        """True when every way into `scope` runs with gradients disabled. `disables` also tells
        whether a function's decorators turn gradients off (the project's own decorators)."""
        fn = self.functions.get(scope)
        if fn is None or not scope:
            return False
        if fn.disables_grad or (disables is not None and disables(fn)):
            return True
        if scope in _seen:
            return False
        callers = self.calls_to.get(scope, [])
        if not callers:
            return False
        seen = _seen | {scope}
        return all(c.no_grad or self.covered_by_no_grad(c.function, seen, disables) for c in callers)

    def readers(self, name: str, scope: str) -> list[Function]:
        """The functions that can read the object `name` holds in `scope`. All of them for an
        attribute (`self.losses`), a module-level name or a parameter; for a local of a function,
        that function and the functions nested in it, unless the object leaves it (returned,
        stored elsewhere, bound to an attribute, passed to a call other than a library function
        or one of its own methods), which makes it all of them again."""
        fn = self.functions.get(scope)
        everyone = list(self.functions.values())
        if fn is None or not scope or "." in name or name in fn.params or self._assigns_by_target("").get(name):
            return everyone
        if not self._assigns_by_target(scope).get(name):
            return everyone  # bound in an enclosing function: it is that function's local
        for event in fn.events:
            if self._hands_out(event, name):
                return everyone
        return [f for f in self.functions.values() if f.qualname == scope or f.qualname.startswith(scope + ".")]

    def _hands_out(self, event: Event, name: str) -> bool:
        """`event` passes the object `name` holds out of its function (a number computed
        from it does not: `return torch.stack(losses).mean().item()`)."""
        if event.value is not None and self.kind_of_value(event.value, event.function) in (Kind.SCALAR, Kind.DETACHED):
            return False
        if event.kind is EventKind.RETURN:
            return event.value is not None and name in event.value.names
        if event.kind in (EventKind.ASSIGN, EventKind.AUG_ASSIGN):
            if event.value is None or name not in event.value.names or event.targets == (name,):
                return False
            aliased = event.value.text.strip() == name  # `kept = losses`: the same object under another name
            return aliased or any("." in t or "[" in t for t in event.targets)
        passed = [*event.args, *(v for _, v in event.keywords)]
        if event.kind is EventKind.STORE:
            return event.receiver != name and any(name in v.names for v in (*passed, *((event.value,) if event.value else ())))
        if not any(name in v.names for v in passed):
            return False
        if event.receiver == name or (event.kind is EventKind.CALL and event.name and not event.receiver and self._library_call(event.name)):
            return False  # `losses.pop()`, `torch.stack(losses)`, `len(losses)`
        return True

    def _library_call(self, name: str) -> bool:
        head = name.partition(".")[0]
        imported = any(target.partition(".")[0] == head for target in self.imports.aliases.values())
        return (imported or head in _BUILTINS) and not self.resolve_function(name, "")

    def loops_in(self, scope: str) -> list[Loop]:
        return [loop for loop in self.loops.values() if loop.function == scope]

    def children(self, loop_id: int) -> list[Loop]:
        return [loop for loop in self.loops.values() if loop.parent == loop_id]


# --- the builder ------------------------------------------------------------------------


class _Builder:
    def __init__(self, source: SourceText, imports: ImportMap) -> None:
        self.source = source
        self.imports = imports
        self.functions: dict[str, Function] = {}
        self.classes: dict[str, ClassInfo] = {}
        self.loops: dict[int, Loop] = {}
        self.guards: list[Guard] = []
        self.contexts: list[Context] = []
        self.loop_stack: list[int] = []
        self.fn: Function | None = None
        self.stmt: Span | None = None
        self.string_lines: set[int] = set()
        self._callees: dict[int, tuple[ast.Call, tuple[str | None, str | None, str | None]]] = {}  # `callee` by node (the entry keeps it alive)
        self._spans: dict[int, tuple[ast.AST, Span]] = {}  # `span` by node (the entry keeps it alive)

    # positions
    def span(self, node: ast.AST) -> Span:
        """The node's span, kept per node: a call is asked for its span as an event, as a value and
        as a statement."""
        found = self._spans.get(id(node))
        if found is None or found[0] is not node:
            line = node.lineno - 1  # type: ignore[attr-defined]
            end_line = (getattr(node, "end_lineno", None) or node.lineno) - 1  # type: ignore[attr-defined]
            col = self.source.char_col(line, node.col_offset)  # type: ignore[attr-defined]
            end_col = self.source.char_col(end_line, getattr(node, "end_col_offset", None) or 0)
            found = self._spans[id(node)] = (node, Span.of(line, col, end_line, end_col))
        return found[1]

    def text(self, node: ast.AST) -> str:
        return self.source.slice(self.span(node))

    # values
    def used(self, nodes: list[ast.AST], names: list[str], methods: list[str], calls: list[str]) -> None:
        """The names read and the functions and methods called in `nodes`, appended in order."""
        for sub in nodes:
            kind = type(sub)
            if kind is ast.Name:
                names.append(sub.id)  # type: ignore[attr-defined]
            elif kind is ast.Call:
                function, _, called_method = self.callee(sub)  # type: ignore[arg-type]
                if function:
                    calls.append(function)
                if called_method:
                    methods.append(called_method)

    def walked(self, node: ast.AST) -> tuple[list[str], list[str], list[str]]:
        """`used` of the nodes under `node` in `ast.walk`'s order: the names, methods and calls of its value."""
        names: list[str] = []
        methods: list[str] = []
        calls: list[str] = []
        self.used(breadth_first(node), names, methods, calls)
        return names, methods, calls

    def value(self, node: ast.AST) -> Value:
        names, methods, calls = self.walked(node)  # ast.walk's order: the tuples below keep it
        callee = receiver = method = None
        inner = node
        if isinstance(node, ast.Call):
            callee, receiver, method = self.callee(node)
            inner = node.func.value if method and isinstance(node.func, ast.Attribute) else node
        while isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and self.callee(inner)[2]:
            inner = inner.func.value
        while isinstance(inner, ast.Subscript):
            inner = inner.value
        base = dotted(inner)
        span = self.span(node)
        return Value(
            text=self.source.slice(span),
            span=span,
            callee=callee,
            receiver=receiver,
            method=method,
            base=base,
            names=tuple(dict.fromkeys(names)),
            methods=tuple(dict.fromkeys(methods)),
            calls=tuple(dict.fromkeys(calls)),
            is_literal=isinstance(node, ast.Constant) or (isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)),
            is_binop=isinstance(node, ast.BinOp),
        )

    def callee(self, call: ast.Call) -> tuple[str | None, str | None, str | None]:
        """(resolved function, receiver, method): exactly one of function or method is set.
        Kept per call node: a nested call is asked again by every value that contains it."""
        found = self._callees.get(id(call))
        if found is None or found[0] is not call:
            found = self._callees[id(call)] = (call, self._callee(call))
        return found[1]

    def _callee(self, call: ast.Call) -> tuple[str | None, str | None, str | None]:
        func = call.func
        name = dotted(func)
        if name is None:
            if isinstance(func, ast.Attribute):
                inner = func.value
                return None, dotted(inner) or self.text(inner), func.attr
            return None, None, None
        if isinstance(func, ast.Attribute):
            head = name.partition(".")[0]
            if self.imports.is_imported(head) or self.imports.conventional(head):
                return self.imports.resolve(name), None, None
            return None, name.rsplit(".", 1)[0], func.attr
        return self.imports.resolve(name), None, None

    # traversal
    def build(self, tree: ast.Module) -> None:
        module = Function("", "<module>", Span.of(0, 0, 0, 0), Span.of(0, 0, 0, 0), (), {}, (), None, None, "", 0)
        self.functions[""] = module
        self.fn = module
        self.body(tree.body)
        self._classify_classes()

    def body(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self.statement(stmt)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.function(node)
        elif isinstance(node, ast.ClassDef):
            self.klass(node)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            self.loop(node)
        elif isinstance(node, ast.If):
            self.stmt = self.span(node.test)
            self.expr(node.test)
            guard = Guard(self.text(node.test), self.span(node.test), _has_modulo(node.test))
            self.guards.append(guard)
            self.body(node.body)
            self.guards.pop()
            if node.orelse:
                self.guards.append(Guard(guard.text, guard.span, guard.cadence, negated=True))
                self.body(node.orelse)
                self.guards.pop()
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            pushed = 0
            for item in node.items:
                self.stmt = self.span(item.context_expr)
                ctx = item.context_expr
                self.expr(ctx)
                if isinstance(ctx, ast.Call):
                    callee, receiver, method = self.callee(ctx)
                    name = callee or f"{receiver}.{method}"
                    args = tuple(self.text(a) for a in ctx.args)
                else:
                    name, args = self.imports.resolve(dotted(ctx)) or self.text(ctx), ()
                self.contexts.append(Context(name, self.span(ctx), args))
                pushed += 1
                if item.optional_vars is not None:
                    self.assign_targets([item.optional_vars], ctx, node)
            self.body(node.body)
            del self.contexts[len(self.contexts) - pushed :]
        elif isinstance(node, (ast.Try, ast.TryStar)):
            self.body(node.body)
            for handler in node.handlers:
                self.body(handler.body)
            self.body(node.orelse)
            self.body(node.finalbody)
        elif isinstance(node, ast.Match):
            self.stmt = self.span(node.subject)
            self.expr(node.subject)
            for case in node.cases:
                self.body(case.body)
        else:
            self.simple(node)

    def simple(self, node: ast.stmt) -> None:
        self.stmt = self.span(node)
        if isinstance(node, ast.Assign):
            self.expr(node.value)
            self.assign_targets(node.targets, node.value, node)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.expr(node.value)
                self.assign_targets([node.target], node.value, node)
        elif isinstance(node, ast.AugAssign):
            self.expr(node.value)
            self.expr(node.target)
            target = dotted(node.target) or self.text(node.target)
            self.emit(EventKind.AUG_ASSIGN, node, name=type(node.op).__name__, targets=(target,), value=self.value(node.value))
        elif isinstance(node, ast.Return):
            if node.value is not None:
                self.expr(node.value)
                self.emit(EventKind.RETURN, node, value=self.value(node.value))
        else:
            for child in child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expr(child)

    def assign_targets(self, targets: list[ast.expr], value: ast.AST, stmt: ast.AST) -> None:
        summary = self.value(value)
        for target in targets:
            if isinstance(target, (ast.Tuple, ast.List)):
                names = tuple(dotted(t) or self.text(t) for t in target.elts)
                values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) else None
                if values is not None:
                    for name, item in zip(names, values, strict=False):
                        self.emit(EventKind.ASSIGN, stmt, targets=(name,), value=self.value(item))
                else:
                    self.emit(EventKind.ASSIGN, stmt, targets=names, value=summary)
            elif isinstance(target, ast.Subscript):
                self.expr(target)
                container = dotted(target.value) or self.text(target.value)
                self.emit(EventKind.STORE, stmt, receiver=container, name="__setitem__", value=summary)
            else:
                name = dotted(target) or self.text(target)
                self.emit(EventKind.ASSIGN, stmt, targets=(name,), value=summary)
                if isinstance(target, ast.Attribute) and target.attr == "grad" and isinstance(value, ast.Constant) and value.value is None:
                    self.emit(EventKind.ZERO_GRAD, stmt, receiver=dotted(target.value) or self.text(target.value), name="grad=None")

    def expr(self, node: ast.AST) -> None:
        """Emit events for the calls inside an expression, innermost first."""
        if type(node) in DISPLAYS and self.display(node):
            return
        if isinstance(node, ast.Lambda):
            self.lambda_(node)
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            for gen in node.generators:
                self.expr(gen.iter)
            return
        for child in child_nodes(node):
            if isinstance(child, ast.expr):
                self.expr(child)
            elif isinstance(child, ast.keyword):
                self.expr(child.value)
        if isinstance(node, ast.Call):
            self.call(node)

    def display(self, node: ast.AST) -> bool:
        """Whether a list, tuple, set or dict display's events were emitted another way (`expr`):
        core/incremental.py's builder reads a long one element by element."""
        return False

    def call(self, node: ast.Call) -> None:
        callee, receiver, method = self.callee(node)
        args = tuple(self.value(a) for a in node.args if not isinstance(a, ast.Starred))
        keywords = tuple((k.arg, self.value(k.value)) for k in node.keywords if k.arg)
        kind = EventKind.CALL
        name = callee
        if method is not None:
            kind, name = self._classify_method(method, receiver, args, callee)
        elif callee == "torch.autograd.backward":
            kind = EventKind.BACKWARD
        self.emit(kind, node, receiver=receiver, name=name, args=args, keywords=keywords)

    def _classify_method(self, method: str, receiver: str | None, args: tuple[Value, ...], callee: str | None) -> tuple[EventKind, str | None]:
        dotted_name = f"{receiver}.{method}" if receiver else method
        if method in _BACKWARD_METHODS:
            return EventKind.BACKWARD, dotted_name
        if method == "zero_grad":
            return EventKind.ZERO_GRAD, dotted_name
        if method == "zero_" and receiver and (receiver.endswith(".grad") or receiver.endswith(".grad.data")):
            return EventKind.ZERO_GRAD, dotted_name
        if method == "step":
            return EventKind.STEP, dotted_name  # refined by the training model with bindings
        if method == "train" and not (args and args[0].text in ("False",)):
            return EventKind.TRAIN_MODE, dotted_name
        if method == "eval" or (method == "train" and args and args[0].text == "False"):
            return EventKind.EVAL_MODE, dotted_name
        if method in ("append", "extend", "add", "insert", "put", "__setitem__"):
            return EventKind.STORE, method
        return EventKind.CALL, dotted_name

    def emit(self, kind: EventKind, node: ast.AST, **fields: object) -> None:
        assert self.fn is not None
        event = Event(
            kind=kind,
            span=self.span(node),
            stmt=self.stmt or self.span(node),
            function=self.fn.qualname,
            guards=tuple(self.guards),
            contexts=tuple(self.contexts),
            loops=tuple(self.loop_stack),
            **fields,  # type: ignore[arg-type]
        )
        self.fn.events.append(event)

    def loop(self, node: ast.For | ast.AsyncFor | ast.While) -> None:
        assert self.fn is not None
        if isinstance(node, ast.While):
            self.stmt = self.span(node.test)
            self.expr(node.test)
            targets: tuple[str, ...] = ()
            iter_value = self.value(node.test)
            header_end = node.test
        else:
            self.stmt = self.span(node.iter)
            self.expr(node.iter)
            targets = tuple(t for t in (dotted(n) for n in ast.walk(node.target) if isinstance(n, (ast.Name, ast.Attribute))) if t)
            iter_value = self.value(node.iter)
            header_end = node.iter
        span = self.span(node)
        first = node.body[0]
        first_line = first.lineno - 1
        if isinstance(first, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and first.decorator_list:
            first_line = first.decorator_list[0].lineno - 1
        body = Span(self.span(first).start, self.span(node.body[-1]).end)
        header_end_span = self.span(header_end)
        loop = Loop(
            id=len(self.loops),
            kind="while" if isinstance(node, ast.While) else "for",
            span=span,
            header=Span(span.start, header_end_span.end),
            body=body,
            function=self.fn.qualname,
            targets=targets,
            iter=iter_value,
            parent=self.loop_stack[-1] if self.loop_stack else None,
            guards=tuple(self.guards),
            contexts=tuple(self.contexts),
            body_indent=self.source.indentation(first_line) if self.source.line(first_line)[: len(self.source.indentation(first_line))].strip() == "" and first_line != span.start.line else self.source.indentation(span.start.line) + "    ",
            indent=self.source.indentation(span.start.line),
            has_multiline_strings=_has_multiline_strings(node),
            runs_once=any(isinstance(stmt, (ast.Break, ast.Return, ast.Raise)) for stmt in node.body),
        )
        if isinstance(node, (ast.For, ast.AsyncFor)):
            self.stmt = self.span(node.target)
            self.emit(EventKind.ASSIGN, node.target, targets=targets, value=iter_value)
        self.loops[loop.id] = loop
        self.loop_stack.append(loop.id)
        self.body(node.body)
        self.loop_stack.pop()
        self.body(node.orelse)

    def _enter_function(self, fn: Function) -> tuple[Function | None, list[Guard], list[Context], list[int]]:
        saved = (self.fn, self.guards, self.contexts, self.loop_stack)
        self.functions[fn.qualname] = fn
        self.fn, self.guards, self.contexts, self.loop_stack = fn, [], [], []
        return saved

    def _leave_function(self, saved: tuple[Function | None, list[Guard], list[Context], list[int]]) -> None:
        self.fn, self.guards, self.contexts, self.loop_stack = saved

    def _qualname(self, name: str, owner: str | None) -> str:
        assert self.fn is not None
        prefix = owner or self.fn.qualname
        return f"{prefix}.{name}" if prefix else name

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, owner: str | None = None) -> None:
        assert self.fn is not None
        for decorator in node.decorator_list:
            self.stmt = self.span(decorator)
            self.expr(decorator)
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        params = tuple(a.arg for a in (*positional, *args.kwonlyargs))
        defaults: dict[str, Value] = {}
        for param, default in zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True):
            defaults[param.arg] = self.value(default)
        for param, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=False):
            if kw_default is not None:
                defaults[param.arg] = self.value(kw_default)
        if args.vararg:
            params += (args.vararg.arg,)
        if args.kwarg:
            params += (args.kwarg.arg,)
        decorators = tuple(
            self.imports.resolve(dotted(d.func if isinstance(d, ast.Call) else d)) or self.text(d) for d in node.decorator_list
        )
        span = self.span(node)
        first = node.body[0]
        first_line = first.lineno - 1
        if isinstance(first, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and first.decorator_list:
            first_line = first.decorator_list[0].lineno - 1
        header_line = node.lineno - 1
        body_indent = self.source.indentation(first_line) if first_line > header_line else self.source.indentation(header_line) + "    "
        fn = Function(
            qualname=self._qualname(node.name, owner),
            name=node.name,
            span=span,
            header=Span.of(header_line, self.source.char_col(header_line, node.col_offset), header_line, len(self.source.line(header_line))),
            params=params,
            defaults=defaults,
            decorators=decorators,
            owner=owner,
            parent=None if owner else (self.fn.qualname or None),
            body_indent=body_indent,
            first_body_line=first_line,
        )
        saved = self._enter_function(fn)
        self.body(node.body)
        self._leave_function(saved)

    def lambda_(self, node: ast.Lambda) -> None:
        assert self.fn is not None
        span = self.span(node)
        fn = Function(
            qualname=self._qualname(f"<lambda:{span.start.line}:{span.start.col}>", None),
            name="<lambda>",
            span=span,
            header=span,
            params=tuple(a.arg for a in node.args.args),
            defaults={},
            decorators=(),
            owner=None,
            parent=self.fn.qualname or None,
            body_indent="",
            first_body_line=span.start.line,
            is_lambda=True,
        )
        stmt = self.stmt
        saved = self._enter_function(fn)
        self.stmt = stmt
        self.expr(node.body)
        self._leave_function(saved)

    def klass(self, node: ast.ClassDef) -> None:
        assert self.fn is not None
        for decorator in node.decorator_list:
            self.stmt = self.span(decorator)
            self.expr(decorator)
        qualname = self._qualname(node.name, None)
        bases = tuple(self.imports.resolve(dotted(b)) or self.text(b) for b in node.bases)
        cls = ClassInfo(qualname, node.name, self.span(node), bases)
        self.classes[qualname] = cls
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.function(stmt, owner=qualname)
                cls.methods[stmt.name] = f"{qualname}.{stmt.name}"
            elif isinstance(stmt, ast.ClassDef):
                self.klass(stmt)

    def _classify_classes(self) -> None:
        changed = True
        while changed:
            changed = False
            for cls in self.classes.values():
                is_module = any(b in MODULE_BASES or _torch_nn_class(b) or self._local_module(b) for b in cls.bases)
                owns = any(b in LOOP_OWNING_BASES or (b in self.classes and self.classes[b].owns_loop) for b in cls.bases)
                if (is_module, owns) != (cls.is_module, cls.owns_loop):
                    cls.is_module, cls.owns_loop = is_module or cls.is_module, owns or cls.owns_loop
                    changed = True

    def _local_module(self, base: str) -> bool:
        cls = self.classes.get(base)
        return bool(cls and cls.is_module)


def _torch_nn_class(name: str) -> bool:
    return name.startswith("torch.nn.") and tail(name)[:1].isupper() and not name.startswith("torch.nn.functional")


def _has_multiline_strings(node: ast.AST) -> bool:
    """A string or f-string spanning lines inside `node` (re-indenting the block would change it)."""
    for n in breadth_first(node):
        if isinstance(n, ast.JoinedStr) or (isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes))):
            if n.end_lineno != n.lineno:
                return True
    return False


def _has_modulo(node: ast.AST) -> bool:
    nodes = breadth_first(node)
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in nodes) or any(
        isinstance(n, ast.Name) and ("accum" in n.id.lower() or n.id.lower().startswith("should_step")) for n in nodes
    )


def build(
    tree: ast.Module,
    source: SourceText,
    path: str = "<string>",
    module_name: str = "",
    imports: ImportMap | None = None,
    imported: bool = False,
) -> ModuleModel:
    """The model of `tree`. `imports`: the import map of the whole module when `tree` holds only some of
    its statements (core/project.py builds a slice of another module around one function). `imported`:
    the module is another one of the project, read for the checked file that imports it."""
    imports = imports if imports is not None else ImportMap.from_tree(tree, module_name)
    builder = _Builder(source, imports)
    builder.build(tree)
    return ModuleModel(source, path, imports, builder.functions, builder.classes, builder.loops, tree, imported=imported)
