"""Shared questions the training rules ask of one iteration (not a rule: no META).

Everything here is conservative: when the answer is unclear it says "no", so the rules
that build on it stay silent.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from torch_preflight.core.names import tail
from torch_preflight.core.semantic import Event, EventKind, Guard, Kind, Loop
from torch_preflight.core.training import TrainingModel

_SCALE_CALL = re.compile(r"^\s*([A-Za-z_][\w.]*)\.scale\(\s*([A-Za-z_][\w.]*)\s*\)\s*$")
_CLEAR_GRAD = ("grad=None",)


def extra_guards(event: Event, loop: Loop) -> tuple[Guard, ...]:
    """The `if` guards around `event` inside `loop`'s body (not the ones around the loop)."""
    n = len(loop.guards)
    if event.guards[:n] == loop.guards:
        return event.guards[n:]
    return event.guards


def cadence_guards(event: Event, loop: Loop) -> tuple[Guard, ...]:
    return tuple(g for g in extra_guards(event, loop) if g.cadence)


def under(event: Event, guard: Guard) -> bool:
    """The event runs only when `guard` holds (same `if`, same branch)."""
    return any(g.span == guard.span and g.negated == guard.negated for g in event.guards)


def exclusive(a: Event, b: Event) -> bool:
    """The two events sit in opposite branches of one `if`."""
    return any(g.span == h.span and g.negated != h.negated for g in a.guards for h in b.guards)


def stepped(training: TrainingModel, events: tuple[Event, ...] | list[Event]) -> list[str]:
    """Optimizers stepped in these events, in order, without repeats."""
    return list(dict.fromkeys(o for o in (training.optimizer_of(e) for e in events) if o))


def is_grad_clear(event: Event) -> bool:
    return event.kind is EventKind.ZERO_GRAD and (event.name in _CLEAR_GRAD or bool(event.receiver and ".grad" in event.receiver))


def clears(training: TrainingModel, event: Event, optimizer: str, optimizers: list[str], scope: str | None = None) -> bool:
    """`event` clears the gradients that `optimizer` steps: its own zero_grad(), a model's
    zero_grad() / `p.grad = None` when the loop steps that one optimizer only, or, with several
    optimizers (a GAN), a clear of a module the optimizer is known to own (`netD.zero_grad()`
    for `optD = Adam(netD.parameters())`). `scope`: where `optimizer` is named (the step's function)."""
    if event.kind is not EventKind.ZERO_GRAD or not event.receiver:
        return False
    if is_grad_clear(event):
        return len(optimizers) == 1
    if event.receiver == optimizer:
        return True
    if len(optimizers) == 1 and training.model.kind_of(event.receiver, event.function) is Kind.MODEL:
        return True
    # known to own what the clear resets (`optimizer.zero_grad()` at the call of `do_step(optimizer)`,
    # whose parameter `opt` owns the same model)
    owned = training.owned_modules(optimizer, scope if scope is not None else event.function)
    cleared = training.cleared_modules(event)
    return owned is not None and cleared is not None and training.clears_optimizer(event, optimizer, scope or event.function)


def scaled_loss(event: Event) -> tuple[str, str] | None:
    """For `scaler.scale(loss).backward()`: (scaler, loss)."""
    if event.kind is not EventKind.BACKWARD or not event.receiver:
        return None
    match = _SCALE_CALL.match(event.receiver)
    return (match.group(1), match.group(2)) if match else None


def backward_tensor(event: Event) -> str | None:
    """The dotted name back-propagated by `loss.backward()` / `scaler.scale(loss).backward()`,
    None for framework calls (`accelerator.backward(loss)`) and expressions."""
    if event.kind is not EventKind.BACKWARD or event.args or not event.receiver:
        return None
    scaled = scaled_loss(event)
    if scaled:
        return scaled[1]
    if re.fullmatch(r"[A-Za-z_][\w.]*", event.receiver):
        return event.receiver
    return None


def named_like_model(training: TrainingModel, receiver: str, scope: str) -> bool:
    return training.model.kind_of(receiver, scope) is Kind.MODEL


def step_units(training: TrainingModel) -> Iterator[tuple[Loop | None, tuple[Event, ...]]]:
    """Each training loop's iteration, then the straight-line body of every function that
    back-propagates and steps outside any loop (a `train_step` helper called from elsewhere)."""
    for tl in training.training_loops:
        yield tl.loop, tl.events
    for fn in training.model.functions.values():
        if not fn.qualname or fn.is_lambda or not training.may_train(fn.qualname):
            continue
        events = tuple(e for e in training.expanded(fn.qualname) if not e.loops)
        if any(e.kind is EventKind.BACKWARD for e in events) and stepped(training, events):
            yield None, events


def guard_text_divisor(guard: Guard) -> str | None:
    match = re.search(r"%\s*\(?\s*([A-Za-z_][\w.]*|\d+)", guard.text)
    return match.group(1) if match else None


def same_name(a: str | None, b: str | None) -> bool:
    return bool(a and b and (a == b or tail(a) == tail(b)))


def feeds(training: TrainingModel, events: tuple[Event, ...], backward: Event, step: Event) -> bool:
    """`backward` produces gradients for `step`: the first optimizer step after it (wrapping
    round to the next iteration) is `step`'s optimizer."""
    try:
        start = events.index(backward)
    except ValueError:
        return False
    ordered = events[start + 1 :] + events[:start]
    target = training.optimizer_of(step)
    for event in ordered:
        optimizer = training.optimizer_of(event)
        if optimizer:
            return optimizer == target
    return False
