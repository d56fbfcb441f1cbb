"""Where one keystroke's time goes, per phase (issue 19): the keystrokes of `bench_lsp.py
--real` replayed through the server's handlers in this process, with each phase's CPU time
(`time.process_time`) measured exclusively (a phase called inside another is charged to
itself, not to its caller), so the phases of one keystroke add up to its total.

    .venv/bin/python bench/lsp/phases.py [--pairs 10] [--only d2l ...] [--profile N]

Phases: `parse` (the top-level statements: parso's diff parser or `ast`), `model` (the
incremental builder's pieces and merge, broken statements' repair included), `dataflow`
(the provenance index and its queries), `training` (the training model: expansions,
iterations, training loops), `rule TPFxxx` (the rule's own work), `cache` (the rule cache's
bookkeeping: name links, dirty closure, carried findings, suppressions), `publication`
(conversion to protocol items), `shapes*` (TPF501's interpretation of the module). A whole-module
rule, and what it asks of the data flow and the training model first, is starred: the server
publishes the rest before it runs, and "to the first publication" is that interim publication's
time, the keystroke latency `bench_lsp.py` reports. `--profile N` also prints cProfile's N
costliest functions (by cumulative time, or `SORT=tottime`) for the keystrokes of each file.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import pstats
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_lsp import change, pairs
from realfiles import broken_edits, files, sample, valid_edits

_stack: list[list[Any]] = []  # [phase, start, time of nested phases]
_totals: dict[str, float] = defaultdict(float)
_kind = [""]  # the kind of keystroke being replayed: phases are charged per kind


def _phase(label: str, fn: Any, consume: bool = False) -> Any:
    """`fn` charged to `label`; `consume`: a generator (a rule), run to its end inside."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rule = next((f[0] for f in reversed(_stack) if f[0].startswith("rule ")), None)
        frame = [label if rule is None or label.startswith("rule ") else f"{label} ({rule[5:]})", time.process_time(), 0.0]
        _stack.append(frame)
        try:
            return list(fn(*args, **kwargs)) if consume else fn(*args, **kwargs)
        finally:
            _stack.pop()
            spent = time.process_time() - frame[1]
            _totals[f"{_kind[0]}\t{frame[0]}"] += spent - frame[2]
            if _stack:
                _stack[-1][2] += spent

    return wrapper


def instrument() -> None:
    from torch_preflight.core import dataflow, training
    from torch_preflight.core.incremental import IncrementalBuilder
    from torch_preflight.rules.registry import ALL_RULES
    from torch_preflight.server.documents import Document
    from torch_preflight.server.server import PreflightServer

    from torch_preflight import scoped

    Document._statements = _phase("parse", Document._statements)  # type: ignore[method-assign]
    IncrementalBuilder.build = _phase("model", IncrementalBuilder.build)  # type: ignore[method-assign]
    IncrementalBuilder.submodel = _phase("model", IncrementalBuilder.submodel)  # type: ignore[method-assign]
    scoped.ScopedChecker.check = _phase("cache", scoped.ScopedChecker.check)  # type: ignore[method-assign]
    scoped.ScopedChecker._shape_facts = _phase("shapes*", scoped.ScopedChecker._shape_facts)  # type: ignore[method-assign]
    PreflightServer._items = _phase("publication", PreflightServer._items)  # type: ignore[method-assign]
    for name, member in vars(dataflow.DataFlow).items():
        if callable(member) and not name.startswith("__") and not isinstance(member, (staticmethod, classmethod)):
            setattr(dataflow.DataFlow, name, _phase("dataflow", member))
    for name in ("expanded", "iteration", "training_loops", "backward_loops", "framework_steps", "step_hooks", "summary"):
        member = vars(training.TrainingModel)[name]
        if isinstance(member, functools.cached_property):
            member.func = _phase("training", member.func)
        else:
            setattr(training.TrainingModel, name, _phase("training", member))
    for rule in ALL_RULES:  # a whole-module rule (the second publication's) is starred
        star = "" if rule.code in scoped.LOCAL_RULES else "*"
        object.__setattr__(rule, "check", _phase(f"rule {rule.code}{star}", rule.check, consume=True))


def _enclosing(text: str) -> dict[int, str]:
    """Line (0-based) -> the qualname of the innermost function or class holding it."""
    import ast

    where: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                for line in range(child.lineno - 1, child.end_lineno or child.lineno):
                    where[line] = name
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(text), "")
    return where


def replay(path: Path, pairs_n: int, profile: int, each: bool = False) -> tuple[dict[str, list[float]], dict[str, float], int]:
    from torch_preflight.server.documents import Document
    from torch_preflight.server.server import PreflightServer

    class Server(PreflightServer):
        encoding = "utf-16"

    text = path.read_text(encoding="utf-8")
    keys = pairs("valid", sample(valid_edits(text), pairs_n)) + pairs("broken", sample(broken_edits(text), pairs_n))
    server = Server()
    server.config_ready.set()
    uri = path.resolve().as_uri()
    doc = server.docs[uri] = Document(uri, text, 1, project=server.project)
    server.lsp_diagnostics(doc)
    asyncio.run(server.settle(doc))
    _totals.clear()
    per_kind: dict[str, list[float]] = defaultdict(list)
    firsts: list[float] = []  # CPU time at the interim publication (what bench_lsp.py times)

    def early(items: list[Any]) -> None:
        firsts.append(time.process_time())

    prof = cProfile.Profile() if profile else None
    where = _enclosing(text) if each else {}
    for n, key in enumerate(keys):
        before = dict(_totals)
        c = time.process_time()
        _kind[0] = key[0]
        doc.update([change(key)], n + 2, "utf-16")
        if prof is not None:
            prof.enable()
        firsts.clear()
        server.lsp_diagnostics(doc, early=early)
        if prof is not None:
            prof.disable()
        done = time.process_time()
        per_kind[key[0]].append(done - c)
        per_kind["first " + key[0]].append((firsts[0] if firsts else done) - c)
        if each:
            spent = sorted(((v - before.get(k, 0.0), k.split("\t", 1)[1]) for k, v in _totals.items()), reverse=True)[:4]
            line = key[1]
            print(f"{key[0]:6} line {line + 1:5} {where.get(line, '<module>')[:40]:40} {per_kind[key[0]][-1] * 1e3:6.1f} ms"
                  f" (first {per_kind['first ' + key[0]][-1] * 1e3:5.1f})  "
                  + ", ".join(f"{label} {ms * 1e3:.1f}" for ms, label in spent))
    if prof is not None:
        pstats.Stats(prof).sort_stats(__import__("os").environ.get("SORT", "cumulative")).print_stats(profile)
    server.docs.clear()
    doc.close()
    server.executor.shutdown()
    return per_kind, dict(_totals), len(keys)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--only", action="append")
    parser.add_argument("--min-lines", type=int, default=10**9, help="corpus files over this many lines too (default: none)")
    parser.add_argument("--profile", type=int, default=0)
    parser.add_argument("--each", action="store_true", help="one line per keystroke: where it was typed and its costliest phases")
    args = parser.parse_args()
    instrument()
    for path in files(args.min_lines):
        if args.only and not any(o in str(path) for o in args.only):
            continue
        per_kind, totals, _ = replay(path, args.pairs, args.profile, args.each)
        for kind, times in per_kind.items():
            if kind.startswith("first "):
                continue
            n, total = len(times), sum(times)
            first = sorted(per_kind["first " + kind])
            print(f"\n{path.name}, {kind}: {n} keystrokes, mean {total / n * 1e3:.1f} ms CPU, p50 {statistics.median(times) * 1e3:.1f} ms;"
                  f" to the first publication p50 {statistics.median(first) * 1e3:.1f}, p95 {first[min(n - 1, round(0.95 * (n - 1)))] * 1e3:.1f} ms")
            mine = {label.split("\t", 1)[1]: spent for label, spent in totals.items() if label.startswith(kind + "\t")}
            mine["other (handlers, text update)"] = total - sum(mine.values())
            for label, spent in sorted(mine.items(), key=lambda kv: -kv[1]):
                if spent / n >= 0.0005:
                    print(f"  {label:32} {spent / n * 1e3:7.1f} ms  {spent / total:5.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
