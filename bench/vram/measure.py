"""Ground truth: run one benchmark script under torch on the CPU and report its peak memory.

The measuring code is torch_preflight.measure.runtime.cpu_peak (shared with `torch-preflight measure`).

The script runs inside `torch.profiler.profile(profile_memory=True)`; every allocator event
([memory] events, +bytes on allocation, -bytes on free) is replayed in time order into a
running sum, and its maximum is the peak. On a GPU (`--device cuda`) the script is instead
run with the model on CUDA and `torch.cuda.max_memory_allocated()` is the truth.

Usage: bench/.venv-torch/bin/python bench/vram/measure.py SCRIPT [--batch-size N] [--autocast] [--optimizer NAME]
Prints one JSON line: {"script", "peak_bytes", ...}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# the measurement lives in the package (torch_preflight.measure.runtime, also behind `torch-preflight measure`)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from torch_preflight.measure.runtime import cpu_peak


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("script")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--autocast", action="store_true")
    parser.add_argument("--optimizer")
    args = parser.parse_args()
    env = {}
    if args.batch_size:
        env["BENCH_BATCH"] = str(args.batch_size)
    if args.autocast:
        env["BENCH_AUTOCAST"] = "1"
    if args.optimizer:
        env["BENCH_OPT"] = args.optimizer
    peak = cpu_peak(args.script, env)
    print(json.dumps({"script": args.script, "peak_bytes": peak, **env}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
