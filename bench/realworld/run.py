"""`make bench-real`: precision on real code, recall on injected bugs, speed against the peer.

Expects the corpus (bench/realworld/corpus.py) and the mutants (bench/realworld/mutate.py)
under bench/out. Runs, in one process so that every ratio comes from the same run:

1. speed: `torch-preflight check` (ours, the project venv) over torch's files and over the
   training scripts at -j 1 and -j 2 with a cold (empty) and a warm result cache; the
   published peer `torch-preflight==0.5.0` (bench/.venv-peer, used only through its CLI)
   and `ruff check` (speed-of-light reference) over the same files. The peer is slow, so it
   runs over an every-Nth-file sample of torch, which ours and ruff also run over;
2. precision: ours over the whole corpus (JSON), every finding written to
   bench/out/findings.json and bench/out/findings.md, matched with the verdicts kept in
   bench/realworld/verdicts.json; the peer over the training scripts;
3. recall: both tools over every mutant and its clean original.

Writes bench/out/{speed,recall,precision}.json, the tables on stdout, the `bench-real`
section of docs/benchmarks.md and the "Real-world corpus (make bench-real)" section of
docs/false-positives.md (each between markers; the rest of those files is left alone).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table
from score import PEER_EXPECTED  # the peer's codes per bug kind, shared with the strict scorer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = ROOT / "bench" / "out"
CORPUS = OUT / "corpus"
MUTANTS = OUT / "mutants"
PYTHON = ROOT / ".venv" / "bin" / "python"
OURS = ROOT / ".venv" / "bin" / "torch-preflight"
SNAPSHOT = OUT / "snapshot"  # a frozen copy of our package, so that edits made during the run change nothing
OURS_CMD = [str(PYTHON), "-m", "torch_preflight"]
OURS_ENV = {"PYTHONPATH": str(SNAPSHOT), "PYTHONSAFEPATH": "1"}  # not the cwd first
RUFF = ROOT / ".venv" / "bin" / "ruff"
PEER = ROOT / "bench" / ".venv-peer" / "bin" / "torch-preflight"
PEER_VERSION = "0.5.0"
VERDICTS = HERE / "verdicts.json"
EQUIVALENT = HERE / "equivalent.json"  # mutants that inject no bug, verified by reading the code
DOC_BENCH = ROOT / "docs" / "benchmarks.md"
DOC_FP = ROOT / "docs" / "false-positives.md"
BENCH_START, BENCH_END = "<!-- bench-real:start -->", "<!-- bench-real:end -->"
FP_START, FP_END = "<!-- bench-real-fp:start -->", "<!-- bench-real-fp:end -->"


console = Console(width=150)
REUSE = [False]
INTERNAL_ERRORS: list[tuple[str, int, str]] = []  # (command, count, stderr tail)


def _load_note(start: float, end: float) -> str:
    """Say whether other work competed with the benchmark (2 CPUs: a load above 2 means it did)."""
    note = f"Load average (1 min) {start:.1f} at the start and {end:.1f} at the end"
    if max(start, end) > 2:
        return note + ": above 2 on this 2-CPU machine, other work competed with the benchmark and the figures are noisy."
    return note + ": nothing else competed for the 2 CPUs."


def log(msg: str) -> None:
    console.print(f"[dim]\\[bench-real {time.strftime('%H:%M:%S')}][/dim] {msg}")


# ---------------------------------------------------------------- running tools


@dataclass
class Timing:
    tool: str
    target: str
    jobs: int
    cache: str  # cold / warm / none
    files: int
    lines: int
    wall_s: float
    cpu_s: float
    rc: int

    @property
    def lines_per_s(self) -> float:
        return self.lines / self.wall_s if self.wall_s else 0.0


def run_timed(cmd: list[str], env: dict[str, str] | None = None, stdout_path: Path | None = None) -> tuple[float, float, int]:
    if cmd[: len(OURS_CMD)] == OURS_CMD:
        env = {**OURS_ENV, **(env or {})}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(stdout_path or os.devnull, "wb") as out:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    err = proc.stderr.decode(errors="replace")
    internal = err.count("internal error while checking")
    if internal:
        INTERNAL_ERRORS.append((" ".join(cmd[:2]), internal, err[-1500:]))
        log(f"[red]{internal} internal errors[/red] in {Path(cmd[0]).parent.parent.name}/{cmd[1]}")
    if proc.returncode not in (0, 1):
        log(f"[red]{cmd[0]} exited {proc.returncode}[/red]: {err[-2000:]}")
    return wall, cpu, proc.returncode


def take_snapshot() -> None:
    """Copy our package (its package-dir layout from pyproject.toml) into bench/out/snapshot."""
    shutil.rmtree(SNAPSHOT, ignore_errors=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "torch_preflight", SNAPSHOT / "torch_preflight", ignore=ignore)
    for sub in ("core", "rules", "estimator", "server"):
        shutil.copytree(ROOT / sub, SNAPSHOT / "torch_preflight" / sub, ignore=ignore)
    # Byte-compile it, as `pip install` does: with PYTHONDONTWRITEBYTECODE set (as on this machine) every
    # run would otherwise compile ~60 modules from source again, ~0.1 s that no installed copy pays.
    subprocess.run([str(PYTHON), "-m", "compileall", "-q", str(SNAPSHOT)], check=True, stdout=subprocess.DEVNULL)


def ours_python(code: str) -> str:
    env = {**os.environ, **OURS_ENV}
    return subprocess.run([str(PYTHON), "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                          check=True).stdout.strip()


def ours_cmd(files: list[Path], jobs: int, cache_dir: Path | None, output: Path | None = None) -> list[str]:
    cmd = [*OURS_CMD, "check", "--format", "json", "--select", "ALL", "--exit-zero", "-j", str(jobs)]
    cmd += ["--cache-dir", str(cache_dir)] if cache_dir else ["--no-cache"]
    if output:
        cmd += ["-o", str(output)]
    return cmd + [str(f) for f in files]


def peer_cmd(files: list[Path], jobs: int) -> list[str]:
    return [str(PEER), "check", "-f", "json", "--no-color", "-j", str(jobs), *map(str, files)]


def ruff_cmd(files: list[Path], cache_dir: Path | None) -> list[str]:
    cmd = [str(RUFF), "check", "--isolated", "--exit-zero", "-q"]
    cmd += ["--cache-dir", str(cache_dir)] if cache_dir else ["--no-cache"]
    return cmd + [str(f) for f in files]


def count_lines(files: list[Path]) -> int:
    return sum(f.read_bytes().count(b"\n") for f in files)


# ---------------------------------------------------------------- findings


@dataclass
class Finding:
    tool: str
    path: str  # absolute
    line: int
    code: str | None
    message: str
    severity: str = ""


def load_ours(path: Path) -> list[Finding]:
    items = json.loads(path.read_text() or "[]")
    return [Finding("ours", str(Path(i["filename"]).resolve()), i["location"]["row"], i["code"], i["message"],
                    i.get("severity", "")) for i in items]


def load_peer(path: Path) -> list[Finding]:
    text = path.read_text()
    if not text.strip():
        return []
    data = json.loads(text)
    return [Finding("peer", str((ROOT / d["path"]).resolve()), d["line"], d["code"], d["message"], d.get("severity", ""))
            for d in data.get("diagnostics", [])]


def by_file(findings: list[Finding]) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        out[f.path].append(f)
    return out


# ---------------------------------------------------------------- corpus sets


def corpus_sets(sample_lines: int) -> dict[str, list[Path]]:
    manifest = json.loads((OUT / "corpus.json").read_text())
    torch_files: list[Path] = []
    other: list[Path] = []
    for part in manifest["parts"]:
        files = sorted((OUT / part["path"]).rglob("*.py"))
        (torch_files if part["group"] == "torch" else other).extend(files)
    training = [f for f in other if b".backward(" in f.read_bytes()]
    total = count_lines(torch_files)
    step = max(1, round(total / sample_lines))
    sample = torch_files[::step]
    return {"torch": torch_files, "torch-sample": sample, "training": training, "all": torch_files + other,
            "_step": [Path(str(step))]}


# ---------------------------------------------------------------- measurements


def measure_speed(sets: dict[str, list[Path]], tmp: Path, peer_ok: bool) -> list[Timing]:
    timings: list[Timing] = []
    for target in ("torch", "training", "torch-sample"):
        files = sets[target]
        lines = count_lines(files)
        for jobs in (1, 2):
            cache = tmp / f"cache-{target}-j{jobs}"
            shutil.rmtree(cache, ignore_errors=True)
            for state in ("cold", "warm"):
                if target == "torch-sample" and state == "warm":
                    continue
                wall, cpu, rc = run_timed(ours_cmd(files, jobs, cache))
                timings.append(Timing("torch-preflight (ours)", target, jobs, state, len(files), lines, wall, cpu, rc))
                log(f"ours  {target:12s} -j{jobs} {state}: {wall:7.2f}s  {lines / wall:10,.0f} lines/s")
            rcache = tmp / f"ruff-{target}-j{jobs}"
            shutil.rmtree(rcache, ignore_errors=True)
            for state in ("cold", "warm"):
                wall, cpu, rc = run_timed(ruff_cmd(files, rcache), env={"RAYON_NUM_THREADS": str(jobs)})
                timings.append(Timing("ruff", target, jobs, state, len(files), lines, wall, cpu, rc))
            if peer_ok and target in ("torch-sample", "training"):
                out = tmp / f"peer-{target}-j{jobs}.json"
                wall, cpu, rc = run_timed(peer_cmd(files, jobs), stdout_path=out)
                timings.append(Timing(f"torch-preflight {PEER_VERSION} (peer)", target, jobs, "none", len(files), lines,
                                      wall, cpu, rc))
                log(f"peer  {target:12s} -j{jobs}: {wall:7.2f}s  {lines / wall:10,.0f} lines/s")
    return timings


def in_window(findings: list[Finding], lines: list[int], codes: tuple[str, ...] | None) -> int:
    window = {x for line in lines for x in range(line - 2, line + 3)}
    return sum(1 for f in findings if f.line in window and (codes is None or f.code in codes))


def measure_recall(tmp: Path, peer_ok: bool, registered: set[str]) -> dict:
    manifest = json.loads((MUTANTS / "manifest.json").read_text())
    mutants = manifest["mutants"]
    files = sorted({MUTANTS / m["file"] for m in mutants} | {MUTANTS / m["orig"] for m in mutants})
    results: dict[str, dict[str, list[Finding]]] = {}
    ours_out = tmp / "ours-mutants.json"
    wall, _, _ = run_timed(ours_cmd(files, 2, None, ours_out))
    log(f"ours  over {len(files)} mutant/original files: {wall:.1f}s")
    results["ours"] = by_file(load_ours(ours_out))
    if peer_ok:
        peer_out = tmp / "peer-mutants.json"
        if not (REUSE[0] and peer_out.exists()):
            wall, _, _ = run_timed(peer_cmd(files, 2), stdout_path=peer_out)
            log(f"peer  over {len(files)} mutant/original files: {wall:.1f}s")
        results["peer"] = by_file(load_peer(peer_out))
    rows = []
    harmless = load_equivalent()
    matched: set[int] = set()
    for m in mutants:
        mut = str((MUTANTS / m["file"]).resolve())
        orig = str((MUTANTS / m["orig"]).resolve())
        row = {k: m[k] for k in ("id", "kind", "source", "file", "line", "orig_line", "expected")}
        row["equivalent"] = equivalent_for(harmless, m, matched)
        for tool, found in results.items():
            codes = tuple(m["expected"]) if tool == "ours" else PEER_EXPECTED[m["kind"]]
            fm, fo = found.get(mut, []), found.get(orig, [])
            strict = bool(codes) and in_window(fm, [m["line"]], codes) > in_window(fo, [m["orig_line"]], codes)
            anchored = bool(codes) and (in_window(fm, [m["line"], *m["anchors"]], codes)
                                        > in_window(fo, [m["orig_line"], *m["anchors_orig"]], codes))
            anything = in_window(fm, [m["line"], *m["anchors"]], None) > in_window(fo, [m["orig_line"], *m["anchors_orig"]], None)
            near = sorted({f"{f.code}@{f.line}" for f in fm if abs(f.line - m["line"]) <= 2})
            row[tool] = {"strict": strict, "anchored": anchored, "any_new": anything, "near": near}
        rows.append(row)
    kinds = manifest["kinds"]
    summary: dict[str, dict] = {}
    for kind in kinds:
        kr = [r for r in rows if r["kind"] == kind]
        entry = {"n": len(kr), "expected": kinds[kind]["expected"], "description": kinds[kind]["description"],
                 "registered": all(c in registered for c in kinds[kind]["expected"]),
                 "peer_expected": list(PEER_EXPECTED[kind])}
        entry["equivalent"] = sum(1 for r in kr if r["equivalent"])
        for tool in results:
            for metric in ("strict", "anchored", "any_new"):
                entry[f"{tool}_{metric}"] = sum(r[tool][metric] for r in kr)
            entry[f"{tool}_anchored_bugs"] = sum(r[tool]["anchored"] for r in kr if not r["equivalent"])
        summary[kind] = entry
    for index, e in enumerate(harmless):
        if index not in matched:
            log(f"stale entry in {EQUIVALENT.name}: {e['kind']} {e['source']}:{e['line']} {e['line_text']!r} matches no mutant")
    return {"rows": rows, "summary": summary, "tools": list(results), "dropped_unparsable": manifest.get("dropped_unparsable", 0)}


def load_equivalent() -> list[dict]:
    return json.loads(EQUIVALENT.read_text())["mutants"] if EQUIVALENT.exists() else []


def equivalent_for(harmless: list[dict], m: dict, matched: set[int]) -> str | None:
    """The reason a mutant injects no bug, when equivalent.json lists it (kind, source, line and
    the original line's text must all match, so an entry never drifts onto another line)."""
    lines = (MUTANTS / m["orig"]).read_text(encoding="utf-8", errors="replace").splitlines()
    text = lines[m["orig_line"] - 1].strip() if 0 < m["orig_line"] <= len(lines) else ""
    for index, e in enumerate(harmless):
        if e["kind"] == m["kind"] and e["source"] == m["source"] and e["line"] == m["orig_line"] and e["line_text"].strip() == text:
            matched.add(index)
            return str(e["reason"])
    return None


def load_verdicts() -> list[dict]:
    if VERDICTS.exists():
        return json.loads(VERDICTS.read_text())
    return []


def verdict_for(verdicts: list[dict], rel: str, code: str | None, text: str, line: int, tool: str) -> dict | None:
    for v in verdicts:
        if v.get("tool", "ours") == tool and v["path"] == rel and v["code"] == code and v["text"] == text:
            return v
    return None


def source_line(path: str, line: int) -> str:
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        return lines[line - 1].strip() if 0 < line <= len(lines) else ""
    except OSError:
        return ""


def excerpt(path: str, line: int, around: int = 3) -> str:
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    lo, hi = max(1, line - around), min(len(lines), line + around)
    return "\n".join(f"{'>' if n == line else ' '} {n:5d} | {lines[n - 1]}" for n in range(lo, hi + 1))


def measure_precision(sets: dict[str, list[Path]], tmp: Path, peer_ok: bool) -> dict:
    out = tmp / "ours-corpus.json"
    files = sets["all"]
    wall, _, _ = run_timed(ours_cmd(files, 2, tmp / "cache-torch-j2", out))
    log(f"ours  over the whole corpus ({len(files)} files): {wall:.1f}s (torch part from the warm cache)")
    ours = load_ours(out)
    verdicts = load_verdicts()
    corpus_root = str(CORPUS.resolve()) + "/"
    training = {str(f.resolve()) for f in sets["training"]}
    items = []
    for f in ours:
        rel = f.path.removeprefix(corpus_root)
        text = source_line(f.path, f.line)
        v = verdict_for(verdicts, rel, f.code, text, f.line, "ours")
        items.append({"tool": "ours", "path": rel, "line": f.line, "code": f.code, "message": f.message,
                      "severity": f.severity, "text": text, "training_subset": f.path in training,
                      "verdict": v["verdict"] if v else "untriaged", "why": v.get("why", "") if v else ""})
    peer_items = []
    peer_file = tmp / "peer-training-j2.json"
    if peer_ok and peer_file.exists():
        for f in load_peer(peer_file):
            rel = f.path.removeprefix(corpus_root)
            text = source_line(f.path, f.line)
            v = verdict_for(verdicts, rel, f.code, text, f.line, "peer")
            peer_items.append({"tool": "peer", "path": rel, "line": f.line, "code": f.code, "message": f.message,
                               "severity": f.severity, "text": text,
                               "verdict": v["verdict"] if v else "untriaged", "why": v.get("why", "") if v else ""})
    return {"ours": items, "peer_training": peer_items,
            "lines": {"all": count_lines(files), "training": count_lines(sets["training"])},
            "files": {"all": len(files), "training": len(sets["training"])}}


# ---------------------------------------------------------------- reporting


def pct(a: int, n: int) -> str:
    return f"{100 * a / n:.0f}% ({a}/{n})" if n else "–"


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def show(title: str, headers: list[str], rows: list[list[str]]) -> str:
    table = Table(title=title, title_justify="left")
    for h in headers:
        table.add_column(h)
    for r in rows:
        table.add_row(*r)
    console.print(table)
    return f"**{title}**\n\n" + md_table(headers, rows) + "\n"


def speed_tables(timings: list[Timing]) -> list[tuple[str, list[str], list[list[str]]]]:
    tables = []
    headers = ["tool", "files", "lines", "-j", "cache", "wall s", "CPU s", "lines/s"]
    for target, title in (("torch", "torch's own files"), ("training", "the training scripts"),
                          ("torch-sample", "a sample of torch's files (every Nth file; the peer is slow)")):
        rows = [[t.tool, str(t.files), f"{t.lines:,}", str(t.jobs), t.cache, f"{t.wall_s:.2f}", f"{t.cpu_s:.2f}",
                 f"{t.lines_per_s:,.0f}"] for t in timings if t.target == target]
        tables.append((f"Speed over {title}", headers, rows))
    # ratios, same run
    rows = []
    for target in ("torch-sample", "training"):
        for jobs in (1, 2):
            def pick(tool_prefix: str, cache: str, target: str = target, jobs: int = jobs) -> Timing | None:
                return next((t for t in timings if t.tool.startswith(tool_prefix) and t.target == target
                             and t.jobs == jobs and t.cache == cache), None)
            ours_cold, peer, ruff_cold = pick("torch-preflight (ours)", "cold"), pick(f"torch-preflight {PEER_VERSION}", "none"), pick("ruff", "cold")
            if ours_cold and peer:
                rows.append([target, str(jobs), f"{ours_cold.lines_per_s / peer.lines_per_s:.1f}x",
                             f"{ruff_cold.lines_per_s / ours_cold.lines_per_s:.1f}x" if ruff_cold else "–"])
    if rows:
        tables.append(("Throughput ratios (cold cache, same run)", ["files", "-j", "ours / peer", "ruff / ours"], rows))
    return tables


def recall_table(recall: dict) -> tuple[str, list[str], list[list[str]]]:
    tools = recall["tools"]
    headers = ["bug kind", "mutants", "our codes", "ours ±2", "ours ±2 incl. headers", "harmless (read)", "ours incl. headers, real bugs"]
    if "peer" in tools:
        headers += ["peer codes", "peer ±2", "peer ±2 incl. headers", "peer incl. headers, real bugs", "peer: any new finding near"]
    rows = []
    tot = Counter()
    for kind, s in recall["summary"].items():
        n, bugs = s["n"], s["n"] - s.get("equivalent", 0)
        codes = ",".join(s["expected"]) + ("" if s["registered"] else " (not registered)")
        row = [kind, str(n), codes, pct(s["ours_strict"], n), pct(s["ours_anchored"], n), str(s.get("equivalent", 0)),
               pct(s.get("ours_anchored_bugs", 0), bugs)]
        tot["n"] += n
        tot["bugs"] += bugs
        for k in ("ours_strict", "ours_anchored", "ours_anchored_bugs", "peer_strict", "peer_anchored", "peer_anchored_bugs", "peer_any_new"):
            tot[k] += s.get(k, 0)
        if "peer" in tools:
            row += [",".join(s["peer_expected"]) or "(none)", pct(s["peer_strict"], n), pct(s["peer_anchored"], n),
                    pct(s.get("peer_anchored_bugs", 0), bugs), pct(s["peer_any_new"], n)]
        rows.append(row)
    total = ["**all**", str(tot["n"]), "", pct(tot["ours_strict"], tot["n"]), pct(tot["ours_anchored"], tot["n"]),
             str(tot["n"] - tot["bugs"]), pct(tot["ours_anchored_bugs"], tot["bugs"])]
    if "peer" in tools:
        total += ["", pct(tot["peer_strict"], tot["n"]), pct(tot["peer_anchored"], tot["n"]), pct(tot["peer_anchored_bugs"], tot["bugs"]),
                  pct(tot["peer_any_new"], tot["n"])]
    rows.append(total)
    return ("Recall on injected bugs (a mutant is caught when a finding of the kind's codes, absent from the clean "
            "original, lies within ±2 lines of the mutated line; 'incl. headers' also accepts ±2 lines of the "
            "enclosing loop/with/def headers and of the loops in the file that call the enclosing function; "
            "'harmless (read)' counts the mutants that inject no bug, each verified by reading the code and listed with "
            "its reason in bench/realworld/equivalent.json, and 'real bugs' leaves them out)", headers, rows)


def precision_table(prec: dict) -> tuple[str, list[str], list[list[str]]]:
    rows = []
    ours = prec["ours"]
    ours_tr = [i for i in ours if i["training_subset"]]
    peer = prec["peer_training"]

    def counts(items: list[dict]) -> list[str]:
        c = Counter(i["verdict"] for i in items)
        return [str(len(items)), str(c["true bug"]), str(c["false positive"]), str(c["debatable"]), str(c["untriaged"])]

    lines_all, lines_tr = prec["lines"]["all"], prec["lines"]["training"]
    rows.append(["ours", f"whole corpus ({prec['files']['all']} files, {lines_all:,} lines)", *counts(ours)])
    rows.append(["ours", f"training scripts ({prec['files']['training']} files, {lines_tr:,} lines)", *counts(ours_tr)])
    if peer:
        rows.append([f"peer {PEER_VERSION}", f"training scripts ({prec['files']['training']} files, {lines_tr:,} lines)",
                     *counts(peer)])
        rows.append([f"peer {PEER_VERSION}, errors and warnings only", "the same", *counts([i for i in peer
                                                                                        if i["severity"] != "note"])])
    return ("Findings on real code", ["tool", "code scanned", "findings", "true bug", "false positive", "debatable",
                                      "untriaged"], rows)


def replace_section(path: Path, start: str, end: str, body: str, heading: str | None = None) -> None:
    text = path.read_text() if path.exists() else ""
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + ("\n\n" if text.strip() else "") + (f"{heading}\n\n" if heading else "") + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_findings_report(prec: dict) -> None:
    (OUT / "findings.json").write_text(json.dumps(prec, indent=1))
    lines = ["# bench-real findings on real code", ""]
    for item in prec["ours"] + prec["peer_training"]:
        full = CORPUS / item["path"]
        lines += [f"## [{item['tool']}] {item['path']}:{item['line']} {item['code']} ({item['verdict']})", "",
                  item["message"], "", "```", excerpt(str(full), item["line"]), "```", ""]
        if item["why"]:
            lines += [f"Verdict: {item['why']}", ""]
    (OUT / "findings.md").write_text("\n".join(lines))


def corpus_md() -> str:
    manifest = json.loads((OUT / "corpus.json").read_text())
    rows = []
    for p in manifest["parts"]:
        rows.append([p["name"], p.get("version") or "", (p.get("commit") or "")[:12], p.get("origin", ""),
                     str(p["files"]), f"{p['lines']:,}"])
    return md_table(["part", "version", "commit", "origin", "files", "lines"], rows)


def fp_section(prec: dict, registered: list[str]) -> str:
    out = ["Produced by `make bench-real` (bench/realworld/run.py) from the verdicts kept in",
           "`bench/realworld/verdicts.json`; the corpus parts and versions are listed in docs/benchmarks.md.",
           f"Rules registered when this was written: {', '.join(registered)}. Each finding of ours on the whole",
           "corpus, with the verdict reached by reading the code around it:", ""]
    rows = [[f"`{i['path']}:{i['line']}`", str(i["code"]), i["verdict"], i["why"].replace("|", "\\|")]
            for i in prec["ours"]]
    out.append(md_table(["location", "code", "verdict", "why"], rows) if rows else "No findings.")
    peer = [i for i in prec["peer_training"] if i["verdict"] != "untriaged"]
    if peer:
        out += ["", f"Triaged findings of the peer (torch-preflight {PEER_VERSION}) on the training scripts:", ""]
        out.append(md_table(["location", "code", "verdict", "why"],
                            [[f"`{i['path']}:{i['line']}`", str(i["code"]), i["verdict"], i["why"].replace("|", "\\|")]
                             for i in peer]))
    return "\n".join(out)


def tool_version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        return "unavailable"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample-lines", type=int, default=20000, help="about this many torch lines for the peer")
    parser.add_argument("--no-peer", action="store_true", help="skip the peer")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--reuse", action="store_true",
                        help="reuse the speed figures and the peer's outputs of the previous run (bench/out/run); "
                             "re-run only our precision and recall (e.g. after updating verdicts.json)")
    args = parser.parse_args(argv)

    if not OURS.exists():
        raise SystemExit(f"{OURS} missing: run `make install`")
    if not (OUT / "corpus.json").exists() or not (MUTANTS / "manifest.json").exists():
        raise SystemExit("corpus or mutants missing: run bench/realworld/corpus.py and mutate.py (make bench-real)")
    peer_ok = PEER.exists() and not args.no_peer
    if not peer_ok:
        log("[yellow]peer not installed (bench/.venv-peer): its columns are left out[/yellow]")

    take_snapshot()
    registered = ours_python("from torch_preflight.rules.registry import ALL_RULES; "
                             "print(' '.join(r.code for r in ALL_RULES))").split()
    log(f"our rules (snapshot of the working tree): {' '.join(registered)}")
    tmp = OUT / "run"
    if not args.reuse:
        shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True, exist_ok=True)
    REUSE[0] = args.reuse
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    sets = corpus_sets(args.sample_lines)
    step = int(str(sets.pop("_step")[0]))
    log(f"corpus: {len(sets['all'])} files; torch {len(sets['torch'])}; training scripts {len(sets['training'])}; "
        f"torch sample every {step}th file ({len(sets['torch-sample'])} files)")

    if args.reuse:
        timings = [Timing(**{k: v for k, v in t.items() if k != "lines_per_s"})
                   for t in json.loads((OUT / "speed.json").read_text())]
        log("speed figures and the peer's outputs reused from the previous run")
    else:
        timings = [] if args.skip_speed else measure_speed(sets, tmp, peer_ok)
    if args.skip_speed and peer_ok and not args.reuse:  # the precision table still needs the peer's run over the training scripts
        run_timed(peer_cmd(sets["training"], 2), stdout_path=tmp / "peer-training-j2.json")
    prec = measure_precision(sets, tmp, peer_ok)
    recall = measure_recall(tmp, peer_ok, set(registered))
    elapsed = time.perf_counter() - started

    (OUT / "speed.json").write_text(json.dumps([asdict(t) | {"lines_per_s": t.lines_per_s} for t in timings], indent=1))
    (OUT / "recall.json").write_text(json.dumps(recall, indent=1))
    write_findings_report(prec)

    md = []
    for title, headers, rows in [*speed_tables(timings), recall_table(recall), precision_table(prec)]:
        md.append(show(title, headers, rows))
    fp = [i for i in prec["ours"] if i["verdict"] == "false positive"]
    per50k = len(fp) / (prec["lines"]["all"] / 50000)
    untriaged = [i for i in prec["ours"] if i["verdict"] == "untriaged"]
    console.print(f"false positives: {len(fp)} on {prec['lines']['all']:,} lines = {per50k:.2f} per 50,000 lines; "
                  f"untriaged: {len(untriaged)}")
    for i in untriaged:
        console.print(f"  [yellow]untriaged[/yellow] {i['path']}:{i['line']} {i['code']} {i['text'][:80]}")

    versions = {
        "ours": ours_python("import torch_preflight; print('torch-preflight', torch_preflight.__version__)"),
        "peer": tool_version([str(PEER), "--version"]) if peer_ok else "not run",
        "ruff": tool_version([str(RUFF), "--version"]),
        "python": platform.python_version(),
    }
    header = [
        "## Real-world evaluation (`make bench-real`)", "",
        f"Measured {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} on this machine ({os.cpu_count()} CPUs) by",
        "`make bench-real` (bench/realworld/corpus.py, mutate.py, run.py) in "
        f"{elapsed / 60:.1f} minutes{' (speed and peer figures reused from the previous full run)' if args.reuse else ''}. Versions: {versions['ours']} with every registered rule",
        f"(`--select ALL`: {', '.join(registered)}); peer: {versions['peer']} from PyPI in its own venv, run only "
        f"through its CLI; {versions['ruff']} (`ruff check --isolated`, its default rules, as the speed-of-light",
        f"reference; `-j` is RAYON_NUM_THREADS for ruff); Python {versions['python']}.", "",
        _load_note(load_start, os.getloadavg()[0]), "",
        "'cold' is an empty result cache (`--cache-dir` pointing at a fresh folder), 'warm' the same command again;",
        "the peer has no result cache (its `check --help` offers none), so it is run once per setting. Files are",
        "passed explicitly, so each tool checks the same files. The operating system's file cache is warm for all.",
        "Ours runs from a byte-compiled snapshot of the package (as `pip install` leaves it), so no run pays for",
        "compiling its modules.",
        f"The peer runs over every {step}th file of torch (sorted paths), and ours and ruff run over the same sample",
        "for the ratios.", "",
        "### Corpus", "", corpus_md(), "",
        "Training scripts = the files outside torch's own sources that call `.backward(`.", "",
        f"False positives of ours: {len(fp)} on {prec['lines']['all']:,} lines ({per50k:.2f} per 50,000 lines); "
        f"untriaged findings: {len(untriaged)}. Verdicts: docs/false-positives.md.", "",
        f"Mutants: {sum(s['n'] for s in recall['summary'].values())} (bench/out/mutants/manifest.json), "
        f"{recall['dropped_unparsable']} dropped because they did not parse.", "",
    ]
    if INTERNAL_ERRORS:
        n = sum(c for _, c, _ in INTERNAL_ERRORS)
        header.insert(-1, f"**{n} internal errors were reported by our CLI during this run** "
                          "(files it could not analyse; see the run's output).\n")
        console.print(f"[red]{n} internal errors during the run[/red]; last: {INTERNAL_ERRORS[-1][2][-600:]}")
    replace_section(DOC_BENCH, BENCH_START, BENCH_END, "\n".join(header) + "\n" + "\n".join(md))
    replace_section(DOC_FP, FP_START, FP_END, fp_section(prec, registered), heading="## Real-world corpus (make bench-real)")
    log(f"done in {elapsed:.0f}s; wrote bench/out/{{findings.json,findings.md,speed.json,recall.json}}, "
        f"{DOC_BENCH.relative_to(ROOT)}, {DOC_FP.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
