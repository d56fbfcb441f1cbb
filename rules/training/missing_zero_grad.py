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
the two clears is found. It also asks, for each step, whether every backward that wrote into the
optimizer's parameters since their last clear was meant for it: a generator's loss computed
through the discriminator (`g_loss = bce(D(G(z)), valid)`) writes into `D` too, so a clear of
`D` placed before that backward leaves the generator's gradients in `D`'s next step. Which
modules a backward writes into comes from the data flow of its loss (module calls, cut by
`.detach()` and `no_grad`); the check stays silent when the optimizer's own losses also run
through the other networks (a joint loss meant for both, unless a step of an optimizer that
owns the module too already applied that loss, as an InfoGAN's information step does), when
`requires_grad` is toggled in
the iteration (pix2pix's `set_requires_grad(D, False)`), and when ownership is unknown. The
related information says where the update starts, which is where the clear belongs. A module
built by a class or factory of another module of the project (`D = models.Discriminator()`)
is known as one, as is anything whose `.parameters()` the file hands out.

A clear that runs only under an `if` its step does not share (a regularization block that
clears before its own backward) leaves the other iterations uncleared, and a second step of one
optimizer in the iteration with no clear since the first applies again what the first applied:
both are flagged at the backward where the clear belongs. Clears on an accumulation cadence are
TPF003's.

It also asks whether every path does it: a step in the `else`
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

import re
from collections.abc import Iterator

from torch_preflight.core.diagnostics import Applicability, Diagnostic, Fix, Related, Severity
from torch_preflight.core.edits import insert_statement
from torch_preflight.core.gradflow import backward_modules, parameter_owners, related
from torch_preflight.core.names import tail
from torch_preflight.core.semantic import Event, EventKind, Guard, Loop
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
        yield from _partly_cleared(training, tl.loop.header, tl.loop.function, tl.steps, tl.events, tl.loop.guards)
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
        yield from _partly_cleared(training, fn.header, fn.qualname, steps, events, ())


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


def _partly_cleared(
    training: TrainingModel, where: Span, scope: str, steps: tuple[Event, ...], events: tuple[Event, ...], outer: tuple[Guard, ...]
) -> Iterator[Diagnostic]:
    """Clears exist, but not of every stepped optimizer's parameters, or not on every path to its step."""
    clears = [e for e in events if e.kind is EventKind.ZERO_GRAD]
    for optimizer in stepped(training, steps):
        its_steps = [s for s in steps if training.optimizer_of(s) == optimizer and not s.inner]
        if not its_steps:
            continue
        scope = its_steps[0].function  # where the optimizer is named (a step helper's parameter)
        own = [c for c in clears if training.clears_optimizer(c, optimizer, scope)]
        if not own:
            owned = training.owned_modules(optimizer, scope) or frozenset()
            step = its_steps[0]
            backward = next((b for b in events if b.kind is EventKind.BACKWARD and feeds(training, events, b, step)), None)
            anchor = backward if backward is not None else step
            others = ", ".join(f"`{training.model.source.slice(c.span)}`" for c in clears[:2])
            at = events.index(anchor)
            previous = next((k for k in range(at - 1, -1, -1) if training.optimizer_of(events[k]) and not events[k].inner), -1)
            forward = next((e for e in events[previous + 1 : at] if _runs(training, e, owned)), None)
            before = [Related(forward.span, "clear its gradients before this forward")] if forward is not None else []
            start = _update_start(training, events, anchor, owned, outer)
            if start is not None and (forward is None or start != forward.span):
                before.insert(0, Related(start, f"the update of {', '.join(f'`{m}`' for m in sorted(owned))} starts here: clear them before it"))
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
        sometimes = _cleared_sometimes(training, where, optimizer, its_steps, own, events) or _applied_twice(training, where, optimizer, events)
        if sometimes is not None:
            yield sometimes
            continue
        yield from _foreign_gradients(training, where, scope, optimizer, its_steps[0], events, outer)
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


def _cleared_sometimes(
    training: TrainingModel, where: Span, optimizer: str, steps: list[Event], own: list[Event], events: tuple[Event, ...]
) -> Diagnostic | None:
    """Every clear of the optimizer's parameters sits under an `if` that its step does not share
    (stylegan2's `if d_regularize:` block clears before its own backward): on the iterations where
    the condition fails, the step applies the gradients of every iteration since the last clear.
    Steps that are themselves conditional (an accumulation cadence) are not asked."""
    for step in steps:
        clears = [c for c in own if not exclusive(c, step) and not c.inner]
        if not clears or len(clears) < len([c for c in own if not exclusive(c, step)]):
            continue
        if any(set(c.guards) <= set(step.guards) for c in clears) or not all(set(step.guards) < set(c.guards) for c in clears):
            continue
        conditions = [g for c in clears for g in c.guards if g not in step.guards]
        if any(g.cadence for g in conditions):
            continue  # a clear on an accumulation cadence: TPF003's finding
        if any(re.search(rf"\b{re.escape(tail(optimizer))}\b", g.text) for g in conditions):
            continue  # `if optimizer is not None:` holds whenever the step runs
        backward = next((b for b in events if b.kind is EventKind.BACKWARD and not b.inner and feeds(training, events, b, step)
                         and set(b.guards) <= set(step.guards) | set(clears[0].guards)), None)
        if backward is None or set(clears[0].guards) <= set(backward.guards):
            continue  # the backward runs only when the clear does
        condition = next(g for g in clears[0].guards if g not in step.guards)
        return report(
            META,
            backward.span,
            f"`{optimizer}` steps on every pass but its gradients are cleared only under `{condition.text}`, so on the other "
            "iterations they accumulate",
            related=[Related(step.span, "optimizer step"), *(Related(c.span, "the only clear, conditional") for c in clears[:2]),
                     Related(where, "training iteration")],
            data={"optimizer": optimizer},
        )
    return None


def _applied_twice(training: TrainingModel, where: Span, optimizer: str, events: tuple[Event, ...]) -> Diagnostic | None:
    """A second step of one optimizer in the iteration (stylegan2's regularization step) with no clear
    of its parameters since the first: it applies again what the backward before the first step
    wrote, on top of its own backward's gradients."""
    positions = [k for k, e in enumerate(events) if not e.inner and training.optimizer_of(e) == optimizer]
    for at in positions[1:]:
        step = events[at]
        own: Event | None = None  # the backward this step applies
        first: Event | None = None  # an earlier step of the optimizer
        for event in reversed(events[:at]):
            if event.inner or exclusive(event, step) or not set(event.guards) <= set(step.guards):
                if event.kind is EventKind.ZERO_GRAD and training.clears_optimizer(event, optimizer, step.function):
                    break  # a clear that may run: not known to be missing
                continue
            if event.kind is EventKind.ZERO_GRAD and training.clears_optimizer(event, optimizer, step.function):
                break
            if training.optimizer_of(event) == optimizer:
                if own is None:
                    break
                first = event
            elif event.kind is EventKind.BACKWARD and not event.no_grad:
                if first is None or own is None:
                    own = own or event
                    continue
                owned = training.owned_modules(optimizer, step.function)
                through = backward_modules(training.model, event)
                if owned is not None and through and not any(related(m, t) for m in owned for t in through):
                    continue  # it wrote into other networks only
                return report(
                    META,
                    own.span,
                    f"`{optimizer}` steps twice in the iteration with no clear in between: this step applies again the gradients "
                    f"of `{training.model.source.slice(event.span)}`, which the earlier step already applied",
                    related=[Related(event.span, "backward() already applied"), Related(first.span, "the earlier step"),
                             Related(step.span, "optimizer step"), Related(where, "training iteration")],
                    data={"optimizer": optimizer},
                )
    return None


def _foreign_gradients(
    training: TrainingModel, where: Span, scope: str, optimizer: str, step: Event, events: tuple[Event, ...], outer: tuple[Guard, ...]
) -> Iterator[Diagnostic]:
    """Walking back from `step` (round into the previous iteration) to the last clear of each module
    `optimizer` owns: a backward met on the way whose graph runs through that module but that feeds
    another optimizer's step (a generator's loss computed through the discriminator, after the
    discriminator was cleared) leaves its gradients in what `step` applies."""
    owned = training.owned_modules(optimizer, scope)
    if not owned or len(stepped(training, events)) < 2 or any(_touches_requires_grad(e) for e in events):
        return
    at = events.index(step)
    n = len(events)
    cleared = {m: False for m in sorted(owned)}  # a set: sorted, so messages do not depend on the hash seed
    foreign: list[tuple[int, list[str], bool]] = []
    for k in range(1, n):
        index = (at - k) % n
        event = events[index]
        if event.inner or exclusive(event, step):
            continue
        remaining = [m for m, done in cleared.items() if not done]
        if not remaining:
            break
        if event.kind is EventKind.ZERO_GRAD and training.clears_optimizer(event, optimizer, scope):
            modules = training.cleared_modules(event) if event.receiver != optimizer else None
            for m in remaining:
                if modules is None or any(related(m, c) for c in modules):
                    cleared[m] = True
        elif event.kind is EventKind.BACKWARD and not event.no_grad:
            through = backward_modules(training.model, event)
            hit = [m for m in remaining if any(related(m, x) for x in through)]
            if hit and optimizer not in _fed_by(training, events, index):
                foreign.append((index, hit, at - k < 0))
    if not all(cleared.values()):
        return  # a module never cleared at all: the finding above says so
    own_modules = {
        m for k, b in enumerate(events) if b.kind is EventKind.BACKWARD and optimizer in _fed_by(training, events, k)
        for m in backward_modules(training.model, b)
    }
    for index, hit, wrapped in foreign[:1]:
        backward = events[index]
        if not all(cleared[m] for m in hit):
            continue
        if not _kept_apart(training, events, index, owned, own_modules) and not _consumed(training, events, index, hit):
            continue
        modules = ", ".join(f"`{m}`" for m in hit)
        own = next((b for k, b in enumerate(events) if k > index and b.kind is EventKind.BACKWARD and optimizer in _fed_by(training, events, k)), None)
        if own is None and wrapped:  # the step's own backward comes first in the iteration
            own = next((b for k, b in enumerate(events[:at]) if b.kind is EventKind.BACKWARD and optimizer in _fed_by(training, events, k)), None)
        start = _after_steps(training, events, index, (*outer, *(own or step).guards))
        if start is None or wrapped:
            start = _update_start(training, events, own or step, frozenset(hit), outer)
        related_places = [Related(backward.span, f"this backward writes into {modules} and feeds another optimizer's step")]
        if start is not None:
            related_places.append(Related(start, f"clear the gradients of {modules} here, before their own update"))
        related_places += [Related(step.span, "optimizer step"), Related(where, "training iteration")]
        when = " in the previous iteration" if wrapped else ""
        yield report(
            META,
            (own or step).span,
            f"`{optimizer}` steps {modules} with the gradients that `{training.model.source.slice(backward.span)}`{when} wrote into "
            f"{'it' if len(hit) == 1 else 'them'}: that loss runs through {modules} but feeds another optimizer's step, and nothing "
            "clears them in between",
            related=related_places,
            data={"optimizer": optimizer},
        )


def _kept_apart(training: TrainingModel, events: tuple[Event, ...], index: int, owned: frozenset[str], own_modules: set[str]) -> bool:
    """The optimizer's own losses keep out of the other optimizers' networks (`D(G(z).detach())`), so a
    backward of theirs writing into its modules is no joint loss (a generator's loss through the
    discriminator), unlike an encoder's and a generator's shared loss followed by a generator-only
    one. Unknown ownership: not apart."""
    others: set[str] = set()
    for other in _fed_by(training, events, index):
        modules = training.owned_modules(other, next((e.function for e in events if training.optimizer_of(e) == other), events[index].function))
        if modules is None:
            return False
        others |= {m for m in modules if not any(related(m, o) for o in owned)}
    return not any(related(a, b) for a in others for b in own_modules)


def _consumed(training: TrainingModel, events: tuple[Event, ...], index: int, hit: list[str]) -> bool:
    """A step that the backward at `index` feeds already applied its gradients to `hit` (an InfoGAN's
    information optimizer, which owns the generator too): no joint loss can mean them for another step."""
    function = events[index].function
    for other in _fed_by(training, events, index):
        modules = training.owned_modules(other, next((e.function for e in events if training.optimizer_of(e) == other), function))
        if modules is not None and any(related(m, o) for m in hit for o in modules):
            return True
    return False


def _touches_requires_grad(event: Event) -> bool:
    """`set_requires_grad(netD, False)`, `D.requires_grad_(False)`, `p.requires_grad = False`: which
    modules a backward reaches then depends on state the events do not follow."""
    if event.kind is EventKind.CALL:
        return "requires_grad" in (event.name or "")
    return event.kind is EventKind.ASSIGN and any(t.endswith(".requires_grad") for t in event.targets)


def _fed_by(training: TrainingModel, events: tuple[Event, ...], index: int) -> set[str]:
    """The optimizers whose steps apply what the backward at `index` produces: those stepped after it
    (round into the next iteration) before the next backward that follows a step."""
    found: set[str] = set()
    n = len(events)
    for k in range(1, n):
        event = events[(index + k) % n]
        optimizer = training.optimizer_of(event)
        if optimizer:
            found.add(optimizer)
        elif event.kind is EventKind.BACKWARD and found:
            break
    return found


def _anchor(event: Event, keep: tuple[Guard, ...]) -> Span:
    """Where a statement inserted before `event` goes: before the outermost `if` around it that is not one of `keep`."""
    extra = [g for g in event.guards if g not in keep]
    return extra[0].span if extra else event.stmt


def _after_steps(training: TrainingModel, events: tuple[Event, ...], index: int, keep: tuple[Guard, ...]) -> Span | None:
    """The first statement after the optimizer steps that follow the event at `index` (outside their own `if`)."""
    last = None
    for k in range(index + 1, len(events)):
        event = events[k]
        if training.optimizer_of(event):
            last = event
        elif last is not None and not event.inner and event.kind is not EventKind.ZERO_GRAD:
            if not {g for g in last.guards if g not in keep} & set(event.guards):
                return _anchor(event, keep)
        if event.kind is EventKind.BACKWARD and last is not None:
            break
    return None


def _update_start(training: TrainingModel, events: tuple[Event, ...], backward: Event, owned: frozenset[str], outer: tuple[Guard, ...]) -> Span | None:
    """Where the update that `backward` belongs to begins, so a clear goes before it: the first statement
    of its block after the iteration's previous optimizer step, or, for the iteration's first update, the
    latest input of the first forward its loss is computed from (`z = randn(...)` before `G(z)`)."""
    if backward not in events:
        return None
    index = events.index(backward)
    previous = next((k for k in range(index - 1, -1, -1) if training.optimizer_of(events[k]) and not events[k].inner), None)
    keep = (*outer, *backward.guards)
    if previous is not None:  # the first statement after that step in the backward's block
        block = set(backward.guards)
        return next(
            (_anchor(e, (*outer, *events[previous].guards)) for e in events[previous + 1 : index]
             if not e.inner and not training.optimizer_of(e) and block <= set(e.guards)),
            None,
        )
    # The iteration's first update: it starts with the first forward its loss is computed from (a
    # generator's, for a discriminator fed `G(z).detach()`), right after that forward's latest input.
    names = set(re.findall(r"[A-Za-z_]\w*", backward.receiver or "")) | {n for a in backward.args for n in a.names}
    feeding: list[Event] = []
    for event in reversed(events[:index]):
        if event.kind is EventKind.ASSIGN and not event.inner and event.value is not None and set(event.targets) & names:
            names |= set(event.value.names)
            feeding.insert(0, event)
    modules = parameter_owners(training.model) | owned
    for at, event in enumerate(feeding):
        runs = [c for c in events if c.stmt == event.stmt and c.kind is EventKind.CALL and (training.is_forward(c) or _runs(training, c, modules))]
        if runs:
            inputs = set(event.value.names) if event.value is not None else set()
            prepared = [f for f in feeding[:at] if set(f.targets) & inputs]
            return _anchor(prepared[-1] if prepared else event, keep)
    forward = next((e for e in events[:index] if _runs(training, e, owned)), None)
    return _anchor(forward, keep) if forward is not None else None


def _runs(training: TrainingModel, event: Event, owned: frozenset[str]) -> bool:
    """`event` runs the forward of one of `owned` (modules known as such: their parameters are handed to the optimizer)."""
    if event.kind is not EventKind.CALL or not (event.args or event.keywords):
        return False
    target = training.forward_target(event) or (event.name if event.name in owned or (event.name or "").removeprefix("self.") in owned else None)
    return bool(target) and any(related(m, target or "") for m in owned)
