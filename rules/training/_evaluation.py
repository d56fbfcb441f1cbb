"""Where an evaluation starts: the function a training function calls to evaluate, found along the
calls that lead to a forward (TPF007, TPF008). Not a rule."""

from __future__ import annotations

import ast
from collections.abc import Callable

from torch_preflight.core.semantic import Event, EventKind, Function, Loop, ModuleModel
from torch_preflight.core.source import Span
from torch_preflight.core.training import TrainingModel

_SCALAR_CALLS = frozenset({"float", "int", "len", "round", "bool", "str"})  # a Python number (or text) whatever they are given
_PLAIN_CALLS = frozenset({"min", "max", "abs"})  # plain when their arguments are
_DETACHING = frozenset({"item", "tolist", "detach", "numpy"})


def trains(training: TrainingModel, scope: str) -> bool:
    """`scope` back-propagates or steps an optimizer, itself or in a callee of the file."""
    memo = training.function_memo("evaluation.trains")
    if scope not in memo:
        memo[scope] = (training.may_hold(scope, EventKind.BACKWARD) or training.may_hold(scope, EventKind.STEP)) and any(
            e.kind is EventKind.BACKWARD or training.optimizer_of(e) for e in training.expanded(scope)
        )
    return bool(memo[scope])


def evaluation_entry(training: TrainingModel, scope: str, chain: tuple[Event, ...]) -> tuple[str, Event | None]:
    """Along `chain` (the calls that lead into `scope`, innermost first, as `_modes.mode_trace` gives
    them), the outermost function that does not train, with the call into it: where the training
    code hands over to the evaluation (`evaluate_model()` calling `calc_loss_loader()`, called from
    the training loop). `scope` itself when its caller trains, or when the chain is empty."""
    entry, into = scope, (chain[0] if chain else None)
    for k in range(1, len(chain)):
        caller = chain[k - 1].function
        if not caller or caller == entry or trains(training, caller) or handed_over(training, chain[k - 1], entry):
            break
        entry, into = caller, chain[k]
    return entry, into


def handed_over(training: TrainingModel, call: Event, target: str) -> bool:
    """`call` hands `target` over as a value (`Engine(evaluate_step)`, a callback) instead of calling
    it by name: what runs it later runs `target` alone, so a mode call belongs in `target`, not in the
    factory that builds it."""
    return not call.name or training.model.resolve_function(call.name, call.function) != target


def region_start(model: ModuleModel, loop: Loop, evaluates: Callable[[Loop], bool]) -> tuple[Loop, Span]:
    """The evaluation region around `loop` in its function: the outermost loop of the function that
    contains it and whose every pass `evaluates` too (not an epoch loop that also trains), and the
    first line of the outermost statement around that loop inside the function or the loop above it
    (a `with torch.no_grad():` block opened for it), where a call the whole evaluation needs belongs."""
    while loop.parent is not None and model.loops[loop.parent].function == loop.function and evaluates(model.loops[loop.parent]):
        loop = model.loops[loop.parent]
    fn = model.functions.get(loop.function)
    above = model.loops[loop.parent].body.start if loop.parent is not None and loop.parent in model.loops else None
    first = fn.first_body_line if fn is not None else 0
    around = [c.span for c in loop.contexts
              if c.span.start.line >= first and c.span.start < loop.span.start and (above is None or above <= c.span.start)]
    return loop, min([loop.header, *around], key=lambda span: span.start)


def after_training(training: TrainingModel, call: Event) -> bool:
    """The call runs after a backward pass or an optimizer step of its function, or inside a loop
    whose pass trains: the model it is handed comes straight from training."""
    events = training.expanded(call.function)
    try:
        position = events.index(call)
    except ValueError:
        return False
    if any(e.kind is EventKind.BACKWARD or training.optimizer_of(e) for e in events[:position]):
        return True
    loops = training.model.loops
    return any(
        any(e.kind is EventKind.BACKWARD for e in training.iteration(loops[i])) for i in call.loops if i in loops
    )


def returns_no_graph(training: TrainingModel, scope: str) -> bool:
    """Every value `scope` returns is a plain number or a detached value (`total_loss / num_batches`
    with `total_loss += loss.item()`): nothing it returns can carry a graph to a backward pass."""
    fn = training.model.functions.get(scope)
    if fn is None:
        return False
    memo = training.function_memo("evaluation.returns_no_graph")
    if scope not in memo:
        returns = [e for e in fn.events if e.kind is EventKind.RETURN and e.function == scope]
        memo[scope] = bool(returns) and all(_plain_return(fn, e) for e in returns)
    return bool(memo[scope])


def _plain_return(fn: Function, ret: Event) -> bool:
    """The returned value is plain; a bare name is judged by its last binding before the return when
    nothing else touches it in between (`images = torch.cat(images).numpy()`, then `return images`)."""
    if ret.value is None:
        return False
    text = ret.value.text.strip()
    if text.isidentifier():
        touching = [e for e in fn.events if e.function == fn.qualname and e.span.start < ret.span.start
                    and (text in e.targets or (e.kind is EventKind.STORE and e.receiver == text))]
        last = touching[-1] if touching else None
        if last is not None and last.kind is EventKind.ASSIGN and last.loops == ret.loops and last.guards == ret.guards and len(last.targets) == 1:
            return last.value is not None and _plain_text(fn, last.value.text, frozenset())
    return _plain_text(fn, text, frozenset())


def _plain_text(fn: Function, text: str, seen: frozenset[str]) -> bool:
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return False
    return _plain(fn, node, seen)


def _plain(fn: Function, node: ast.expr, seen: frozenset[str]) -> bool:
    """`node` can only be a plain number or a detached value in `fn`: constants, `.item()`, `len(x)`,
    comparisons, arithmetic of such, and locals only ever bound to such (parameters defaulting to one)."""
    if isinstance(node, (ast.Constant, ast.Compare)):
        return True
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            return func.attr in _DETACHING
        if isinstance(func, ast.Name) and func.id in _SCALAR_CALLS:
            return True
        return isinstance(func, ast.Name) and func.id in _PLAIN_CALLS and all(_plain(fn, a, seen) for a in node.args) and not node.keywords
    if isinstance(node, ast.Attribute):
        return node.attr in ("shape", "ndim", "dtype", "device")
    if isinstance(node, ast.Subscript):
        return isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
    if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.IfExp, ast.Tuple, ast.List)):
        return all(_plain(fn, child, seen) for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr))
    if isinstance(node, ast.Name):
        return _plain_name(fn, node.id, seen)
    return False


def _plain_name(fn: Function, name: str, seen: frozenset[str]) -> bool:
    """Every binding of `name` in `fn` is plain (a binding that reads `name` again, as
    `n = min(n, len(loader))`, is plain when the others are)."""
    if name in seen:
        return True
    if len(seen) > 8:
        return False
    default = fn.defaults.get(name)
    if name in fn.params and (default is None or not default.is_literal):
        return False
    bindings = [e for e in fn.events if e.function == fn.qualname and name in e.targets and e.kind in (EventKind.ASSIGN, EventKind.AUG_ASSIGN)]
    if not bindings and name not in fn.params:
        return False  # a loop target, a global, a name bound some other way
    stores = [e for e in fn.events if e.function == fn.qualname and e.kind is EventKind.STORE and e.receiver == name]
    stored = [v for e in stores for v in (*e.args, *((e.value,) if e.value is not None else ()))]
    return all(len(e.targets) == 1 and e.value is not None and _plain_text(fn, e.value.text, seen | {name}) for e in bindings) and all(
        _plain_text(fn, v.text, seen | {name}) for v in stored
    )
