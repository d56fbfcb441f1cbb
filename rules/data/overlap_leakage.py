"""## What it does
Flags oversampling that copies or synthesises rows (`SMOTE`, `ADASYN`,
`RandomOverSampler`, `sklearn.utils.resample` with replacement) applied before the data is
split into training and test parts.

## Why is this bad?
Oversampling makes copies (or near-copies, for SMOTE) of existing rows. Done before the
split, a row and its copy land on both sides: the model is tested on samples it was trained
on, and the reported score measures memorisation. Yang et al. (ASE'22) call this overlap
leakage. Oversample the training part only, after the split (an `imblearn` `Pipeline` does
this per cross-validation fold).

The rule follows values through assignments, tuple unpacking, slicing and same-file
function returns, and stays silent when the resampled data is already a training part or
when it cannot tell where the data came from.

## Example
```python
X, y = SMOTE().fit_resample(X, y)
X_train, X_test, y_train, y_test = train_test_split(X, y)
```

## Use instead
```python
X_train, X_test, y_train, y_test = train_test_split(X, y)
X_train, y_train = SMOTE().fit_resample(X_train, y_train)
```

## Fix safety
No fix: moving the resampling after the split restructures the script.

## References
- Yang, Brower-Sinning, Lewis, Kästner: *Data Leakage in Notebooks: Static Detection and Better Processes* (ASE 2022)
- [imbalanced-learn: common pitfalls](https://imbalanced-learn.org/stable/common_pitfalls.html)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from torch_preflight.core.dataflow import TEST, TRAIN, VAL, DataFlow, span_of
from torch_preflight.core.diagnostics import Diagnostic, Related, Severity
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF203",
    name="overlap-leakage",
    message="Oversampling before the train/test split puts copies of a sample on both sides",
    fix_title=None,
    severity=Severity.WARNING,
    requires=("resample",),  # fit_resample / sklearn.utils.resample (dataflow.taint_kind)
)


def check(ctx: Context) -> Iterator[Diagnostic]:
    flow = DataFlow.of(ctx.model)
    for scope in list(flow.scopes.values()):
        for call in scope.calls:
            if flow.taint_kind(call, scope.qualname) != "resample":
                continue
            where = flow.leak_site(call, scope.qualname, frozenset({TRAIN, VAL, TEST}))
            if where is None:
                continue
            yield report(
                META,
                span_of(ctx.model, call),
                f"`{ast.unparse(call.func)}` copies rows before the data is split, so copies of a sample end up in both "
                "the training and the test part; resample the training part only",
                related=[Related(span_of(ctx.model, where), "the data is split here")],
            )
