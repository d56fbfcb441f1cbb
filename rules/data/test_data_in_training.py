"""## What it does
Flags training on the test split: a loop that runs `backward()` and an optimizer `step()`
while iterating over a loader or dataset built from the test split, a `fit` on the test
part, and model-selection decisions (`validation_data=` for early stopping, a
`ReduceLROnPlateau` step) taken on the test part when a separate validation split exists.

## Why is this bad?
A model trained, early-stopped or tuned on the test set has seen it: the test score no
longer estimates performance on new data. The rule decides by provenance, not by name: a
loader counts as test data when it is built from the test part of a split, a
`random_split`, or a dataset created with `train=False` / `split="test"`, through
assignments, tuple unpacking, same-file function returns and the arguments of same-file
function calls. Where the origin is unknown or mixed, it stays silent.

## Example
```python
train_set, test_set = random_split(dataset, [800, 200])
test_loader = DataLoader(test_set)
for x, y in test_loader:
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
```

## Use instead
```python
for x, y in train_loader:
    ...
```

## Fix safety
No fix: which data the loop should use is the author's decision.

## References
- Yang, Brower-Sinning, Lewis, Kästner: *Data Leakage in Notebooks: Static Detection and Better Processes* (ASE 2022)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from torch_preflight.core.dataflow import TEST, VAL, DataFlow, Info, span_of, unwrap_iter
from torch_preflight.core.diagnostics import Diagnostic, Severity
from torch_preflight.core.names import dotted
from torch_preflight.core.semantic import Kind
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF202",
    name="test-data-in-training",
    message="Training or model selection uses the test split",
    fix_title=None,
    severity=Severity.ERROR,
    # a test side comes from train=False, split="test"/"eval", a split call or a test-like name
    requires=("false|test|tst|holdout|hold_out|split|eval",),
)

_FITS = frozenset({"fit", "fit_transform", "fit_resample", "partial_fit", "train_on_batch"})


def only_test(info: Info) -> bool:
    return info.sides == frozenset({TEST})


def check(ctx: Context) -> Iterator[Diagnostic]:
    model = ctx.model
    flow = DataFlow.of(model)
    for tl in ctx.training.training_loops:
        loop = tl.loop
        node = flow.for_nodes.get(loop.span.start.line)
        if loop.kind != "for" or node is None:
            continue
        iterated = unwrap_iter(node.iter)
        if only_test(flow.info(iterated, loop.function)):
            yield report(
                META,
                loop.header,
                f"This training loop iterates over `{ast.unparse(iterated)}`, which is built from the test split: "
                "the model is trained on its own test data",
            )
    has_val = VAL in flow.split_sides()
    for scope in list(flow.scopes.values()):
        for call in scope.calls:
            func = call.func
            if not isinstance(func, ast.Attribute):
                continue
            if func.attr in _FITS and call.args and only_test(flow.info(call.args[0], scope.qualname)):
                yield report(
                    META,
                    span_of(model, call),
                    f"`{ast.unparse(func)}` is fitted on `{ast.unparse(call.args[0])}`, which comes from the test split",
                )
                continue
            if not has_val:
                continue
            validation = next((k.value for k in call.keywords if k.arg == "validation_data"), None)
            if func.attr == "fit" and validation is not None and only_test(flow.info(validation, scope.qualname)):
                yield report(
                    META,
                    span_of(model, validation),
                    "Early stopping and model selection use the test split although a validation split exists; "
                    "pass the validation data here",
                )
            elif (
                func.attr == "step"
                and call.args
                and model.kind_of(dotted(func.value), scope.qualname) is Kind.SCHEDULER
                and only_test(flow.info(call.args[0], scope.qualname))
            ):
                yield report(
                    META,
                    span_of(model, call),
                    "The learning-rate schedule is driven by a test-split metric although a validation split exists; "
                    "step it with the validation metric",
                )
