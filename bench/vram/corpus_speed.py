"""The interpreter's two paths on a real-world case (bench/vram/realworld.py's checkouts): the estimate as it stands,
with loops over many values compiled (estimator/interp_fast.py) and with every loop on the general path, alternately,
each run's CPU time and units of work (the work budget is lifted for both), and whether both give the same report.

Usage: python bench/vram/corpus_speed.py [--case wlm-lstm] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))


def run(case: dict, compiled: bool) -> tuple[float, float, int | None, bool]:
    """CPU seconds, units of work (the work budget spent, with what the files read granted) and the report's peak."""
    import torch_preflight.estimator as estimator
    from torch_preflight.estimator import EstimateOptions, estimate_source, interp, interp_fast, scope

    used: list[float] = []
    original_run, original_loop, budget = interp.Interpreter.run, interp_fast.Compiler.loop, estimator.ESTIMATE_STEPS
    estimator.ESTIMATE_STEPS = 10**9  # what each path spends, not where the budget would stop it

    def counted(it: interp.Interpreter) -> None:
        original_run(it)
        used.append(it.max_steps - it.steps_left + it.corpus_bytes * scope.STEPS_PER_BYTE)

    interp.Interpreter.run = counted  # type: ignore[method-assign]
    if not compiled:  # every pass on the general path (the files it reads are granted the same budget)
        interp_fast.Compiler.loop = lambda self, node, scope, items: self.it.run_for(node, scope, items, True, None)  # type: ignore[method-assign]
    work = ROOT / "bench" / "out" / "realworld" / case["name"] / case["dir"]
    cwd = os.getcwd()
    os.chdir(work)
    try:
        started = time.process_time()
        reports = estimate_source((work / case["script"]).read_text(), str(work / case["script"]),
                                  EstimateOptions(device="cpu", argv=tuple(case["argv"])))
        cpu = time.process_time() - started
    finally:
        os.chdir(cwd)
        interp.Interpreter.run, interp_fast.Compiler.loop = original_run, original_loop  # type: ignore[method-assign]
        estimator.ESTIMATE_STEPS = budget
    return cpu, used[0], reports[0].peak_bytes if reports else None, bool(reports and reports[0].complete)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", default="wlm-lstm")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    manifest = json.loads((HERE / "realworld" / "manifest.json").read_text())
    case = next(c for c in manifest["cases"] if c["name"] == args.case)
    for _ in range(args.runs):
        for compiled in (True, False):
            cpu, units, peak, complete = run(case, compiled)
            print(f"{case['name']:16} {'compiled' if compiled else 'general':9} cpu {cpu:6.2f} s  units {units:12,.0f}  "
                  f"peak {peak}  complete {complete}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
