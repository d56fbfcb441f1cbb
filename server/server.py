"""The language server: thin handlers over server.documents, server.settings and server.convert."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, ClassVar, Literal, TypeVar

from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified, JsonRpcInternalError
from pygls.lsp.server import LanguageServer
from torch_preflight.core.config import Config
from torch_preflight.core.diagnostics import Applicability, Diagnostic, apply_fixes
from torch_preflight.core.memory import MemoryReport
from torch_preflight.core.noqa import suppress_edit
from torch_preflight.core.notebook import touches_neutral
from torch_preflight.core.project import Project
from torch_preflight.core.source import Span

from torch_preflight import __version__
from torch_preflight.analyze import Result

from . import convert
from .collector import Collector
from .documents import Document, Paused, Stale, uri_to_path
from .notebooks import NOTEBOOK_SYNC, Notebooks
from .settings import SETTINGS_SECTION, Settings, parse_settings

log = logging.getLogger(__name__)
T = TypeVar("T")


def estimate_source(*args: Any, **kwargs: Any) -> list[MemoryReport]:
    """The estimator, imported at the first inlay hint or hover (about 0.1 s of imports that
    the first diagnostics do not need)."""
    from torch_preflight.estimator import estimate_source as estimate

    return estimate(*args, **kwargs)


FIX_ALL = "source.fixAll.torch-preflight"
CONFIG_TIMEOUT_S = 5.0


class PreflightServer(LanguageServer):
    SETTLE_AFTER_S: ClassVar[float] = 0.5  # see `settle_when_idle`

    def __init__(self) -> None:
        super().__init__("torch-preflight", __version__, notebook_document_sync=NOTEBOOK_SYNC)
        self.notebooks = Notebooks(self)  # notebook documents (LSP 3.17 notebook sync)
        self.docs: dict[str, Document] = {}
        self.settings = Settings()
        self.init_settings = Settings()
        self.config_ready = asyncio.Event()
        self.pending: dict[str, asyncio.Task[None]] = {}
        # Analyses run here, one at a time, off the event loop: it keeps reading changes, and a
        # change that makes an analysis stale abandons it (`Document.analysis(stale=...)`).
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch-preflight-analysis")
        self.settling: set[asyncio.Future[None]] = set()  # `settle` after a pulled report or when idle
        self.pull = False
        self.requests: set[Future[Any]] = set()  # `off_loop`'s jobs (hints, hover): see `requests_waiting`
        self.collector = Collector()  # automatic collection paused during analyses; sweeps when idle
        self._sweep_timer: asyncio.TimerHandle | None = None
        self.estimator: Callable[..., list[MemoryReport]] | None = estimate_source  # tests swap in a fake
        self.project = Project()  # the user's other modules, shared by all documents; open buffers override the disk
        self.folder_settings: dict[str, Settings] = {}  # workspace folder path -> its settings (multi-root)

    def report_server_error(self, error: Exception, source: Any) -> None:
        """pygls' default shows the error to the user; an error in sending data (the client's pipe
        closed as it exits, a write after the writer closed) would fail to send that message in
        turn, and pygls reports that failure again, without end (the server spun in that
        recursion after `exit` while a publication was still scheduled): only logged."""
        if source is JsonRpcInternalError:
            log.error("could not send to the client: %s", error)
            return
        super().report_server_error(error, source)

    # --- capabilities -------------------------------------------------------------
    def _caps(self) -> types.ClientCapabilities:
        caps = getattr(self.protocol, "client_capabilities", None)  # none before `initialize`
        return caps if isinstance(caps, types.ClientCapabilities) else types.ClientCapabilities()

    @property
    def encoding(self) -> str:
        enc = self.workspace.position_encoding
        return str(getattr(enc, "value", enc) or convert.UTF16)

    def supports_configuration(self) -> bool:
        ws = self._caps().workspace
        return bool(ws and ws.configuration)

    def supports_resolve(self) -> bool:
        td = self._caps().text_document
        ca = td.code_action if td else None
        return bool(ca and ca.resolve_support and "edit" in ca.resolve_support.properties)

    def supports_refresh(self, what: str) -> bool:
        ws = self._caps().workspace
        cap = getattr(ws, what, None) if ws else None
        return bool(cap and cap.refresh_support)

    # --- settings -----------------------------------------------------------------
    def apply_settings(self, raw: Any, base: Settings | None = None) -> None:
        settings, problems = parse_settings(raw)
        if raw is None and base is not None:
            settings = base
        self.settings = settings
        for problem in problems:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=problem))

    def settings_for(self, path: str) -> Settings:
        """The settings of the innermost workspace folder holding `path` (multi-root), else the global ones."""
        inner = max((folder for folder in self.folder_settings if path.startswith(folder + os.sep)), key=len, default=None)
        return self.folder_settings[inner] if inner is not None else self.settings

    def config_for(self, doc: Document) -> Config:
        config, problems = self.settings_for(doc.path).config_for(doc.path)
        for problem in problems:
            log.warning(problem)
        return config

    def _folders(self) -> list[str]:
        try:
            return [folder.uri for folder in self.workspace.folders.values()]
        except Exception:  # no workspace yet
            return []

    async def fetch_configuration(self) -> None:
        """The global settings, then those of each workspace folder (a multi-root workspace can set
        a budget or a rule selection per folder; a client answers a scoped request with the folder's
        effective settings)."""
        folders = self._folders()
        items = [types.ConfigurationItem(section=SETTINGS_SECTION)]
        items += [types.ConfigurationItem(scope_uri=uri, section=SETTINGS_SECTION) for uri in folders]
        try:
            reply = await asyncio.wait_for(self.workspace_configuration_async(types.ConfigurationParams(items=items)), CONFIG_TIMEOUT_S)
            reply = list(reply or [])
            raw = reply[0] if reply else None
            if raw is None:
                self.settings = self.init_settings
            else:
                self.apply_settings(dict(raw) if isinstance(raw, dict) else raw)
            per_folder: dict[str, Settings] = {}
            for uri, scoped in zip(folders, reply[1:], strict=False):
                if isinstance(scoped, dict) and scoped != raw:
                    settings, problems = parse_settings(scoped)
                    per_folder[uri_to_path(uri).rstrip(os.sep)] = settings
                    for problem in problems:
                        self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=problem))
            self.folder_settings = per_folder
        except Exception:  # a client that never answers must not block diagnostics
            log.exception("workspace/configuration failed")
        finally:
            self.config_ready.set()

    # --- diagnostics --------------------------------------------------------------
    def lsp_diagnostics(
        self,
        doc: Document,
        stale: Callable[[], bool] | None = None,
        early: Callable[[list[types.Diagnostic]], None] | None = None,
        pause: Callable[[], bool] | None = None,
    ) -> list[types.Diagnostic]:
        """The protocol items of the document's analysis. `early`: called on this thread with the
        items of the interim result (`Document.analysis`), before the whole-module rules run."""
        with doc.busy, self.collector.analysis(abandoned=(Stale,)):  # `doc.converted` is this document's too
            interim = (lambda result: early(self._items(doc, result, keep=False))) if early is not None else None
            return self._items(doc, doc.analysis(self.config_for(doc), stale, interim, pause), keep=True)

    def _items(self, doc: Document, result: Result, keep: bool) -> list[types.Diagnostic]:
        # A finding an edit elsewhere left alone converts the same way while its lines read the
        # same (columns count UTF-16 units): reuse the last publication's item (`keep`: this
        # publication's items are the ones the next one reuses).
        source, encoding = result.source, self.encoding
        converted: dict[int, tuple[Diagnostic, tuple[str, ...], types.Diagnostic]] = {}
        items: list[types.Diagnostic] = []
        for d in result.diagnostics:  # the very objects, when the analysis reused them
            lines = tuple(source.line(n) for n in sorted({n for s in (d.span, *(r.span for r in d.related)) for n in (s.start.line, s.end.line)}))
            known = doc.converted.get(id(d))
            item = known[2] if known is not None and known[0] is d and known[1] == lines else convert.to_lsp_diagnostic(d, source, doc.uri, encoding)
            converted[id(d)] = (d, lines, item)  # the entry keeps `d` alive: its id stays its own
            items.append(item)
        if keep:
            doc.converted = converted
        items += [convert.syntax_diagnostic(e.message, e.position, source, encoding) for e in result.syntax_errors[:1]]
        return items

    def schedule(self, doc: Document) -> None:
        if self.pull:
            return
        task = self.pending.pop(doc.uri, None)
        if task is not None:
            task.cancel()
        self.pending[doc.uri] = asyncio.ensure_future(self._publish_later(doc.uri, doc.version))

    async def _publish_later(self, uri: str, version: int | None, pausable: bool = True) -> None:
        """Analyse the document's `version` on the worker and publish its diagnostics: the local
        rules' first, then the complete result. When a request waits for the worker meanwhile
        (`requests_waiting`), the whole-module rules are set aside for it and run again after
        it, once (`pausable` False then: a stream of requests cannot starve them)."""
        doc = self.docs.get(uri)
        delay = self.settings_for(doc.path).debounce_ms / 1000 if doc is not None and pausable else 0
        if delay:
            await asyncio.sleep(delay)
        if not self.config_ready.is_set():
            await self.config_ready.wait()
        doc = self.docs.get(uri)
        if doc is None or doc.version != version:
            return  # closed or stale: a newer change has its own task
        stale = lambda: self.docs.get(uri) is not doc or doc.version != version  # noqa: E731
        loop = asyncio.get_running_loop()

        def publish(items: list[types.Diagnostic]) -> None:  # on the event loop
            if not stale():
                self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=items, version=version))

        def early(items: list[types.Diagnostic]) -> None:  # on the worker: the cheap rules' publication, first
            loop.call_soon_threadsafe(publish, items)
            if self.early_estimate(doc):
                self.reports(doc, stale)

        pause = self.requests_waiting if pausable else None
        try:
            items = await loop.run_in_executor(self.executor, self._diagnostics_unless_stale, doc, stale, early, pause)
        finally:
            if self.pending.get(uri) is asyncio.current_task():
                del self.pending[uri]
        if items is False:  # paused: the request, queued before this, runs first
            if not stale():
                self.pending[uri] = asyncio.ensure_future(self._publish_later(uri, version, pausable=False))
            return
        if items is not None and not stale():
            publish(items)  # after the interim one, if any: `call_soon_threadsafe` ran it before this task resumed
            self.settle_when_idle(doc)
        self.sweep_when_idle()

    def _diagnostics_unless_stale(
        self,
        doc: Document,
        stale: Callable[[], bool],
        early: Callable[[list[types.Diagnostic]], None] | None = None,
        pause: Callable[[], bool] | None = None,
    ) -> list[types.Diagnostic] | Literal[False] | None:
        """The items, None when the version is stale, False when paused (see `_publish_later`)."""
        if stale():
            return None
        try:
            return self.lsp_diagnostics(doc, stale, early, pause)
        except Paused:
            return False
        except Stale:
            return None

    def early_estimate(self, doc: Document) -> bool:
        """Whether to estimate the memory of a document whose first analysis just published its
        cheap rules' findings, before its whole-module rules: a client that shows inlay hints
        asks for them as the file opens, and would wait for those rules (and the collection at
        the end of that first analysis) otherwise."""
        td = self._caps().text_document
        return doc.reports_key is None and doc.built is not None and td is not None and td.inlay_hint is not None and not doc.is_cell and self.settings_for(doc.path).inlay_hints

    def requests_waiting(self) -> bool:
        """Whether a request submitted by `off_loop` waits for the worker (asked on the worker)."""
        return any(not job.running() and not job.done() for job in tuple(self.requests))

    def sweep_when_idle(self) -> None:
        """A sweep of the collector (`Collector.sweep`) once no analysis has run or waited for
        `Collector.IDLE_S` seconds, on the worker (never beside an analysis)."""
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
        self._sweep_timer = asyncio.get_running_loop().call_later(Collector.IDLE_S, self._sweep_if_idle)

    def _sweep_if_idle(self) -> None:
        self._sweep_timer = None
        if self.pending:
            self.sweep_when_idle()
            return
        try:
            self.executor.submit(self.collector.sweep)
        except RuntimeError:  # shut down
            pass

    def settle_when_idle(self, doc: Document) -> None:
        """`settle` once the document has had no new version for `SETTLE_AFTER_S` seconds: what a
        client asks as a file opens (the inlay hints of what it shows, the first keystrokes) does
        not wait on the worker behind parso's parse of the whole text."""
        if doc.primed:
            return
        task = asyncio.ensure_future(self.settle(doc, doc.version, self.SETTLE_AFTER_S))
        self.settling.add(task)
        task.add_done_callback(self.settling.discard)

    async def settle(self, doc: Document, version: int | None = None, after: float = 0.0) -> None:
        """After a document's first diagnostics (`after` seconds later, unless the document has a
        newer version than `version` by then: its own publication settles it in turn): give parso
        the text for the diff parser (on the worker: about 0.25 s on 3,500 lines), and move what
        the first analysis keeps (the per-statement caches, parso's tree) out of the collector's
        reach, so later collections scan only what the edits allocate."""
        if after:
            await asyncio.sleep(after)
        if doc.primed or self.docs.get(doc.uri) is not doc or (version is not None and doc.version != version):
            return
        await asyncio.get_running_loop().run_in_executor(self.executor, doc.prime)
        if self.docs.get(doc.uri) is doc:
            gc.freeze()

    def buffer_changed(self, doc: Document, text: str | None) -> None:
        """A Python document was opened, edited or closed: its buffer (or, once closed, the file on
        disk) is what the other open documents see of it; re-check those that read it, for a model
        class or a training helper they import, and refresh their inlay hints."""
        if doc.is_cell or not doc.path.endswith(".py"):
            return
        if text is None:
            self.project.overrides.pop(doc.path, None)
        else:
            self.project.overrides[doc.path] = text
        dependents = [d for d in self.docs.values() if d is not doc and d.depends_on(doc.path)]
        for other in dependents:
            other.forget()
            self.schedule(other)
        if dependents:
            if self.pull and self.supports_refresh("diagnostics"):
                self.workspace_diagnostic_refresh(None)
            if self.supports_refresh("inlay_hint"):
                self.workspace_inlay_hint_refresh(None)

    def refresh_all(self) -> None:
        for doc in self.docs.values():
            self.schedule(doc)
        self.notebooks.refresh_all()
        if self.pull and self.supports_refresh("diagnostics"):
            self.workspace_diagnostic_refresh(None)
        if self.supports_refresh("inlay_hint"):
            self.workspace_inlay_hint_refresh(None)

    # --- code actions -------------------------------------------------------------
    def find(self, doc: Document, data: Any) -> Diagnostic | None:
        found = convert.span_from_data(data)
        if found is None:
            return None
        code, span = found
        result = doc.analysis(self.config_for(doc))
        return next((d for d in result.diagnostics if d.code == code and d.span == span), None)

    def action_edit(self, doc: Document, kind: str, data: dict[str, Any]) -> types.WorkspaceEdit | None:
        result = doc.analysis(self.config_for(doc))
        source = result.source
        neutral = doc.cell_module[1] if doc.is_cell else frozenset()
        if neutral:  # a notebook cell: the original text (magics kept), fixes that leave magic lines alone
            source = doc.source
            if kind != "noqa" and not all(not touches_neutral(neutral, e.span) for d in result.diagnostics if d.fix for e in d.fix.edits):
                result = dataclasses.replace(
                    result, diagnostics=[d for d in result.diagnostics if not d.fix or not any(touches_neutral(neutral, e.span) for e in d.fix.edits)]
                )
        if kind == "fixAll":
            fixes = [d.fix for d in result.diagnostics if d.fix and d.fix.applicability is Applicability.SAFE]
            text, n = apply_fixes(source, fixes)
            if not n:
                return None
            whole = Span(source.position(0), source.position(len(source.text)))
            edits = [types.TextEdit(range=convert.to_lsp_range(source, whole, self.encoding), new_text=text)]
            return convert.workspace_edit(doc.uri, doc.version, edits)
        diagnostic = self.find(doc, data)
        if diagnostic is None:
            return None
        if kind == "fix" and diagnostic.fix:
            return convert.workspace_edit(doc.uri, doc.version, convert.to_text_edits(diagnostic.fix.edits, source, self.encoding))
        if kind == "noqa":
            edit = suppress_edit(source, diagnostic.span.start.line, diagnostic.code)
            return convert.workspace_edit(doc.uri, doc.version, convert.to_text_edits([edit], source, self.encoding))
        return None

    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        doc = self.docs.get(params.text_document.uri)
        if doc is None:
            return self.notebooks.code_actions(params) or []
        only = params.context.only if params.context else None
        result = doc.analysis(self.config_for(doc))
        rng = convert.from_lsp_range(result.source, params.range, self.encoding)
        lazy = self.supports_resolve()
        actions: list[types.CodeAction] = []

        def add(title: str, kind: str, what: str, data: dict[str, Any], diags: list[types.Diagnostic] | None, preferred: bool = False) -> None:
            payload = {"uri": doc.uri, "version": doc.version, "action": what, **data}
            action = types.CodeAction(title=title, kind=kind, diagnostics=diags, is_preferred=preferred or None, data=payload)
            if not lazy:
                action.edit = self.action_edit(doc, what, data)
                if action.edit is None:
                    return
            actions.append(action)

        wants_quickfix = not only or any(types.CodeActionKind.QuickFix.value.startswith(k) or k.startswith("quickfix") for k in only)
        if wants_quickfix:
            for d in result.diagnostics:
                if not (d.span.start.line <= rng.end.line and rng.start.line <= d.span.end.line):
                    continue
                lsp = [convert.to_lsp_diagnostic(d, result.source, doc.uri, self.encoding)]
                data = convert.diagnostic_data(d)
                if d.fix and d.fix.applicability is not Applicability.DISPLAY_ONLY:
                    add(f"{d.fix.title} ({d.code})", types.CodeActionKind.QuickFix, "fix", data, lsp,
                        preferred=d.fix.applicability is Applicability.SAFE)
                add(f"Suppress {d.code} on this line", types.CodeActionKind.QuickFix, "noqa", data, lsp)
        wants_fix_all = only and any(FIX_ALL.startswith(k) for k in only)
        if wants_fix_all and any(d.fix and d.fix.applicability is Applicability.SAFE for d in result.diagnostics):
            add("Fix all safe torch-preflight issues", FIX_ALL, "fixAll", {}, None)
        return actions

    def resolve(self, action: types.CodeAction) -> types.CodeAction:
        data = action.data if isinstance(action.data, dict) else {}
        doc = self.docs.get(data.get("uri", ""))
        if doc is None or action.edit is not None:
            return action
        if data.get("version") != doc.version:
            return action  # stale: the client will ask again
        action.edit = self.action_edit(doc, str(data.get("action")), data)
        return action

    # --- memory -------------------------------------------------------------------
    def reports(self, doc: Document, stale: Callable[[], bool] | None = None) -> list[MemoryReport]:
        return doc.memory(self.config_for(doc), self.estimator, stale)

    async def off_loop(self, doc: Document, version: int | None, work: Callable[..., T], *args: Any) -> T:
        """`work(*args, stale=...)` on the analysis worker, where a newer version of `doc` stops it: a
        request for hints or hover never holds up the changes (and their diagnostics) behind an estimate.
        ContentModified when the text changed meanwhile: the answer would be about a text the client no
        longer shows, and it asks again."""
        stale = lambda: self.docs.get(doc.uri) is not doc or doc.version != version  # noqa: E731
        try:
            job = self.executor.submit(partial(work, *args, stale=stale))
        except RuntimeError:  # the worker is shut down: the server is exiting
            raise JsonRpcContentModified() from None
        self.requests = {*(j for j in self.requests if not j.done()), job}  # the whole-module rules of an analysis give way to it
        result = await asyncio.wrap_future(job)
        if stale():
            raise JsonRpcContentModified()
        return result

    def hover(self, doc: Document, pos: types.Position, stale: Callable[[], bool] | None = None) -> types.Hover | None:
        source = doc.source
        line = convert.from_lsp_position(source, pos, self.encoding).line
        model = doc.current_model(self.config_for(doc))
        class_lines = {c.span.start.line: c.name for c in model.classes.values()} if model is not None else {}
        for report in self.reports(doc, stale):
            layer = next((x for x in report.layers if x.line == line and x.file is None), None)
            if layer is not None or line == report.model_line or class_lines.get(line) == report.model:
                return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=convert.hover_markdown(report, layer)))
        return None


def create_server() -> PreflightServer:
    server = PreflightServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: PreflightServer, params: types.InitializeParams) -> None:
        settings, problems = parse_settings(params.initialization_options)
        ls.init_settings = ls.settings = settings
        ls._init_problems = problems  # type: ignore[attr-defined]
        td = params.capabilities.text_document
        ls.pull = bool(td and td.diagnostic)
        if ls.pull:
            ls.feature(types.TEXT_DOCUMENT_DIAGNOSTIC, types.DiagnosticOptions(inter_file_dependencies=False, workspace_diagnostics=False))(pull_diagnostics)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: PreflightServer, params: types.InitializedParams) -> None:
        for problem in getattr(ls, "_init_problems", []):
            ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=problem))
        if ls.supports_configuration():
            await ls.fetch_configuration()
        else:
            ls.config_ready.set()

    async def pull_diagnostics(ls: PreflightServer, params: types.DocumentDiagnosticParams) -> types.RelatedFullDocumentDiagnosticReport:
        doc = ls.docs.get(params.text_document.uri)
        if doc is None:
            return types.RelatedFullDocumentDiagnosticReport(items=ls.notebooks.pull(params.text_document.uri) or [])
        items = await asyncio.get_running_loop().run_in_executor(ls.executor, ls.lsp_diagnostics, doc)
        ls.settle_when_idle(doc)  # after this reply, not before it
        return types.RelatedFullDocumentDiagnosticReport(items=items)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: PreflightServer, params: types.DidChangeConfigurationParams) -> None:
        raw = params.settings
        if isinstance(raw, dict) and raw:
            ls.apply_settings(raw)
        elif ls.supports_configuration():
            await ls.fetch_configuration()
        ls.refresh_all()

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    async def did_change_workspace_folders(ls: PreflightServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
        if ls.supports_configuration():
            await ls.fetch_configuration()  # the folders' own settings
            ls.refresh_all()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: PreflightServer, params: types.DidOpenTextDocumentParams) -> None:
        td = params.text_document
        ls.docs[td.uri] = doc = Document(td.uri, td.text, td.version, project=ls.project)
        ls.buffer_changed(doc, doc.text)
        ls.schedule(doc)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: PreflightServer, params: types.DidChangeTextDocumentParams) -> None:
        doc = ls.docs.get(params.text_document.uri)
        if doc is None:
            return
        doc.update(list(params.content_changes), params.text_document.version, ls.encoding)
        ls.buffer_changed(doc, doc.text)
        ls.schedule(doc)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: PreflightServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        doc = ls.docs.pop(uri, None)
        task = ls.pending.pop(uri, None)
        if task is not None:
            task.cancel()
        if doc is not None:
            doc.close()
            ls.buffer_changed(doc, None)
            ls.sweep_when_idle()  # the closed document's caches, frozen, become collectable again
        if not ls.pull:
            ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL], resolve_provider=True),
    )
    def code_action(ls: PreflightServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return ls.code_actions(params)

    @server.feature(types.CODE_ACTION_RESOLVE)
    def code_action_resolve(ls: PreflightServer, action: types.CodeAction) -> types.CodeAction:
        return ls.resolve(action)

    @server.feature(types.TEXT_DOCUMENT_INLAY_HINT)
    async def inlay_hint(ls: PreflightServer, params: types.InlayHintParams) -> list[types.InlayHint]:
        await asyncio.wait_for(ls.config_ready.wait(), CONFIG_TIMEOUT_S)
        doc = ls.docs.get(params.text_document.uri)
        if not (ls.settings_for(doc.path) if doc is not None else ls.settings).inlay_hints:
            return []
        if doc is None:
            return ls.notebooks.inlay_hints(params) or []
        version, _, source = doc.snapshot()
        rng = convert.from_lsp_range(source, params.range, ls.encoding)
        reports = doc.known_reports(ls.config_for(doc))  # estimated already (`early_estimate`): no wait for the worker
        if reports is None:
            reports = await ls.off_loop(doc, version, ls.reports, doc)
        return convert.inlay_hints(reports, source, rng, ls.encoding)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(ls: PreflightServer, params: types.HoverParams) -> types.Hover | None:
        await asyncio.wait_for(ls.config_ready.wait(), CONFIG_TIMEOUT_S)
        doc = ls.docs.get(params.text_document.uri)
        if doc is None:
            return ls.notebooks.hover(params)[1]
        return await ls.off_loop(doc, doc.version, ls.hover, doc, params.position)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: PreflightServer, params: None) -> None:
        for task in ls.pending.values():
            task.cancel()
        ls.pending.clear()
        ls.notebooks.cancel_all()
        ls.executor.shutdown(wait=False, cancel_futures=True)

    # notebook sync: pygls updates its workspace first, then calls these
    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_did_open(ls: PreflightServer, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.notebooks.opened(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_did_change(ls: PreflightServer, params: types.DidChangeNotebookDocumentParams) -> None:
        ls.notebooks.changed(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_did_close(ls: PreflightServer, params: types.DidCloseNotebookDocumentParams) -> None:
        ls.notebooks.closed(params.notebook_document.uri)

    return server
