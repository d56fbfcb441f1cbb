"""## What it does
Flags an epoch loop that puts the model in evaluation mode (`model.eval()`, directly or
in a function it calls) and trains it in the same loop, but never calls `model.train()`
inside the loop. The finding sits where training runs in eval mode: the epoch loop when it
trains in its own body, else the batch loop nested in it or in the training function it calls
(`train_one_epoch()`), or the first forward of a step function without a loop of its own
(`train_iter()`); the `eval()` call, the epoch loop and the start of the called training
function (where its `train()` belongs) are related locations.

An `eval()` later in the pass that nothing undoes before the next one is found the same way
where the pass does switch modes elsewhere: walking back from the training forward through its
own pass, then round each enclosing loop's back edge, the first mode call met on that model is
an `eval()` (a GAN's sampling block `if step % 100 == 0: G.eval(); save_image(G(z))`, an accuracy
pass after the batch loop while a loss evaluation inside it switches back itself, a validation
helper that leaves the model in eval mode). That finding sits where `train()` belongs: the top of
the loop's pass (the loop nested in it, or the start of the training function it calls), with
the `eval()`, the end of its block, the call that runs it and the loop related. An evaluation
followed by `break`, `return` or `raise` ends the run and is not flagged.

Which module is trained comes from what each optimizer stepped in the loop owns
(`SGD(linear_classifier.parameters())`): an `eval()` on a module no optimizer owns (a frozen
backbone under a trained linear head) is legitimate. A module that no visible forward runs but
an optimizer of the pass owns (`trainer = DiffusionTrainer(net_model)`; `loss = trainer(x)`) is
walked back from the backward before that optimizer's step.

Training reached only from other modules (the model a parameter, or an attribute of a trainer
object) that sets no mode on its way is flagged when an evaluation function of the same file,
handed the same model the same way (another function taking it as a parameter, another method of
the same trainer class on the same attribute), puts it in eval mode unconditionally and nothing in
the file ever calls its `train()`: callers run the two in turn. Hooks of a framework's classes
(Lightning callbacks, Hugging Face `TrainerCallback`s) are left alone.

## Why is this bad?
`model.eval()` sticks until `model.train()` undoes it. After the first evaluation every
later epoch trains with dropout off and batch norm frozen on its running statistics:
the model overfits, or batch norm never adapts, and the loss curves look plausible.

The rule needs the evaluated model to be the trained one: its name appears in an
optimizer's construction or in a `.train()` call elsewhere in the file, or its forward runs
with gradients on in a loop of the same iteration that back-propagates and steps (a model
whose optimizer `accelerator.prepare` returns). A model put in eval mode through a called
function's parameter is matched under the name the loop passes. A `.train()` call
anywhere in the loop's iteration (before training, or after evaluating) silences it.
Teacher and EMA models that are never trained are not flagged, and neither are models whose
class the project defines without dropout or batch norm (`Linear`/`ReLU` only): eval mode
trains them exactly as train mode does. `Net(...).to(device)` and `model = model.to(device)`
keep the class known.

## Example
```python
model.train()
for epoch in range(epochs):
    train_one_epoch(model, loader, optimizer)
    evaluate(model, val_loader)  # calls model.eval()
```

## Use instead
```python
for epoch in range(epochs):
    model.train()
    train_one_epoch(model, loader, optimizer)
    evaluate(model, val_loader)
```

## Fix safety
The fix inserts `model.train()` as the first statement of the epoch loop. It is unsafe:
a model meant to stay in eval mode while training (frozen batch norm) changes behaviour.

## References
- [torch.nn.Module.train](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.train)
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from torch_preflight.core.diagnostics import Applicability, Diagnostic, Fix, Related, Severity, cite_line
from torch_preflight.core.edits import insert_statement
from torch_preflight.core.names import tail
from torch_preflight.core.semantic import Event, EventKind, Function, Kind, Loop, ModuleModel
from torch_preflight.core.source import Span
from torch_preflight.rules.base import Context, RuleMeta, report
from torch_preflight.rules.training._mode_flow import LoopEval, Names, leaves_after, loop_evals, loop_run
from torch_preflight.rules.training._modes import (
    first_statement,
    has_mode_layers,
    model_key,
    same_model_calls,
    sibling_mode_call,
    unset_from_entry,
)

META = RuleMeta(
    code="TPF009",
    name="missing-train-mode",
    message="Epoch loop leaves the model in eval mode for training",
    fix_title="Insert `model.train()` at the top of the loop",
    severity=Severity.ERROR,
)


def check(ctx: Context) -> Iterator[Diagnostic]:
    training = ctx.training
    reported: set[Span] = set()
    evaluations: set[Span] = set()  # the `eval()` calls reported, each once
    for loop in ctx.model.loops.values():
        if not training.may_hold(loop.function, EventKind.EVAL_MODE):
            continue
        events = training.iteration(loop)
        evals = [e for e in events if e.kind is EventKind.EVAL_MODE and not e.inner and e.receiver]
        if not evals or any(e.kind is EventKind.TRAIN_MODE for e in events):
            continue
        if not any(e.kind is EventKind.BACKWARD for e in events) or not any(training.optimizer_of(e) for e in events):
            continue
        for evaluation in evals:
            receiver = _as_passed(ctx, evaluation, events) or evaluation.receiver or ""
            if not _trained(ctx, receiver, events) and not _trained(ctx, evaluation.receiver or "", events):
                continue
            owned = _owned(ctx, events)
            if owned is not None and model_key(_outer_name(ctx, loop, evaluation) or receiver) not in owned:
                continue  # no optimizer of the loop owns it: a frozen module kept in eval mode on purpose
            if evaluation.function == loop.function and leaves_after(ctx.model, evaluation.stmt, inside=False):
                continue  # the evaluation ends the run (`model.eval(); test(); break`): no pass trains after it
            if not has_mode_layers(ctx.model, receiver, loop.function, ctx.project):
                continue  # no dropout or batch norm: eval mode trains exactly as train mode does
            first = _trains_after(events, evaluation)
            since = "from the first iteration on" if first else "from the second iteration on"
            where = _where_it_trains(ctx, loop, events)
            if where is None:
                anchor, related = loop.header, [Related(evaluation.span, "switches to eval mode")]
                message = (
                    f"`{receiver}.eval()` runs {'before the training step ' if first else ''}in this loop and nothing in it "
                    f"calls `{receiver}.train()`: {since} the model trains in eval mode"
                )
            else:
                anchor, entry, kind = where
                related = [Related(evaluation.span, "switches to eval mode"), Related(loop.header, "epoch loop")]
                if entry is not None:
                    related.append(Related(first_statement(entry), f"`{entry.name}()` starts without switching the model back with `train()`"))
                message = (
                    f"`{receiver}.eval()` runs in the epoch loop ({cite_line(loop.header.start.line)}) "
                    f"{'before the training ' if first else ''}and nothing calls `{receiver}.train()`: "
                    f"{since.replace('iteration', 'epoch')} this {kind} trains in eval mode"
                )
            if anchor in reported:
                break
            reported.add(anchor)
            evaluations.add(evaluation.span)
            yield report(
                META, anchor, message, _fix(ctx, loop, receiver, evaluation), related=related, data={"model": receiver}
            )
            break
    yield from _sibling_evaluation(ctx, reported)
    yield from _round_the_loop(ctx, reported, evaluations)


def _sibling_evaluation(ctx: Context, reported: set[Span]) -> Iterator[Diagnostic]:
    """Training reached only from other modules (`train_epoch(model, ...)`, or a trainer's
    `train_epoch()` on `self.model`) that sets no mode on its way, while an evaluation function or
    method of the same file, handed the same model the same way, puts it in eval mode and nothing
    in the file ever calls its `train()`: callers run the two in turn, so every training pass after
    the first evaluation runs in eval mode."""
    training = ctx.training
    for scope, index, anchor, events in _entry_training(ctx):
        forwards = [e for e in events if training.is_forward(e) and not e.no_grad]
        names = {model_key(training.forward_target(e)) for e in forwards}
        if len(names) != 1 or anchor in reported:
            continue
        name = training.forward_target(forwards[0]) or ""
        if not unset_from_entry(training, scope, index, name) or not has_mode_layers(ctx.model, name, scope, ctx.project):
            continue
        evaluation = sibling_mode_call(training, scope, name, EventKind.EVAL_MODE)
        if evaluation is None or same_model_calls(training, scope, name, EventKind.TRAIN_MODE):
            continue
        fn = ctx.model.functions[scope]
        other = ctx.model.functions.get(evaluation.function)
        reported.add(anchor)
        yield report(
            META,
            anchor,
            f"Nothing in this file calls `{name}.train()`, and `{other.qualname if other else 'an evaluation'}()` here "
            f"leaves the model it is given in eval mode: after the first evaluation `{fn.qualname}()` trains in eval mode",
            related=[Related(evaluation.span, "switches to eval mode"),
                     Related(first_statement(fn), f"`{fn.name}()` starts without `{name}.train()`")],
            data={"model": name},
        )


def _round_the_loop(ctx: Context, reported: set[Span], evaluations: set[Span]) -> Iterator[Diagnostic]:
    """An `eval()` later in the pass (a sampling block, an accuracy pass after the batch loop, an
    evaluation helper that never switches back) that nothing undoes before the next pass reaches
    the training forward round the loop, although the pass may set the mode elsewhere (a helper
    called under a cadence switches back itself). Reported where `train()` belongs: the top of the
    loop's pass, or of the training function it calls."""
    training = ctx.training
    looping = {loop.function for loop in ctx.model.loops.values()}  # a back edge is a loop's: its function sees the whole pass
    for scope, fn in ctx.model.functions.items():
        owner = ctx.model.classes.get(fn.owner or "")
        if scope not in looping or fn.is_lambda or (owner is not None and owner.owns_loop):
            continue
        events = training.expanded(scope)
        for found in loop_evals(training, scope):
            if not _owned_or_trained(ctx, found, events) or not has_mode_layers(ctx.model, found.name, scope, ctx.project):
                continue
            anchor, related = _where_train_belongs(ctx, found, events)
            if anchor in reported or found.evaluation.span in evaluations:
                continue
            reported.add(anchor)
            evaluations.add(found.evaluation.span)
            loop = ctx.model.loops.get(found.loop)
            fix = _fix(ctx, loop, found.name, found.evaluation) if loop is not None and anchor == loop.header else None
            caller = _evaluating_call(ctx, found)
            what = (
                f"`{tail(caller.name or '')}()` ({cite_line(caller.stmt.start.line)}) puts `{found.name}` in eval mode"
                if caller is not None else f"`{found.name}.eval()` ({cite_line(found.evaluation.span.start.line)}) runs"
            )
            yield report(
                META,
                anchor,
                f"{what} later in the same pass and nothing switches it back with `train()` before the next pass: "
                f"from the second pass on `{found.name}` trains in eval mode",
                fix,
                related=related,
                data={"model": found.name},
            )


def _owned_or_trained(ctx: Context, found: LoopEval, events: tuple[Event, ...]) -> bool:
    """The forwarded model is one the loop's optimizers train: among the modules whose parameters
    they own when every one is known (a frozen backbone no optimizer owns may stay in eval mode),
    else by the file's other evidence (`_trained`)."""
    first, last = loop_run(events, found.index, found.loop)
    run = events[first : last + 1]
    owned = _owned(ctx, run)
    if owned is None:
        return _trained(ctx, found.name, run) or _trained(ctx, found.forward.name or "", run)
    return model_key(found.name) in owned


def _outer_name(ctx: Context, loop: Loop, event: Event) -> str | None:
    """The receiver of an event of `loop`'s iteration in the names of the loop's function."""
    expanded = ctx.training.expanded(loop.function)
    index = next((i for i, e in enumerate(expanded) if e.span == event.span and e.via == event.via and e.loops == event.loops), None)
    return Names(ctx.model, expanded).outer(index, event.receiver) if index is not None else None


def _owned(ctx: Context, events: tuple[Event, ...]) -> set[str] | None:
    """The models whose parameters the optimizers stepped in `events` own; None when one is unknown."""
    owned: set[str] = set()
    for event in events:
        optimizer = ctx.training.optimizer_of(event)
        modules = ctx.training.owned_modules(optimizer, event.function) if optimizer else frozenset()
        if modules is None:
            return None
        owned |= {model_key(m) for m in modules}
    return owned


def _where_train_belongs(ctx: Context, found: LoopEval, events: tuple[Event, ...]) -> tuple[Span, list[Related]]:
    """The top of the pass that trains: a loop nested in the looping function (its header), the
    training function the loop calls (its loop over the data, or its first statement for a step
    function), else the loop's own header; with the `eval()`, the end of the block it opens, the
    call that runs it and the loop as related locations."""
    model = ctx.model
    loop = model.loops.get(found.loop)
    chain = [found.scope, *found.forward.via]
    related = [Related(found.evaluation.span, "switches to eval mode"), Related(found.forward.stmt, "trains here in eval mode")]
    end = _block_end(model, events, found.evaluation)
    if end is not None:
        related.append(Related(end, f"the block ends without `{found.name}.train()`"))
    caller = _evaluating_call(ctx, found)
    related.extend([Related(caller.stmt, "evaluates here")] if caller is not None else [])
    if loop is None:
        return found.forward.stmt, [r for r in related if r.span != found.forward.stmt]
    related.append(Related(loop.header, "loop"))
    depth = found.forward.loops.index(found.loop)
    below = [model.loops[i] for i in found.forward.loops[depth + 1 :] if i in model.loops]
    level = chain.index(loop.function) if loop.function in chain else len(chain)
    # the training function the pass calls (`train_one_epoch()`, a step helper), where its `train()` may belong
    callee = next((model.functions[q] for q in chain[level + 1 :] if q in model.functions and _trains_itself(ctx, q)), None)
    start = (
        [Related(first_statement(callee), f"`{callee.name}()` starts without `{found.name}.train()`")]
        if callee is not None else []
    )
    if below and below[0].function == loop.function:
        return below[0].header, [*related, *start]
    if callee is not None and callee.qualname == chain[level + 1]:
        inner = next((b for b in below if b.function == callee.qualname), None)
        return (inner.header, [*related, *start]) if inner is not None else (start[0].span, related)
    first, last = loop_run(events, found.index, found.loop)
    top = min((e.stmt for e in events[first : last + 1] if e.function == loop.function), key=lambda span: span.start, default=None)
    begins = [Related(top, f"the pass starts without `{found.name}.train()`")] if top not in (None, found.forward.stmt) else []
    return loop.header, [*related[:-1], *begins, *start]


def _evaluating_call(ctx: Context, found: LoopEval) -> Event | None:
    """The call, made in the looping function, that runs the `eval()` (`validate(model)`); None when
    that function calls `eval()` itself."""
    loop = ctx.model.loops.get(found.loop)
    functions = [found.scope, *found.evaluation.via]
    if loop is None or loop.function not in functions:
        return found.calls[0] if found.calls else None
    level = functions.index(loop.function)
    return found.calls[level] if level < len(found.calls) else None


def _trains_itself(ctx: Context, qualname: str) -> bool:
    expanded = ctx.training.expanded(qualname)
    return any(e.kind is EventKind.BACKWARD for e in expanded) and any(ctx.training.optimizer_of(e) for e in expanded)


def _block_end(model: ModuleModel, events: tuple[Event, ...], evaluation: Event) -> Span | None:
    """The last statement of the `if` block the `eval()` runs in (its own function's), where the
    switch back belongs when the block samples or evaluates; None outside a block or at its end."""
    fn = model.functions.get(evaluation.function)
    guard = evaluation.guards[-1] if evaluation.guards else None
    if fn is None or guard is None or (fn.qualname and not fn.span.contains(guard.span)):
        return None  # no block, or the block of a caller (`if epoch % k == 0: validate(model)`)
    inside = [e.stmt for e in events if e.function == evaluation.function and guard in e.guards and e.via == evaluation.via]
    last = max(inside, key=lambda span: span.end, default=None)
    return last if last is not None and last != evaluation.stmt else None


def _entry_training(ctx: Context) -> Iterator[tuple[str, int, Span, tuple[Event, ...]]]:
    """Where a function trains: each training loop (its header), and a step function without a loop
    of its own that back-propagates and steps (its first forward); with the function, the index of
    the first training event in its expanded events, and the events of that training."""
    training = ctx.training
    for loop in ctx.model.loops.values():
        events = training.iteration(loop)
        if not loop.function or not (training.is_training_loop(loop) or _steps_through_a_call(ctx, events)):
            continue
        expanded = training.expanded(loop.function)
        first = next((i for i, e in enumerate(expanded) if loop.id in e.loops), None)
        if first is not None and not any(e.kind in _MODES for e in events):
            yield loop.function, first, loop.header, events
    for qualname, fn in ctx.model.functions.items():
        if not qualname or fn.is_lambda or not training.may_train(qualname):
            continue
        expanded = training.expanded(qualname)
        if any(e.loops for e in expanded) or any(e.kind in _MODES for e in expanded):
            continue
        if not any(e.kind is EventKind.BACKWARD for e in expanded) or not any(training.optimizer_of(e) for e in expanded):
            continue
        forward = next((i for i, e in enumerate(expanded) if training.is_forward(e) and not e.no_grad), None)
        if forward is not None:
            yield qualname, forward, expanded[forward].stmt, expanded


_MODES = (EventKind.TRAIN_MODE, EventKind.EVAL_MODE)


def _steps_through_a_call(ctx: Context, events: tuple[Event, ...]) -> bool:
    """The pass back-propagates and steps inside a call this file cannot see that is handed the
    optimizer (timm's `loss_scaler(loss, optimizer, parameters=model.parameters())`), with no
    backward or step of its own."""
    if any(e.kind in (EventKind.BACKWARD, EventKind.STEP) for e in events):
        return False
    call = ctx.training.opaque_training_call(tuple(e for e in events if not e.inner))
    return call is not None and any(
        a.base and ctx.model.kind_of(a.base, call.function) is Kind.OPTIMIZER for a in (*call.args, *(v for _, v in call.keywords))
    )


def _trains_after(events: tuple[Event, ...], evaluation: Event) -> bool:
    """The pass back-propagates after switching to eval mode: the first iteration already trains
    in eval mode (`model.eval()` at the top of the loop, no evaluation at all). A switch after the
    last backward (an evaluation at the end of the pass) leaves the first iteration in train mode."""
    index = events.index(evaluation)
    return any(e.kind is EventKind.BACKWARD for e in events[index + 1 :])


def _where_it_trains(ctx: Context, loop: Loop, events: tuple[Event, ...]) -> tuple[Span, Function | None, str] | None:
    """Where the training runs in eval mode when the epoch loop does not back-propagate in its own
    body: the batch loop nested in it, or in the function it calls (`train_one_epoch()`), or the
    first forward of a step function without a loop of its own (`train_iter()`); with the called
    function, whose start is where its `train()` belongs. None: the epoch loop trains itself."""
    chain = loop_chain(ctx, loop)
    backwards = [e for e in events if e.kind is EventKind.BACKWARD]
    if any(not e.via and not e.inner for e in backwards):
        return None
    training = ctx.training
    for event in backwards:
        callee = ctx.model.functions.get(event.via[0]) if event.via else None
        if callee is not None and callee.qualname == loop.function:
            callee = None
        nested = [ctx.model.loops[i] for i in event.loops[len(chain) :] if i in ctx.model.loops]
        if nested:  # the batch loop that steps, not a micro-step loop inside it
            inner = next((n for n in reversed(nested) if training.is_training_loop(n)), nested[0])
            return inner.header, callee, "loop"
        elif callee is not None:
            forwards = [e for e in events if e.via[:1] == event.via[:1] and training.is_forward(e) and not e.no_grad]
            return (forwards[0].stmt if forwards else event.stmt), callee, "step"
    return None


def loop_chain(ctx: Context, loop: Loop) -> tuple[int, ...]:
    chain: list[int] = []
    current: int | None = loop.id
    while current is not None:
        chain.append(current)
        current = ctx.model.loops[current].parent
    return tuple(chain)


def _as_passed(ctx: Context, evaluation: Event, events: tuple[Event, ...]) -> str | None:
    """The caller's name for the model a called function puts in eval mode through its
    parameter: `evaluate(gcn, ...)` with `def evaluate(model, ...): model.eval()` -> `gcn`."""
    if len(evaluation.via) != 1 or not evaluation.receiver:
        return None
    fn = ctx.model.functions.get(evaluation.function)
    head, dot, rest = evaluation.receiver.partition(".")
    if fn is None or head not in fn.params:
        return None
    position = fn.params.index(head) - (1 if fn.owner else 0)
    for call in events:
        if call.kind is not EventKind.CALL or call.via or evaluation.via[0] not in ctx.model.call_targets(call):
            continue
        arg = call.keyword(head) or (call.args[position] if 0 <= position < len(call.args) else None)
        if arg is None or not arg.base or arg.callee or arg.method or arg.text != arg.base:
            return None
        return arg.base + dot + rest
    return None


def _trained(ctx: Context, receiver: str, events: tuple[Event, ...]) -> bool:
    name = model_key(receiver)
    if not name or name == "self":
        return False
    training = ctx.training
    forwards = [e for e in events if training.is_forward(e) and model_key(training.forward_target(e)) == name]
    if not forwards:
        return False
    # Its forward runs with gradients on inside a loop of this iteration that back-propagates
    # and steps (`model, optimizer = accelerator.prepare(...)` hides the optimizer's model).
    for forward in forwards:
        if not forward.no_grad and any(training.is_training_loop(loop) for loop in _loops_of(ctx, forward)):
            return True
    word = re.compile(rf"\b{re.escape(name)}\b")
    for fn in ctx.model.functions.values():
        for event in fn.events:
            if event.kind is EventKind.TRAIN_MODE and event.receiver and model_key(event.receiver) == name:
                return True
            if event.kind is EventKind.ASSIGN and event.value is not None and len(event.targets) == 1:
                if ctx.model.kind_of_value(event.value, event.function) is Kind.OPTIMIZER and word.search(event.value.text):
                    return True
    return False


def _loops_of(ctx: Context, event: Event) -> list[Loop]:
    return [ctx.model.loops[i] for i in event.loops if i in ctx.model.loops]


def _fix(ctx: Context, loop: Loop, receiver: str, evaluation: Event) -> Fix | None:
    if loop.body.start.line <= loop.header.end.line:
        return None
    fn = ctx.model.functions.get(loop.function)
    visible = (
        bool(ctx.model.assignments(receiver, loop.function))
        or (fn is not None and receiver in fn.params)
        or (receiver.startswith("self.") and ctx.model.enclosing_class(loop.function) is not None)
    )
    if evaluation.via and not visible:
        return None
    edit = insert_statement(ctx.source, loop.body.start.line, loop.body_indent, f"{receiver}.train()")
    return Fix(f"Insert `{receiver}.train()` at the top of the loop", (edit,), Applicability.UNSAFE)
