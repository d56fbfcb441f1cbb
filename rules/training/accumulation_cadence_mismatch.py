"""## What it does
Flags gradient accumulation whose clear and step run at different cadences: `step()`
runs under an accumulation guard (`if (i + 1) % k == 0:`) while `zero_grad()` runs on
every iteration, or the reverse, `zero_grad()` under the guard and `step()` on every
iteration.

## Why is this bad?
In the first case every iteration throws away the gradients the previous ones
accumulated, so each step uses one micro-batch and the effective batch size is `k`
times smaller than intended (with a loss scaled by `1/k`, the learning rate is too).
In the second case every iteration steps with the running sum of up to `k` iterations'
gradients, so updates grow and repeat.

The clear counts as sharing the step's cadence when it sits under any modulo guard, or
after the step under the same guard. Loops whose `backward()` only runs under the step's
own guard (a GAN generator updated every `n_critic` iterations) are not flagged.

## Example
```python
for i, (x, y) in enumerate(loader):
    optimizer.zero_grad()
    (criterion(model(x), y) / k).backward()
    if (i + 1) % k == 0:
        optimizer.step()
```

## Use instead
```python
for i, (x, y) in enumerate(loader):
    (criterion(model(x), y) / k).backward()
    if (i + 1) % k == 0:
        optimizer.step()
        optimizer.zero_grad()
```

## Fix safety
There is no automatic fix: moving the clear changes which gradients each step sees.

## References
- [Gradient accumulation (PyTorch forums)](https://discuss.pytorch.org/t/why-do-we-need-to-set-the-gradients-manually-to-zero-in-pytorch/4903)
"""

from __future__ import annotations

from collections.abc import Iterator

from torch_preflight.core.diagnostics import Diagnostic, Related, Severity
from torch_preflight.core.semantic import EventKind
from torch_preflight.rules.base import Context, RuleMeta, report
from torch_preflight.rules.training._steps import cadence_guards, clears, extra_guards, feeds, stepped, under

META = RuleMeta(
    code="TPF003",
    name="accumulation-cadence-mismatch",
    message="zero_grad() and step() run at different accumulation cadences",
    fix_title=None,
    severity=Severity.ERROR,
)


def check(ctx: Context) -> Iterator[Diagnostic]:
    training = ctx.training
    for tl in training.training_loops:
        loop, events = tl.loop, tl.events
        optimizers = stepped(training, tl.steps)
        for step in tl.steps:
            optimizer = training.optimizer_of(step)
            if optimizer is None:
                continue
            step_cadence = cadence_guards(step, loop)
            step_extra = extra_guards(step, loop)
            for clear in events:
                if clear.inner or not clears(training, clear, optimizer, optimizers, step.function):
                    continue
                clear_cadence = cadence_guards(clear, loop)
                clear_extra = extra_guards(clear, loop)
                if step_cadence and not clear_extra:
                    guard = step_cadence[-1]
                    at, message, related = clear, (
                        f"`{ctx.source.slice(clear.span)}` runs every iteration but `{step.receiver}.step()` only when "
                        f"`{guard.text}`: the accumulated gradients are thrown away"
                    ), Related(step.span, "guarded optimizer step")
                elif clear_cadence and not step_extra:
                    guard = clear_cadence[-1]
                    at, message, related = step, (
                        f"`{step.receiver}.step()` runs every iteration but gradients are cleared only when "
                        f"`{guard.text}`: each step re-applies the accumulated gradients"
                    ), Related(clear.span, "guarded zero_grad()")
                else:
                    continue
                # Some backward must run outside the guard, or nothing accumulates.
                if any(b.kind is EventKind.BACKWARD and not under(b, guard) and feeds(training, events, b, step) for b in events):
                    yield report(META, at.span, message, related=[related])
