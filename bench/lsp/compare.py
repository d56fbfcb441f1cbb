"""Two or more in-process runs of `bench_lsp.py --real --in-process` side by side (issue 19).

    .venv/bin/python bench/lsp/compare.py BEFORE.json AFTER.json [--max-lines 3500] [--worst 10]

For each run, over the files every run measured and up to `--max-lines` lines: how many meet
both targets (each kind's p95 CPU time to the first publication: valid keystrokes ≤ 50 ms,
half-typed ≤ 100 ms) and each one alone, the pooled p95 of both kinds, and the inlay hints at
open over 100 ms; then the files that miss a target in any run, with their p95 in each, and the
`--worst` files that got slower between the first and the last run (by the larger of their two
p95s over its target). Run the processes side by side (one per core, a worktree each), since
the machine's speed drifts by 30-50% over an hour.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import NamedTuple

VALID_MS, BROKEN_MS, HINTS_MS = 50.0, 100.0, 100.0


def p95(values: list[float]) -> float | None:
    """The nearest-rank 95th percentile, as `bench_lsp.py` prints it (None: nothing measured)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


class Entry(NamedTuple):
    lines: int
    valid: float | None  # p95, ms; None: the file has no such edit site
    broken: float | None
    hints: float | None  # inlay hints at open, ms
    cpu: dict[str, list[float]]  # the raw CPU seconds per kind


def load(path: Path) -> dict[str, Entry]:
    """File -> its `Entry` in one run."""
    found: dict[str, Entry] = {}
    for row in json.loads(path.read_text(encoding="utf-8"))["rows"]:
        cpu = row["ours"].get("cpu", {})
        valid, broken, hints = p95(cpu.get("valid", [])), p95(cpu.get("broken", [])), row["ours"].get("hints_first_cpu")
        found[row["file"]] = Entry(row["lines"], ms(valid), ms(broken), ms(hints), cpu)
    return found


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def meets(entry: Entry) -> tuple[bool, bool]:
    return (entry.valid is None or entry.valid <= VALID_MS), (entry.broken is None or entry.broken <= BROKEN_MS)


def cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="raw JSON of bench_lsp.py --real --in-process")
    parser.add_argument("--max-lines", type=int, default=3500)
    parser.add_argument("--worst", type=int, default=10)
    args = parser.parse_args(argv)
    runs = [load(path) for path in args.runs]
    common = sorted(set.intersection(*(set(run) for run in runs)))
    files = [f for f in common if runs[0][f].lines <= args.max_lines]
    print(f"{len(files)} files up to {args.max_lines:,} lines measured by every run ({len(common)} in all)\n")
    print("| run | both targets | valid p95 ≤ 50 ms | half-typed p95 ≤ 100 ms | pooled p95 valid / half-typed | hints at open > 100 ms |")
    print("|---|---|---|---|---|---|")
    for path, run in zip(args.runs, runs, strict=True):
        ok = [meets(run[f]) for f in files]
        valid, broken = (ms(p95([t for f in files for t in run[f].cpu.get(kind, [])])) for kind in ("valid", "broken"))
        slow_hints = sum(1 for f in common if (run[f].hints or 0.0) > HINTS_MS)
        print(
            f"| {path.name} | {sum(v and b for v, b in ok)} | {sum(v for v, _ in ok)} | {sum(b for _, b in ok)} "
            f"| {cell(valid)} / {cell(broken)} ms "
            f"| {slow_hints} |"
        )
    missing = [f for f in files if not all(all(meets(run[f])) for run in runs)]
    if missing:
        print("\nfiles that miss a target in a run (valid / half-typed p95, ms, per run):")
        for f in missing:
            cells = "   ".join(f"{cell(run[f].valid)} / {cell(run[f].broken)}" for run in runs)
            print(f"  {f} ({runs[0][f].lines:,} lines): {cells}")

    def load_factor(entry: Entry) -> float:
        return max((entry.valid or 0.0) / VALID_MS, (entry.broken or 0.0) / BROKEN_MS)

    if len(runs) > 1 and args.worst:
        first, last = runs[0], runs[-1]
        slower = sorted(files, key=lambda f: load_factor(first[f]) - load_factor(last[f]))[: args.worst]
        print(f"\nthe {args.worst} files that lost most between the first and the last run (share of target, first → last):")
        for f in slower:
            print(f"  {f}: {load_factor(first[f]):.2f} → {load_factor(last[f]):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
