"""## What it does
Flags three misuses of `torch.amp.GradScaler` in a training step that back-propagates
through `scaler.scale(loss).backward()`:

- a plain `optimizer.step()` instead of `scaler.step(optimizer)`;
- `scaler.step(optimizer)` with no `scaler.update()` in the iteration;
- gradient clipping (`clip_grad_norm_` / `clip_grad_value_`) before
  `scaler.unscale_(optimizer)`.

## Why is this bad?
The scaled backward multiplies every gradient by the scale factor (65536 at the start).
A plain `optimizer.step()` applies those gradients unscaled, including the infs and
NaNs `scaler.step` would have skipped: the weights blow up at once. Without
`scaler.update()` the scale never adapts, so overflowing steps are skipped forever or
gradients underflow. Clipping scaled gradients clips at a threshold thousands of times
too small (in scaled units), which silently turns clipping into a tiny learning rate.

## Example
```python
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
optimizer.step()
```

## Use instead
```python
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
```

## Fix safety
The fix rewrites `optimizer.step()` to `scaler.step(optimizer)`. It is safe: it is what
the scaled backward requires, and `scaler.step` only skips steps with inf/NaN gradients.
The other two findings have no fix.

## References
- [Automatic mixed precision: typical usage](https://pytorch.org/docs/stable/notes/amp_examples.html)
"""

from __future__ import annotations

from collections.abc import Iterator

from torch_preflight.core.diagnostics import Applicability, Diagnostic, Edit, Fix, Related, Severity
from torch_preflight.core.names import tail
from torch_preflight.core.semantic import Event, EventKind, Kind
from torch_preflight.rules.base import Context, RuleMeta, report
from torch_preflight.rules.training._steps import exclusive, scaled_loss, step_units

META = RuleMeta(
    code="TPF015",
    name="grad-scaler-misuse",
    message="GradScaler used incorrectly",
    fix_title="Use `scaler.step(optimizer)`",
    severity=Severity.ERROR,
)

_CLIPS = frozenset({"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"})


def check(ctx: Context) -> Iterator[Diagnostic]:
    seen: set = set()
    for _loop, events in step_units(ctx.training):
        for diagnostic in _check_unit(ctx, events):
            if diagnostic.span not in seen:
                seen.add(diagnostic.span)
                yield diagnostic


def _check_unit(ctx: Context, events: tuple[Event, ...]) -> Iterator[Diagnostic]:
    model = ctx.model
    for index, backward in enumerate(events):
        scaled = scaled_loss(backward)
        if scaled is None:
            continue
        scaler = scaled[0]
        if model.kind_of(scaler, backward.function) is not Kind.SCALER:
            continue
        after = events[index + 1 :]
        scaler_steps = [e for e in after if e.kind is EventKind.STEP and e.receiver == scaler]
        stepped = {e.args[0].base for e in scaler_steps if e.args and e.args[0].base}
        for event in after:
            if event.kind is EventKind.STEP and event.receiver and event.receiver != scaler and not event.args and not event.keywords:
                if model.kind_of(event.receiver, event.function) is not Kind.OPTIMIZER or event.receiver in stepped:
                    continue
                if exclusive(event, backward) or any(exclusive(event, s) for s in scaler_steps):
                    continue
                if event.function != backward.function:
                    continue
                fix = Fix(f"Use `{scaler}.step({event.receiver})`", (Edit.replace(event.span, f"{scaler}.step({event.receiver})"),), Applicability.SAFE)
                yield report(
                    META,
                    event.span,
                    f"`{event.receiver}.step()` applies the gradients scaled by `{scaler}`; use `{scaler}.step({event.receiver})`",
                    fix,
                    related=[Related(backward.span, "scaled backward")],
                )
        for step in scaler_steps:
            if not any(e.kind is EventKind.CALL and e.name == f"{scaler}.update" for e in events):
                yield report(
                    META,
                    step.span,
                    f"`{scaler}.step()` without `{scaler}.update()`: the loss scale never adapts",
                    related=[Related(backward.span, "scaled backward")],
                )
        unscaled: set[str] = set()
        for event in after:
            if event.kind is EventKind.CALL and event.name == f"{scaler}.unscale_":
                unscaled.add(event.args[0].base if event.args and event.args[0].base else "*")
            if event in scaler_steps:
                break
            if event.kind is EventKind.CALL and tail(event.name) in _CLIPS and (event.name or "").startswith("torch.nn.utils"):
                if not unscaled and scaler_steps:
                    yield report(
                        META,
                        event.span,
                        f"Gradients are clipped while still scaled by `{scaler}`; call `{scaler}.unscale_(optimizer)` first",
                        related=[Related(backward.span, "scaled backward")],
                    )
