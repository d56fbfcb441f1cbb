"""Which modules' parameters a backward pass writes gradients into.

`backward_modules(model, event)` follows the tensor a `backward()` runs from
(`loss.backward()`, `scaler.scale(loss).backward()`, `accelerator.backward(loss)`) back
through the assignments that made it, to the modules it was computed with:
`g_loss = bce(D(G(z)), valid)` runs through `D` and `G`. What cuts the graph is honoured:
`.detach()`, `.item()`, `.data`, a value computed under `no_grad` / `inference_mode`.

The answer is a lower bound: only modules seen called on the tensor's way are named
(a parameter, a loop variable or an unreadable helper adds nothing), so a rule that
asks "does this backward write into D?" gets "yes" only when the file shows it.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from torch_preflight.core.dataflow import DataFlow, Def, pos
from torch_preflight.core.names import dotted, tail
from torch_preflight.core.semantic import Event, EventKind, Kind, ModuleModel

if TYPE_CHECKING:
    from collections.abc import Iterator

_CUTS = frozenset({"detach", "detach_", "item", "tolist", "numpy", "__float__", "__int__", "size", "dim", "numel", "shape"})
# methods of a module that run no forward
_NOT_FORWARD = frozenset(
    {"parameters", "named_parameters", "state_dict", "load_state_dict", "train", "eval", "to", "cuda", "cpu", "zero_grad",
     "requires_grad_", "apply", "modules", "named_modules", "children", "named_children", "buffers", "named_buffers", "half",
     "float", "double", "bfloat16", "register_forward_hook", "register_buffer", "add_module", "type"}
)
_MAX_DEPTH = 12
_BACKWARD_METHODS = frozenset({"backward", "manual_backward"})


def backward_modules(model: ModuleModel, event: Event) -> frozenset[str]:
    """The modules (as the backward's function names them: `netD`, `self.D`) whose parameters
    the graph of `event`'s tensor runs through, as far as the file shows."""
    if event.kind is not EventKind.BACKWARD or model.tree is None:
        return frozenset()
    memo: dict[tuple[int, int, str], frozenset[str]] = model.__dict__.setdefault("_tpf_backward_modules", {})
    key = (event.span.start.line, event.span.start.col, event.function)
    found = memo.get(key)
    if found is None:
        found = memo[key] = _Walk(model).backward(event)
    return found


class _Walk:
    def __init__(self, model: ModuleModel) -> None:
        self.model = model
        self.flow = DataFlow.of(model)
        self.seen: set[int] = set()

    def backward(self, event: Event) -> frozenset[str]:
        call = self._call_at(event)
        if call is None or not isinstance(call.func, ast.Attribute):
            return frozenset()
        scope = self.flow.scope_at(call)
        tensors: list[ast.expr] = [call.func.value, *call.args[:1]]  # `loss.backward()`; `accelerator.backward(loss)`
        scaled = call.func.value
        if isinstance(scaled, ast.Call) and isinstance(scaled.func, ast.Attribute) and scaled.func.attr == "scale" and scaled.args:
            tensors[0] = scaled.args[0]  # scaler.scale(loss).backward()
        found = {m for tensor in tensors for m in self.expr(tensor, scope, pos(call), 0)}
        return frozenset(found | {o for m in found for o in self._passed(m, scope)})

    def _passed(self, name: str, scope: str, depth: int = 0) -> set[str]:
        """What the callers pass for a parameter `name` (`netD` for `D` in `train_d(netD, ...)`), to any depth."""
        fn = self.model.functions.get(scope)
        if fn is None or name not in fn.params or depth > 2:
            return set()
        position = fn.params.index(name) - (1 if fn.owner else 0)
        found: set[str] = set()
        for call in self.model.calls_to.get(scope, []):
            arg = call.keyword(name) or (call.args[position] if 0 <= position < len(call.args) else None)
            if arg is not None and arg.base and arg.text == arg.base:
                found |= {arg.base, *self._passed(arg.base, call.function, depth + 1)}
        return found

    def _call_at(self, event: Event) -> ast.Call | None:
        line = event.span.start.line + 1
        calls = self.flow.nodes_where(
            "backward-calls", lambda n: isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _BACKWARD_METHODS
        )
        on_line = [c for c in calls if isinstance(c, ast.Call) and getattr(c, "end_lineno", c.lineno) == event.span.end.line + 1
                   and c.lineno == line]
        return on_line[0] if len(on_line) == 1 else None

    def expr(self, node: ast.AST, scope: str, at: tuple[int, int], depth: int) -> Iterator[str]:
        if depth > _MAX_DEPTH:
            return
        if isinstance(node, ast.Call):
            yield from self.call(node, scope, at, depth)
        elif isinstance(node, ast.Attribute) and node.attr in ("data", "grad", "shape"):
            return
        elif isinstance(node, (ast.Name, ast.Attribute)):
            yield from self.name(node, scope, at, depth)
        elif isinstance(node, ast.Subscript):
            yield from self.expr(node.value, scope, at, depth + 1)
        elif isinstance(node, (ast.Lambda, ast.Constant, ast.JoinedStr, ast.GeneratorExp, ast.ListComp, ast.DictComp, ast.SetComp)):
            return
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    yield from self.expr(child, scope, at, depth + 1)

    def call(self, node: ast.Call, scope: str, at: tuple[int, int], depth: int) -> Iterator[str]:
        func = node.func
        arguments = [*node.args, *(k.value for k in node.keywords)]
        if isinstance(func, ast.Attribute):
            if func.attr in _CUTS:
                return
            receiver = dotted(func.value)
            if receiver and self._is_module(receiver, scope):
                if func.attr in _NOT_FORWARD:
                    return
                yield receiver  # `model.forward(x)`, `model.encode(x)`
            elif func.attr != "forward" and dotted(func) and self._is_module(dotted(func) or "", scope):
                yield dotted(func) or ""  # `self.netD(x)`, `model.decoder(x)`
            else:
                yield from self.expr(func.value, scope, at, depth + 1)  # `out.mean()`, `(a + b).sum()`
        elif isinstance(func, ast.Name) and self._is_module(func.id, scope):
            yield func.id
        resolved = self.flow.resolve_call(node) or ""
        if resolved in ("torch.no_grad", "torch.inference_mode") or resolved.startswith("torch.nn.init."):
            return
        for argument in arguments:
            if isinstance(argument, (ast.Name, ast.Attribute)) and self._is_module(dotted(argument) or "", scope):
                yield dotted(argument) or ""  # a helper handed a module: `gradient_penalty(netD, real, fake)`
            else:
                yield from self.expr(argument, scope, at, depth + 1)

    def name(self, node: ast.Name | ast.Attribute, scope: str, at: tuple[int, int], depth: int) -> Iterator[str]:
        name = dotted(node)
        if not name:
            yield from self.expr(node.value, scope, at, depth + 1) if isinstance(node, ast.Attribute) else ()
            return
        d = self.flow.reaching(name, scope, at)
        while d is not None and id(d) not in self.seen:
            self.seen.add(id(d))
            if d.kind not in ("assign", "update") or d.value is None or self._without_grad(d):
                return
            yield from self.expr(d.value, d.scope, d.at, depth + 1)
            if d.kind != "update":
                return
            d = self.flow._previous(d)  # `loss += term`: the earlier value too

    def _is_module(self, name: str, scope: str) -> bool:
        if not name or self.model.resolve_function(name, scope) or self.model.is_module_class(self.model.imports.resolve(name) or ""):
            return False
        return self.model.kind_of(name, scope) is Kind.MODEL or name in parameter_owners(self.model) or self._passed_module(name, scope)

    def _passed_module(self, name: str, scope: str, depth: int = 0) -> bool:
        """`D` is a parameter of the function and every caller of the file passes a module for it."""
        fn = self.model.functions.get(scope)
        if fn is None or name not in fn.params or depth > 2:
            return False
        position = fn.params.index(name) - (1 if fn.owner else 0)
        callers = self.model.calls_to.get(scope, [])
        for call in callers:
            arg = call.keyword(name) or (call.args[position] if 0 <= position < len(call.args) else None)
            if arg is None or not arg.base or arg.text != arg.base:
                return False
            if self.model.kind_of(arg.base, call.function) is not Kind.MODEL and not self._passed_module(arg.base, call.function, depth + 1):
                return False
        return bool(callers)

    def _without_grad(self, d: Def) -> bool:
        """The definition runs under `no_grad` / `inference_mode` (a context or the function's decorator)."""
        fn = self.model.functions.get(d.scope)
        if fn is None or d.stmt is None:
            return False
        if fn.disables_grad:
            return True
        line = getattr(d.stmt, "lineno", 0) - 1
        return any(e.no_grad for e in fn.events if e.stmt.start.line == line)


def parameter_owners(model: ModuleModel) -> frozenset[str]:
    """Names whose `.parameters()` the file hands out (to an optimizer, a clipper): modules, known from
    how they are used whatever their class (one imported with `from models import *`)."""
    found = model.__dict__.get("_tpf_parameter_owners")
    if found is None:
        found = model.__dict__["_tpf_parameter_owners"] = frozenset(
            e.receiver for fn in model.functions.values() for e in fn.events
            if e.kind is EventKind.CALL and e.receiver and tail(e.name or "") in ("parameters", "named_parameters")
        )
    return found


def related(a: str, b: str) -> bool:
    """One module is the other or holds it (`model` holds `model.encoder`); `self.netD` is `netD`."""
    a, b = a.removeprefix("self."), b.removeprefix("self.")
    return a == b or a.startswith(b + ".") or b.startswith(a + ".") or tail(a) == tail(b)
