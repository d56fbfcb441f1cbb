"""Which mode (train / eval) reaches a training forward round the loops around it: an `eval()`
later in the iteration (a sampling block, an evaluation helper that never switches back, an
accuracy pass after the batch loop) that nothing undoes before the next pass. Used by TPF009;
not a rule.

The walk runs over a function's expanded events (same-file callees inlined, `TrainingModel.expanded`):
from the forward backwards through its own iteration, then, loop by loop outwards, round each
loop's back edge (the last mode call of its body) and on to the part of the enclosing body before
it. Names of inlined callees are renamed to the walked function's through the calls that reach
them (`evaluate(gcn)` with `def evaluate(model): model.eval()` is `gcn.eval()`)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from torch_preflight.core.semantic import Event, EventKind, ModuleModel
from torch_preflight.core.source import Span
from torch_preflight.core.training import TrainingModel
from torch_preflight.rules.training._modes import model_key

_MODES = (EventKind.TRAIN_MODE, EventKind.EVAL_MODE)


@dataclass(frozen=True)
class LoopEval:
    """`evaluation` reaches `forward` (a forward of the model, or the backward of a step that trains
    it) round the back edge of loop `loop` (an id of `events[i].loops`)."""

    scope: str  # the walked function
    index: int  # the forward's index in `expanded(scope)`
    forward: Event
    name: str  # the trained model, in the walked function's names
    evaluation: Event
    loop: int
    calls: tuple[Event, ...]  # the calls, outermost first, that run the `eval()` (none when the walked function makes it)


class Names:
    """Callee names seen from the walked function: each inlined event's receiver renamed through
    the calls that reach it (parameters to arguments, `self` to the call's receiver)."""

    def __init__(self, model: ModuleModel, events: tuple[Event, ...]) -> None:
        self.model, self.events = model, events
        self._calls: list[tuple[Event, ...] | None] | None = None

    def chain(self, index: int) -> tuple[Event, ...] | None:
        """The calls, outermost first, that inline `events[index]` (one per local level of its
        `via`; a function of another module ends the chain: its events come renamed). None when a
        call cannot be found."""
        if self._calls is None:
            self._calls = self._all_chains()
        return self._calls[index]

    def _all_chains(self) -> list[tuple[Event, ...] | None]:
        """Every event's chain in one pass: an inlined event follows the call that inlines it, with
        only that call's other inlined events in between, so the latest call of its callee from the
        same caller is the one."""
        latest: dict[tuple[tuple[str, ...], str], int] = {}
        chains: list[tuple[Event, ...] | None] = []
        for index, event in enumerate(self.events):
            via = event.via
            local = next((level for level, q in enumerate(via) if q not in self.model.functions), len(via))
            calls = [latest.get((via[:level], via[level])) for level in range(local)]
            chains.append(None if None in calls else tuple(self.events[i] for i in calls if i is not None))
            if event.kind in (EventKind.CALL, EventKind.STEP):
                for target in self.model.call_targets(event):
                    latest[(via, target)] = index
        return chains

    def outer(self, index: int, name: str | None) -> str | None:
        """`name`, as used by `events[index]`, in the walked function's names; None when a call
        hands it over in a form that is no plain (dotted) name."""
        chain = self.chain(index)
        if chain is None or not name:
            return None
        via = self.events[index].via
        for level in range(len(chain) - 1, -1, -1):
            name = self._through(chain[level], via[level], name)
            if name is None:
                return None
        return name

    def _through(self, call: Event, callee: str, name: str) -> str | None:
        fn = self.model.functions[callee]
        if call.name is None or self.model.resolve_function(call.name, call.function) != callee:
            return name  # a closure handed over as an argument: it reads its enclosing scope's names
        head, dot, rest = name.partition(".")
        if fn.owner is not None and head == "self" and fn.params[:1] == ("self",):
            return call.receiver + dot + rest if call.receiver else None
        if head not in fn.params:
            return name  # a global, or an attribute of an object that is no parameter
        position = fn.params.index(head) - (1 if fn.owner else 0)
        arg = call.keyword(head) or (call.args[position] if 0 <= position < len(call.args) else None)
        if arg is None or not arg.base or arg.callee or arg.method or arg.text != arg.base:
            return None
        return arg.base + dot + rest


def loop_run(events: tuple[Event, ...], index: int, loop: int) -> tuple[int, int]:
    """The contiguous indices around `index` inside loop `loop` (one inlining of it)."""
    start = end = index
    while start > 0 and loop in events[start - 1].loops:
        start -= 1
    while end + 1 < len(events) and loop in events[end + 1].loops:
        end += 1
    return start, end


def loop_evals(training: TrainingModel, scope: str) -> Iterator[LoopEval]:
    """Each forward with gradients on of `scope`'s expanded events, inside a loop whose pass
    back-propagates and steps, that an `eval()` of the same model reaches round a loop's back edge
    with no `train()` on the way (the first mode call met walking back from the forward). A module
    an optimizer stepped in the pass owns but that no visible forward runs (it runs inside a
    wrapper: `trainer = DiffusionTrainer(net_model)`, `loss = trainer(x)`) is walked back from
    the backward before that step."""
    model = training.model
    events = training.expanded(scope)
    if not any(e.kind is EventKind.EVAL_MODE for e in events) or not any(e.kind is EventKind.BACKWARD for e in events):
        return
    names = Names(model, events)
    forwarded = {model_key(names.outer(i, training.forward_target(e))) for i, e in enumerate(events) if e.loops and training.is_forward(e)}
    done: set[str] = set()
    for index, name in _training_points(training, names, forwarded):
        key = model_key(name)
        if key in done:
            continue
        found = _back_edge_eval(training, names, index, key, forwarded - {key})
        if found is not None:
            done.add(key)
            at, loop = found
            shown = name if training.is_forward(events[index]) else names.outer(at, events[at].receiver)
            yield LoopEval(scope, index, events[index], shown or name, events[at], loop, names.chain(at) or ())


def _training_points(training: TrainingModel, names: Names, forwarded: set[str]) -> Iterator[tuple[int, str]]:
    """(index, model) of each forward with gradients on inside a loop, then of the backward before
    each optimizer step for the modules it owns that no forward of the function runs."""
    events = names.events
    for index, event in enumerate(events):
        if not event.loops or event.no_grad or not training.is_forward(event) or _under_no_grad_decorator(training, event):
            continue
        name = names.outer(index, training.forward_target(event))
        if name:
            yield index, name
    backward: int | None = None  # the latest backward
    for index, event in enumerate(events):
        if event.kind is EventKind.BACKWARD:
            backward = index
        optimizer = training.optimizer_of(event) if event.kind is EventKind.STEP and event.loops and backward is not None else None
        owned = training.owned_modules(optimizer, event.function) if optimizer else None
        if owned is None or backward is None or events[backward].loops != event.loops:
            continue
        yield from ((backward, m) for m in sorted(owned) if model_key(m) not in forwarded)


def _under_no_grad_decorator(training: TrainingModel, event: Event) -> bool:
    return any((fn := training.model.functions.get(q)) is not None and training.decorated_no_grad(fn) for q in event.via)


def _back_edge_eval(training: TrainingModel, names: Names, index: int, key: str, others: set[str]) -> tuple[int, int] | None:
    """The index of the `eval()` that reaches `events[index]` round a loop's back edge, with that loop."""
    events = names.events
    forward = events[index]
    position = index
    for loop in reversed(forward.loops):
        start, end = loop_run(events, position, loop)
        if not _trains_in(training, events[start : end + 1]):
            return None  # a loop that neither back-propagates nor steps around the forward: no training pass
        if _last_mode(names, range(position - 1, start - 1, -1), key, others, forward) is not None:
            return None  # the iteration sets the mode itself before the forward
        back = _last_mode(names, range(end, position, -1), key, others, forward)
        if back is not None and events[back].kind is EventKind.EVAL_MODE and not _leaves_loop(training.model, names, back, loop):
            return back, loop
        position = start  # a `train()` settles the back edge; the loop's entry is the other way in
    return None


def _trains_in(training: TrainingModel, events: tuple[Event, ...]) -> bool:
    return any(e.kind is EventKind.BACKWARD for e in events) and any(training.optimizer_of(e) for e in events)


def _last_mode(names: Names, indices: range, key: str, others: set[str], forward: Event) -> int | None:
    """The index of the first mode call met walking `indices` that may set the model `key`'s mode: one on that
    model, or a `train()` on anything that is no other model of the function (a container of it).
    A `train()` under a condition the forward does not share settles only some passes: an `eval()`
    met after it (earlier in the pass) is undone only when that `train()` runs whenever it does
    (its conditions are among the `eval()`'s), or when the other branch of its `if` trains."""
    every = _conditions(forward)
    partial: list[int] = []
    for i in indices:
        event = names.events[i]
        if event.kind not in _MODES:
            continue
        receiver = model_key(names.outer(i, event.receiver))
        if event.kind is EventKind.TRAIN_MODE and (receiver == key or receiver not in others):
            if _conditions(event) <= every:
                return i
            partial.append(i)
        elif event.kind is EventKind.EVAL_MODE and receiver == key:
            undone = any(_conditions(names.events[t]) <= _conditions(event) for t in partial)
            if not undone and not _other_branch_trains(names, event):
                return i
    return partial[0] if partial else None


def _conditions(event: Event) -> set[tuple[str, bool]]:
    """The conditions an event runs under, by their text: two blocks under the same test run together."""
    return {(g.text, g.negated) for g in event.guards}


def _other_branch_trains(names: Names, evaluation: Event) -> bool:
    """`if ...: model.eval()` with an `else` (or `elif`) branch that calls `train()`."""
    flipped = {(g.span, not g.negated) for g in evaluation.guards}
    return any(
        e.kind is EventKind.TRAIN_MODE and e.function == evaluation.function and flipped & {(g.span, g.negated) for g in e.guards}
        for e in names.events
    )


def _leaves_loop(model: ModuleModel, names: Names, index: int, loop: int) -> bool:
    """After the `eval()` (or a call on the way to it) the pass leaves the loop: a `break`,
    `return` or `raise` follows it in its block (`if step == last: model.eval(); test(); break`);
    inside a called function only a `raise` does (its `return` goes back to the loop)."""
    owner = model.loops[loop].function if loop in model.loops else None
    evaluation, chain = names.events[index], names.chain(index) or ()
    statements = [(evaluation.stmt, evaluation.function), *((call.stmt, call.function) for call in chain)]
    return any(leaves_after(model, stmt, inside=function != owner) for stmt, function in statements)


def leaves_after(model: ModuleModel, stmt: Span, inside: bool) -> bool:
    """A `break`, `return` or `raise` follows the statement in its block, or in an enclosing `if` /
    `with` / `try` block up to the nearest loop or function; only a `raise` when the statement is
    `inside` a function the loop calls (its `return` goes back to the loop)."""
    return model.tree is not None and _exits_after(model.tree, stmt.start.line, (ast.Raise,) if inside else _EXITS)


_EXITS: tuple[type[ast.stmt], ...] = (ast.Break, ast.Return, ast.Raise)
_SCOPES = (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _exits_after(tree: ast.Module, line: int, exits: tuple[type[ast.stmt], ...]) -> bool:
    """The statement starting on 0-based `line` is followed, in its block or in an enclosing
    `if` / `with` / `try` block up to the nearest loop or function, by one of `exits`."""
    path = _path_to(tree.body, line + 1)
    for level in range(len(path) - 1, -1, -1):
        body, position = path[level]
        if any(isinstance(s, exits) for s in body[position + 1 :]):
            return True
        if level and isinstance(path[level - 1][0][path[level - 1][1]], _SCOPES):
            return False
    return False


def _path_to(body: list[ast.stmt], lineno: int) -> list[tuple[list[ast.stmt], int]]:
    """The blocks, outermost first, that hold the statement starting on `lineno` (1-based), each
    with the position of the statement of that block on the way."""
    for position, stmt in enumerate(body):
        if not stmt.lineno <= lineno <= (stmt.end_lineno or stmt.lineno):
            continue
        if stmt.lineno == lineno:
            return [(body, position)]
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(stmt, field, None)
            if not isinstance(inner, list):
                continue
            blocks = [h.body for h in inner] if field == "handlers" else [inner]
            for block in blocks:
                rest = _path_to(block, lineno)
                if rest:
                    return [(body, position), *rest]
        if isinstance(stmt, ast.Match):
            for case in stmt.cases:
                rest = _path_to(case.body, lineno)
                if rest:
                    return [(body, position), *rest]
        return [(body, position)]
    return []
