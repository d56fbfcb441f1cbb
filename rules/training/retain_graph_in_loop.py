"""## What it does
Flags `backward(retain_graph=True)` in a training loop whose iteration runs no other
backward pass (no second `backward()`, no `torch.autograd.grad`) that could reuse the
graph.

## Why is this bad?
`retain_graph=True` keeps every saved activation of the graph alive after the backward
pass. With nothing to reuse it, that memory is only released when the next iteration
overwrites the reference, so peak memory roughly doubles. It is often added to silence
"Trying to backward through the graph a second time", which means state (an RNN hidden
state) carries the graph across iterations: every step then back-propagates through all
earlier steps, and time and memory grow with each iteration. Detach the carried state
instead.

Backward passes whose `retain_graph` is computed (`retain_graph=i < n - 1`), loops with
several backward passes (GAN discriminator and generator losses sharing a forward), and
backward passes in a nested loop are not flagged.

## Example
```python
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward(retain_graph=True)
    optimizer.step()
```

## Use instead
```python
    loss.backward()
```

## Fix safety
There is no automatic fix: when hidden state carries the graph, the state must be
detached as well.

## References
- [torch.Tensor.backward](https://pytorch.org/docs/stable/generated/torch.Tensor.backward.html)
"""

from __future__ import annotations

from collections.abc import Iterator

from torch_preflight.core.diagnostics import Diagnostic, Severity
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF013",
    name="retain-graph-in-loop",
    message="backward(retain_graph=True) in a loop with nothing reusing the graph",
    fix_title=None,
    severity=Severity.WARNING,
)


def check(ctx: Context) -> Iterator[Diagnostic]:
    seen: set = set()
    for tl in ctx.training.training_loops:
        if len(tl.backwards) != 1 or any(e.name in ("torch.autograd.grad", "torch.autograd.backward") for e in tl.events):
            continue
        backward = tl.backwards[0]
        retain = backward.keyword("retain_graph")
        if backward.inner or retain is None or retain.text != "True" or backward.span in seen:
            continue
        if not any(not s.inner for s in tl.steps):
            continue
        seen.add(backward.span)
        yield report(
            META,
            retain.span,
            "`retain_graph=True` keeps the whole graph alive, but no other backward pass in the loop reuses it",
        )
