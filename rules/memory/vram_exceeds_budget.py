"""## What it does
Flags the instantiation of a model whose estimated training-step peak memory exceeds the GPU
memory budget configured in `[tool.torch-preflight]` (`gpu-memory = "24GiB"` or
`gpu = "a100-80gb"`). The estimate is static: parameters, gradients, optimizer state and the
activations autograd saves, replayed over forward, backward and the optimizer step. The
message carries the remedies that bring the peak down the most, each with its number.

It never fires on a model the estimator could not fully read (an unknown layer, an input of
unknown shape): an incomplete estimate is not evidence. Without a configured budget the
rule does nothing.

## Why is this bad?
Out-of-memory errors show up only after the job has been queued, the GPU rented and the
data loaded. Knowing before the run that the step needs more memory than the card has, and
which change fixes it, saves that round trip.

## Example
```toml
[tool.torch-preflight]
gpu-memory = "16GiB"
```
```python
model = GPT(GPTConfig(n_layer=48, n_embd=1600))  # 1.5B parameters, Adam: about 25 GiB before activations
optimizer = torch.optim.AdamW(model.parameters())
```

## Use instead
Apply one of the suggested remedies (bf16 autocast, activation checkpointing, an 8-bit
optimizer, ZeRO/FSDP sharding, a smaller micro-batch with gradient accumulation), or pick a
larger GPU in the configuration.

## Fix safety
There is no automatic fix: every remedy changes the training setup.

## References
- [torch.cuda.max_memory_allocated](https://pytorch.org/docs/stable/generated/torch.cuda.max_memory_allocated.html)
- [Activation checkpointing](https://pytorch.org/docs/stable/checkpoint.html)
- Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models* (2022)
"""

from __future__ import annotations

from collections.abc import Iterator

from torch_preflight.core.diagnostics import Diagnostic, Severity
from torch_preflight.core.memory import format_bytes
from torch_preflight.core.source import Position, Span
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF401",
    name="vram-exceeds-budget",
    message="Estimated training-step memory exceeds the configured GPU budget",
    fix_title=None,
    severity=Severity.WARNING,
)

TOP_REMEDIES = 3


def check(ctx: Context) -> Iterator[Diagnostic]:
    for mem in ctx.memory:
        if not mem.complete or mem.budget_bytes is None or mem.peak_bytes <= mem.budget_bytes:
            continue
        line = ctx.source.line(mem.model_line)
        start = Position(mem.model_line, mem.model_col)
        code = line.split("#", 1)[0].rstrip()
        end = Position(mem.model_line, len(code) if len(code) > mem.model_col else mem.model_col)
        remedies = [s for s in mem.suggestions if s.peak_bytes < mem.peak_bytes][:TOP_REMEDIES]
        text = f"`{mem.model}` needs about {format_bytes(mem.peak_bytes)} per training step, over the {format_bytes(mem.budget_bytes)} budget"
        if mem.max_batch_size:
            text += f" (largest batch size that fits: {mem.max_batch_size})"
        elif mem.max_batch_size == 0:
            text += " even at batch size 1"
        if remedies:
            text += "; try " + ", ".join(f"{s.remedy} ({format_bytes(s.peak_bytes)})" for s in remedies)
        yield report(META, Span(start, end), text, data={"peak_bytes": str(mem.peak_bytes), "budget_bytes": str(mem.budget_bytes)})
