"""Analysis off the event loop: a newer version abandons a stale analysis, and what is published is versioned."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from lsprotocol import types
from torch_preflight.core.config import Config
from torch_preflight.server import convert
from torch_preflight.server.documents import Document, Stale
from torch_preflight.server.server import PreflightServer

from torch_preflight.analyze import analyze

URI = "file:///tmp/tp_worker/train.py"
TEXT = """import torch


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
"""


class Server(PreflightServer):
    encoding = convert.UTF16  # no client negotiated one

    def __init__(self) -> None:
        super().__init__()
        self.published: list[types.PublishDiagnosticsParams] = []
        self.config_ready.set()

    def text_document_publish_diagnostics(self, params: types.PublishDiagnosticsParams) -> None:  # type: ignore[override]
        self.published.append(params)


def type_at_end(doc: Document, text: str, version: int) -> None:
    line = doc.text.count("\n")
    end = types.Position(line, 0)
    doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=end, end=end), text=text)], version, convert.UTF16)


def test_a_stale_analysis_is_abandoned_and_the_next_one_is_right() -> None:
    doc = Document(URI, TEXT, 1)
    config = Config()
    doc.analysis(config)
    type_at_end(doc, "x = 1\n", 2)
    with pytest.raises(Stale):
        doc.analysis(config, stale=lambda: True)
    type_at_end(doc, "y = (\n", 3)
    got = doc.analysis(config, stale=lambda: False)
    full = analyze(doc.text, doc.path, config)
    assert [(d.code, d.span) for d in got.diagnostics] == [(d.code, d.span) for d in full.diagnostics]
    assert got.syntax_errors == full.syntax_errors


def test_the_analysis_runs_on_the_worker_and_a_newer_change_suppresses_the_stale_publication() -> None:
    async def scenario() -> tuple[Server, list[str]]:
        server = Server()
        doc = server.docs[URI] = Document(URI, TEXT, 1, project=server.project)
        threads: list[str] = []
        build = doc.builder.build

        def slow_build(*args: Any, **kwargs: Any) -> Any:
            threads.append(threading.current_thread().name)
            if doc.version == 2:  # the user types on while version 2 is analysed
                type_at_end(doc, "z = 2\n", 3)
            return build(*args, **kwargs)

        doc.builder.build = slow_build  # type: ignore[method-assign]
        type_at_end(doc, "x = 1\n", 2)
        await server._publish_later(URI, 2)
        await server._publish_later(URI, 3)
        server.executor.shutdown()
        return server, threads

    server, threads = asyncio.run(scenario())
    assert [p.version for p in server.published] == [3]
    assert all(name.startswith("torch-preflight-analysis") for name in threads)
    doc = server.docs[URI]
    assert doc.primed  # parso got the text after the first publication
    full = analyze(doc.text, doc.path, Config())
    assert len(server.published[0].diagnostics) == len(full.diagnostics) + len(full.syntax_errors[:1])
