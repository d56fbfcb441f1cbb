"""## What it does
Flags `torch.load(path, weights_only=False)`, and `torch.load` with a `pickle_module=`
argument, when the path is not a string literal written in this file (a checkpoint the
project produces itself).

## Why is this bad?
With `weights_only=False`, `torch.load` unpickles arbitrary objects, and unpickling runs
code: a checkpoint downloaded from a hub, a shared drive or a user upload can execute
anything on the machine that loads it. `weights_only=True` (the default since PyTorch 2.6)
restricts loading to tensors, primitive types and allow-listed classes.

## Example
```python
state = torch.load(args.checkpoint, weights_only=False)
```

## Use instead
```python
state = torch.load(args.checkpoint, weights_only=True)
```
If the checkpoint holds your own classes, allow-list them with
`torch.serialization.add_safe_globals([...])`.

## Fix safety
The fix sets `weights_only=True`. It is unsafe: a checkpoint that pickles optimizer
objects, argparse namespaces or custom classes no longer loads until those classes are
allow-listed.

## References
- [torch.load](https://pytorch.org/docs/stable/generated/torch.load.html)
- [Python pickle: security warning](https://docs.python.org/3/library/pickle.html)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from torch_preflight.core.diagnostics import Applicability, Diagnostic, Edit, Fix, Severity
from torch_preflight.core.semantic import Event, EventKind, Value
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF301",
    name="unsafe-torch-load",
    message="`torch.load` unpickles arbitrary code from a path this file does not own",
    fix_title="Pass `weights_only=True`",
    severity=Severity.WARNING,
)

_LOADS = frozenset({"torch.load", "torch.serialization.load"})


def check(ctx: Context) -> Iterator[Diagnostic]:
    model = ctx.model
    for fn in model.functions.values():
        for event in fn.events:
            if event.kind is not EventKind.CALL or event.name not in _LOADS:
                continue
            weights_only = event.keyword("weights_only")
            pickle_module = event.keyword("pickle_module")
            unsafe = weights_only is not None and weights_only.text == "False"
            if not unsafe and pickle_module is None:
                continue
            path = event.args[0] if event.args else event.keyword("f")
            if path is None or _own_literal(ctx, event, path) or _saved_here(ctx, event, path) or _unpickler_of_reduce(ctx, event):
                continue
            fix = None
            if unsafe and weights_only is not None:
                fix = Fix(META.fix_title or "", (Edit.replace(weights_only.span, "True"),), Applicability.UNSAFE)
            what = "`weights_only=False`" if unsafe else "a custom `pickle_module`"
            yield report(
                META,
                event.span,
                f"`torch.load` with {what} unpickles `{path.text}`, which can run arbitrary code; "
                "load it with `weights_only=True`",
                fix,
            )


def _own_literal(ctx: Context, event: Event, path: Value) -> bool:
    """A string literal of this file, directly or through one local assignment."""
    if path.is_literal:
        return True
    if path.base and not path.callee and not path.method and path.base == path.text:
        earlier = [a for a in ctx.model.assignments(path.base, event.function) if a.function != event.function or a.stmt.start < event.stmt.start]
        if earlier and all(a.value is not None and isinstance(_literal(a.value.text), str) for a in earlier[-1:]):
            return True
    return False


_SAVES = frozenset({"torch.save", "torch.serialization.save"})


def _saved_here(ctx: Context, event: Event, path: Value) -> bool:
    """A round trip: the same function wrote this file or buffer with `torch.save` earlier
    (`torch.save(m, buf); buf.seek(0); torch.load(buf)`, or `tmp` / `tmp.name` of one temp file),
    or serialised the object that another rank sends it (`torch.save(obj, buffer)` on the
    sending rank, `torch.load(buffer)` on the receiving ones)."""
    fn = ctx.model.functions.get(event.function)
    if fn is None or not path.base:
        return False
    for save in fn.events:
        if save.span.start >= event.span.start:
            break
        if save.kind is not EventKind.CALL or save.name not in _SAVES:
            continue
        dest = save.args[1] if len(save.args) > 1 else save.keyword("f")
        if dest is not None and dest.text.removesuffix(".name") == path.text.removesuffix(".name"):
            return True  # the same buffer, path, or temp file (`tmp` / `tmp.name`)
    return False


def _unpickler_of_reduce(ctx: Context, event: Event) -> bool:
    """The loading function is what this file's `__reduce__` hands to pickle, with bytes its own
    `torch.save` produced: unpickling the outer object already runs arbitrary code, so
    `weights_only=False` here adds no exposure."""
    fn = ctx.model.functions.get(event.function)
    if fn is None or not fn.qualname:
        return False
    for other in ctx.model.functions.values():
        if other.name not in ("__reduce__", "__reduce_ex__"):
            continue
        if any(e.kind is EventKind.CALL and e.name in _SAVES for e in other.events) and any(
            e.kind is EventKind.RETURN and e.value is not None and fn.name in e.value.names for e in other.events
        ):
            return True
    return False


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
