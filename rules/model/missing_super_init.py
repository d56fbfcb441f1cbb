"""## What it does
Flags an `nn.Module` subclass whose `__init__` never calls `super().__init__()`, or assigns
a layer, a parameter or a tensor to `self` before calling it.

## Why is this bad?
`nn.Module.__init__` creates the registries (`_parameters`, `_modules`, `_buffers`, hooks)
that attribute assignment writes into. Without it, the first `self.fc = nn.Linear(...)`
raises `AttributeError: cannot assign module before Module.__init__() call`, and a module
that assigns nothing fails later, far from the cause, on `.parameters()` or `model(x)`.
Plain attributes (`self.hidden = hidden`) set before the call are harmless and not flagged.

## Example
```python
class Net(nn.Module):
    def __init__(self):
        self.fc = nn.Linear(10, 2)
```

## Use instead
```python
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 2)
```

## Fix safety
The fix inserts `super().__init__()` as the first statement of `__init__` (after the
docstring), or moves a late `super().__init__(...)` call there. It is safe: nothing that
worked before changes, since assigning modules before the call raises. No fix is offered
when a same-file base class needs constructor arguments, or a late call's arguments read
locals computed before it.

## References
- [torch.nn.Module](https://pytorch.org/docs/stable/generated/torch.nn.Module.html)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from torch_preflight.core.dataflow import DataFlow, class_method, is_module_constructor, own_method, span_of, walk_function
from torch_preflight.core.diagnostics import Applicability, Diagnostic, Edit, Fix, Severity
from torch_preflight.core.names import dotted, tail
from torch_preflight.core.source import Position, Span
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF102",
    name="missing-super-init",
    message="`nn.Module` subclass does not call `super().__init__()` before assigning layers",
    fix_title="Insert `super().__init__()` as the first statement",
    severity=Severity.ERROR,
)

_TENSOR_FACTORIES = frozenset({"tensor", "zeros", "ones", "randn", "rand", "empty", "full", "arange", "eye", "zeros_like", "ones_like"})


def check(ctx: Context) -> Iterator[Diagnostic]:
    model = ctx.model
    flow = DataFlow.of(model)
    for qualname, cls in model.classes.items():
        node = flow.classes.get(qualname)
        if not cls.is_module or node is None:
            continue
        facts = flow.statement_memo("missing-super-init", node, _init_facts)  # kept while another statement is edited
        if not facts:
            continue
        init, super_call, assigned_before = facts
        if super_call is None:
            line = init.lineno - 1
            col = ctx.source.char_col(line, init.col_offset)
            yield report(
                META,
                Span.of(line, col, line, col + len(ctx.source.line(line)[col:].split("(")[0])),
                f"`{cls.name}.__init__` never calls `super().__init__()`: assigning a layer raises `AttributeError`, "
                "and the module has no parameter registry",
                _insert_fix(ctx, flow, init, qualname),
            )
            continue
        scope = f"{qualname}.__init__"
        early = next((n for n in assigned_before if _needs_registry(flow, n.value, scope)), None)
        if early is None:
            continue
        target = next(dotted(t) for t in early.targets if (dotted(t) or "").startswith("self."))
        yield report(
            META,
            span_of(model, early),
            f"`{target}` is assigned before `super().__init__()` runs, which raises "
            "`AttributeError: cannot assign module before Module.__init__() call`; call `super().__init__()` first",
            _move_fix(ctx, init, super_call),
        )


def _init_facts(cls: ast.ClassDef) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.Call | None, list[ast.Assign]] | tuple[()]:
    """The class's own `__init__`, its call of the base's `__init__` (None: none), and the
    assignments of a `self.` attribute before that call, in order; () without an `__init__`."""
    init = own_method(cls, "__init__")
    if init is None:
        return ()
    nodes = list(walk_function(init))
    super_call = next((n for n in nodes if isinstance(n, ast.Call) and _is_init_call(n)), None)
    if super_call is None:
        return init, None, []
    call_at = (super_call.lineno, super_call.col_offset)
    before = [
        n
        for n in nodes
        if isinstance(n, ast.Assign) and (n.lineno, n.col_offset) < call_at and any((dotted(t) or "").startswith("self.") for t in n.targets)
    ]
    return init, super_call, before


def _is_init_call(call: ast.Call) -> bool:
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "__init__"):
        return False
    receiver = func.value
    if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
        return True
    name = dotted(receiver)
    return bool(name) and not (name or "").startswith("self")


def _needs_registry(flow: DataFlow, value: ast.expr, scope: str) -> bool:
    if is_module_constructor(flow, value, scope):
        return True
    if isinstance(value, ast.Call):
        callee = flow.resolve_call(value) or ""
        return tail(callee) in ("Parameter", "Buffer") or (callee.startswith("torch.") and tail(callee) in _TENSOR_FACTORIES)
    return False


def _first_statement(init: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, ast.stmt | None]:
    """(line to insert before, 0-based; the docstring statement if any)."""
    body = init.body
    first = body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return (first.end_lineno or first.lineno), first
    return first.lineno - 1, None


def _indent(ctx: Context, init: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    first = init.body[0]
    if first.lineno == init.lineno:  # def f(self): body on one line
        return None
    return ctx.source.indentation(first.lineno - 1)


def _insert_fix(ctx: Context, flow: DataFlow, init: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str) -> Fix | None:
    cls = ctx.model.classes[qualname]
    for base in cls.bases:
        if base in flow.classes:
            base_init = class_method(flow, base, "__init__")
            if base_init is not None and _required_args(base_init):
                return None
    indent = _indent(ctx, init)
    if indent is None:
        return None
    line, _ = _first_statement(init)
    statement = f"{indent}super().__init__(){ctx.source.newline}"
    return Fix("Insert `super().__init__()`", (Edit.insert(Position(line, 0), statement),), Applicability.SAFE)


def _required_args(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    positional = [*fn.args.posonlyargs, *fn.args.args][1:]
    kwonly_required = [a for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=False) if d is None]
    return len(positional) > len(fn.args.defaults) or bool(kwonly_required)


def _move_fix(ctx: Context, init: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call) -> Fix | None:
    statement = next((s for s in init.body if isinstance(s, ast.Expr) and s.value is call), None)
    indent = _indent(ctx, init)
    if statement is None or indent is None:
        return None
    params = {a.arg for a in (*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs, init.args.vararg, init.args.kwarg) if a}
    names = {n.id for n in ast.walk(call) if isinstance(n, ast.Name)} - {"super", "self", "__class__"}
    if names - params - set(ctx.model.imports.aliases) - set(ctx.model.classes):
        return None
    start, stop = statement.lineno - 1, (statement.end_lineno or statement.lineno) - 1
    line_text = ctx.source.line(start)
    if line_text[: statement.col_offset].strip() or ctx.source.line(stop).rstrip().endswith(";"):
        return None
    text = "".join(ctx.source.line(n) + ctx.source.newline for n in range(start, stop + 1))
    line, _ = _first_statement(init)
    if line > start:
        return None
    return Fix(
        "Move `super().__init__(...)` to the top of `__init__`",
        (Edit.insert(Position(line, 0), text), Edit.replace(Span(Position(start, 0), Position(stop + 1, 0)), "")),
        Applicability.SAFE,
    )
