"""The blind precision corpus (issue 17): public repositories the rules were never tuned on.

bench/realworld/blind.json pins each repository at a commit, with its file and line counts.
Nothing fetched is committed: the code is materialised from local bare git mirrors with
`git archive <commit> -- '*.py' '*.ipynb'` into bench/out/blind/<owner>+<name>/.

Subcommands:
  pin REPO...        (maintainers) record owner/name at its mirror's HEAD in blind.json
  materialise        write bench/out/blind/ from the mirrors (default mirror folder: $BENCH_MIRRORS,
                     else /work/.mirror; each mirror is <folder>/<owner>+<name>/repo or <owner>+<name>)
  check              run a torch-preflight over the corpus (-j 1, --no-cache, JSON, --select ALL) and
                     time each file in one process (CPU seconds, no result cache); write a findings JSON
                     --tool PATH_TO_torch-preflight | --checkout DIR (uses DIR/.venv/bin/torch-preflight)
  timing --root DIR --out FILE [--tool PATH | --checkout DIR]
                     per-file CPU time over any folder (e.g. the bench-real corpus bench/out/corpus)
  peer               run the peer (bench/.venv-peer, black box; reads no notebooks) over the .py files
  diff BEFORE AFTER  new and lost findings, with their triage verdict when known (blind_triage.json)
  report             write the "blind corpus" sections of docs/false-positives.md and docs/benchmarks.md

A finding is identified by (path, code, text of its line), never by its line number alone, so an
edit elsewhere in the tool does not turn a finding into "new"; the line number is shown.

Usage: make bench-blind  (materialise + check + peer + report)
       python bench/realworld/blind.py check --checkout /work/wt-XX --out /tmp/after.json
       python bench/realworld/blind.py diff bench/realworld/blind_before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = ROOT / "bench" / "out" / "blind"
MANIFEST = HERE / "blind.json"
TRIAGE = HERE / "blind_triage.json"
BEFORE = HERE / "blind_before.json"
PEER_OUT = HERE / "blind_peer.json"
PEER = ROOT / "bench" / ".venv-peer" / "bin" / "torch-preflight"
DOC_BENCH = ROOT / "docs" / "benchmarks.md"
DOC_FP = ROOT / "docs" / "false-positives.md"
FP_START, FP_END = "<!-- bench-blind-fp:start -->", "<!-- bench-blind-fp:end -->"
BENCH_START, BENCH_END = "<!-- bench-blind:start -->", "<!-- bench-blind:end -->"


def log(msg: str) -> None:
    print(f"[blind] {msg}", file=sys.stderr, flush=True)


def git(gd: Path, *args: str, binary: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "--git-dir", str(gd), *args], capture_output=True, text=not binary)


def mirror_dir(repo: str, mirrors: Path) -> Path | None:
    base = mirrors / repo.replace("/", "+", 1)
    for cand in (base / "repo", base / "repo" / ".git", base, base / ".git"):
        if (cand / "HEAD").is_file() and (cand / "objects").is_dir():
            return cand
    return None


def notebook_code_lines(data: bytes) -> int | None:
    """Lines of the code cells of a notebook (what the tool reads), or None if it is not JSON."""
    try:
        nb = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(nb, dict):
        return None
    cells = nb.get("cells") or [c for w in nb.get("worksheets", []) for c in w.get("cells", [])]
    total = 0
    for cell in cells:
        if cell.get("cell_type") == "code":
            src = cell.get("source", cell.get("input", ""))
            src = "".join(src) if isinstance(src, list) else src
            total += src.count("\n") + 1 if src else 0
    return total


def count_file(path: Path) -> int:
    data = path.read_bytes()
    if path.suffix == ".ipynb":
        return notebook_code_lines(data) or 0
    return data.count(b"\n")


def corpus_files(root: Path = OUT) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix in (".py", ".ipynb") and p.is_file())


# ---------------------------------------------------------------- pin / materialise


def cmd_pin(args: argparse.Namespace) -> int:
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {"repos": []}
    known = {r["repo"]: r for r in manifest["repos"]}
    for repo in args.repos:
        gd = mirror_dir(repo, args.mirrors)
        if gd is None:
            raise SystemExit(f"no mirror for {repo} under {args.mirrors}")
        commit = git(gd, "rev-parse", "HEAD").stdout.strip()
        with tempfile.TemporaryDirectory() as tmp:
            missing = archive(gd, commit, Path(tmp))
            files = corpus_files(Path(tmp))
            py = [f for f in files if f.suffix == ".py"]
            nb = [f for f in files if f.suffix == ".ipynb"]
            known[repo] = {"repo": repo, "commit": commit, "py_files": len(py), "py_lines": sum(map(count_file, py)),
                           "notebooks": len(nb), "notebook_code_lines": sum(map(count_file, nb)),
                           "missing_in_mirror": missing}
        log(f"{repo} @ {commit[:12]}: {known[repo]}")
    manifest["repos"] = sorted(known.values(), key=lambda r: r["repo"].lower())
    manifest["total_lines"] = sum(r["py_lines"] + r["notebook_code_lines"] for r in manifest["repos"])
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


def archive(gd: Path, commit: str, dest: Path) -> list[str]:
    """Write the .py and .ipynb files of `commit` under dest (as `git archive` would); return the
    paths whose blobs the mirror lacks (a fetched snapshot may leave out its largest files)."""
    listing = git(gd, "ls-tree", "-r", "-z", commit).stdout.split("\0")
    wanted = []
    for entry in filter(None, listing):
        meta, path = entry.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob" and mode != "120000" and path.endswith((".py", ".ipynb")):
            wanted.append((sha, path))
    batch = subprocess.run(["git", "--git-dir", str(gd), "cat-file", "--batch"], capture_output=True,
                           input="".join(f"{sha}\n" for sha, _ in wanted).encode(), check=True).stdout
    missing, pos = [], 0
    for _sha, path in wanted:
        header_end = batch.index(b"\n", pos)
        header = batch[pos:header_end].split()
        if header[-1] == b"missing":
            missing.append(path)
            pos = header_end + 1
            continue
        size = int(header[2])
        data = batch[header_end + 1 : header_end + 1 + size]
        pos = header_end + 1 + size + 1
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return missing


def cmd_materialise(args: argparse.Namespace) -> int:
    manifest = json.loads(MANIFEST.read_text())
    missing = []
    for r in manifest["repos"]:
        dest = OUT / r["repo"].replace("/", "+", 1)
        stamp = dest / ".commit"
        if stamp.exists() and stamp.read_text().strip() == r["commit"]:
            continue
        gd = mirror_dir(r["repo"], args.mirrors)
        if gd is None or git(gd, "cat-file", "-e", r["commit"] + "^{commit}").returncode != 0:
            missing.append(r)
            continue
        shutil.rmtree(dest, ignore_errors=True)
        archive(gd, r["commit"], dest)
        got = corpus_files(dest)
        lines = sum(map(count_file, got))
        want = r["py_lines"] + r["notebook_code_lines"]
        stamp.write_text(r["commit"] + "\n")
        log(f"{r['repo']} @ {r['commit'][:12]}: {len(got)} files, {lines} lines" + ("" if lines == want else
                                                                                   f" (manifest says {want})"))
    if missing:
        for r in missing:
            log(f"MISSING {r['repo']} @ {r['commit']}: get it with\n"
                f"    git clone --bare https://github.com/{r['repo']} {args.mirrors}/{r['repo'].replace('/', '+', 1)}/repo\n"
                f"  (or the `fetch github:{r['repo']}` tool), or point BENCH_MIRRORS at a folder holding it")
        raise SystemExit(f"{len(missing)} repositories missing: see above")
    return 0


# ---------------------------------------------------------------- check

# Runs inside the checked tool's own Python: time each file of the list in one process, as
# `check -j 1 --no-cache` does (modules imported once, by a warm-up file first).
TIMER = r"""
import contextlib, io, json, sys, time
from torch_preflight.main import main
files, out, warm = sys.argv[1], sys.argv[2], sys.argv[3]
def one(path):
    buf = io.StringIO()
    t = time.process_time()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(["check", "--no-cache", "-j", "1", "--select", "ALL", "--exit-zero", "--format", "json", path])
        except SystemExit:
            pass
    return time.process_time() - t
one(warm)
times = {}
for path in json.load(open(files)):
    times[path] = round(one(path), 4)
json.dump(times, open(out, "w"))
"""


def time_files(tool: Path, files: list[Path], root: Path) -> dict[str, float]:
    """CPU seconds per file, each checked in one process of the tool's own Python (relative to root)."""
    with tempfile.TemporaryDirectory() as tmp:
        listing = Path(tmp) / "files.json"
        listing.write_text(json.dumps([str(f) for f in files]))
        warm = Path(tmp) / "warm.py"
        warm.write_text("import torch\n\nmodel = torch.nn.Linear(2, 2)\n")
        out = Path(tmp) / "times.json"
        subprocess.run([str(tool.parent / "python"), "-c", TIMER, str(listing), str(out), str(warm)], check=True, cwd=ROOT)
        return {str(Path(k).resolve().relative_to(root.resolve())): v for k, v in json.loads(out.read_text()).items()}


def cmd_timing(args: argparse.Namespace) -> int:
    """Per-file CPU time over any folder (e.g. the bench-real corpus, bench/out/corpus)."""
    tool = tool_from(args)
    root = Path(args.root).resolve()
    files = corpus_files(root)
    start = time.perf_counter()
    times = time_files(tool, files, root)
    slow = sorted(((t, p) for p, t in times.items() if t > 1.0), reverse=True)
    Path(args.out).write_text(json.dumps({"tool": str(tool), "root": str(root), "files": len(files),
                                          "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                          "wall_s": round(time.perf_counter() - start, 1),
                                          "total_cpu_s": round(sum(times.values()), 1),
                                          "over_1s": [[p, t] for t, p in slow], "cpu_s_per_file": times}, indent=1) + "\n")
    log(f"{len(files)} files, {sum(times.values()):.0f} s CPU; over 1 s: {len(slow)}")
    for t, p in slow:
        log(f"  {t:.2f}s {p}")
    return 0


def tool_from(args: argparse.Namespace) -> Path:
    if args.checkout:
        tool = Path(args.checkout).resolve() / ".venv" / "bin" / "torch-preflight"
    else:
        tool = Path(args.tool).resolve() if args.tool else ROOT / ".venv" / "bin" / "torch-preflight"
    if not tool.exists():
        raise SystemExit(f"{tool} missing (run `make install` in that checkout)")
    return tool


def rel(path: str) -> str:
    p = Path(path).resolve()
    try:
        return str(p.relative_to(OUT.resolve()))
    except ValueError:
        return str(p)


def line_text(path: str, line: int, cell: int | None = None) -> str:
    full = OUT / path
    try:
        if full.suffix == ".ipynb":
            src = notebook_cell_source(full, cell) if cell is not None else ""
        else:
            src = full.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    lines = src.splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def notebook_cell_source(path: Path, cell: int) -> str:
    nb = json.loads(path.read_bytes())
    cells = nb.get("cells", [])
    if not 0 < cell <= len(cells):
        return ""
    src = cells[cell - 1].get("source", "")
    return "".join(src) if isinstance(src, list) else src


def normalise(item: dict) -> dict:
    """One finding of our JSON output -> {path, line, cell, code, message, text}."""
    loc = item.get("location") or {}
    cell = item.get("cell") or loc.get("cell")
    path = rel(item["filename"])
    line = int(loc.get("row") or 0)
    return {"path": path, "line": line, "cell": cell, "code": item.get("code"), "message": item.get("message", ""),
            "text": line_text(path, line, cell) if cell is not None or not path.endswith(".ipynb") else ""}


def cmd_check(args: argparse.Namespace) -> int:
    tool = tool_from(args)
    files = corpus_files()
    if not files:
        raise SystemExit(f"no corpus under {OUT}: run `python {Path(__file__).name} materialise` first")
    version = subprocess.run([str(tool), "--version"], capture_output=True, text=True).stdout.strip()
    checkout = tool.parent.parent.parent
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ours.json"
        cmd = [str(tool), "check", "--no-cache", "-j", "1", "--select", "ALL", "--exit-zero", "--format", "json",
               "--exclude", ".git", "-o", str(out), *map(str, files)]
        start, cpu0 = time.perf_counter(), os.times()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        wall, cpu1 = time.perf_counter() - start, os.times()
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{tool} exited {proc.returncode}: {proc.stderr[-2000:]}")
        raw = json.loads(out.read_text() or "[]")
        internal = proc.stderr.count("internal error")
        times = {} if args.no_timing else time_files(tool, files, OUT)
    findings = sorted((normalise(i) for i in raw), key=lambda f: (f["path"], f["cell"] or 0, f["line"], f["code"] or ""))
    result = {
        "tool": str(tool), "version": version, "checkout_commit": commit,
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(cmd[:12]) + " FILES", "files": len(files), "lines": sum(map(count_file, files)),
        "wall_s": round(wall, 2), "cpu_s": round((cpu1.children_user - cpu0.children_user)
                                                 + (cpu1.children_system - cpu0.children_system), 2),
        "load_avg_1min": round(os.getloadavg()[0], 2), "internal_errors": internal,
        "findings": findings, "cpu_s_per_file": times,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    log(f"{len(findings)} findings on {len(files)} files ({result['lines']:,} lines) in {wall:.1f}s wall -> {args.out}")
    slow = sorted(((t, p) for p, t in times.items() if t > 1.0), reverse=True)
    for t, p in slow:
        log(f"  over 1 s: {t:.2f}s {p}")
    return 0


def cmd_peer(args: argparse.Namespace) -> int:
    if not PEER.exists():
        raise SystemExit(f"{PEER} missing: `make bench/.venv-peer/bin/torch-preflight`")
    files = [f for f in corpus_files() if f.suffix == ".py"]
    start = time.perf_counter()
    proc = subprocess.run([str(PEER), "check", "-f", "json", "--no-color", "-j", str(args.jobs), *map(str, files)],
                          capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    data = json.loads(proc.stdout or "{}")
    findings = []
    for d in data.get("diagnostics", []):
        path = rel(str((ROOT / d["path"]).resolve()))
        findings.append({"path": path, "line": d["line"], "code": d["code"], "severity": d.get("severity", ""),
                         "message": d["message"], "text": line_text(path, d["line"])})
    findings.sort(key=lambda f: (f["path"], f["line"], f["code"]))
    PEER_OUT.write_text(json.dumps({"tool": "torch-preflight 0.5.0 (peer)", "files": len(files),
                                    "lines": sum(map(count_file, files)), "wall_s": round(wall, 1),
                                    "findings": findings}, indent=1) + "\n")
    log(f"peer: {len(findings)} findings on {len(files)} .py files in {wall:.0f}s -> {PEER_OUT.relative_to(ROOT)}")
    return 0


# ---------------------------------------------------------------- triage, diff, report


def key(f: dict) -> tuple:
    return (f["path"], f.get("cell"), f["code"], f["text"] or f"line {f['line']}")


def load_triage() -> dict[tuple, dict]:
    if not TRIAGE.exists():
        return {}
    return {key(t) if t.get("tool", "ours") == "ours" else ("peer", *key(t)): t
            for t in json.loads(TRIAGE.read_text())["findings"]}


def multiset(findings: list[dict]) -> Counter:
    return Counter(key(f) for f in findings)


def cmd_diff(args: argparse.Namespace) -> int:
    before, after = (json.loads(Path(p).read_text()) for p in (args.before, args.after))
    triage = load_triage()
    b, a = multiset(before["findings"]), multiset(after["findings"])
    where = {key(f): f for f in before["findings"] + after["findings"]}

    def show(title: str, keys: Counter) -> None:
        print(f"\n{title}: {sum(keys.values())}")
        for k, n in sorted(keys.items()):
            f, t = where[k], triage.get(k)
            loc = f"{f['path']}" + (f" cell {f['cell']}" if f.get("cell") else "") + f":{f['line']}"
            verdict = f"{t['verdict']}: {t['why']}" if t else "untriaged"
            print(f"  {f'{n}x ' if n > 1 else ''}{loc} {f['code']} [{verdict}]\n      {f['text'][:100]}")

    lost, new = b - a, a - b
    # A finding whose line moved (same file, cell and code; another line text) is paired, not lost + new.
    moved: list[tuple[tuple, tuple]] = []
    for k in sorted(lost.elements()):
        partner = next((n for n in sorted(new.elements()) if n[:3] == k[:3]), None)
        if partner is not None:
            moved.append((k, partner))
            lost[k] -= 1
            new[partner] -= 1
    lost, new = +lost, +new
    print(f"before: {before.get('version')} {before.get('checkout_commit', '')[:10]}: {len(before['findings'])} findings")
    print(f"after:  {after.get('version')} {after.get('checkout_commit', '')[:10]}: {len(after['findings'])} findings")
    show("LOST (in before, not after)", lost)
    show("NEW (in after, not before)", new)
    print(f"\nMOVED (same file, cell and code, another line): {len(moved)}")
    for old, cur in moved:
        t = triage.get(old)
        print(f"  {cur[0]}" + (f" cell {cur[1]}" if cur[1] else "") + f" {cur[2]}: {where[old]['line']} -> "
              f"{where[cur]['line']} [{t['verdict'] if t else 'untriaged'}]")
    carried = {cur: triage[old] for old, cur in moved if old in triage}
    for name, res in (("before", before), ("after", after)):
        c = Counter((triage.get(k) or carried.get(k) or {}).get("verdict", "untriaged")
                    for k in multiset(res["findings"]).elements())
        print(f"{name}: " + ", ".join(f"{v} {n}" for v, n in sorted(c.items()))
              + f"; false positives per 50k lines: {c['false'] / (res['lines'] / 50000):.2f}")
        slow = {p: t for p, t in res.get("cpu_s_per_file", {}).items() if t > 1.0}
        print(f"{name}: files over 1 s CPU: {len(slow)}" + "".join(f"\n    {t:.2f}s {p}" for p, t in
                                                                  sorted(slow.items(), key=lambda x: -x[1])))
    lost_true = [k for k in lost.elements() if triage.get(k, {}).get("verdict") == "true"]
    if lost_true:
        print(f"\nWARNING: {len(lost_true)} true findings lost")
    return 0


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])


def replace_section(path: Path, start: str, end: str, body: str, heading: str) -> None:
    text = path.read_text() if path.exists() else ""
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + f"\n\n{heading}\n\n{block}\n"
    path.write_text(text)


def esc(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def cmd_report(args: argparse.Namespace) -> int:
    manifest = json.loads(MANIFEST.read_text())
    res = json.loads(Path(args.findings).read_text())
    peer = json.loads(PEER_OUT.read_text()) if PEER_OUT.exists() else None
    triage = load_triage()
    lines = res["lines"]
    ours = [(f, triage.get(key(f))) for f in res["findings"]]
    c = Counter(t["verdict"] if t else "untriaged" for _, t in ours)
    peer_items = [(f, triage.get(("peer", *key(f)))) for f in (peer or {}).get("findings", [])]

    repo_rows = []
    by_repo_ours = Counter(f["path"].split("/")[0] for f, _ in ours)
    by_repo_peer = Counter(f["path"].split("/")[0] for f, _ in peer_items)
    for r in manifest["repos"]:
        d = r["repo"].replace("/", "+", 1)
        repo_rows.append([f"[{r['repo']}](https://github.com/{r['repo']})", r["commit"][:12], str(r["py_files"]),
                          f"{r['py_lines']:,}", str(r["notebooks"]), f"{r['notebook_code_lines']:,}",
                          str(by_repo_ours[d]), str(by_repo_peer[d]) if peer else "–"])
    tot_py = sum(r["py_lines"] for r in manifest["repos"])
    tot_nb = sum(r["notebook_code_lines"] for r in manifest["repos"])
    repo_rows.append(["**all**", "", str(sum(r["py_files"] for r in manifest["repos"])), f"{tot_py:,}",
                      str(sum(r["notebooks"] for r in manifest["repos"])), f"{tot_nb:,}",
                      str(len(ours)), str(len(peer_items)) if peer else "–"])

    per50k = c["false"] / (lines / 50000)
    fp = [
        f"Measured {res['measured']} by `make bench-blind` (bench/realworld/blind.py) with {res['version']}",
        f"(commit {res['checkout_commit'][:10]}), `check -j 1 --no-cache --select ALL --format json`, before any",
        "rule change of issues 16 and 17 landed. The repositories were chosen before those changes and are",
        "pinned in bench/realworld/blind.json; the raw findings are bench/realworld/blind_before.json, the verdicts",
        "bench/realworld/blind_triage.json (each reached by reading the code around the finding). Lines: `.py`",
        "lines plus the code-cell lines of notebooks.", "",
        md_table(["repository", "commit", ".py files", ".py lines", "notebooks", "notebook code lines",
                  "our findings", "peer findings"], repo_rows), "",
        f"**Ours: {len(ours)} findings on {lines:,} lines: {c['true']} true, {c['debatable']} debatable, "
        f"{c['false']} false, {c['untriaged']} untriaged: {per50k:.2f} false positives per 50,000 lines.**", "",
    ]
    if peer:
        pc = Counter(t["verdict"] if t else "untriaged" for _, t in peer_items)
        sev = Counter(f["severity"] for f, _ in peer_items)
        fp += [f"Peer (torch-preflight 0.5.0, `check -f json`, .py files only: {peer['files']} files, "
               f"{peer['lines']:,} lines): {len(peer_items)} findings ({', '.join(f'{n} {s}' for s, n in sorted(sev.items()))}); "
               f"triaged (its errors): {pc['true']} true, {pc['debatable']} debatable, {pc['false']} false "
               f"({pc['false'] / (peer['lines'] / 50000):.2f} false positives per 50,000 .py lines), {pc['untriaged']} untriaged "
               "(warnings and notes).", ""]
        py = Counter(t["verdict"] if t else "untriaged" for f, t in ours if not f["path"].endswith(".ipynb"))
        fp += [f"Ours on the same .py files: {sum(py.values())} findings: {py['true']} true, {py['debatable']} debatable, "
               f"{py['false']} false ({py['false'] / (peer['lines'] / 50000):.2f} per 50,000 .py lines).", ""]
    rows = []
    for f, t in ours:
        loc = f"`{f['path']}" + (f" cell {f['cell']}" if f.get("cell") else "") + f":{f['line']}`"
        peer_same = sorted({p['code'] for p, _ in peer_items if p["path"] == f["path"] and abs(p["line"] - f["line"]) <= 3})
        rows.append([loc, str(f["code"]), t["verdict"] if t else "untriaged", esc(t["why"]) if t else "",
                     ", ".join(peer_same) or "–"])
    fp.append(md_table(["location", "code", "verdict", "why", "peer within 3 lines"], rows))
    if peer:
        triaged_peer = [(f, t) for f, t in peer_items if t]
        if triaged_peer:
            fp += ["", "Triaged findings of the peer:", "",
                   md_table(["location", "code", "verdict", "why"],
                            [[f"`{f['path']}:{f['line']}`", f["code"], t["verdict"], esc(t["why"])] for f, t in triaged_peer])]
    replace_section(DOC_FP, FP_START, FP_END, "\n".join(fp), "## Blind corpus (make bench-blind)")

    times = res.get("cpu_s_per_file", {})
    slow = sorted(((t, p) for p, t in times.items() if t > 1.0), reverse=True)
    top = sorted(((t, p) for p, t in times.items()), reverse=True)[:10]
    bench = [
        "## Blind corpus: per-file check time (`make bench-blind`)", "",
        f"Measured {res['measured']} with {res['version']} (commit {res['checkout_commit'][:10]}): each of the "
        f"{res['files']} files of the blind corpus ({lines:,} lines) checked in one process with every rule "
        "(`check --no-cache -j 1 --select ALL`, imports warmed by one small file first), CPU seconds per file "
        "(time.process_time). The whole run at -j 1: "
        f"{res['wall_s']:.0f} s wall, {res['cpu_s']:.0f} s CPU; load average {res['load_avg_1min']} (2 CPUs "
        "shared with other work, so wall times are inflated; CPU seconds are less so).", "",
        f"Files over 1 s: **{len(slow)}**.", "",
        md_table(["file", "CPU s"], [[f"`{p}`", f"{t:.2f}"] for t, p in top]) if top else "", "",
        "(the ten slowest files; re-measure another checkout with "
        "`python bench/realworld/blind.py check --checkout DIR --out FILE`)",
    ]
    replace_section(DOC_BENCH, BENCH_START, BENCH_END, "\n".join(bench), "")
    log(f"wrote {DOC_FP.relative_to(ROOT)} and {DOC_BENCH.relative_to(ROOT)}: ours {dict(c)}, {per50k:.2f} FP/50k")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    mirrors = Path(os.environ.get("BENCH_MIRRORS", "/work/.mirror"))
    p = sub.add_parser("pin")
    p.add_argument("repos", nargs="+")
    p.add_argument("--mirrors", type=Path, default=mirrors)
    p.set_defaults(func=cmd_pin)
    p = sub.add_parser("materialise")
    p.add_argument("--mirrors", type=Path, default=mirrors)
    p.set_defaults(func=cmd_materialise)
    p = sub.add_parser("check")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--tool", help="path to a torch-preflight executable (its venv's python is used for the timing)")
    g.add_argument("--checkout", help="a checkout with its .venv (make install)")
    p.add_argument("--out", default=str(ROOT / "bench" / "out" / "blind-findings.json"))
    p.add_argument("--no-timing", action="store_true", help="skip the per-file timing pass")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("timing")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--tool")
    g.add_argument("--checkout")
    p.add_argument("--root", required=True, help="the folder whose .py and .ipynb files are timed")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_timing)
    p = sub.add_parser("peer")
    p.add_argument("-j", "--jobs", type=int, default=2)
    p.set_defaults(func=cmd_peer)
    p = sub.add_parser("diff")
    p.add_argument("before")
    p.add_argument("after")
    p.set_defaults(func=cmd_diff)
    p = sub.add_parser("report")
    p.add_argument("--findings", default=str(BEFORE))
    p.set_defaults(func=cmd_report)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
