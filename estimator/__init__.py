"""The VRAM estimator: memory of a training step, per layer, from source alone.

`estimate(model, tree, options)` interprets the file abstractly (estimator.interp), then
replays the recorded training step (estimator.timeline) to find its peak. Nothing here
imports torch or runs the user's code.
"""

from __future__ import annotations

import ast
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from torch_preflight.core.config import Config
from torch_preflight.core.memory import Assumption, LayerEstimate, MemoryReport, Suggestion
from torch_preflight.core.parse import parse
from torch_preflight.core.project import FOREIGN_BUDGET_BYTES, Project, ProjectView
from torch_preflight.core.semantic import ModuleModel, build
from torch_preflight.core.source import SourceText
from torch_preflight.estimator import library_sources, ops
from torch_preflight.estimator.interp import Interpreter
from torch_preflight.estimator.options import (
    ALLOCATOR_RESERVE,
    CUBLASLT_WORKSPACE,
    CUDA_CONTEXT_BYTES,
    GPUS,
    EstimateOptions,
    cublas_workspace,
    gpu_memory,
)
from torch_preflight.estimator.record import Recorder, StepRecord
from torch_preflight.estimator.scope import Cancelled
from torch_preflight.estimator.timeline import Timeline, cuda_round, optimizer_bytes, simulate
from torch_preflight.estimator.values import ITEMSIZE, Module, Optimizer, Tensor

Interpreter.ops = ops  # type: ignore[assignment]  # the interpreter reads torch's semantics from this registry

__all__ = ["GPUS", "EstimateOptions", "estimate", "estimate_source", "gpu_memory", "options_from_config"]

# the estimate's work budget: a script that reads its corpus and configuration runs more statements than a model file
ESTIMATE_STEPS = 500_000
OPTIMIZER_NAMES = {"sgd": ("SGD", False), "sgd-momentum": ("SGD", True), "adam": ("Adam", False), "adamw": ("AdamW", False),
                   "rmsprop": ("RMSprop", False), "adagrad": ("Adagrad", False), "adam8bit": ("Adam", False)}


@dataclass
class _Run:
    it: Interpreter
    module: Module
    line: int
    col: int
    step: StepRecord | None
    optimizer: Optimizer | None
    timeline: Timeline
    complete: bool
    batch: int | None
    others: tuple[tuple[str, int], ...] = ()  # the script's other trained models (type, line) counted in `other`
    graph: int = 0  # a graph that no backward consumes, kept into the step (counted in `other`)


def options_from_config(config: Config) -> EstimateOptions:
    """EstimateOptions from `[tool.torch-preflight]` (gpu-memory, gpu, dtype, batch-size, set): the editor's estimate."""
    dtype = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(config.dtype or "", config.dtype)
    return EstimateOptions(batch_size=config.batch_size, dtype=dtype, budget_bytes=config.gpu_memory, gpu=config.gpu,
                           values=config.values, corpus_bytes=0)


def estimate_source(
    text: str, path: str = "<string>", options: EstimateOptions | Config | None = None, model: ModuleModel | None = None,
    project: ProjectView | None = None, stale: Callable[[], bool] | None = None,
) -> list[MemoryReport]:
    """Parse, model and estimate one file. Never raises: odd input gives [] or incomplete reports.

    `options` may also be the core Config (the language server passes its configuration).
    `model`, when the caller has already built it for this `text` (the server has), skips
    parsing and modelling again. `project` resolves imports into the user's other modules
    (`from models import UNet`); by default a fresh one when `path` is a file on disk.
    `stale`, asked now and then: once true the estimate stops and gives [] (the caller, who
    knows it is stale, keeps nothing of it)."""
    if isinstance(options, Config):
        options = options_from_config(options)
    if stale is not None:
        options = replace(options or EstimateOptions(), stale=stale)
    try:
        if model is None or model.tree is None:
            source = SourceText(text)
            model = build(parse(source).tree, source, path)
        assert model.tree is not None
        if project is None and os.path.isfile(path):
            project = Project().view()
        return estimate(model, model.tree, options or EstimateOptions(), project=project)
    except Cancelled:
        return []
    except Exception as exc:  # a bug in the estimator: say so rather than "no model found"
        text = f"internal error in estimator ({type(exc).__name__}: {str(exc)[:80]}); please report it"
        return [failed_report(text, (options or EstimateOptions()).device)]


def estimate(model: ModuleModel, tree: ast.Module, options: EstimateOptions, project: ProjectView | None = None) -> list[MemoryReport]:
    """The memory reports of the models `model` trains (or builds). `project`, when given, lets model
    classes, helpers and configs come from the user's other modules (their layers carry `file`)."""
    try:
        return _estimate(model, tree, options, project)
    except RecursionError:
        return [failed_report("the code is nested too deeply to read", options.device)]


def _interpret(model: ModuleModel, tree: ast.Module, options: EstimateOptions, batch: int | None = None, autocast: str | None = None,
               project: ProjectView | None = None) -> Interpreter:
    it = Interpreter(model, tree, device=options.device, batch_override=batch or options.batch_size, input_shape=options.input_shape,
                     force_autocast=autocast or options.autocast, dtype=options.dtype, project=project, argv=options.argv,
                     max_steps=ESTIMATE_STEPS, library_paths=library_sources.environment_paths(options.python),
                     supplied=options.values, corpus_bytes=options.corpus_bytes, stale=options.stale)
    it.run()
    return it


def _targets(it: Interpreter, options: EstimateOptions) -> list[tuple[Module, int, int, StepRecord | None]]:
    found: list[tuple[Module, int, int, StepRecord | None]] = []
    trained: dict[int, StepRecord] = {}
    for rec in it.step_records:
        for m in rec.recorder.models:
            trained.setdefault(m.id, rec)
    seen: set[int] = set()
    for inst in it.instances:
        if inst.module.id in seen or inst.module.type in ("ModuleList", "ModuleDict"):
            continue
        seen.add(inst.module.id)
        if options.model and options.model not in (inst.module.type, inst.name):
            continue
        found.append((inst.module, inst.line, inst.col, trained.get(inst.module.id)))
    # a module that is part of another instantiated model (or an argument to one) is not a model of its own
    inner: set[int] = set()
    for mod, *_ in found:
        inner.update(m.id for m in mod.modules() if m is not mod)
        inner.update(v.id for v in mod.args.values() if isinstance(v, Module))
    found = [f for f in found if f[0].id not in inner]
    # a trained model is the one to report; an instantiated-only one is reported when nothing was trained
    if any(step is not None for *_, step in found):
        found = [f for f in found if f[3] is not None or (options.model is not None)]
    if not found:
        used = _names_called_by_modules(it)
        for cls in it.classes.values():
            if cls.is_module and (options.model is None or options.model == cls.name) and cls.name not in used.get(id(cls), ()):
                mod = it.construct_class(cls, cls.node.lineno - 1, cls.node.col_offset)
                if isinstance(mod, Module):
                    found.append((mod, cls.node.lineno - 1, cls.node.col_offset, None))
    return found


def _names_called_by_modules(it: Interpreter) -> dict[int, set[str]]:
    """For each class, the plain names that the *other* nn.Module classes of the file call:
    a class used as a sub-module of another is not a model of its own. One walk per class."""
    calls = {
        id(cls): {n.func.id for n in ast.walk(cls.node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        for cls in it.classes.values()
        if cls.is_module
    }
    every = [names for names in calls.values()]
    result: dict[int, set[str]] = {}
    for cls in it.classes.values():
        own = calls.get(id(cls), set())
        result[id(cls)] = set().union(*(names for names in every if names is not own))
    return result


def _synthetic_step(it: Interpreter, mod: Module, options: EstimateOptions) -> StepRecord | None:
    if options.input_shape is None:
        return None
    b = options.batch_size or 1
    it.recorder = Recorder(autocast=it.autocast)
    it.grad_enabled = True
    x = Tensor((b, *options.input_shape), external=True)
    out = it.call_module(mod, [x], {}, None)
    first = out[0] if isinstance(out, tuple) and out else out
    rec = it.recorder
    it.recorder = None
    if not isinstance(first, Tensor) or rec is None:
        return None
    return StepRecord(rec, first, mod.line, it.autocast, [x])


def _find(it: Interpreter, target: Module) -> tuple[Module, int, int, StepRecord | None] | None:
    for mod, line, col, step in _targets(it, EstimateOptions()):
        if mod.type == target.type and line == target.line:
            return mod, line, col, step
    for rec in it.step_records:
        for m in rec.recorder.models:
            if m.type == target.type:
                return m, m.line, m.col, rec
    return None


def _run(it: Interpreter, mod: Module, line: int, col: int, step: StepRecord | None, options: EstimateOptions) -> _Run:
    device = options.device
    rnd = cuda_round if device == "cuda" else (lambda n: n)
    if options.dtype:
        mod.set_dtype({"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(options.dtype, options.dtype))
    if step is None:
        step = _synthetic_step(it, mod, options)
    itemsize = ITEMSIZE.get(mod.dtype, 4)
    sizes = mod.param_sizes()
    params = sum(rnd(s * itemsize) for s in sizes) + _buffer_bytes(mod, rnd)
    grads = sum(rnd(s * itemsize) for s in sizes)
    opt = next((o for o in it.optimizers if o.model is mod), None) or (it.optimizers[0] if it.optimizers else None)
    if options.optimizer:
        kind, momentum = OPTIMIZER_NAMES.get(options.optimizer.lower(), (options.optimizer, False))
        opt = None if options.optimizer.lower() == "none" else Optimizer(kind, mod, momentum=momentum, eight_bit="8bit" in options.optimizer)
    master = getattr(opt, "master_weights", False)  # DeepSpeed's 16-bit training: float32 master weights and state
    state, transient = optimizer_bytes(opt, sizes, 4 if mod.dtype == "float32" or master else itemsize, device)
    if master:
        state += sum(rnd(s * 4) for s in sizes)
    params, grads, state, transient = _zero_sharded(it, options, (params, grads, state, transient), max(sizes, default=0) * itemsize)
    batch, others = _other_models(it, mod, device) if options.optimizer is None else (0, ())
    graph = _unconsumed_graph(it, rnd)
    batch += graph
    if step is not None:
        batch += sum(rnd(t.nbytes) for t in _batch_tensors(step))
    persist = (it.zero_grad_seen and it.zero_grad_set_to_none is False) or (step is not None and step.grads_live)
    workspace = 2 * cublas_workspace(options.gpu) if device == "cuda" and step is not None and _uses_cublas(mod) else 0
    if device == "cuda" and step is not None and step.recorder.cublaslt:
        workspace += CUBLASLT_WORKSPACE
    tl = simulate(step.recorder if step else None, params=params, grads=grads, state=state, opt_transient=transient,
                  batch=batch + workspace,
                  grads_persist=persist, device=device, held=step.held if step is not None else None,
                  grads_in_forward=it.zero_grad_after_forward)
    # what the script holds from its step (outputs in its variables, data it keeps in CPU memory) is there between steps
    kept = sum(rnd(b) for _, b in step.held) if step is not None else 0
    for ev in it.evaluations:  # a forward under no_grad between steps, next to what the step still holds then
        g, s = (grads if ev.grads_live else 0), (state if ev.stepped else 0)
        other = batch + kept + rnd(ev.peak)
        if ev.model is mod and params + g + s + other > tl.peak:
            tl = Timeline(params + g + s + other, "evaluation", params, g, s, 0, other)
    if device == "cpu" and params + it.setup_bytes > tl.peak:
        # on the CPU, a tensor the script builds while it sets up (a permutation of the whole dataset) can outweigh
        # a small model's step: the peak is then there, with the parameters already built
        tl = Timeline(params + it.setup_bytes, "setup", params, 0, 0, 0, it.setup_bytes)
    complete = step is not None and not it.problems and not any(m.args.get("incomplete") for m in mod.modules())
    b = next((v for v, _ in it.batch_sizes), None) if options.batch_size is None else options.batch_size
    return _Run(it, mod, line, col, step, opt, tl, complete, b, others, graph)


def _unconsumed_graph(it: Interpreter, rnd: Callable[[int], int]) -> int:
    """A forward run with gradients enabled after the step that no backward consumes (a GAN's `fake = netG(fixed_noise)`
    to save samples, outside torch.no_grad()): autograd keeps what it saved while the script holds its output, into the
    next step until the variable is rebound."""
    rec = it.recorder
    if rec is None or not rec.ops or not it.stepped:
        return 0
    saved = {sid: b for op in rec.ops for sid, b in op.saved}
    return sum(rnd(b) for b in saved.values()) + rnd(rec.ops[-1].out_bytes)


def _other_models(it: Interpreter, mod: Module, device: str) -> tuple[int, tuple[tuple[str, int], ...]]:
    """What the models trained together with this one hold through its step (a GAN's generator while its discriminator
    steps: a forward of one feeds the other, so a step records both): their parameters, buffers, gradients (cleared only
    by their own zero_grad) and optimizer state. Models the script trains apart are reported apart."""
    rnd = cuda_round if device == "cuda" else (lambda n: n)
    mine = {m.id for m in mod.modules()}
    together = {m.id for r in it.step_records if mod in r.recorder.models for m in r.recorder.models}
    total, seen, found = 0, set(), []
    for opt in it.optimizers:
        other = opt.model
        if (not isinstance(other, Module) or other.id in seen or other.id in mine or other.id not in together
                or mod.id in {m.id for m in other.modules()}):
            continue
        seen.add(other.id)
        itemsize = ITEMSIZE.get(other.dtype, 4)
        sizes = other.param_sizes()
        total += 2 * sum(rnd(n * itemsize) for n in sizes) + _buffer_bytes(other, rnd)
        total += optimizer_bytes(opt, sizes, itemsize, device)[0]
        found.append((other.type, opt.line))
    return total, tuple(found)


def _zero_sharded(it: Interpreter, options: EstimateOptions, sizes: tuple[int, int, int, int], largest: int) -> tuple[int, int, int, int]:
    """(parameters, gradients, optimizer state, step transient) on one GPU under DeepSpeed's ZeRO: stage 1 shards the
    optimizer state across the job's GPUs, stage 2 the gradients too, stage 3 the parameters too (the largest layer's
    are gathered while it runs), as the ZeRO suggestions do. The number of GPUs is the launcher's (`--gpus N`)."""
    stage = (it.deepspeed or {}).get("stage", 0)
    if not stage:
        return sizes
    world = options.world_size
    if world is None:
        it.problem(f"DeepSpeed ZeRO stage {stage} shards across the job's GPUs, whose number is not known: pass --gpus N")
        return sizes
    params, grads, state, transient = sizes
    it.assume(f"ZeRO stage {stage} across {world} GPUs (--gpus {world})", None)
    shard = lambda n: -(-n // world)  # noqa: E731
    return (shard(params) + largest if stage >= 3 else params, shard(grads) if stage >= 2 else grads, shard(state), shard(transient))


BLAS_LAYERS = ("Linear", "NonDynamicallyQuantizableLinear", "LazyLinear", "Bilinear", "MultiheadAttention", "RNN", "LSTM", "GRU",
               "TransformerEncoderLayer", "TransformerDecoderLayer")


def _cudnn_caveats(mod: Module) -> list[str]:
    """What cuDNN decides at run time and the source does not (docs/vram-accuracy.md has the H200 evidence)."""
    kinds = {m.type for m in mod.modules()}
    caveats = []
    if any(k.startswith(("Conv1d", "Conv2d", "Conv3d", "ConvTranspose")) for k in kinds):
        caveats.append("cuDNN convolution workspaces: input + output + filter bytes per call, as its heuristics chose on an H200; "
                       "the weight-gradient call can pick an engine with a far larger one (up to 17.5x a layer's input was measured), "
                       "which the source does not determine")
    if kinds & {"LSTM", "GRU"}:
        caveats.append("cuDNN RNN workspace: its 16 MiB floor only; it grows with the batch by per-layer coefficients the shapes do "
                       "not determine (up to 64 MiB at batch 128 was measured)")
    return caveats


def _uses_cublas(mod: Module) -> bool:
    """Whether the model's step runs cuBLAS GEMMs (and so holds the cuBLAS workspaces): Linear-like layers, attention, RNNs."""
    return any(m.type in BLAS_LAYERS for m in mod.modules())


def _buffer_bytes(mod: Module, rnd: object) -> int:
    total = 0
    for m in mod.modules():
        for shape, dtype in m.buffers.values():
            total += rnd(math.prod(shape) * ITEMSIZE.get(dtype, 4) if shape else ITEMSIZE.get(dtype, 4))  # type: ignore[operator]
    return total


def _batch_tensors(step: StepRecord) -> list[Tensor]:
    unique = {id(t.storage): t for t in step.batch}
    return list(unique.values())


def _estimate(model: ModuleModel, tree: ast.Module, options: EstimateOptions, project: ProjectView | None = None) -> list[MemoryReport]:
    it = _interpret(model, tree, options, project=project)
    reports: list[MemoryReport] = []
    for mod, line, col, step in _targets(it, options):
        # a model two losses step (a GAN's discriminator: real, then fake): the peak is the larger of their backwards
        steps = [step, *(r for r in it.step_records if r is not step and step is not None and mod in r.recorder.models)]
        run = max((_run(it, mod, line, col, s, options) for s in steps), key=lambda r: r.timeline.peak)
        reports.append(_report(model, tree, run, options))
    if not reports and it.out_of_budget:  # not "no model": the work budget ran out before the script built one
        return [failed_report("the script is too long to interpret: the work budget ran out before a model was built",
                              options.device)]
    if not reports and it.unread and (it.optimizers or it.stepped):  # a script that trains what it could not read
        unread = ", ".join(f"`{m}`" for m in dict.fromkeys(it.unread))
        return [failed_report(f"the trained model was not found: {unread} not read, over the read budget of other modules "
                              f"({FOREIGN_BUDGET_BYTES // 1000} kB)", options.device)]
    return reports


def _layers(mod: Module, has_step: bool, device: str) -> tuple[LayerEstimate, ...]:
    rows: list[LayerEstimate] = []
    rnd = cuda_round if device == "cuda" else (lambda n: n)
    seen: set[int] = set()
    for name, m in mod.walk():
        if m.id in seen:
            continue
        seen.add(m.id)
        own = m.own_param_count()
        leaf = m.catalog and m.type not in ("Sequential", "ModuleList", "ModuleDict", "TransformerEncoder", "TransformerDecoder",
                                             "Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer")
        if not (leaf or own or m.saved_bytes):
            continue
        if not name and not own and not m.saved_bytes:
            continue
        itemsize = ITEMSIZE.get(m.dtype, 4)
        pbytes = sum(rnd(s * itemsize) for s in m.own_param_sizes())
        unknown = m.args.get("incomplete") if m.catalog else None
        # "(model)": the model's own row, parameters it holds itself and what the ops written in its forward() save
        # (the same key as `measure`'s rows; the text output labels it with the class name)
        label = name or "(model)"
        rows.append(LayerEstimate(label, m.type, m.line, m.col, own, pbytes,
                                  m.saved_bytes if has_step and not unknown else None,
                                  tuple(m.output_shape) if m.output_shape is not None else None,
                                  m.file or None, str(unknown) if unknown else None))
    return tuple(rows)


def _report(model: ModuleModel, tree: ast.Module, run: _Run, options: EstimateOptions) -> MemoryReport:
    it, mod, tl = run.it, run.module, run.timeline
    path = model.path.rsplit("/", 1)[-1]
    assumptions: list[Assumption] = []
    for text, line in it.assumptions:
        assumptions.append(Assumption(f"{text} from {path}:{line + 1}" if line is not None else text, line))
    if run.optimizer is not None:
        opt = run.optimizer
        assumptions.append(Assumption(f"optimizer {opt.kind}{' with momentum' if opt.momentum and opt.kind == 'SGD' else ''}"
                                      + (f" from {path}:{opt.line + 1}" if not options.optimizer else " (--optimizer)"),
                                      opt.line if not options.optimizer else None))
    elif not it.optimizer_unknown:
        assumptions.append(Assumption("no optimizer found: no optimizer state", None))
    if run.graph and it.recorder is not None:
        line = it.recorder.line
        where = f" at {path}:{line + 1}" if line >= 0 else ""
        assumptions.append(Assumption(f"a forward with gradients enabled{where} that no backward consumes keeps its graph "
                                      f"({run.graph / 2**20:.1f} MiB) into the next step while the script holds its output, "
                                      "counted in other (run it under torch.no_grad())", line if line >= 0 else None))
    for kind, line in run.others:
        assumptions.append(Assumption(f"the other trained model {kind} (optimizer from {path}:{line + 1}) keeps its parameters, "
                                      "gradients and optimizer state through this step, counted in other", line))
    if it.zero_grad_seen and it.zero_grad_set_to_none is False:
        assumptions.append(Assumption("zero_grad(set_to_none=False): gradients stay allocated through the step", None))
    else:
        assumptions.append(Assumption("gradients are freed by zero_grad() (set_to_none=True) before forward", None))
    if mod.dtype != "float32":
        assumptions.append(Assumption(f"parameters in {mod.dtype}", None))
    if options.device == "cuda" and run.step is not None and _uses_cublas(mod):
        ws = cublas_workspace(options.gpu)
        assumptions.append(Assumption(f"cuBLAS workspaces: 2 x {ws / 2**20:g} MiB (forward and autograd threads"
                                      f"{', ' + options.gpu if options.gpu else ', Hopper default'}), counted in other", None))
    if options.device == "cuda" and run.step is not None and run.step.recorder.cublaslt:
        assumptions.append(Assumption(f"cuBLASLt workspace: {CUBLASLT_WORKSPACE / 2**20:g} MiB (a Linear with a bias), counted in other", None))
    if options.device == "cuda" and run.step is not None:
        assumptions.extend(Assumption(text, None) for text in _cudnn_caveats(mod))
    unknowns = _unknowns(run, path)
    breakdown = {"parameters": tl.parameters, "gradients": tl.gradients, "optimizer_state": tl.optimizer_state,
                 "activations": tl.activations, "other": tl.other}
    budget = options.budget
    # a lower bound over the budget does not fit; one under it says nothing
    fits = None if budget is None else (tl.peak <= budget if run.complete else (False if tl.peak > budget else None))
    suggestions: tuple[Suggestion, ...] = ()
    max_batch = None
    if budget is not None and options.remedies and run.step is not None:
        max_batch = _max_batch(model, tree, run, options, budget)
        suggestions = _remedies(model, tree, run, options, budget, max_batch)
    overhead = CUDA_CONTEXT_BYTES + int(tl.peak * ALLOCATOR_RESERVE) if options.device == "cuda" else 0
    return MemoryReport(
        model=mod.type, model_line=run.line, peak_bytes=tl.peak, breakdown=breakdown,
        layers=_layers(mod, run.step is not None, options.device), assumptions=tuple(assumptions), suggestions=suggestions,
        complete=run.complete and not unknowns, budget_bytes=budget, fits=fits, max_batch_size=max_batch if run.complete else None,
        device=options.device, model_col=run.col, overhead_bytes=overhead, unknowns=unknowns, phase=tl.phase,
        saved_activation_bytes=sum(m.saved_bytes for m in mod.modules()) if run.step is not None else None,
    )


def _unknowns(run: _Run, path: str) -> tuple[Assumption, ...]:
    """What the estimate could not read, each once: the training step, then what the interpreter met."""
    out: list[Assumption] = []
    if run.step is None:
        out.append(Assumption("activations: no training step or input shape found (pass --input-shape)", None))
    for text, line in run.it.problems:
        out.append(Assumption(text + (f" ({path}:{line + 1})" if line is not None else ""), line))
    for m in run.module.modules():
        reason = m.args.get("incomplete") if m.catalog else None
        if reason and not any(str(reason) in a.text for a in out):
            out.append(Assumption(f"{m.type}: {reason}", m.line if not m.file else None))
    return tuple(out)


def failed_report(text: str, device: str = "cuda") -> MemoryReport:
    """The report of an estimate that failed as a whole: nothing known, and why."""
    return MemoryReport(model="(not estimated)", model_line=0, peak_bytes=0,
                        breakdown=dict.fromkeys(("parameters", "gradients", "optimizer_state", "activations", "other"), 0),
                        layers=(), assumptions=(), suggestions=(), complete=False, device=device,
                        unknowns=(Assumption(text, None),))


def _rerun(model: ModuleModel, tree: ast.Module, run: _Run, options: EstimateOptions, **changes: object) -> _Run | None:
    opts = replace(options, remedies=False, **changes)  # type: ignore[arg-type]
    it = _interpret(model, tree, opts, project=run.it.project)
    found = _find(it, run.module)
    if found is None:
        return None
    mod, line, col, step = found
    return _run(it, mod, line, col, step, opts)


def _max_batch(model: ModuleModel, tree: ast.Module, run: _Run, options: EstimateOptions, budget: int) -> int | None:
    b = run.batch
    if not b:
        return None
    other = _rerun(model, tree, run, options, batch_size=2 * b)
    if other is None or other.batch != 2 * b:
        return None
    per_sample = (other.timeline.peak - run.timeline.peak) / b
    fixed = run.timeline.peak - per_sample * b
    if per_sample <= 0:
        return None
    best = int((budget - fixed) // per_sample)
    return max(best, 0)


def _remedies(model: ModuleModel, tree: ast.Module, run: _Run, options: EstimateOptions, budget: int, max_batch: int | None) -> tuple[Suggestion, ...]:
    tl = run.timeline
    out: list[Suggestion] = []
    if run.step is not None and run.step.autocast is None:
        bf16 = _rerun(model, tree, run, options, autocast="bfloat16")
        if bf16 is not None:
            out.append(Suggestion("bf16 autocast", bf16.timeline.peak, "wrap forward and loss in torch.autocast(dtype=torch.bfloat16)"))
    # activation checkpointing of each top-level block: keep block inputs, recompute one block at a time
    blocks = [m for m in run.module.children.values()]
    seq = max((m for m in run.module.modules() if m.type in ("ModuleList", "Sequential")), key=lambda m: len(m.children), default=None)
    if seq is not None and len(seq.children) > 1:
        blocks = list(seq.children.values())
    block_acts = [sum(x.saved_bytes for x in b.modules()) for b in blocks]
    if block_acts and tl.activations:
        kept = sum(b.output_bytes for b in blocks) + max(block_acts)
        ckpt_act = min(tl.activations, kept + max(0, tl.activations - sum(block_acts)))
        out.append(Suggestion("activation checkpointing", tl.peak - tl.activations + ckpt_act,
                              f"torch.utils.checkpoint on each of {len(blocks)} blocks"))
    if run.optimizer is not None and run.optimizer.kind.lower() in ("adam", "adamw") and tl.optimizer_state:
        out.append(Suggestion("8-bit optimizer", tl.peak - tl.optimizer_state * 3 // 4, "bitsandbytes.optim.AdamW8bit"))
    n = options.n_gpus
    p, g, s = tl.parameters, max(tl.gradients, sum(run.module.param_sizes()) * 4 if tl.phase == "step" else tl.gradients), tl.optimizer_state
    out.append(Suggestion(f"ZeRO-1 across {n} GPUs", tl.peak - s + s // n, "optimizer state sharded"))
    out.append(Suggestion(f"ZeRO-2 across {n} GPUs", tl.peak - s + s // n - g + g // n, "optimizer state and gradients sharded"))
    largest = max(run.module.param_sizes(), default=0) * 4
    out.append(Suggestion(f"ZeRO-3 / FSDP across {n} GPUs", tl.peak - s + s // n - g + g // n - p + p // n + largest,
                          "parameters, gradients and optimizer state sharded"))
    if run.batch and run.batch > 1:
        micro = min(max_batch or 1, run.batch // 2) if max_batch is not None else run.batch // 2
        micro = max(micro, 1)
        small = _rerun(model, tree, run, options, batch_size=micro)
        if small is not None:
            steps = -(-run.batch // micro)
            out.append(Suggestion(f"micro-batch {micro} x {steps} accumulation steps", small.timeline.peak,
                                  f"same effective batch {micro * steps}"))
    out.sort(key=lambda s: s.peak_bytes)
    return tuple(out)
