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
        await asyncio.gather(*server.settling)
        server.executor.shutdown()
        return server, threads

    server, threads = asyncio.run(scenario())
    assert [p.version for p in server.published] == [3]
    assert all(name.startswith("torch-preflight-analysis") for name in threads)
    doc = server.docs[URI]
    assert doc.primed  # parso got the text once the document was idle after the first publication
    full = analyze(doc.text, doc.path, Config())
    assert len(server.published[0].diagnostics) == len(full.diagnostics) + len(full.syntax_errors[:1])


def test_parso_gets_the_text_once_the_document_is_idle_not_while_someone_types(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-text parse that primes parso's diff parser (0.25 s on 3,500 lines) waits until the
    document has had no new version for `SETTLE_AFTER_S`: the inlay hints a client asks as it
    opens the file, and the first keystrokes, do not queue behind it on the worker."""
    monkeypatch.setattr(Server, "SETTLE_AFTER_S", 0.05)

    async def scenario() -> tuple[bool, bool]:
        server = Server()
        doc = server.docs[URI] = Document(URI, TEXT, 1, project=server.project)
        await server._publish_later(URI, 1)
        type_at_end(doc, "x = 1\n", 2)  # typed before the document was idle
        await asyncio.sleep(0.1)
        typing = doc.primed
        await server._publish_later(URI, 2)
        await asyncio.gather(*server.settling)
        server.executor.shutdown()
        return typing, doc.primed

    assert asyncio.run(scenario()) == (False, True)


# TPF001 (no zero_grad: a local rule) and TPF007 (an eval loop without no_grad: a whole-module
# rule) in one file: the first is in the interim publication, the second only in the complete one.
STAGED = TEXT + """

def evaluate(model, loader):
    model.eval()
    total = 0
    for x, y in loader:
        total += model(x).sum().item()
    return total
"""


@pytest.mark.parametrize(
    ("lines", "whole_s", "elapsed", "worth"),
    [
        (10, None, 0.0, False),  # no whole-module rules ran yet: a small file waits for its complete result
        (Document.EARLY_LINES, None, 0.0, True),  # ... a large one gets the cheap rules first
        (10, 0.001, 0.002, False),  # the complete result follows within moments: one publication
        (10, 0.010, Document.EARLY_AFTER_S - 0.005, True),  # the local rules were slow: the rest would come late
        (10, Document.EARLY_AFTER_S, 0.0, True),  # the whole-module rules alone take that long
    ],
)
def test_the_interim_is_published_when_the_complete_result_would_come_late(lines: int, whole_s: float | None, elapsed: float, worth: bool) -> None:
    text = "x = 1\n" * lines
    doc = Document(URI, text, 1)
    doc.whole_s = whole_s
    assert doc._worth_publishing(doc.source, elapsed) is worth


def test_one_cheap_analysis_does_not_hide_that_the_whole_module_rules_may_take_long() -> None:
    """The estimate is the most of the last `RECENT` analyses: after 35 ms then cheap ones (brackets
    that the repair dropped again re-check little), a keystroke that re-checks the shape facts again
    is still expected to take long, and its cheap rules are published first; after `RECENT` cheap ones, not."""
    doc = Document(URI, "x = 1\n", 1)
    doc.record_whole(0.035)
    for _ in range(Document.RECENT - 1):
        doc.record_whole(0.001)
        assert doc.whole_s == 0.035 and doc._worth_publishing(doc.source, 0.005)
    doc.record_whole(0.001)
    assert not doc._worth_publishing(doc.source, 0.005)


def test_the_cheap_rules_are_published_first_and_the_second_publication_completes_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Document, "EARLY_LINES", 0)  # publish the interim result of this small file
    monkeypatch.setattr(Document, "EARLY_AFTER_S", 0.0)

    async def scenario() -> Server:
        server = Server()
        server.docs[URI] = Document(URI, STAGED, 1, project=server.project)
        await server._publish_later(URI, 1)
        type_at_end(server.docs[URI], "\n\nx = 1\n", 2)  # moves nothing: TPF007's finding is carried into version 2's interim
        await server._publish_later(URI, 2)
        server.executor.shutdown()
        return server

    server = asyncio.run(scenario())
    assert [p.version for p in server.published] == [1, 1, 2, 2]
    codes = [sorted(str(d.code) for d in p.diagnostics) for p in server.published]
    assert codes[0] == ["TPF001"]  # the local rules' findings: no earlier version to carry the others from
    # version 2's interim carries version 1's whole-module findings (TPF007; TPF009: train() after evaluate())
    assert codes[1] == codes[2] == codes[3] == ["TPF001", "TPF007", "TPF009"]
    doc = server.docs[URI]
    full = analyze(doc.text, doc.path, Config())
    assert [(d.code, d.range.start.line) for d in server.published[3].diagnostics] == [(d.code, d.span.start.line) for d in full.diagnostics]


def test_a_newer_edit_abandons_the_whole_module_rules_of_the_older_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_preflight import scoped

    monkeypatch.setattr(Document, "EARLY_LINES", 0)
    monkeypatch.setattr(Document, "EARLY_AFTER_S", 0.0)
    results: list[int] = []  # `scoped._result` runs once for the interim result, once for the complete one
    result = scoped._result
    monkeypatch.setattr(scoped, "_result", lambda *args: results.append(args[0] is not None) or result(*args))

    async def scenario() -> Server:
        server = Server()
        doc = server.docs[URI] = Document(URI, STAGED, 1, project=server.project)
        await server._publish_later(URI, 1)
        results.clear()
        type_at_end(doc, "x = 1\n", 2)
        interim = doc._interim

        def typing_on(config: Config, stale: Any, early: Any) -> Any:  # the user types while version 2's local rules run
            def hook(local: Any) -> None:
                type_at_end(doc, "y = 2\n", 3)
                interim(config, stale, early)(local)

            return hook

        doc._interim = typing_on  # type: ignore[method-assign]
        await server._publish_later(URI, 2)
        assert len(results) == 1  # version 2's local rules ran; its whole-module rules did not
        doc._interim = interim  # type: ignore[method-assign]
        await server._publish_later(URI, 3)
        server.executor.shutdown()
        return server

    server = asyncio.run(scenario())
    assert [p.version for p in server.published] == [1, 1, 3, 3]  # nothing of version 2 was published
    doc = server.docs[URI]
    full = analyze(doc.text, doc.path, Config())
    assert [(d.code, d.range.start.line) for d in server.published[-1].diagnostics] == [(d.code, d.span.start.line) for d in full.diagnostics]


def test_a_newer_edit_during_the_whole_module_rules_abandons_the_rest_of_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Document, "EARLY_LINES", 0)
    monkeypatch.setattr(Document, "EARLY_AFTER_S", 0.0)
    asked: list[int] = []  # the version current at each check before a whole-module rule

    async def scenario() -> Server:
        server = Server()
        doc = server.docs[URI] = Document(URI, STAGED, 1, project=server.project)
        abandon_if = doc._abandon_if

        def typing_on(stale: Any, pause: Any = None) -> Any:  # the user types while version 2's first whole-module rule runs
            between = abandon_if(stale, pause)

            def check() -> None:
                asked.append(doc.version or 0)
                if asked.count(2) == 2:  # version 2's second whole-module rule
                    type_at_end(doc, "y = 2\n", 3)
                between()

            return check

        doc._abandon_if = typing_on  # type: ignore[method-assign]
        await server._publish_later(URI, 1)
        count = len(asked)
        type_at_end(doc, "x = 1\n", 2)
        await server._publish_later(URI, 2)
        assert len(asked) == count + 2  # version 2: the second whole-module rule was not run
        await server._publish_later(URI, 3)
        server.executor.shutdown()
        return server

    server = asyncio.run(scenario())
    versions = [p.version for p in server.published]
    assert versions[:2] == [1, 1] and versions[-2:] == [3, 3]
    assert versions.count(2) <= 1  # version 2's interim, when the event loop sent it before version 3 arrived; never its complete result
    doc = server.docs[URI]
    full = analyze(doc.text, doc.path, Config())
    assert [(d.code, d.range.start.line) for d in server.published[-1].diagnostics] == [(d.code, d.span.start.line) for d in full.diagnostics]


MODEL = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(64, 64) for _ in range(40)])

    def forward(self, x):
        return self.layers(x)


model = Net()
optimizer = torch.optim.Adam(model.parameters())
for step in range(3):
    optimizer.zero_grad()
    model(torch.randn(8, 64)).sum().backward()
    optimizer.step()
"""


def test_an_estimate_stops_once_its_caller_no_longer_wants_it() -> None:
    from torch_preflight.estimator import estimate_source

    asked: list[int] = []

    def stale() -> bool:  # the text has changed since the estimate began
        asked.append(1)
        return True

    assert estimate_source(MODEL, "<string>", stale=stale) == [] and len(asked) == 1  # stopped at the first question
    (report,) = estimate_source(MODEL, "<string>", stale=lambda: False)
    assert report.model == "Net" and report.complete


def test_a_stale_estimate_is_not_kept() -> None:
    from torch_preflight.estimator import estimate_source

    doc = Document(URI, MODEL, 1)
    assert doc.memory(Config(), estimate_source, stale=lambda: True) == []
    assert doc.reports is None  # nothing kept for the version the estimate was about
    assert [r.model for r in doc.memory(Config(), estimate_source)] == ["Net"]


def test_hints_and_hover_run_off_the_event_loop_and_a_change_meanwhile_answers_content_modified() -> None:
    from pygls.exceptions import JsonRpcContentModified

    server = Server()
    doc = server.docs[URI] = Document(URI, MODEL, 1)
    threads: list[str] = []

    def work(stale: Any) -> str:
        threads.append(threading.current_thread().name)
        return "done"

    def edited_meanwhile(stale: Any) -> str:
        type_at_end(doc, "x = 1\n", 2)
        assert stale()
        return "done"

    async def run() -> None:
        assert await server.off_loop(doc, 1, work) == "done"
        with pytest.raises(JsonRpcContentModified):
            await server.off_loop(doc, 1, edited_meanwhile)

    asyncio.run(run())
    assert threads[0].startswith("torch-preflight-analysis")
    server.executor.shutdown()


def test_a_request_waiting_for_the_worker_sets_the_whole_module_rules_aside_until_it_is_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inlay hints asked while version 1's whole-module rules run (as an editor asks as a file
    opens): the rules give way, the hints are answered, then the rules run again (once: another
    request does not set them aside a second time) and the complete result is published."""
    monkeypatch.setattr(Document, "EARLY_LINES", 0)
    monkeypatch.setattr(Document, "EARLY_AFTER_S", 0.0)
    events: list[str] = []

    async def scenario() -> Server:
        server = Server()
        doc = server.docs[URI] = Document(URI, STAGED, 1, project=server.project)
        abandon_if = doc._abandon_if
        loop = asyncio.get_running_loop()
        asked: list[asyncio.Future[str]] = []

        def asking(stale: Any, pause: Any = None) -> Any:
            between = abandon_if(stale, pause)

            def check() -> None:
                if len(asked) < 2:  # a request arrives during the first whole-module rule of each run
                    ready = threading.Event()
                    # the request's task submits its job when it first runs: the loop's next callback comes after
                    loop.call_soon_threadsafe(lambda: asked.append(asyncio.ensure_future(server.off_loop(doc, 1, answer))) or loop.call_soon(ready.set))
                    ready.wait()
                events.append("rule")
                between()

            return check

        def answer(stale: Any) -> str:
            events.append("request")
            return "hints"

        doc._abandon_if = asking  # type: ignore[method-assign]
        await server._publish_later(URI, 1)
        while URI in server.pending:  # the run after the request
            await server.pending[URI]
        assert [await request for request in asked] == ["hints", "hints"]
        server.executor.shutdown()
        return server

    server = asyncio.run(scenario())
    assert events[:3] == ["rule", "request", "rule"]  # set aside at once; the run after the request is not set aside for the second
    assert events.count("request") == 2 and events[-1] == "request"
    assert [p.version for p in server.published] == [1, 1, 1]  # the interim, the interim again, the complete result
    doc = server.docs[URI]
    full = analyze(doc.text, doc.path, Config())
    assert [(d.code, d.range.start.line) for d in server.published[-1].diagnostics] == [(d.code, d.span.start.line) for d in full.diagnostics]
    assert doc.result is not None and doc.result_key is not None and doc.result_key[0] == 1


LEAK = (
    "import numpy as np\nfrom sklearn.model_selection import train_test_split\nfrom sklearn.preprocessing import StandardScaler\n\n"
    'X = np.load("x.npy")\ny = np.load("y.npy")\nv0 = X.shape[0]\n'
    + "".join(f"v{i} = v{i - 1} + 1\n" for i in range(1, 200))
    + "scaler = StandardScaler().fit(X)\nX_train, X_test, y_train, y_test = train_test_split(scaler.transform(X), y)\n"
)


def test_a_long_provenance_search_gives_way_to_a_newer_version_and_is_done_again_afresh() -> None:
    """TPF201's search through every definition's provenance asks whether the version is still
    the latest now and then (`dataflow.CHECKPOINT`), not only between rules: a newer version
    stops it mid-way. The model's data-flow facts, which hold part of that search, are dropped,
    and an analysis of the same text finds what a fresh one does."""
    import inspect

    from torch_preflight.core.dataflow import CHECKPOINT

    doc = Document(URI, LEAK, 1)
    config = Config()
    inside: list[str] = []

    def stale() -> bool:  # a newer version arrived while the provenance search runs
        caller = inspect.currentframe().f_back.f_back  # type: ignore[union-attr]
        inside.append(caller.f_code.co_name if caller is not None else "")
        return inside[-1] == "def_info"

    with pytest.raises(Stale):
        doc.analysis(config, stale=stale)
    assert "def_info" in inside
    assert doc.built is not None and doc.result is None
    model = doc.built[1]
    assert CHECKPOINT not in model.__dict__ and "_tpf_dataflow" not in model.__dict__
    got = doc.analysis(config)
    full = analyze(LEAK, doc.path, config)
    assert "TPF201" in {d.code for d in full.diagnostics}
    assert [(d.code, d.span) for d in got.diagnostics] == [(d.code, d.span) for d in full.diagnostics]


def test_a_client_that_shows_inlay_hints_gets_them_estimated_before_the_whole_module_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a file opens, an editor that shows inlay hints asks for them at once: the first
    analysis estimates the memory right after publishing the cheap rules' findings, before the
    whole-module rules, and the request is answered from that estimate without the worker
    (`Document.known_reports`); a client without inlay hints gets no estimate it did not ask for."""
    from torch_preflight import scoped

    monkeypatch.setattr(Document, "EARLY_LINES", 0)
    monkeypatch.setattr(Document, "EARLY_AFTER_S", 0.0)
    order: list[str] = []
    whole = scoped.ScopedChecker._whole_rules
    monkeypatch.setattr(scoped.ScopedChecker, "_whole_rules", staticmethod(lambda *a: order.append("rules") or whole(*a)))

    def opened(hints: bool) -> Server:
        async def scenario() -> Server:
            server = Server()
            caps = types.TextDocumentClientCapabilities(inlay_hint=types.InlayHintClientCapabilities() if hints else None)
            server.protocol.client_capabilities = types.ClientCapabilities(text_document=caps)
            estimator = server.estimator
            server.estimator = lambda *a, **k: order.append("estimate") or estimator(*a, **k)  # type: ignore[misc]
            server.docs[URI] = Document(URI, MODEL, 1, project=server.project)
            await server._publish_later(URI, 1)
            server.executor.shutdown()
            return server

        return asyncio.run(scenario())

    server = opened(hints=True)
    assert order == ["estimate", "rules"]
    doc = server.docs[URI]
    reports = doc.known_reports(server.config_for(doc))
    assert reports is not None and [r.model for r in reports] == ["Net"]
    type_at_end(doc, "x = 1\n", 2)
    assert doc.known_reports(server.config_for(doc)) is None  # of another text
    order.clear()
    opened(hints=False)
    assert order == ["rules"]
