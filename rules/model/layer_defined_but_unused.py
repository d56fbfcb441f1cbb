"""## What it does
Flags a submodule built in `__init__` (`self.dropout = nn.Dropout(0.1)`) that nothing in
the file ever reads: not `forward`, not a helper it calls, not a loop over the module's
children, not another class.

## Why is this bad?
An unused layer is usually a bug: the dropout that was meant to regularise, the norm that
was meant to stabilise, never runs. Its parameters still go to the optimizer (weight decay
moves them, the memory is spent), and under `DistributedDataParallel` they raise "Expected
to have finished reduction in the prior iteration ... parameters that were not used"
unless `find_unused_parameters=True` slows every step.

This rule is informational and off by default: a layer kept for checkpoint compatibility
or used by code in another file is legitimate. It stays silent when the class reaches its
layers dynamically (`getattr(self, name)`, `self.children()`, `self._modules`).

## Example
```python
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 2)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.fc(x)
```

## Use instead
```python
    def forward(self, x):
        return self.fc(self.dropout(x))
```

## Fix safety
No fix: whether to use the layer or delete it is the author's decision.

## References
- [DistributedDataParallel: find_unused_parameters](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html)
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from torch_preflight.core.dataflow import DataFlow, class_method, is_module_constructor, span_of, walk_function
from torch_preflight.core.diagnostics import Diagnostic, Severity
from torch_preflight.core.names import breadth_first, dotted
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF105",
    name="layer-defined-but-unused",
    message="Submodule built in `__init__` is never used",
    fix_title=None,
    severity=Severity.INFO,
    default_enabled=False,
)

_DYNAMIC = frozenset({"children", "named_children", "modules", "named_modules", "_modules", "__dict__"})


def check(ctx: Context) -> Iterator[Diagnostic]:
    model = ctx.model
    tree = model.tree
    if tree is None:
        return
    flow = DataFlow.of(model)
    read: set[str] | None = None  # one walk of the file, only once a layer is a candidate
    for qualname, cls in model.classes.items():
        if not cls.is_module or "forward" not in cls.methods:
            continue
        init = class_method(flow, qualname, "__init__")
        node = flow.classes.get(qualname)
        if init is None or node is None or _dynamic_access(node):
            continue
        scope = f"{qualname}.__init__"
        for stmt in walk_function(init):
            if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
                continue
            name = dotted(stmt.targets[0])
            if not name or not name.startswith("self.") or name.count(".") != 1:
                continue
            attr = name.split(".", 1)[1]
            if read is None:
                read = _read_attributes(tree)
            if attr in read or not is_module_constructor(flow, stmt.value, scope):
                continue
            yield report(
                META,
                span_of(model, stmt),
                f"`{name}` is built in `__init__` but never used: its parameters still reach the optimizer "
                "(and make DDP complain about unused parameters)",
            )


def _read_attributes(tree: ast.AST) -> set[str]:
    """Attribute names read anywhere in the file, plus string constants (getattr(self, "x"))."""
    names: set[str] = set()
    for node in breadth_first(tree):
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return names


def _dynamic_access(cls: ast.ClassDef) -> bool:
    """Layers reached by name or by iteration outside `__init__` (weight init loops inside it do not count)."""
    methods = [s for s in cls.body if not (isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == "__init__")]
    for node in (n for m in methods for n in ast.walk(m)):
        if isinstance(node, ast.Attribute) and node.attr in _DYNAMIC and isinstance(node.value, ast.Name) and node.value.id == "self":
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "vars"):
            if node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "self":
                return True
    return False
