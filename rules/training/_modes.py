"""Which mode (train / eval) a model is in at a point, following same-file callers.
Shared by TPF008 and TPF009; not a rule."""

from __future__ import annotations

import re

from torch_preflight.core.names import tail
from torch_preflight.core.project import ProjectView
from torch_preflight.core.semantic import Event, EventKind, Function, ModuleModel, Value
from torch_preflight.core.source import Span
from torch_preflight.core.training import TrainingModel
from torch_preflight.rules.training._evaluation import trains

TRAIN, EVAL, UNKNOWN, DEFAULT = "train", "eval", "unknown", "default"
_MODE_LAYERS = re.compile(r"Dropout|BatchNorm|dropout|batch_norm|\.training\b|RReLU|AlphaDropout")


def first_statement(fn: Function) -> Span:
    """The first statement of a function's body that does something (after its docstring): where
    a mode call that the whole function needs belongs."""
    own = [e.stmt for e in fn.events if e.function == fn.qualname]
    return min(own, key=lambda span: span.start.line, default=fn.header)


def model_key(name: str | None) -> str:
    """The network a dotted name holds, for matching mode calls and forwards: `self.model`,
    `model` and `model.module` (the network behind DataParallel / DDP) all name `model`."""
    parts = (name or "").split(".")
    while len(parts) > 1 and parts[-1] == "module":
        parts.pop()
    return parts[-1]


def mode_events(events: tuple[Event, ...] | list[Event]) -> list[Event]:
    return [e for e in events if e.kind in (EventKind.TRAIN_MODE, EventKind.EVAL_MODE)]


def mode_before(
    training: TrainingModel, scope: str, index: int, model_name: str | None, depth: int = 0, built: str | None = None
) -> tuple[str, Event | None]:
    """The mode set by the last mode call before `expanded(scope)[index]`, matching the
    model by name in `scope` itself and accepting any model in callers, with that call (None
    when no call decides it). DEFAULT: nothing sets a mode on any path up to module level, or
    up to the function that builds the model (`model = Net()` in a `train_func(config)` that a
    launcher calls: a fresh model trains); UNKNOWN when a path leaves the file or is ambiguous.
    `built`: the model's name in `scope` as the caller below passed it on (None when it is not
    a plain name)."""
    mode, setter, _ = mode_trace(training, scope, index, model_name, depth, built)
    return mode, setter


def mode_trace(
    training: TrainingModel, scope: str, index: int, model_name: str | None, depth: int = 0, built: str | None = None
) -> tuple[str, Event | None, tuple[Event, ...]]:
    """`mode_before`, with the calls its answer came through, innermost first: the last one is
    in the function that set the mode (or built the model); empty when `scope` decides it."""
    events = training.expanded(scope)
    before = mode_events(events[:index])
    if before:
        if model_name is not None:
            matching = [e for e in before if e.receiver and model_key(e.receiver) == model_key(model_name)]
            if not matching:
                return UNKNOWN, None, ()
            before = matching
        elif built is not None:  # the caller's name for the model: its own mode calls decide when it has some
            before = [e for e in before if e.receiver and model_key(e.receiver) == model_key(built)] or before
        return (EVAL if before[-1].kind is EventKind.EVAL_MODE else TRAIN), before[-1], ()
    if not scope:
        return DEFAULT, None, ()
    local = model_name if model_name is not None else built
    if local is not None and built_in(scope, events[:index], local):
        return DEFAULT, None, ()
    callers = training.model.calls_to.get(scope, [])
    if not callers or depth > 3:
        return UNKNOWN, None, ()
    fn = training.model.functions.get(scope)
    modes: dict[str, tuple[Event | None, tuple[Event, ...]]] = {}
    for call in callers:
        caller_events = training.expanded(call.function)
        try:
            position = caller_events.index(call)
        except ValueError:
            return UNKNOWN, None, ()
        passed = argument_name(call, fn.params if fn else (), local, bool(fn and fn.owner))
        if passed is None and fn is not None and local is not None and local.isidentifier() and local not in fn.params:
            passed = local  # a global or an enclosing function's variable: the caller sees it by the same name
        mode, setter, chain = mode_trace(training, call.function, position, None, depth + 1, passed)
        if modes.get(mode, (None, ()))[0] is None:
            modes[mode] = (setter, (call, *chain))
    for mode in (UNKNOWN, TRAIN, DEFAULT, EVAL):
        if mode in modes:
            return (mode, *modes[mode])
    return UNKNOWN, None, ()


def handed_in(model: ModuleModel, scope: str, name: str) -> bool:
    """`name` reaches `scope` from its callers: a parameter of the function (or of one enclosing
    it), or an attribute of `self` in a method of a trainer class (not an nn.Module, not a class
    whose framework runs the loop): the object holds the model its creator gave it."""
    head = name.partition(".")[0]
    fn = model.functions.get(scope)
    while fn is not None:
        if fn.owner is not None and not _plain_class(model, fn.owner, 0):
            return False  # a hook of a framework's class (a callback, a Trainer subclass): the framework sets modes
        if head in fn.params and head != "self":
            return True
        if fn.owner is not None:
            return head == "self" and "." in name
        fn = model.functions.get(fn.parent) if fn.parent else None
    return False


def _networks_mode_free(model: ModuleModel) -> bool:
    """The file defines networks (nn.Module classes), none with dropout or batch norm, and names
    no such layer anywhere."""
    networks = [q for q, c in model.classes.items() if c.is_module]
    if not networks or any(_class_has_mode_layers(model, q, set()) for q in networks):
        return False
    called = (name for fn in model.functions.values() for e in fn.events for name in (e.name, *(e.value.calls if e.value else ())))
    return not any(name and _MODE_LAYERS.search(name) for name in called)  # `nn.Sequential(..., nn.Dropout(0.1))` outside a class


def _plain_class(model: ModuleModel, qualname: str, depth: int) -> bool:
    """A class of the file that is no nn.Module and derives from nothing outside the file (a
    trainer object of the user's own): not a framework's callback or trainer subclass."""
    cls = model.classes.get(qualname)
    if cls is None or cls.is_module or cls.owns_loop or depth > 5:
        return False
    return all(b in ("object", "builtins.object") or (b in model.classes and _plain_class(model, b, depth + 1)) for b in cls.bases)


def unset_from_entry(training: TrainingModel, scope: str, index: int, name: str, depth: int = 0) -> bool:
    """No mode call on any path to `expanded(scope)[index]`, and every path starts in a function
    that no code of this file calls and that is handed the model (`handed_in`): its callers live
    in other modules."""
    if not scope or depth > 3 or mode_events(training.expanded(scope)[:index]):
        return False
    callers = training.model.calls_to.get(scope, [])
    if not callers:
        return handed_in(training.model, scope, name)
    head = name.partition(".")[0]
    fn = training.model.functions.get(scope)
    for call in callers:
        if training.model.resolve_function(call.name or "", call.function) != scope and fn is not None and fn.parent == call.function:
            pass  # a closure handed to a framework (`Engine(evaluate_step)`): it reads the model from its enclosing function
        elif head == "self":
            if call.receiver != "self":
                return False
        elif not any(a.base == head and a.text == head for a in (*call.args, *(v for _, v in call.keywords))):
            return False  # the model is renamed or built on the way: stay silent
        try:
            position = training.expanded(call.function).index(call)
        except ValueError:
            return False
        if not unset_from_entry(training, call.function, position, name, depth + 1):
            return False
    return True


def same_model_calls(training: TrainingModel, scope: str, name: str, kind: EventKind) -> list[Event]:
    """Mode calls of `kind` in the file on the model `name` of `scope`, reached the same way: on the
    same `self` attribute in methods of the same class, or on a model that is not an attribute of
    `self` elsewhere (a parameter, a global)."""
    model = training.model
    owner = model.functions[scope].owner if scope in model.functions else None
    on_self = name.startswith("self.")
    return [
        event
        for qualname, fn in model.functions.items()
        if not (on_self and fn.owner != owner)
        for event in fn.events
        if event.kind is kind and event.receiver and event.receiver.startswith("self.") == on_self
        and model_key(event.receiver) == model_key(name)
    ]


def sibling_mode_call(training: TrainingModel, scope: str, name: str, kind: EventKind) -> Event | None:
    """A mode call of `kind`, not under any condition, in another function of the file that is
    handed the same model the same way as `scope` is: another function taking it as a parameter,
    or another method of the same trainer class on the same `self` attribute. None as well when
    the networks the file defines have no dropout or batch norm: the model handed in is most
    likely one of them."""
    if _networks_mode_free(training.model):
        return None
    found = [event for event in same_model_calls(training, scope, name, kind)
             if event.function != scope and not event.guards and handed_in(training.model, event.function, event.receiver or "")]
    # the training function's own call first (`train_step()`'s `model.train()`, not an evaluation restoring it)
    return min(found, key=lambda e: not trains(training, e.function), default=None)


# A model rebuilt from saved or other state: its mode is whatever that state had (`from_pretrained` returns it in eval mode).
_NOT_FRESH = re.compile(r"load|pretrained|copy|restore|checkpoint|\.eval\(|\.train\(", re.I)


def built_in(scope: str, events: list[Event], name: str) -> bool:
    """`scope` itself builds the model before the point (`model = Net()`, then perhaps
    `model = prepare_model(model)`), not from a checkpoint or a copy: a fresh model, in training mode."""
    assigns = [e for e in events if e.kind is EventKind.ASSIGN and e.function == scope and name in e.targets]
    if not assigns or any(len(e.targets) != 1 or e.value is None or _NOT_FRESH.search(e.value.text) for e in assigns):
        return False
    first = assigns[0].value
    return first is not None and bool(first.calls) and all(e.value is not None and name in e.value.names for e in assigns[1:])


def argument_name(call: Event, params: tuple[str, ...] | list[str], name: str | None, method: bool) -> str | None:
    """The caller's plain name for the parameter `name` of the function it calls; None otherwise."""
    if name is None or name not in params:
        return None
    position = list(params).index(name) - (1 if method else 0)
    arg = call.keyword(name) or (call.args[position] if 0 <= position < len(call.args) else None)
    if arg is None or not arg.base or arg.text != arg.base or arg.callee or arg.method:
        return None
    return arg.base


def has_mode_layers(model: ModuleModel, name: str, scope: str, project: ProjectView) -> bool:
    """True unless every class `name` may hold is an nn.Module of the user's project
    without dropout or batch norm (mode-independent models are safe in either mode)."""
    classes = _classes_of(model, name, scope, 0, project)
    if not classes:
        return True
    return any(_class_has_mode_layers(model, c, set()) for c in classes if c)


def _imported_mode_free(model: ModuleModel, calls: tuple[str, ...], project: ProjectView) -> bool:
    """`Net(...)` imported from the user's own project (`from model import Net`) whose
    class, read through the project, holds no dropout or batch norm."""
    classes = [c for c in calls if tail(c)[:1].isupper() and not c.startswith("torch.")]
    if len(classes) != 1 or "." not in classes[0]:
        return False
    found = project.resolve_class(model.path, classes[0])
    return found is not None and found[1].is_module and not _class_has_mode_layers(found[0], found[1].qualname, set())


_STATEFUL_TORCH = re.compile(r"Dropout|BatchNorm|InstanceNorm|Transformer|MultiheadAttention|LSTM|GRU|RNN|Module|Identity")


def _mode_free_torch(text: str, calls: tuple[str, ...]) -> bool:
    """`nn.Linear(...)`, or `nn.Sequential(...)` of plain torch layers: no mode-dependent layer."""
    if not calls or _MODE_LAYERS.search(text):
        return False
    for call in calls:
        last = tail(call)
        if not call.startswith("torch.nn.") or (_STATEFUL_TORCH.search(last) and last not in ("Sequential", "ModuleList")):
            return False
    return True


_RNN_CALL = re.compile(r"\b(RNN|LSTM|GRU)\s*\(")


def without_inert_rnn_dropout(text: str) -> str:
    """`text` with the arguments of each recurrent layer built with a single layer blanked out:
    `nn.RNN(n, h, dropout=0.5)` drops out only between stacked layers, so with one layer (no
    `num_layers`, at most two positional arguments) its `dropout` does nothing in either mode."""
    out, position = [], 0
    for match in _RNN_CALL.finditer(text):
        if match.start() < position:
            continue
        depth, end = 0, None
        for i in range(match.end() - 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            if depth == 0:
                end = i
                break
        if end is None:
            break
        arguments = text[match.end() : end]
        if "num_layers" not in arguments and arguments.count(",") - arguments.count("=") < 2 and "*" not in arguments:
            out.append(text[position : match.end()])
            position = end
    return "".join(out) + text[position:]


def _classes_of(model: ModuleModel, name: str, scope: str, depth: int, project: ProjectView) -> list[str]:
    if depth > 3:
        return []
    found: list[str] = []
    assignments = model.assignments(name, scope)
    fn = model.functions.get(scope)
    if assignments:
        first, *rest = assignments
        if rest and all(_passes_through(e, name, model) for e in rest):
            assignments = [first]  # `model = Net()`, then `model = DDP(model)`: still a Net
        for event in assignments:
            callee = _constructed_class(event.value, model) if event.value else None
            wrapped = _wrapped(event.value) if event.value and len(event.targets) == 1 else None
            if wrapped is not None:  # `model = DDP(net.to(rank), ...)`: whatever `net` is
                inner = _classes_of(model, wrapped, scope, depth + 1, project) if wrapped != name else []
                if not inner:
                    return []
                found.extend(inner)
            elif callee is not None and len(event.targets) == 1:
                found.append(callee)
            elif event.value is not None and len(event.targets) == 1 and _built_by_function(model, event.value, scope):
                found.append("")  # `model = build_model(d)` returning `nn.Sequential(nn.Linear(...), ...)`
            elif event.value is not None and len(event.targets) == 1 and _mode_free_torch(event.value.text, event.value.calls):
                found.append("")
            elif event.value is not None and len(event.targets) == 1 and _imported_mode_free(model, event.value.calls, project):
                found.append("")
            else:
                return []
        return found
    if fn is not None and name in fn.params:
        position = fn.params.index(name) - (1 if fn.owner else 0)
        callers = model.calls_to.get(scope, [])
        if not callers:
            return []
        for call in callers:
            arg = call.keyword(name) or (call.args[position] if 0 <= position < len(call.args) else None)
            if arg is None or not arg.base or arg.callee or arg.method:
                return []
            inner = _classes_of(model, arg.base, call.function, depth + 1, project)
            if not inner:
                return []
            found.extend(inner)
    return found


_WRAPPERS = frozenset({"torch.nn.parallel.DistributedDataParallel", "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
                       "torch.nn.parallel.distributed.DistributedDataParallel", "torch.nn.parallel.data_parallel.DataParallel"})
_FIRST_ARGUMENT = re.compile(r"^[^(]*\(\s*([A-Za-z_]\w*)((?:\.\w+\([^()]*\))*)\s*[,)]")


def _wrapped(value: Value) -> str | None:
    """The network a data-parallel wrapper is built around: `DDP(net.to(rank), device_ids=[rank])` -> `net`."""
    if value.callee not in _WRAPPERS:
        return None
    match = _FIRST_ARGUMENT.match(value.text)
    if match is None:
        return None
    methods = re.findall(r"\.(\w+)\(", match.group(2))
    return match.group(1) if set(methods) <= _SAME_MODULE else None


# Methods that return the module they are called on (`Net().to(device)`, `model = model.cuda()`).
_SAME_MODULE = frozenset({"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "train", "eval", "requires_grad_", "share_memory"})


def _built_by_function(model: ModuleModel, value: Value, scope: str) -> bool:
    """`value` calls a function of the file whose every return builds a network of plain torch
    layers without dropout or batch norm (`return nn.Sequential(nn.Linear(d, 64), nn.ReLU(), ...)`)."""
    target = model.resolve_function(value.callee, scope) if value.callee else None
    fn = model.functions.get(target) if target else None
    if fn is None or (value.methods and not set(value.methods) <= _SAME_MODULE):
        return False
    returns = [e.value for e in fn.events if e.kind is EventKind.RETURN and e.function == fn.qualname]
    return bool(returns) and all(v is not None and _mode_free_torch(v.text, v.calls) for v in returns)


def _constructed_class(value: Value, model: ModuleModel) -> str | None:
    """The file's class that `value` constructs: `Net(...)`, or `Net(...).to(device)`."""
    if value.callee is not None:
        return value.callee if value.callee in model.classes else None
    if not value.methods or not set(value.methods) <= _SAME_MODULE:
        return None
    built = [call for call in value.calls if call in model.classes]
    return built[0] if len(built) == 1 and value.base is None else None


def _passes_through(event: Event, name: str, model: ModuleModel) -> bool:
    """`model = wrap(model, ...)` (DistributedDataParallel, `prepare_model`, `torch.compile`, `.to(device)`):
    the same network behind a wrapper that adds no layer of its own."""
    value = event.value
    if value is not None and value.base == name and not value.calls and value.methods and set(value.methods) <= _SAME_MODULE:
        return True  # `model = model.to(device)`
    if value is None or len(event.targets) != 1 or name not in value.names or not value.calls or _MODE_LAYERS.search(value.text):
        return False
    for call in value.calls:
        if call in model.classes:
            return False  # a wrapper class of the file: it may add layers
        if call.startswith("torch.nn.") and tail(call) not in ("DistributedDataParallel", "DataParallel"):
            return False  # `nn.Sequential(model, nn.Linear(...))`: more layers
    return True


def class_has_mode_layers(model: ModuleModel, qualname: str) -> bool:
    """The class `qualname` of `model` (or a class it builds or derives from) holds dropout or batch norm."""
    return _class_has_mode_layers(model, qualname, set())


def _class_has_mode_layers(model: ModuleModel, qualname: str, seen: set[str]) -> bool:
    if qualname in seen:
        return False
    seen.add(qualname)
    cls = model.classes[qualname]
    # A plain class of the file (a from-scratch network with its own `forward` and `backward`) has no
    # modes unless it builds torch layers, which the checks below read like a module's.
    for base in cls.bases:
        if base in model.classes:
            if _class_has_mode_layers(model, base, seen):
                return True
        elif not base.startswith("torch.nn.") and base not in ("object", "builtins.object"):
            return True  # an unknown base class may hold anything
    text = model.source.slice(cls.span)
    if _MODE_LAYERS.search(without_inert_rnn_dropout(text)):
        return True
    for other, info in model.classes.items():
        if other != qualname and re.search(rf"\b{re.escape(info.name)}\s*\(", text) and _class_has_mode_layers(model, other, seen):
            return True
    # Layers built from libraries the file cannot see (torchvision, timm, ...) may hold dropout.
    for method in cls.methods.values():
        # a method the file's function table does not hold (a class defined twice under one name) has no events here
        for event in (model.functions[method].events if method in model.functions else ()):
            # `F.softmax(x).view(...)`: a method on a torch call's result is torch's too
            qualified = model.imports.resolve(event.name.partition("(")[0]) if event.name else None
            if event.kind is EventKind.CALL and event.name and model.imports.is_imported(event.name) and not (qualified or "").startswith("torch."):
                if event.name.partition(".")[0] not in ("math", "numpy", "np", "functools", "itertools", "typing", "dataclasses"):
                    return True
    return False
