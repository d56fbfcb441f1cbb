"""Estimate vs CUDA measurement: the `--device cuda` column of `make bench-vram`.

The CUDA truth comes from a GPU (bench/vram/cuda_truth.py, run where one is lent) and is committed
as bench/vram/cuda_results.json with the GPU and torch version it was measured with. This script
needs no GPU and no torch: it writes the same CUDA variants (compare.py's variants with CUDA
autocast), estimates each with `--device cuda`, and prints the error against the steady peak
(the largest `max_memory_allocated()` of steps 2 and 3).

Usage: python bench/vram/compare_cuda.py [--results bench/vram/cuda_results.json] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))
from compare import SCRIPTS, cuda_variant, large_variants, variants, write_variant  # noqa: E402


def estimate_cuda(path: Path) -> int | None:
    from torch_preflight.estimator import EstimateOptions, estimate_source

    reports = estimate_source(path.read_text(encoding="utf-8"), str(path), EstimateOptions(device="cuda"))
    return reports[0].peak_bytes if reports else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", default=str(HERE / "cuda_results.json"))
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    results = json.loads(Path(args.results).read_text(encoding="utf-8"))
    large = Path(args.results).with_name("cuda_results_large.json")  # the 8x-batch variants, when measured
    cases = results["cases"] + (json.loads(large.read_text(encoding="utf-8"))["cases"] if large.exists() else [])
    truth = {(c["script"], c["variant"]): c for c in cases}
    rows, errors = [], []
    for name in SCRIPTS:
        text = cuda_variant((HERE / f"{name}.py").read_text(encoding="utf-8"))
        for tag, values in variants(text) + large_variants(text):
            if (name, tag) not in truth and (tag, values) in large_variants(text):
                continue  # the 8x-batch variants are optional (cuda_truth.py --large)
            case = truth.get((name, tag), {})
            measured = case.get("steady_peak")
            est = estimate_cuda(write_variant(name, tag + "-cuda", text, values))
            err = None if not measured or est is None else (est - measured) / measured * 100
            if err is not None:
                errors.append(abs(err))
            why = "" if measured else (case.get("error", "not measured").strip().splitlines() or ["?"])[-1][:90]
            rows.append((name, tag, measured, est, err, why))
    mib = lambda n: "-" if n is None else f"{n / 2**20:.2f}"  # noqa: E731
    pct = lambda e: "-" if e is None else f"{e:+.1f}%"  # noqa: E731
    print(f"CUDA truth: {results['gpu']}, torch {results['torch']} (bench/vram/cuda_results.json)")
    if args.markdown:
        print("| script | variant | measured CUDA (MiB) | estimate --device cuda (MiB) | error |")
        print("|---|---|---:|---:|---:|")
        for name, tag, measured, est, err, why in rows:
            print(f"| {name} | {tag} | {mib(measured) if measured else 'not run: ' + why} | {mib(est)} | {pct(err)} |")
    else:
        print(f"{'script':14} {'variant':18} {'measured':>10} {'estimate':>10} {'error':>8}")
        for name, tag, measured, est, err, why in rows:
            print(f"{name:14} {tag:18} {mib(measured):>10} {mib(est):>10} {pct(err):>8}  {why}")
    if errors:
        print(f"\nCUDA: median |error| {statistics.median(errors):.2f}%   worst |error| {max(errors):.2f}%   "
              f"({len(errors)} cases, MiB = 2^20 bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
