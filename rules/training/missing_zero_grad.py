"""## What it does
Flags a training loop that runs `backward()` and `optimizer.step()` but never clears the
gradients: no `optimizer.zero_grad()`, no `model.zero_grad()`, no `p.grad = None`.

## Why is this bad?
`backward()` adds into `.grad`; it does not overwrite it. Without clearing, every step
applies the sum of all gradients seen so far, so the effective learning rate grows with
each iteration and training diverges or silently underperforms. No exception is raised.

Clearing anywhere in the iteration counts: at the top, at the end after `step()`, inside
a helper function (of the same file or another module of the project, to any depth), inside
an LBFGS closure, in an ignite handler. Loops that accumulate on purpose (micro-steps, a
modulo guard) clear in the outer iteration and are not flagged. When the iteration calls
code that cannot be read and receives the optimizer, the rule stays silent.

With several optimizers (a GAN), each one's parameters must be cleared: the rule knows
which modules an optimizer owns from where it was built (`Adam(netD.parameters())`) and
which modules a clear resets (`netG.zero_grad()` resets only `netG`), so dropping one of
the two clears is found. It also asks whether every path does it: a step in the `else`
branch of an `if` whose clear sits only in the other branch is flagged there. An ignite
`Engine(update_fn)` update function and a Lightning `training_step` that steps its own
optimizers are iterations too.

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
from torch_preflight.core.names import tail
from torch_preflight.core.semantic import Event, EventKind, Loop
from torch_preflight.core.source import Span
from torch_preflight.core.training import TrainingModel
from torch_preflight.rules.base import Context, RuleMeta, report
from torch_preflight.rules.training._steps import exclusive, feeds, stepped

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
        if training.opaque_training_call(tl.events):
            continue
        if not tl.clears:
            yield _never_cleared(ctx, tl.loop, tl.steps, tl.events)
            continue
        yield from _partly_cleared(training, tl.loop.header, tl.loop.function, tl.steps, tl.events)
    for fn, events in training.framework_steps:
        steps = tuple(e for e in events if training.optimizer_of(e))
        if training.opaque_training_call(events):
            continue
        if not any(e.kind is EventKind.ZERO_GRAD for e in events):
            backward = next(e for e in events if e.kind is EventKind.BACKWARD)
            names = ", ".join(f"`{o}`" for o in stepped(training, steps))
            yield report(
                META,
                backward.span,
                f"`{fn.name}()` runs once per training iteration and steps {names} but never clears gradients, "
                "so they accumulate across iterations",
                related=[Related(fn.header, "called by the framework every iteration"), *(Related(s.span, "optimizer step") for s in steps)],
                data={"optimizer": stepped(training, steps)[0]},
            )
            continue
        yield from _partly_cleared(training, fn.header, fn.qualname, steps, events)


def _never_cleared(ctx: Context, loop: Loop, steps: tuple[Event, ...], events: tuple[Event, ...]) -> Diagnostic:
    training = ctx.training
    optimizers = stepped(training, steps)
    fix = None
    direct = all(not s.via for s in steps)
    if direct and loop.body.start.line > loop.header.end.line:
        statements = [f"{name}.zero_grad()" for name in optimizers]
        edits = tuple(insert_statement(ctx.source, loop.body.start.line, loop.body_indent, s) for s in statements)
        fix = Fix(f"Insert `{'`, `'.join(statements)}` at the top of the loop", edits, Applicability.UNSAFE)
    names = ", ".join(f"`{o}`" for o in optimizers)
    backwards = [e for e in events if e.kind is EventKind.BACKWARD and not e.inner][:2]
    # where the clear usually goes: before the iteration's first forward, or its backward
    forward = next((e for e in events if not e.inner and training.is_forward(e)), None)
    before = [Related(forward.span, "clear the gradients before this forward")] if forward is not None else []
    return report(
        META,
        loop.header,
        f"Training loop steps {names} but never clears gradients, so they accumulate across iterations",
        fix,
        related=[*(Related(s.span, "optimizer step") for s in steps), *before, *(Related(b.span, "backward()") for b in backwards)],
        data={"optimizer": optimizers[0]} if optimizers else None,
    )


def _partly_cleared(training: TrainingModel, where: Span, scope: str, steps: tuple[Event, ...], events: tuple[Event, ...]) -> Iterator[Diagnostic]:
    """Clears exist, but not of every stepped optimizer's parameters, or not on every path to its step."""
    clears = [e for e in events if e.kind is EventKind.ZERO_GRAD]
    for optimizer in stepped(training, steps):
        own = [c for c in clears if training.clears_optimizer(c, optimizer, scope)]
        its_steps = [s for s in steps if training.optimizer_of(s) == optimizer and not s.inner]
        if not its_steps:
            continue
        if not own:
            owned = training.owned_modules(optimizer, scope) or frozenset()
            step = its_steps[0]
            backward = next((b for b in events if b.kind is EventKind.BACKWARD and feeds(training, events, b, step)), None)
            anchor = backward if backward is not None else step
            others = ", ".join(f"`{training.model.source.slice(c.span)}`" for c in clears[:2])
            forward = next((e for e in events if training.is_forward(e) and any(tail(m) == tail(training.forward_target(e)) for m in owned)), None)
            before = [Related(forward.span, "clear its gradients before this forward")] if forward is not None else []
            yield report(
                META,
                anchor.span,
                f"`{optimizer}` steps the parameters of {', '.join(f'`{m}`' for m in sorted(owned))} but nothing in the iteration "
                f"clears them ({others} clears other modules), so they accumulate across iterations",
                related=[Related(step.span, "optimizer step"), *before, Related(where, "training iteration"),
                         *(Related(c.span, "clears other parameters") for c in clears[:2])],
                data={"optimizer": optimizer},
            )
            continue
        for step in its_steps:
            if any(not exclusive(c, step) for c in own):
                continue
            # the branch runs its own backward too (an AMP / plain pair of paths); a step that only
            # applies what a shared backward produced is the skip-on-non-finite idiom
            if not any(b.kind is EventKind.BACKWARD and not exclusive(b, step) and all(exclusive(b, c) for c in own) for b in events):
                continue
            yield report(
                META,
                step.span,
                f"On this path `{optimizer}` steps without clearing its gradients: the only `zero_grad()` sits in the other branch",
                related=[*(Related(c.span, "zero_grad() in the other branch") for c in own[:2]), Related(where, "training iteration")],
                data={"optimizer": optimizer},
            )
