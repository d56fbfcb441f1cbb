"""## What it does
Flags a `DataLoader` built on a shuffling `DistributedSampler` that is iterated by an
epoch loop, when nothing in the file calls `set_epoch()`.

## Why is this bad?
`DistributedSampler` seeds its shuffle with `seed + epoch`. Without
`sampler.set_epoch(epoch)` the epoch stays 0, so every epoch visits the data in the same
order on every rank. Training still converges, but worse than with real shuffling, and
nothing warns.

Samplers created with `shuffle=False` (validation), loaders that are iterated once, loaders
built anew on every pass and loaders re-bound by `accelerator.prepare` (which sets the epoch
itself) are not flagged. A `set_epoch` counts for the loader the epoch loop iterates when it
reaches that loader's sampler: called on the sampler, on the loader
(`train_loader.sampler.set_epoch(epoch)`, `loader.batch_sampler.sampler`), inside a helper of
the file or of another project module (often `train_one_epoch`), or on something the file does
not tie to another loader. A call on another loader's sampler (`val_loader.sampler.set_epoch(epoch)`)
does not count for the training loader. Ray Train's `prepare_data_loader` counts as a shuffling
DistributedSampler only for a loader built with `shuffle=True` (it gives the others a
non-shuffling one).

A loader built in another module of the project counts by what that module's function returns:
`dataset_train, dataset_val, data_loader_train, data_loader_val, mixup_fn = build_loader(config)`
where `build_loader` builds `DataLoader(dataset_train, sampler=DistributedSampler(..., shuffle=True))`
and returns it at that position.

The finding is placed where the call belongs: the epoch loop's first use of the loader (the loop
over it, or the call that hands it to a per-epoch function, whose loop over it is related), with
the loader's construction and the epoch loop as related locations; or the signature of a
per-epoch function that receives the sampler as a parameter.

## Example
```python
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, sampler=sampler, batch_size=32)
for epoch in range(epochs):
    for x, y in loader:
        ...
```

## Use instead
```python
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    for x, y in loader:
        ...
```

## Fix safety
There is no automatic fix: the epoch variable and the sampler's reach vary.

## References
- [torch.utils.data.distributed.DistributedSampler](https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler)
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from torch_preflight.core.dataflow import DataFlow, span_of
from torch_preflight.core.diagnostics import Diagnostic, Related, Severity
from torch_preflight.core.names import tail
from torch_preflight.core.program import returned_elements
from torch_preflight.core.semantic import Event, EventKind, Function, Loop, ModuleModel, Value
from torch_preflight.core.source import Span
from torch_preflight.core.training import library_name
from torch_preflight.rules.base import Context, RuleMeta, report

META = RuleMeta(
    code="TPF014",
    name="distributed-sampler-without-set-epoch",
    message="DistributedSampler never gets set_epoch(), so every epoch has the same order",
    fix_title=None,
    severity=Severity.WARNING,
    # Every finding needs a DistributedSampler call, a `sampler=` loader, a `sampler` /
    # `*_sampler` parameter or Ray's `prepare_data_loader`, all spelled in this file, or a loader
    # that a function of another module of the project returns (an import).
    requires=("sampler|prepare_data_loader|import",),
)


def check(ctx: Context) -> Iterator[Diagnostic]:
    lowered = ctx.source.text.lower()
    spelled = "sampler" in lowered or "prepare_data_loader" in lowered  # else only a loader of another module can be one
    loaders, sampler_of = _distributed_loaders(ctx.model) if spelled else ({}, {})
    built = {name: Related(event.span, "DistributedSampler") for name, event in loaders.items()}
    returned, returned_others = _returned_loaders(ctx)
    for name, call in returned.items():
        built.setdefault(name, Related(call.value.span if call.value else call.span, "returns a loader over a shuffling DistributedSampler"))
    if not spelled and not built:
        return
    receivers = _set_epoch_receivers(ctx)
    settled = _prepared(ctx.model)  # loaders whose epoch a framework sets, or built anew on every pass
    if not built:
        if not receivers:
            yield from _untracked_loader(ctx, settled)
        return
    known = _built(ctx) | {_scoped(ctx, name, e.function) for name, e in returned.items()}
    known |= {_scoped(ctx, name, function) for function, name in returned_others}
    for loop in ctx.model.loops.values():
        use = _iterated_per_pass(ctx, loop, set(built))
        if use is None:
            continue
        loader, first_use = use
        own = {_scoped(ctx, loader, loop.function), _scoped(ctx, sampler_of.get(loader, loader), loop.function)}
        if _rebuilt_per_pass(ctx, loop, loader):
            settled.add(loader)
            continue
        if any(_reaches(ctx, receiver, own, known) for receiver in receivers):
            continue  # this loop's loader gets its epoch; another loop may iterate one that does not
        # `set_epoch(epoch)` goes before the epoch loop's first use of the loader: the inner loop over
        # it, or the call that hands it to the per-epoch function (whose loop over it is related).
        inner = _callee_loop(ctx, loop, loader)
        nearby = sorted({r for f, r in receivers if f == loop.function and r})
        yield report(
            META,
            first_use,
            f"`{loader}` uses a DistributedSampler but `set_epoch()` is never called"
            + (f" on it (only on {', '.join(f'`{r}`' for r in nearby)})" if nearby else "")
            + ": every epoch sees the same order",
            related=[
                built[loader],
                *([Related(loop.header, "epoch loop")] if first_use != loop.header else []),
                *([Related(inner.header, "loop over the loader")] if inner is not None else []),
            ],
            data={"loader": loader},
        )
        return
    if not receivers:
        yield from _untracked_loader(ctx, settled)


def _distributed_loaders(model: ModuleModel) -> tuple[dict[str, Event], dict[str, str]]:
    """The loader variables of a module built over a shuffling DistributedSampler (each with its
    sampler's construction), and the sampler variable of each; none re-bound by a framework that
    sets the epoch itself (`accelerator.prepare(loader)`)."""
    samplers: dict[str, Event] = {}  # sampler variable -> construction
    loaders: dict[str, Event] = {}  # loader variable -> its sampler's construction
    sampler_of: dict[str, str] = {}  # loader variable -> its sampler variable
    prepared = _prepared(model)
    for fn in model.functions.values():
        calls = [e for e in fn.events if e.kind is EventKind.CALL]
        for event in fn.events:
            if event.kind is not EventKind.ASSIGN or len(event.targets) != 1 or event.value is None:
                continue
            # `DistributedSampler(ds)`, or `DistributedSampler(ds) if args.distributed else None`
            if any(_is_distributed_sampler(c) for c in _built_by(event.value)) and not _no_shuffle(event):
                samplers[event.targets[0]] = event
        for event in fn.events:
            if event.kind is not EventKind.ASSIGN or event.value is None:
                continue
            if len(event.targets) != 1 or tail(event.value.callee) != "DataLoader":
                continue
            call = next((c for c in calls if c.span == event.value.span), None)
            sampler = call.keyword("sampler") if call else None
            if sampler is None:
                continue
            if sampler.base in samplers:
                loaders[event.targets[0]] = samplers[sampler.base]
                sampler_of[event.targets[0]] = sampler.base
            elif sampler.callee and _is_distributed_sampler(sampler.callee) and not re.search(r"shuffle\s*=\s*False", sampler.text):
                loaders[event.targets[0]] = event
    return {k: v for k, v in loaders.items() if k not in prepared}, sampler_of


def _prepared(model: ModuleModel) -> set[str]:
    """Variables re-bound by a framework's `prepare` (`model, opt, loader = accelerator.prepare(...)`),
    which gives the loader its epoch itself."""
    return {
        target for fn in model.functions.values() for e in fn.events
        if e.kind is EventKind.ASSIGN and e.value is not None and (tail(e.value.callee) == "prepare" or e.value.method == "prepare")
        for target in e.targets
    }


def _returned_loaders(ctx: Context) -> tuple[dict[str, Event], set[tuple[str, str]]]:
    """Variables a loop uses (iterates, or hands to a call inside a loop) bound from what a function
    of the project returns, where the function's result (or that position of its tuple) is a loader
    over a shuffling DistributedSampler: `train_set, val_set, train_loader, val_loader = build_loader(cfg)`
    with `build_loader` in `data/build.py`. Each with the assignment that binds it; and, as
    (function, variable), those bound to the function's other loaders and samplers."""
    used = {n for loop in ctx.model.loops.values() if loop.iter is not None for n in (*loop.iter.names, loop.iter.base or "") if n}
    used |= {
        a.base for fn in ctx.model.functions.values() for e in fn.events
        if e.kind is EventKind.CALL and e.loops for a in (*e.args, *(v for _, v in e.keywords)) if a.base
    }
    found: dict[str, Event] = {}
    others: set[tuple[str, str]] = set()
    read: dict[str, tuple[dict[str, Event], set[str]]] = {}  # per module: its distributed loaders, its other loaders
    resolved_by: dict[tuple[str, str], tuple[ModuleModel, str] | None] = {}
    for fn in ctx.model.functions.values():
        for event in fn.events:
            value = event.value
            if event.kind is not EventKind.ASSIGN or value is None or not value.callee or value.method or not used & set(event.targets):
                continue
            if library_name(value.callee) and not ctx.model.resolve_function(value.callee, event.function):
                continue  # `timm.data.create_loader(...)`: a library's loader is no project function's return
            scope = event.function if ctx.model.resolve_function(value.callee, event.function) else ""
            if (value.callee, scope) not in resolved_by:  # a callee assigned from many times is looked up once
                resolved_by[(value.callee, scope)] = ctx.project.resolve_call(ctx.model, value.callee, event.function)
            resolved = resolved_by[(value.callee, scope)]
            shape = returned_elements(*resolved) if resolved is not None else None
            if resolved is None or shape is None or len(shape) != len(event.targets):
                continue
            if resolved[0].path not in read:
                read[resolved[0].path] = (_distributed_loaders(resolved[0])[0], _loader_names(resolved[0]))
            theirs, other = read[resolved[0].path]
            for target, name in zip(event.targets, shape, strict=True):
                if name in theirs:
                    found[target] = event
                elif name in other:
                    others.add((event.function, target))
    return found, others


def _rebuilt_per_pass(ctx: Context, loop: Loop, loader: str) -> bool:
    """The loop binds the loader anew on every pass (a fresh loader, and sampler, per epoch)."""
    return any(loop.id in e.loops for e in ctx.model.assignments(loader, loop.function))


def _set_epoch_receivers(ctx: Context) -> list[tuple[str, str]]:
    """(function, receiver) of each `set_epoch(...)` of the file (`sampler`, `train_loader.sampler`,
    `loader.batch_sampler.sampler`), including those inside functions of the user's other modules
    that a loop calls (their receivers renamed to the call's arguments); "" when unreadable."""
    found = [(e.function, e.receiver or "") for fn in ctx.model.functions.values() for e in fn.events if tail(e.name or "") == "set_epoch"]
    found += [
        (e.function, e.receiver or "")
        for loop in ctx.model.loops.values()
        for e in ctx.training.iteration(loop)
        if tail(e.name or "") == "set_epoch" and e.via
    ]
    return found


Scoped = tuple[str, str]  # (function, name): a local of that function, or ("", name) for attributes and globals


def _scoped(ctx: Context, name: str, function: str) -> Scoped:
    local = not name.startswith("self.") and any(e.function == function for e in ctx.model.assignments(name, function))
    return (function, name) if local and function else ("", name)


def _built(ctx: Context) -> set[Scoped]:
    """Every variable the file binds to a DataLoader or a sampler (another loader's, a validation one)."""
    return {_scoped(ctx, target, e.function) for e in _loader_assignments(ctx.model) for target in e.targets}


def _loader_assignments(model: ModuleModel) -> list[Event]:
    """Assignments of a DataLoader or a sampler (also `DistributedSampler(ds) if distributed else None`)."""
    return [
        e for fn in model.functions.values() for e in fn.events
        if e.kind is EventKind.ASSIGN and e.value is not None
        and any(tail(c) == "DataLoader" or "Sampler" in tail(c) for c in _built_by(e.value))
    ]


def _built_by(value: Value) -> list[str]:
    """What a value constructs: its callee, or for a conditional expression the calls in it."""
    return [value.callee] if value.callee else [c for c in value.calls if not value.methods]


def _loader_names(model: ModuleModel) -> set[str]:
    return {target for e in _loader_assignments(model) for target in e.targets}


_SAMPLER_PATH = re.compile(r"^(?P<head>.+?)(?:\.batch_sampler)?(?:\.sampler)?$")


def _reaches(ctx: Context, receiver: Scoped, own: set[Scoped], known: set[Scoped]) -> bool:
    """A `set_epoch` on `receiver` reaches the sampler of the loader whose variables are `own`: it is
    called on that sampler, on the loader, or on its `.sampler` / `.batch_sampler.sampler`; or on
    something the file does not tie to another known loader or sampler (a helper's parameter)."""
    function, name = receiver
    match = _SAMPLER_PATH.match(name)
    head = match.group("head") if match else name
    if not head:
        return True
    scoped = _scoped(ctx, head, function)
    return scoped in own or scoped not in known


def _is_distributed_sampler(callee: str) -> bool:
    return tail(callee) == "DistributedSampler"


def _no_shuffle(event: Event) -> bool:
    return bool(event.value and re.search(r"shuffle\s*=\s*False", event.value.text))


def _iterated_per_pass(ctx: Context, loop: Loop, loaders: set[str]) -> tuple[str, Span] | None:
    """A loader iterated by a loop nested in `loop` (directly, or in a function of the project a call
    of the pass hands it to), with the pass's first use of it: the nested loop's header, or the call."""
    events = ctx.training.iteration(loop)
    uses: list[tuple[str, Span]] = []
    for event in events:
        if event.kind is not EventKind.ASSIGN or event.value is None or event.via:
            continue  # a called function's names are its own (its loop over a parameter): the call's arguments say which loader
        # The `for` target assignment of a nested loop: its iterable reads the loader.
        nested = next((other for other in ctx.model.loops.values() if other.id != loop.id and other.header.contains(event.span)), None)
        if nested is None:
            continue
        name = next((n for n in sorted(loaders) if n in event.value.names or event.value.base == n), None)
        if name is not None:
            uses.append((name, nested.header))
            break
    for event in events:
        if event.kind is not EventKind.CALL or event.inner or event.via or not event.name:
            continue
        name = next((a.base for a in (*event.args, *(v for _, v in event.keywords)) if a.base in loaders), None)
        if name is not None and (ctx.model.call_targets(event) or ctx.project.resolve_call(ctx.model, event.name, event.function)):
            uses.append((name, event.stmt))
            break
    return min(uses, key=lambda use: use[1].start, default=None)


def _callee_loop(ctx: Context, loop: Loop, loader: str) -> Loop | None:
    """The loop, in a function of the file that `loop` calls with `loader` and the epoch, that iterates it
    (without the epoch, the function cannot set it: the epoch loop is the place)."""
    for event in ctx.training.iteration(loop):
        if event.kind is not EventKind.CALL or event.inner or event.via:
            continue
        if not any(name in loop.targets for arg in (*event.args, *(v for _, v in event.keywords)) for name in arg.names):
            continue
        for target in ctx.model.call_targets(event):
            fn = ctx.model.functions[target]
            params = fn.params[1:] if fn.owner else fn.params
            passed = {p: event.keyword(p) or (event.args[i] if i < len(event.args) else None) for i, p in enumerate(params)}
            bound = [p for p, value in passed.items() if value is not None and value.base == loader]
            for inner in ctx.model.loops_in(target):
                if inner.iter is not None and any(p in inner.iter.names for p in bound):
                    return inner
    return None


_LOADER_SPELLING = re.compile(r"loader|_dl$|^dl$|train_data$|train_dataset$|data_iter$", re.I)


def _untracked_loader(ctx: Context, settled: set[str]) -> Iterator[Diagnostic]:
    """The loader reaches the training loop through parameters, returns or attributes
    (`self.train_data`, `train(..., train_loader, sampler)`), so no variable links it to its
    DistributedSampler. When the file shows a shuffling distributed sampler, flag the training
    loop that iterates a loader once per epoch."""
    evidence = _distributed_sampler_evidence(ctx)
    if evidence is None:
        return
    training = ctx.training
    # Prefer the loops of the function that builds the sampler or prepares the loader.
    for tloop in sorted(training.training_loops, key=lambda t: t.loop.function != evidence.function):
        loop = tloop.loop
        if loop.kind != "for" or loop.iter is None:
            continue
        names = [n for n in (*loop.iter.names, loop.iter.base or "") if n]
        loader = next((n for n in names if _LOADER_SPELLING.search(tail(n)) or _LOADER_SPELLING.search(n)), None)
        if settled & set(names):
            continue
        if loader is None or not _once_per_epoch(ctx, loop):
            continue
        message = f"`{loop.iter.text}` is sharded by a DistributedSampler but `set_epoch()` is never called: every epoch sees the same order"
        outer = _outermost(ctx, loop)
        if outer is not loop:
            # Where `set_epoch(epoch)` belongs: the top of the epoch loop (as for a tracked loader).
            anchor, related = outer.header, [Related(loop.header, "loop over the loader"), Related(evidence.span, "DistributedSampler")]
        elif evidence.parameter and evidence.function == loop.function:
            # The per-epoch function receives the sampler: it is the one to call `sampler.set_epoch(epoch)`.
            message = f"`{evidence.name}` is a DistributedSampler parameter but `{evidence.name}.set_epoch()` is never called: every epoch sees the same order"
            uses = [Related(span, f"`{evidence.name}` is used here, without `set_epoch()`") for span in _reads(ctx, evidence.name, evidence.function)]
            anchor, related = evidence.span, [*uses[:2], Related(loop.header, "loop over the loader")]
        else:
            anchor, related = loop.header, [Related(evidence.span, "DistributedSampler")]
            call = next((c for c in ctx.model.calls_to.get(loop.function, []) if c.loops and c.loops[-1] in ctx.model.loops), None)
            if call is not None:  # the per-epoch function's call in the epoch loop: where the epoch is at hand
                epoch_loop = ctx.model.loops[call.loops[-1]]
                anchor, related = call.stmt, [Related(loop.header, "loop over the loader"), *related, Related(epoch_loop.header, "epoch loop")]
        yield report(META, anchor, message, related=related, data={"loader": loop.iter.text})
        return


@dataclass(frozen=True)
class _Evidence:
    span: Span
    function: str
    parameter: bool = False  # a `sampler` parameter of the function that runs the training loop
    name: str = ""


def _distributed_sampler_evidence(ctx: Context) -> _Evidence | None:
    """A shuffling DistributedSampler built in the file, a loader built with `shuffle=True` and
    handed to Ray Train's `prepare_data_loader` (which swaps in a DistributedSampler; a loader
    built without it gets a non-shuffling one), or a `sampler` parameter of a function that runs
    a training loop."""
    model = ctx.model
    shuffled: set[str] = set()
    for fn in model.functions.values():
        for event in fn.events:
            if event.kind is EventKind.ASSIGN and event.value is not None and tail(event.value.callee) == "DataLoader":
                if re.search(r"shuffle\s*=\s*True", event.value.text):
                    shuffled.update(event.targets)
    for fn in model.functions.values():
        for event in fn.events:
            if event.kind is not EventKind.CALL or not event.name:
                continue
            if _is_distributed_sampler(event.name) and not re.search(r"shuffle\s*=\s*False", ctx.source.slice(event.span)):
                return _Evidence(event.span, event.function)
            if tail(event.name) == "prepare_data_loader":
                loader = event.keyword("data_loader") or (event.args[0] if event.args else None)
                if loader is not None and loader.base in shuffled:
                    return _Evidence(event.span, event.function)
    for tloop in ctx.training.training_loops:
        fn = model.functions.get(tloop.loop.function)
        sampler = next((p for p in fn.params if (p == "sampler" or p.endswith("_sampler")) and not _called(fn, p)), None) if fn is not None else None
        if fn is not None and sampler is not None:
            return _Evidence(fn.header, fn.qualname, parameter=True, name=sampler)
    return None


def _called(fn: Function, name: str) -> bool:
    """`name(...)` runs in the function: a diffusion sampler or a sampling function, no DistributedSampler."""
    return any(e.kind is EventKind.CALL and e.name == name and not e.receiver for e in fn.events)


def _reads(ctx: Context, name: str, function: str) -> list[Span]:
    """Where the function reads its parameter `name` (`if sampler:`), in source order."""
    scope = DataFlow.of(ctx.model).scopes.get(function)
    if scope is None:
        return []
    found = [
        span_of(ctx.model, node) for node in ast.walk(scope.node)
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
    ]
    return sorted(found, key=lambda span: span.start)


def _outermost(ctx: Context, loop: Loop) -> Loop:
    """The outermost loop of the function around `loop` (the epoch loop), or `loop` itself."""
    while loop.parent is not None and loop.parent in ctx.model.loops:
        loop = ctx.model.loops[loop.parent]
    return loop


def _once_per_epoch(ctx: Context, loop: Loop) -> bool:
    """The loop runs inside another loop, directly or through the function that holds it."""
    if loop.parent is not None:
        return True
    fn = ctx.model.functions.get(loop.function)
    if fn is not None and "epoch" in fn.params:
        return True
    return any(call.loops for call in ctx.model.calls_to.get(loop.function, []))
