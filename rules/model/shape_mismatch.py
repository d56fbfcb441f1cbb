"""## What it does
Checks tensor shapes statically, the way the VRAM estimator propagates them through
`__init__` and `forward()`, and flags a layer or op that is proven to receive a tensor it
cannot take:

- `nn.Linear(in_features=k)` fed a last dimension other than `k`;
- `nn.Conv*d` / `nn.BatchNorm*d` fed a channel count other than `in_channels` / `num_features`;
- `nn.LSTM` / `nn.GRU` / `nn.RNN` fed a feature size other than `input_size`;
- `nn.MultiheadAttention` fed a feature size other than `embed_dim` (or `kdim` / `vdim`);
- `torch.cat` / `torch.stack` of tensors whose other dimensions differ, and `+`, `-`, `*`,
  `/` of tensors that do not broadcast;
- `view` / `reshape` to a size whose element count differs from the tensor's;
- `b, n, d = x.shape` on a tensor whose rank is known and is not 3.

The finding sits on the consumer's definition (the layer built in `__init__`) and names both
shapes and the path that led there, e.g. `after conv2 → pool → flatten: 16×4×4 = 256, but
fc1 (Linear) expects in_features=400`, with related locations on the layers of that path.

Chains decided by the layers alone (a `Linear(784, 256)` followed by a `Linear(128, 10)`)
need no input. Checks that depend on the input size use the input the script builds (a
`torch.randn(...)` sample, a `DataLoader` over a known torchvision dataset, transforms that
crop to a fixed size) or `input-shape` in the configuration, and stay silent without one.
The rule never guesses: it is silent after a branch on a condition it cannot read, for
`Lazy*` layers, for `-1` in `view`, for data-dependent shapes (boolean masks, `nonzero`), for
layers built from values it cannot read, and after any operation it does not model. A tensor
combined with a value it cannot read (`x + load_batch()`) has an unknown shape, not the known
operand's (a value read from a configuration object is taken for the number it nearly always is). A file whose script or model is too large to interpret within its work budget (an
LLM notebook that unrolls every layer and expert) is checked up to that point only.

## Why is this bad?
`mat1 and mat2 shapes cannot be multiplied (64x256 and 400x120)` is the most common PyTorch
runtime error. It surfaces only when the forward pass first runs: after the data is loaded,
the model is moved to the GPU and possibly compiled, minutes or hours into a job.

## Example
```python
class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)  # sized for 32x32 inputs

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        return self.fc1(torch.flatten(x, 1))

LeNet()(torch.randn(64, 1, 28, 28))  # MNIST: 16×4×4 = 256 features reach fc1
```

## Use instead
```python
        self.fc1 = nn.Linear(16 * 4 * 4, 120)
```

## Fix safety
When the mismatch is a single literal `in_features` / `in_channels` argument, the fix
replaces it with the propagated size. It is unsafe: the size may be right and the input (or
an earlier layer) wrong, and a changed layer no longer loads old checkpoints.

## References
- [torch.nn.Linear](https://pytorch.org/docs/stable/generated/torch.nn.Linear.html)
- [torch.nn.Conv2d](https://pytorch.org/docs/stable/generated/torch.nn.Conv2d.html)
- [Broadcasting semantics](https://pytorch.org/docs/stable/notes/broadcasting.html)
- [PyTea: static shape error detection for PyTorch programs (ECCV 2022)](https://arxiv.org/abs/2112.09037)
"""

from __future__ import annotations

from collections.abc import Iterator

from torch_preflight.core.diagnostics import Applicability, Diagnostic, Edit, Fix, Related, Severity
from torch_preflight.core.memory import ShapeMismatch
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF501",
    name="shape-mismatch",
    message="A layer or op receives a tensor whose shape does not match how it was built",
    fix_title="Set the size the layer receives",
    severity=Severity.ERROR,
)


def _shape(shape: tuple[int, ...] | None) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]" if shape is not None else "?"


def message(m: ShapeMismatch) -> str:
    path = " → ".join(step.label for step in m.path)
    where = f"after {path}" if path else "the input"
    if m.kind in ("cat", "broadcast", "view", "unpack"):
        what = {"cat": f"`{m.layer}` needs {m.expected}", "broadcast": f"`{m.layer}` needs {m.expected}",
                "view": f"`{m.type}` to {m.expected}", "unpack": f"unpacking `.shape` needs {m.expected}"}[m.kind]
        got = {"cat": f"got {m.actual}", "broadcast": f"got {m.actual}", "view": f"of a tensor {m.actual}",
               "unpack": f"got {m.actual}"}[m.kind]
        return f"Shape mismatch ({where}): {what}, {got}"
    size = m.detail or m.actual.split()[0]
    shown = f" (input {_shape(m.input_shape)})" if m.input_shape is not None else ""
    return f"Shape mismatch: {where}: {size}, but {m.layer} ({m.type}) expects {m.expected}{shown}"


def check(ctx: Context) -> Iterator[Diagnostic]:
    for m in ctx.shapes:
        fix = None
        if m.fix_span is not None and m.fix_value is not None:
            fix = Fix(f"Set {m.expected.split('=')[0]} to {m.fix_value}", (Edit(m.fix_span, str(m.fix_value)),), Applicability.UNSAFE)
        related = [Related(step.span, f"{step.label}" + (f": {step.detail}" if step.detail else "")) for step in m.path
                   if step.span != m.span]
        yield report(META, m.span, message(m), fix, related, {"expected": m.expected, "actual": m.actual})
