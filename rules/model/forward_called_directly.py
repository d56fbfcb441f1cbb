"""## What it does
Flags `model.forward(x)` called on a module from outside its own class.

## Why is this bad?
`nn.Module.__call__` does more than call `forward`: it runs forward pre-hooks and hooks,
which is how `DistributedDataParallel` and FSDP synchronise and gather parameters, how
AMP, quantisation, pruning and profiling hooks apply, and how `register_forward_hook`
feature extractors see activations. `model.forward(x)` silently skips all of it: DDP
gradients stop being reduced correctly, FSDP sees unsharded parameters missing, hooks
never fire.

Inside a module, `super().forward(...)` and `self.inner.forward(...)` in a wrapper are
normal and not flagged. The receiver must be an nn.Module: an instance of a plain class of the
file (built in the same function or in its class's `__init__`) is not, and when the file writes
its networks from scratch (plain classes with their own `forward` and `backward`), a receiver
nothing identifies as a module is not flagged either. A parameter is a module when every caller
of the file passes one (`select_action(policy, obs)` with `policy = Policy()`, or a
`DistributedDataParallel(...)` or `convert_sync_batchnorm(...)` of one, also from a closure that
reads the enclosing function's `policy`), whatever its name; when a caller passes something else
or something the file cannot read, or other modules may call the function, only its name speaks.

## Example
```python
logits = model.forward(images)
```

## Use instead
```python
logits = model(images)
```

## Fix safety
The fix replaces `model.forward(` with `model(`. It is safe: calling the module runs the
same `forward` plus the hooks the caller registered.

## References
- [torch.nn.Module.__call__ and hooks](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
"""

from __future__ import annotations

from collections.abc import Iterator

from torch_preflight.core.diagnostics import Applicability, Diagnostic, Edit, Fix, Severity
from torch_preflight.core.semantic import ClassInfo, EventKind, Kind
from torch_preflight.core.source import Position, Span
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF104",
    name="forward-called-directly",
    message="`module.forward(...)` skips the module's hooks (DDP, FSDP, AMP, forward hooks)",
    fix_title="Call the module instead: `model(...)`",
    severity=Severity.WARNING,
)


def check(ctx: Context) -> Iterator[Diagnostic]:
    model = ctx.model
    for fn in model.functions.values():
        for event in fn.events:
            if event.kind is not EventKind.CALL or not event.receiver or not (event.name or "").endswith(".forward"):
                continue
            receiver = event.receiver
            if receiver.startswith("super()") or receiver in model.classes:
                continue
            owner = model.enclosing_class(event.function)
            if owner is not None and owner.is_module and (receiver == "self" or receiver.startswith("self.")):
                continue
            if model.kind_of(receiver, event.function) is not Kind.MODEL or _known_non_module(ctx, receiver, event.function):
                continue
            prefix = f"{receiver}.forward"
            start = event.span.start
            fix = None
            if ctx.source.slice(event.span).startswith(prefix + "("):
                span = Span(start, Position(start.line, start.col + len(prefix)))
                fix = Fix(f"Call `{receiver}(...)` instead", (Edit.replace(span, receiver),), Applicability.SAFE)
            yield report(
                META,
                event.span,
                f"`{receiver}.forward(...)` bypasses `{receiver}.__call__`, so forward hooks (DDP, FSDP, AMP, "
                f"registered hooks) do not run; call `{receiver}(...)`",
                fix,
            )


_TORCHSCRIPT = frozenset({"torch.jit.script", "torch.jit.script_method", "torch.jit.export", "torch.jit.interface"})


def _known_non_module(ctx: Context, receiver: str, scope: str) -> bool:
    """The spelling says "model" but the file says otherwise: TorchScript code (where `.forward()`
    is how an interface is called), an instance of a class of this file that is not an nn.Module
    (skorch's `NeuralNet.forward(X)` is its inference API; `self.fc` built in `__init__` too),
    a value nothing in the file identifies when the file writes its own networks from scratch
    (plain classes with a `forward` and a `backward` of their own), or a pytest fixture parameter
    whose fixture in this file does not return a module."""
    model = ctx.model
    fn = model.functions.get(scope)
    while fn is not None:
        if any(d in _TORCHSCRIPT for d in fn.decorators):
            return True
        fn = model.functions.get(fn.parent) if fn.parent else None
    assigned = model.assignments(receiver, scope)
    if assigned:
        value = assigned[-1].value
        if value is None:
            return False
        constructed = [cls for c in (value.callee, *value.calls) if c for cls in [_local_class(ctx, c, scope)] if cls]
        if constructed:
            return not constructed[0].is_module
        if model.kind_of_value(value, scope) is Kind.MODEL:
            return False  # a library's module (`nn.Linear(...)`)
    if _hand_written_networks(ctx):
        return True  # nothing says what it is, and the file's own networks have a forward() that is their API
    fn = model.functions.get(scope)
    if fn is None or receiver not in fn.params:
        return False
    fixtures = [f for f in model.functions.values() if f.name == receiver and any(d.endswith("pytest.fixture") for d in f.decorators)]
    if not fixtures:
        return False
    for fixture in fixtures:
        for event in fixture.events:
            if event.kind is EventKind.RETURN and event.function == fixture.qualname and event.value is not None:
                if model.kind_of_value(event.value, fixture.qualname) is Kind.MODEL:
                    return False
    return True


def _local_class(ctx: Context, name: str, scope: str) -> ClassInfo | None:
    """The class of this file `name` refers to from `scope` (classes nested in functions included)."""
    classes = ctx.model.classes
    current: str | None = scope
    while current:
        if f"{current}.{name}" in classes:
            return classes[f"{current}.{name}"]
        fn = ctx.model.functions.get(current)
        current = (fn.parent or fn.owner) if fn else None
    return classes.get(name)


def _hand_written_networks(ctx: Context) -> bool:
    """The file defines a plain class (not an nn.Module) with both `forward` and `backward`:
    layers or networks whose gradients are computed by hand, called through `.forward(...)`."""
    return any(not cls.is_module and "forward" in cls.methods and "backward" in cls.methods for cls in ctx.model.classes.values())
