"""## What it does
Flags copies of samples made before the data is split into training and test parts:

- oversampling that copies or synthesises rows (`SMOTE`, `ADASYN`, `RandomOverSampler`,
  `sklearn.utils.resample` with replacement);
- offline augmentation that appends augmented copies of a dataset to the dataset itself
  (`np.concatenate([X, augment(X)])`, `torch.cat([x, x.flip(-1)])`,
  `ConcatDataset([ds, AugmentedDataset(ds)])`, an imgaug / albumentations pipeline run over
  the whole array and concatenated with it), or that concatenates a dataset with itself,

when the result is then split with `train_test_split`, `random_split`, a `KFold`-style
splitter or slices named after the sides.

## Why is this bad?
Oversampling makes copies (or near-copies, for SMOTE) of existing rows, and augmentation
makes variants of them: a flipped image, a noisy signal, a paraphrased sentence. Done
before the split, a sample and its copy land on both sides: the model is tested on samples
it was trained on, and the reported score measures memorisation. Yang et al. (ASE'22) call
this overlap leakage. Oversample or augment the training part only, after the split (an
`imblearn` `Pipeline` does this per cross-validation fold; on-the-fly `transform=`
augmentation of the training dataset does it for images).

The rule follows values through assignments, tuple unpacking, slicing and same-file
function returns. An augmented part counts only when it is derived from the very value it
is concatenated with and a call on the way says augmentation (a name with `aug`, `flip`,
`rotate`, `noise`, `crop`, `jitter`, `mixup`..., or the imgaug, albumentations,
torchvision.transforms, kornia.augmentation, nlpaug or audiomentations libraries) or adds
random noise. It stays silent when the copied data is already a training part, when the
concatenation joins features (`axis=1`) or unrelated data, when the split is a group split
(`GroupKFold(...).split(X, y, groups)`, which keeps a sample's copies together), and when it
cannot tell where the data came from.

**De-duplication is not flagged.** Removing duplicates *before* the split
(`df.drop_duplicates()` then `train_test_split`) is the correct order: it is what prevents
a sample from landing on both sides. The leak is the opposite, duplicates that are never
removed, or are removed on one side only after the split; but whether a dataset holds
duplicates at all is a property of the data, not of the code, so a linter cannot tell a
leak from a clean dataset there, and de-duplicating only the training part after the split
is harmless when there were no duplicates across the sides. The rule stays silent on every
`drop_duplicates` / `np.unique` pattern.

## Example
```python
X, y = SMOTE().fit_resample(X, y)
X_train, X_test, y_train, y_test = train_test_split(X, y)
```

```python
X_all = np.concatenate([X, np.flip(X, axis=2)])
y_all = np.concatenate([y, y])
X_train, X_test, y_train, y_test = train_test_split(X_all, y_all)
```

## Use instead
```python
X_train, X_test, y_train, y_test = train_test_split(X, y)
X_train, y_train = SMOTE().fit_resample(X_train, y_train)
```

```python
X_train, X_test, y_train, y_test = train_test_split(X, y)
X_train = np.concatenate([X_train, np.flip(X_train, axis=2)])
y_train = np.concatenate([y_train, y_train])
```

## Fix safety
No fix: moving the resampling or augmentation after the split restructures the script.

## References
- Yang, Brower-Sinning, Lewis, Kästner: *Data Leakage in Notebooks: Static Detection and Better Processes* (ASE 2022)
- [imbalanced-learn: common pitfalls](https://imbalanced-learn.org/stable/common_pitfalls.html)
- Kapoor, Narayanan: *Leakage and the Reproducibility Crisis in ML-based Science* (Patterns, 2023)
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from torch_preflight.core.dataflow import RESAMPLE_FUNCTIONS, TEST, TRAIN, VAL, DataFlow, Def, pos, span_of
from torch_preflight.core.diagnostics import Diagnostic, Related, Severity
from torch_preflight.core.names import dotted, tail
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF203",
    name="overlap-leakage",
    message="Oversampling or augmentation before the train/test split puts copies of a sample on both sides",
    fix_title=None,
    severity=Severity.WARNING,
    # fit_resample / sklearn.utils.resample (dataflow.taint_kind); concatenate, cat, ConcatDataset, vstack, append
    requires=("resample|cat|stack|append",),
)

# row-wise concatenations: (resolved name, the positional index of its axis argument or None)
_CONCAT: dict[str, int | None] = {
    "numpy.concatenate": 1,
    "numpy.vstack": None,
    "numpy.row_stack": None,
    "numpy.append": 2,
    "torch.cat": 1,
    "torch.concat": 1,
    "torch.concatenate": 1,
    "torch.vstack": None,
    "torch.row_stack": None,
    "pandas.concat": None,
    "torch.utils.data.ConcatDataset": None,
    "torch.utils.data.dataset.ConcatDataset": None,
}
_AUG_NAME = re.compile(r"aug|flip|rot90|rotate|rotation|mirror|jitter|noise|noisy|crop|perturb|mixup|cutmix|cutout|elastic|distort|blur|shear", re.I)
_AUG_LIBS = ("imgaug", "albumentations", "torchvision.transforms", "kornia.augmentation", "nlpaug", "audiomentations", "torch_audiomentations", "augly")
_RANDOM = re.compile(r"^(numpy\.random\.|torch\.(randn|rand|randn_like|rand_like|normal|randint)$|random\.(gauss|uniform|random)$)")


def check(ctx: Context) -> Iterator[Diagnostic]:
    flow = DataFlow.of(ctx.model)
    candidates = list(flow.calls_where(META.code, lambda c: _may_copy(flow, c)))
    if not candidates or not flow.may_split:  # nothing is split: neither `leak_site` nor `_split_of` finds a split
        return
    found: dict[int, list[tuple[ast.Call, tuple[ast.expr, ast.expr | None], ast.AST]]] = {}
    for scope, call in candidates:
        # A method other than these is never "resample" to taint_kind (its resolved name keeps the attribute).
        method = call.func.attr if isinstance(call.func, ast.Attribute) else None
        if method in (None, "fit_resample", "resample") and flow.taint_kind(call, scope.qualname) == "resample":
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
            continue
        copied = _copies(flow, call, scope.qualname)
        if copied is None:
            continue
        split = _split_of(flow, call)
        if split is None:
            continue
        found.setdefault(id(split), []).append((call, copied, split))
    for candidates in found.values():
        # one finding per split: the augmentation rather than the label copy that goes with it
        call, (base, variant), split = min(candidates, key=lambda c: (c[1][1] is None, pos(c[0])))
        what = (
            f"a second copy of `{ast.unparse(base)}`"
            if variant is None
            else f"`{ast.unparse(variant)}`, an augmented copy of `{ast.unparse(base)}`,"
        )
        yield report(
            META,
            span_of(ctx.model, call),
            f"`{tail(dotted(call.func))}` adds {what} to the data before it is split, so a sample and its copy can end up "
            f"on both the training and the test side; split first and {'augment' if variant is not None else 'copy'} the training part only",
            related=[Related(span_of(ctx.model, split), "the data is split here")],
        )


def _may_copy(flow: DataFlow, call: ast.Call) -> bool:
    """Whether the call can resample or concatenate rows, from the call alone."""
    if isinstance(call.func, ast.Attribute) and call.func.attr in ("fit_resample", "resample"):
        return True
    return (flow.resolve_call(call) or "") in _CONCAT or flow.resolve_call(call) in RESAMPLE_FUNCTIONS


def _copies(flow: DataFlow, call: ast.Call, scope: str) -> tuple[ast.expr, ast.expr | None] | None:
    """For a row-wise concatenation of a value with itself or with an augmented variant of
    itself: (the value, the variant or None for a plain copy)."""
    callee = flow.resolve_call(call) or ""
    if callee not in _CONCAT or not call.args or not isinstance(call.args[0], (ast.List, ast.Tuple)):
        return None
    if not _rows(call, callee):
        return None
    parts = [p for p in call.args[0].elts if not isinstance(p, ast.Starred)]
    for i, base in enumerate(parts):
        name = dotted(base)
        if not name:
            continue
        d = flow.reaching(name, scope, pos(base))
        if d is None or flow.info(base, scope).sides:  # unknown, or already one part of a split
            continue
        for j, other in enumerate(parts):
            if j == i:
                continue
            if dotted(other) == name and j > i:
                if flow.reaching(name, scope, pos(other)) is d:
                    return base, None
                continue
            if _derived(flow, other, scope, d) and _augmented(flow, other, scope, d):
                return base, other
    return None


def _derived(flow: DataFlow, expr: ast.AST, scope: str, base: Def, depth: int = 0) -> bool:
    """`expr` reads `base`, directly or through assignments (not through the returns of
    functions, whose parameters the file-wide provenance merges over all call sites)."""
    if depth > 6:
        return False
    for node in ast.walk(expr):
        if isinstance(node, (ast.Name, ast.Attribute)) and dotted(node):
            d = flow.reaching(dotted(node) or "", scope, pos(node))
            if d is base:
                return True
            if d is not None and d.kind in ("assign", "update") and d.value is not None and _derived(flow, d.value, d.scope, base, depth + 1):
                return True
            if d is not None and d.kind == "update":
                earlier = [x for x in flow.scopes[d.scope].defs.get(d.name, []) if x.at < d.at]
                if earlier and (earlier[-1] is base or (earlier[-1].value is not None and _derived(flow, earlier[-1].value, d.scope, base, depth + 1))):
                    return True
    return False


def _rows(call: ast.Call, callee: str) -> bool:
    """The concatenation adds rows: no axis, or axis/dim 0 (numpy.append needs axis=0)."""
    index = _CONCAT[callee]
    axis: ast.expr | None = None
    for keyword in call.keywords:
        if keyword.arg in ("axis", "dim"):
            axis = keyword.value
    if axis is None and index is not None and len(call.args) > index:
        axis = call.args[index]
    if axis is None:
        return callee != "numpy.append"  # numpy.append flattens without an axis
    return isinstance(axis, ast.Constant) and (axis.value == 0 or axis.value == "index")


def _augmented(flow: DataFlow, expr: ast.AST, scope: str, base: Def, depth: int = 0) -> bool:
    """A call on the way from `base` to `expr` says augmentation, or random noise is added.
    The history of `base` itself does not count: it is on both sides of the concatenation."""
    if depth > 4:
        return False
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            callee = flow.resolve_call(node) or ""
            if _AUG_NAME.search(tail(callee)) or callee.startswith(_AUG_LIBS):
                return True
            receiver = dotted(node.func)
            ctor = flow.constructor(receiver, scope, pos(node)) if receiver else None
            if ctor and (_AUG_NAME.search(tail(ctor)) or ctor.startswith(_AUG_LIBS)):
                return True  # seq(images=X) with seq = iaa.Sequential([...])
        elif isinstance(node, ast.BinOp):
            if any(isinstance(n, ast.Call) and _RANDOM.match(flow.resolve_call(n) or "") for n in ast.walk(node)):
                return True
        elif isinstance(node, (ast.Name, ast.Attribute)) and dotted(node):
            d = flow.reaching(dotted(node) or "", scope, pos(node))
            if d is None and isinstance(node, ast.Name) and _AUG_NAME.search(node.id):
                return True  # a function passed along: df["text"].apply(augment)
            if d is not None and d is not base and _def_augmented(flow, d, base, depth + 1):
                return True
    return False


def _def_augmented(flow: DataFlow, d: Def, base: Def, depth: int) -> bool:
    if d.kind not in ("assign", "update") or d.value is None:
        return False
    if _augmented(flow, d.value, d.scope, base, depth):
        return True
    if d.kind == "update":
        earlier = [x for x in flow.scopes[d.scope].defs.get(d.name, []) if x.at < d.at]
        return bool(earlier) and earlier[-1] is not base and _def_augmented(flow, earlier[-1], base, depth + 1)
    return False


def _split_of(flow: DataFlow, concat: ast.Call) -> ast.AST | None:
    """Where the concatenated data is split afterwards (not by a group splitter), if anywhere."""
    holders = {id(d) for d in flow.all_defs() if d.value is not None and any(n is concat for n in ast.walk(d.value))}
    for data_in, scope, node in flow.split_points():
        if isinstance(node, ast.Call) and (any(k.arg == "groups" for k in node.keywords) or _group_splitter(flow, node, scope)):
            continue
        if any(n is concat for n in ast.walk(data_in)) or any(id(d) in holders for d in flow.info(data_in, scope).origins):
            return node
    return None


def _group_splitter(flow: DataFlow, node: ast.Call, scope: str) -> bool:
    func = node.func
    if not (isinstance(func, ast.Attribute) and func.attr == "split"):
        return False
    receiver = func.value
    ctor = flow.resolve_call(receiver) if isinstance(receiver, ast.Call) else flow.constructor(dotted(receiver) or "", scope, pos(node))
    return bool(ctor and "Group" in tail(ctor)) and len(node.args) >= 3
