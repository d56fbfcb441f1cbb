"""Score a torch-preflight (and the peer) on a set of single-bug mutants, strictly (issue 16).

Stdlib only, so the same file can score a mutant set kept outside the project.

A mutant is caught when a finding of one of its kind's codes lies within ±3 lines of the mutated
line, or names a related location within ±3 lines of it (SARIF `relatedLocations`), and there are
more such findings on the mutant than on its clean original at the same place. No per-kind
exclusion, no header anchors. Two columns: all mutants, and real bugs only (the mutants listed in
an equivalent.json as injecting no bug, each with its reason, are left out). The peer
(torch-preflight 0.5.0, JSON, no related locations) is scored the same way with its own codes. A
diagnostic column, not a score: a new finding of the right code anywhere in the mutant.

Usage:
  python score.py --mutants DIR [--tool PATH_TO_torch-preflight | --checkout DIR] [--peer PATH]
                  [--equivalent FILE] [--out FILE.json] [--markdown FILE.md] [--compare BEFORE.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

WINDOW = 3

# The peer's rules that describe each injected bug kind (from its `rules` listing).
PEER_EXPECTED: dict[str, tuple[str, ...]] = {
    "delete_zero_grad": ("TG003",),
    "zero_grad_between_backward_and_step": ("TG003",),
    "unconditional_zero_grad": ("TG003", "TG014"),
    "loss_accumulated": ("TG001",),
    "loss_appended": ("TG001",),
    "remove_no_grad": ("TG002",),
    "delete_eval": (),
    "delete_train": ("TG011",),
    "optimizer_in_loop": (),
    "delete_set_epoch": ("TG012",),
    "softmax_before_ce": ("TG005",),
    "scaler_before_split": (),
    "forward_direct": (),
    "remove_no_grad_decorator": ("TG002",),
    "gan_drop_zero_grad": ("TG003",),
    "delete_set_epoch_chain": ("TG012",),
    "helper_drop_zero_grad": ("TG003",),
    "helper_drop_eval": (),
    "helper_drop_train": ("TG011",),
    "helper_remove_no_grad": ("TG002",),
}


def log(msg: str) -> None:
    print(f"[score {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_ours(tool: Path, root: Path, files: list[str]) -> dict[str, list[tuple[str, int, list[int]]]]:
    """path (relative to root) -> [(code, line, related lines in the same file)]."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ours.sarif"
        cmd = [str(tool), "check", "--no-cache", "--select", "ALL", "--exit-zero", "--format", "sarif", "-o", str(out),
               *files]
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{tool} exited {proc.returncode}: {proc.stderr[-2000:]}")
        data = json.loads(out.read_text())
    found: dict[str, list[tuple[str, int, list[int]]]] = defaultdict(list)
    for run in data.get("runs", []):
        for r in run.get("results", []):
            loc = r["locations"][0]["physicalLocation"]
            path = str((root / loc["artifactLocation"]["uri"].removeprefix("file://")).resolve().relative_to(root.resolve()))
            related = []
            for rel in r.get("relatedLocations", []):
                pl = rel.get("physicalLocation", {})
                rpath = pl.get("artifactLocation", {}).get("uri", "").removeprefix("file://")
                if rpath and str((root / rpath).resolve().relative_to(root.resolve())) == path:
                    related.append(int(pl.get("region", {}).get("startLine", 0)))
            found[path].append((r.get("ruleId", ""), int(loc["region"]["startLine"]), related))
    return found


def run_peer(peer: Path, root: Path, files: list[str]) -> dict[str, list[tuple[str, int, list[int]]]]:
    proc = subprocess.run([str(peer), "check", "-f", "json", "--no-color", "-j", "2", *files], cwd=root,
                          capture_output=True, text=True)
    data = json.loads(proc.stdout or "{}")
    found: dict[str, list[tuple[str, int, list[int]]]] = defaultdict(list)
    for d in data.get("diagnostics", []):
        path = str((root / d["path"]).resolve().relative_to(root.resolve()))
        found[path].append((d["code"], int(d["line"]), []))
    return found


def near(findings: list[tuple[str, int, list[int]]], line: int, codes: tuple[str, ...]) -> int:
    return sum(1 for code, at, related in findings if code in codes
               and (abs(at - line) <= WINDOW or any(abs(r - line) <= WINDOW for r in related)))


def equivalent_reason(entries: list[dict], m: dict, root: Path) -> str | None:
    lines = (root / m["orig"]).read_text(encoding="utf-8", errors="replace").splitlines()
    text = lines[m["orig_line"] - 1].strip() if 0 < m["orig_line"] <= len(lines) else ""
    for e in entries:
        if e["kind"] == m["kind"] and e["source"] == m["source"] and e["line"] == m["orig_line"] \
                and e["line_text"].strip() == text:
            return str(e["reason"])
    return None


def pct(a: int, n: int) -> str:
    return f"{100 * a / n:.0f}% ({a}/{n})" if n else "–"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mutants", required=True, type=Path, help="folder holding manifest.json (mutate.py --out)")
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--tool", type=Path, help="path to a torch-preflight executable")
    g.add_argument("--checkout", type=Path, help="a checkout with its .venv (make install)")
    parser.add_argument("--peer", type=Path, help="the peer's torch-preflight executable (0.5.0), optional")
    parser.add_argument("--equivalent", type=Path, help="equivalent.json: harmless mutants with their reasons")
    parser.add_argument("--out", type=Path, help="write per-mutant results and the summary here (JSON)")
    parser.add_argument("--markdown", type=Path, help="write the per-kind table here")
    parser.add_argument("--compare", type=Path, help="a previous --out JSON (or hard_before.json): list the mutants "
                                                     "caught now and not then, and the other way round")
    args = parser.parse_args(argv)

    tool = (args.checkout / ".venv" / "bin" / "torch-preflight") if args.checkout else args.tool
    if tool is None or not tool.exists():
        raise SystemExit(f"no torch-preflight at {tool}: pass --tool PATH or --checkout DIR")
    tool = tool.absolute()
    peer = args.peer.absolute() if args.peer else None
    root = args.mutants.resolve()
    manifest = json.loads((root / "manifest.json").read_text())
    mutants = manifest["mutants"]
    files = sorted({m["file"] for m in mutants} | {m["orig"] for m in mutants})
    version = subprocess.run([str(tool), "--version"], capture_output=True, text=True).stdout.strip()
    start = time.perf_counter()
    results = {"ours": run_ours(tool, root, files)}
    log(f"ours ({version}, {tool}) over {len(files)} files: {time.perf_counter() - start:.0f}s")
    if peer:
        start = time.perf_counter()
        results["peer"] = run_peer(peer, root, files)
        log(f"peer over {len(files)} files: {time.perf_counter() - start:.0f}s")
    entries = json.loads(args.equivalent.read_text())["mutants"] if args.equivalent and args.equivalent.exists() else []

    rows = []
    for m in mutants:
        row = {k: m[k] for k in ("id", "kind", "source", "file", "line", "orig_line", "expected")}
        row["equivalent"] = equivalent_reason(entries, m, root)
        for tool_name, found in results.items():
            codes = tuple(m["expected"]) if tool_name == "ours" else PEER_EXPECTED.get(m["kind"], ())
            fm, fo = found.get(m["file"], []), found.get(m["orig"], [])
            row[tool_name] = bool(codes) and near(fm, m["line"], codes) > near(fo, m["orig_line"], codes)
            row[f"{tool_name}_anywhere"] = bool(codes) and sum(c in codes for c, _, _ in fm) > sum(c in codes for c, _, _ in fo)
            row[f"{tool_name}_near"] = sorted({f"{c}@{at}" for c, at, _ in fm if abs(at - m["line"]) <= WINDOW})
        rows.append(row)

    kinds = list(manifest["kinds"])
    summary = {}
    for kind in kinds:
        kr = [r for r in rows if r["kind"] == kind]
        bugs = [r for r in kr if not r["equivalent"]]
        entry = {"n": len(kr), "harmless": len(kr) - len(bugs), "expected": manifest["kinds"][kind]["expected"]}
        for t in results:
            entry[f"{t}_all"] = sum(r[t] for r in kr)
            entry[f"{t}_bugs"] = sum(r[t] for r in bugs)
            entry[f"{t}_anywhere"] = sum(r[f"{t}_anywhere"] for r in kr)
        summary[kind] = entry
    headers = ["kind", "our codes", "mutants", "harmless", "ours, all mutants", "ours, real bugs", "ours, anywhere in the file"]
    if "peer" in results:
        headers += ["peer codes", "peer, all mutants", "peer, real bugs"]
    table = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    tot: dict[str, int] = defaultdict(int)
    for kind, e in summary.items():
        bugs = e["n"] - e["harmless"]
        cells = [kind, ",".join(e["expected"]), str(e["n"]), str(e["harmless"]), pct(e["ours_all"], e["n"]),
                 pct(e["ours_bugs"], bugs), pct(e["ours_anywhere"], e["n"])]
        if "peer" in results:
            cells += [",".join(PEER_EXPECTED.get(kind, ())) or "(none)", pct(e["peer_all"], e["n"]),
                      pct(e["peer_bugs"], bugs)]
        table.append("| " + " | ".join(cells) + " |")
        for k, v in e.items():
            if isinstance(v, int):
                tot[k] += v
    bugs = tot["n"] - tot["harmless"]
    cells = ["**all**", "", str(tot["n"]), str(tot["harmless"]), pct(tot["ours_all"], tot["n"]), pct(tot["ours_bugs"], bugs),
             pct(tot["ours_anywhere"], tot["n"])]
    if "peer" in results:
        cells += ["", pct(tot["peer_all"], tot["n"]), pct(tot["peer_bugs"], bugs)]
    table.append("| " + " | ".join(cells) + " |")
    md = "\n".join(table)
    print(md)
    print(f"\nours: {tot['ours_all']}/{tot['n']} all mutants, {tot['ours_bugs']}/{bugs} real bugs "
          f"(strict: ±{WINDOW} lines of the mutated line or a related location)")
    if args.compare:
        then = {r["id"]: r["ours"] for r in json.loads(args.compare.read_text())["rows"]}
        for title, want in (("GAINED (caught now, missed before)", True), ("LOST (missed now, caught before)", False)):
            ids = [r["id"] for r in rows if r["id"] in then and r["ours"] == want and then[r["id"]] != want]
            print(f"\n{title}: {len(ids)}" + "".join(f"\n  {i}" for i in ids))
    if args.markdown:
        args.markdown.write_text(md + "\n")
    if args.out:
        args.out.write_text(json.dumps({"tool": str(tool), "version": version, "summary": summary, "rows": rows},
                                       indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
