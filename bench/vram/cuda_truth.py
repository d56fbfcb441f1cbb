"""Ground truth on a GPU: the CUDA peak of every benchmark variant (run where a GPU is lent).

For each script and variant of compare.py it writes the CUDA variant (the same file with
`torch.autocast("cpu", ...)` turned into `torch.autocast("cuda", ...)`), then runs it in a fresh
process with `torch.set_default_device("cuda")`, so the model, the batch and every tensor the
script creates live on the GPU. It reads the caching allocator's counters around every
optimizer step (a global step post hook): the peak of the whole run, and the steady peak, the
largest `max_memory_allocated()` of steps 2 and 3, once the optimizer state exists. That
steady peak is what `estimate --device cuda` predicts.

Usage (on the GPU machine): python3 bench/vram/cuda_truth.py --out results.json [--jobs 8] [--snapshots DIR] [--large]
          (one case):       python3 bench/vram/cuda_truth.py --case FILE [--snapshot FILE.pickle]
Prints progress to stderr; writes one JSON object {torch, gpu, probes, cases: [...]}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare import SCRIPTS, cuda_variant, large_variants, variants, write_variant  # noqa: E402


def run_case(path: str, snapshot: str | None) -> dict[str, object]:
    import runpy

    import torch

    torch.manual_seed(0)
    torch.set_default_device("cuda")
    torch.cuda.init()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    if snapshot:
        torch.cuda.memory._record_memory_history(max_entries=500_000, stacks="python")
    torch.cuda.reset_peak_memory_stats()
    steps: list[dict[str, int]] = []

    def after_step(_opt, _args, _kwargs) -> None:
        torch.cuda.synchronize()
        steps.append({"peak": torch.cuda.max_memory_allocated() - base, "allocated": torch.cuda.memory_allocated() - base})
        torch.cuda.reset_peak_memory_stats()

    from torch.optim.optimizer import register_optimizer_step_post_hook

    handle = register_optimizer_step_post_hook(after_step)
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        handle.remove()
    torch.cuda.synchronize()
    if snapshot:
        torch.cuda.memory._dump_snapshot(snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
    return {
        "base": base,
        "steps": steps,
        "peak": max(s["peak"] for s in steps) if steps else None,
        "steady_peak": max(s["peak"] for s in steps[1:]) if len(steps) > 1 else None,
    }


def probes() -> dict[str, int]:
    """What the first matmul / conv leaves allocated (cuBLAS / cuDNN workspaces in the caching allocator)."""
    code = r"""
import json, torch
torch.set_default_device("cuda")
out = {}
a0 = torch.cuda.memory_allocated()
x = torch.randn(64, 256, requires_grad=True); w = torch.randn(256, 256, requires_grad=True)
torch.cuda.synchronize(); a1 = torch.cuda.memory_allocated()
y = x @ w; torch.cuda.synchronize(); out["after_matmul"] = torch.cuda.memory_allocated() - a1 - y.untyped_storage().nbytes()
y.sum().backward(); torch.cuda.synchronize()
with torch.autocast("cuda", dtype=torch.bfloat16):
    z = x @ w
torch.cuda.synchronize(); out["after_bf16_matmul"] = torch.cuda.memory_allocated() - a1
c = torch.nn.Conv2d(3, 16, 3); i = torch.randn(8, 3, 32, 32)
torch.cuda.reset_peak_memory_stats(); before = torch.cuda.memory_allocated()
o = c(i); o.sum().backward(); torch.cuda.synchronize()
out["conv_step_transient"] = torch.cuda.max_memory_allocated() - before
out["cudnn"] = torch.backends.cudnn.version()
print(json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    return json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr[-2000:]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case")
    parser.add_argument("--snapshot")
    parser.add_argument("--out", default="cuda_results.json")
    parser.add_argument("--snapshots")
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--only")
    parser.add_argument("--large", action="store_true", help="the 8x-batch variants instead of the standard four")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.snapshot)))
        return 0
    import torch

    cases = []
    for name in SCRIPTS:
        if args.only and args.only != name:
            continue
        text = cuda_variant((HERE / f"{name}.py").read_text(encoding="utf-8"))
        for tag, values in (large_variants(text) if args.large else variants(text)):
            cases.append((name, tag, write_variant(name, tag + "-cuda", text, values)))
    if args.snapshots:
        os.makedirs(args.snapshots, exist_ok=True)

    def one(case: tuple[str, str, Path]) -> dict[str, object]:
        name, tag, path = case
        cmd = [sys.executable, __file__, "--case", str(path)]
        if args.snapshots:
            cmd += ["--snapshot", os.path.join(args.snapshots, f"{name}__{tag}.pickle")]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        row: dict[str, object] = {"script": name, "variant": tag}
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode == 0 and lines:
            row.update(json.loads(lines[-1]))
        else:
            row["error"] = proc.stderr[-3000:]
        sys.stderr.write(f"{name:14} {tag:18} {row.get('steady_peak', row.get('error', '?'))!s:.200}\n")
        return row

    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(one, cases))
    result = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "probes": probes(), "cases": rows}
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
