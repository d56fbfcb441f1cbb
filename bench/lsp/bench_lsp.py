"""LSP benchmark: drive `torch-preflight server` (and `ruff server`) over stdio with a 3,000-line module.

Measures cold start (initialize -> first diagnostics), p50/p95 of didChange -> publishDiagnostics
over 200 single-character edits with debounce 0, and inlay hints for the whole file.
Usage: python bench/lsp/bench_lsp.py [--edits 200] [--lines 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

sys.path.insert(0, str(Path(__file__).parent))
from genmodule import generate

URI = "file:///tmp/torch_preflight_bench/train_big.py"


async def run(cmd: list[str], text: str, edits: int, hints: bool) -> dict[str, float]:
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
        text_document=types.TextDocumentClientCapabilities(publish_diagnostics=types.PublishDiagnosticsClientCapabilities(version_support=True)),
    )
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter()
    # ruff's capabilities hold notebook filters this client cannot structure: take the reply raw
    client.protocol.get_result_type = lambda method: None  # type: ignore[method-assign]
    await client.protocol.send_request_async(types.INITIALIZE, types.InitializeParams(capabilities=caps, initialization_options={"debounce": 0}, root_uri="file:///tmp/torch_preflight_bench"))
    client.initialized(types.InitializedParams())
    first = waiting[1] = loop.create_future()
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=URI, language_id="python", version=1, text=text)))
    cold = await asyncio.wait_for(first, 60) - t0
    lines = text.splitlines()
    # Typing `0` or a space after `total = 0.0` keeps the file valid (`0.00`, `0.0 `); appending
    # to `correct = 0` or `acc = []` would leave a syntax error that every later edit keeps.
    targets = [i for i, line in enumerate(lines) if line.strip().startswith("total = 0.0")]
    latencies = []
    for n in range(edits):
        version = n + 2
        line = targets[n % len(targets)]
        col = len(lines[line])
        fut = waiting[version] = loop.create_future()
        sent = time.perf_counter()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(version=version, uri=URI),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=types.Position(line, col), end=types.Position(line, col)), text="0" if n % 2 == 0 else " ")],
        ))
        lines[line] += "0" if n % 2 == 0 else " "
        latencies.append((await asyncio.wait_for(fut, 30)) - sent)
    result = {"cold": cold, "p50": statistics.median(latencies), "p95": statistics.quantiles(latencies, n=20)[18]}
    if hints:
        t = time.perf_counter()
        await client.text_document_inlay_hint_async(types.InlayHintParams(
            text_document=types.TextDocumentIdentifier(uri=URI), range=types.Range(start=types.Position(0, 0), end=types.Position(len(lines), 0))))
        result["hints"] = time.perf_counter() - t
    await client.shutdown_async(None)
    client.exit(None)
    await asyncio.sleep(0.2)
    await client.stop()
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--edits", type=int, default=200)
    parser.add_argument("--lines", type=int, default=3000)
    args = parser.parse_args()
    # pip byte-compiles a package when it installs it; an editable checkout run with
    # PYTHONDONTWRITEBYTECODE=1 (as on the development machine) would compile every module at
    # each server start instead, which is no user's cold start.
    root = Path(__file__).resolve().parents[2]
    for folder in ("core", "rules", "estimator", "server", "torch_preflight"):
        compileall.compile_dir(root / folder, quiet=1)
    text = generate(args.lines)
    ours = asyncio.run(run([sys.executable, *os.environ.get("BENCH_PY_ARGS", "").split(), "-m", "torch_preflight.server"], text, args.edits, hints=True))
    ruff = shutil.which("ruff", path=os.path.dirname(sys.executable)) or shutil.which("ruff")
    theirs = asyncio.run(run([ruff, "server"], text, args.edits, hints=False)) if ruff else None
    ms = lambda v: f"{v * 1000:.1f} ms"  # noqa: E731
    print(f"{text.count(chr(10))}-line module, {args.edits} single-character edits, debounce 0\n")
    print("| measure | torch-preflight | ruff server | ratio |")
    print("|---|---|---|---|")
    for key, label in (("p50", "didChange → diagnostics p50"), ("p95", "didChange → diagnostics p95"), ("cold", "cold start → first diagnostics")):
        other = ms(theirs[key]) if theirs else "n/a"
        ratio = f"{ours[key] / theirs[key]:.1f}x" if theirs else "n/a"
        print(f"| {label} | {ms(ours[key])} | {other} | {ratio} |")
    print(f"| inlay hints, whole file | {ms(ours['hints'])} | n/a | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
