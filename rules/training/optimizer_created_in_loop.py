"""## What it does
Flags an optimizer constructed inside the loop that steps it: every iteration builds a
new `torch.optim.Adam(...)` (or any optimizer) and steps it once. A step with a
closure that back-propagates (`optimizer.step(closure)`, as L-BFGS needs) counts as a
step of that loop.

## Why is this bad?
Optimizer state (momentum buffers, Adam's running moments and step count) lives in the
optimizer object. A new optimizer each step starts from zero every time: momentum never
builds up, Adam's bias correction treats every step as the first, and the learning
rate schedule attached to the old optimizer stops applying. Training runs, slower and
worse, with no error.

Optimizers created once per run, per fold or per task in an outer loop (the steps run
in a nested loop), and ones created under a condition (re-creating after unfreezing
layers) are not flagged.

## Example
```python
for x, y in loader:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    optimizer.zero_grad()
    criterion(model(x), y).backward()
    optimizer.step()
```

## Use instead
```python
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for x, y in loader:
    optimizer.zero_grad()
    criterion(model(x), y).backward()
    optimizer.step()
```

## Fix safety
There is no automatic fix: the construction may depend on values computed in the loop.

## References
- [torch.optim](https://pytorch.org/docs/stable/optim.html)
"""

from __future__ import annotations

from collections.abc import Iterator

from torch_preflight.core.diagnostics import Diagnostic, Related, Severity
from torch_preflight.core.semantic import EventKind, Kind
from torch_preflight.rules.base import Context, RuleMeta, report
from torch_preflight.rules.training._steps import extra_guards

META = RuleMeta(
    code="TPF010",
    name="optimizer-created-in-loop",
    message="Optimizer created inside the step loop resets its state every step",
    fix_title=None,
    severity=Severity.ERROR,
)


def check(ctx: Context) -> Iterator[Diagnostic]:
    training = ctx.training
    for tl in training.training_loops:
        stepped = {training.optimizer_of(s): s for s in tl.steps if not s.inner}
        for event in tl.events:
            if event.kind is not EventKind.ASSIGN or event.inner or event.via or len(event.targets) != 1 or event.value is None:
                continue
            name = event.targets[0]
            if name not in stepped or extra_guards(event, tl.loop):
                continue
            if not event.value.callee:
                continue
            with ctx.model.external_kinds():  # a factory of another module of the project
                if ctx.model.kind_of_callee(event.value, event.function, 0) is not Kind.OPTIMIZER:
                    continue
            yield report(
                META,
                event.value.span,
                f"`{name}` is created anew on every iteration of the loop that steps it, so its state "
                "(momentum, Adam moments) restarts from zero each step",
                related=[Related(stepped[name].span, "optimizer step")],
                data={"optimizer": name},
            )

