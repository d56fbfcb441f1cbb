"""Inlay hints alone (issue 19): for each file, the server's memory estimate (what inlay hints and hover show) as
the file opens and again after one edit, CPU ms, in-process, a fresh server per file; and the number of reports.

The file is opened and analysed as the language server does (first diagnostics, parso primed), the estimate is
asked for (the estimator reads what the file imports then), a line is appended, the file analysed again, and the
estimate asked for again (what each edit costs). `bench_lsp.py --real` times the same two requests around its
keystrokes; this script times only them, for a list of files.

Usage: python bench/lsp/hints.py FILE... [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any


async def measure(path: Path) -> tuple[float, float, int]:
    from lsprotocol import types
    from torch_preflight.server.documents import Document
    from torch_preflight.server.server import PreflightServer

    class Server(PreflightServer):
        encoding = "utf-16"

    server = Server()
    server.config_ready.set()
    text = path.read_text(encoding="utf-8")
    uri = path.resolve().as_uri()
    doc = server.docs[uri] = Document(uri, text, 1, project=server.project)
    server.lsp_diagnostics(doc)
    await server.settle(doc)
    c = time.process_time()
    server.reports(doc)
    at_open = time.process_time() - c
    end = types.Position(len(text.splitlines()), 0)
    doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=end, end=end), text="\nx = 1\n")], 2, "utf-16")
    server.lsp_diagnostics(doc)
    c = time.process_time()
    reports = server.reports(doc)
    after_edit = time.process_time() - c
    server.docs.clear()
    doc.close()
    server.executor.shutdown()
    return at_open, after_edit, len(reports)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for path in args.files:
        at_open, after_edit, reports = asyncio.run(measure(path))
        results[str(path)] = {"at_open": at_open, "after_edit": after_edit, "reports": reports}
        print(f"{at_open * 1e3:7.1f} {after_edit * 1e3:7.1f} ms  {reports} reports  {path}", flush=True)
    for key, label in (("at_open", "at open"), ("after_edit", "after an edit")):
        times = [r[key] for r in results.values()]
        print(f"{label}: median {statistics.median(times) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms, "
              f"over 100 ms on {sum(t > 0.1 for t in times)} of {len(times)} files")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
