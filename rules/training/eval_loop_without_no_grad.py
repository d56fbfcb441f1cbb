"""## What it does
Flags a loop that runs a model forward, with no `backward()` and no optimizer step in
its iteration, outside `torch.no_grad()` / `torch.inference_mode()`.

## Why is this bad?
Outside `no_grad`, every forward pass records an autograd graph and keeps the
activations it needs for a backward pass that never comes. Evaluation then uses several
times the memory it needs (often enough to OOM on a batch size that trains fine) and
runs slower. Anything the loop keeps, such as the predictions, keeps its graph too.

The loop counts as covered when it sits inside `with torch.no_grad():` or
`torch.inference_mode()`, when its function is decorated with `@torch.no_grad()` or
`@torch.inference_mode()` (or is nested in one that is), when every call of its function
in the file runs under `no_grad`, and after `torch.set_grad_enabled(False)`. Loops whose
function back-propagates later, or whose enclosing loop back-propagates after it in the
same pass (outputs collected for one backward, a chunked loss), functions whose result
a caller back-propagates through (a training helper), loops that always leave after one
pass (`for batch in loader: print(model(x).shape); break`), modules frozen before the loop
(`G.eval().requires_grad_(False)`, never turned back on), gradient-based attacks
(`requires_grad_`, `torch.autograd.grad`) and calls into unseen training code are left
alone. An evaluation or sampling helper called from inside a training loop is flagged
when the caller only logs what it returns and it keeps nothing else (filling containers it
made itself, as nanoGPT's `estimate_loss` does, is fine); the call is named in the related
information, and so is the function to decorate with `@torch.no_grad()` (the loop's own, or
the helper that runs the forward once per call of the loop). A forward inside a helper
decorated with `@torch.no_grad()` / `@torch.inference_mode()` is covered wherever it is called.
A method of an nn.Module that runs the module's own layers (`self.convs[i](x)`) over a data
loader it receives (layer-wise inference, `SAGE.test(x_all, subgraph_loader)`) is an evaluation
too; the module's forward, its private helpers and methods its own class calls are part of the
model and stay silent, and so does a method whose call the file cannot resolve
(`model.module.test(...)`) when such a call runs under `no_grad`.

A helper whose result is a plain number (`total_loss / num_batches` summed from `loss.item()`,
a container returned as numpy) feeds no backward pass, whoever calls it. When the loop is reached
through a caller that does not train (`evaluate_model()` calling `calc_loss_loader()` twice, called
from the training loop), the finding sits at that caller's first call, where `no_grad` must
start, with the loop, the forward and the function to decorate related. Nested loops of one
evaluation (a memory bank filled batch by batch, crop by crop) are reported once, at the outermost
loop of the function whose every pass evaluates, which the fix wraps; the inner loop is related.
A list the evaluation summarises with numpy (`return np.mean(top1_acc)`) hands no graph out, so a
training function's list of the same name does not silence it. A parameter that every
call of the file fills with a module runs a model (`validate(loader, model, linear_classifier)`).
A timing loop that repeats one input counts when its function starts by putting the model in eval
mode (`model.eval()`, then `for i in range(50): model(images)`). An ignite evaluator step
(`Engine(test_step)`) that puts its model in eval mode and runs it outside `no_grad` is flagged
at its `def`, unless it is decorated, its engine runs under `no_grad`, or it asks for gradients.

## Example
```python
model.eval()
for x, y in val_loader:
    correct += (model(x).argmax(1) == y).sum().item()
```

## Use instead
```python
model.eval()
with torch.no_grad():
    for x, y in val_loader:
        correct += (model(x).argmax(1) == y).sum().item()
```

## Fix safety
The fix wraps the loop in `with torch.no_grad():` and indents it, leaving the lines of
multi-line strings untouched. It is safe: the loop computes no gradients.

## References
- [torch.no_grad](https://pytorch.org/docs/stable/generated/torch.no_grad.html)
- [torch.inference_mode](https://pytorch.org/docs/stable/generated/torch.inference_mode.html)
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from torch_preflight.core.diagnostics import Applicability, Diagnostic, Fix, Related, Severity
from torch_preflight.core.edits import indent_unit, wrap_block
from torch_preflight.core.semantic import Event, EventKind, Kind, Loop
from torch_preflight.core.source import Span
from torch_preflight.rules.base import Context, RuleMeta, report
from torch_preflight.rules.training._evaluation import region_start, returns_no_graph, trains
from torch_preflight.rules.training._modes import first_statement

META = RuleMeta(
    code="TPF007",
    name="eval-loop-without-no-grad",
    message="Evaluation loop runs without torch.no_grad()",
    fix_title="Wrap the loop in `with torch.no_grad():`",
    severity=Severity.WARNING,
)

# Objects a loss is computed with but that carry no activation graph of theirs: what they were built from
# (`model = torch.compile(model)`, a checkpoint) never reaches the backward as data.
_NOT_ACTIVATIONS = frozenset({Kind.MODEL, Kind.OPTIMIZER, Kind.SCHEDULER, Kind.SCALER, Kind.LOADER, Kind.SAMPLER, Kind.LOSS_FN})
_GRAD_USERS = frozenset({"requires_grad_", "retain_grad", "register_hook"})
_WORDS = re.compile(r"\w+")
_MODELS_WORD = re.compile(r"model|net|module|layer|block|encoder|decoder|classifier|ensemble|checkpoint|ckpt", re.I)


def check(ctx: Context) -> Iterator[Diagnostic]:
    # Everything but `_read_by_backward` depends only on the loop's function and what it
    # reaches by name: a loop memo, which the language server carries over unrelated edits.
    memo = ctx.training.loop_memo("TPF007.finding")
    reported: set[Span] = set()
    for loop in ctx.model.loops.values():
        entry = memo.get(loop.id)
        if entry is None or entry[0] != ctx.source.newline:  # the fix's line endings
            entry = memo[loop.id] = (ctx.source.newline, *_candidate(ctx, loop))
        _, diagnostic, containers, own_layers = entry
        if diagnostic is None or diagnostic.span in reported or _read_by_backward(ctx, containers, loop.function):
            continue  # (several inner loops of one evaluation report its outer loop once)
        if own_layers and _called_under_no_grad(ctx, loop):
            continue  # read outside the memo: the calls it looks for may be in any statement of the module
        reported.add(diagnostic.span)
        yield diagnostic
    yield from _engine_steps(ctx)


def _candidate(ctx: Context, loop: Loop) -> tuple[Diagnostic | None, frozenset[str], bool]:
    """The loop's finding unless a back-propagating function reads the containers it stores into
    (and, for a module's own layers over a loader, unless the method is called under no_grad)."""
    training = ctx.training
    events = training.iteration(loop)
    forwards = [e for e in events if training.is_forward(e) and not e.no_grad and not _in_no_grad_function(ctx, e)]
    own_layers = not forwards
    forwards = forwards or _own_layers_over_loader(ctx, loop, events)
    if not forwards or all(e.inner for e in forwards):
        return None, frozenset(), False
    containers = _evaluation(ctx, loop, events)
    if containers is None or not training.grad_enabled_at(loop) or _inside_model(ctx, loop, forwards):
        return None, frozenset(), False
    if (_same_input_each_pass(ctx, loop, events, forwards) and not _put_in_eval_mode(ctx, loop, forwards)) or all(
        _parameterless(ctx, f) or ctx.training.frozen_before(f, loop) for f in forwards
    ):
        return None, frozenset(), False
    runs = forwards[0].name or _callee(ctx, forwards[0])
    entry, into = _uncovered_entry(ctx, loop.function)
    if into is None:
        # the outermost loop whose every pass evaluates too: `no_grad` belongs around it
        outer, _ = region_start(ctx.model, loop, lambda above: training.grad_enabled_at(above) and _evaluation(ctx, above, training.iteration(above)) is not None)
        inner = [Related(loop.header, "inner loop")] if outer is not loop else []
        diagnostic = report(
            META,
            outer.header,
            f"Loop runs `{runs}` forward without `torch.no_grad()`; autograd records a graph it never uses",
            _fix(ctx, outer),
            related=[*inner, Related(forwards[0].span, "model forward"), *_decorator_site(ctx, loop, forwards), *_training_callers(ctx, loop.function)],
        )
    else:  # the evaluation starts in a caller: the call there is what `no_grad` must cover
        site = ctx.model.functions[entry]
        diagnostic = report(
            META,
            into.stmt,
            f"`{site.name}()` evaluates without `torch.no_grad()`: the loop it reaches runs `{runs}` forward, and autograd records a graph it never uses",
            _fix(ctx, loop),
            related=[
                Related(loop.header, "evaluation loop"),
                Related(forwards[0].span, "model forward"),
                Related(site.header, f"or decorate `{site.name}()` with `@torch.no_grad()`"),
                *_training_callers(ctx, entry),
            ],
        )
    return diagnostic, containers, own_layers


def _uncovered_entry(ctx: Context, scope: str) -> tuple[str, Event | None]:
    """Where the evaluation that reaches `scope` with gradients on starts: following the calls of
    `scope` that run with gradients on while they all come from one function of the file that does
    not train (`evaluate_model()` calling `calc_loss_loader()` twice), the outermost such function and
    its first such call. `(scope, None)` when the callers are several, train, or there are none."""
    model, training = ctx.model, ctx.training
    entry, into = scope, None
    for _ in range(4):
        callers = [c for c in model.calls_to.get(entry, []) if not c.no_grad]
        functions = {c.function for c in callers}
        if len(functions) != 1:
            break
        caller = next(iter(functions))
        cls = model.enclosing_class(caller) if caller else None
        if not caller or caller == entry or trains(training, caller) or training.opaque_training_call(training.expanded(caller)):
            break
        if (cls is not None and (cls.is_module or cls.owns_loop)) or model.covered_by_no_grad(caller, disables=training.decorated_no_grad):
            break
        if any(_feeds_backward(ctx, c) for c in callers):
            break
        entry, into = caller, min(callers, key=lambda c: c.span.start)
    return entry, into


def _own_layers_over_loader(ctx: Context, loop: Loop, events: tuple[Event, ...]) -> list[Event]:
    """The calls of a module's own layers (`self.convs[i](x)`, `self.encoder(x)`) in a loop over a
    data loader the method receives, in a method of an nn.Module that is not its forward, not one
    of its private helpers and not called by its own class (`SAGE.test(self, x_all,
    subgraph_loader)`): the method evaluates the model over the data, and those calls are the
    forward each batch runs (`_called_under_no_grad` is asked outside the loop memo)."""
    model = ctx.model
    fn = model.functions.get(loop.function)
    cls = model.enclosing_class(loop.function)
    if fn is None or cls is None or not cls.is_module or fn.name.startswith("_") or fn.name in ("forward", "__call__"):
        return []
    if any(model.enclosing_class(c.function) is cls for c in model.calls_to.get(loop.function, [])):
        return []  # a helper of the module's own forward (its callers are in the class, as the loop is)
    if not _over_loader(ctx, loop, fn.params):
        return []
    return [e for e in events if e.kind is EventKind.CALL and not e.via and not e.no_grad and _own_layer(ctx, e, loop.function)]


def _called_under_no_grad(ctx: Context, loop: Loop) -> bool:
    """The loop's method has no caller the file resolves, and a call spelled like it runs under
    `no_grad` (`model.module.test(...)` inside `with torch.no_grad():`)."""
    model = ctx.model
    fn = model.functions.get(loop.function)
    if fn is None or model.calls_to.get(loop.function):
        return False
    return any(e.no_grad and e.receiver and (e.name or "").rsplit(".", 1)[-1] == fn.name for f in model.functions.values() for e in f.events)


_LOADER_WORD = re.compile(r"loader|(?:^|_)dl$", re.I)


def _over_loader(ctx: Context, loop: Loop, params: tuple[str, ...]) -> bool:
    """The loop, or one around it in its function, iterates a parameter that holds a data loader:
    by its kind, or (the callers unknown) by its name."""
    current: Loop | None = loop
    while current is not None and current.function == loop.function:
        names = current.iter.names if current.iter is not None else ()
        if any(n in params and (ctx.model.kind_of(n, loop.function) is Kind.LOADER or _LOADER_WORD.search(n)) for n in names):
            return True
        current = ctx.model.loops.get(current.parent) if current.parent is not None else None
    return False


def _call_node(ctx: Context, call: Event) -> ast.Call | None:
    """The call's syntax, or None when its text is no call expression of its own."""
    try:
        node = ast.parse(ctx.source.slice(call.span).strip(), mode="eval").body
    except SyntaxError:
        return None
    return node if isinstance(node, ast.Call) else None


def _callee(ctx: Context, call: Event) -> str:
    """The text of the called expression (`self.convs[i]`), or "" when unreadable."""
    node = _call_node(ctx, call)
    return ast.unparse(node.func) if node is not None else ""


def _own_layer(ctx: Context, call: Event, scope: str) -> bool:
    """`self.<attr>(...)` or `self.<attr>[i](...)` where the attribute holds a module (a layer, a ModuleList)."""
    node = _call_node(ctx, call)
    func = node.func if node is not None else None
    if isinstance(func, ast.Subscript):
        func = func.value
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"):
        return False
    return ctx.model.kind_of(f"self.{func.attr}", scope) is Kind.MODEL and not ctx.model.resolve_function(f"self.{func.attr}", scope)


def _in_no_grad_function(ctx: Context, event: Event) -> bool:
    """The event was inlined from a function decorated with `@torch.no_grad()` / `@torch.inference_mode()`
    (or the project's own such decorator): it runs without a graph whoever calls it."""
    functions = ctx.model.functions
    return any(q in functions and ctx.training.decorated_no_grad(functions[q]) for q in event.via)


def _decorator_site(ctx: Context, loop: Loop, forwards: list[Event]) -> list[Related]:
    """The evaluation function to decorate with `@torch.no_grad()`: the loop's own function, or the
    helper of the file that runs the forward once per call of the loop (`acc = evaluate(model, x, y)`)."""
    helpers = {f.via[-1] for f in forwards if f.via}
    helpers = {h for h in helpers if not any(trains(ctx.training, c.function) for c in ctx.model.calls_to.get(h, []))}
    names = {loop.function, *helpers} - {""}
    sites = [ctx.model.functions[q] for q in sorted(names) if q in ctx.model.functions and not ctx.model.functions[q].is_lambda]
    return [Related(fn.header, f"or decorate `{fn.name}()` with `@torch.no_grad()`") for fn in sites if not ctx.model.enclosing_class(fn.qualname) or fn.owner]


def _training_callers(ctx: Context, scope: str) -> list[Related]:
    """The calls of the function from inside a training loop: where it runs with gradients on."""
    training_ids = {t.loop.id for t in ctx.training.training_loops}
    return [
        Related(call.span, "called from the training loop here")
        for call in ctx.model.calls_to.get(scope, [])
        if training_ids & set(call.loops)
    ]


def _inside_model(ctx: Context, loop: Loop, forwards: list[Event]) -> bool:
    """A loop that is part of a model: over its layers, or in a module's forward()."""
    if all(f.name in loop.targets for f in forwards):
        return True
    if all(_from_callable_pairs(ctx, loop, f) for f in forwards):
        return True
    fn = ctx.model.functions.get(loop.function)
    cls = ctx.model.enclosing_class(loop.function)
    return bool(fn and cls and cls.is_module and fn.name in ("forward", "__call__", "_forward"))


def _from_callable_pairs(ctx: Context, loop: Loop, forward: Event) -> bool:
    """The callee is the target of an enclosing loop over something not named like models
    (`for module, examples in example_inputs.items(): for ex in examples: module(*ex)`):
    each callable runs its own inputs (type profiling, test harnesses), not an evaluation."""
    parent = loop.parent
    while parent is not None:
        outer = ctx.model.loops[parent]
        if forward.name in outer.targets:
            names = outer.iter.names if outer.iter else ()
            return not any(_MODELS_WORD.search(n) for n in names) and not _MODELS_WORD.search(outer.iter.text if outer.iter else "")
        parent = outer.parent
    return False


def _same_input_each_pass(ctx: Context, loop: Loop, events: tuple[Event, ...], forwards: list[Event]) -> bool:
    """Every forward runs on inputs the loop never changes (`for _ in range(times): model(*inputs)`):
    a timing or repetition harness whose caller owns the grad mode, not a pass over data."""
    if any(f.via or f.inner for f in forwards):
        return False
    varying = set(loop.targets)
    for event in events:
        if event.kind in (EventKind.ASSIGN, EventKind.AUG_ASSIGN):
            varying.update(t.partition(".")[0].partition("[")[0] for t in event.targets)
        elif event.kind is EventKind.STORE and event.receiver:
            varying.add(event.receiver.partition(".")[0])
        elif event.kind is EventKind.CALL and event.receiver:
            varying.add(event.receiver.partition(".")[0])  # `x.copy_(...)`, `it.send(...)`: may change it
    for forward in forwards:
        call = _call_node(ctx, forward)
        if call is None:
            return False
        read = {n.id for arg in (*call.args, *call.keywords) for n in ast.walk(arg) if isinstance(n, ast.Name)}
        if not read or read & varying:
            return False
    return True


def _put_in_eval_mode(ctx: Context, loop: Loop, forwards: list[Event]) -> bool:
    """The loop's function starts by putting every model the loop runs in eval mode, unconditionally and
    outside any loop (`model.eval()`, then `for i in range(50): model(images)` timing inference): the
    function owns the evaluation and its grad mode, whatever its caller does."""
    fn = ctx.model.functions.get(loop.function)
    if fn is None or not loop.function:
        return False
    evals = {e.receiver for e in fn.events if e.kind is EventKind.EVAL_MODE and e.receiver and e.span.start < loop.span.start
             and not e.guards and not e.loops and e.function == loop.function}
    return all(f.name in evals for f in forwards)


def _parameterless(ctx: Context, forward: Event) -> bool:
    """An instance of a class of this file that subclasses nn.Module and defines no `__init__`:
    it has no parameters, so its forward records no graph unless the inputs ask for one."""
    assigned = ctx.model.assignments(forward.name or "", forward.function)
    if not assigned or any(a.value is None or a.value.callee not in ctx.model.classes for a in assigned):
        return False
    for a in assigned:
        cls = ctx.model.classes[a.value.callee or ""]
        if "__init__" in cls.methods or not cls.bases or any(b not in ("torch.nn.Module", "torch.nn.modules.module.Module") for b in cls.bases):
            return False
    return True


def _is_eval(ctx: Context, loop: Loop, events: tuple[Event, ...]) -> bool:
    """An evaluation loop (TPF006 asks too), for `events` = its iteration or a part of it."""
    found = _evaluation(ctx, loop, events) if events is ctx.training.iteration(loop) else _evaluates(ctx, loop, events)
    return found is not None and not _read_by_backward(ctx, found, loop.function)


def _evaluation(ctx: Context, loop: Loop, events: tuple[Event, ...]) -> frozenset[str] | None:
    """`_evaluates` of the loop's iteration, as a loop memo."""
    memo = ctx.training.loop_memo("TPF007.evaluates")
    if loop.id not in memo:
        memo[loop.id] = _evaluates(ctx, loop, events)
    found: frozenset[str] | None = memo[loop.id]
    return found


def _evaluates(ctx: Context, loop: Loop, events: tuple[Event, ...]) -> frozenset[str] | None:
    """None when the loop is part of training, or else the containers it stores values into."""
    if loop.runs_once:
        return None  # `for batch in loader: print(model(x).shape); break`: a one-batch peek, no evaluation
    training = ctx.training
    if _uses_graph(ctx, events):
        return None
    # The function back-propagates after the loop: the outputs are collected on purpose.
    training_ids = {t.loop.id for t in training.training_loops}
    # Part of a training step: nested in a loop that back-propagates, or in a function
    # called from one (a chunked loss, per-head losses summed before backward()).
    parent = loop.parent
    while parent is not None:
        if _backward_after(training.iteration(ctx.model.loops[parent]), loop):
            return None
        parent = ctx.model.loops[parent].parent
    for call in ctx.model.calls_to.get(loop.function, []):
        if _feeds_backward(ctx, call):
            return None  # a helper whose outputs the caller back-propagates through
        if training_ids & set(call.loops) and not _evaluation_helper(ctx, loop, events):
            return None
    for event in training.expanded(loop.function):
        if event.kind is EventKind.BACKWARD and event.span.start > loop.span.end and not training_ids & set(event.loops):
            return None
    return _stored_containers(ctx, loop, events)


def _uses_graph(ctx: Context, events: tuple[Event, ...]) -> bool:
    """The events train, switch to training mode, ask for gradients (`requires_grad_`, `autograd.grad`,
    `enable_grad`: an attack, a saliency map), or call unseen code that may train."""
    for event in events:
        if event.kind in (EventKind.BACKWARD, EventKind.STEP, EventKind.ZERO_GRAD, EventKind.TRAIN_MODE):
            return True
        if event.kind is EventKind.CALL and event.receiver and event.name and event.name.rsplit(".", 1)[-1] in _GRAD_USERS:
            return True
        if event.name in ("torch.autograd.grad", "torch.enable_grad", "torch.set_grad_enabled"):
            return True
        if any(c.name in ("torch.enable_grad", "torch.set_grad_enabled") for c in event.contexts):
            return True
    return ctx.training.opaque_training_call(events) is not None


def _engine_steps(ctx: Context) -> Iterator[Diagnostic]:
    """An evaluator's step function handed to an ignite `Engine(test_step)`: the engine runs it once
    per batch, so a forward in it outside `no_grad` records a graph per batch that nothing uses. Only a
    step that puts the model in eval mode first (an evaluation by its own say), never trains or asks
    for gradients, and is not decorated or called under `no_grad`."""
    training, model = ctx.training, ctx.model
    for qualname in training.engine_functions:
        fn = model.functions.get(qualname)
        if fn is None or fn.is_lambda or _grad_off_around(ctx, qualname):
            continue
        engines = training.engine_functions[qualname]
        if any(e.no_grad and e.receiver in engines for f in model.functions.values() for e in f.events):
            continue  # `with torch.no_grad(): evaluator.run(loader)`
        events = training.expanded(qualname)
        forwards = [e for e in events if training.is_forward(e) and not e.no_grad and not e.loops and not _in_no_grad_function(ctx, e)]
        evals = {e.receiver for e in events if e.kind is EventKind.EVAL_MODE and e.receiver}
        if not forwards or not all(f.name in evals for f in forwards) or _uses_graph(ctx, events):
            continue
        yield report(
            META,
            fn.header,
            f"`{fn.name}()` runs `{forwards[0].name}` forward once per batch of its engine without `torch.no_grad()`; autograd records a graph it never uses",
            related=[Related(first_statement(fn), "the evaluation starts here"), Related(forwards[0].span, "model forward")],
        )


def _grad_off_around(ctx: Context, qualname: str) -> bool:
    """The function, or one it is nested in, is decorated with `@torch.no_grad()` (or the like)."""
    fn = ctx.model.functions.get(qualname)
    while fn is not None:
        if ctx.training.decorated_no_grad(fn):
            return True
        fn = ctx.model.functions.get(fn.parent) if fn.parent else None
    return False


def _feeds_backward(ctx: Context, call: Event) -> bool:
    """What `call` returns can reach a backward pass in the calling function: it is
    back-propagated or returned there, or bound to a name that the backward's loss is built
    from (`out = helper(x)`, `loss = criterion(out, y)`, `loss.backward()`). Discarded
    results, those only logged or printed, and plain numbers (a helper returning
    `total_loss / num_batches` summed from `loss.item()`) do not reach one."""
    targets_of_call = ctx.model.call_targets(call)
    if targets_of_call and all(returns_no_graph(ctx.training, t) for t in targets_of_call):
        return False
    events = ctx.training.expanded(call.function)
    here = [e for e in events if e.stmt == call.stmt and e.function == call.function]
    if any(e.kind in (EventKind.BACKWARD, EventKind.RETURN) or e.name == "torch.autograd.grad" for e in here):
        return True
    targets = {t.partition(".")[0].partition("[")[0] for e in here if e.kind in (EventKind.ASSIGN, EventKind.AUG_ASSIGN) for t in e.targets}
    targets |= {e.receiver.partition(".")[0].partition("[")[0] for e in here if e.kind is EventKind.STORE and e.receiver}
    if not targets:
        return False
    frontier: set[str] = set()
    # What the caller returns may be back-propagated by its own caller, when the file shows one
    # (an entry point handed to a framework, `train_func(config)`, returns its metrics).
    called = bool(ctx.model.calls_to.get(call.function))
    for e in events:
        if e.via:
            continue  # a callee's backward and returns are about its own names, not the caller's
        if e.kind is EventKind.BACKWARD or e.name == "torch.autograd.grad":
            frontier.update(_WORDS.findall(e.receiver or ""))
            frontier.update(n for a in (*e.args, *(v for _, v in e.keywords)) for n in a.names)
        elif e.kind is EventKind.RETURN and e.value is not None and called:
            frontier.update(e.value.names)  # the caller's caller may back-propagate it (a callee's own return is not)
    for _ in range(8):
        grown = False
        for e in events:
            if e.via:
                continue  # a callee's names are its own
            sources: tuple[str, ...] = ()
            if e.kind in (EventKind.ASSIGN, EventKind.AUG_ASSIGN) and e.value is not None:
                if any(t.partition(".")[0].partition("[")[0] in frontier for t in e.targets):
                    sources = e.value.names
            elif e.kind is EventKind.STORE and e.receiver and e.receiver.partition(".")[0].partition("[")[0] in frontier:
                sources = tuple(n for a in e.args for n in a.names) + (e.value.names if e.value else ())
            new = {n for n in sources if n not in frontier and ctx.model.kind_of(n, e.function) not in _NOT_ACTIVATIONS}
            if new:
                frontier |= new
                grown = True
        if not grown:
            break
    return bool(targets & frontier)


def _evaluation_helper(ctx: Context, loop: Loop, events: tuple[Event, ...]) -> bool:
    """The loop's function, called from a training loop, keeps nothing it computes but what it
    returns: no attribute assigned, no container outside it filled with graph-carrying values.
    Its results then reach the training step only through its return value."""
    if _stored_containers(ctx, loop, events):
        return False
    return not any(
        e.kind in (EventKind.ASSIGN, EventKind.AUG_ASSIGN) and any(("." in t or "[" in t) and not _fresh_local(ctx, t, loop.function) for t in e.targets)
        for e in ctx.training.expanded(loop.function)
    )


def _fresh_local(ctx: Context, target: str, scope: str) -> bool:
    """`losses[k] = ...` / `out[split] = ...` into a container the function itself made
    (`losses = torch.zeros(n)`, `out = {}`): what it holds leaves only through the return value."""
    head = target.partition("[")[0].partition(".")[0]
    fn = ctx.model.functions.get(scope)
    if fn is None or head in fn.params or head == "self":
        return False
    assigned = [e for e in ctx.model.assignments(head, scope) if e.function == scope]
    return bool(assigned) and all(e.value is not None and (e.value.is_literal or e.value.callee or e.value.text in ("{}", "[]")) for e in assigned)


def _backward_after(outer: tuple[Event, ...], loop: Loop) -> bool:
    """The enclosing loop's pass back-propagates after `loop` runs (a chunked loss, per-head
    losses summed before `backward()`). A backward that comes first in the pass (the training
    step done, then a periodic validation pass; an epoch's training loop, then its evaluation
    loop) cannot consume what `loop` computes."""
    first = next((i for i, e in enumerate(outer) if loop.id in e.loops), None)
    if first is None:
        return any(e.kind is EventKind.BACKWARD for e in outer)
    return any(e.kind is EventKind.BACKWARD for e in outer[first:])


def _stored_containers(ctx: Context, loop: Loop, events: tuple[Event, ...]) -> frozenset[str]:
    """The containers the loop stores values into that code elsewhere could read later.
    Not a container local to a callee (`res.append(...)` in an `accuracy()` helper), nor the
    loop's own batch (`batch[key] = batch[key].to(device)`): nothing outside can read those."""
    return frozenset(
        e.receiver.partition("[")[0]
        for e in events
        if e.kind is EventKind.STORE
        and e.receiver
        and not _detached_store(ctx, e)
        and not (e.via and "." not in e.receiver)
        and e.receiver.partition(".")[0].partition("[")[0] not in loop.targets
        and not _private_local(ctx, loop.function, e.receiver)
    )


def _detached_store(ctx: Context, store: Event) -> bool:
    """The values stored carry no graph (`val_losses.append(loss.item())`): no backward pass
    can go through the container, whoever reads it."""
    values = (store.value,) if store.name == "__setitem__" else store.args[1:2] if store.name == "insert" else store.args
    return bool(values) and all(
        v is not None and (v.is_literal or ctx.model.kind_of_value(v, store.function) in (Kind.SCALAR, Kind.DETACHED)) for v in values
    )


def _read_by_backward(ctx: Context, containers: frozenset[str], scope: str) -> bool:
    """A back-propagating function that can see one of the containers (`ModuleModel.readers`)
    mentions it: the graphs are kept for it (REINFORCE). Each function's words are a function
    memo (they depend on its text only)."""
    if not containers:
        return False
    readers = {f.qualname: f for c in containers for f in ctx.model.readers(c, scope)}.values()
    names = frozenset(c.rsplit(".", 1)[-1] for c in containers)
    words = ctx.training.function_memo("TPF007.backward_words")
    for fn in readers:
        found = words.get(fn.qualname)
        if found is None:
            found = words[fn.qualname] = (
                frozenset(_WORDS.findall(ctx.source.slice(fn.span) if fn.qualname else ctx.source.text))
                if any(e.kind is EventKind.BACKWARD for e in fn.events)
                else frozenset()
            )
        if names & found:
            return True
    return False


def _private_local(ctx: Context, scope: str, name: str) -> bool:
    """A bare local of the loop's function (not a parameter) that it never returns whole:
    no other function can read it (`metric = Accumulator(2)` ... `return metric[0] / metric[1]`)."""
    fn = ctx.model.functions.get(scope)
    if fn is None or not scope or "." in name or "[" in name or name in fn.params:
        return False
    if not any(e.kind is EventKind.ASSIGN and name in e.targets for e in fn.events):
        return False
    word = re.compile(rf"\b{re.escape(name)}\b")
    for other in ctx.model.functions.values():
        if other.qualname.startswith(scope + ".") and word.search(ctx.source.slice(other.span)):
            return False  # a nested function (a closure) may read it
    if returns_no_graph(ctx.training, scope):
        return True  # what it returns is plain (`torch.cat(images).numpy()`): the container leaves with no graph
    for event in fn.events:
        if event.kind is EventKind.RETURN and event.value is not None and name in event.value.names:
            try:
                tree = ast.parse(event.value.text.strip(), mode="eval")
            except SyntaxError:
                return False
            parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Name) and node.id == name:
                    parent = parents.get(node)
                    if not (isinstance(parent, ast.Subscript) and parent.value is node and isinstance(parent.slice, ast.Constant)):
                        return False  # the container itself leaves the function
    return True


def _fix(ctx: Context, loop: Loop) -> Fix | None:
    no_grad = ctx.model.imports.alias_for("torch.no_grad")
    if no_grad is None or loop.body.start.line <= loop.header.end.line:
        return None
    unit = indent_unit(loop.indent, loop.body_indent)
    edits = wrap_block(ctx.source, loop.span.start.line, loop.span.end.line, loop.indent, unit, f"with {no_grad}():")
    return Fix(f"Wrap the loop in `with {no_grad}():`", tuple(edits), Applicability.SAFE)
