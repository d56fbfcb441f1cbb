"""## What it does
Flags training on the test split: a loop that runs `backward()` and an optimizer `step()`
while iterating over a loader or dataset built from the test split, a `fit` on the test
part, and model-selection decisions taken on the test part when the file also builds a
separate validation split: `validation_data=` for early stopping, a `ReduceLROnPlateau`
step, an early stopper called with a test metric, and an `if` on a test metric whose branch
saves or snapshots the model, counts patience or stops the loop.

## Why is this bad?
A model trained, early-stopped or tuned on the test set has seen it: the test score no
longer estimates performance on new data. Picking the best epoch by its test score is the
quiet version of this: the reported "best test accuracy" is the maximum over many noisy
measurements of the same test set, so it is biased upwards.

The rule decides by provenance, not by name: a loader counts as test data when it is
built from the test part of a split, a `random_split`, or a dataset created with
`train=False` / `split="test"`, through assignments, tuple unpacking, same-file function
returns and the arguments of same-file function calls. A metric counts as a test metric
when it is returned by a same-file function called with the test data (`evaluate(model,
test_loader)`, even when `evaluate` is also called with the validation loader elsewhere)
or computed on the batches of a loop over it. Where the origin is unknown or mixed, it
stays silent.

Model-selection decisions are flagged only when the same file builds a validation split
(the validation part of a split, a three-way `random_split`, `split="val"`, or a loader or
dataset named `val`/`valid`/`dev` that is not itself built from the test data): without
one, choosing the epoch on the test set is a reporting choice the rule cannot judge. A
branch that only prints, logs or records the best score is not a decision, and a
comparison inside the loop over the test batches is a per-sample computation, not a
selection.

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

```python
train_set, val_set = random_split(MNIST(root, train=True), [50000, 10000])
test_loader = DataLoader(MNIST(root, train=False))
...
test_acc = evaluate(model, test_loader)
if test_acc > best_acc:
    best_acc = test_acc
    torch.save(model.state_dict(), "best.pt")
```

## Use instead
```python
for x, y in train_loader:
    ...
```

```python
val_acc = evaluate(model, val_loader)
if val_acc > best_acc:
    best_acc = val_acc
    torch.save(model.state_dict(), "best.pt")
```

## Fix safety
No fix: which data the loop or the decision should use is the author's decision.

## References
- Yang, Brower-Sinning, Lewis, Kästner: *Data Leakage in Notebooks: Static Detection and Better Processes* (ASE 2022)
- Cawley, Talbot: *On Over-fitting in Model Selection and Subsequent Selection Bias in Performance Evaluation* (JMLR 2010)
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from torch_preflight.core.dataflow import (
    SPLIT_FUNCTIONS,
    TEST,
    VAL,
    DataFlow,
    Def,
    Info,
    keyword_side,
    pos,
    side_of_name,
    span_of,
    unwrap_iter,
)
from torch_preflight.core.diagnostics import Diagnostic, Related, Severity
from torch_preflight.core.names import dotted, tail
from torch_preflight.core.semantic import Kind, Loop, ModuleModel
from torch_preflight.core.source import Span
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
_ORDERING = (ast.Lt, ast.Gt, ast.LtE, ast.GtE)
# what a validation loader or dataset is called, or built with (a `val_` name alone may be a metric)
_DATA_NAME = re.compile(r"loader|dataset|data|set$|_ds$|^ds_|_dl$|split|iter|images|imgs|_df$|^(x|y)_", re.I)
_VAL_NAME = re.compile(
    r"(?:^|_)(?:val|valid|validation|dev)(?:_|$|[0-9]|set|loader|data|ds|dl|iter|subset|dataset)|^(?:val|valid|dev)(?=[A-Z])|(?<=[a-z])(?:Val|Valid|Validation|Dev)(?=[A-Z_]|$)"
)
_NOT_DATA = re.compile(r"(has|is|use|num|n|limit|len|size|do|should|run|check)_", re.I)  # has_val_loader, limit_val_batches
_DATA_CTOR = re.compile(r"loader|dataset|folder|subset|load_data|get_data", re.I)
_EARLY_STOPPER = re.compile(r"early_?stop|stopper", re.I)
# a checkpoint of the selected model
_SAVE = re.compile(
    r"^save$|(save|store|dump|write)_?(best|checkpoint|ckpt|model|weights|net|network|state|params|pretrained)|^(save_?)?(checkpoint|ckpt)$|^state_dict$|^load_state_dict$",
    re.I,
)
# counters and flags of early stopping, and snapshots of the best model
_SELECTION_TARGET = re.compile(
    r"patience|counter|wait|bad_?epochs?|no_?improv|not_?improv|since_?(last_?)?improv|without_?improv|early_?stop|^stop|should_?stop|"
    r"trigger|stale|^best_?(model|state|weights?|params|net|network|ckpt|checkpoint|sd)$",
    re.I,
)


def only_test(info: Info) -> bool:
    return info.sides == frozenset({TEST})


_HOPS = 24  # definitions and function returns followed from one value (the syntax tree below them is finite)
_Env = dict[int, frozenset[str]]  # id of a parameter's Def -> the sides of what one call passes


class _Metrics:
    """Split sides of a value, with same-file function calls taken per call site: the
    result of `evaluate(model, test_loader)` comes from the test split even when
    `evaluate` is also called with the validation loader elsewhere (the file-wide
    `DataFlow.info` unions the call sites of a parameter). A call's returns are read with
    the function's parameters bound to what that call passes."""

    def __init__(self, flow: DataFlow) -> None:
        self.flow = flow
        self._defs: dict[tuple[int, frozenset[tuple[int, frozenset[str]]]], frozenset[str]] = {}
        self._busy: set[tuple[int, frozenset[tuple[int, frozenset[str]]]]] = set()
        self._nest = 0
        self._steps = 0

    def sides(self, expr: ast.AST | None, scope: str, depth: int = 0, env: _Env | None = None) -> frozenset[str]:
        if expr is None or depth > _HOPS or isinstance(expr, (ast.Lambda, ast.Constant)) or self._nest > 150 or self._steps > 200_000:
            return frozenset()  # unknown: silent (the last two bound deep expressions and pathological files)
        self._nest += 1
        self._steps += 1
        try:
            return self._sides(expr, scope, depth, env or {})
        finally:
            self._nest -= 1

    def _sides(self, expr: ast.AST, scope: str, depth: int, env: _Env) -> frozenset[str]:
        flow = self.flow
        if isinstance(expr, (ast.Name, ast.Attribute)) and dotted(expr):
            d = flow.reaching(dotted(expr) or "", scope, pos(expr))
            if d is None:
                return self.sides(expr.value, scope, depth, env) if isinstance(expr, ast.Attribute) else frozenset()
            return self.def_sides(d, depth + 1, env)
        if isinstance(expr, ast.Call) and flow.local_function(flow.resolve_call(expr), scope) is not None:
            return self._returns(expr, scope, depth, env)
        side = keyword_side(expr) if isinstance(expr, ast.Call) else None
        out = frozenset({side}) if side else frozenset()
        for child in ast.iter_child_nodes(expr):
            if isinstance(child, ast.expr):
                out |= self.sides(child.value if isinstance(child, ast.Starred) else child, scope, depth, env)
            elif isinstance(child, ast.keyword):
                out |= self.sides(child.value, scope, depth, env)
            elif isinstance(child, ast.comprehension):
                out |= self.sides(child.iter, scope, depth, env)
        return out

    def _returns(self, call: ast.Call, scope: str, depth: int, env: _Env, index: int | None = None, arity: int | None = None) -> frozenset[str]:
        """What a same-file function returns, its parameters bound to what `call` passes;
        with `index`, position `index` of the tuples it returns (`a, b = f()`)."""
        flow = self.flow
        fn = flow.local_function(flow.resolve_call(call), scope)
        if fn is None or not isinstance(fn.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return frozenset()
        bound = dict(env)
        params = fn.node.args
        positional = [a.arg for a in (*params.posonlyargs, *params.args)]
        passed: dict[str, ast.expr] = {}
        for name, arg in zip(positional, call.args, strict=False):
            if isinstance(arg, ast.Starred):
                break
            passed[name] = arg
        passed.update({k.arg: k.value for k in call.keywords if k.arg})
        for d in flow.defs_in(fn.qualname):
            if d.kind == "param":
                bound[id(d)] = self.sides(passed.get(d.name), scope, depth, env)
        out: frozenset[str] = frozenset()
        for ret in fn.returns:
            if index is not None and isinstance(ret, (ast.Tuple, ast.List)) and len(ret.elts) == arity:
                ret = ret.elts[index]
            out |= self.sides(ret, fn.qualname, depth + 1, bound)
        return out

    def _appended(self, d: Def, depth: int, env: _Env) -> frozenset[str]:
        """For `losses = []`: what `losses.append(...)` / `.extend(...)` add to this list later."""
        flow = self.flow
        out: frozenset[str] = frozenset()
        for call in flow.scopes[d.scope].calls:
            func = call.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr in ("append", "extend")
                and dotted(func.value) == d.name
                and flow.reaching(d.name, d.scope, pos(call)) is d
            ):
                for arg in call.args:
                    out |= self.sides(arg, d.scope, depth, env)
        return out

    def def_sides(self, d: Def, depth: int = 0, env: _Env | None = None) -> frozenset[str]:
        flow = self.flow
        env = env or {}
        if d.kind == "param":
            return env[id(d)] if id(d) in env else flow.def_info(d).sides
        key = (id(d), frozenset(env.items()))
        cached = self._defs.get(key)
        if cached is not None:
            return cached
        if key in self._busy or depth > _HOPS:
            return frozenset()
        if d.value is None:
            return frozenset()
        if flow.split_input(d.value, d.scope) is not None:
            own = flow.own_side(d)
            if own:
                return frozenset({own})
        self._busy.add(key)
        try:
            value: ast.expr = unwrap_iter(d.value) if d.kind == "for" else d.value
            if d.index is not None and isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == d.arity:
                value = value.elts[d.index]
            if d.index is not None and isinstance(value, ast.Call) and flow.local_function(flow.resolve_call(value), d.scope) is not None:
                out = self._returns(value, d.scope, depth + 1, env, d.index, d.arity)
            else:
                out = self.sides(value, d.scope, depth, env)
            if isinstance(value, ast.List) and not value.elts:
                out |= self._appended(d, depth, env)
            if d.kind == "update":
                earlier = [x for x in flow.scopes[d.scope].defs.get(d.name, []) if x.at < d.at]
                if earlier:
                    out |= self.def_sides(earlier[-1], depth + 1, env)
            if not out:
                own = flow.own_side(d)  # a slice named after its side
                out = frozenset({own}) if own else out
        finally:
            self._busy.discard(key)
        self._defs[key] = out
        return out

    def only_test(self, expr: ast.AST, scope: str) -> bool:
        """From the test split only. A name that says validation (`val_acc`) counts as a
        validation value unless its provenance says test: the validation loader's origin is
        often unknown (`ImageFolder("data/val")`)."""
        for n in ast.walk(expr):
            if isinstance(n, (ast.Name, ast.Attribute)) and side_of_name(dotted(n) or "") == VAL and TEST not in self.sides(n, scope):
                return False
        return self.sides(expr, scope) == frozenset({TEST})


def _validation_split(flow: DataFlow) -> Def | None:
    """The first validation split the file builds: the validation part of a split (a
    three-way `random_split`, `X_val` of a second `train_test_split`), a dataset built with
    `split="val"`, or a loader or dataset named val/valid/dev that is not built from the
    test data. A validation *metric* (`val_loss`) is no split."""
    # by position; a tie (one unpacking) by name, so the order the definitions come in never matters
    for d in sorted(flow.defs_where("TPF202.validation", lambda d: _may_be_validation(flow, d)), key=lambda d: (d.at, d.name)):
        value, last = d.value, tail(d.name)
        assert value is not None
        named = _val_named(last)
        if flow.split_input(value, d.scope) is not None:
            found = d.index is not None and flow.own_side(d) == VAL and (named or side_of_name(d.name) is None)
        elif isinstance(value, ast.Call) and (
            keyword_side(value) == VAL or (named and (_DATA_NAME.search(last) or _DATA_CTOR.search(tail(dotted(value.func)))))
        ):
            found = True
        elif named and isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) and value.slice.value in ("val", "valid", "validation", "dev"):
            found = True
        else:  # a named part of a split, through a Subset or a slice
            found = named and d.index is None and bool(_DATA_NAME.search(last)) and VAL in flow.def_info(d).sides
        # Built from the test data: no validation split. Asked last, since it needs the
        # definition's whole provenance (the costliest question, for every definition).
        if found and TEST not in flow.def_info(d).sides:
            return d
    return None


def _trained_on_test(flow: DataFlow, loop: Loop) -> Diagnostic | None:
    node = flow.for_nodes.get(loop.span.start.line)
    if loop.kind != "for" or node is None:
        return None
    iterated = unwrap_iter(node.iter)
    if not only_test(flow.info(iterated, loop.function)):
        return None
    return report(
        META,
        loop.header,
        f"This training loop iterates over `{ast.unparse(iterated)}`, which is built from the test split: "
        "the model is trained on its own test data",
    )


def _fit_or_step(call: ast.Call) -> bool:
    """A method call that `check` can report: a fit, or a step (of a scheduler)."""
    return isinstance(call.func, ast.Attribute) and call.func.attr in (*_FITS, "step")


def _val_named(name: str) -> bool:
    return bool(_VAL_NAME.search(name)) and not _NOT_DATA.match(name)


def _may_be_validation(flow: DataFlow, d: Def) -> bool:
    """What `_validation_split` can accept, from the definition alone: named like a validation
    part, or built by a call that splits or says `split="val"`."""
    if d.kind not in ("assign", "with") or d.stmt is None or d.value is None:
        return False
    if _val_named(tail(d.name)):
        return True
    value = d.value
    if not isinstance(value, ast.Call):
        return False
    callee = flow.resolve_call(value) or ""
    return (
        keyword_side(value) == VAL
        or callee in SPLIT_FUNCTIONS
        or tail(callee) in ("train_test_split", "random_split")
        or (isinstance(value.func, ast.Attribute) and value.func.attr == "split")
    )


def check(ctx: Context) -> Iterator[Diagnostic]:
    model = ctx.model
    flow = DataFlow.of(model)
    # the provenance of what a loop iterates reads its function and what that reaches by name
    trained_on_test = ctx.training.loop_memo("TPF202.loop")
    for tl in ctx.training.training_loops:
        if tl.loop.id not in trained_on_test:
            trained_on_test[tl.loop.id] = _trained_on_test(flow, tl.loop)
        if trained_on_test[tl.loop.id] is not None:
            yield trained_on_test[tl.loop.id]
    validation = _validation_split(flow)
    metrics = _Metrics(flow)
    for scope, call in flow.calls_where(META.code, _fit_or_step):
        func = call.func
        assert isinstance(func, ast.Attribute)
        if func.attr in _FITS and call.args and only_test(flow.info(call.args[0], scope.qualname)):
            yield report(
                META,
                span_of(model, call),
                f"`{ast.unparse(func)}` is fitted on `{ast.unparse(call.args[0])}`, which comes from the test split",
            )
            continue
        if validation is None:
            continue
        validation_data = next((k.value for k in call.keywords if k.arg == "validation_data"), None)
        if func.attr == "fit" and validation_data is not None and only_test(flow.info(validation_data, scope.qualname)):
            yield report(
                META,
                span_of(model, validation_data),
                "Early stopping and model selection use the test split although a validation split exists; "
                "pass the validation data here",
            )
        elif (
            func.attr == "step"
            and call.args
            and model.kind_of(dotted(func.value), scope.qualname) is Kind.SCHEDULER
            and metrics.only_test(call.args[0], scope.qualname)
        ):
            yield report(
                META,
                span_of(model, call),
                f"The learning-rate schedule is driven by `{_first_test_name(metrics, call.args[:1], scope.qualname) or ast.unparse(call.args[0])}`, "
                f"computed on the test split, although a validation split exists (`{validation.name}`); step it with the validation metric",
                related=_related(model, flow, metrics, call.args, scope.qualname, validation),
            )
    if validation is not None and model.tree is not None:
        yield from _selection_on_test(ctx, flow, metrics, validation)


# --- early stopping and model selection on a test metric ----------------------------------


def _may_select_on(node: ast.AST) -> bool:
    """The nodes `_selection_on_test` looks at, from the node alone: calls of a named function or
    method, and `if`s whose test compares (or reads a flag that may hold a comparison)."""
    if isinstance(node, ast.Call):
        return bool(dotted(node.func) or (isinstance(node.func, ast.Attribute) and dotted(node.func.value)))
    if isinstance(node, ast.If):
        test = node.test.operand if isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not) else node.test
        return isinstance(test, ast.Name) or any(isinstance(n, ast.Compare) for n in ast.walk(test))
    return False


def _may_select_by_name(node: ast.AST) -> bool:
    """`_may_select_on`, for a call only when it is named a save or an early stopper (`_may_stop` with no
    name built by an early stopper's class): the nodes `_selection_on_test` looks at in a file without one."""
    if isinstance(node, ast.Call) and not (_SAVE.search(tail(dotted(node.func))) or _may_stop(node, set())):
        return False
    return _may_select_on(node)


def _builds_stopper(flow: DataFlow, d: Def) -> bool:
    """A definition that `DataFlow.constructor` can read as an early stopper's construction."""
    return d.index is None and isinstance(d.value, ast.Call) and bool(_EARLY_STOPPER.search(tail(flow.resolve_call(d.value) or "")))


def _may_stop(call: ast.Call, stoppers: set[str]) -> bool:
    """What `_is_early_stopper` can accept: a name that says so, or one built by an early stopper's class."""
    names = [dotted(call.func) or ""]
    if isinstance(call.func, ast.Attribute):
        names.append(dotted(call.func.value) or "")
    return any(n and (_EARLY_STOPPER.search(tail(n)) or n in stoppers) for n in names)


def _is_early_stopper(flow: DataFlow, call: ast.Call, scope: str) -> bool:
    """`early_stopping(loss, model)`, `stopper.step(acc)`, `es(loss)` with `es = EarlyStopping(...)`."""
    func = call.func
    names = [dotted(func) or ""]
    if isinstance(func, ast.Attribute):
        names.append(dotted(func.value) or "")
    for name in names:
        if not name:
            continue
        if _EARLY_STOPPER.search(tail(name)) and not tail(name)[:1].isupper():  # not the constructor itself
            return True
        ctor = flow.constructor(name, scope, pos(call))
        if ctor and _EARLY_STOPPER.search(tail(ctor)):
            return True
    return False


def _selection_on_test(ctx: Context, flow: DataFlow, metrics: _Metrics, validation: Def) -> Iterator[Diagnostic]:
    model = ctx.model
    stoppers = {d.name for d in flow.defs_where("TPF202.stopper-defs", lambda d: _builds_stopper(flow, d))}
    val_name = validation.name
    # without a name built by an early stopper's class, a call is looked at only when its own names say save or stop
    candidates = flow.nodes_where("TPF202.selection", _may_select_on) if stoppers else flow.nodes_where("TPF202.selection-named", _may_select_by_name)
    for node in candidates:
        if isinstance(node, ast.Call):
            save = bool(_SAVE.search(tail(dotted(node.func))))
            if not save and not _may_stop(node, stoppers):
                continue  # neither an early stopper (by name, or built from a class named so) nor a save
            scope = flow.scope_at(node)
            args = [a for a in (*node.args, *(k.value for k in node.keywords)) if model.kind_of(dotted(a), scope) is not Kind.MODEL]
            if args and _is_early_stopper(flow, node, scope) and metrics.only_test(ast.Tuple(elts=args, ctx=ast.Load()), scope):
                culprit = _first_test_name(metrics, args, scope)
                yield report(
                    META,
                    span_of(model, node),
                    f"Early stopping is decided on `{culprit or ast.unparse(args[0])}`, computed on the test split, although a "
                    f"validation split exists (`{val_name}`); stop on the validation metric",
                    related=_related(model, flow, metrics, args, scope, validation),
                )
            elif save and not _in_test_branch(flow, metrics, node, flow.parents(node), scope):
                flags = [a for a in args if isinstance(a, ast.Name) and _compared(flow, a, scope)]
                operands = _compared(flow, flags[0], scope) if flags else []
                if operands and metrics.only_test(ast.Tuple(elts=operands, ctx=ast.Load()), scope):
                    culprit = _first_test_name(metrics, operands, scope) or flags[0].id
                    yield report(
                        META,
                        span_of(model, node),
                        f"The checkpoint kept as the best is chosen on `{culprit}`, computed on the test split, although a "
                        f"validation split exists (`{val_name}`); compare the validation metric instead",
                        related=_related(model, flow, metrics, operands, scope, validation),
                    )
            continue
        if not isinstance(node, ast.If):
            continue
        parents = flow.parents(node)
        scope = flow.scope_at(node)
        operands = _compared(flow, node.test, scope)
        if not operands or not metrics.only_test(ast.Tuple(elts=operands, ctx=ast.Load()), scope):
            continue
        if any(isinstance(n, ast.Call) and _is_early_stopper(flow, n, scope) for n in ast.walk(node.test)):
            continue  # reported at the early stopper's call
        if _per_sample(metrics, node, parents, scope) or not _selects(model, node, parents, scope):
            continue
        culprit = _first_test_name(metrics, operands, scope) or ast.unparse(node.test)
        yield report(
            META,
            _header(model, node),
            f"Model selection or early stopping is decided on `{culprit}`, computed on the test split, although a "
            f"validation split exists (`{val_name}`); decide on the validation metric and keep the test set for the final score",
            related=_related(model, flow, metrics, operands, scope, validation),
        )


def _in_test_branch(flow: DataFlow, metrics: _Metrics, node: ast.AST, parents: dict[int, ast.AST], scope: str) -> bool:
    """Inside the branch of an `if` on a test metric: that `if` is the decision, checked as one."""
    current = parents.get(id(node))
    while current is not None and not isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
        if isinstance(current, ast.If):
            operands = _compared(flow, current.test, scope)
            if operands and metrics.only_test(ast.Tuple(elts=operands, ctx=ast.Load()), scope):
                return True
        current = parents.get(id(current))
    return False


def _compared(flow: DataFlow, test: ast.expr, scope: str) -> list[ast.expr]:
    """The operands of the ordering comparisons (`<`, `>=`, ...) a condition makes, directly
    or through a flag (`is_best = acc > best; if is_best:`)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if isinstance(test, ast.Name):
        d = flow.reaching(test.id, scope, pos(test))
        if d is None or d.kind != "assign" or d.index is not None or d.value is None or d.scope != scope:
            return []
        test = d.value
    operands: list[ast.expr] = []
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and all(isinstance(op, _ORDERING) for op in node.ops):
            sides = [node.left, *node.comparators]
            if not any(_is_size(flow, e, scope) for e in sides):  # `len(test_loader) > 0` compares sizes, not scores
                operands.extend(sides)
    return operands


def _is_size(flow: DataFlow, expr: ast.expr, scope: str) -> bool:
    if isinstance(expr, ast.Name):  # n_test = len(test_set)
        d = flow.reaching(expr.id, scope, pos(expr))
        if d is not None and d.kind == "assign" and d.index is None and d.value is not None:
            expr = d.value
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and tail(dotted(node.func)) in ("len", "size", "numel", "count", "__len__"):
            return True
        if isinstance(node, ast.Attribute) and node.attr in ("shape", "size", "ndim", "num_samples", "batch_size"):
            return True
    return False


def _first_test_name(metrics: _Metrics, exprs: list[ast.expr], scope: str) -> str | None:
    for expr in exprs:
        for node in ast.walk(expr):
            if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and metrics.only_test(node, scope):
                return ast.unparse(node)
    return None


def _related(model: ModuleModel, flow: DataFlow, metrics: _Metrics, exprs: list[ast.expr], scope: str, validation: Def) -> list[Related]:
    out: list[Related] = []
    for expr in exprs:
        names = [n for n in ast.walk(expr) if isinstance(n, (ast.Name, ast.Attribute)) and dotted(n)]
        for name in names:
            d = flow.reaching(dotted(name) or "", scope, pos(name))
            if d is not None and d.stmt is not None and metrics.def_sides(d) == frozenset({TEST}):
                out.append(Related(span_of(model, d.stmt), f"`{d.name}` is computed on the test split here"))
                break
        if out:
            break
    if validation.stmt is not None:
        out.append(Related(span_of(model, validation.stmt), f"the validation split `{validation.name}`"))
    return out


def _per_sample(metrics: _Metrics, node: ast.AST, parents: dict[int, ast.AST], scope: str) -> bool:
    """Inside a loop over the test data: a per-batch computation, not a decision on a metric."""
    current = parents.get(id(node))
    while current is not None and not isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
        if isinstance(current, (ast.For, ast.AsyncFor)) and TEST in metrics.sides(unwrap_iter(current.iter), scope):
            return True
        current = parents.get(id(current))
    return False


def _in_loop(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    current = parents.get(id(node))
    while current is not None and not isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
        if isinstance(current, (ast.For, ast.AsyncFor, ast.While)):
            return True
        current = parents.get(id(current))
    return False


def _selects(model: ModuleModel, node: ast.If, parents: dict[int, ast.AST], scope: str) -> bool:
    """The branch saves or snapshots the model, counts patience, or stops the loop. Logging,
    printing and recording the best score are not decisions."""
    in_loop = _in_loop(node, parents)
    stack: list[tuple[ast.AST, bool]] = [(stmt, True) for stmt in (*node.body, *node.orelse)]
    while stack:
        current, breaks_here = stack.pop()
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(current, ast.Break) and breaks_here and in_loop:
            return True
        if isinstance(current, ast.Return) and in_loop:
            return True
        if isinstance(current, ast.Call):
            last = tail(dotted(current.func))
            if _SAVE.search(last):
                return True
            if last == "deepcopy" and any(model.kind_of(dotted(a), scope) is Kind.MODEL for a in current.args):
                return True
        targets: list[ast.expr] = []
        if isinstance(current, ast.Assign):
            targets = list(current.targets)
        elif isinstance(current, (ast.AugAssign, ast.AnnAssign)):
            targets = [current.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, (ast.Name, ast.Attribute)) and _SELECTION_TARGET.search(tail(dotted(t))):
                    return True
        inner = breaks_here and not isinstance(current, (ast.For, ast.AsyncFor, ast.While))
        stack.extend((child, inner) for child in ast.iter_child_nodes(current))
    return False


def _header(model: ModuleModel, node: ast.If) -> Span:
    """`if <condition>`: the decision, not its whole block."""
    head = span_of(model, node)
    cond = span_of(model, node.test)
    return Span(head.start, cond.end)
