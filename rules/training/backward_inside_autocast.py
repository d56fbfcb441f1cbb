"""## What it does
Flags `backward()` called inside an `autocast` block (`torch.autocast`,
`torch.cuda.amp.autocast`, `torch.amp.autocast`).

## Why is this bad?
Autocast is meant to cover the forward pass and the loss only. The backward ops already
run in the dtype autocast chose for their forward ops; running `backward()` under
autocast is unsupported and can pick different, less precise kernels for ops created
during the backward pass (custom autograd functions, double backward). PyTorch's AMP
guide says: "Backward passes under autocast are not recommended." It also keeps the
context open longer than needed.

Blocks with `enabled=False` are not flagged.

## Example
```python
with torch.autocast("cuda"):
    loss = criterion(model(x), y)
    scaler.scale(loss).backward()
```

## Use instead
```python
with torch.autocast("cuda"):
    loss = criterion(model(x), y)
scaler.scale(loss).backward()
```

## Fix safety
There is no automatic fix: the statements after the backward that belong outside the
block vary.

## References
- [Automatic mixed precision: autocast](https://pytorch.org/docs/stable/amp.html#autocasting)
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from torch_preflight.core.diagnostics import Diagnostic, Related, Severity
from torch_preflight.core.semantic import AUTOCAST_CONTEXTS, EventKind
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF016",
    name="backward-inside-autocast",
    message="backward() runs inside an autocast block",
    fix_title=None,
    severity=Severity.WARNING,
)

_DISABLED = re.compile(r"enabled\s*=\s*False")


def check(ctx: Context) -> Iterator[Diagnostic]:
    for fn in ctx.model.functions.values():
        for event in fn.events:
            if event.kind is not EventKind.BACKWARD or event.args:
                continue
            for context in event.contexts:
                if context.name not in AUTOCAST_CONTEXTS or _DISABLED.search(ctx.source.slice(context.span)):
                    continue
                yield report(
                    META,
                    event.span,
                    f"`{event.name}()` runs inside `{ctx.source.slice(context.span)}`; autocast should cover only the forward pass and the loss",
                    related=[Related(context.span, "autocast block")],
                )
                break
