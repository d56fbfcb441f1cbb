"""What a value is, from where it was made, and what a parameter holds, from what its callers pass.

A `Made` is one possible value: its `Kind` (an nn.Module, an optimizer, a loss criterion, a
DataLoader, ...) and, when known, its class (`torch.nn.CrossEntropyLoss`, `Policy` of the file;
a wrapper such as `DistributedDataParallel(...)`, `DataParallel(...)`, `.to(device)` or
`torch.compile(...)` keeps the wrapped module's class, and so do the library functions documented
to return the module they are given, `nn.SyncBatchNorm.convert_sync_batchnorm(m)`,
`spectral_norm(m)`, and the module methods that return self, `.apply(fn)`, `.type(...)`). An
instance of a plain class of the file is `Made(Kind.UNKNOWN, cls)`: known, and none of those kinds.

`values_of(model, name, scope)` is every value `name` may hold in `scope`, as a frozenset of
`Made`, or None when one of them is unknown: the join over its assignments (in any branch), and
for a parameter the join over the arguments every call site of the file passes for it
(positional, keyword or the default; `self.method(...)`, `obj.method(...)` on an instance of a
class of the file, and `Cls(...)` for `__init__`; a method only when it is private, `self._step(...)`:
any `x.step(...)` of any module may be a public one). `None` passed or defaulted adds nothing (a
value that is called, or whose methods are called, is not None there).

A parameter is unknown when the file cannot see every caller (`callers`): the function is
referenced other than by a call (handed to an engine, a thread, `functools.partial`, a
callback list, a decorator that registers it), is a lambda, a dunder other than `__init__` or
a module's `forward` (called implicitly), some call of the file by the method's name does
not resolve to it, or a call passes `*args` / `**kwargs`. A public function is also called
from the user's other modules unless the file itself is the program that runs it: its callers
are complete only when it is private (`_helper`), nested in another function, or reached from
the module's own top-level code (a script's `if __name__ == "__main__": main()`, a notebook
cell) through the file's calls, or nested in a function that is (a closure handed to an engine
still belongs to the program). A name read in a closure holds what the enclosing function binds
it to, unless some function declares it `nonlocal` or `global` (then unknown). A library
module's public `train_one_epoch(model, criterion)` therefore stays unknown. Every fact read here lies in the function, its callers up to the module
level and the names they read: the statements the language server links to it by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch_preflight.core.names import tail
from torch_preflight.core.semantic import NO_GRAD_CONTEXTS, EventKind, Kind

if TYPE_CHECKING:
    from torch_preflight.core.semantic import Event, Function, ModuleModel, Value
    from torch_preflight.core.source import Span

# Loss classes outside torch.nn whose forward applies the activation itself, by what their input
# must be: logits for a cross-entropy (log_softmax inside), for a binary cross-entropy with logits
# (sigmoid inside). timm's (timm/loss/cross_entropy.py, binary_cross_entropy.py).
CRITERION_FAMILY = {
    "timm.loss.SoftTargetCrossEntropy": "cross_entropy",
    "timm.loss.LabelSmoothingCrossEntropy": "cross_entropy",
    "timm.loss.cross_entropy.SoftTargetCrossEntropy": "cross_entropy",
    "timm.loss.cross_entropy.LabelSmoothingCrossEntropy": "cross_entropy",
    "timm.loss.BinaryCrossEntropy": "bce_logits",
    "timm.loss.binary_cross_entropy.BinaryCrossEntropy": "bce_logits",
}
MODULE_WRAPPERS = frozenset({"DistributedDataParallel", "DataParallel", "DDP", "FSDP", "FullyShardedDataParallel"})
_SELF_WRAPPERS = frozenset({"to", "cuda", "cpu", "half", "float", "bfloat16", "double", "train", "eval", "requires_grad_"})
# Module methods the PyTorch docs say return self, which other receivers spell with another meaning
# (`df.apply(fn)`, `tensor.type(dtype)`): the receiver's values only when every one is a module.
_MODULE_SELF_METHODS = frozenset({"apply", "share_memory", "to_empty", "type", "xpu", "ipu", "mtia"})
# Library functions whose documented return is the module they are given (its class kept): "the
# original module with the converted SyncBatchNorm layers" (a BatchNorm*D given alone becomes a new
# SyncBatchNorm), "the original module with the spectral/weight norm hook" or parametrization.
_MODULE_RETURNING = (
    "SyncBatchNorm.convert_sync_batchnorm",
    "nn.utils.spectral_norm",
    "nn.utils.weight_norm",
    "parametrizations.spectral_norm",
    "parametrizations.weight_norm",
)
_TRANSPARENT_DECORATORS = NO_GRAD_CONTEXTS | {"staticmethod", "classmethod", "torch.enable_grad"}
_DECLARED = re.compile(r"\b(?:nonlocal|global)\s+(\w+(?:[ \t]*,[ \t]*\w+)*)")
_STARRED = re.compile(r"[(,]\s*\*")
_STRINGS = re.compile("|".join((r'"""[\s\S]*?"""', r"'''[\s\S]*?'''", r'"(?:\\.|[^"\\\n])*"', r"'(?:\\.|[^'\\\n])*'", r"#[^\n]*")))


@dataclass(frozen=True, slots=True)
class Made:
    """One possible value: its kind and, when known, its class (qualified, or of the file)."""

    kind: Kind
    cls: str | None = None


Values = frozenset[Made] | None  # None: some possible value is unknown


def values_of(model: ModuleModel, name: str, scope: str) -> Values:
    """Every value `name` may hold in `scope` (see the module docstring); None when unknown."""
    memo: dict[tuple[str, str, bool], Values] = model.__dict__.setdefault("_tpf_values", {})
    key = (name, scope, model.__dict__.get("_tpf_external", False))  # see ModuleModel.external_kinds
    if key in memo:
        return memo[key]
    memo[key] = None  # a cycle reads as unknown
    found = memo[key] = _values_of(model, name, scope)
    return found


def param_values(model: ModuleModel, qualname: str, param: str) -> Values:
    """What parameter `param` of `qualname` holds: the join over every call site of the file."""
    memo: dict[tuple[str, str, bool], Values] = model.__dict__.setdefault("_tpf_params", {})
    key = (qualname, param, model.__dict__.get("_tpf_external", False))
    if key in memo:
        return memo[key]
    memo[key] = None
    found = memo[key] = _param_values(model, qualname, param)
    return found


def param_kind(model: ModuleModel, name: str, scope: str) -> Kind | None:
    """The kind of a parameter visible from `scope` (of `scope` or of a function around it) from
    its callers: the kind every possible value has, `Kind.UNKNOWN` when they are known and differ
    (or are instances of plain classes), None when some caller or argument is unknown."""
    owner = _param_owner(model, name, scope)
    if owner is None:
        return None
    found = param_values(model, owner, name)
    if not found:
        return None
    kinds = {m.kind for m in found}
    return kinds.pop() if len(kinds) == 1 else Kind.UNKNOWN


def value_made(model: ModuleModel, value: Value, scope: str, env: dict[str, Values] | None = None) -> Values:
    """Every value an expression may give; `env` overrides what some names hold (a name's earlier
    values while one of its own re-assignments is read: `model = DDP(model)`)."""
    if value.is_literal:
        return frozenset() if value.text.strip() == "None" else frozenset({Made(Kind.SCALAR)})
    if value.callee:
        callee = value.callee
        if tail(callee) in MODULE_WRAPPERS or callee == "torch.compile":
            call = _call_at(model, value, scope)
            inner_value = (call.keyword("module") or call.keyword("model") or (call.args[0] if call.args else None)) if call else None
            inner = value_made(model, inner_value, scope, env) if inner_value is not None else None
            if inner and all(m.kind is Kind.MODEL for m in inner):
                return inner  # the wrapped module's class
            if callee == "torch.compile":
                return None if model.kind_of_value(value, scope) is not Kind.MODEL else frozenset({Made(Kind.MODEL)})
            return frozenset({Made(Kind.MODEL)})
        if any(callee == f or callee.endswith("." + f) for f in _MODULE_RETURNING):
            call = _call_at(model, value, scope)
            given = (call.keyword("module") or (call.args[0] if call.args else None)) if call else None
            inner = value_made(model, given, scope, env) if given is not None else None
            if not inner or any(m.kind is not Kind.MODEL for m in inner):
                return None
            return frozenset(Made(Kind.MODEL, None if m.cls and "BatchNorm" in tail(m.cls) else m.cls) for m in inner)
        if callee in CRITERION_FAMILY:
            return frozenset({Made(Kind.LOSS_FN, callee)})
        cls = _local_class(model, callee, scope)
        if cls is not None:
            info = model.classes[cls]
            kind = Kind.MODEL if info.is_module else Kind.OPTIMIZER if model.kind_of_value(value, scope) is Kind.OPTIMIZER else Kind.UNKNOWN
            return frozenset({Made(kind, cls)})
        kind = model.kind_of_value(value, scope)
        if kind is Kind.UNKNOWN:
            return None
        return frozenset({Made(kind, callee if tail(callee)[:1].isupper() and "." in callee else None)})
    if value.method in _MODULE_SELF_METHODS and value.receiver:
        receiver = None if value.base == value.receiver else _receiver_call(model, value, scope)
        found = _name_values(model, value.receiver, scope, env) if receiver is None else value_made(model, receiver, scope, env)
        if found and all(m.kind is Kind.MODEL for m in found):
            return found
    if value.method in _SELF_WRAPPERS and value.receiver:
        if value.base == value.receiver:
            return _name_values(model, value.receiver, scope, env)
        receiver = _receiver_call(model, value, scope)  # `Net().to(device)`
        if receiver is not None:
            return value_made(model, receiver, scope, env)
    if value.base and not value.callee and not value.method and not value.is_binop and value.text.strip() == value.base:
        return _name_values(model, value.base, scope, env)
    kind = model.kind_of_value(value, scope)
    return None if kind is Kind.UNKNOWN else frozenset({Made(kind)})


def callers(model: ModuleModel, qualname: str) -> list[Event] | None:
    """Every call of `qualname` in the file, or None when some caller cannot be seen (see the
    module docstring)."""
    memo: dict[str, list[Event] | None] = model.__dict__.setdefault("_tpf_callers", {})
    if qualname not in memo:
        memo[qualname] = None  # a cycle through callers reads as unknown
        memo[qualname] = _callers(model, qualname)
    return memo[qualname]


# --- the inference --------------------------------------------------------------------------


def _name_values(model: ModuleModel, name: str, scope: str, env: dict[str, Values] | None) -> Values:
    if env and name in env:
        return env[name]
    return values_of(model, name, scope)


def _values_of(model: ModuleModel, name: str, scope: str) -> Values:
    if "." not in name and _rebound_elsewhere(model, name):
        return None  # `nonlocal name` / `global name`: another function re-binds it
    assigned = model.assignments(name, scope)
    if not assigned:
        owner = _param_owner(model, name, scope)
        return param_values(model, owner, name) if owner is not None else None
    home = assigned[0].function
    fn = model.functions.get(home)
    if "." not in name and fn is not None and name in fn.params:
        so_far: frozenset[Made] = param_values(model, home, name) or frozenset()
        if param_values(model, home, name) is None:
            return None  # its value on entry may flow through
    else:
        so_far = frozenset()
    head = name.partition(".")[0]
    for event in assigned:
        value = event.value
        if value is None or len(event.targets) != 1 or not event.span.contains(value.span):
            return None  # unpacked from a tuple, a `for` target: unknown
        env: dict[str, Values] | None = {name: so_far} if head in value.names or name == value.base else None
        made = value_made(model, value, event.function, env)
        if made is None:
            return None
        so_far = so_far | made
    return so_far or None


def _param_values(model: ModuleModel, qualname: str, param: str) -> Values:
    fn = model.functions.get(qualname)
    sites = callers(model, qualname)
    if fn is None or not sites or param not in fn.params:
        return None
    bound = 1 if fn.owner and "staticmethod" not in fn.decorators else 0
    # past a `*args` or a bare `*` the positions of the parameters are not those of the arguments
    signature = "".join(model.source.line(n) for n in range(fn.header.start.line, max(fn.first_body_line, fn.header.start.line) + 1))
    star, at = signature.find("*"), re.search(rf"\b{re.escape(param)}\b", signature)
    position = fn.params.index(param) - bound if star < 0 or (at is not None and at.start() < star) else -1
    found: frozenset[Made] = frozenset()
    for site in sites:
        value = site.keyword(param) or (site.args[position] if 0 <= position < len(site.args) else None)
        where = site.function
        if value is None:
            value = fn.defaults.get(param)
            where = fn.parent or ""
        if value is None:
            return None
        made = value_made(model, value, where)
        if made is None:
            return None
        found |= made
    return found or None


def _rebound_elsewhere(model: ModuleModel, name: str) -> bool:
    """Some function of the file declares `nonlocal name` or `global name`: its assignments re-bind
    the name of an enclosing scope, which the join over that scope's own assignments would miss."""
    declared: frozenset[str] | None = model.__dict__.get("_tpf_rebound")
    if declared is None:
        code = _code(model)
        found = (n.strip() for m in _DECLARED.finditer(code) for n in m.group(1).split(",")) if "nonlocal" in code or "global" in code else ()
        declared = model.__dict__["_tpf_rebound"] = frozenset(found)
    return name in declared


def _param_owner(model: ModuleModel, name: str, scope: str) -> str | None:
    """The function whose parameter `name` is, as seen from `scope` (it or a function around it)."""
    if "." in name:
        return None
    current: str | None = scope
    while current:
        fn = model.functions.get(current)
        if fn is None:
            return None
        if name in fn.params:
            return current
        if fn.owner:
            return None  # a method does not see the names of the class body
        current = fn.parent
    return None


def _callers(model: ModuleModel, qualname: str) -> list[Event] | None:
    fn = model.functions.get(qualname)
    if fn is None or fn.is_lambda or not qualname or any(d not in _TRANSPARENT_DECORATORS for d in fn.decorators):
        return None
    if fn.name.startswith("__") and fn.name != "__init__":
        return None
    owner = model.classes.get(fn.owner) if fn.owner else None
    if owner is not None and owner.is_module and fn.name == "forward":
        return None  # `module(x)` runs it
    if not fn.owner:
        key = fn.name
    elif fn.name == "__init__":
        if owner is None:
            return None
        key = owner.name
    elif fn.name.startswith("_"):
        key = f".{fn.name}"
    else:
        return None  # `x.step(...)` anywhere may be this method, on a receiver the file cannot tell apart
    calls, other = _occurrences(model, key, False)
    if not calls:
        return None
    if not fn.owner:
        sites = [e for e in model.calls_to.get(qualname, ()) if e.name and model.resolve_function(e.name, e.function) == qualname]
    elif owner is not None and fn.name == "__init__":
        sites = _constructions(model, owner.qualname)
    else:
        sites = [e for full, e in _method_calls(model).get(fn.name, ()) if model.resolve_function(full, e.function) == qualname]
    if (calls, other) != (len(sites), 0):  # some mention is not a call the file's events show: in a string?
        calls, other = _occurrences(model, key, True)
    if other or calls != len(sites):
        # handed to something that calls it with arguments the file does not show (an engine, a
        # thread, `partial`, a list of callbacks, a decorator), or called where the events cannot
        # tell it apart (another receiver, a comprehension, a same-named function)
        return None
    if any(_STARRED.search(model.source.slice(e.span)) for e in sites):
        return None
    public = not (fn.name.startswith("_") and fn.name != "__init__") and not (fn.parent and not fn.owner)
    if public and (model.imported or not any(not s.function or _reached(model, s.function) for s in sites)):
        return None  # a public function of a module others may import (or do: the checked file imports this one)
    return sites


def _reached(model: ModuleModel, qualname: str) -> bool:
    """The function runs from the module's own top-level code, through calls of the file."""
    memo: dict[str, bool] = model.__dict__.setdefault("_tpf_reached", {})
    if qualname not in memo:
        memo[qualname] = False  # a cycle reaches nothing
        sites = callers(model, qualname)
        fn = model.functions.get(qualname)
        nested = fn is not None and bool(fn.parent) and not fn.owner and not fn.is_lambda
        # a function nested in one the program runs is the program's, however it is run (an engine's step)
        memo[qualname] = (bool(sites) and any(not s.function or _reached(model, s.function) for s in sites or ())) or (
            nested and _reached(model, fn.parent or "")
        )
    return memo[qualname]


def _constructions(model: ModuleModel, cls: str) -> list[Event]:
    index: dict[str, list[Event]] | None = model.__dict__.get("_tpf_constructions")
    if index is None:
        index = {}
        for fn in model.functions.values():
            for e in fn.events:
                if e.kind is EventKind.CALL and e.name and not e.receiver:
                    found = _local_class(model, e.name, e.function)
                    if found is not None:
                        index.setdefault(found, []).append(e)
        model.__dict__["_tpf_constructions"] = index
    return index.get(cls, [])


def _method_calls(model: ModuleModel) -> dict[str, list[tuple[str, Event]]]:
    """Method name -> the calls of the file by that name on some receiver, with the dotted name
    called (`self.update`), memoised per model."""
    index: dict[str, list[tuple[str, Event]]] | None = model.__dict__.get("_tpf_method_calls")
    if index is None:
        index = {}
        for fn in model.functions.values():
            for e in fn.events:
                if e.receiver and e.name and e.kind not in (EventKind.ASSIGN, EventKind.AUG_ASSIGN, EventKind.RETURN):
                    method = tail(e.name)
                    index.setdefault(method, []).append((f"{e.receiver}.{method}", e))
        model.__dict__["_tpf_method_calls"] = index
    return index


def _occurrences(model: ModuleModel, key: str, code_only: bool) -> tuple[int, int]:
    """How the file's text (`code_only`: with strings and comments left out) uses a name: (calls,
    other uses). `key` is a plain name (`train`, `Trainer`) or an attribute (`._step`); definitions
    are not uses. Read from the text, which is the whole file's also in the language server's
    partial models."""
    memo: dict[tuple[str, bool], tuple[int, int]] = model.__dict__.setdefault("_tpf_occurrences", {})
    found = memo.get((key, code_only))
    if found is None:
        code = _code(model) if code_only else model.source.text
        attribute = key.startswith(".")
        calls = other = 0
        name = key.lstrip(".")
        start = code.find(name)
        while start >= 0:  # str.find: a fast scan, even of a 400 kB module asked about many names
            end = start + len(name)
            before = code[max(0, start - 8) : start].rstrip()
            if _word(code, start - 1) or _word(code, end) or before.endswith(("def", "class")) or before.endswith(".") != attribute:
                pass  # part of a longer name, its definition, or an attribute of that name (a plain name of it)
            elif code[end : end + 40].lstrip().startswith("("):
                calls += 1
            else:
                other += 1
            start = code.find(name, end)
        found = memo[(key, code_only)] = (calls, other)
    return found


def _code(model: ModuleModel) -> str:
    """The file's text with strings and comments left out (memoised per model)."""
    code: str | None = model.__dict__.get("_tpf_code")
    if code is None:
        code = model.__dict__["_tpf_code"] = _STRINGS.sub('""', model.source.text)
    return code


def _word(text: str, index: int) -> bool:
    return 0 <= index < len(text) and (text[index].isalnum() or text[index] == "_")


def _calls_by_span(model: ModuleModel, scope: str) -> dict[tuple[int, int, int, int], Event]:
    """A function's call events by the span of the call (memoised per model)."""
    memo: dict[str, dict[tuple[int, int, int, int], Event]] = model.__dict__.setdefault("_tpf_call_spans", {})
    found = memo.get(scope)
    if found is None:
        fn = model.functions.get(scope)
        found = memo[scope] = {_key(e.span): e for e in (fn.events if fn else ()) if e.kind is EventKind.CALL}
    return found


def _key(span: Span) -> tuple[int, int, int, int]:
    return (span.start.line, span.start.col, span.end.line, span.end.col)


def _call_at(model: ModuleModel, value: Value, scope: str) -> Event | None:
    """The call event of a call expression, with its arguments."""
    return _calls_by_span(model, scope).get(_key(value.span))


def _receiver_call(model: ModuleModel, value: Value, scope: str) -> Value | None:
    """The value of a method call's receiver when it is itself a call (`Net()` of `Net().to(dev)`)."""
    start = value.span.start
    for key, event in _calls_by_span(model, scope).items():
        if key[:2] == (start.line, start.col) and event.span != value.span and model.source.slice(event.span) == value.receiver:
            return _as_value(model, event)
    return None


def _as_value(model: ModuleModel, event: Event) -> Value:
    from torch_preflight.core.semantic import Value

    return Value(model.source.slice(event.span), event.span, callee=event.name if not event.receiver else None)


def _local_class(model: ModuleModel, name: str, scope: str) -> str | None:
    """The qualname of the class of the file `name` refers to from `scope` (nested classes too)."""
    classes = model.classes
    current: str | None = scope
    while current:
        if f"{current}.{name}" in classes:
            return f"{current}.{name}"
        fn: Function | None = model.functions.get(current)
        current = (fn.parent or fn.owner) if fn else None
    return name if name in classes else None
