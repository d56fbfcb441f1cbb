"""Where a keystroke's time goes, per rule: the real-files mode's keystrokes replayed
in-process (bench_lsp.py `--real --in-process`), with every rule of the registry timed.

For each file: CPU ms per keystroke (median and p95 over the keystrokes of both kinds) of
each rule's `check` (its findings consumed; the first rule to ask for a lazily built fact,
such as the data-flow index or the training model, pays for it), of the facts the rule cache
computes before the whole-module rules run (TPF501's shape facts, TPF401's memory estimate),
and of the rest of the keystroke (the document update, parse and model build, the rule
cache, conversion).
`--profile N` adds cProfile's N costliest functions (cumulative) over all keystrokes.

Usage: python bench/lsp/rule_costs.py [--pairs 10] [--only d2l] [--top 8] [--profile 25]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_lsp import pairs, q95, replay
from realfiles import broken_edits, files, sample, valid_edits
from torch_preflight.rules.registry import ALL_RULES
from torch_preflight.server.server import PreflightServer

import torch_preflight.scoped as scoped

_spent: dict[str, float] = {}


def _timed(code: str, check: Any) -> Any:
    def run(ctx: Any) -> Iterator[Any]:
        start = time.process_time()
        found = list(check(ctx))
        _spent[code] = _spent.get(code, 0.0) + time.process_time() - start
        return iter(found)

    return run


def _timed_call(name: str, fn: Any) -> Any:
    def run(*args: Any) -> Any:
        start = time.process_time()
        try:
            return fn(*args)
        finally:
            _spent[name] = _spent.get(name, 0.0) + time.process_time() - start

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10, help="edits (typed + deleted) per kind and file")
    parser.add_argument("--only", action="append", help="only files whose path contains this (repeatable)")
    parser.add_argument("--top", type=int, default=8, help="rules listed per file")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile's N costliest functions")
    args = parser.parse_args()
    for rule in ALL_RULES:
        object.__setattr__(rule, "check", _timed(rule.code, rule.check))
    # what the rule cache computes for the whole-module rules before they run
    scoped._shapes = _timed_call("TPF501's shape facts", scoped._shapes)  # type: ignore[assignment]
    scoped._memory = _timed_call("TPF401's memory estimate", scoped._memory)  # type: ignore[assignment]
    per_keystroke: list[dict[str, float]] = []  # rule -> CPU seconds, per call of lsp_diagnostics
    profile: cProfile.Profile | None = None
    diagnostics = PreflightServer.lsp_diagnostics

    def recorded(self: PreflightServer, *a: Any, **k: Any) -> Any:
        _spent.clear()
        cold = not per_keystroke  # the first analysis of the file: not profiled
        found = diagnostics(self, *a, **k) if profile is None or cold else profile.runcall(diagnostics, self, *a, **k)
        per_keystroke.append(dict(_spent))
        return found

    PreflightServer.lsp_diagnostics = recorded  # type: ignore[method-assign]

    paths = [p for p in files(0) if "lsp/files" in str(p) and (not args.only or any(o in str(p) for o in args.only))]
    for path in paths:
        text = path.read_text(encoding="utf-8")
        keys = pairs("valid", sample(valid_edits(text), args.pairs)) + pairs("broken", sample(broken_edits(text), args.pairs))
        profile = cProfile.Profile() if args.profile else None
        result = asyncio.run(replay(path, text, keys))
        totals = [c for kind in result["cpu"].values() for c in kind]
        rows = per_keystroke[1:]  # the first entry is the cold start's
        per_keystroke.clear()
        print(f"\n{path.name} ({text.count(chr(10)):,} lines, {len(totals)} keystrokes, CPU ms)")
        print("| step | p50 | p95 | mean |")
        print("|---|---|---|---|")
        codes = sorted({c for r in rows for c in r}, key=lambda c: -statistics.fmean(r.get(c, 0.0) for r in rows))
        rest = [t - sum(r.values()) for t, r in zip(totals, rows, strict=True)]  # every entry is disjoint
        shown = [("keystroke (all)", totals), ("outside the rules", rest)]
        shown += [(code, [r.get(code, 0.0) for r in rows]) for code in codes[: args.top]]
        shown.append((f"the other {max(0, len(codes) - args.top)} rules", [sum(r.get(c, 0.0) for c in codes[args.top :]) for r in rows]))
        for name, values in shown:
            print(f"| {name} | {statistics.median(values) * 1000:.1f} | {q95(values) * 1000:.1f} | {statistics.fmean(values) * 1000:.1f} |")
        if profile is not None:
            pstats.Stats(profile).sort_stats("cumulative").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
