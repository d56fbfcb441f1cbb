"""Jupyter notebooks in the editor.

A client can send notebook cells in two ways:

1. **LSP 3.17 notebook sync** (`notebookDocument/didOpen|didChange|didClose`, advertised for
   Python cells). pygls keeps each notebook's cells in its workspace; here its Python code
   cells are joined into one module (`core.notebook`) and the *whole notebook* is analysed,
   so cross-cell findings work (the optimizer of cell 6 stepped in the loop of cell 7).
   Diagnostics are published per cell URI; quick fixes, fix-all, hover and inlay hints
   answer requests made on a cell URI, with every position mapped into that cell.
2. **Plain text documents with `vscode-notebook-cell:` URIs** (a client without notebook
   sync): each cell is analysed *alone*, its IPython magics neutralised, under the path of
   its notebook (server.documents does that); cross-cell findings need notebook sync.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from torch_preflight.core.config import Config
from torch_preflight.core.diagnostics import Applicability, Diagnostic, Edit, relocate_text
from torch_preflight.core.memory import MemoryReport
from torch_preflight.core.noqa import suppress_edit
from torch_preflight.core.notebook import Joined, cell_edit, fixed_cells, from_cells, join
from torch_preflight.core.source import Position, SourceText, Span

from torch_preflight.analyze import Result, analyze

from . import convert
from .documents import uri_to_path

if TYPE_CHECKING:
    from .server import PreflightServer

log = logging.getLogger(__name__)

NOTEBOOK_SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[types.NotebookDocumentFilterWithCells(cells=[types.NotebookCellLanguage(language="python")], notebook="*")]
)


@dataclass(frozen=True)
class CellView:
    uri: str
    kind: str  # "code" or "markdown"
    language: str | None
    text: str
    version: int | None


@dataclass
class NotebookDoc:
    """One open notebook: a snapshot of its cells, joined, with the analysis cached."""

    uri: str
    path: str = ""
    version: int | None = None
    cells: list[CellView] = field(default_factory=list)
    joined: Joined | None = None
    key: tuple[Any, ...] | None = None
    result: Result | None = None
    result_key: tuple[Any, ...] | None = None
    reports: list[MemoryReport] | None = None
    reports_key: tuple[Any, ...] | None = None
    published: set[str] = field(default_factory=set)  # cell URIs that have diagnostics out

    def __post_init__(self) -> None:
        self.path = uri_to_path(self.uri)

    def refresh(self, workspace: Any) -> None:
        notebook = workspace.get_notebook_document(notebook_uri=self.uri)
        if notebook is None:
            return
        cells: list[CellView] = []
        for cell in notebook.cells:
            doc = workspace.get_text_document(cell.document)
            kind = "code" if cell.kind == types.NotebookCellKind.Code else "markdown"
            cells.append(CellView(cell.document, kind, doc.language_id, doc.source, doc.version))
        self.version = notebook.version
        key = tuple((c.uri, c.kind, c.language, c.text) for c in cells)
        if key != self.key:
            self.cells, self.key = cells, key
            self.joined = join(from_cells([(c.kind, c.text, c.language) for c in cells]))
        else:
            self.cells = cells  # versions may have moved

    def index_of(self, cell_uri: str) -> int | None:
        return next((i for i, c in enumerate(self.cells) if c.uri == cell_uri), None)

    def analysis(self, config: Config) -> Result:
        key = (self.key, config)
        if self.result is None or self.result_key != key:
            assert self.joined is not None
            self.result = analyze(self.joined.text, self.path, config, notebook=self.joined)
            self.result_key = key
        return self.result

    def memory(self, config: Config, estimator: Callable[..., list[MemoryReport]] | None) -> list[MemoryReport]:
        key = (self.key, config)
        if self.reports is None or self.reports_key != key:
            reports: list[MemoryReport] = []
            if estimator is not None and self.joined is not None and self.joined.text:
                try:
                    reports = list(estimator(self.joined.text, self.path, config))
                except Exception:
                    log.exception("estimator failed for %s", self.uri)
            self.reports, self.reports_key = reports, key
        return self.reports


class Notebooks:
    """The notebooks a server has open, by notebook URI, and the cells' way back to them."""

    def __init__(self, server: PreflightServer) -> None:
        self.server = server
        self.docs: dict[str, NotebookDoc] = {}
        self.pending: dict[str, asyncio.Task[None]] = {}

    # --- sync ----------------------------------------------------------------------
    def opened(self, uri: str) -> None:
        doc = self.docs[uri] = NotebookDoc(uri)
        doc.refresh(self.server.workspace)
        self.schedule(doc)

    def changed(self, uri: str) -> None:
        doc = self.docs.get(uri)
        if doc is None:
            return self.opened(uri)
        doc.refresh(self.server.workspace)
        self.schedule(doc)

    def closed(self, uri: str) -> None:
        doc = self.docs.pop(uri, None)
        task = self.pending.pop(uri, None)
        if task is not None:
            task.cancel()
        if doc is not None and not self.server.pull:
            for cell_uri in sorted(doc.published):
                self.server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=cell_uri, diagnostics=[]))

    def for_cell(self, cell_uri: str) -> tuple[NotebookDoc, int] | None:
        for doc in self.docs.values():
            index = doc.index_of(cell_uri)
            if index is not None:
                return doc, index
        return None

    # --- diagnostics ---------------------------------------------------------------
    def schedule(self, doc: NotebookDoc) -> None:
        if self.server.pull:
            return
        task = self.pending.pop(doc.uri, None)
        if task is not None:
            task.cancel()
        self.pending[doc.uri] = asyncio.ensure_future(self._publish_later(doc, doc.key))

    def refresh_all(self) -> None:
        for doc in self.docs.values():
            self.schedule(doc)

    def cancel_all(self) -> None:
        for task in self.pending.values():
            task.cancel()
        self.pending.clear()

    async def _publish_later(self, doc: NotebookDoc, key: Any) -> None:
        delay = self.server.settings.debounce_ms / 1000
        if delay:
            await asyncio.sleep(delay)
        if not self.server.config_ready.is_set():
            await self.server.config_ready.wait()
        if self.docs.get(doc.uri) is not doc or doc.key != key:
            return
        per_cell = self.diagnostics(doc)
        for cell in doc.cells:
            if cell.uri in per_cell:
                self.server.text_document_publish_diagnostics(
                    types.PublishDiagnosticsParams(uri=cell.uri, diagnostics=per_cell[cell.uri], version=cell.version)
                )
        for gone in sorted(doc.published - set(per_cell)):  # cells removed (or no longer Python code)
            self.server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=gone, diagnostics=[]))
        doc.published = set(per_cell)
        if self.pending.get(doc.uri) is asyncio.current_task():
            del self.pending[doc.uri]

    def diagnostics(self, doc: NotebookDoc) -> dict[str, list[types.Diagnostic]]:
        """Diagnostics per code cell URI (an empty list for a clean cell)."""
        server = self.server
        enc = server.encoding
        result = doc.analysis(server.config_for(doc))  # type: ignore[arg-type]
        joined = doc.joined
        assert joined is not None
        out: dict[str, list[types.Diagnostic]] = {doc.cells[i].uri: [] for i in joined.code_cells}
        for d in result.diagnostics:
            index, _ = joined.cell_span(d.span)
            out[doc.cells[index].uri].append(self.to_lsp(doc, d, enc))
        for problem in result.syntax_errors:  # one per broken cell
            index, span = joined.cell_span(Span(problem.position, problem.position))
            source = SourceText(doc.cells[index].text)
            out[doc.cells[index].uri].append(convert.syntax_diagnostic(problem.message, span.start, source, enc))
        return out

    def to_lsp(self, doc: NotebookDoc, d: Diagnostic, enc: str) -> types.Diagnostic:
        joined = doc.joined
        assert joined is not None
        index, span = joined.cell_span(d.span)
        cell = doc.cells[index]
        item = convert.to_lsp_diagnostic(dataclasses.replace(d, span=span, related=()), SourceText(cell.text), cell.uri, enc)
        related = []
        for r in d.related:
            r_index, r_span = joined.cell_span(r.span)
            r_cell = doc.cells[r_index]
            location = types.Location(uri=r_cell.uri, range=convert.to_lsp_range(SourceText(r_cell.text), r_span, enc))
            related.append(types.DiagnosticRelatedInformation(location=location, message=r.message))
        item.related_information = related or None
        item.data = convert.diagnostic_data(d)  # the module span: code actions find the finding by it
        return item

    def pull(self, cell_uri: str) -> list[types.Diagnostic] | None:
        found = self.for_cell(cell_uri)
        if found is None:
            return None
        return self.diagnostics(found[0]).get(cell_uri, [])

    # --- code actions --------------------------------------------------------------
    def cell_workspace_edit(self, doc: NotebookDoc, edits: list[tuple[int, Edit]]) -> types.WorkspaceEdit:
        enc = self.server.encoding
        by_cell: dict[int, list[types.TextEdit]] = {}
        for index, edit in edits:
            source = SourceText(doc.cells[index].text)
            by_cell.setdefault(index, []).extend(convert.to_text_edits([edit], source, enc))
        changes = [
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=doc.cells[i].uri, version=doc.cells[i].version),
                edits=text_edits,
            )
            for i, text_edits in sorted(by_cell.items())
        ]
        return types.WorkspaceEdit(document_changes=changes)

    def mapped(self, doc: NotebookDoc, edits: tuple[Edit, ...] | list[Edit]) -> list[tuple[int, Edit]] | None:
        assert doc.joined is not None
        out = [cell_edit(doc.joined, e) for e in edits]
        if not out or any(m is None for m in out):
            return None
        return [m for m in out if m is not None]

    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction] | None:
        found = self.for_cell(params.text_document.uri)
        if found is None:
            return None
        doc, index = found
        joined = doc.joined
        assert joined is not None
        server = self.server
        result = doc.analysis(server.config_for(doc))  # type: ignore[arg-type]
        cell_source = SourceText(doc.cells[index].text)
        rng = convert.from_lsp_range(cell_source, params.range, server.encoding)
        only = params.context.only if params.context else None
        actions: list[types.CodeAction] = []
        wants_quickfix = not only or any(k.startswith("quickfix") or types.CodeActionKind.QuickFix.value.startswith(k) for k in only)
        if wants_quickfix:
            for d in result.diagnostics:
                d_index, span = joined.cell_span(d.span)
                if d_index != index or not (span.start.line <= rng.end.line and rng.start.line <= span.end.line):
                    continue
                lsp = [self.to_lsp(doc, d, server.encoding)]
                if d.fix and d.fix.applicability is not Applicability.DISPLAY_ONLY:
                    edits = self.mapped(doc, d.fix.edits)
                    if edits is not None:
                        actions.append(types.CodeAction(
                            title=f"{d.fix.title} ({d.code})", kind=types.CodeActionKind.QuickFix, diagnostics=lsp,
                            is_preferred=d.fix.applicability is Applicability.SAFE or None, edit=self.cell_workspace_edit(doc, edits)))
                noqa = self.mapped(doc, [suppress_edit(joined.source, d.span.start.line, d.code)])
                if noqa is not None:
                    actions.append(types.CodeAction(title=f"Suppress {d.code} on this line", kind=types.CodeActionKind.QuickFix,
                                                    diagnostics=lsp, edit=self.cell_workspace_edit(doc, noqa)))
        fix_all = "source.fixAll.torch-preflight"
        if only and any(fix_all.startswith(k) for k in only):
            safe = [d.fix for d in result.diagnostics if d.fix and d.fix.applicability is Applicability.SAFE]
            texts, applied = fixed_cells(joined, safe)
            if applied:
                whole_cells: list[tuple[int, Edit]] = []
                for i, text in texts.items():
                    old = SourceText(doc.cells[i].text)
                    whole = Span(Position(0, 0), old.position(len(old.text)))
                    whole_cells.append((i, Edit(whole, text)))
                actions.append(types.CodeAction(title="Fix all safe torch-preflight issues", kind=fix_all,
                                                edit=self.cell_workspace_edit(doc, whole_cells)))
        return actions

    # --- memory: hover and inlay hints ----------------------------------------------
    def inlay_hints(self, params: types.InlayHintParams) -> list[types.InlayHint] | None:
        found = self.for_cell(params.text_document.uri)
        if found is None:
            return None
        doc, index = found
        joined = doc.joined
        assert joined is not None
        server = self.server
        source = SourceText(doc.cells[index].text)
        rng = convert.from_lsp_range(source, params.range, server.encoding)
        start, end = joined.to_module(index, rng.start), joined.to_module(index, rng.end)
        if start is None or end is None:
            return []
        reports = doc.memory(server.config_for(doc), server.estimator)  # type: ignore[arg-type]
        hints = convert.inlay_hints(reports, joined.source, Span(start, end), server.encoding)
        out = []
        for hint in hints:
            cell, line = joined.cell_of_line(hint.position.line)
            if cell == index:
                hint.position = types.Position(line=line, character=hint.position.character)
                out.append(hint)
        return out

    def hover(self, params: types.HoverParams) -> tuple[bool, types.Hover | None]:
        found = self.for_cell(params.text_document.uri)
        if found is None:
            return False, None
        doc, index = found
        joined = doc.joined
        assert joined is not None
        server = self.server
        source = SourceText(doc.cells[index].text)
        pos = joined.to_module(index, convert.from_lsp_position(source, params.position, server.encoding))
        if pos is None:
            return True, None
        config = server.config_for(doc)  # type: ignore[arg-type]
        result = doc.analysis(config)
        class_lines = {c.span.start.line: c.name for c in result.model.classes.values()} if result.model is not None else {}
        for report in doc.memory(config, server.estimator):
            layer = next((x for x in report.layers if x.line == pos.line and x.file is None), None)
            if layer is not None or pos.line == report.model_line or class_lines.get(pos.line) == report.model:
                value = relocate_text(convert.hover_markdown(report, layer), joined.cite, doc.path)  # cells, not module lines
                return True, types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=value))
        return True, None
