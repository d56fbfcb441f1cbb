"""## What it does
Flags an activation applied twice or on the wrong side of a loss: softmax (or
log_softmax) output going into `nn.CrossEntropyLoss` / `F.cross_entropy`, sigmoid output
going into `nn.BCEWithLogitsLoss` / `F.binary_cross_entropy_with_logits`, softmax output
into `NLLLoss`, and visible raw logits (a `Linear` output) into `nn.BCELoss`. It follows
the value through variables and through a same-file model whose `forward` returns the
activation, or returns it as one element of a tuple (`validity, label = discriminator(x)`),
and a loss passed in as a parameter when every same-file call site passes the
same kind of loss. A criterion built in branches (`SoftTargetCrossEntropy()` with mixup,
`LabelSmoothingCrossEntropy()` with smoothing, `CrossEntropyLoss()` otherwise) is judged by every
value it may hold: all of timm's cross-entropies apply log_softmax too, so softmax into any of
them is reported; one branch building something else (or something unknown) keeps it silent.

## Why is this bad?
`CrossEntropyLoss` applies `log_softmax` itself and `BCEWithLogitsLoss` applies the
sigmoid itself. Feeding them probabilities squashes the inputs into [0, 1]: the loss can
no longer become small, gradients shrink, and training is slow or stalls while still
"working". `NLLLoss` expects log-probabilities, so probabilities give a wrong loss;
`BCELoss` expects probabilities, so logits give NaNs or errors. (`log_softmax` into
`CrossEntropyLoss` is only redundant; it is reported so the extra work goes.)
`log_softmax` into `NLLLoss` is correct and not flagged.

## Example
```python
probs = F.softmax(model(x), dim=1)
loss = F.cross_entropy(probs, y)
```

## Use instead
```python
logits = model(x)
loss = F.cross_entropy(logits, y)
probs = logits.softmax(dim=1)  # for reporting only
```

## Fix safety
No fix: removing the activation can change what other code (metrics, inference) receives.

## References
- [torch.nn.CrossEntropyLoss](https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html)
- [torch.nn.BCEWithLogitsLoss](https://pytorch.org/docs/stable/generated/torch.nn.BCEWithLogitsLoss.html)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from torch_preflight.core.arguments import CRITERION_FAMILY, values_of
from torch_preflight.core.dataflow import DataFlow, class_method, pos, span_of, walk_function
from torch_preflight.core.diagnostics import Diagnostic, Related, Severity
from torch_preflight.core.names import dotted, tail
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF103",
    name="double-softmax",
    message="Activation applied before a loss that applies it again (softmax into CrossEntropyLoss, sigmoid into BCEWithLogitsLoss)",
    fix_title=None,
    severity=Severity.ERROR,
)

_LOSSES = {
    "torch.nn.functional.cross_entropy": "cross_entropy",
    "torch.nn.CrossEntropyLoss": "cross_entropy",
    "torch.nn.functional.binary_cross_entropy_with_logits": "bce_logits",
    "torch.nn.BCEWithLogitsLoss": "bce_logits",
    "torch.nn.functional.nll_loss": "nll",
    "torch.nn.NLLLoss": "nll",
    "torch.nn.functional.binary_cross_entropy": "bce",
    "torch.nn.BCELoss": "bce",
}
_ACTIVATION_FUNCTIONS = {
    "torch.softmax": "softmax",
    "torch.nn.functional.softmax": "softmax",
    "torch.special.softmax": "softmax",
    "torch.log_softmax": "log_softmax",
    "torch.nn.functional.log_softmax": "log_softmax",
    "torch.special.log_softmax": "log_softmax",
    "torch.sigmoid": "sigmoid",
    "torch.nn.functional.sigmoid": "sigmoid",
    "torch.special.expit": "sigmoid",
}
_ACTIVATION_MODULES = {"torch.nn.Softmax": "softmax", "torch.nn.LogSoftmax": "log_softmax", "torch.nn.Sigmoid": "sigmoid", "torch.nn.Linear": "logits"}
_PASS_THROUGH = frozenset({"squeeze", "unsqueeze", "view", "reshape", "flatten", "float", "double", "to", "contiguous", "clone", "cuda", "cpu"})
_BAD = {
    ("cross_entropy", "softmax"): "`{loss}` applies log_softmax itself, so its input `{arg}` is softmaxed twice: the loss "
    "cannot get small and gradients shrink; pass the logits",
    ("cross_entropy", "log_softmax"): "`{loss}` applies log_softmax itself; `{arg}` is already log_softmax output, which "
    "is redundant work; pass the logits",
    ("bce_logits", "sigmoid"): "`{loss}` applies the sigmoid itself, so its input `{arg}` goes through sigmoid twice; "
    "pass the logits",
    ("nll", "softmax"): "`{loss}` expects log-probabilities but `{arg}` is softmax output; use log_softmax (or "
    "CrossEntropyLoss on the logits)",
    ("bce", "logits"): "`{loss}` expects probabilities but `{arg}` is a raw Linear output; use BCEWithLogitsLoss",
}


def check(ctx: Context) -> Iterator[Diagnostic]:
    model = ctx.model
    flow = DataFlow.of(model)
    for scope in list(flow.scopes.values()):
        for call in scope.calls:
            arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "input"), None)
            if arg is None:
                continue
            found = _activation(flow, arg, scope.qualname, 0)
            if found is None:
                continue  # first the cheaper question: most calls take no activation's output
            loss = _loss_kind(flow, call, scope.qualname)
            if loss is None:
                continue
            activation, where = found
            template = _BAD.get((loss, activation))
            if template is None:
                continue
            yield report(
                META,
                span_of(model, call),
                template.format(loss=ast.unparse(call.func), arg=ast.unparse(arg)),
                related=[Related(span_of(model, where), f"{activation.replace('logits', 'raw logits')} applied here")],
            )


def _loss_kind(flow: DataFlow, call: ast.Call, scope: str) -> str | None:
    callee = flow.resolve_call(call)
    if callee in _LOSSES and callee.startswith("torch.nn.functional."):
        return _LOSSES[callee]
    func = call.func
    if isinstance(func, ast.Call):  # nn.CrossEntropyLoss()(x, y)
        ctor = flow.resolve_call(func)
        return _LOSSES.get(ctor or "") if ctor and not ctor.startswith("torch.nn.functional.") else None
    name = dotted(func)
    if name:
        possible = values_of(flow.model, name, scope)
        if possible:  # every value it may hold (each branch that builds it, every caller that passes it)
            families = {_LOSSES.get(m.cls or "") or CRITERION_FAMILY.get(m.cls or "") for m in possible}
            return families.pop() if len(families) == 1 else None
        ctor = flow.constructor(name, scope, pos(call))
        if ctor and not ctor.startswith("torch.nn.functional."):
            return _LOSSES.get(ctor)
        if ctor is None and "." not in name:
            return _passed_loss_kind(flow, name, scope, pos(call))
    return None


def _passed_loss_kind(flow: DataFlow, name: str, scope: str, at: tuple[int, int]) -> str | None:
    """A loss handed in as a parameter (`def validate(model, loader, loss_fn)`): the kind
    every same-file call site passes, when they all pass the same loss module."""
    d = flow.reaching(name, scope, at)
    passed = flow.passed(d) if d is not None and d.kind == "param" else None
    if not passed:
        return None
    kinds = set()
    for caller, expr in passed:
        arg = dotted(expr)
        ctor = flow.constructor(arg, caller, pos(expr)) if arg else None
        if isinstance(expr, ast.Call):
            ctor = flow.resolve_call(expr)
        if not ctor or ctor.startswith("torch.nn.functional."):
            return None
        kinds.add(_LOSSES.get(ctor))
    return kinds.pop() if len(kinds) == 1 else None


def _activation(flow: DataFlow, expr: ast.AST, scope: str, depth: int, item: int | None = None) -> tuple[str, ast.AST] | None:
    """The activation that produced `expr` last, with the node that applied it. `item`: the
    value wanted is element `item` of the tuple `expr` evaluates to (`validity, label = D(x)`)."""
    if depth > 8:
        return None
    if item is not None:
        if isinstance(expr, (ast.Tuple, ast.List)):
            if item >= len(expr.elts) or any(isinstance(e, ast.Starred) for e in expr.elts):
                return None
            return _activation(flow, expr.elts[item], scope, depth + 1)
        if not isinstance(expr, (ast.Name, ast.Attribute, ast.Call)):
            return None
    if isinstance(expr, ast.Subscript):
        index = expr.slice
        if item is None and isinstance(index, ast.Constant) and type(index.value) is int and index.value >= 0:
            return _activation(flow, expr.value, scope, depth + 1, index.value)  # `outputs[1]`
        return _activation(flow, expr.value, scope, depth + 1) if item is None else None
    if isinstance(expr, (ast.Name, ast.Attribute)) and dotted(expr):
        d = flow.reaching(dotted(expr) or "", scope, pos(expr))
        if d is None or d.value is None or d.kind != "assign" or (d.index is not None and item is not None):
            return None
        return _activation(flow, d.value, d.scope, depth + 1, d.index if d.index is not None else item)
    if not isinstance(expr, ast.Call):
        return None
    if item is not None:
        # element `item` of what a same-file model's forward returns; of anything else, a slice
        # of the tensor it returns (which keeps its activation)
        name = dotted(expr.func)
        ctor_call = _constructor_call(flow, name, scope, pos(expr)) if name else None
        ctor = flow.resolve_call(ctor_call) if ctor_call is not None else None
        if ctor and flow.model.is_module_class(ctor):
            return _forward_activation(flow, ctor, depth + 1, item)
    func = expr.func
    callee = flow.resolve_call(expr)
    if callee in _ACTIVATION_FUNCTIONS:
        return _ACTIVATION_FUNCTIONS[callee], expr
    if isinstance(func, ast.Attribute) and not flow.imports.is_imported(dotted(func.value) or ""):
        method = func.attr
        if method in ("softmax", "log_softmax", "sigmoid"):
            return method, expr
        if method == "log":
            inner = _activation(flow, func.value, scope, depth + 1)
            return ("log_softmax", expr) if inner and inner[0] == "softmax" else None
        if method in _PASS_THROUGH:
            return _activation(flow, func.value, scope, depth + 1)
    if callee == "torch.log" and expr.args:
        inner = _activation(flow, expr.args[0], scope, depth + 1)
        return ("log_softmax", expr) if inner and inner[0] == "softmax" else None
    # calling a module: an activation layer, a Sequential ending in one, or a same-file model
    name = dotted(func)
    if not name:
        return None
    ctor_call = _constructor_call(flow, name, scope, pos(expr))
    ctor = flow.resolve_call(ctor_call) if ctor_call is not None else None
    if ctor is None:
        return None
    if ctor in _ACTIVATION_MODULES:
        return _ACTIVATION_MODULES[ctor], expr
    if tail(ctor) == "Sequential" and ctor.startswith("torch.nn") and ctor_call is not None and ctor_call.args:
        last = ctor_call.args[-1]
        last_ctor = flow.resolve_call(last) if isinstance(last, ast.Call) else None
        if last_ctor in _ACTIVATION_MODULES:
            return _ACTIVATION_MODULES[last_ctor], expr
        return None
    if flow.model.is_module_class(ctor):
        return _forward_activation(flow, ctor, depth + 1)
    return None


def _constructor_call(flow: DataFlow, name: str, scope: str, at: tuple[int, int]) -> ast.Call | None:
    d = flow.reaching(name, scope, at)
    if d is None or d.index is not None or not isinstance(d.value, ast.Call):
        return None
    value = d.value
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("to", "cuda", "cpu", "float", "half"):
        value = value.func.value  # type: ignore[assignment]
    return value if isinstance(value, ast.Call) else None


def _forward_activation(flow: DataFlow, cls: str, depth: int, item: int | None = None) -> tuple[str, ast.AST] | None:
    """What a module class's `forward` returns (element `item` of the tuple it returns), when
    every return agrees."""
    forward = class_method(flow, cls, "forward")
    if forward is None:
        return None
    scope = f"{cls}.forward"
    returns = [n.value for n in walk_function(forward) if isinstance(n, ast.Return) and n.value is not None]
    if not returns:
        return None
    results = [_activation(flow, r, scope, depth + 1, item) for r in returns]
    kinds = {r[0] if r else None for r in results}
    if len(kinds) == 1 and results[0] is not None:
        return results[0]
    return None
