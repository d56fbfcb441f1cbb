"""## What it does
Flags `zero_grad()` that runs after `backward()` and before `step()` of the same
optimizer in one iteration, with no other `backward()` in between, or between two
`backward()` passes whose gradients that step was meant to apply.

## Why is this bad?
`zero_grad()` wipes the gradients `backward()` just computed, so `step()` applies zero
(or `None`) gradients: the parameters never move, or only weight decay and momentum
move them. The loss stays flat and nothing raises.

GANs that clear one model and step another (`netD.zero_grad()` then `optimizerG.step()`
after `errG.backward()`), a clear in the other branch of an `if` than the step (skip a step
on NaN), and clears that run only under a condition the step does not share are not
flagged. A model's `zero_grad()` counts as clearing the optimizer when the loop steps a
single optimizer, or when the optimizer is known to own that model's parameters
(`netD.zero_grad()` clears what `optimizerD = Adam(netD.parameters())` steps).

With two backward passes before one step (a critic's real and fake halves), a clear between
them wipes the first half: flagged unless the first pass's gradients were read or applied
before the clear (`x.grad` for an adversarial example, a step in between) or an unreadable call
runs there. A conditional clear after the unconditional one (`p.grad = None` for a few
parameters) does not excuse it.

## Example
```python
loss.backward()
optimizer.zero_grad()
optimizer.step()
```

## Use instead
```python
optimizer.zero_grad()
loss.backward()
optimizer.step()
```

## Fix safety
There is no automatic fix: where the clear belongs (top of the iteration, or after the
step) is a choice for the author.

## References
- [torch.optim: taking an optimization step](https://pytorch.org/docs/stable/optim.html#taking-an-optimization-step)
"""

from __future__ import annotations

from collections.abc import Iterator

from torch_preflight.core.diagnostics import Diagnostic, Related, Severity
from torch_preflight.core.gradflow import backward_modules, related
from torch_preflight.core.semantic import Event, EventKind
from torch_preflight.core.training import TrainingModel
from torch_preflight.rules.base import Context, RuleMeta, report
from torch_preflight.rules.training._steps import clears, exclusive, step_units, stepped

META = RuleMeta(
    code="TPF002",
    name="zero-grad-between-backward-and-step",
    message="zero_grad() between backward() and step() discards the gradients",
    fix_title=None,
    severity=Severity.ERROR,
)


def check(ctx: Context) -> Iterator[Diagnostic]:
    training = ctx.training
    seen: set = set()
    for _loop, events in step_units(training):
        optimizers = stepped(training, events)
        for index, step in enumerate(events):
            optimizer = training.optimizer_of(step)
            if not optimizer or step.inner:
                continue
            before = events[:index]
            # The last clear of this optimizer before the step, and a backward before it.
            fresh = None  # a backward after the clear: the step applies its gradients
            for z_index in range(len(before) - 1, -1, -1):
                clear = before[z_index]
                if clear.kind is EventKind.BACKWARD:
                    if fresh is not None:
                        break
                    fresh = clear
                    continue
                if training.optimizer_of(clear) and fresh is not None:
                    break
                if not clears(training, clear, optimizer, optimizers, step.function):
                    continue
                if clear.inner and not clear.name == "grad=None" and not (clear.receiver or "").endswith(".grad"):
                    break
                if not set(clear.guards) <= set(step.guards) or exclusive(clear, step):
                    continue  # it clears only sometimes (a filtered `p.grad = None`): an earlier clear may still wipe
                b_index = next((k for k in range(z_index - 1, -1, -1) if before[k].kind is EventKind.BACKWARD), None)
                backward = before[b_index] if b_index is not None else None
                if backward is None or exclusive(backward, step) or clear.span in seen:
                    break
                if fresh is not None and not _wasted(training, events[b_index:z_index + 1], optimizer, step.function, len(optimizers) > 1):
                    break
                seen.add(clear.span)
                yield _report(ctx, clear, backward, step, fresh, optimizer)
                break


def _report(ctx: Context, clear: Event, backward: Event, step: Event, fresh: Event | None, optimizer: str) -> Diagnostic:
    cleared = ctx.source.slice(clear.span)
    if fresh is None:
        message = f"`{cleared}` runs after `backward()` and before `{step.receiver}.step()`, so the step applies cleared gradients"
    else:
        message = (
            f"`{cleared}` wipes the gradients of `{ctx.source.slice(backward.span)}` before `{step.receiver}.step()` applies "
            f"them: the step sees only what `{ctx.source.slice(fresh.span)}` wrote"
        )
    related = [Related(backward.span, "backward()"), *([Related(fresh.span, "backward() after the clear")] if fresh else []),
               Related(step.span, "optimizer step")]
    return report(META, clear.span, message, related=related, data={"optimizer": optimizer})


def _wasted(training: TrainingModel, events: tuple[Event, ...], optimizer: str, scope: str, several: bool) -> bool:
    """The clear (last of `events`) between two backward passes of one step wipes the first one's
    (first of `events`) gradients unused: the first writes into what the optimizer steps, and nothing
    between it and the clear steps, reads gradients (`x.grad` for an adversarial example, a
    per-loss gradient copy) or calls code that may."""
    backward, clear = events[0], events[-1]
    if backward.inner or clear.inner or exclusive(backward, clear):
        return False
    owned = training.owned_modules(optimizer, scope)
    through = backward_modules(training.model, backward)
    if owned is not None and not any(related(m, t) for m in owned for t in through):
        return False
    if owned is None and not through and several:
        return False
    for event in events[1:-1]:
        if training.optimizer_of(event):
            return False  # a step applied them
        texts = [v.text for v in (event.value, *event.args, *(v for _, v in event.keywords)) if v is not None]
        if any(".grad" in t or "autograd" in t for t in texts) or any(t.endswith(".grad") for t in event.targets):
            return False
        if event.kind is EventKind.CALL and not training.is_forward(event) and training.is_opaque(event):
            return False
    return True
