"""## What it does
Flags an evaluation loop that runs a model with no `model.eval()` on the way to it: a
`no_grad` loop over a validation or test loader (named so, or a loader parameter that a call of
the file fills with such data: `compute_accuracy(model, test_loader)`), or a loop in a function
named like `evaluate` / `validate` / `test` / `predict` / `accuracy`, where the last mode call
before the loop (in the function, or on every path through its callers in the file) is
`model.train()`, or where no mode call comes before it at module level (a fresh model is in
training mode). A function named like that with no loop, whose single full-batch forward runs
under `no_grad` (graph networks, small tabular sets), is checked the same way, and so is the loop of
a function named like `inference`; with autograd on, such a function is checked only when every
caller trained the model just before and back-propagates nothing after the call. So is a forward
outside any loop after a training loop, at module level or in the function that trained (the
final test-set evaluation of a tabular or notebook-style script), under `no_grad` or with nothing
back-propagated after it. A model counts as run when it is called, when its own
methods run on inputs (`model.encode(src)`, `model.module.test(x)`), also inside a helper of the
file it is handed to (`greedy_decode(model, ...)`), and when a callable the function is given is
applied to it (`model_fn(model, x)`, as in ignite's step factories). `model.module.train()` sets
the mode of the network behind DataParallel / DistributedDataParallel.

The finding sits where the evaluation region starts: the outermost statement of the function around
the evaluation loop (the `with torch.no_grad():` opened for it, or the loop), or the forward; its
related locations name the loop, the forward, the call that
left the model in training mode, the call that entered the evaluation and, when the evaluation
function sets no mode itself, its first statement: where its `eval()` belongs. When training code
enters the evaluation through a function that reaches the loop through helpers
(`evaluate_model()` calling `calc_loss_loader()`), the finding sits at that function's first
statement, with the helper's loop related. A step function a factory hands to an engine
(`Engine(evaluate_step)` in `create_evaluator()`) runs alone, so the finding sits at the step's
first statement, not the factory's; a callable taken from the settings with a lambda fallback
(`config.get("model_output_transform", lambda x: x)`) is no model.

Code that training calls after it trained (or in a loop whose pass trains) and that keeps what a
no_grad forward computes is an evaluation whatever it is called (`visualize_results()` sampling
a generator at the end of each epoch), unless what it returns is the loss's target; a forward
whose result is dropped refreshes batch-norm statistics on purpose. A function or a block of the
training loop that ends with `model.train()` but never called `model.eval()` before its no_grad
forward (or before handing the model to code the file cannot see under no_grad, a text generator)
is flagged at its first statement when the model is in training mode there (`if step % N == 0:
with torch.no_grad(): x_0 = sampler(x_T) ... net_model.train()`).

A frozen backbone of a linear probe (run under no_grad in a training loop whose optimizers own only
other modules), built fresh and never put in eval mode, is flagged where it is set up (`model.cuda()`)
when its class is known to hold batch norm or dropout: a torchvision family built with them, or a
class of the file or the project. A backbone built from a name the file cannot read
(`torchvision_models.__dict__[args.arch]()`) is left alone.

A train/validation phase loop (`for phase in ["train", "val"]:`) that calls `model.train()`
only when `phase == "train"`, back-propagates only on that path, and runs the model on every
path is flagged at the `train()` call: the validation phase runs in training mode.

An evaluation reached only from other modules that runs its model under `no_grad` is flagged when
the model is handed to it the same way as to a training function of the same file that puts it in
training mode: both take it as a parameter (`train_epoch(model, ...)` calling `model.train()`), or
both are methods of the same trainer class working on the same attribute (`self.model.train()` in
`train_epoch()`, and `evaluate()` without `self.model.eval()`). Callers run the two in turn.
Hooks of a framework's classes (Lightning modules and callbacks, Hugging Face `Trainer` subclasses
and `TrainerCallback`s) are left alone: the framework sets the modes around them.

## Why is this bad?
In training mode, dropout keeps dropping activations and batch norm normalises with the
statistics of each evaluation batch and updates its running averages with test data.
Metrics come out noisy and too low, and the model's running statistics drift. Nothing
raises.

Models whose class is in the file and has no dropout or batch norm behave the same in
both modes and are not flagged (a recurrent layer's `dropout` with a single layer does nothing). When the function is only called from code this file
cannot see and nothing in the file trains a model it is given, or another model's mode is
set, the rule stays silent.

## Example
```python
def evaluate(model, loader):
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
```

## Use instead
```python
def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
```

## Fix safety
The fix inserts `model.eval()` before the loop. It is unsafe: code after the loop that
trains again must switch back with `model.train()` (TPF009 reports when it does not).

## References
- [torch.nn.Module.eval](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.eval)
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from torch_preflight.core.diagnostics import Applicability, Diagnostic, Fix, Related, Severity
from torch_preflight.core.edits import insert_statement
from torch_preflight.core.names import tail
from torch_preflight.core.semantic import Event, EventKind, Function, Kind, Loop
from torch_preflight.core.training import TrainingModel
from torch_preflight.rules.base import Context, RuleMeta, report
from torch_preflight.rules.training._evaluation import after_training, evaluation_entry, handed_over, region_start, trains
from torch_preflight.rules.training._modes import (
    DEFAULT,
    TRAIN,
    UNKNOWN,
    argument_name,
    built_in,
    class_has_mode_layers,
    first_statement,
    has_mode_layers,
    mode_before,
    mode_events,
    mode_trace,
    model_key,
    sibling_mode_call,
    unset_from_entry,
)

META = RuleMeta(
    code="TPF008",
    name="missing-eval-mode",
    message="Evaluation runs without model.eval()",
    fix_title="Insert `model.eval()` before the loop",
    severity=Severity.WARNING,
)

_EVAL_FUNCTION = re.compile(
    r"(^|_)(eval|evaluate|evaluation|validate|validation|val|valid|inference|infer|predict|prediction|predictions|accuracy|acc)(_|$)|^(run_)?test(_epoch|_model|_loop|_one_epoch|_func|_fn)?$",
    re.I,
)
_EVAL_DATA = re.compile(r"val|valid|test|eval|dev_|holdout", re.I)
_NOT_EVAL = frozenset({EventKind.BACKWARD, EventKind.STEP, EventKind.ZERO_GRAD})
# nn.Module (and Hugging Face) methods that do not run the network on inputs.
_MODULE_API = frozenset(
    {"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "type", "train", "eval", "zero_grad", "requires_grad_",
     "apply", "add_module", "share_memory", "compile", "parameters", "buffers", "children", "modules", "state_dict",
     "fit", "backward", "step", "training_step", "train_step", "summary", "print_trainable_parameters", "push_to_hub",
     "resize_token_embeddings", "tie_weights", "extra_repr", "update"}
)
_API_PREFIX = ("register_", "named_", "get_", "set_", "load", "save", "from_", "enable_", "disable_", "gradient_checkpointing")
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _model_uses(ctx: Context, events: tuple[Event, ...] | list[Event]) -> list[tuple[Event, str]]:
    """The events that run a model, with the model's name: its forwards (`model(x)`); when there
    are none, calls of a callable the function is given with the model (`model_fn(model, x)`);
    else calls of the model's own methods on inputs (`model.encode(src)`, `model.module.test(x)`),
    also inside same-file helpers the model is handed to (`greedy_decode(model, ...)`)."""
    training = ctx.training
    direct = [(e, training.forward_target(e) or "") for e in events
              if training.is_forward(e) and not e.inner and e.name and not _handed_in(ctx, e, lambda_only=True)]
    if direct:
        return direct
    found: list[tuple[Event, str]] = []
    for e in events:
        if not e.inner and e.kind is EventKind.CALL and not e.receiver and _handed_in(ctx, e):
            # `model_fn(model, x)`: a callable the function is given, applied to the model.
            model = next((a.base for a in e.args if a.base and a.text == a.base and a.base != e.name
                          and ctx.model.kind_of(a.base, e.function) is Kind.MODEL), None)
            if model is not None:
                found.append((e, model))
    if found:
        return found
    for e in events:
        if e.inner or e.kind is not EventKind.CALL or not e.receiver or not (e.args or e.keywords):
            continue
        method = tail(e.name or "")
        if method in _MODULE_API or method.startswith(_API_PREFIX) or method.startswith("_"):
            continue
        head = e.receiver.removesuffix(".module")
        if not _DOTTED_NAME.fullmatch(head) or head == "self" or ctx.model.is_module_class(head):
            continue
        if ctx.model.kind_of(head, e.function) is Kind.MODEL and not ctx.model.resolve_function(head, e.function):
            found.append((e, head))
    return found


def _handed_in(ctx: Context, event: Event, lambda_only: bool = False) -> bool:
    """A call of a parameter of the function or of one enclosing it: code of the caller's choosing
    (`model_fn(model, x)`). With `lambda_only`, only a parameter whose default is a `lambda`
    (`model_transform=lambda output: output`): a function, whatever its name says, not a module."""
    fn = ctx.model.functions.get(event.function)
    assigned = ctx.training.function_memo("TPF008 single-name assignments")
    while fn is not None:
        if event.name in fn.params:
            default = fn.defaults.get(event.name)
            return default.text.lstrip().startswith("lambda") if default is not None else not lambda_only
        texts = assigned.get(fn.qualname)
        if texts is None:
            texts = assigned[fn.qualname] = _single_name_assignments(fn)
        bound = texts.get(event.name or "", ())
        if bound:  # a local: handed in when every binding takes a function from the caller's settings
            return all(_lambda_default(text) for text in bound)
        fn = ctx.model.functions.get(fn.parent) if fn.parent else None
    return False


def _single_name_assignments(fn: Function) -> dict[str, list[str]]:
    """The value texts `fn` itself assigns to each plain name (`x = ...`), in order."""
    texts: dict[str, list[str]] = {}
    for e in fn.events:
        if e.kind is EventKind.ASSIGN and e.function == fn.qualname and len(e.targets) == 1 and e.value is not None:
            texts.setdefault(e.targets[0], []).append(e.value.text)
    return texts


def _lambda_default(text: str) -> bool:
    """`text` is a lookup in the caller's settings that falls back to a lambda
    (`config.get("model_output_transform", lambda x: x)`, `getattr(cfg, "transform", lambda x: x)`):
    a function, whatever it is named, not a module."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return False
    if not isinstance(node, ast.Call):
        return False
    fallbacks = [k.value for k in node.keywords if k.arg == "default"] + node.args[1:][-1:]
    return any(isinstance(fallback, ast.Lambda) for fallback in fallbacks)


def check(ctx: Context) -> Iterator[Diagnostic]:
    training = ctx.training
    entries: set[tuple[str, str]] = set()  # (evaluation function, model): one finding where its eval() belongs
    uses_in = training.loop_memo("TPF008 model uses")  # what a loop runs of models rests on its function alone
    for loop in ctx.model.loops.values():
        events = training.iteration(loop)
        uses = uses_in.get(loop.id)
        if uses is None:
            uses = uses_in[loop.id] = _model_uses(ctx, events)
        forwards = [e for e, _ in uses]
        if not forwards or not _may_evaluate(ctx, loop, events):
            continue
        name = uses[0][1]
        if not name or name == "self" or any(model_key(n) != model_key(name) for _, n in uses):
            continue
        if mode_events(events) or _drawn_from_a_loop(ctx, loop, name):
            continue
        expanded = training.expanded(loop.function)
        first = next((i for i, e in enumerate(expanded) if loop.id in e.loops), None)
        if first is None:
            continue
        mode, setter, chain = mode_trace(training, loop.function, first, name)
        # Only an evaluation that also turns gradients off reads as one for sure: a loop with autograd on
        # (a calibration pass handed to `quantize()`, a loss evaluation) may run in whatever mode its caller chose.
        no_grad = not training.grad_enabled_at(loop) or all(f.no_grad for f in forwards)
        entry, into = evaluation_entry(training, loop.function, chain) if mode == TRAIN else (loop.function, None)
        if not _is_evaluation(ctx, loop, events, forwards) and not (no_grad and _entered_from_training(ctx, into, forwards)):
            continue
        sibling = _sibling_training(ctx, loop.function, first, name) if mode == UNKNOWN and no_grad else None
        if (mode not in (TRAIN, DEFAULT) and sibling is None) or not has_mode_layers(ctx.model, name, loop.function, ctx.project):
            continue
        if entry != loop.function and into is not None:  # its eval() belongs in `entry`, not in this helper
            if (entry, model_key(name)) not in entries:
                entries.add((entry, model_key(name)))
                setters = [Related(setter.span, "training mode set here")] if setter is not None else []
                yield _at_entry(ctx, entry, into, name, [Related(loop.header, "evaluation loop"), Related(forwards[0].span, "model forward"), *setters])
            continue
        _, start = region_start(ctx.model, loop, lambda above: _may_evaluate(ctx, above, training.iteration(above)))
        related = [Related(forwards[0].span, "model forward"), *_mode_related(ctx, loop.function, first, name, setter or sibling)]
        if start != loop.header:
            related.insert(0, Related(loop.header, "evaluation loop"))
        if into is not None:
            related.append(Related(into.span, "called here with the model in training mode"))
        entries.add((loop.function, model_key(name)))
        yield report(
            META,
            start,
            f"Evaluation loop runs `{name}` without `{name}.eval()`: {_reason(ctx, mode, sibling)}, so dropout and batch norm behave as in training",
            _fix(ctx, start.start.line, name, events),
            related=related,
            data={"model": name},
        )
    yield from _phase_loops(ctx)
    yield from _loopless(ctx, entries)
    yield from _restored(ctx, entries)
    yield from _frozen_backbones(ctx)
    yield from _after_training(ctx)


# torchvision's model families built with batch norm (or dropout): known to behave differently in training mode
_TORCHVISION_MODE_FAMILIES = re.compile(
    r"^torchvision\.models\.(resnet|resnext|wide_resnet|densenet|vgg\d+_bn|mobilenet|efficientnet|regnet|inception|googlenet|"
    r"shufflenet|mnasnet|alexnet|squeezenet|convnext|swin_|maxvit)"  # not vit_*: its dropout defaults to 0
)


def _frozen_backbones(ctx: Context) -> Iterator[Diagnostic]:
    """A frozen feature extractor run under no_grad in a training loop that steps only other modules
    (a linear probe: `with torch.no_grad(): feats = model(x)`, then `linear_classifier(feats)` trained),
    built fresh and never put in eval mode: its batch norm normalises with each batch's statistics and
    moves its running averages, its dropout drops. Only when the backbone's class is known to hold such
    layers (a class of the project with batch norm or dropout, a torchvision family built with them).
    Reported where it is built, where its `eval()` belongs."""
    training = ctx.training
    seen: set[tuple[str, str]] = set()
    for loop in training.training_loops:
        events = training.iteration(loop.loop)
        optimizers = {o for o in (training.optimizer_of(e) for e in events if not e.inner) if o}
        if not optimizers:
            continue
        owned: set[str] = set()
        for optimizer in optimizers:
            modules = training.owned_modules(optimizer, loop.loop.function)
            if modules is None:
                break
            owned |= {model_key(m) for m in modules}
        else:
            for forward in events:
                if forward.inner or not training.is_forward(forward) or not forward.no_grad:
                    continue
                name = training.forward_target(forward) or ""
                if not name or "." in name:
                    continue
                for built_name, built in _built_fresh(ctx, forward, name, owned):
                    if (built.function, model_key(built_name)) in seen:
                        continue
                    seen.add((built.function, model_key(built_name)))
                    yield report(
                        META,
                        built.stmt,
                        f"`{built_name}` is a frozen feature extractor but never put in eval mode: its forward under no_grad in the "
                        f"training loop runs in training mode, so batch norm and dropout behave as in training",
                        related=[Related(forward.span, "frozen forward in the training loop"), Related(loop.loop.header, "training loop")],
                        data={"model": built_name},
                    )


def _built_fresh(ctx: Context, forward: Event, name: str, owned: set[str]) -> list[tuple[str, Event]]:
    """Where the model `name` run by `forward` was last set up (built, or moved with `.cuda()` /
    `.to()`), with its name there, for each way it reaches the forward fresh (nothing on the way sets
    its mode), when no optimizer stepped in the loop owns it and its class is known to hold
    mode-dependent layers."""
    training = ctx.training
    expanded = training.expanded(forward.function)
    if forward not in expanded:
        return []
    found = []
    for path in _fresh_paths(training, forward.function, expanded.index(forward), name, 0):
        site = _setup_site(ctx, forward, [name, *(n for n, _ in path)], [c for _, c in path], owned)
        if site is not None:
            found.append(site)
    return found


def _setup_site(ctx: Context, forward: Event, names: list[str], chain: list[Event], owned: set[str]) -> tuple[str, Event] | None:
    if {model_key(n) for n in names} & owned:
        return None  # trained after all
    local, scope = names[-1], (chain[-1].function if chain else forward.function)
    built = [e for e in ctx.model.assignments(local, scope) if e.function == scope and e.value is not None and len(e.targets) == 1]
    if not built or not _known_mode_layers(ctx, built, local, scope):
        return None
    setup = [e for e in ctx.model.functions[scope].events if e.function == scope and e.kind is EventKind.CALL and e.receiver == local
             and tail(e.name or "") in ("cuda", "to")]
    limit = chain[-1].span.start if chain else forward.span.start
    last = max((e for e in [*built, *setup] if e.span.start < limit), key=lambda e: e.span.start, default=None)
    return (local, last) if last is not None else None


def _fresh_paths(training: TrainingModel, scope: str, index: int, name: str, depth: int) -> list[list[tuple[str, Event]]]:
    """Each way up from `scope` to a function that builds `name` fresh with no mode call on that model
    before `expanded(scope)[index]`, as the calls with the model's name in each caller (passed by a
    plain name). Unlike `mode_trace`, a mode call on another model (`linear_classifier.train()`) says
    nothing about this one, and each call site stands alone."""
    events = training.expanded(scope)
    if any(e.receiver and model_key(e.receiver) == model_key(name) for e in mode_events(events[:index])):
        return []
    if built_in(scope, list(events[:index]), name):
        return [[]]
    fn = training.model.functions.get(scope)
    if fn is None or depth > 3:
        return []
    paths: list[list[tuple[str, Event]]] = []
    for call in training.model.calls_to.get(scope, []):
        passed = argument_name(call, fn.params, name, bool(fn.owner))
        caller_events = training.expanded(call.function)
        if passed is not None and call in caller_events:
            paths += [[(passed, call), *above] for above in _fresh_paths(training, call.function, caller_events.index(call), passed, depth + 1)]
    return paths


def _known_mode_layers(ctx: Context, built: list[Event], name: str, scope: str) -> bool:
    """Every construction of `name` is known, and one holds batch norm or dropout: a torchvision family
    built with them, or a class of the file or the project (`has_mode_layers` answers yes for unknown
    classes; a frozen backbone is reported only when it is known)."""
    torchvision = [e for e in built if e.value is not None and _TORCHVISION_MODE_FAMILIES.match(e.value.callee or "")]
    if torchvision:
        return len(torchvision) == len(built)
    classes = [e.value.callee for e in built if e.value is not None and e.value.callee]
    if len(classes) != len(built):
        return False
    for callee in classes:
        resolved = (ctx.model, ctx.model.classes[callee]) if callee in ctx.model.classes else ctx.project.resolve_class(ctx.model.path, callee or "")
        if resolved is None or not resolved[1].is_module or not class_has_mode_layers(resolved[0], resolved[1].qualname):
            return False
    return True


def _restored(ctx: Context, entries: set[tuple[str, str]]) -> Iterator[Diagnostic]:
    """An evaluation that ends by switching back with `model.train()` and never switched to eval: in a
    function that does not train (`generate_and_print_sample()` handing the model to a generator under
    no_grad, then `model.train()`), or in a block of a training loop after the step (`if step % N == 0:
    with torch.no_grad(): x_0 = sampler(x_T); ...; net_model.train()`). The `train()` says the code
    before it meant the model to be in eval mode; what runs there is a no_grad forward whose result is
    kept, or the model handed to code this file cannot see under no_grad. The model must be in
    training mode where the region starts."""
    training = ctx.training
    for scope, fn in ctx.model.functions.items():
        cls = ctx.model.enclosing_class(scope) if scope else None
        if fn.is_lambda or (cls is not None and (cls.is_module or cls.owns_loop)):
            continue
        if not any(e.kind is EventKind.TRAIN_MODE and not e.args and e.function == scope for e in fn.events):
            continue
        expanded = training.expanded(scope)
        for position, switch in enumerate(expanded):
            if switch.kind is not EventKind.TRAIN_MODE or switch.via or not switch.receiver or switch.args:
                continue
            if not switch.guards and not switch.loops and trains(training, scope):
                continue  # a training function's own `train()`: the region before it is not an evaluation
            found = _evaluation_before(ctx, expanded, position, switch)
            if found is None:
                continue
            start, use = found
            name = switch.receiver
            key = (scope if not switch.guards else f"{scope}@{start.stmt.start.line}", model_key(name))
            if (scope, model_key(name)) in entries or key in entries:
                continue
            mode, setter = mode_before(training, scope, expanded.index(start), name)
            if mode not in (TRAIN, DEFAULT) or not has_mode_layers(ctx.model, name, scope, ctx.project):
                continue
            entries.add(key)
            related = [Related(switch.span, f"`{name}.train()` switches back to training here"), Related(use.span, "the model runs here")]
            if setter is not None:
                related.append(Related(setter.span, "training mode set here"))
            yield report(
                META,
                start.stmt,
                f"Evaluation runs without `{name}.eval()`: `{name}.train()` switches back after it, but {_reason(ctx, mode, None)}, so dropout and batch norm behave as in training",
                _fix_before(ctx, start.stmt.start.line, name, scope) if start.function == scope else None,
                related=related,
                data={"model": name},
            )


def _evaluation_before(ctx: Context, expanded: tuple[Event, ...], position: int, switch: Event) -> tuple[Event, Event] | None:
    """Walking back from `switch` (a `train()` call) through its block: the first event of the block and
    the model use in it (a kept no_grad forward, or the model handed to an unseen call under no_grad).
    None when the walk meets a mode call, a backward pass or a step before any such use, or finds none."""
    training = ctx.training
    guards, loops = switch.guards, switch.loops
    start: Event | None = None
    use: Event | None = None
    for event in reversed(expanded[:position]):
        if event.guards[: len(guards)] != guards or event.loops[: len(loops)] != loops:
            break  # out of the block
        if event.kind in (EventKind.TRAIN_MODE, EventKind.EVAL_MODE):
            return None  # it sets a mode itself (`model.eval()` at the start: nothing missing)
        if event.kind in (EventKind.BACKWARD, EventKind.STEP, EventKind.ZERO_GRAD) or training.optimizer_of(event):
            break  # the training step before it
        if not event.via:
            start = event
        if event.stmt == event.span or not event.no_grad:
            continue  # a result dropped (a statistics refresh), or gradients on
        if training.is_forward(event):
            use = event
        elif training.is_opaque(event) and any(a.base == switch.receiver and a.text == a.base for a in (*event.args, *(v for _, v in event.keywords))):
            use = event
    if use is None or start is None:
        return None
    return start, use


def _at_entry(ctx: Context, entry: str, into: Event, name: str, related: list[Related]) -> Diagnostic:
    """The finding of an evaluation that a training function starts by calling `entry` (which reaches the
    forward through its callees): at `entry`'s first statement, where its `eval()` belongs."""
    fn = ctx.model.functions[entry]
    start = first_statement(fn)
    local = _name_in(ctx, entry, name)
    fix = _fix_before(ctx, start.start.line, local, entry) if local else None
    shown = local or name
    return report(
        META,
        start,
        f"`{fn.name}()` evaluates `{shown}` without `{shown}.eval()`: the model is still in training mode, so dropout and batch norm behave as in training",
        fix,
        related=[*related, Related(into.span, "called here with the model in training mode")],
        data={"model": shown},
    )


def _name_in(ctx: Context, entry: str, name: str) -> str | None:
    """The model's name in `entry`: `name` when `entry` reads a parameter or attribute so called
    (the callees were handed it under the same name), else None."""
    fn = ctx.model.functions.get(entry)
    head = name.partition(".")[0]
    if fn is None or not (head in fn.params or head == "self"):
        return None
    return name if any(head in (e.receiver or "", *(a.base or "" for a in e.args), *(v.base or "" for _, v in e.keywords))
                       for e in fn.events) else None


def _entered_from_training(ctx: Context, into: Event | None, forwards: list[Event]) -> bool:
    """The evaluation is entered by a call from training code, after it trained (or in a loop whose
    pass trains), it keeps what a forward computes, and the call's result feeds no backward pass: the
    model comes in training mode from the training step, and what runs is no part of that step. A
    forward whose result is dropped (`net(x)` alone) runs for its side effects: batch-norm statistics
    recomputed in training mode on purpose."""
    if into is None or all(f.stmt == f.span for f in forwards) or not after_training(ctx.training, into):
        return False
    return not _result_trained_on(ctx, into)


def _result_trained_on(ctx: Context, call: Event) -> bool:
    """What the call returned is read after it in its function, and a backward pass follows: it may
    be the loss's target (a teacher's or a momentum encoder's outputs computed under no_grad)."""
    events = ctx.training.expanded(call.function)
    targets = {t.partition(".")[0].partition("[")[0] for e in events if e.stmt == call.stmt and e.kind is EventKind.ASSIGN for t in e.targets}
    if not targets or call not in events:
        return False
    position = events.index(call)
    # after it: the rest of the function, and the part of the pass of its innermost loop before it (the next pass)
    after = [*events[position + 1 :], *(e for e in events[:position] if call.loops and call.loops[-1] in e.loops)]
    # (the names read in the caller's own scope: a callee's `x_fake` is another variable)
    return any(e.kind is not EventKind.BACKWARD and e.function == call.function and targets & set(e.value.names if e.value else ())
               for e in after) and any(
        e.kind is EventKind.BACKWARD for e in after
    )


def _phase_loops(ctx: Context) -> Iterator[Diagnostic]:
    """A loop over phases whose `model.train()` runs on one path only (`if phase == "train":`),
    with no `eval()` anywhere, backward and step only on that path, and the model run on every
    path: the other phase evaluates in training mode."""
    training = ctx.training
    for loop in ctx.model.loops.values():
        if not training.may_hold(loop.function, EventKind.TRAIN_MODE):
            continue
        events = training.iteration(loop)
        modes = mode_events(events)
        trains = [e for e in modes if e.kind is EventKind.TRAIN_MODE and not e.inner and e.receiver]
        if len(trains) != 1 or len(modes) != 1:
            continue
        switch = trains[0]
        guards = [g for g in switch.guards[len(loop.guards) :] if not g.cadence and not g.negated]
        if len(guards) != 1 or len(switch.guards) != len(loop.guards) + 1:
            continue
        guard = guards[0]
        learning = [e for e in events if e.kind is EventKind.BACKWARD or training.optimizer_of(e)]
        if not learning or not all(any(g.text == guard.text and not g.negated for g in e.guards) for e in learning):
            continue  # training must happen only on the guarded path
        name = switch.receiver or ""
        forwards = [e for e in events if training.is_forward(e) and model_key(training.forward_target(e)) == model_key(name)]
        if not any(not any(g.text == guard.text for g in f.guards) for f in forwards):
            continue  # the model runs on the guarded path only
        if not has_mode_layers(ctx.model, name, loop.function, ctx.project):
            continue
        yield report(
            META,
            switch.span,
            f"`{name}.train()` runs only when `{guard.text}` and nothing calls `{name}.eval()`: on the other path "
            f"`{name}` runs in training mode, so dropout and batch norm behave as in training",
            related=[Related(forwards[0].span, "model forward"), Related(loop.header, "phase loop")],
            data={"model": name},
        )


def _mode_related(ctx: Context, scope: str, index: int, name: str, setter: Event | None) -> list[Related]:
    """Where the training mode comes from: the call that set it (`model.train()` in a training
    function run before this one), and, when `scope` sets no mode of its own before the point,
    its first statement: the function starts with the model in training mode, and that is where
    its `eval()` belongs."""
    related = [Related(setter.span, "training mode set here")] if setter is not None else []
    fn = ctx.model.functions.get(scope)
    if fn is None or not scope or mode_events(ctx.training.expanded(scope)[:index]) or any(
        e.function == scope for e in ctx.model.assignments(name, scope)
    ):
        return related  # it sets a mode itself, or builds the model: its start says nothing
    return [*related, Related(first_statement(fn), f"`{fn.name}()` starts with `{name}` in training mode")]


def _reason(ctx: Context, mode: str, sibling: Event | None) -> str:
    if sibling is not None:
        fn = ctx.model.functions.get(sibling.function)
        who = f"`{fn.qualname}()`" if fn is not None else "a training function"
        return f"nothing in this file sets its mode, and {who} here leaves the model it is given in training mode"
    return "the model is still in training mode" if mode == TRAIN else "a new model starts in training mode"


def _sibling_training(ctx: Context, scope: str, index: int, name: str) -> Event | None:
    """For an evaluation reached only from other modules (the model a parameter, or an attribute
    of the trainer object): a function of this file, or a method of the same trainer class, that
    puts that model in training mode (`train_epoch(model, ...)` calling `model.train()`). Callers
    use the two in turn, so evaluation starts where that training left the model. None when no
    such function exists."""
    if not unset_from_entry(ctx.training, scope, index, name):
        return None
    return sibling_mode_call(ctx.training, scope, name, EventKind.TRAIN_MODE)


def _loopless(ctx: Context, entries: set[tuple[str, str]]) -> Iterator[Diagnostic]:
    """An evaluation function with no loop: one full-batch forward under `no_grad`
    (graph networks, small tabular sets), `def test(model, ...): with torch.no_grad(): out = model(x)`;
    named like one, or called from training code after it trained (`visualize_results()` sampling
    the generator at the end of each epoch). `entries`: evaluation functions already reported."""
    training = ctx.training
    uses_in = training.function_memo("TPF008 model uses")
    for qualname, fn in ctx.model.functions.items():
        named = bool(_EVAL_FUNCTION.search(fn.name))
        if fn.is_lambda or (not named and not _may_be_entered_under_no_grad(ctx, qualname)):
            continue
        cls = ctx.model.enclosing_class(qualname)
        if cls is not None and (cls.is_module or cls.owns_loop):
            continue
        uses = uses_in.get(qualname)
        if uses is None:
            uses = uses_in[qualname] = _model_uses(ctx, fn.events)
        forwards = [e for e, _ in uses]
        if not forwards or any(e.loops for e in forwards):
            continue  # none, or the loop path above owns it
        name = uses[0][1]
        if not name or name == "self" or any(n != name for _, n in uses):
            continue
        no_grad = fn.disables_grad or all(f.no_grad for f in forwards) or ctx.model.covered_by_no_grad(qualname)
        expanded = training.expanded(qualname)
        first = expanded.index(forwards[0])
        last = max(expanded.index(f) for f in forwards)
        # a `train()` after the last forward switches back for the training that follows (it restores the mode)
        if any(e.kind in _NOT_EVAL for e in expanded) or any(e.kind is EventKind.TRAIN_MODE for e in expanded[:last]):
            continue
        if training.opaque_training_call(expanded):
            continue
        if named and not no_grad and not _after_training_only(ctx, qualname):
            continue  # with autograd on, an evaluation only when every caller trained before and back-propagates nothing after
        mode, setter, chain = mode_trace(training, qualname, first, name)
        entry, into = evaluation_entry(training, qualname, chain) if mode == TRAIN else (qualname, None)
        if not named and not (no_grad and _entered_from_training(ctx, into, forwards)):
            continue
        sibling = _sibling_training(ctx, qualname, first, name) if mode == UNKNOWN and no_grad else None
        if (mode not in (TRAIN, DEFAULT) and sibling is None) or not has_mode_layers(ctx.model, name, qualname, ctx.project):
            continue
        anchor = forwards[0].contexts[0].span if forwards[0].contexts else forwards[0].stmt
        if (entry, model_key(name)) in entries:
            continue
        entries.add((entry, model_key(name)))
        if into is not None and (entry != qualname or handed_over(training, into, qualname)):
            # its eval() belongs in `entry`, not in this helper; in a step function an engine runs, at its start
            setters = [Related(setter.span, "training mode set here")] if setter is not None else []
            yield _at_entry(ctx, entry, into, name, [Related(forwards[0].span, "model forward"), *setters])
            continue
        related = [Related(forwards[0].span, "model forward"), *_mode_related(ctx, qualname, first, name, setter or sibling)]
        if into is not None:
            related.append(Related(into.span, "called here with the model in training mode"))
        yield report(
            META,
            forwards[0].stmt,
            f"Evaluation runs `{name}` without `{name}.eval()`: {_reason(ctx, mode, sibling)}, so dropout and batch norm behave as in training",
            _fix_before(ctx, anchor.start.line, name, qualname),
            related=related,
            data={"model": name},
        )


def _may_be_entered_under_no_grad(ctx: Context, scope: str) -> bool:
    """A cheap first test for an unnamed evaluation: the file calls the function, and it runs something
    under no_grad (its decorator, a block of its own, or a call of it)."""
    fn = ctx.model.functions[scope]
    callers = ctx.model.calls_to.get(scope, [])
    return bool(callers) and (fn.disables_grad or any(e.no_grad for e in fn.events) or any(c.no_grad for c in callers))


def _after_training_only(ctx: Context, scope: str, depth: int = 0) -> bool:
    """Every path to `scope` runs after a backward pass (the model was trained above, in the same
    function or in one it called) and nothing after the call back-propagates: the call evaluates a
    trained model (`train(model, ...)` then `print(test(model, x_test))`), whatever grad mode it
    runs in."""
    training = ctx.training
    callers = ctx.model.calls_to.get(scope, [])
    if not callers or depth > 3:
        return False
    for call in callers:
        events = training.expanded(call.function)
        try:
            position = events.index(call)
        except ValueError:
            return False
        if any(e.kind is EventKind.BACKWARD for e in events[position:]):
            return False
        if not any(e.kind is EventKind.BACKWARD for e in events[:position]) and not _after_training_only(ctx, call.function, depth + 1):
            return False
    return True


def _after_training(ctx: Context) -> Iterator[Diagnostic]:
    """A script or function that trains (in its own loop or in a function it calls), then runs the
    model once outside any loop, under `no_grad` or with nothing back-propagated after it: `for epoch
    ...: ... loss.backward() ...` then `acc = (model(x_test).argmax(1) == y_test).float().mean()`."""
    training = ctx.training
    if not training.training_loops:
        return
    for scope, fn in ctx.model.functions.items():
        cls = ctx.model.enclosing_class(scope) if scope else None
        if fn.is_lambda or (cls is not None and (cls.is_module or cls.owns_loop)):
            continue
        found = _first_evaluation_after_training(ctx, scope, [e for e in fn.events if not e.loops and e.function == scope])
        if found is not None:
            yield found


def _first_evaluation_after_training(ctx: Context, scope: str, events: list[Event]) -> Diagnostic | None:
    training = ctx.training
    if not training.may_train(scope):
        return None
    expanded = training.expanded(scope)
    trained = [i for i, e in enumerate(expanded) if training.optimizer_of(e)]
    backwards = [i for i, e in enumerate(expanded) if e.kind is EventKind.BACKWARD]
    if not trained or not backwards:
        return None
    for event, name in _model_uses(ctx, events):
        if not name or name == "self" or event not in expanded:
            continue
        index = expanded.index(event)
        if index < min(trained) or index < min(backwards):
            continue  # not after the training
        if not event.no_grad and index < max(backwards):
            continue  # with autograd on, it may be a training forward: only when nothing back-propagates after it
        mode, setter = mode_before(training, scope, index, name)
        if mode not in (TRAIN, DEFAULT) or not has_mode_layers(ctx.model, name, scope, ctx.project):
            continue
        anchor = event.contexts[0].span if event.contexts else event.stmt
        return report(
            META,
            event.stmt,
            f"Evaluation runs `{name}` without `{name}.eval()`: {_reason(ctx, TRAIN, None)} after training, so dropout and batch norm behave as in training",
            _fix_before(ctx, anchor.start.line, name, scope),
            related=[Related(event.span, "model forward"), *_mode_related(ctx, scope, index, name, setter)],
            data={"model": name},
        )
    return None  # one finding per function: the first evaluation after training


def _fix_before(ctx: Context, line: int, name: str, scope: str) -> Fix | None:
    if any(e.kind is EventKind.ASSIGN and name in e.targets for e in ctx.model.functions[scope].events):
        return None
    text = ctx.source.line(line)
    indent = text[: len(text) - len(text.lstrip())]
    edit = insert_statement(ctx.source, line, indent, f"{name}.eval()")
    return Fix(f"Insert `{name}.eval()` before the forward", (edit,), Applicability.UNSAFE)


def _may_evaluate(ctx: Context, loop: Loop, events: tuple[Event, ...]) -> bool:
    """No training and no mode change in the loop's pass, and no framework or model class around it."""
    training = ctx.training
    if any(e.kind in _NOT_EVAL or e.kind is EventKind.TRAIN_MODE for e in events):
        return False
    if training.opaque_training_call(events):
        return False
    cls = ctx.model.enclosing_class(loop.function)
    return not (cls is not None and (cls.is_module or cls.owns_loop))


def _is_evaluation(ctx: Context, loop: Loop, events: tuple[Event, ...], forwards: list[Event]) -> bool:
    """Named like one (`evaluate`, `validate`, ...), or a no_grad loop over validation or test data."""
    training = ctx.training
    fn = ctx.model.functions.get(loop.function)
    named = bool(fn and _EVAL_FUNCTION.search(fn.name))
    runs = [e for e in events if training.is_forward(e)] if training.is_forward(forwards[0]) else forwards
    no_grad = not training.grad_enabled_at(loop) or all(e.no_grad for e in runs)
    return named or (no_grad and _over_eval_data(ctx, loop))


def _drawn_from_a_loop(ctx: Context, loop: Loop, name: str) -> bool:
    """The model is a target of this loop or of one around it (`for model in models:`): one network
    per pass, each of its own class and mode, which no mode call by name can follow."""
    head = name.partition(".")[0]
    current: Loop | None = loop
    while current is not None:
        if head in current.targets:
            return True
        current = ctx.model.loops.get(current.parent) if current.parent is not None else None
    return False


def _over_eval_data(ctx: Context, loop: Loop) -> bool:
    """The loop iterates over validation or test data: named so, or a parameter of its function
    that a call of this file fills with such data (`compute_accuracy(model, test_loader)`)."""
    if loop.iter is None:
        return False
    if _EVAL_DATA.search(loop.iter.text):
        return True
    fn = ctx.model.functions.get(loop.function)
    params = [n for n in loop.iter.names if fn is not None and n in fn.params and n != "self"]  # also `enumerate(loader)`
    if fn is None or len(params) != 1:
        return False
    head = params[0]
    position = fn.params.index(head) - (1 if fn.owner else 0)
    for call in ctx.model.calls_to.get(loop.function, []):
        arg = call.keyword(head) or (call.args[position] if 0 <= position < len(call.args) else None)
        if arg is not None and _EVAL_DATA.search(arg.text):
            return True
    return False


def _fix(ctx: Context, line: int, name: str, events: tuple[Event, ...]) -> Fix | None:
    """`name.eval()` inserted at `line`, where the evaluation region starts."""
    if any(e.kind is EventKind.ASSIGN and name in e.targets for e in events):
        return None
    text = ctx.source.line(line)
    edit = insert_statement(ctx.source, line, text[: len(text) - len(text.lstrip())], f"{name}.eval()")
    return Fix(f"Insert `{name}.eval()` before the loop", (edit,), Applicability.UNSAFE)
