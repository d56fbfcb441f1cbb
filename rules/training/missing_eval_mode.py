"""## What it does
Flags an evaluation loop that runs a model with no `model.eval()` on the way to it: a
`no_grad` loop over a validation or test loader, or a loop in a function named like
`evaluate` / `validate` / `test`, where the last mode call before the loop (in the
function, or on every path through its callers in the file) is `model.train()`, or where
no mode call comes before it at module level (a fresh model is in training mode). A
function named like that with no loop, whose single full-batch forward runs under
`no_grad` (graph networks, small tabular sets), is checked the same way.

## Why is this bad?
In training mode, dropout keeps dropping activations and batch norm normalises with the
statistics of each evaluation batch and updates its running averages with test data.
Metrics come out noisy and too low, and the model's running statistics drift. Nothing
raises.

Models whose class is in the file and has no dropout or batch norm behave the same in
both modes and are not flagged. When the function is only called from code this file
cannot see, or another model's mode is set, the rule stays silent.

## Example
```python
def evaluate(model, loader):
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
```

## Use instead
```python
def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
```

## Fix safety
The fix inserts `model.eval()` before the loop. It is unsafe: code after the loop that
trains again must switch back with `model.train()` (TPF009 reports when it does not).

## References
- [torch.nn.Module.eval](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.eval)
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from torch_preflight.core.diagnostics import Applicability, Diagnostic, Fix, Related, Severity
from torch_preflight.core.edits import insert_statement
from torch_preflight.core.names import tail
from torch_preflight.core.semantic import Event, EventKind, Loop
from torch_preflight.rules.base import Context, RuleMeta, report
from torch_preflight.rules.training._modes import DEFAULT, TRAIN, has_mode_layers, mode_before, mode_events

META = RuleMeta(
    code="TPF008",
    name="missing-eval-mode",
    message="Evaluation runs without model.eval()",
    fix_title="Insert `model.eval()` before the loop",
    severity=Severity.WARNING,
)

_EVAL_FUNCTION = re.compile(
    r"(^|_)(eval|evaluate|evaluation|validate|validation|val|valid)(_|$)|^(run_)?test(_epoch|_model|_loop|_one_epoch|_func|_fn)?$", re.I
)
_EVAL_DATA = re.compile(r"val|valid|test|eval|dev_|holdout", re.I)
_NOT_EVAL = frozenset({EventKind.BACKWARD, EventKind.STEP, EventKind.ZERO_GRAD})


def check(ctx: Context) -> Iterator[Diagnostic]:
    training = ctx.training
    for loop in ctx.model.loops.values():
        events = training.iteration(loop)
        forwards = [e for e in events if training.is_forward(e) and not e.inner]
        if not forwards or not _is_evaluation(ctx, loop, events):
            continue
        name = forwards[0].name
        if not name or name == "self" or any(tail(f.name) != tail(name) for f in forwards):
            continue
        if mode_events(events):
            continue
        expanded = training.expanded(loop.function)
        first = next((i for i, e in enumerate(expanded) if loop.id in e.loops), None)
        if first is None:
            continue
        mode = mode_before(training, loop.function, first, name)
        if mode not in (TRAIN, DEFAULT) or not has_mode_layers(ctx.model, name, loop.function, ctx.project):
            continue
        reason = "the model is still in training mode" if mode == TRAIN else "a new model starts in training mode"
        yield report(
            META,
            loop.header,
            f"Evaluation loop runs `{name}` without `{name}.eval()`: {reason}, so dropout and batch norm behave as in training",
            _fix(ctx, loop, name, events),
            related=[Related(forwards[0].span, "model forward")],
            data={"model": name},
        )
    yield from _loopless(ctx)


def _loopless(ctx: Context) -> Iterator[Diagnostic]:
    """An evaluation function with no loop: one full-batch forward under `no_grad`
    (graph networks, small tabular sets), `def test(model, ...): with torch.no_grad(): out = model(x)`."""
    training = ctx.training
    for qualname, fn in ctx.model.functions.items():
        if fn.is_lambda or not _EVAL_FUNCTION.search(fn.name):
            continue
        cls = ctx.model.enclosing_class(qualname)
        if cls is not None and (cls.is_module or cls.owns_loop):
            continue
        forwards = [e for e in fn.events if training.is_forward(e)]
        if not forwards or any(e.loops for e in forwards):
            continue  # none, or the loop path above owns it
        name = forwards[0].name
        if not name or name == "self" or any(f.name != name for f in forwards):
            continue
        if not (fn.disables_grad or all(f.no_grad for f in forwards) or ctx.model.covered_by_no_grad(qualname)):
            continue
        expanded = training.expanded(qualname)
        if any(e.kind in _NOT_EVAL or e.kind is EventKind.TRAIN_MODE for e in expanded) or training.opaque_training_call(expanded):
            continue
        first = expanded.index(forwards[0])
        mode = mode_before(training, qualname, first, name)
        if mode not in (TRAIN, DEFAULT) or not has_mode_layers(ctx.model, name, qualname, ctx.project):
            continue
        reason = "the model is still in training mode" if mode == TRAIN else "a new model starts in training mode"
        anchor = forwards[0].contexts[0].span if forwards[0].contexts else forwards[0].stmt
        yield report(
            META,
            forwards[0].stmt,
            f"Evaluation runs `{name}` without `{name}.eval()`: {reason}, so dropout and batch norm behave as in training",
            _fix_before(ctx, anchor.start.line, name, qualname),
            related=[Related(forwards[0].span, "model forward")],
            data={"model": name},
        )


def _fix_before(ctx: Context, line: int, name: str, scope: str) -> Fix | None:
    if any(e.kind is EventKind.ASSIGN and name in e.targets for e in ctx.model.functions[scope].events):
        return None
    text = ctx.source.line(line)
    indent = text[: len(text) - len(text.lstrip())]
    edit = insert_statement(ctx.source, line, indent, f"{name}.eval()")
    return Fix(f"Insert `{name}.eval()` before the forward", (edit,), Applicability.UNSAFE)


def _is_evaluation(ctx: Context, loop: Loop, events: tuple[Event, ...]) -> bool:
    training = ctx.training
    if any(e.kind in _NOT_EVAL or e.kind is EventKind.TRAIN_MODE for e in events):
        return False
    if training.opaque_training_call(events):
        return False
    cls = ctx.model.enclosing_class(loop.function)
    if cls is not None and (cls.is_module or cls.owns_loop):
        return False
    fn = ctx.model.functions.get(loop.function)
    named = bool(fn and _EVAL_FUNCTION.search(fn.name))
    no_grad = not training.grad_enabled_at(loop) or all(e.no_grad for e in events if training.is_forward(e))
    over_eval_data = bool(loop.iter and _EVAL_DATA.search(loop.iter.text))
    return named or (no_grad and over_eval_data)


def _fix(ctx: Context, loop: Loop, name: str, events: tuple[Event, ...]) -> Fix | None:
    if any(e.kind is EventKind.ASSIGN and name in e.targets for e in events):
        return None
    edit = insert_statement(ctx.source, loop.span.start.line, loop.indent, f"{name}.eval()")
    return Fix(f"Insert `{name}.eval()` before the loop", (edit,), Applicability.UNSAFE)
