"""## What it does
Flags a training loop that runs `backward()` and `optimizer.step()` but never clears the
gradients: no `optimizer.zero_grad()`, no `model.zero_grad()`, no `p.grad = None`.

## Why is this bad?
`backward()` adds into `.grad`; it does not overwrite it. Without clearing, every step
applies the sum of all gradients seen so far, so the effective learning rate grows with
each iteration and training diverges or silently underperforms. No exception is raised.

Clearing anywhere in the iteration counts: at the top, at the end after `step()`, inside
a helper function of the same file, inside an LBFGS closure, per model in a GAN. Loops
that accumulate on purpose (micro-steps, a modulo guard) clear in the outer iteration and
are not flagged. When the iteration calls code this file cannot see that receives the
optimizer, the rule stays silent.

## Example
```python
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
```

## Use instead
```python
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
```

## Fix safety
The fix inserts `optimizer.zero_grad()` as the first statement of the loop body. It is
unsafe: a loop that accumulates gradients on purpose across iterations changes meaning.

## References
- [torch.optim.Optimizer.zero_grad](https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html)
"""

from __future__ import annotations

from collections.abc import Iterator

from torch_preflight.core.diagnostics import Applicability, Diagnostic, Fix, Related, Severity
from torch_preflight.core.edits import insert_statement
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF001",
    name="missing-zero-grad",
    message="Training loop never clears gradients",
    fix_title="Insert `optimizer.zero_grad()` at the top of the loop",
    severity=Severity.ERROR,
)


def check(ctx: Context) -> Iterator[Diagnostic]:
    training = ctx.training
    for tl in training.training_loops:
        if tl.clears or training.opaque_training_call(tl.events):
            continue
        optimizers = list(dict.fromkeys(o for o in (training.optimizer_of(s) for s in tl.steps) if o))
        loop = tl.loop
        fix = None
        direct = all(not s.via for s in tl.steps)
        if direct and loop.body.start.line > loop.header.end.line:
            statements = [f"{name}.zero_grad()" for name in optimizers]
            edits = tuple(insert_statement(ctx.source, loop.body.start.line, loop.body_indent, s) for s in statements)
            fix = Fix(f"Insert `{'`, `'.join(statements)}` at the top of the loop", edits, Applicability.UNSAFE)
        names = ", ".join(f"`{o}`" for o in optimizers)
        yield report(
            META,
            loop.header,
            f"Training loop steps {names} but never clears gradients, so they accumulate across iterations",
            fix,
            related=[Related(s.span, "optimizer step") for s in tl.steps],
            data={"optimizer": optimizers[0]} if optimizers else None,
        )
