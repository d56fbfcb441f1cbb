"""## What it does
Flags `total += loss` (or `total = total + loss`) inside a loop that back-propagates
(a training loop, or one that accumulates gradients and steps elsewhere) or inside a
framework's `training_step` (Lightning, a Hugging Face `Trainer`: the framework calls it
once per step), where `loss` is a tensor that still carries its autograd graph and
`total` lives across iterations.

## Why is this bad?
Adding a graph-carrying tensor to an accumulator makes the accumulator part of the graph.
Every iteration's graph, with all its saved activations, stays alive until the
accumulator is dropped, usually at the end of the epoch. Memory grows each step until
the run dies of CUDA out-of-memory, hours in.

`.item()`, `float(loss)` and `.detach()` are fine. An accumulator reset inside the
iteration (a per-step sum of loss terms) and one that is itself back-propagated later
(a chunked loss kept on purpose) are not flagged.

## Example
```python
total_loss = 0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total_loss += loss
```

## Use instead
```python
    total_loss += loss.item()
```

## Fix safety
The fix rewrites the operand to `loss.item()`. It is safe when the accumulator is only
used as a number afterwards, and unsafe when the code calls tensor methods on it (they
would fail on a Python float).

## References
- [PyTorch FAQ: accumulating history across your training loop](https://pytorch.org/docs/stable/notes/faq.html)
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from torch_preflight.core.diagnostics import Applicability, Diagnostic, Edit, Fix, Severity
from torch_preflight.core.semantic import GRAPH_KINDS, Event, EventKind, Value
from torch_preflight.core.source import Span
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF005",
    name="loss-accumulated-with-graph",
    message="Loss tensor accumulated with its autograd graph",
    fix_title="Accumulate `loss.item()` instead",
    severity=Severity.ERROR,
)

_DETACH = frozenset({"item", "detach", "tolist", "numpy", "cpu_item"})


def check(ctx: Context) -> Iterator[Diagnostic]:
    seen: set[Span] = set()
    units = [tl.events for tl in ctx.training.backward_loops] + [events for _, events in ctx.training.step_hooks]
    for events in units:
        for index, event in enumerate(events):
            operand = _accumulated_operand(ctx, events, index, event)
            if operand is None or event.span in seen:
                continue
            seen.add(event.span)
            target = event.targets[0]
            yield report(
                META,
                event.span,
                f"`{target}` accumulates `{operand.text}` with its autograd graph; every iteration's graph stays in memory",
                _fix(ctx, event, operand),
                data={"target": target, "operand": operand.text},
            )


def _accumulated_operand(ctx: Context, events: tuple[Event, ...], index: int, event: Event) -> Value | None:
    if event.no_grad or not event.targets or event.value is None:
        return None
    target = event.targets[0]
    if event.kind is EventKind.AUG_ASSIGN:
        if event.name not in ("Add", "Sub"):
            return None
        operand = event.value
    elif event.kind is EventKind.ASSIGN and event.value.is_binop and target in event.value.names and len(event.targets) == 1:
        operand = _other_operand(ctx, event, target)
        if operand is None:
            return None
    else:
        return None
    if not _carries_graph(ctx, events, operand, event):
        return None
    # An accumulator reset earlier in the same iteration is a per-step sum, not a leak.
    if any(e.kind is EventKind.ASSIGN and target in e.targets and e is not event for e in events[:index] if not e.inner or event.inner):
        return None
    # Back-propagating through the accumulator later means the graph is wanted.
    fn_events = ctx.training.expanded(event.function)
    if any(e.kind is EventKind.BACKWARD and e.receiver and (e.receiver == target or e.receiver.startswith(target + ".")) for e in fn_events):
        return None
    return operand


def _carries_graph(ctx: Context, events: tuple[Event, ...], operand: Value, event: Event) -> bool:
    if set(operand.methods) & _DETACH or operand.is_literal:
        return False
    if operand.callee in ("float", "int", "round"):
        return False
    backward_names = {e.receiver for e in events if e.kind is EventKind.BACKWARD and e.receiver}
    if operand.base and not operand.callee and not operand.method and operand.base in backward_names:
        return True
    return ctx.model.kind_of_value(operand, event.function) in GRAPH_KINDS


def _other_operand(ctx: Context, event: Event, target: str) -> Value | None:
    """For `total = total + loss`, the `loss` operand as a Value with its own span."""
    assert event.value is not None
    text = event.value.text
    match = re.fullmatch(rf"\s*{re.escape(target)}\s*\+\s*([A-Za-z_][\w.]*)\s*", text) or re.fullmatch(
        rf"\s*([A-Za-z_][\w.]*)\s*\+\s*{re.escape(target)}\s*", text
    )
    if not match:
        return None
    start = ctx.source.offset(event.value.span.start) + match.start(1)
    span = Span(ctx.source.position(start), ctx.source.position(start + len(match.group(1))))
    name = match.group(1)
    return Value(text=name, span=span, base=name, names=(name.split(".")[0],))


def _fix(ctx: Context, event: Event, operand: Value) -> Fix | None:
    if not re.fullmatch(r"[A-Za-z_][\w.]*", operand.text):
        return None
    target = event.targets[0]
    fn = ctx.model.functions.get(event.function)
    uses_as_tensor = fn is not None and re.search(rf"\b{re.escape(target)}\s*\.\s*(?!item\b)\w+\s*\(", ctx.source.slice(fn.span) if event.function else ctx.source.text)
    applicability = Applicability.UNSAFE if uses_as_tensor else Applicability.SAFE
    return Fix(META.fix_title or "", (Edit.replace(operand.span, f"{operand.text}.item()"),), applicability)
