"""## What it does
Flags a tensor that still carries its autograd graph being stored in a container that
outlives the iteration: `history.append(loss)`, `preds.append(model(x))`,
`self.losses[step] = loss`, in a loop that back-propagates (a training loop, or one that
accumulates gradients and steps elsewhere), in a loop that runs a model forward with
gradients enabled, or in a framework's `training_step` (Lightning, a Hugging Face
`Trainer`), which the framework calls once per step. Gradients taken with
`torch.autograd.grad(..., create_graph=True)` carry a graph too.

## Why is this bad?
Each stored tensor keeps its whole graph alive, with every activation saved for the
backward pass. The container grows by one graph per iteration, so memory climbs until
the run dies of out-of-memory, often hours in. `.cpu()` and `.to()` do not help: they
are differentiable and keep the graph. `.detach()`, `.item()` and `.tolist()` drop it.

Containers created inside the iteration, containers that a back-propagating function
able to see them reads later (chunked losses, REINFORCE `saved_log_probs`; a function's
local list is seen only by that function unless it hands the list out), values computed
under `no_grad` / `inference_mode` (also when stored after the block), loops under
`no_grad`, loops that always leave after one pass, and lists that also receive layers
built in place (`modules.append(nn.Linear(...))`, where `module(dim)` over a list of layer
classes constructs a layer) are not flagged.

## Example
```python
losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss)
```

## Use instead
```python
    losses.append(loss.detach())  # or loss.item() for a Python float
```

## Fix safety
The fix appends `.detach()` to the stored expression. It is safe: the stored value is
the same tensor, without its graph; nothing back-propagates through the container.

## References
- [PyTorch FAQ: my model reports "cuda runtime error(2): out of memory"](https://pytorch.org/docs/stable/notes/faq.html)
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from torch_preflight.core.diagnostics import Applicability, Diagnostic, Edit, Fix, Severity
from torch_preflight.core.names import tail
from torch_preflight.core.semantic import GRAPH_KINDS, Event, EventKind, Value
from torch_preflight.core.source import Span
from torch_preflight.rules.base import Context, RuleMeta, report
from torch_preflight.rules.training.eval_loop_without_no_grad import _is_eval

META = RuleMeta(
    code="TPF006",
    name="graph-tensor-stored",
    message="Graph-carrying tensor stored across iterations",
    fix_title="Store `.detach()` of the tensor",
    severity=Severity.WARNING,
)

_STORES = frozenset({"append", "extend", "insert", "__setitem__"})
_DETACHING = frozenset({"item", "detach", "tolist", "numpy", "detach_"})
_WORD = re.compile(r"[A-Za-z_]\w*")
_COMMON = frozenset({"self", "torch", "nn", "F", "sum", "mean", "cat", "stack", "item", "detach", "backward"})
_ATOM = re.compile(r"[A-Za-z_][\w.]*(\([^()]*\))?(\[[^\[\]]*\])?")


def check(ctx: Context) -> Iterator[Diagnostic]:
    training = ctx.training
    seen: set[Span] = set()
    units: list[tuple[tuple[Event, ...], set[str]]] = []
    for tl in training.backward_loops:
        backwarded = {e.receiver for e in tl.events if e.kind is EventKind.BACKWARD and e.receiver}
        units.append((tl.events, backwarded))
    for _, events in training.step_hooks:
        # the framework back-propagates what the hook returns
        returned = {e.value.base for e in events if e.kind is EventKind.RETURN and not e.via and e.value is not None and e.value.base}
        backwarded = {e.receiver for e in events if e.kind is EventKind.BACKWARD and e.receiver} | returned
        units.append((events, backwarded))
    training_ids = {tl.loop.id for tl in training.backward_loops}
    for loop in ctx.model.loops.values():
        # only a store is reported: a loop whose function can reach none is not read
        if loop.id in training_ids or not training.may_hold(loop.function, EventKind.STORE) or not training.grad_enabled_at(loop):
            continue
        events = training.iteration(loop)
        if any(training.is_forward(e) and not e.no_grad and not e.inner and not training.frozen_before(e, loop) for e in events) and _is_eval(ctx, loop, events):
            cls = ctx.model.enclosing_class(loop.function)
            if cls is None or not cls.is_module:
                units.append((events, set()))
    for events, backwarded in units:
        for index, event in enumerate(events):
            value = _stored(ctx, event, events, index, backwarded)
            if value is None or event.span in seen:
                continue
            seen.add(event.span)
            yield report(
                META,
                value.span,
                f"`{event.receiver}` keeps `{value.text}` with its autograd graph; every iteration's graph stays in memory",
                _fix(value),
                data={"container": event.receiver or ""},
            )


def _stored(ctx: Context, event: Event, events: tuple[Event, ...], index: int, backwarded: set[str]) -> Value | None:
    if event.kind is not EventKind.STORE or event.name not in _STORES or event.inner or event.no_grad or not event.receiver:
        return None
    if event.name == "__setitem__":
        value = event.value
    elif event.name == "insert":
        value = event.args[1] if len(event.args) > 1 else None
    else:
        value = event.args[0] if event.args else None
    if value is None or value.is_literal or set(value.methods) & _DETACHING or value.callee in ("float", "int", "round", "str"):
        return None
    if event.name == "extend" and not (value.base and not value.callee and not value.method):
        return None
    graph = bool(value.base and not value.callee and not value.method and value.base in backwarded)
    if not graph and ctx.model.kind_of_value(value, event.function) not in GRAPH_KINDS:
        return None
    container = event.receiver
    head = container.split("[")[0]
    # A container made fresh in this iteration holds one iteration's tensors only.
    if any(e.kind is EventKind.ASSIGN and head in e.targets for e in events[:index] if not e.inner):
        return None
    if _read_by_backward(ctx, head, event.function) or _holds_layers(ctx, head, event.function):
        return None
    return value


def _holds_layers(ctx: Context, container: str, scope: str) -> bool:
    """The container also receives layers built in place (`modules.append(nn.Linear(...))`): it is a
    list of modules being assembled, so `module(dim)` stored in it constructs a layer (the loop runs
    over layer classes), it is no forward output."""
    fn = ctx.model.functions.get(scope)
    if fn is None:
        return False
    for event in fn.events:
        if event.kind is not EventKind.STORE or event.receiver != container or event.name not in ("append", "insert"):
            continue
        value = event.args[-1] if event.args else None
        callee = value.callee if value is not None else None
        if callee is None:
            continue
        if (callee.startswith("torch.nn.") and tail(callee)[:1].isupper()) or (callee in ctx.model.classes and ctx.model.classes[callee].is_module):
            return True
    return False


def _read_by_backward(ctx: Context, container: str, scope: str) -> bool:
    """A backward pass that can see the container reads it, directly or through the values
    built from it (`torch.stack(losses).sum().backward()`): the graphs are kept on purpose."""
    name = container.rsplit(".", 1)[-1]
    pattern = re.compile(rf"\b{re.escape(name)}\b")
    for fn in ctx.model.readers(container, scope):
        roots = [e for e in fn.events if e.kind is EventKind.BACKWARD or e.name == "torch.autograd.grad"]
        if not roots:
            continue
        texts = [t for e in roots for t in (e.receiver or "", *(a.text for a in e.args))]
        frontier = {w for t in texts for w in _WORD.findall(t)} - _COMMON
        for _ in range(6):
            grown = False
            for e in fn.events:
                sources: list[str] = []
                if e.kind in (EventKind.ASSIGN, EventKind.AUG_ASSIGN) and e.value is not None:
                    if any(w in frontier for t in e.targets for w in _WORD.findall(t)):
                        sources.append(e.value.text)
                elif e.kind is EventKind.STORE and e.receiver and e.receiver.split(".")[-1] in frontier:
                    sources.extend(a.text for a in e.args)
                    if e.value is not None:
                        sources.append(e.value.text)
                for text in sources:
                    if text in texts:
                        continue
                    texts.append(text)
                    words = set(_WORD.findall(text)) - frontier - _COMMON
                    if words:
                        frontier |= words
                        grown = True
            if not grown:
                break
        if any(pattern.search(t) for t in texts):
            return True
    return False


def _fix(value: Value) -> Fix:
    text = value.text
    replacement = f"{text}.detach()" if _ATOM.fullmatch(text) else f"({text}).detach()"
    return Fix(META.fix_title or "", (Edit.replace(value.span, replacement),), Applicability.SAFE)
