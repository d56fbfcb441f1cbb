"""## What it does
Flags `scheduler.step()` that runs before `optimizer.step()` in the same iteration:
at the top of the training step, or at the top of an epoch whose batches step the
optimizer afterwards.

## Why is this bad?
Since PyTorch 1.1 the learning-rate scheduler must step after the optimizer. Stepping
it first skips the first value of the schedule: warm-up starts one step late, a step
decay fires one epoch early, and with `OneCycleLR` the run can end with an error from
stepping past the total. PyTorch only warns once, at runtime.

Schedulers that step after the optimizer, diffusion noise schedulers
(`scheduler.step(noise_pred, t, sample)`), and schedulers built on another optimizer
than the one stepped are not flagged.

## Example
```python
for epoch in range(epochs):
    scheduler.step()
    train_one_epoch(model, loader, optimizer)
```

## Use instead
```python
for epoch in range(epochs):
    train_one_epoch(model, loader, optimizer)
    scheduler.step()
```

## Fix safety
There is no automatic fix: moving the call changes the learning rate of every epoch.

## References
- [How to adjust learning rate](https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate)
"""

from __future__ import annotations

from collections.abc import Iterator

from torch_preflight.core.diagnostics import Diagnostic, Related, Severity
from torch_preflight.core.semantic import Event, EventKind
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF011",
    name="scheduler-before-optimizer-step",
    message="scheduler.step() runs before optimizer.step()",
    fix_title=None,
    severity=Severity.WARNING,
)


def check(ctx: Context) -> Iterator[Diagnostic]:
    training = ctx.training
    seen: set = set()
    for loop in ctx.model.loops.values():
        if not training.may_hold(loop.function, EventKind.STEP):
            continue
        events = training.iteration(loop)
        for index, event in enumerate(events):
            if event.inner or event.span in seen or not training.is_scheduler_step(event) or event.args or event.keywords:
                continue
            if event.receiver and "noise" in event.receiver.lower():
                continue
            before = [e for e in events[:index] if training.optimizer_of(e)]
            after = [e for e in events[index + 1 :] if training.optimizer_of(e)]
            if before or not after:
                continue
            optimizer = _scheduled_optimizer(ctx, event)
            if optimizer is not None and all(training.optimizer_of(s) != optimizer for s in after):
                continue
            seen.add(event.span)
            yield report(
                META,
                event.span,
                f"`{event.receiver}.step()` runs before `{after[0].receiver}.step()`; the first learning rate of the schedule is skipped",
                related=[Related(after[0].span, "optimizer step")],
            )


def _scheduled_optimizer(ctx: Context, event: Event) -> str | None:
    assignments = ctx.model.assignments(event.receiver or "", event.function)
    if len(assignments) != 1:
        return None
    value = assignments[0].value
    text = value.text if value else ""
    if "(" not in text:
        return None
    first = text[text.index("(") + 1 :].split(",")[0].strip()
    return first if first.replace(".", "").replace("_", "").isalnum() else None
