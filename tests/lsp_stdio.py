"""A minimal language-server client over stdio, in raw JSON-RPC, for servers started from a
command line (an installed wheel, the bundle inside the .vsix) rather than from this checkout.

`first_diagnostics(argv, path)` starts the server, initializes it, opens `path` and returns the
first non-empty `textDocument/publishDiagnostics` for it, then shuts the server down.
"""

from __future__ import annotations

import json
import queue
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import IO, Any


def _send(stdin: IO[bytes], message: dict[str, Any]) -> None:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    stdin.flush()


def _read(stdout: IO[bytes], out: queue.Queue[dict[str, Any] | None]) -> None:
    while True:
        length = None
        while (line := stdout.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if not line or length is None:
            out.put(None)
            return
        out.put(json.loads(stdout.read(length)))


def first_diagnostics(argv: list[str], path: Path, *, env: dict[str, str] | None = None, timeout: float = 60) -> list[dict[str, Any]]:
    stderr = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=path.parent)
    assert proc.stdin and proc.stdout
    messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
    threading.Thread(target=_read, args=(proc.stdout, messages), daemon=True).start()

    def wait_for(predicate: Any) -> dict[str, Any]:
        while True:
            try:
                message = messages.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no answer from {argv} within {timeout} s") from None
            if message is None:
                stderr.seek(0)
                raise AssertionError(f"{argv} exited with {proc.wait()}: {stderr.read().decode(errors='replace')}")
            if predicate(message):
                return message

    uri = path.resolve().as_uri()
    try:
        _send(proc.stdin, {"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": path.parent.resolve().as_uri(), "capabilities": {}}})
        init = wait_for(lambda m: m.get("id") == 1)
        assert "result" in init and init["result"]["capabilities"], init
        _send(proc.stdin, {"method": "initialized", "params": {}})
        _send(proc.stdin, {"method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": path.read_text(encoding="utf-8")}}})
        published = wait_for(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                             and m["params"]["uri"] == uri and m["params"]["diagnostics"])
        _send(proc.stdin, {"id": 2, "method": "shutdown"})
        wait_for(lambda m: m.get("id") == 2)
        _send(proc.stdin, {"method": "exit"})
        assert proc.wait(timeout=timeout) == 0
        return published["params"]["diagnostics"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, stderr):
            if stream:
                stream.close()
