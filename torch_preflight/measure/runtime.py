"""Run a training script under torch and measure its memory: the ONLY module that imports torch.

It is imported lazily by `torch-preflight measure` (and by bench/vram/measure.py), never by
anything else; the import-linter contract and tests/test_packaging.py exempt it by name.

How it measures
- CPU: `torch.profiler.profile(profile_memory=True)` records every allocator event ([memory]
  events, +bytes on allocation, -bytes on free); replayed in time order into a running sum, the
  maximum is the peak. Zero-length `record_function("tpf:N")` markers, emitted from the hooks
  below, share the profiler's clock, so every allocator event falls between two known markers.
- CUDA: the caching allocator's own counters. At every marker `memory_allocated()` is read and
  `max_memory_allocated()` gives the exact peak since the previous marker (then the peak is
  reset); `--memory-history` also records `torch.cuda.memory._record_memory_history()` and dumps
  a snapshot for https://pytorch.org/memory_viz.
- Markers come from global module forward pre/post hooks, tensor hooks on module outputs (the
  backward of a module starts when its output's gradient arrives) and global optimizer step
  pre/post hooks. The step post hook counts optimizer steps and stops the script with
  `StopScript` (a BaseException, so `except Exception` in the script does not swallow it).
- Per-layer activations: a `saved_tensors_hooks` pack hook sees every tensor autograd saves; its
  storage is attributed to the innermost module running its forward (first save wins, storages
  deduplicated within one forward pass; parameters and the batch passed into the model are not
  activations), which is how the estimator counts `saved activations`.
- Categories at the peak: parameters and buffers, `.grad`s, optimizer state (at the marker before
  the peak), live saved activations; temporaries are the rest of the live bytes.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
import traceback
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.profiler import ProfilerActivity, profile, record_function

from torch_preflight.measure.report import LayerMeasure, Measurement, ModelMeasure, downsample

PHASE_LETTER = {"forward": "f", "backward": "b", "optimizer": "o", "other": "·", "setup": "·"}


class StopScript(BaseException):
    """Raised from the optimizer step hook once the requested number of steps has completed."""


@dataclass
class Mark:
    phase: str
    where: str
    step: int
    categories: tuple[int, int, int, int]  # parameters, gradients, optimizer state, activations (live at the mark)
    allocated: int = 0  # CUDA: memory_allocated() at the mark
    peak_before: int = 0  # CUDA: max_memory_allocated() since the previous mark


@dataclass
class Root:
    module: Any
    names: dict[int, str]
    params: list[Any]
    param_bytes: int
    last_pass: dict[str, int] = field(default_factory=dict)
    passes: int = 0


def _storage(t: Any) -> tuple[int, int] | None:
    try:
        st = t.untyped_storage()
        return st.data_ptr(), st.nbytes()
    except Exception:  # sparse, meta, tensor subclasses without storage
        return None


class Recorder:
    def __init__(self, device: str, steps: int) -> None:
        self.device = device
        self.steps = steps
        self.step = 0
        self.stack: list[Any] = []
        self.roots: dict[int, Root] = {}
        self.root_order: list[int] = []
        self.marks: list[Mark] = []
        self.phase = "setup"
        self.param_ptrs: set[int] = set()
        self.external: set[int] = set()
        self.optimizers: dict[int, Any] = {}
        self.opt_bytes = 0
        self.live_acts: dict[int, list[int]] = {}
        self.act_bytes = 0
        self.current: tuple[Root, dict[str, int], set[int]] | None = None
        self.handles: list[Any] = []

    # -- markers -------------------------------------------------------------------------------
    def _grad_bytes(self) -> int:
        seen: dict[int, int] = {}
        for root in self.roots.values():
            for p in root.params:
                g = p.grad
                if g is not None:
                    s = _storage(g)
                    if s is not None:
                        seen[s[0]] = s[1]
        return sum(seen.values())

    def mark(self, phase: str, where: str) -> None:
        self.phase = phase
        cats = (sum(r.param_bytes for r in self.roots.values()), self._grad_bytes(), self.opt_bytes, self.act_bytes)
        m = Mark(phase, where, self.step, cats)
        if self.device == "cuda":
            m.allocated = torch.cuda.memory_allocated()
            m.peak_before = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        else:
            with record_function(f"tpf:{len(self.marks)}"):
                pass
        self.marks.append(m)

    # -- hooks ---------------------------------------------------------------------------------
    def _root_of(self, module: Any) -> tuple[Root | None, str]:
        for root in self.roots.values():
            name = root.names.get(id(module))
            if name is not None:
                return root, name or "(model)"
        return None, type(module).__name__

    def forward_pre(self, module: Any, args: Any) -> None:
        if not self.stack:
            for a in args if isinstance(args, tuple) else (args,):
                if isinstance(a, torch.Tensor) and a.grad_fn is None and not a.requires_grad:
                    s = _storage(a)
                    if s is not None and s[0] not in self.external:
                        self.external.add(s[0])  # until it dies: its address may be reused by an activation
                        with contextlib.suppress(TypeError):
                            weakref.finalize(a, self.external.discard, s[0])
            if id(module) not in self.roots and any(True for _ in module.parameters()):
                self._add_root(module)
            root = self.roots.get(id(module))
            if root is not None and torch.is_grad_enabled():
                self.current = (root, {}, set())
        self.stack.append(module)
        root, name = self._root_of(module)
        self.mark("forward", name if root is not None else f"({name})")

    def _add_root(self, module: Any) -> None:
        names = {id(m): n for n, m in module.named_modules()}
        params = list(module.parameters())
        ptrs: dict[int, int] = {}
        for t in [*params, *module.buffers()]:
            s = _storage(t)
            if s is not None:
                ptrs[s[0]] = s[1]
        self.param_ptrs.update(ptrs)
        self.roots[id(module)] = Root(module, names, params, sum(ptrs.values()))
        self.root_order.append(id(module))

    def forward_post(self, module: Any, args: Any, output: Any) -> None:
        if self.stack and self.stack[-1] is module:
            self.stack.pop()
        root, name = self._root_of(module)
        if root is not None and torch.is_grad_enabled():
            out = output[0] if isinstance(output, (tuple, list)) and output else output
            if isinstance(out, torch.Tensor) and out.requires_grad:
                label = name
                out.register_hook(lambda _grad: self.mark("backward", label))
        if not self.stack and self.current is not None and self.current[0].module is module:
            cur_root, layers, _ = self.current
            cur_root.last_pass = layers
            cur_root.passes += 1
            self.current = None
        parent = self._root_of(self.stack[-1])[1] if self.stack else "(loss)"
        self.mark("forward", parent)

    def pack(self, t: Any) -> Any:
        s = _storage(t)
        if s is None:
            return t
        ptr, nbytes = s
        if ptr in self.param_ptrs or ptr in self.external or nbytes == 0:
            return t
        entry = self.live_acts.get(ptr)
        if entry is None:
            self.live_acts[ptr] = [1, nbytes]
            self.act_bytes += nbytes
        else:
            entry[0] += 1
        with contextlib.suppress(TypeError):
            weakref.finalize(t, self._release, ptr)
        if self.current is not None and self.stack:
            _root, layers, seen = self.current
            if ptr not in seen:
                seen.add(ptr)
                owner, name = self._root_of(self.stack[-1])
                if owner is _root:
                    layers[name] = layers.get(name, 0) + nbytes
        return t

    def _release(self, ptr: int) -> None:
        entry = self.live_acts.get(ptr)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] <= 0:
            self.act_bytes -= entry[1]
            del self.live_acts[ptr]

    def step_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.optimizers[id(optimizer)] = optimizer
        self.mark("optimizer", type(optimizer).__name__)

    def step_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        seen: dict[int, int] = {}
        for opt in self.optimizers.values():
            for state in opt.state.values():
                for v in state.values() if isinstance(state, dict) else ():
                    if isinstance(v, torch.Tensor):
                        s = _storage(v)
                        if s is not None:
                            seen[s[0]] = s[1]
        self.opt_bytes = sum(seen.values())
        self.step += 1
        self.mark("other", "(after step)")
        if self.step >= self.steps:
            raise StopScript

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        self.handles = [
            register_module_forward_pre_hook(self.forward_pre),
            register_module_forward_hook(self.forward_post),
            register_optimizer_step_pre_hook(self.step_pre),
            register_optimizer_step_post_hook(self.step_post),
        ]
        try:
            with torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t):
                yield
        finally:
            for h in self.handles:
                h.remove()
            self.handles = []


@contextlib.contextmanager
def _script_context(path: str, argv: list[str], quiet: bool) -> Iterator[None]:
    old_argv, old_path, old_cwd = sys.argv, list(sys.path), os.getcwd()
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    out = contextlib.redirect_stdout(sys.stderr) if quiet else contextlib.nullcontext()
    try:
        with out:
            yield
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
        os.chdir(old_cwd)


def _run(path: str, argv: list[str], rec: Recorder, quiet: bool) -> str | None:
    """Run the script until `rec` stops it; returns the script's own error, if any."""
    try:
        with _script_context(path, argv, quiet), rec.installed():
            runpy.run_path(path, run_name="__main__")
    except StopScript:
        return None
    except SystemExit as exc:
        return None if exc.code in (0, None) else f"SystemExit({exc.code!r})"
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        tb = traceback.format_exception(exc)
        sys.stderr.write("".join(tb))
        return f"{type(exc).__name__}: {exc}"
    return None


def cpu_peak(path: str, env: dict[str, str] | None = None) -> int:
    """Peak live CPU bytes of running `path` to completion (bench/vram's ground truth)."""
    os.environ.update(env or {})
    torch.manual_seed(0)
    torch.set_num_threads(1)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False) as prof:
        runpy.run_path(path, run_name="__main__")
    running = peak = 0
    for _, nbytes in sorted(_memory_events(prof)):
        running += nbytes
        peak = max(peak, running)
    return peak


def _memory_events(prof: Any, device_type: str = "CPU") -> list[tuple[int, int]]:
    events = []
    for ev in prof.profiler.kineto_results.events():
        if ev.name() == "[memory]" and str(ev.device_type()).endswith(device_type):
            events.append((ev.start_ns(), ev.nbytes()))
    return events


def measure_script(path: str, argv: list[str] | None = None, steps: int = 2, device: str | None = None,
                   quiet: bool = False, memory_history: str | None = None, seed: int | None = 0) -> Measurement:
    """Run `path` as __main__ until `steps` optimizer steps have completed, and measure it."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: torch.cuda.is_available() is False on this machine")
    if seed is not None:
        torch.manual_seed(seed)
    rec = Recorder(device, steps)
    samples: list[int] = []
    letters: list[str] = []
    notes: list[str] = []
    peak, peak_mark = 0, -1
    if device == "cuda":
        torch.cuda.synchronize()
        if memory_history:
            torch.cuda.memory._record_memory_history(max_entries=200_000)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        error = _run(path, argv or [], rec, quiet)
        torch.cuda.synchronize()
        rec.mark("other", "(end)")
        if memory_history:
            torch.cuda.memory._dump_snapshot(memory_history)
            torch.cuda.memory._record_memory_history(enabled=None)
        prev_phase = "setup"
        for i, m in enumerate(rec.marks):
            if m.peak_before - base > peak:
                peak, peak_mark = m.peak_before - base, i - 1
            if i > 0:
                samples.append(m.peak_before - base)
                letters.append(PHASE_LETTER[prev_phase])
            samples.append(m.allocated - base)
            letters.append(PHASE_LETTER[m.phase])
            prev_phase = m.phase
        if base:
            notes.append(f"{base:,} bytes were already allocated on the GPU before the script ran (not counted)")
    else:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False) as prof:
            error = _run(path, argv or [], rec, quiet)
        markers: list[tuple[int, int]] = []
        for ev in prof.profiler.kineto_results.events():
            name = ev.name()
            if name.startswith("tpf:"):
                markers.append((ev.start_ns(), int(name[4:])))
        timeline = sorted([(t, 1, n) for t, n in _memory_events(prof)] + [(t, 0, i) for t, i in markers])
        running, current = 0, -1
        for _t, kind, value in timeline:
            if kind == 0:
                current = max(current, value)
                continue
            running += value
            if running > peak:
                peak, peak_mark = running, current
            if current >= 0:
                samples.append(running)
                letters.append(PHASE_LETTER[rec.marks[current].phase])
    if not rec.marks:
        notes.append("no nn.Module forward or optimizer step was seen: nothing to attribute")
    at = rec.marks[peak_mark] if 0 <= peak_mark < len(rec.marks) else None
    if at is not None:
        params, grads, opt, acts = at.categories
        if at.phase == "optimizer" and peak_mark + 1 < len(rec.marks):
            opt = max(opt, rec.marks[peak_mark + 1].categories[2])  # state created lazily inside this step
        phase, where, step = at.phase, at.where, at.step + 1  # marks count completed steps; this one is the next
    else:
        params = grads = opt = acts = 0
        phase, where, step = "setup", "", 0
    step = min(step, max(rec.step, 1)) if step else 0  # the interval after the last step belongs to it
    breakdown = {"parameters": params, "gradients": grads, "optimizer_state": opt, "activations": acts,
                 "temporaries": max(0, peak - params - grads - opt - acts)}
    models = []
    for rid in rec.root_order:
        root = rec.roots[rid]
        if not root.passes:
            continue
        types = {name or "(model)": type(mod).__name__ for name, mod in root.module.named_modules()}
        layers = [LayerMeasure(name, types.get(name, "?"), nbytes) for name, nbytes in root.last_pass.items()]
        models.append(ModelMeasure(type(root.module).__name__, layers, root.passes))
    if rec.step < steps:
        notes.append(f"the script completed only {rec.step} optimizer step(s) of the {steps} requested")
    values, phases = downsample(samples, "".join(letters))
    return Measurement(
        script=path, device=device, torch_version=torch.__version__.split("+")[0], steps_requested=steps, steps_completed=rec.step,
        peak_bytes=peak, peak_phase=phase, peak_where=where, peak_step=step, breakdown=breakdown, models=models,
        timeline=values, phases=phases, error=error, memory_history=memory_history if device == "cuda" else None, notes=notes,
    )


__all__ = ["StopScript", "cpu_peak", "measure_script"]
