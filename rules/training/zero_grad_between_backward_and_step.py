"""## What it does
Flags `zero_grad()` that runs after `backward()` and before `step()` of the same
optimizer in one iteration, with no other `backward()` in between.

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
from torch_preflight.core.semantic import EventKind
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
            for z_index in range(len(before) - 1, -1, -1):
                clear = before[z_index]
                if clear.kind is EventKind.BACKWARD:
                    break  # a backward after any clear: gradients are fresh
                if not clears(training, clear, optimizer, optimizers, step.function):
                    continue
                if clear.inner and not clear.name == "grad=None" and not (clear.receiver or "").endswith(".grad"):
                    break
                if not set(clear.guards) <= set(step.guards) or exclusive(clear, step):
                    break
                backward = next((b for b in reversed(before[:z_index]) if b.kind is EventKind.BACKWARD), None)
                if backward is None or exclusive(backward, step) or clear.span in seen:
                    break
                seen.add(clear.span)
                yield report(
                    META,
                    clear.span,
                    f"`{ctx.source.slice(clear.span)}` runs after `backward()` and before `{step.receiver}.step()`, "
                    "so the step applies cleared gradients",
                    related=[Related(backward.span, "backward()"), Related(step.span, "optimizer step")],
                    data={"optimizer": optimizer},
                )
                break
