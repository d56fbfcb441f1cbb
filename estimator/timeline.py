"""The training step's timeline: forward, loss, backward, optimizer step, and its peak.

Steady state (step 2 onwards): parameters, buffers and optimizer state are live through
the whole step; the batch is live; gradients are live through the step unless
`zero_grad(set_to_none=True)` (the default) frees them before forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_preflight.estimator.record import Op, Recorder
from torch_preflight.estimator.values import Optimizer


def cuda_round(n: int) -> int:
    return -(-n // 512) * 512 if n > 0 else 0


@dataclass
class Timeline:
    peak: int
    phase: str  # forward | backward | step
    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    other: int


def optimizer_bytes(opt: Optimizer | None, param_sizes: list[int], itemsize: int, device: str) -> tuple[int, int]:
    """(state bytes, transient bytes during step())."""
    if opt is None:
        return 0, 0
    total = sum(param_sizes) * itemsize
    largest = max(param_sizes, default=0) * itemsize
    rnd = cuda_round if device == "cuda" else (lambda n: n)
    per_param = sum(rnd(s * itemsize) for s in param_sizes)
    kind = opt.kind.lower()
    foreach = opt.foreach if opt.foreach is not None else device == "cuda"
    if kind in ("adam", "adamw", "nadam", "radam", "adamax"):
        if opt.eight_bit:
            return sum(rnd(s * 2) for s in param_sizes), 0
        state = 2 * per_param
        if opt.fused:
            return state, 0
        transient = per_param if foreach else 2 * largest
        if getattr(opt, "weight_decay", False) and kind == "adam":
            transient += per_param if foreach else largest
        return state, transient
    if kind == "sgd":
        state = per_param if opt.momentum else 0
        return state, 0
    if kind == "rmsprop":
        state = per_param * (1 + int(opt.momentum) + int(opt.centered))
        # the denominator sqrt(square_avg) + eps, and with weight decay a copy of the gradients (grad + wd * param)
        return state, (per_param if foreach else largest) * (1 + int(getattr(opt, "weight_decay", False)))
    if kind == "adagrad":
        return per_param, per_param if foreach else largest
    if kind == "lbfgs":  # one flat vector of every parameter: history_size pairs of steps and gradient differences,
        # the direction `d` and `prev_flat_grad` in its state, and the flat gradient a closure evaluation is read into
        # (held while the next evaluation runs); step() makes a step and a gradient difference per update
        flat = rnd(sum(param_sizes) * itemsize)
        return (2 * opt.history + 3) * flat, 2 * flat
    return 2 * per_param, per_param if foreach else 2 * largest
    _ = total


def simulate(
    rec: Recorder | None,
    *,
    params: int,
    grads: int,
    state: int,
    opt_transient: int,
    batch: int,
    grads_persist: bool,
    device: str,
    held: list[tuple[int, int]] | None = None,
    grads_in_forward: bool = False,
) -> Timeline:
    """`grads_in_forward`: gradients are cleared between forward and backward, so the last step's live through forward.
    `held`: forward outputs the script keeps in variables (storage id, bytes): live through backward and the step
    (and, in the steady state, through the next forward until it rebinds them), even after autograd frees them."""
    rnd = cuda_round if device == "cuda" else (lambda n: n)
    saved_ids = {sid for op in rec.ops for sid, _ in op.saved} if rec is not None else set()
    kept = {sid for sid, _ in held or ()}
    held_extra = sum(rnd(b) for sid, b in held or () if sid not in saved_ids)  # the saved ones are counted as activations
    held_saved = sum(rnd(b) for sid, b in held or () if sid in saved_ids)  # and live on after backward, through the step
    batch += held_extra
    base = params + state + batch + (grads if grads_persist else 0)
    best = Timeline(base, "forward", params, grads if grads_persist else 0, state, 0, batch)

    def consider(total: int, phase: str, g: int, act: int, other: int) -> None:
        nonlocal best
        if total > best.peak:
            best = Timeline(total, phase, params, g, state, act, other)

    if rec is not None and rec.ops:
        # forward: saved tensors accumulate; each op's unsaved output is live while the next op runs
        # (its input); an op's extra workspace (transient beyond its output) only while it runs, and
        # an output that some op saves is already counted with the activations
        # and an output that a variable of the running code holds (`emb = self.wte(idx)` in forward) is live until
        # the variable is rebound or its function returns
        saved_so_far: set[int] = set()
        act = 0
        prev: Op | None = None
        starts: dict[int, list[int]] = {}  # op index -> the bound outputs that are held from then on
        first_producer: dict[int, int] = {}
        for i, op in enumerate(rec.ops):
            first_producer.setdefault(op.out_id, i)
        for sid, (until, _b) in rec.released.items():
            p = first_producer.get(sid)
            if p is not None and until > p + 2:  # longer than the producing op and the next one
                starts.setdefault(p + 1, []).append(sid)
        bound: dict[int, int] = {}  # storage id -> bytes, of the held outputs not saved (yet)
        for i, op in enumerate(rec.ops):
            for sid in starts.get(i, ()):
                if sid not in saved_so_far:  # a saved one is counted with the activations
                    bound[sid] = rnd(rec.released[sid][1])
            for sid in [sid for sid in bound if rec.released[sid][0] <= i]:
                del bound[sid]
            for sid, b in op.saved:
                bound.pop(sid, None)
                if sid not in saved_so_far:
                    saved_so_far.add(sid)
                    act += rnd(b)
            out = 0 if op.out_id in saved_so_far else rnd(op.out_bytes)
            transient = out + rnd(op.transient) - rnd(op.out_bytes)
            prev_out = 0 if prev is None or prev.out_id in saved_so_far else rnd(prev.out_bytes)
            held_here = sum(b for sid, b in bound.items() if sid != op.out_id and (prev is None or sid != prev.out_id))
            fwd_grads = grads if grads_in_forward and not grads_persist else 0  # cleared only after this forward
            consider(base + fwd_grads + act + transient + prev_out + held_here, "forward",
                     grads if grads_persist or grads_in_forward else 0, act, batch + transient + prev_out + held_here)
            prev = op
        # backward: free each saved tensor after the earliest op that holds it has run backward
        last_holder: dict[int, int] = {}
        sizes: dict[int, int] = {}
        for i, op in enumerate(rec.ops):
            for sid, b in op.saved:
                last_holder.setdefault(sid, i)
                sizes[sid] = rnd(b)
        live_act = sum(sizes.values())
        g_alloc = grads if grads_persist else 0
        seen_params: set[int] = set()
        # a parameter several ops use (a cell's weights at every time step, tied embeddings) gets one gradient per use:
        # autograd adds each to the running sum out of place, so the sum, the new one and their total are live at once
        contributed: set[int] = set()
        # gradients waiting for their producer's backward, by the storage they are the gradient of: a
        # tensor used twice (a residual or skip connection) gets its first gradient early and holds it
        # until the producer runs. Gradients of tensors no recorded op produced flow to the next op.
        producer = {op.out_id: i for i, op in enumerate(rec.ops) if op.out_id}
        pending: dict[int, int] = {}
        untracked = rnd(rec.ops[-1].out_bytes)
        for i in range(len(rec.ops) - 1, -1, -1):
            op = rec.ops[i]
            incoming = pending.pop(op.out_id, None)
            waiting = sum(pending.values())
            grad_in_flight = (incoming if incoming is not None else untracked) + waiting
            orphan = sum(rnd(b) for sid, b in op.in_grads if not (sid in producer and producer[sid] < i))
            new_grads = 0
            if not grads_persist:
                for key, b in op.params:
                    if key not in seen_params:
                        seen_params.add(key)
                        new_grads += rnd(b)
            accumulate = sum(2 * rnd(b) for key, b in op.params if key in contributed)
            contributed.update(key for key, _ in op.params)
            produced = rnd(op.in_grad_bytes) + accumulate
            casts = rnd(op.cast_grad_bytes)
            recompute = rnd(op.recompute)
            work = rnd(op.backward_transient)
            # autograd releases a node's saved tensors as soon as its backward has run; the grads of
            # weights it used through autocast casts become .grad only after that (the cast's node)
            late = new_grads if casts else 0
            total = base + live_act + g_alloc + new_grads - late + grad_in_flight + produced + casts + recompute + work
            consider(total, "backward", g_alloc + new_grads - late, live_act + recompute, batch + grad_in_flight + produced + casts + work)
            for sid, _ in op.saved:
                if last_holder.get(sid) == i and sid in sizes and sid not in kept:
                    live_act -= sizes.pop(sid)
            if late:
                consider(base + live_act + g_alloc + new_grads + produced + casts, "backward", g_alloc + new_grads, live_act,
                         batch + produced + casts)
            g_alloc += new_grads
            for sid, b in op.in_grads:
                if sid in producer and producer[sid] < i and sid not in pending:
                    pending[sid] = rnd(b)  # a second gradient for it is summed into this one
            untracked = orphan if op.in_grads else produced
    # optimizer step: all grads live, plus the step's temporaries
    consider(params + state + batch + held_saved + grads + opt_transient, "step", grads, held_saved, batch + opt_transient)
    return best
