"""Open documents: text with incremental changes, one parso module each, cached analysis.

All parsing and analysis runs on the server's event-loop thread, so the parso module
that the diff parser mutates in place is never read while it is being reparsed.
"""

from __future__ import annotations

import ast
import functools
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote, urlparse

import parso
from parso.cache import parser_cache
from torch_preflight.core.config import Config
from torch_preflight.core.diagnostics import Diagnostic, Fix
from torch_preflight.core.incremental import IncrementalBuilder, chunk_lines
from torch_preflight.core.memory import MemoryReport
from torch_preflight.core.notebook import cell_edit, from_cells, ipython_lines, join, neutralize
from torch_preflight.core.project import Dependency, Project
from torch_preflight.core.source import SourceText, Span

from torch_preflight.analyze import Result, analyze
from torch_preflight.scoped import ScopedChecker

from . import convert

log = logging.getLogger(__name__)


@functools.cache
def _grammar() -> Any:
    """parso's grammar, loaded when the first document is primed (not before the first diagnostics)."""
    return parso.load_grammar()

CELL_SCHEME = "vscode-notebook-cell"  # a notebook cell sent as a plain text document


def uri_to_path(uri: str) -> str:
    parsed = urlparse(uri)
    if parsed.scheme == CELL_SCHEME:  # vscode-notebook-cell:/path/nb.ipynb#W3sZmlsZQ== -> the notebook's path
        return unquote(parsed.path)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def apply_change(source: SourceText, change: Any, encoding: str) -> str:
    """Apply one TextDocumentContentChangeEvent (ranged or whole) to the text."""
    rng = getattr(change, "range", None)
    if rng is None:
        return change.text
    span = convert.from_lsp_range(source, rng, encoding)
    start, end = source.offset(span.start), source.offset(span.end)
    if end < start:
        start, end = end, start
    return source.text[:start] + change.text + source.text[end:]


@dataclass
class Document:
    uri: str
    text: str
    version: int | None
    path: str = ""
    source: SourceText = field(init=False)
    builder: IncrementalBuilder = field(default_factory=IncrementalBuilder)
    scoped: ScopedChecker = field(default_factory=ScopedChecker)  # rule results per top-level statement
    result: Result | None = None
    result_key: tuple[Any, ...] | None = None
    reports: list[MemoryReport] | None = None
    reports_key: tuple[Any, ...] | None = None
    full_analyses: int = 0
    primed: bool = False  # parso's diff cache holds a module of this document
    project: Project | None = None  # the server's: the user's other modules, open buffers over files on disk
    memory_dependencies: tuple[Dependency, ...] = ()  # the other files the last memory reports read
    converted: dict[int, Any] = field(default_factory=dict)  # the last publication's protocol items (server.lsp_diagnostics)

    def __post_init__(self) -> None:
        self.path = uri_to_path(self.uri)
        self.source = SourceText(self.text)

    @property
    def is_cell(self) -> bool:
        """A notebook cell sent as a plain text document: analysed alone, IPython magics neutralised."""
        return self.uri.startswith(CELL_SCHEME + ":")

    @property
    def cell_module(self) -> tuple[str, frozenset[int]]:
        """For a cell: its text with magics neutralised (same lines and columns), and those lines."""
        lines, neutral = neutralize(self.text)
        return "\n".join(lines), frozenset(neutral)

    @property
    def parso_key(self) -> str:
        return f"<torch-preflight>{self.uri}"

    def update(self, changes: list[Any], version: int | None, encoding: str) -> None:
        text = self.text
        for change in changes:
            text = apply_change(self.source, change, encoding)
            self.source = SourceText(text)
        self.text = text
        self.version = version

    def analysis(self, config: Config) -> Result:
        """The analysis of the current text, reusing every unchanged top-level statement."""
        key = (self.version, self.text, config)
        if self.result is not None and self.result_key == key and all(self.unchanged(d) for d in self.result.dependencies):
            return self.result  # same text, and the other project files it read are unchanged
        old, self.result = self.result, self._analyze(config)
        self.result_key = key
        if old is not None and old.model is not None and old.model is not self.result.model:
            # `DataFlow.of` caches the index on the model and the index holds the model: break
            # the cycle so the old model is freed by reference counting, not by a collection
            # of every tracked object (the garbage collector's pauses were the latency's tail).
            old.model.__dict__.pop("_tpf_dataflow", None)
        return self.result

    def unchanged(self, dep: Dependency) -> bool:
        return self.project.unchanged(dep) if self.project is not None else dep.unchanged()

    def depends_on(self, path: str) -> bool:
        """Whether the last analysis or memory report of this document read the file `path`."""
        deps = (*(self.result.dependencies if self.result is not None else ()), *self.memory_dependencies)
        return any(d.path == path for d in deps)

    def forget(self) -> None:
        """Drop the cached results (a file they read changed); the next request recomputes them."""
        self.result_key = self.reports_key = None

    def prime(self) -> None:
        """Parse the current text with parso so that later versions take the diff parser.
        The first analysis finds its top-level statements with `ast` (a whole-file parso
        parse costs about 0.5 s on 3,000 lines), so the server calls this after publishing."""
        if not self.primed and not self.is_cell:
            try:
                _grammar().parse(self.text, diff_cache=True, path=self.parso_key, cache=False)
                self.primed = True
            except Exception:
                log.exception("parso failed for %s", self.uri)

    def _statements(self) -> tuple[list[int], ast.Module | None]:
        """First lines of the top-level statements: from parso's diff parser once the document
        is primed; before that, from `ast` when the text parses (the same boundaries), with the
        tree, which the builder then splits instead of parsing each statement again."""
        if not self.primed:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    tree = ast.parse(self.text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                tree = None
            if tree is not None:
                return [min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))]) - 1 for stmt in tree.body], tree
        module = _grammar().parse(self.text, diff_cache=True, path=self.parso_key, cache=False)
        self.primed = True
        return [child.start_pos[0] - 1 for child in module.children if child.type != "endmarker"], None

    def _analyze(self, config: Config) -> Result:
        if self.is_cell:
            return cell_result(self.text, self.path, config)
        try:
            starts, tree = self._statements()
            model = self.builder.build(self.source, chunk_lines(self.source, starts), self.path, tree)
        except Exception:  # parso is best effort: the full path below is always right
            log.exception("incremental parse failed for %s", self.uri)
            model = None
        if model is None:
            self.full_analyses += 1
            return analyze(self.text, self.path, config, project=self.project)
        return self.scoped.check(self.builder, model, config, self.path, self.project)

    def memory(self, config: Config, estimator: Callable[..., list[MemoryReport]] | None) -> list[MemoryReport]:
        key = (self.version, self.text, config)
        if self.reports is not None and self.reports_key == key and all(self.unchanged(d) for d in self.memory_dependencies):
            return self.reports
        reports: list[MemoryReport] = []
        if estimator is not None:
            # The model of the last analysis, when it is of this very text, spares the
            # estimator a second parse and build of the whole module.
            analysed = self.result if self.result_key is not None and self.result_key[:2] == (self.version, self.text) else None
            model = analysed.model if analysed is not None and not self.is_cell else None
            view = self.project.view() if self.project is not None and not self.is_cell else None
            try:
                text = self.cell_module[0] if self.is_cell else self.text
                reports = list(estimator(text, self.path, config, model=model, project=view))
            except Exception:
                log.exception("estimator failed for %s", self.uri)
            self.memory_dependencies = tuple(view.used.values()) if view is not None else ()
        self.reports, self.reports_key = reports, key
        return reports

    def close(self) -> None:
        self.primed = False
        parser_cache.get(_grammar()._hashed, {}).pop(self.parso_key, None)


def cell_result(text: str, path: str, config: Config) -> Result:
    """The analysis of one notebook cell sent as a text document, as IPython runs it (magics
    neutralised, a cell indented as a whole dedented), with every position in the cell as
    written. A fix that would rewrite a magic line or indent a dedented cell wrongly is dropped."""
    lines, _, shifts = ipython_lines(text)
    result = analyze("\n".join(lines), path, config)
    if not shifts:
        return result  # the cell's own lines and columns
    joined = join(from_cells([("code", text, None)]))  # the map back to the cell

    def span(s: Span) -> Span:
        return joined.cell_span(s)[1]

    def fix(f: Fix | None) -> Fix | None:
        edits = [cell_edit(joined, e) for e in f.edits] if f is not None else []
        if f is None or not edits or any(e is None for e in edits):
            return None
        return replace(f, edits=tuple(e[1] for e in edits if e is not None))

    def moved(d: Diagnostic) -> Diagnostic:
        return replace(d, span=span(d.span), related=tuple(replace(r, span=span(r.span)) for r in d.related), fix=fix(d.fix))

    errors = [replace(p, position=span(Span(p.position, p.position)).start) for p in result.syntax_errors]
    return replace(result, source=SourceText(text), diagnostics=[moved(d) for d in result.diagnostics], syntax_errors=errors)
