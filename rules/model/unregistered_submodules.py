"""## What it does
Flags an `nn.Module` that keeps submodules in a plain `list`, `dict` or `tuple` attribute
built in `__init__`: a literal, a comprehension, or an empty container filled later with
`append`/`extend`/item assignment.

## Why is this bad?
`nn.Module` registers a submodule only when it is assigned directly as an attribute or
held by `nn.ModuleList` / `nn.ModuleDict` / `nn.Sequential`. Layers in a plain container
are invisible to `.parameters()` (so the optimizer never updates them), to `.to(device)` /
`.cuda()` (device-mismatch errors), to `.train()` / `.eval()`, and to `state_dict()` (the
checkpoint silently lacks their weights). Nothing fails at construction time.

The rule stays silent when the container is later wrapped (`nn.ModuleList(self.blocks)`,
`nn.Sequential(*self.blocks)`, `add_module`), and when the container holds no modules.

## Example
```python
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = [nn.Linear(64, 64) for _ in range(4)]
```

## Use instead
```python
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(64, 64) for _ in range(4)])
```

## Fix safety
The fix wraps the container in `nn.ModuleList(...)` (lists, tuples) or `nn.ModuleDict(...)`
(dicts with string keys). It is safe: both support indexing, iteration, `len`, `append`
and item assignment like the plain container, and the layers become registered. No fix is
offered when the `nn` namespace is not imported or dict keys are not strings.

## References
- [torch.nn.ModuleList](https://pytorch.org/docs/stable/generated/torch.nn.ModuleList.html)
- [torch.nn.ModuleDict](https://pytorch.org/docs/stable/generated/torch.nn.ModuleDict.html)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from torch_preflight.core.dataflow import DataFlow, is_module_constructor, own_method, span_of, walk_function
from torch_preflight.core.diagnostics import Applicability, Diagnostic, Edit, Fix, Severity
from torch_preflight.core.names import dotted, tail
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF101",
    name="unregistered-submodules",
    message="Submodules kept in a plain list/dict are not registered (invisible to .parameters(), .to(), state_dict())",
    fix_title="Wrap the container in `nn.ModuleList` / `nn.ModuleDict`",
    severity=Severity.ERROR,
)

_WRAPPERS = frozenset({"ModuleList", "ModuleDict", "Sequential", "ParameterList", "ParameterDict"})


def check(ctx: Context) -> Iterator[Diagnostic]:
    model = ctx.model
    flow = DataFlow.of(model)
    for qualname, cls in model.classes.items():
        node = flow.classes.get(qualname)
        if not cls.is_module or node is None:
            continue
        # what the class's own nodes say, kept with its statement while someone edits another
        candidates = flow.statement_memo("unregistered-submodules", node, lambda n: _candidates(flow, n))
        if not candidates:
            continue
        nodes, assigns = candidates
        scope = f"{qualname}.__init__"
        for assign, name in assigns:
            kind = _container_of_modules(flow, assign.value, scope) or _filled_later(flow, assign.value, name, nodes, scope)
            if kind is None:
                continue
            yield report(
                META,
                span_of(model, assign),
                f"`{name}` keeps submodules in a plain {kind}, so their parameters are not registered: the optimizer, "
                f"`.to()` and `state_dict()` never see them; use `nn.Module{'Dict' if kind == 'dict' else 'List'}`",
                _fix(ctx, assign.value, kind),
            )


def _candidates(flow: DataFlow, cls: ast.ClassDef) -> tuple[list[ast.AST], list[tuple[ast.Assign, str]]] | tuple[()]:
    """The nodes of the class's own `__init__` and its assignments of one `self.x` that no module
    container wraps in the class; () when it has no `__init__` or registers submodules itself."""
    init = own_method(cls, "__init__")
    if init is None:
        return ()
    nodes = list(walk_function(init))
    if any(_dynamic_registration(n) for n in nodes):
        return ()
    wrapped = _wrapped_attributes(flow, cls)
    assigns: list[tuple[ast.Assign, str]] = []
    for node in nodes:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        name = dotted(node.targets[0])
        if name and name.startswith("self.") and name.count(".") == 1 and name not in wrapped:
            assigns.append((node, name))
    return nodes, assigns


def _module_element(flow: DataFlow, node: ast.expr, scope: str) -> bool:
    if isinstance(node, ast.Starred):
        return False
    return is_module_constructor(flow, node, scope)


def _container_of_modules(flow: DataFlow, value: ast.expr, scope: str) -> str | None:
    if isinstance(value, (ast.List, ast.Tuple)) and value.elts and all(_module_element(flow, e, scope) for e in value.elts):
        return "list" if isinstance(value, ast.List) else "tuple"
    if isinstance(value, ast.ListComp) and _module_element(flow, value.elt, scope):
        return "list"
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult):
        side = value.left if isinstance(value.left, ast.List) else value.right
        if isinstance(side, ast.List) and side.elts and all(_module_element(flow, e, scope) for e in side.elts):
            return "list"
    if isinstance(value, ast.Dict) and value.values and all(k is not None for k in value.keys):
        if all(_module_element(flow, v, scope) for v in value.values):
            return "dict"
    if isinstance(value, ast.DictComp) and _module_element(flow, value.value, scope):
        return "dict"
    return None


def _filled_later(flow: DataFlow, value: ast.expr, name: str, nodes: list[ast.AST], scope: str) -> str | None:
    """`self.x = []` then `self.x.append(nn.Linear(...))`, or `self.x = {}` then `self.x[k] = layer`."""
    empty_list = (isinstance(value, ast.List) and not value.elts) or (isinstance(value, ast.Call) and dotted(value.func) == "list" and not value.args)
    empty_dict = (isinstance(value, ast.Dict) and not value.keys) or (isinstance(value, ast.Call) and dotted(value.func) == "dict" and not value.args)
    if not (empty_list or empty_dict):
        return None
    for node in nodes:
        if empty_list and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and dotted(node.func.value) == name:
            if node.func.attr in ("append", "insert") and node.args and _module_element(flow, node.args[-1], scope):
                return "list"
            if node.func.attr == "extend" and node.args and _container_of_modules(flow, node.args[0], scope):
                return "list"
        if empty_list and isinstance(node, ast.AugAssign) and dotted(node.target) == name:
            if _container_of_modules(flow, node.value, scope):
                return "list"
        if empty_dict and isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and dotted(target.value) == name and _module_element(flow, node.value, scope):
                    return "dict"
    return None


def _dynamic_registration(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in ("add_module", "register_module"):
        return True
    return isinstance(func, ast.Name) and func.id == "setattr"


def _wrapped_attributes(flow: DataFlow, cls: ast.ClassDef) -> set[str]:
    """Attributes passed to a module container (or re-assigned as one) anywhere in the class."""
    wrapped: set[str] = set()
    for sub in ast.walk(cls):
        if isinstance(sub, ast.Call) and tail(flow.resolve_call(sub)) in _WRAPPERS:
            for arg in (*sub.args, *(k.value for k in sub.keywords)):
                for inner in ast.walk(arg):
                    name = dotted(inner) if isinstance(inner, ast.Attribute) else None
                    if name and name.startswith("self."):
                        wrapped.add(name)
    return wrapped


def _fix(ctx: Context, value: ast.expr, kind: str) -> Fix | None:
    qualified = "torch.nn.ModuleDict" if kind == "dict" else "torch.nn.ModuleList"
    wrapper = ctx.model.imports.alias_for(qualified)
    if wrapper is None:
        return None
    if kind == "dict":
        keys = value.keys if isinstance(value, ast.Dict) else []
        if not all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in keys):
            return None
    span = span_of(ctx.model, value)
    text = ctx.source.slice(span)
    empty = (isinstance(value, (ast.List, ast.Dict)) and not getattr(value, "elts", getattr(value, "keys", None))) or isinstance(value, ast.Call)
    if empty:
        replacement = f"{wrapper}()"
    elif isinstance(value, ast.Tuple) and not text.startswith("("):
        replacement = f"{wrapper}(({text}))"
    else:
        replacement = f"{wrapper}({text})"
    return Fix(f"Wrap in `{wrapper}`", (Edit.replace(span, replacement),), Applicability.SAFE)
