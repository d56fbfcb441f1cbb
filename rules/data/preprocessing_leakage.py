"""## What it does
Flags a statistic fitted on data that is split afterwards, or applied to a test part after
being fitted on the whole: an sklearn transformer's `fit`/`fit_transform`
(`StandardScaler`, `MinMaxScaler`, `PCA`, `SelectKBest`, `TfidfVectorizer`, imputers, ...)
or a dataset statistic (`x.mean()`, `x.std()`, `x.min()`, `x.max()`, `np.mean(x)`) over the
sample axis, whose result reaches the rows that end up in the test or validation part of
`train_test_split`, `random_split`, a `KFold` split, cross-validation or a train/test slice.

## Why is this bad?
The test rows took part in the statistic the model is trained with: their mean, their
variance, their vocabulary, the features they make look informative. Every number measured
on the test split is then optimistic, sometimes by a lot (feature selection on the full
data can make noise look predictive). Yang et al. (ASE'22) found this "preprocessing
leakage" to be the most common leakage in public notebooks.

The rule follows values through assignments, tuple unpacking, slicing and same-file
function returns. It stays silent when the fit sees only the training part, when the
transformer sits inside a `Pipeline` that cross-validation refits per fold, when the
normalisation uses constants (ImageNet mean/std), for per-sample statistics (`axis=1`),
for per-group aggregations (`df.groupby("k").mean()`, `rolling`, `resample`: a new
table whose rows are the groups), for a bare shift by the minimum or maximum
(`df["age"] - df["age"].min()`, labels re-indexed), and whenever it cannot tell where
the data came from. A dataset's `transform=` argument carries the statistic to the
rows, but the rows do not come from it: a fresh dataset normalised with statistics of
another is not the statistic's data.

## Example
```python
X = StandardScaler().fit_transform(X)
X_train, X_test, y_train, y_test = train_test_split(X, y)
```

## Use instead
```python
X_train, X_test, y_train, y_test = train_test_split(X, y)
scaler = StandardScaler().fit(X_train)
X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
```
or put the scaler in a `Pipeline` and cross-validate the pipeline.

## Fix safety
No fix: moving a fit after the split restructures the script.

## References
- Yang, Brower-Sinning, Lewis, Kästner: *Data Leakage in Notebooks: Static Detection and Better Processes* (ASE 2022)
- [scikit-learn: common pitfalls, data leakage](https://scikit-learn.org/stable/common_pitfalls.html#data-leakage)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from torch_preflight.core.dataflow import STAT_METHODS, TEST, VAL, DataFlow, pos, span_of
from torch_preflight.core.diagnostics import Diagnostic, Related, Severity
from torch_preflight.core.names import dotted, tail
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF201",
    name="preprocessing-leakage",
    message="Statistic fitted on data that is split afterwards (test rows leak into it)",
    fix_title=None,
    severity=Severity.WARNING,
    # a fitted transformer or a dataset statistic (dataflow.taint_kind) needs one of these names
    requires=("fit|mean|std|var|min|max|median|quantile|percentile",),
)

# A method call is "fit" or "stat" to `DataFlow.taint_kind` only under one of these names: the
# attribute itself, or the tail of its resolved name, which is the same attribute.
_FIT_OR_STAT = frozenset({"fit", "fit_transform"}) | STAT_METHODS


def check(ctx: Context) -> Iterator[Diagnostic]:
    flow = DataFlow.of(ctx.model)
    candidates = list(flow.calls_where(META.code, lambda c: _may_taint(flow, c)))
    if not candidates or not flow.may_split:  # nothing is split and no value has a side: `leak_site` finds nothing
        return
    for scope, call in candidates:
        kind = flow.taint_kind(call, scope.qualname)
        if kind not in ("fit", "stat"):
            continue
        where = flow.leak_site(call, scope.qualname, frozenset({TEST, VAL}))
        if where is None:
            continue
        data = flow.tainted_input(call)
        what = _describe(flow, call, scope.qualname)
        data_text = ast.unparse(data) if data is not None else "the data"
        yield report(
            META,
            span_of(ctx.model, call),
            f"{what} is computed on `{data_text}` before it is split, so the test rows leak into it; "
            "fit it on the training part only",
            related=[Related(span_of(ctx.model, where), "the data is split (or a test part is built) here")],
        )


def _may_taint(flow: DataFlow, call: ast.Call) -> bool:
    """Whether `taint_kind` can call the call a fit or a statistic, from the call alone: a
    method of those names, or a numpy / torch statistic function."""
    if isinstance(call.func, ast.Attribute):
        return call.func.attr in _FIT_OR_STAT  # the resolved name of a method keeps the attribute
    callee = flow.resolve_call(call)
    return bool(callee) and tail(callee) in STAT_METHODS and callee.partition(".")[0] in ("numpy", "torch")


def _describe(flow: DataFlow, call: ast.Call, scope: str) -> str:
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in ("fit", "fit_transform"):
        ctor = flow.built_from(func.value, scope, pos(call))
        return f"`{tail(ctor)}.{func.attr}`"
    name = func.attr if isinstance(func, ast.Attribute) else tail(dotted(func))
    return f"The statistic `{name}()`"
