"""LSP benchmark: drive `torch-preflight server` (and `ruff server`) over stdio.

Generated mode (the default): a 3,000-line generated module; cold start (initialize -> first
diagnostics), p50/p95 of didChange -> publishDiagnostics over 200 single-character edits with
debounce 0, and inlay hints for the whole file (asked as the file opens and again after the edits).

Real-files mode (`--real`, issue 19): the files of bench/lsp/real_files.json (materialised by
bench/lsp/realfiles.py) and every corpus file over 300 lines when bench/out/corpus exists. Per
file: cold start, valid edits (a digit typed into an integer literal and deleted) and broken
edits (`(` typed at a line's end and deleted), each keystroke timed to the diagnostics of its
version, inlay hints for the whole file as it opens (the estimator reads the modules the file
imports then) and after the edits (what each edit costs); `ruff server` with the same keystrokes beside it; the
slowest files listed. `--in-process` replays the same keystrokes through the server's document
in this process and reports CPU time per keystroke (robust against other jobs on the machine).
A keystroke's latency is to its version's first publication: the cheap rules' findings (the
server publishes them before the whole-module rules run); in-process, the complete analysis
(the second publication) is timed too, in the "complete" columns.

`--imports N` lists the server's N costliest imports (`python -X importtime`, best of three).

Usage: python bench/lsp/bench_lsp.py [--edits 200] [--lines 3000]
       python bench/lsp/bench_lsp.py --real [--pairs 20] [--in-process] [--only NAME] [--no-ruff]
       python bench/lsp/bench_lsp.py --imports 25
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

sys.path.insert(0, str(Path(__file__).parent))
from genmodule import generate
from realfiles import OUT, Edit, broken_edits, files, sample, valid_edits

URI = "file:///tmp/torch_preflight_bench/train_big.py"
Keystroke = tuple[str, int, int, str, int]  # (kind, line, col, text typed, characters deleted)


def pairs(kind: str, edits: list[Edit]) -> list[Keystroke]:
    """Each edit typed, then deleted: the text is the original again after every pair."""
    out: list[Keystroke] = []
    for e in edits:
        out += [(kind, e.line, e.col, e.text, 0), (kind, e.line, e.col, "", len(e.text))]
    return out


def change(key: Keystroke) -> types.TextDocumentContentChangePartial:
    _, line, col, text, deleted = key
    return types.TextDocumentContentChangePartial(range=types.Range(start=types.Position(line, col), end=types.Position(line, col + deleted)), text=text)


def q95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[18] if len(values) > 1 else values[0]


async def drive(cmd: list[str], uri: str, text: str, keys: list[Keystroke], hints: bool) -> dict[str, Any]:
    """Start `cmd`, open `text`, send each keystroke and wait for the diagnostics of its version.
    Returns the cold start, the latencies per kind (seconds) and the inlay-hint time."""
    client = LanguageClient("bench", "1")
    waiting: dict[int, asyncio.Future[float]] = {}

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def publish(params: types.PublishDiagnosticsParams) -> None:
        fut = waiting.pop(params.version if params.version is not None else -1, None) or waiting.pop(-1, None)
        if fut is not None and not fut.done():
            fut.set_result(time.perf_counter())

    @client.feature(types.WORKSPACE_CONFIGURATION)
    def configuration(params: types.ConfigurationParams) -> list[object]:
        return [{"debounce": 0} for _ in params.items]

    await client.start_io(cmd[0], *cmd[1:])
    caps = types.ClientCapabilities(
        workspace=types.WorkspaceClientCapabilities(configuration=True),
        text_document=types.TextDocumentClientCapabilities(
            publish_diagnostics=types.PublishDiagnosticsClientCapabilities(version_support=True),
            inlay_hint=types.InlayHintClientCapabilities(),  # it asks for them, as an editor that shows them says
        ),
    )
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter()
    # ruff's capabilities hold notebook filters this client cannot structure: take the reply raw
    client.protocol.get_result_type = lambda method: None  # type: ignore[method-assign]
    await client.protocol.send_request_async(types.INITIALIZE, types.InitializeParams(capabilities=caps, initialization_options={"debounce": 0}, root_uri="file:///tmp/torch_preflight_bench"))
    client.initialized(types.InitializedParams())
    first = waiting[1] = loop.create_future()
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    result: dict[str, Any] = {"cold": await asyncio.wait_for(first, 120) - t0, "latencies": {}}
    whole = types.InlayHintParams(text_document=types.TextDocumentIdentifier(uri=uri),
                                  range=types.Range(start=types.Position(0, 0), end=types.Position(text.count("\n") + 1, 0)))
    if hints:  # an editor asks for the hints of what it shows as soon as it opens the file
        t = time.perf_counter()
        await client.text_document_inlay_hint_async(whole)
        result["hints_first"] = time.perf_counter() - t
    for n, key in enumerate(keys):
        version = n + 2
        fut = waiting[version] = loop.create_future()
        sent = time.perf_counter()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(version=version, uri=uri), content_changes=[change(key)]))
        result["latencies"].setdefault(key[0], []).append((await asyncio.wait_for(fut, 60)) - sent)
    if hints:  # and again after each edit (the whole file here: at most what it shows)
        t = time.perf_counter()
        await client.text_document_inlay_hint_async(whole)
        result["hints"] = time.perf_counter() - t
    await client.shutdown_async(None)
    client.exit(None)
    await asyncio.sleep(0.2)
    await client.stop()
    return result


async def replay(path: Path, text: str, keys: list[Keystroke], verify: bool = False) -> dict[str, Any]:
    """The same keystrokes through the server's own handlers in this process: CPU time
    (`time.process_time`) and wall time per keystroke, from the change to its diagnostics.
    `verify`: after each keystroke (untimed), the document's analysis must equal a fresh
    `analyze()` of its text; the differences are counted."""
    from torch_preflight.server.documents import Document
    from torch_preflight.server.server import PreflightServer

    from torch_preflight.analyze import analyze

    class Server(PreflightServer):
        encoding = "utf-16"  # no client negotiated one: the default

    server = Server()
    server.config_ready.set()
    uri = path.resolve().as_uri()
    doc = server.docs[uri] = Document(uri, text, 1, project=server.project)
    c0, w0 = time.process_time(), time.perf_counter()
    server.lsp_diagnostics(doc)
    result: dict[str, Any] = {"cold_cpu": time.process_time() - c0, "cold": time.perf_counter() - w0, "latencies": {}, "cpu": {}, "complete": {}, "cpu_complete": {}}
    await server.settle(doc)  # the server primes parso after the first diagnostics
    c, w = time.process_time(), time.perf_counter()
    server.reports(doc)  # the hints an editor asks for as it opens the file: the estimator reads the modules it needs
    result["hints_first_cpu"], result["hints_first"] = time.process_time() - c, time.perf_counter() - w
    firsts: list[tuple[float, float]] = []  # the interim publication's CPU and wall clocks

    def early(items: list[Any]) -> None:
        firsts.append((time.process_time(), time.perf_counter()))

    for n, key in enumerate(keys):
        firsts.clear()
        c, w = time.process_time(), time.perf_counter()
        doc.update([change(key)], n + 2, "utf-16")
        server.lsp_diagnostics(doc, early=early)
        done = (time.process_time(), time.perf_counter())
        first = firsts[0] if firsts else done
        result["cpu"].setdefault(key[0], []).append(first[0] - c)
        result["latencies"].setdefault(key[0], []).append(first[1] - w)
        result["cpu_complete"].setdefault(key[0], []).append(done[0] - c)
        result["complete"].setdefault(key[0], []).append(done[1] - w)
        if verify:
            got, full = doc.analysis(server.config_for(doc)), analyze(doc.text, doc.path, server.config_for(doc), project=server.project)
            same = [(d.code, d.span, d.message) for d in got.diagnostics] == [(d.code, d.span, d.message) for d in full.diagnostics]
            result["differences"] = result.get("differences", 0) + (not same or got.syntax_errors != full.syntax_errors)
    c, w = time.process_time(), time.perf_counter()
    server.reports(doc)
    result["hints_cpu"], result["hints"] = time.process_time() - c, time.perf_counter() - w
    server.docs.clear()
    doc.close()
    server.executor.shutdown()
    gc.unfreeze()
    return result


def compile_package() -> None:
    """pip byte-compiles a package when it installs it; an editable checkout run with
    PYTHONDONTWRITEBYTECODE=1 (as on the development machine) would compile every module at
    each server start instead, which is no user's cold start."""
    root = Path(__file__).resolve().parents[2]
    for folder in ("core", "rules", "estimator", "server", "torch_preflight"):
        compileall.compile_dir(root / folder, quiet=1)


def ours_cmd() -> list[str]:
    return [sys.executable, *os.environ.get("BENCH_PY_ARGS", "").split(), "-m", "torch_preflight.server"]


def ruff_cmd() -> list[str] | None:
    ruff = shutil.which("ruff", path=os.path.dirname(sys.executable)) or shutil.which("ruff")
    return [ruff, "server"] if ruff else None


def ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 1000:.1f}"


def generated(args: argparse.Namespace) -> int:
    text = generate(args.lines)
    lines = text.splitlines()
    # Typing `0` or a space after `total = 0.0` keeps the file valid (`0.00`, `0.0 `).
    targets = [i for i, line in enumerate(lines) if line.strip().startswith("total = 0.0")]
    keys: list[Keystroke] = []
    for n in range(args.edits):
        line = targets[n % len(targets)]
        typed = "0" if n % 2 == 0 else " "
        keys.append(("edit", line, len(lines[line]), typed, 0))
        lines[line] += typed
    ours = asyncio.run(drive(ours_cmd(), URI, text, keys, hints=True))
    ruff = ruff_cmd()
    theirs = asyncio.run(drive(ruff, URI, text, keys, hints=False)) if ruff else None
    print(f"{text.count(chr(10))}-line module, {args.edits} single-character edits, debounce 0\n")
    print("| measure | torch-preflight | ruff server | ratio |")
    print("|---|---|---|---|")
    mine, other = ours["latencies"]["edit"], theirs["latencies"]["edit"] if theirs else None
    rows = (("didChange → diagnostics p50", statistics.median(mine), other and statistics.median(other)),
            ("didChange → diagnostics p95", q95(mine), other and q95(other)),
            ("cold start → first diagnostics", ours["cold"], theirs and theirs["cold"]))
    for label, a, b in rows:
        ratio = f"{a / b:.1f}x" if b else "n/a"
        print(f"| {label} | {ms(a)} ms | {ms(b)} ms | {ratio} |")
    print(f"| inlay hints, whole file, at open / after the edits | {ms(ours['hints_first'])} / {ms(ours['hints'])} ms | n/a | |")
    return 0


KINDS = ("valid", "broken")


def imports(top: int) -> int:
    """What the server imports before it can answer, by `python -X importtime` (cumulative
    microseconds per module, the slowest first; best of three runs, byte-compiled)."""
    best: dict[str, int] = {}
    for _ in range(3):
        run = subprocess.run([sys.executable, "-X", "importtime", "-c", "import torch_preflight.server.server"], capture_output=True, text=True, check=True)
        for line in run.stderr.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[1].strip().isdigit():
                name = parts[2].rstrip()
                best[name] = min(best.get(name, 1 << 62), int(parts[1]))
    rows = sorted(best.items(), key=lambda kv: kv[1], reverse=True)[:top]
    print("| module (indented: imported by the one above) | cumulative |\n|---|---|")
    for name, us in rows:
        print(f"| `{name}` | {us / 1000:.1f} ms |")
    return 0


def real(args: argparse.Namespace) -> int:
    paths = [p for p in files(args.min_lines) if not args.only or any(o in str(p) for o in args.only)]
    rows: list[dict[str, Any]] = []
    ruff = None if args.no_ruff or args.in_process else ruff_cmd()
    for path in paths:
        text = path.read_text(encoding="utf-8")
        keys = pairs("valid", sample(valid_edits(text), args.pairs)) + pairs("broken", sample(broken_edits(text), args.pairs))
        uri = "file:///tmp/torch_preflight_bench/" + path.name
        if args.in_process:
            ours = asyncio.run(replay(path, text, keys, args.verify))
        else:
            ours = asyncio.run(drive(ours_cmd(), uri, text, keys, hints=True))
        theirs = asyncio.run(drive(ruff, uri, text, keys, hints=False)) if ruff else None
        row = {"file": str(path.relative_to(OUT)) if path.is_relative_to(OUT) else str(path), "lines": text.count("\n"), "ours": ours, "ruff": theirs}
        rows.append(row)
        print(f"[bench] {row['file']}: {summary(row, args.in_process)}", file=sys.stderr, flush=True)
    report(rows, args)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = OUT / "lsp" / f"real-{'inproc' if args.in_process else 'lsp'}-{stamp}.json"
    out.write_text(json.dumps({"args": vars(args), "load": os.getloadavg(), "rows": rows}, indent=1))
    print(f"\nraw figures: {out}")
    return 0


def stats(values: list[float] | None) -> tuple[float | None, float | None]:
    return (statistics.median(values), q95(values)) if values else (None, None)


def summary(row: dict[str, Any], cpu: bool) -> str:
    o = row["ours"]
    key = "cpu" if cpu else "latencies"
    parts = [f"cold {ms(o.get('cold_cpu', o['cold']))}"] + ([f"{o['differences']} versions differ from a fresh analysis"] if "differences" in o else [])
    for kind in KINDS:
        p50, p95 = stats(o[key].get(kind))
        parts.append(f"{kind} {ms(p50)}/{ms(p95)}")
    return ", ".join(parts) + " ms"


def hint_time(ours: dict[str, Any], field: str) -> float | None:
    """The inlay hints' CPU time in-process, else their wall time over stdio (None: not measured)."""
    return ours.get(f"{field}_cpu", ours.get(field))


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    cpu = args.in_process
    unit = "CPU ms, in-process" if cpu else "ms, wall, over stdio"
    print(f"\n{len(rows)} files, {args.pairs} pairs of keystrokes per kind and file, debounce 0 ({unit}); load {os.getloadavg()[0]:.2f}\n")
    head = "| file | lines | cold start | valid p50 / p95 | broken p50 / p95 | inlay hints at open / after edits |"
    sep = "|---|---|---|---|---|---|"
    if cpu:
        head += " complete: valid p50 / p95 | broken p50 / p95 |"
        sep += "---|---|"
    else:
        head += " ruff valid p95 / broken p95 / cold |"
        sep += "---|"
    print(head)
    print(sep)
    key = "cpu" if cpu else "latencies"
    pooled: dict[str, list[float]] = {k: [] for k in KINDS}
    for row in rows:
        o, r = row["ours"], row["ruff"]
        cells = [row["file"], f"{row['lines']:,}", ms(o.get("cold_cpu", o["cold"]))]
        for kind in KINDS:
            pooled[kind] += o[key].get(kind, [])
            p50, p95 = stats(o[key].get(kind))
            cells.append(f"{ms(p50)} / {ms(p95)}")
        cells.append(f"{ms(hint_time(o, 'hints_first'))} / {ms(hint_time(o, 'hints'))}")
        if cpu:
            for kind in KINDS:
                pooled["complete " + kind] = pooled.get("complete " + kind, []) + o["cpu_complete"].get(kind, [])
                p50, p95 = stats(o["cpu_complete"].get(kind))
                cells.append(f"{ms(p50)} / {ms(p95)}")
        else:
            cells.append(" / ".join([*(ms(stats(r["latencies"].get(k))[1]) for k in KINDS), ms(r["cold"])]) if r else "n/a")
        print("| " + " | ".join(cells) + " |")
    for kind in pooled:
        p50, p95 = stats(pooled[kind])
        print(f"\npooled {kind} keystrokes: p50 {ms(p50)} ms, p95 {ms(p95)} ms ({len(pooled[kind])} keystrokes)")
    colds = [row["ours"].get("cold_cpu", row["ours"]["cold"]) for row in rows]
    print(f"cold start median {ms(statistics.median(colds))} ms")
    for field, label in (("hints_first", "at open"), ("hints", "after edits")):
        times = [t for row in rows if (t := hint_time(row["ours"], field)) is not None]
        if times:
            print(f"inlay hints {label}: median {ms(statistics.median(times))} ms, max {ms(max(times))} ms, "
                  f"over 100 ms on {sum(t > 0.1 for t in times)} of {len(times)} files")
    worst: Callable[[dict[str, Any]], float] = lambda row: max(stats(row["ours"][key].get(k))[1] or 0.0 for k in KINDS)  # noqa: E731
    print("\nslowest files (worst p95 of the two kinds):")
    for row in sorted(rows, key=worst, reverse=True)[: args.slowest]:
        print(f"  {ms(worst(row))} ms  {row['file']} ({row['lines']:,} lines)")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--edits", type=int, default=200, help="generated mode: keystrokes")
    parser.add_argument("--lines", type=int, default=3000, help="generated mode: module size")
    parser.add_argument("--real", action="store_true", help="real-files mode")
    parser.add_argument("--pairs", type=int, default=20, help="real-files mode: edits (typed + deleted) per kind and file")
    parser.add_argument("--in-process", action="store_true", help="real-files mode: CPU time per keystroke in this process, no ruff")
    parser.add_argument("--only", action="append", help="real-files mode: only files whose path contains this (repeatable)")
    parser.add_argument("--min-lines", type=int, default=300, help="real-files mode: corpus files over this many lines")
    parser.add_argument("--verify", action="store_true", help="with --in-process: compare each version with a fresh analyze()")
    parser.add_argument("--no-ruff", action="store_true")
    parser.add_argument("--slowest", type=int, default=10)
    parser.add_argument("--imports", type=int, metavar="N", help="list the N costliest imports of the server (python -X importtime)")
    args = parser.parse_args()
    compile_package()
    if args.imports:
        return imports(args.imports)
    return real(args) if args.real else generated(args)


if __name__ == "__main__":
    sys.exit(main())
