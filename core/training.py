"""The training-step model: what one iteration of each loop does.

For every loop, `iteration(loop)` lists the events of one pass through its body in
source order, with the events of functions it calls (in the same file) inlined at the
call site. Each event keeps the `if` guards and `with` contexts that surround it, and
says whether it sits in a loop nested inside the viewed one (`inner`). From that the
model finds:

- training loops: the innermost loops whose iteration runs an optimizer `step()`
  directly (not only inside a nested loop) and a `backward()` (anywhere in it);
- evaluation loops: loops that run a model forward with neither;

and answers the questions rules ask of them (which optimizers step, whether gradients
are cleared, which calls are opaque).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from torch_preflight.core.gradflow import parameter_owners, related
from torch_preflight.core.names import tail
from torch_preflight.core.program import return_kind
from torch_preflight.core.semantic import Event, EventKind, Function, Kind, Loop, ModuleModel, Value

if TYPE_CHECKING:
    from torch_preflight.core.program import FunctionSummary
    from torch_preflight.core.project import ProjectView

MAX_INLINE_DEPTH = 4
MAX_FILE_DEPTH = 4  # files followed through imports from one analysis
_LIBRARY_HEADS = frozenset(
    {"torch", "torchvision", "numpy", "np", "math", "random", "os", "sys", "time", "logging", "json", "print", "len", "range",
     "enumerate", "zip", "min", "max", "sum", "float", "int", "str", "list", "dict", "tuple", "set", "isinstance", "getattr",
     "setattr", "hasattr", "open", "iter", "next", "sorted", "reversed", "round", "abs", "any", "all", "map", "filter", "tqdm",
     "wandb", "tensorboard", "writer", "logger", "log", "pbar", "progress", "shutil", "pathlib", "pickle", "copy", "super()"}
)
# Names only spelled like a model that read as functions: a verb before `_model` / `_net`
# (`convert_model`, `_set_model`), or a noun after `model_` (`model_parameters`, `model_fn`).
_FUNCTION_SPELLING = re.compile(
    r"^_*(get|set|load|save|convert|build|create|make|init|initiali[sz]e|add|extract|prepare|wrap|unwrap|apply|update|copy|"
    r"clone|register|check|compile|fuse|quantize|prune|replace|swap|freeze|export|import|to|from|patch|restore|reset|setup|"
    r"sync|broadcast|move|shard|dispatch|maybe|is|has|should)_\w*(model|net|module)$"
    r"|^(model|net|module)_(parameters|params|param|state|fn|func|function|path|dir|name|names|config|cfg|cls|class|type|"
    r"factory|builder|init|args|kwargs|kind|size|id|key|keys|info|dict|file|files|hook|hooks|outputs?)$"
)
_TORCH_ECOSYSTEM = frozenset(
    {"torch", "torchvision", "torchaudio", "torchtext", "torch_geometric", "pytorch_lightning", "lightning", "lightning_fabric",
     "accelerate", "transformers", "timm", "ignite", "skorch", "deepspeed", "fairscale", "apex", "horovod",
     "torchmetrics", "peft", "diffusers", "torchrl", "functorch", "dgl", "mmcv", "mmengine", "detectron2", "fastai", "composer"}
)
_OTHER_FRAMEWORKS = frozenset(
    {"tensorflow", "keras", "tf_keras", "mxnet", "jax", "flax", "optax", "haiku", "paddle", "mindspore", "chainer", "theano",
     "tinygrad", "mlx", "oneflow", "megengine", "jittor"}
)
_TRAINING_WORDS = re.compile(r"backward|step|train|update|optimi[sz]|fit|learn|zero_grad", re.I)
# A call without arguments named as a reader (`manager.current_step()`, `trainer.get_global_step()`,
# `state.is_training()`) returns a counter or a flag: the training word in it is a noun.
_READER = re.compile(r"(get|current|cur|last|num|total|is|has)_", re.I)
# Receivers of `.update(...)` that keep records, not weights: average meters, progress bars,
# metric dicts (`losses.update(loss.item(), n)`, `pbar.update(1)`, `top1.update(acc1[0])`).
_BOOKKEEPING = re.compile(
    r"(^|_)(meter|meters|pbar|bar|progress|progress_bar|tqdm|losses|loss_meter|top\d|acc\d*|accs|accuracy|metric|metrics|"
    r"stats|avg|average|timer|batch_time|data_time|counter|tracker|history|log|logs|summary|record|records|results)(_|$)",
    re.I,
)


_FOREIGN_KINDS = frozenset({EventKind.ZERO_GRAD, EventKind.STEP, EventKind.BACKWARD, EventKind.TRAIN_MODE, EventKind.EVAL_MODE})
_COMMON_LIBRARIES = frozenset(
    {"numpy", "scipy", "sklearn", "pandas", "matplotlib", "seaborn", "tqdm", "wandb", "mlflow", "tensorboardX", "PIL", "cv2",
     "datasets", "tokenizers", "evaluate", "hydra", "omegaconf", "yaml", "requests", "ray", "einops", "safetensors", "jedi"}
)
# Values whose methods never step or clear model gradients, known from where they were made.
_NOT_TRAINING_RECEIVERS = frozenset(
    {Kind.SCALER, Kind.SCHEDULER, Kind.LOADER, Kind.SAMPLER, Kind.LOSS_FN, Kind.LOSS, Kind.OUTPUT, Kind.SCALAR, Kind.DETACHED}
)
_DOTTED = re.compile(r"[A-Za-z_][\w.]*")
_SUBSCRIPT = re.compile(r"\[[^\[\]]*\]")
_OPTIMIZER_SUFFIX = re.compile(r"^(?:optimi[sz]er|optim|opt)_?([A-Za-z]\w{0,11})$")
_PARAMETERS_OF = re.compile(r"([A-Za-z_][\w.]*)\.(?:named_)?parameters\(")
_KIND_BIT = {kind: 1 << i for i, kind in enumerate(EventKind)}
_EVERY_KIND = (1 << len(_KIND_BIT)) - 1


def library_name(qualified: str) -> bool:
    """`qualified` names something of the standard library, of torch's ecosystem or of a common
    library (`timm.data.create_loader`, `os.path.join`): never a function of the user's project."""
    head = qualified.partition(".")[0]
    return head in _LIBRARY_HEADS or head in _TORCH_ECOSYSTEM or head in _OTHER_FRAMEWORKS or head in _COMMON_LIBRARIES or (
        head in sys.stdlib_module_names
    )


def _rename(name: str | None, binding: dict[str, str]) -> str | None:
    """`model.module` in the callee -> `net.module` at the call when `model` is bound to `net`."""
    if not name:
        return name
    head, dot, rest = name.partition(".")
    return binding[head] + dot + rest if head in binding else name


def _resolves_by(assign: Event) -> tuple[object, ...]:
    """What `ModuleModel.assignments` gives name resolution of an assignment: its targets and the callee of its
    value (`trainer = Trainer()`), and the text of a `functools.partial` (whose first argument is the callee)."""
    value = assign.value
    if value is None:
        return assign.targets
    return assign.targets, value.callee, value.text if value.callee == "functools.partial" else None


def _reads_state(event: Event) -> bool:
    """A call without arguments named as a reader (`_READER`): it reads a count, it does not train."""
    return not (event.args or event.keywords) and bool(_READER.match(tail(event.name or "")))


def _is_bookkeeping(event: Event) -> bool:
    """`meter.update(...)` on a record keeper: it cannot clear gradients or step."""
    if not event.receiver or tail(event.name or "") != "update":
        return False
    return bool(_BOOKKEEPING.search(tail(_SUBSCRIPT.sub("", event.receiver))))  # `metric_logger.meters['acc1']`


@dataclass(frozen=True)
class TrainingLoop:
    loop: Loop
    events: tuple[Event, ...]
    steps: tuple[Event, ...]  # optimizer steps run directly by this loop's iteration
    backwards: tuple[Event, ...]

    @cached_property
    def clears(self) -> tuple[Event, ...]:
        return tuple(e for e in self.events if e.kind is EventKind.ZERO_GRAD)


class TrainingModel:
    """Per-module queries over loops and their iterations; results are memoised."""

    def __init__(self, model: ModuleModel, project: ProjectView | None = None, _stack: tuple[str, ...] = ()) -> None:
        self.model = model
        self.project = project  # follows calls into the user's other modules when given
        self._stack = (*_stack, model.path)  # files whose training models are being built: a cycle stops there
        if project is not None:
            model.set_external_kind(self._imported_kind)
        self._foreign: dict[str, tuple[tuple[str, ...], tuple[Event, ...]] | None] = {}
        self._foreign_loops: dict[tuple[str, int], int] = {}
        self._expanded: dict[str, tuple[Event, ...]] = {}
        self._calls_model: dict[tuple[str, str], bool] = {}
        self._forwards: dict[int, tuple[Event, bool]] = {}
        self._inlined: dict[tuple[str, tuple[str, ...]], tuple[Event, ...]] = {}
        self._iterations: dict[int, tuple[Event, ...]] = {}
        self._grad_enabled: dict[int, bool] = {}  # by loop id: TPF006 and TPF007 ask for every loop
        self._classified: dict[int, TrainingLoop | None] = {}  # by loop id: its TrainingLoop, None when it is not one
        self._loop_memos: dict[str, dict[int, Any]] = {}
        self._function_memos: dict[str, dict[str, Any]] = {}
        # a callee's events as they run at one call, by the identities of the call event and the callee's
        # expansion (held in the value, so an id cannot be reused while its entry lives): a caller that must
        # be expanded again, while its calls and callees are the very objects of the last version, copies none
        self._through: dict[tuple[int, int, str], tuple[Event, tuple[Event, ...], tuple[Event, ...]]] = {}
        self._through_before: dict[tuple[int, int, str], tuple[Event, tuple[Event, ...], tuple[Event, ...]]] = {}
        # the module's events with what each adds to its expansion (itself and its callees' events), by id: kept
        # for the events of statements an edit cannot have changed (`reuse`), while their callees expand alike
        self._segments: dict[int, tuple[Event, tuple[tuple[Event, ...], ...], tuple[Event, ...]]] = {}
        self._kinds: dict[str, int] | None = None  # `may_hold`'s bits per function
        self._weighed: set[str] = set()  # functions whose own kinds read their calls' arguments (`_may_follow`)
        self._kinds_before: tuple[dict[str, Any], dict[str, int]] | None = None  # see `carry_kinds`
        self._resolution: tuple[object, ...] | None = None  # `resolution_key`
        self._assigns: dict[int, tuple[Function, tuple[object, ...]]] = {}  # by Function id: its assignments, as there
        self._stars: dict[str, str | None] = {}  # `_star_import` by name
        self._on_disk: dict[tuple[str, bool], bool] = {}  # `_may_follow` by name: an import of a module of the project

    def _imported_kind(self, callee: str) -> Kind | None:
        """What a function imported from the user's other modules returns (`get_optimizer(cfg)`
        defined in `utils.py`), from its summary; None when unknown."""
        if self.project is None or "." not in callee or callee.partition(".")[0] in _TORCH_ECOSYSTEM | _OTHER_FRAMEWORKS:
            return None
        if callee.partition(".")[0] in sys.stdlib_module_names or callee.partition(".")[0] in _COMMON_LIBRARIES:
            return None
        resolved = self.project.resolve_function(self.model.path, callee)
        if resolved is None:
            # `GaussianDiffusionSampler(model, ...)` from the user's `diffusion.py`: an nn.Module class there builds a model
            cls = self.project.resolve_class(self.model.path, callee) if tail(callee)[:1].isupper() else None
            return Kind.MODEL if cls is not None and cls[1].is_module else None
        kind = return_kind(*resolved)  # what the summary's `returns` holds, without composing its callees
        return kind if kind is not Kind.UNKNOWN else None

    def summary(self, event: Event) -> FunctionSummary | None:
        """The whole-program summary of what a call runs (this file or the user's other modules)."""
        if self.project is None or event.kind is not EventKind.CALL or not event.name:
            return None
        resolved = self.project.resolve_call(self.model, event.name, event.function)
        return self.project.summary(*resolved) if resolved is not None else None

    def loop_memo(self, name: str) -> dict[int, Any]:
        """A rule's memo of per-loop facts (by loop id) that depend only on the loop's function and
        on what that function reaches by name, never on the other statements of the module:
        `reuse` carries them over for the loops of unchanged functions."""
        return self._loop_memos.setdefault(name, {})

    def function_memo(self, name: str) -> dict[str, Any]:
        """Likewise per function (by qualname)."""
        return self._function_memos.setdefault(name, {})

    def reuse(self, previous: TrainingModel, functions: frozenset[str], loops: frozenset[int], events: frozenset[int] = frozenset()) -> None:
        """Take over what `previous` (a model of an earlier version of the same document)
        memoised for the functions and loops an edit cannot have changed: their Function and
        Loop objects are the very same, and so is everything they reach by name (callers,
        callees, module-level bindings, base classes). The language server's caller works that
        out (torch_preflight/scoped.py); a function named here is never the module itself. `events`:
        the ids of the module-level events of the statements the edit cannot have changed."""
        self._through_before = previous._through
        self._segments.update((k, v) for k, v in previous._segments.items() if k in events)
        # what the other modules' functions do, as the reused expansions inlined it (`is_opaque` asks too): the
        # caller keeps no previous model once a file it read changed (torch_preflight/scoped.py)
        self._foreign.update(previous._foreign)
        self._stars.update(previous._stars)
        self._on_disk.update(previous._on_disk)
        self._foreign_loops.update(previous._foreign_loops)
        self._expanded.update((q, v) for q, v in previous._expanded.items() if q in functions)
        self._weighed |= previous._weighed & functions  # with their own kinds (`carry_kinds`)
        # a callee's expansion under a call chain rests on the callee (and what it reaches), and on the chain's names only
        self._inlined.update((k, v) for k, v in previous._inlined.items() if k[0] in functions)
        self._calls_model.update((k, v) for k, v in previous._calls_model.items() if k[1] in functions)
        self._forwards.update((k, v) for k, v in previous._forwards.items() if v[0].function in functions)
        self._iterations.update((k, v) for k, v in previous._iterations.items() if k in loops)
        self._classified.update((k, v) for k, v in previous._classified.items() if k in loops)
        # not for a loop at module level: a `torch.set_grad_enabled(False)` in any statement before it counts
        self._grad_enabled.update((k, v) for k, v in previous._grad_enabled.items() if k in loops and self.model.loops[k].function)
        for name, memo in previous._loop_memos.items():
            self.loop_memo(name).update((k, v) for k, v in memo.items() if k in loops and self.model.loops[k].function in functions)
        for name, by_function in previous._function_memos.items():
            self.function_memo(name).update((k, v) for k, v in by_function.items() if k in functions)

    # --- expansion ----------------------------------------------------------------------

    def carry_kinds(self, previous: TrainingModel) -> None:
        """Take over what `previous` (a model of an earlier version of the same document) found of the own
        kinds (`_own_kinds`) of each function this model holds the very Function object of, when nothing a
        call's name resolves by can have changed (`resolution_key`): the function's events and that
        resolution are all they rest on, unless a call was weighed by the kinds of its arguments (`_weighed`:
        they may rest on other functions), and those are found again. When every function's own kinds come
        out as before, `may_hold` answers with the previous bits."""
        if previous._kinds is None:
            return
        key = previous.resolution_key()
        self._assigns = previous._assigns  # the assignments of the very same functions are read once
        if self.resolution_key() != key:
            return
        old, memo, before = previous.function_memo("own-kinds"), self.function_memo("own-kinds"), previous.model.functions
        for qualname, fn in self.model.functions.items():
            if qualname not in memo and qualname in old and qualname not in previous._weighed and before.get(qualname) is fn:
                memo[qualname] = old[qualname]
        self._kinds_before = (old, previous._kinds)

    def resolution_key(self) -> tuple[object, ...]:
        """What `call_targets` resolves a name by, besides the event itself: the functions (qualname, where
        defined, owner) with their assignments (`assignments` reads the chain of enclosing functions and
        every method of a class), the classes (bases, methods) and the import map."""
        if self._resolution is None:
            known, assigns = self._assigns, {}
            functions = []
            for qualname, fn in self.model.functions.items():
                entry = known.get(id(fn))
                if entry is None or entry[0] is not fn:
                    entry = (fn, tuple(_resolves_by(e) for e in fn.events if e.kind is EventKind.ASSIGN))
                assigns[id(fn)] = entry
                functions.append((qualname, fn.parent, fn.owner, entry[1]))
            classes = tuple((c.qualname, c.bases, tuple(c.methods.items())) for c in self.model.classes.values())
            self._assigns = assigns
            self._resolution = (tuple(sorted(self.model.imports.aliases.items())), tuple(functions), classes)
        return self._resolution

    def may_hold(self, qualname: str, kind: EventKind) -> bool:
        """Whether `expanded(qualname)` can hold an event of `kind`, answered without expanding
        anything: from the kinds of each function's own events and of the same-file functions it
        calls, transitively (a call that may reach another module of the project stands for every
        kind). Never False when the expansion holds one; the whole module's answers cost a pass
        over its call graph, each function's own part memoised like its expansion."""
        if self._kinds is None:
            self._kinds = self._reachable_kinds()
        return bool(self._kinds.get(qualname, 0) & _KIND_BIT[kind])

    def may_train(self, qualname: str) -> bool:
        """`expanded(qualname)` may both back-propagate and step an optimizer (`may_hold`)."""
        return self.may_hold(qualname, EventKind.BACKWARD) and self.may_hold(qualname, EventKind.STEP)

    def _reachable_kinds(self) -> dict[str, int]:
        memo = self.function_memo("own-kinds")
        for qualname, fn in self.model.functions.items():
            if qualname not in memo:
                memo[qualname] = self._own_kinds(fn)
        before = self._kinds_before
        if before is not None and before[0].keys() == memo.keys() and all(before[0][q] == m for q, m in memo.items()):
            return dict(before[1])  # the same own kinds: the same bits
        bits: dict[str, int] = {}
        callers: dict[str, list[str]] = {}
        for qualname in self.model.functions:
            own, targets = memo[qualname]
            bits[qualname] = own
            for target in targets:
                callers.setdefault(target, []).append(qualname)
        work = list(bits)
        while work:  # each function's bits only grow, and are finitely many
            callee = work.pop()
            reached = bits[callee]
            for caller in callers.get(callee, ()):
                if bits[caller] | reached != bits[caller]:
                    bits[caller] |= reached
                    work.append(caller)
        return bits

    def _own_kinds(self, fn: Function) -> tuple[int, tuple[str, ...]]:
        """The kinds of `fn`'s own events as bits (every kind when a call may be inlined from another
        module: `_inline_foreign`), and the same-file functions its calls reach."""
        own = 0
        targets: list[str] = []
        for event in fn.events:
            own |= _KIND_BIT[event.kind]
            if event.kind not in (EventKind.CALL, EventKind.STEP):
                continue
            found = self.model.call_targets(event)
            targets.extend(t for t in found if t in self.model.functions)
            if own != _EVERY_KIND and not found and self.project is not None and event.kind is EventKind.CALL and self._may_follow(event):
                own = _EVERY_KIND
        return own, tuple(dict.fromkeys(targets))

    def _may_follow(self, call: Event) -> bool:
        """`_inline_foreign` may find events of another module at `call`."""
        qualified = self._star_import(call) or call.name or ""
        key = (qualified, qualified == call.name)
        if key not in self._on_disk:  # by name: a module of the project that may define it
            assert self.project is not None
            self._on_disk[key] = self._imported_function(call, qualified) and self.project.may_define(self.model.path, qualified)
        if not self._on_disk[key]:
            return False
        self._weighed.add(call.function)
        return self._handed_training(call)

    def expanded(self, qualname: str, _stack: tuple[str, ...] = ()) -> tuple[Event, ...]:
        """A function's events with same-file callees inlined after each call."""
        memo = self._expanded.get(qualname) if not _stack else self._inlined.get((qualname, _stack))
        if memo is not None:
            return memo
        fn = self.model.functions.get(qualname)
        if fn is None:
            return ()
        out: list[Event] = []
        for event in fn.events:
            if not qualname and not _stack:  # the module: a segment per event
                out.extend(self._segment(event))
                continue
            self._expand_event(event, qualname, _stack, out)
        result = tuple(out)
        if not _stack:
            self._expanded[qualname] = result
        else:  # the same callee under the same call chain expands the same way: reuse it
            self._inlined[(qualname, _stack)] = result
        return result

    def _expand_event(self, event: Event, qualname: str, stack: tuple[str, ...], out: list[Event]) -> None:
        """Append `event` of `qualname` and the events its callees run after it."""
        if event.kind is EventKind.BACKWARD and self._plain_object(event.receiver, event.function):
            event = replace(event, kind=EventKind.CALL)  # `mlp.backward(x, y)` of a from-scratch class: no autograd
        out.append(event)
        if event.kind not in (EventKind.CALL, EventKind.STEP) or len(stack) >= MAX_INLINE_DEPTH:
            return
        targets = self.model.call_targets(event)
        if not targets and self.project is not None and event.kind is EventKind.CALL:
            out.extend(self._inline_foreign(event))
        for target in targets:
            if target == qualname or target in stack:
                continue
            out.extend(self._seen_through(event, target, self.expanded(target, (*stack, qualname))))

    def _segment(self, event: Event) -> tuple[Event, ...]:
        """What a module-level event adds to the module's expansion, kept while the event is the very
        object of the last version (its statement unchanged: `reuse`) and its callees expand into the
        very same events."""
        known = self._segments.get(id(event))
        callees: tuple[tuple[Event, ...], ...] = ()
        if event.kind in (EventKind.CALL, EventKind.STEP):
            callees = tuple(self.expanded(t, ("",)) for t in self.model.call_targets(event) if t)
        if known is not None and known[0] is event and len(known[1]) == len(callees) and all(a is b for a, b in zip(known[1], callees, strict=True)):
            return known[2]
        out: list[Event] = []
        self._expand_event(event, "", (), out)
        self._segments[id(event)] = (event, callees, tuple(out))  # the entry keeps the event alive: its id is not reused
        return self._segments[id(event)][2]

    def _seen_through(self, call: Event, target: str, events: tuple[Event, ...]) -> tuple[Event, ...]:
        """`events` of `target` as they run at `call` (`Event.seen_through`), reused by identity."""
        key = (id(call), id(events), target)
        known = self._through.get(key) or self._through_before.get(key)
        if known is None or known[0] is not call or known[1] is not events:
            known = (call, events, tuple(inner.seen_through(call, target) for inner in events))
        self._through[key] = known
        return known[2]

    def _plain_object(self, name: str | None, scope: str, _depth: int = 0) -> bool:
        """`name` holds an instance of a class of the file that is no nn.Module and defines `backward`
        itself (a from-scratch network): known from every place it was made, through the callers
        that pass it when it is a parameter. Its `backward(...)` is a plain method, not autograd."""
        if not name or not _DOTTED.fullmatch(name) or _depth > 2:
            return False
        memo = self.function_memo("plain-object")
        key = f"{scope}\0{name}"
        if key not in memo:
            memo[key] = False  # a cycle through callers reads as unknown
            memo[key] = self._made_by_plain_class(name, scope, _depth)
        return bool(memo[key])

    def _made_by_plain_class(self, name: str, scope: str, depth: int) -> bool:
        assigned = self.model.assignments(name, scope)
        if assigned:
            return all(self._plain_class(e.value.callee if e.value is not None else None) for e in assigned)
        fn = self.model.functions.get(scope)
        if fn is None or name not in fn.params:
            return False
        position = fn.params.index(name) - (1 if fn.owner else 0)
        callers = self.model.calls_to.get(scope, [])
        for call in callers:
            arg = call.keyword(name) or (call.args[position] if 0 <= position < len(call.args) else None)
            if arg is None or not arg.base or arg.text != arg.base or not self._plain_object(arg.base, call.function, depth + 1):
                return False
        return bool(callers)

    def _plain_class(self, callee: str | None) -> bool:
        cls = self.model.classes.get(callee or "")
        return cls is not None and not cls.is_module and all(b in ("object", "builtins.object") for b in cls.bases) and "backward" in cls.methods

    # --- functions imported from the user's other modules --------------------------------

    def _inline_foreign(self, call: Event) -> list[Event]:
        """The events of a function imported from another module of the user's project
        (`from utils import train_one_epoch`), as seen at `call`: only the kinds whose place
        in an iteration matters (zero_grad, step, backward, train/eval mode, `set_epoch`).
        They carry the call's span and statement (a finding lands in this file), the call's
        function, receivers renamed from the callee's parameters to the call's arguments,
        only the callee's no_grad contexts, and synthetic negative loop ids. The other file
        is parsed only for a call inside a loop or one that receives a model or optimizer."""
        qualified = self._star_import(call) or call.name or ""
        if not self._worth_following(call, qualified):
            return []
        if qualified not in self._foreign:
            self._foreign[qualified] = self._load_foreign(qualified)
        found = self._foreign[qualified]
        if call.name and call.name != qualified:
            self._foreign[call.name] = found  # a star-imported name: `is_opaque` asks by the call's name
        if not found:
            return []
        params, events = found
        binding = self._binding(call, params)
        out: list[Event] = []
        for inner in events:
            receiver = _rename(inner.receiver, binding)
            args, name = inner.args, inner.name
            if inner.kind is EventKind.CALL and tail(name or "") != "set_epoch":
                if name not in binding:
                    continue  # a call of an argument (`model(x)`) whose argument is no plain name here
                name, args = binding[name], ()
            elif inner.kind is EventKind.STEP:
                args = tuple(replace(a, base=_rename(a.base, binding)) if a.base else a for a in args)
            elif inner.kind is EventKind.BACKWARD:
                receiver, args = None, ()  # the loss lives in the other file
            out.append(
                replace(
                    inner,
                    span=call.span,
                    stmt=call.stmt,
                    function=call.function,
                    receiver=receiver,
                    name=name,
                    args=args,
                    keywords=(),
                    value=None,
                    targets=(),
                    guards=call.guards + tuple(replace(g, span=call.span) for g in inner.guards),
                    contexts=call.contexts + tuple(replace(c, span=call.span) for c in inner.contexts if c.disables_grad),
                    loops=call.loops + tuple(self._foreign_loop(qualified, i) for i in inner.loops),
                    via=(qualified, *inner.via),
                    inner=False,
                )
            )
        return out

    def _star_import(self, call: Event) -> str | None:
        """`train_one_epoch` brought in by `from engine import *`: `engine.train_one_epoch` when that
        module of the project defines it."""
        name = call.name or ""
        if not self.model.imports.stars or "." in name or self.model.imports.is_imported(name) or self.project is None:
            return None
        if self.model.assignments(name, call.function):
            return None
        if name not in self._stars:  # each call of the name asks the same modules (a lookup on disk each)
            project = self.project
            self._stars[name] = next((f"{m}.{name}" for m in self.model.imports.stars if project.resolve_function(self.model.path, f"{m}.{name}")), None)
        return self._stars[name]

    def _worth_following(self, call: Event, qualified: str) -> bool:
        return self._imported_function(call, qualified) and self._handed_training(call)

    def _imported_function(self, call: Event, qualified: str) -> bool:
        """`qualified` (what `call` names) is reached through an import of something not a library's."""
        head = qualified.partition(".")[0]
        if "." not in qualified or not head or library_name(qualified) or qualified.startswith("self."):
            return False
        return self.model.imports.brings_in(qualified) or qualified != call.name  # else a local binding

    def _handed_training(self, call: Event) -> bool:
        """The call runs in a loop of the analysed file, or is handed a model or an optimizer."""
        if call.loops and len(self._stack) == 1:
            return True  # beyond the analysed file, only calls handed a model or an optimizer are followed
        return any(
            arg.base and self.model.kind_of(arg.base, call.function) in (Kind.MODEL, Kind.OPTIMIZER)
            for arg in (*call.args, *(v for _, v in call.keywords))
        )

    def _load_foreign(self, qualified: str) -> tuple[tuple[str, ...], tuple[Event, ...]] | None:
        assert self.project is not None
        resolved = self.project.resolve_function(self.model.path, qualified)
        if resolved is None:
            return None
        model, name = resolved
        program = self.project.project.program
        memo = program.memo("foreign-events")
        key = (model.path, hash(model.source.text), name)
        known = memo.get(key)
        if known is None:  # else what an earlier run stored (the CLI's cache)
            known = memo[key] = program.stored_foreign(model, name)
        budget = self.project.budget
        if known is not None and all(self.project.project.unchanged(d) for d in known[1].values()):
            self.project.used.update(known[1])
            return known[0] if budget.replay(known[2]) else None
        if model.path in self._stack or len(self._stack) > MAX_FILE_DEPTH:
            return None  # an import cycle, or too deep: unknown
        sub = self.project.sub()  # records exactly the files this callee rests on, within this analysis's budget
        mark = budget.mark()
        found = self._read_foreign(model, name, sub)
        deps = {**sub.used, model.path: self.project.used[model.path]} if model.path in self.project.used else dict(sub.used)
        self.project.used.update(deps)
        if budget.cut_since(mark):
            return None  # a module it reaches did not fit the budget: unknown, and not memoised
        memo[key] = (found, deps, budget.since(mark))
        program.store_foreign(model, name, *memo[key])
        return found

    def _read_foreign(self, model: ModuleModel, name: str, view: ProjectView) -> tuple[tuple[str, ...], tuple[Event, ...]] | None:
        fn = model.functions[name]
        # the callee's own imports are followed too, to any depth (cycle-safe, memoised per file version)
        other = TrainingModel(model, view, self._stack)
        expanded = other.expanded(name)
        if other.opaque_training_call(expanded) is not None:
            return None  # it calls training code of its own that stays out of sight: still opaque
        kept = tuple(
            e
            for e in expanded
            if e.kind in _FOREIGN_KINDS
            or (e.kind is EventKind.CALL and (tail(e.name or "") == "set_epoch" or (e.name in fn.params and not e.receiver)))
        )
        return fn.params, kept

    def _foreign_loop(self, qualified: str, loop_id: int) -> int:
        key = (qualified, loop_id)
        if key not in self._foreign_loops:
            self._foreign_loops[key] = -1 - len(self._foreign_loops)
        return self._foreign_loops[key]

    @staticmethod
    def _binding(call: Event, params: tuple[str, ...]) -> dict[str, str]:
        binding: dict[str, str] = {}
        for index, param in enumerate(params):
            value = call.keyword(param) or (call.args[index] if index < len(call.args) else None)
            if value is not None and value.base and not value.callee and not value.method and _DOTTED.fullmatch(value.text):
                binding[param] = value.base
        return binding

    def iteration(self, loop: Loop) -> tuple[Event, ...]:
        """The events of one pass through `loop`'s body, callees inlined."""
        cached = self._iterations.get(loop.id)
        if cached is not None:
            return cached
        # every loop of the function in one pass over its expansion (a callee's loops there are its own business)
        found: dict[int, list[Event]] = {loop.id: []}
        found.update((i, []) for i, other in self.model.loops.items() if other.function == loop.function and i not in self._iterations)
        for event in self.expanded(loop.function):
            last = len(event.loops) - 1
            for depth, i in enumerate(event.loops):
                if i in found and event.loops.index(i) == depth:
                    inner = depth < last
                    found[i].append(event if inner == event.inner else event.with_inner(inner))  # equal value, no copy
        for i, events in found.items():
            self._iterations[i] = tuple(events)
        return self._iterations[loop.id]

    # --- classification -----------------------------------------------------------------

    def optimizer_of(self, event: Event) -> str | None:
        """The optimizer an event steps, or None when it is not an optimizer step."""
        if event.kind is not EventKind.STEP or not event.receiver:
            return None
        with self.model.external_kinds():  # `opt = make_opt(model)` with make_opt in utils.py
            receiver_kind = self.model.kind_of(event.receiver, event.function)
        if receiver_kind is Kind.SCALER:
            return event.args[0].base if event.args and event.args[0].base else None
        if receiver_kind is Kind.OPTIMIZER:
            return event.receiver
        return None

    def is_scheduler_step(self, event: Event) -> bool:
        return (
            event.kind is EventKind.STEP
            and event.receiver is not None
            and self.model.kind_of(event.receiver, event.function) is Kind.SCHEDULER
        )

    def forward_target(self, event: Event) -> str | None:
        """The model a forward runs: `model` for `model(x)` and for `model.forward(x)`, `self.model`
        for `self.model(x)`."""
        if not self.is_forward(event):
            return None
        return event.receiver if event.receiver and tail(event.name) == "forward" else event.name

    def is_forward(self, event: Event) -> bool:
        """A call of a model (an nn.Module instance), e.g. `model(x)`, or of its `forward` (`model.forward(x)`)."""
        if event.kind is not EventKind.CALL or not event.name or not self.is_torch_code:
            return False  # another framework's code is never a torch forward
        if event.receiver:
            return self._calls_forward(event)
        seen = self._forwards.get(id(event))
        if seen is not None and seen[0] is event:
            return seen[1]
        key = (event.name, event.function)
        calls_model = self._calls_model.get(key)
        if calls_model is None:
            calls_model = self._calls_model[key] = self._names_a_model(event.name, event.function)
        # a model forward takes inputs (`comp()` is not one)
        known = calls_model and not self.model.source.slice(event.span).replace(" ", "").endswith("()")
        self._forwards[id(event)] = (event, known)  # the entry keeps the event alive, so its id is not reused
        return known

    def _calls_forward(self, event: Event) -> bool:
        """`model.forward(x)` on a model that is not `self` (a module's own forward calls are
        internals), or a model held in an attribute (`self.model(x)` in a trainer's method)."""
        receiver = event.receiver or ""
        if not (event.args or event.keywords) or receiver.partition(".")[0] == "super()":
            return False
        if tail(event.name or "") != "forward":
            return receiver == "self" and self._attribute_model(event)
        if receiver.partition(".")[0] == "self" or self._plain_object(receiver, event.function):
            return False  # `mlp.forward(x)` of a from-scratch class of the file is a plain method
        key = (receiver, event.function)
        calls_model = self._calls_model.get(key)
        if calls_model is None:
            calls_model = self._calls_model[key] = self._names_a_model(receiver, event.function)
        return calls_model

    def _attribute_model(self, event: Event) -> bool:
        """`self.model(x)` where `self.model` holds a model, outside an nn.Module (whose own
        submodule calls are its forward's internals), and is no method of the class."""
        name = event.name or ""
        cls = self.model.enclosing_class(event.function)
        if cls is None or cls.is_module or "forward" in cls.methods or self.model.resolve_function(name, event.function):
            return False  # a class with a `forward` is a model whose base the file cannot see
        key = (name, event.function)
        calls_model = self._calls_model.get(key)
        if calls_model is None:
            assigned = self.model.assignments(name, event.function)
            # built by a call whose kind is unknown (`Decoder(*handlers)`): a fact that outranks the name
            built_unknown = any(
                e.value is not None and e.value.callee and self.model.kind_of_value(e.value, e.function) is Kind.UNKNOWN
                for e in assigned
            )
            calls_model = self._calls_model[key] = not built_unknown and self.model.kind_of(name, event.function) is Kind.MODEL
        return calls_model

    def _names_a_model(self, name: str, function: str) -> bool:
        """Whether calling `name` in `function` runs a model (rules ask for the same names many times)."""
        if self.model.is_module_class(name):
            return False  # constructing, not running
        if self.model.resolve_function(name, function) or self._is_imported_callable(name):
            return False  # a function of this file or an imported function (`save_fsdp_model(...)`)
        with self.model.external_kinds():  # `net = build_net(cfg)` with build_net in models.py
            if self.model.kind_of(name, function) is not Kind.MODEL and not self._model_from_callers(name, function):
                return False
        if not self.model.assignments(name, function) and _FUNCTION_SPELLING.match(tail(name)):
            return False  # only the spelling says "model", and it reads as a function (`convert_model`)
        return True

    def _model_from_callers(self, name: str, function: str, depth: int = 0) -> bool:
        """`name` is a parameter of `function` (never rebound there) for which every call of the file
        passes a model (`validate(val_loader, model, linear_classifier)` with `linear_classifier =
        LinearClassifier(...)`): what it holds comes from where it was made, whatever it is called."""
        fn = self.model.functions.get(function)
        callers = self.model.calls_to.get(function, [])
        if fn is None or name not in fn.params or name == "self" or not callers or depth > 2 or self.model.assignments(name, function):
            return False
        position = fn.params.index(name) - (1 if fn.owner else 0)
        for call in callers:
            if self.model.resolve_function(call.name or "", call.function) != function:
                return False  # handed on as a callback: its caller's arguments are not these
            arg = call.keyword(name) or (call.args[position] if 0 <= position < len(call.args) and not any(a.text.startswith("*") for a in call.args[: position + 1]) else None)
            if arg is None or not arg.base or arg.text != arg.base:
                return False
            if self.model.kind_of(arg.base, call.function) is not Kind.MODEL and not self._model_from_callers(arg.base, call.function, depth + 1):
                return False
        return True

    def _is_imported_callable(self, name: str) -> bool:
        """`utils.save_fsdp_model` or `load_model` reached through an import (not a local binding)."""
        if name.startswith("self.") or self.model.assignments(name.partition(".")[0], ""):
            return False
        return any(name == target or name.startswith(target + ".") for target in self.model.imports.aliases.values())

    @cached_property
    def is_torch_code(self) -> bool:
        """False for another framework's code: the file imports TensorFlow, MXNet, JAX... and nothing
        of torch (a helper module that imports nothing at all still counts as torch code)."""
        heads = {target.partition(".")[0] for target in self.model.imports.aliases.values()}
        return bool(heads & _TORCH_ECOSYSTEM) or not heads & _OTHER_FRAMEWORKS

    def is_opaque(self, event: Event) -> bool:
        """A call into code this file cannot see (not torch, not a builtin, not local)."""
        if event.kind is not EventKind.CALL or not event.name:
            return False
        if self.model.call_targets(event) or self._foreign.get(event.name) is not None:
            return False  # a local function, or one of the user's other modules that was read
        head = event.name.partition(".")[0]
        return head not in _LIBRARY_HEADS and not event.name.startswith("torch.")

    def opaque_training_call(self, events: tuple[Event, ...]) -> Event | None:
        """An opaque call that might clear gradients or step: it is named like training code
        or receives an optimizer. What is known from where a value was made wins over names:
        a method of a scaler, scheduler, loader or loss (`scaler.update()`), a factory that
        builds an optimizer or a model (`create_optimizer(model)`), and a function of the
        project whose summary shows it neither back-propagates, steps nor clears, are not."""
        for event in events:
            if not self.is_opaque(event) or self.is_forward(event):
                continue
            suspicious = bool(_TRAINING_WORDS.search(tail(event.name)) and not _reads_state(event)) or any(
                arg.base and self.model.kind_of(arg.base, event.function) is Kind.OPTIMIZER
                for arg in (*event.args, *(v for _, v in event.keywords))
            )
            if not suspicious or self._known_not_training(event):
                continue
            if _is_bookkeeping(event) and self.model.kind_of(event.receiver, event.function) is Kind.UNKNOWN:
                continue  # nothing known about the receiver: its name (`meter`, `pbar`) breaks the tie
            return event
        return None

    def _known_not_training(self, event: Event) -> bool:
        if event.receiver and self.model.kind_of(event.receiver, event.function) in _NOT_TRAINING_RECEIVERS:
            return True
        if event.name:
            value = (
                Value(event.name, event.span, receiver=event.receiver, method=tail(event.name), base=event.receiver)
                if event.receiver
                else Value(event.name, event.span, callee=event.name)
            )
            with self.model.external_kinds():
                built = self.model.kind_of_value(value, event.function, 1)
            if built in (Kind.OPTIMIZER, Kind.SCHEDULER, Kind.MODEL, Kind.LOADER, Kind.SCALER):
                return True  # a factory: it builds, it does not train
        if self._built_from_nothing(event):
            return True
        summary = self.summary(event) or self._method_summary(event)
        return summary is not None and not summary.partial and not summary.trains

    def _built_from_nothing(self, event: Event) -> bool:
        """A method of an object made once by a call that is handed nothing but literals
        (`losses = AverageMeter()`, `AverageMeter("Loss", ":.4e")`), given no model, optimizer or
        loss tensor: it holds no reference to the training state, so it cannot step or clear it,
        whatever its class (one of a module that cannot be read)."""
        receiver = event.receiver
        if not receiver or "." in receiver or not event.name:
            return False
        assigned = self.model.assignments(receiver, event.function)
        if len(assigned) != 1 or assigned[0].value is None or len(assigned[0].targets) != 1:
            return False
        made = assigned[0].value
        if not made.callee or made.receiver or len(made.calls) != 1 or set(made.names) - {made.callee.rpartition(".")[2], made.callee.partition(".")[0]}:
            return False
        handed = (*event.args, *(v for _, v in event.keywords))
        return all(self.model.kind_of_value(v, event.function, 1) not in (Kind.OPTIMIZER, Kind.MODEL, Kind.LOSS, Kind.OUTPUT) for v in handed)

    def _method_summary(self, event: Event) -> FunctionSummary | None:
        """The summary of a method called on an instance of a class of the user's other modules
        (`losses = AverageMeter()` from `utils`; `losses.update(...)`): known from where it was made."""
        receiver = event.receiver
        if self.project is None or not receiver or "." in receiver or not event.name:
            return None
        assigned = self.model.assignments(receiver, event.function)
        callees = {a.value.callee if a.value is not None else None for a in assigned}
        callee = callees.pop() if len(callees) == 1 else None
        if not callee or "." not in callee or not self.model.comes_from_import(callee) or callee.partition(".")[0] in _TORCH_ECOSYSTEM:
            return None
        found = self.project.resolve_class(self.model.path, callee)
        method = found[1].methods.get(tail(event.name)) if found is not None else None
        return self.project.summary(found[0], method) if found is not None and method else None

    # --- parameter ownership ----------------------------------------------------------

    def owned_modules(self, optimizer: str, scope: str, _depth: int = 0) -> frozenset[str] | None:
        """The modules whose parameters an optimizer owns, from where it was built:
        `Adam(netD.parameters())`, `SGD(filter(..., model.parameters()))`, param-group lists of
        dicts, `chain(a.parameters(), b.parameters())`, a `params` list built before it, also
        when it is re-bound through a wrapper (`model, opt = accelerator.prepare(model, opt)`); for
        a parameter, what every caller of the file passes. Only when nothing is known does the
        spelling break the tie: `optimD` / `netD`, one cleared or run module per suffix. None when
        unknown."""
        memo = self.function_memo("owned-modules")
        key = f"{scope}\0{optimizer}"
        if key in memo:
            return memo[key]  # type: ignore[no-any-return]
        memo[key] = None
        found = self._owned_from_assignments(optimizer, scope, _depth)
        if found is None and _depth < 3:
            found = self._owned_from_callers(optimizer, scope, _depth)
        if found is None:
            found = self._owned_by_spelling(optimizer, scope)
        memo[key] = found
        return found

    def _owned_from_assignments(self, optimizer: str, scope: str, depth: int) -> frozenset[str] | None:
        assigned = self.model.assignments(optimizer, scope)
        if not assigned or assigned[0].value is None or len(assigned[0].targets) != 1:
            return None
        head = optimizer.partition(".")[0]
        first = self._modules_in(assigned[0].value, assigned[0].function, depth)
        for e in assigned[1:]:
            if e.value is not None and (head in e.value.names or optimizer in e.value.text):
                continue  # a wrapper of itself (`accelerator.prepare(opt)`)
            # re-bound: known only when every construction owns the same modules (`Adam(...)` or
            # `RMSprop(...)` of `netD.parameters()` in two branches)
            if e.value is None or len(e.targets) != 1 or self._modules_in(e.value, e.function, depth) != first:
                return None
        return first

    def _owned_from_callers(self, optimizer: str, scope: str, depth: int) -> frozenset[str] | None:
        fn = self.model.functions.get(scope)
        if fn is None or optimizer not in fn.params:
            return None
        position = fn.params.index(optimizer) - (1 if fn.owner else 0)
        callers = self.model.calls_to.get(scope, [])
        found: set[str] = set()
        for call in callers:
            arg = call.keyword(optimizer) or (call.args[position] if 0 <= position < len(call.args) else None)
            if arg is None or not arg.base or arg.text != arg.base:
                return None
            owned = self.owned_modules(arg.base, call.function, depth + 1)
            if owned is None:
                return None
            found |= owned
        return frozenset(found) or None

    def _owned_by_spelling(self, optimizer: str, scope: str) -> frozenset[str] | None:
        """`optimD` owns `netD` when nothing else is known: the optimizer's name past its
        `opt`/`optim`/`optimizer` part is a suffix that exactly one model of the function ends with."""
        suffix = _OPTIMIZER_SUFFIX.match(tail(optimizer))
        if suffix is None or not suffix.group(1):
            return None
        end = suffix.group(1).lstrip("_").lower()
        models = {
            e.receiver if e.kind is EventKind.ZERO_GRAD else e.name
            for e in self.expanded(scope)
            if (e.kind is EventKind.ZERO_GRAD and e.receiver) or (e.kind is EventKind.CALL and e.name and not e.receiver)
        }
        matching = [m for m in models if m and tail(m).lower().endswith(end) and self.model.kind_of(m, scope) is Kind.MODEL
                    and not _OPTIMIZER_SUFFIX.match(tail(m))]
        return frozenset(matching) if len(matching) == 1 else None

    def _modules_in(self, value: Value, scope: str, depth: int) -> frozenset[str] | None:
        modules = set(_PARAMETERS_OF.findall(value.text))
        for name in value.names:
            if depth < 3 and name not in modules and self.model.kind_of(name, scope) is Kind.UNKNOWN:
                assigned = self.model.assignments(name, scope)
                if len(assigned) == 1 and assigned[0].value is not None and assigned[0].function == scope:
                    modules |= self._modules_in(assigned[0].value, scope, depth + 1) or frozenset()
        return frozenset(modules) or None

    def cleared_modules(self, clear: Event) -> frozenset[str] | None:
        """The modules whose gradients a clear resets: `netD.zero_grad()` clears `netD`,
        `optD.zero_grad()` what `optD` owns. None when unknown (`p.grad = None`, a wrapper)."""
        receiver = clear.receiver
        if clear.kind is not EventKind.ZERO_GRAD or not receiver or clear.name == "grad=None" or ".grad" in receiver:
            return None
        kind = self.model.kind_of(receiver, clear.function)
        if kind is Kind.UNKNOWN:
            with self.model.external_kinds():  # `D = models.Discriminator()` from the user's other module
                kind = self.model.kind_of(receiver, clear.function)
        if kind is Kind.OPTIMIZER:
            return self.owned_modules(receiver, clear.function)
        if kind is Kind.MODEL or (kind is Kind.UNKNOWN and any(related(receiver, o) for o in parameter_owners(self.model))):
            return frozenset({receiver})  # a module: its (or a submodule's) `.parameters()` are handed out
        return None

    def clears_optimizer(self, clear: Event, optimizer: str, scope: str) -> bool:
        """`clear` may reset gradients that `optimizer` steps. Yes unless both sides are known
        and share no module (`netG.zero_grad()` does not clear what `optD` steps)."""
        if clear.kind is not EventKind.ZERO_GRAD:
            return False
        if clear.receiver == optimizer:
            return True
        owned = self.owned_modules(optimizer, scope)
        cleared = self.cleared_modules(clear)
        if owned is None or cleared is None:
            return True
        return any(related(a, b) for a in owned for b in cleared)

    # --- loops --------------------------------------------------------------------------

    @cached_property
    def training_loops(self) -> tuple[TrainingLoop, ...]:
        if not self.is_torch_code:
            return ()  # TensorFlow / MXNet / JAX code: `net`, `loss.backward`, `trainer.step` mean other things
        found = []
        for loop in self.model.loops.values():
            if loop.id not in self._classified:
                self._classified[loop.id] = self._classify(loop)
            found.append(self._classified[loop.id])
        return tuple(t for t in found if t is not None)

    def _classify(self, loop: Loop) -> TrainingLoop | None:
        if not self.may_train(loop.function):
            return None
        events = self.iteration(loop)
        steps = tuple(e for e in events if not e.inner and self.optimizer_of(e))
        if not steps:
            return None
        backwards = tuple(e for e in events if e.kind is EventKind.BACKWARD)
        if not backwards:
            return None
        return TrainingLoop(loop, events, steps, backwards)

    @cached_property
    def framework_steps(self) -> tuple[tuple[Function, tuple[Event, ...]], ...]:
        """Functions a framework runs once per training iteration, with the events of that
        iteration: an ignite `Engine(update_fn)` update function, together with the handlers
        registered on an engine (`@trainer.on(Events...)`, `trainer.add_event_handler(..., fn)`);
        a Lightning `training_step` that steps its optimizers itself (manual optimization).
        Only those that back-propagate and step an optimizer."""
        if not self.is_torch_code:
            return ()
        model = self.model
        updates = {q: set(engines) for q, engines in self.engine_functions.items()}  # update function -> its engine variables
        handlers: list[tuple[str, str]] = []  # (engine variable, handler)
        for fn in model.functions.values():
            handlers += [(d[: -len(".on")], fn.qualname) for d in fn.decorators if d.endswith(".on")]
            for event in fn.events:
                if event.kind is EventKind.CALL and tail(event.name) == "add_event_handler" and len(event.args) > 1 \
                        and event.args[1].base and event.receiver:
                    target = model.resolve_function(event.args[1].base, event.function)
                    if target:
                        handlers.append((event.receiver, target))
        for qualname, _ in self.step_hooks:
            updates.setdefault(qualname, set())
        found = []
        for qualname, engines in updates.items():
            events = tuple(e for e in self.expanded(qualname) if not e.loops)
            if not any(e.kind is EventKind.BACKWARD for e in events) or not any(self.optimizer_of(e) for e in events):
                continue
            # handlers of this engine, or of one this file cannot tie to an engine
            known = {engine for engine, _ in handlers} & set().union(*(updates[q] for q in updates))
            extra = tuple(e for engine, h in handlers if engine in engines or engine not in known for e in self.expanded(h) if not e.loops)
            found.append((model.functions[qualname], events + extra))
        return tuple(found)

    @cached_property
    def engine_functions(self) -> dict[str, frozenset[str]]:
        """The functions of the file an ignite `Engine(fn)` runs once per batch, with the engine
        variables they run in: a trainer's update function or an evaluator's step."""
        found: dict[str, set[str]] = {}
        for fn in self.model.functions.values():
            for event in fn.events:
                if event.kind is EventKind.ASSIGN and event.value is not None and (event.value.callee or "").startswith("ignite.") \
                        and tail(event.value.callee) == "Engine":
                    first = event.value.text[event.value.text.find("(") + 1 :].split(",")[0].split(")")[0].strip()
                    target = self.model.resolve_function(first, event.function) if first else None
                    if target:
                        found.setdefault(target, set()).update(event.targets)
        return {q: frozenset(engines) for q, engines in found.items()}

    @cached_property
    def backward_loops(self) -> tuple[TrainingLoop, ...]:
        """The training loops, then the loops whose iteration runs `backward()` itself (not only in
        a nested loop) with gradients on but steps no optimizer: micro-step accumulation, or a step
        made elsewhere. What such a loop keeps across iterations keeps its graph just the same."""
        found = list(self.training_loops)
        known = {t.loop.id for t in found}
        for loop in self.model.loops.values():
            if loop.id in known or not self.is_torch_code or not self.may_hold(loop.function, EventKind.BACKWARD):
                continue
            events = self.iteration(loop)
            backwards = tuple(e for e in events if e.kind is EventKind.BACKWARD)
            if any(not e.inner and not e.no_grad for e in backwards) and self.grad_enabled_at(loop):
                found.append(TrainingLoop(loop, events, (), backwards))
        return tuple(found)

    @cached_property
    def step_hooks(self) -> tuple[tuple[str, tuple[Event, ...]], ...]:
        """(qualname, events) of each `training_step` of a class whose framework runs the loop
        (a LightningModule, a Hugging Face Trainer): the framework calls it once per step, so its
        body is one iteration of a training loop it cannot see. Events inside the hook's own loops
        are marked `inner`."""
        hooks = []
        for cls in self.model.classes.values():
            qualname = cls.methods.get("training_step") if cls.owns_loop and self.is_torch_code else None
            if qualname is not None:
                events = tuple(e if e.inner == bool(e.loops) else replace(e, inner=bool(e.loops)) for e in self.expanded(qualname))
                hooks.append((qualname, events))
        return tuple(hooks)

    def is_training_loop(self, loop: Loop) -> bool:
        return any(t.loop.id == loop.id for t in self.training_loops)

    def frozen_before(self, forward: Event, loop: Loop) -> bool:
        """The forward's module had its parameters frozen before `loop` (`G.requires_grad_(False)`,
        also in a chain such as `sampler.eval().requires_grad_(False).to(device)`) and nothing in
        the function turns them back on: its forward records no graph unless the inputs ask for one."""
        name = forward.name or ""
        fn = self.model.functions.get(loop.function)
        if not name or fn is None:
            return False
        frozen = False
        for event in fn.events:
            if event.kind is not EventKind.CALL or not (event.name or "").endswith(".requires_grad_"):
                continue
            if (event.receiver or "").split(".", 1)[0] != name:
                continue
            if [a.text for a in event.args] != ["False"]:
                return False  # turned back on (or set from a value the file does not show)
            frozen = frozen or event.span.start < loop.header.start
        return frozen

    def grad_enabled_at(self, loop: Loop) -> bool:
        """False when the loop runs under no_grad: a context, a decorator or every caller."""
        known = self._grad_enabled.get(loop.id)
        if known is None:
            known = self._grad_enabled[loop.id] = self._grad_enabled_at(loop)
        return known

    def decorated_no_grad(self, fn: Function) -> bool:
        """`fn` carries a decorator that turns gradients off: `@torch.no_grad()`, or one of the
        project's own that wraps no_grad / inference_mode (`@smart_inference_mode()` from `utils`)."""
        if fn.disables_grad:
            return True
        if self.project is None or not fn.decorators:
            return False
        memo = self.function_memo("decorated-no-grad")
        if fn.qualname not in memo:
            memo[fn.qualname] = any(self.project.decorator_disables_grad(self.model, d) for d in fn.decorators if "(" not in d)
        return bool(memo[fn.qualname])

    def _grad_enabled_at(self, loop: Loop) -> bool:
        if any(c.disables_grad for c in loop.contexts):
            return False
        if self.model.covered_by_no_grad(loop.function, disables=self.decorated_no_grad):
            return False
        fn = self.model.functions.get(loop.function)
        while fn is not None and fn.parent:
            parent = self.model.functions.get(fn.parent)
            if parent is None:
                break
            if self.decorated_no_grad(parent):
                return False
            fn = parent
        return not self._grad_disabled_globally(loop)

    def _grad_disabled_globally(self, loop: Loop) -> bool:
        """`torch.set_grad_enabled(False)` called before the loop in its function."""
        fn = self.model.functions.get(loop.function)
        if fn is None:
            return False
        for event in fn.events:
            if event.span.start >= loop.span.start:
                break
            if event.name == "torch.set_grad_enabled" and event.args[:1] and event.args[0].text == "False":
                return True
        return False
