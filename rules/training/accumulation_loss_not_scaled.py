"""## What it does
Flags gradient accumulation where the loss that goes into `backward()` is never divided
by the number of accumulated micro-batches: a modulo-guarded `step()`
(`if (i + 1) % k == 0:`) or a micro-step loop (`for micro_step in range(k):`) around an
unscaled `loss.backward()`.

## Why is this bad?
Gradients add up over the `k` backward passes, so the step sees `k` times the gradient
of one batch: effectively a learning rate `k` times larger than the one tuned for the
full batch. Training can diverge, or converge to something worse, with no error.

The rule stays silent when the loss (or the expression passed to `backward()`) is
divided or multiplied anywhere in the iteration, when a helper's returned loss is
scaled, when the gradients are divided before the step (also by a scaling function
given the parameters, through an alias such as torchtune's
`self._grad_scaler = training.scale_grads_`), when a criterion uses
`reduction="sum"` explicitly, when the cadence is `% 1` (a step after every pass), and
when a framework owns the backward (`accelerator.backward(loss)`,
`model_engine.backward(loss)`).

## Example
```python
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
```

## Use instead
```python
    loss = criterion(model(x), y) / accum_steps
```

## Fix safety
There is no automatic fix: dividing the loss also changes what gets logged.

## References
- [nanoGPT train.py: `loss = loss / gradient_accumulation_steps`](https://github.com/karpathy/nanoGPT/blob/master/train.py)
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from torch_preflight.core.diagnostics import Diagnostic, Related, Severity
from torch_preflight.core.names import dotted, tail
from torch_preflight.core.semantic import Event, EventKind
from torch_preflight.core.training import TrainingLoop
from torch_preflight.rules.base import Context, RuleMeta, report
from torch_preflight.rules.training._steps import backward_tensor, cadence_guards, feeds, guard_text_divisor, under

META = RuleMeta(
    code="TPF004",
    name="accumulation-loss-not-scaled",
    message="Accumulated loss is not divided by the accumulation count",
    fix_title=None,
    severity=Severity.WARNING,
)

_SCALING = re.compile(r"/|\*|\bdiv\b|\.div_?\(|\bmul_?\(|\bscale")
_MICRO_LOOP = re.compile(r"accum|micro|grad_acc|gradient_acc", re.I)
_GRAD_SCALING = re.compile(r"(^|_)(scale|div|mul)", re.I)
_WRAPPING = frozenset({"torch.compile", "functools.partial"})
_SUM = re.compile(r"reduction\s*=\s*['\"]sum['\"]")


def check(ctx: Context) -> Iterator[Diagnostic]:
    if _SUM.search(ctx.source.text):
        return
    seen: set = set()
    for tl in ctx.training.training_loops:
        count = _accumulation_count(ctx, tl)
        if count is None or count.strip() == "1":
            continue  # `if i % 1 == 0:` steps after every pass: nothing accumulates
        for backward in tl.backwards:
            loss = backward_tensor(backward)
            if not backward.inner and not any(
                feeds(ctx.training, tl.events, backward, s) and any("%" in g.text and not under(backward, g) for g in cadence_guards(s, tl.loop))
                for s in tl.steps
            ):
                continue
            if loss is None or backward.span in seen or _scaled(ctx, tl.events, loss):
                continue
            if any(c.name.endswith(".accumulate") for e in tl.events for c in e.contexts):
                continue
            seen.add(backward.span)
            yield report(
                META,
                backward.span,
                f"Gradients of `{loss}` are accumulated over `{count}` backward passes but the loss is never divided by it; "
                "the step sees a gradient that many times too large",
                related=[Related(s.span, "optimizer step") for s in tl.steps],
                data={"loss": loss, "count": count},
            )


def _accumulation_count(ctx: Context, tl: TrainingLoop) -> str | None:
    loop = tl.loop
    for step in tl.steps:
        for guard in cadence_guards(step, loop):
            if "%" not in guard.text:
                continue
            if any(not under(b, guard) and feeds(ctx.training, tl.events, b, step) for b in tl.backwards):
                return guard_text_divisor(guard)
    if tl.backwards and all(b.inner for b in tl.backwards):
        for backward in tl.backwards:
            position = backward.loops.index(loop.id) if loop.id in backward.loops else -1
            if position < 0 or position + 1 >= len(backward.loops):
                return None
            micro = ctx.model.loops.get(backward.loops[position + 1])
            if micro is None or micro.iter is None or not _MICRO_LOOP.search(micro.iter.text + " ".join(micro.targets)):
                return None
            match = re.search(r"range\((.*)\)", micro.iter.text)
            return match.group(1) if match else micro.iter.text
    return None


def _scaled(ctx: Context, events: tuple[Event, ...], loss: str) -> bool:
    head = loss.split(".")[0]
    for event in events:
        if event.kind is EventKind.BACKWARD and event.receiver and _SCALING.search(event.receiver):
            return True
        if event.kind is EventKind.AUG_ASSIGN:
            if event.name in ("Div", "Mult", "FloorDiv") and (loss in event.targets or head in event.targets):
                return True
            if event.name in ("Div", "Mult") and any(t.endswith("grad") for t in event.targets):
                return True  # gradients divided before the step
        if event.kind is EventKind.ASSIGN and event.value is not None and _SCALING.search(event.value.text):
            if loss in event.targets or head in event.targets or any(t.endswith(".grad") for t in event.targets):
                return True
        if event.kind is EventKind.RETURN and event.via and event.value is not None and _SCALING.search(event.value.text):
            return True
        if event.kind is EventKind.CALL and event.name and event.name.rsplit(".", 1)[-1] in ("div_", "mul_") and event.receiver and "grad" in event.receiver:
            return True
        if event.kind is EventKind.CALL and _rescales_gradients(ctx, event):
            return True
    return False


def _rescales_gradients(ctx: Context, call: Event) -> bool:
    """A call that multiplies the parameters' gradients by a factor: a function named for
    scaling (`training.scale_grads_(params, 1 / num_tokens)`), also through the aliases it is
    bound to (`self._grad_scaler = torch.compile(training.scale_grads_)`), given parameters."""
    if not any("parameters" in a.text or "grad" in a.text for a in call.args):
        return False
    return any(_GRAD_SCALING.search(tail(name)) for name in _aliased(ctx, call.name or "", call.function, 0))


def _aliased(ctx: Context, name: str, scope: str, depth: int) -> set[str]:
    """The functions a called name is bound to: itself when nothing in the file binds it,
    else what its assignments bind (also through `torch.compile(f)`, `functools.partial(f, ...)`)."""
    bound = ctx.model.assignments(name, scope) if depth < 4 else []
    if not bound:
        return {name}
    found: set[str] = set()
    for event in bound:
        value = event.value
        if value is None or len(event.targets) != 1:
            continue
        target: str | None = None
        if value.callee in _WRAPPING:
            try:
                call = ast.parse(value.text.strip(), mode="eval").body
            except SyntaxError:
                continue
            target = dotted(call.args[0]) if isinstance(call, ast.Call) and call.args else None
        elif value.base and not value.callee and not value.method and value.text == value.base:
            target = value.base
        if target and target != name:
            found |= _aliased(ctx, ctx.model.imports.resolve(target) or target, event.function, depth + 1)
    return found
