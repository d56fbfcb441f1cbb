"""Open documents: text with incremental changes, one parso module each, cached analysis.

The server analyses documents on one worker thread (server.PreflightServer.executor) while
its event loop goes on reading changes. A document's text, source and version change
together under `_text_lock` (held only to swap or read them), and an analysis works on one
snapshot of them; `busy` serialises everything that reads or mutates the analysis caches
(the incremental builder, the per-statement rule cache, parso's diff-parsed module), so a
request handled on the event loop waits for the worker's analysis instead of racing it.
"""

from __future__ import annotations

import ast
import logging
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar
from urllib.parse import unquote, urlparse

from torch_preflight.core.config import Config
from torch_preflight.core.diagnostics import Diagnostic, Fix
from torch_preflight.core.incremental import IncrementalBuilder, chunk_lines, parso_grammar, statement_starts
from torch_preflight.core.memory import MemoryReport
from torch_preflight.core.notebook import cell_edit, from_cells, ipython_lines, join, neutralize
from torch_preflight.core.project import Dependency, Project
from torch_preflight.core.semantic import ModuleModel
from torch_preflight.core.source import SourceText, Span

from torch_preflight.analyze import Result, analyze
from torch_preflight.scoped import LOCAL_RULES, ScopedChecker, carried

from . import convert

log = logging.getLogger(__name__)


CELL_SCHEME = "vscode-notebook-cell"  # a notebook cell sent as a plain text document


class Stale(Exception):
    """A newer version of the document arrived: the analysis of this one was abandoned."""


class Paused(Stale):
    """A request (inlay hints, hover) waits for the worker: this version's whole-module rules were
    set aside for it, their interim result published; the caller runs the analysis again after it."""


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
    # wall seconds the whole-module rules may take: the most they took in the last `RECENT` analyses that ran them
    # (cheap ones, brackets the repair dropped again, do not hide that the next keystroke may recompute the shape facts)
    whole_s: float | None = None
    _recent: list[float] = field(default_factory=list, repr=False, compare=False)
    _whole_started: float | None = field(default=None, repr=False, compare=False)
    _started: float = field(default=0.0, repr=False, compare=False)  # when the running analysis began
    built: tuple[str, ModuleModel] | None = field(default=None, repr=False, compare=False)  # the last analysis's text and model, finished or not
    EARLY_AFTER_S: ClassVar[float] = 0.02  # see `_worth_publishing`
    EARLY_LINES: ClassVar[int] = 500
    busy: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)  # analysis caches in use
    _text_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

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
        return _cell_module(self.text)

    @property
    def parso_key(self) -> str:
        return f"<torch-preflight>{self.uri}"

    def update(self, changes: list[Any], version: int | None, encoding: str) -> None:
        text, source = self.text, self.source
        for change in changes:
            text = apply_change(source, change, encoding)
            source = SourceText(text)
        with self._text_lock:
            self.text, self.source, self.version = text, source, version

    def snapshot(self) -> tuple[int | None, str, SourceText]:
        """The version, text and source, read together."""
        with self._text_lock:
            return self.version, self.text, self.source

    def analysis(
        self, config: Config, stale: Callable[[], bool] | None = None, early: Callable[[Result], None] | None = None, pause: Callable[[], bool] | None = None
    ) -> Result:
        """The analysis of the current text, reusing every unchanged top-level statement.
        `stale()` is asked once the model is built and again before and during the whole-module
        rules: when true the analysis is abandoned (`Stale`), leaving the caches consistent for
        the next version. `early` receives an interim result before the whole-module rules run
        (`_interim`); the result returned completes it. `pause()` is asked with `stale` during
        the whole-module rules: when true they are set aside (`Paused`)."""
        with self.busy:
            version, text, source = self.snapshot()
            key = (version, text, config)
            if self.result is not None and self.result_key == key and all(self.unchanged(d) for d in self.result.dependencies):
                return self.result  # same text, and the other project files it read are unchanged
            return self._replace(key, self._analyze(config, text, source, stale, early, pause))

    def current_model(self, config: Config) -> ModuleModel | None:
        """The model of the current text: the last analysis's, finished or set aside for a request
        (`Paused`), else that of a new analysis."""
        with self.busy:
            built = self.built
            if built is not None and built[0] == self.snapshot()[1]:
                return built[1]
            return self.analysis(config).model

    def _replace(self, key: tuple[Any, ...], result: Result) -> Result:
        old, self.result = self.result, result
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
        with self.busy:
            if not self.primed and not self.is_cell:
                try:
                    parso_grammar().parse(self.snapshot()[1].replace("\x00", " "), diff_cache=True, path=self.parso_key, cache=False)
                    self.primed = True
                except Exception:
                    log.exception("parso failed for %s", self.uri)

    def _statements(self, source: SourceText) -> tuple[list[int], ast.Module | None]:
        """First lines of the top-level statements: without a parser when the edit since the
        last version that parsed stays inside one statement that still parses alone
        (`IncrementalBuilder.starts_after_edit`: a keystroke that keeps the file valid, or
        that makes it valid again); else from a parse of the edited part only when parso's
        error recovery resynchronises soon after it (`starts_after_broken_edit`: a keystroke
        that breaks the file; parso's statements of a text that parses are its statements);
        else from parso's diff parser once the document is primed; before that, from `ast`
        when the text parses (the same boundaries), with the tree, which the builder then
        splits instead of parsing each statement again. A NUL reads as a space, as in
        `parse_statements` (parso splits statements otherwise at one)."""
        known = self.builder.starts_after_edit(source)
        if known is None:
            known = self.builder.starts_after_broken_edit(source)
        if known is not None:
            return known, None
        text = source.text.replace("\x00", " ")
        if not self.primed:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    tree = ast.parse(text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                tree = None
            if tree is not None:
                return [min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))]) - 1 for stmt in tree.body], tree
        module = parso_grammar().parse(text, diff_cache=True, path=self.parso_key, cache=False)
        self.primed = True
        return statement_starts(module), None

    RECENT = 8

    def record_whole(self, took: float) -> None:
        """Update `whole_s` with what the whole-module rules took this time."""
        self._recent = [*self._recent[1 - self.RECENT :], took]
        self.whole_s = max(self._recent)

    def _worth_publishing(self, source: SourceText, elapsed: float) -> bool:
        """Whether an interim publication is worth its traffic: when the complete result would
        come `EARLY_AFTER_S` or more after the analysis began (the `elapsed` seconds so far and
        what the whole-module rules took the last time; before any such time: when the document
        has `EARLY_LINES` lines or more), not when it follows within moments."""
        if self.whole_s is None:
            return len(source.line_starts) >= self.EARLY_LINES
        return elapsed + self.whole_s >= self.EARLY_AFTER_S

    def _abandon_if(self, stale: Callable[[], bool] | None, pause: Callable[[], bool] | None = None) -> Callable[[], None] | None:
        """What `ScopedChecker.check` calls before and during each whole-module rule: `Stale` when
        a newer version arrived, so the worker takes it up without finishing this one's slow
        rules; `Paused` when `pause()` says a request waits for the worker."""
        if stale is None and pause is None:
            return None

        def between() -> None:
            if stale is not None and stale():
                raise Stale(self.uri)
            if pause is not None and pause():
                raise Paused(self.uri)

        return between

    def _interim(self, config: Config, stale: Callable[[], bool] | None, early: Callable[[Result], None]) -> Callable[[Result], None]:
        """What `ScopedChecker.check` hands the local rules' result to: that result, with the
        syntax error and the whole-module rules' findings of the last analysis that lie outside
        the edited lines (moved to their new lines, so they do not blink off and on while
        someone types), goes to `early`, unless the version is stale (then `Stale` abandons
        the whole-module rules). Those carried findings are the last version's: the complete
        result replaces them."""
        previous = self.result if self.result is not None and self.result_key is not None and self.result_key[2] == config else None

        def interim(local: Result) -> None:
            if stale is not None and stale():
                raise Stale(self.uri)
            self._whole_started = time.perf_counter()
            if not self._worth_publishing(local.source, self._whole_started - self._started):
                return
            local.syntax_errors = list(self.builder.errors)
            if previous is not None:
                old = [d for d in previous.diagnostics if d.code not in LOCAL_RULES]
                local.diagnostics = sorted([*local.diagnostics, *carried(old, previous.source, local.source)], key=Diagnostic.sort_key)
            early(local)
            if stale is not None and stale():
                raise Stale(self.uri)

        return interim

    def _analyze(
        self,
        config: Config,
        text: str,
        source: SourceText,
        stale: Callable[[], bool] | None,
        early: Callable[[Result], None] | None = None,
        pause: Callable[[], bool] | None = None,
    ) -> Result:
        self._started = time.perf_counter()
        if self.is_cell:
            return cell_result(text, self.path, config)
        if "\r" in text and "\r" in text.replace("\r\n", ""):
            # A lone carriage return ends a line for Python, not for SourceText: per-statement
            # line numbers would disagree with the whole file's, so take the full path.
            self.full_analyses += 1
            return analyze(text, self.path, config, project=self.project)
        try:
            starts, tree = self._statements(source)
            model = self.builder.build(source, chunk_lines(source, starts), self.path, tree)
        except Exception:  # parso is best effort: the full path below is always right
            log.exception("incremental parse failed for %s", self.uri)
            self.full_analyses += 1
            return analyze(text, self.path, config, project=self.project)
        if stale is not None and stale():
            raise Stale(self.uri)
        old, self.built = self.built, (text, model)
        if old is not None and old[1] is not model and (self.result is None or old[1] is not self.result.model):
            old[1].__dict__.pop("_tpf_dataflow", None)  # an abandoned version's: break the cycle, as `_replace` does
        interim = self._interim(config, stale, early) if early is not None else None
        self._whole_started = None
        result = self.scoped.check(self.builder, model, config, self.path, self.project, interim, self._abandon_if(stale, pause))
        if self._whole_started is not None:
            self.record_whole(time.perf_counter() - self._whole_started)
        result.syntax_errors = list(self.builder.errors)
        return result

    def memory(self, config: Config, estimator: Callable[..., list[MemoryReport]] | None,
               stale: Callable[[], bool] | None = None) -> list[MemoryReport]:
        """The memory reports of the current text (kept until the text, the configuration or a file
        they read changes). `stale`, passed on to the estimator: once true the estimate stops, and
        what it gave is neither kept nor meant for anyone (the caller asks again for the new text)."""
        with self.busy:
            return self._memory(config, estimator, stale)

    def _memory(self, config: Config, estimator: Callable[..., list[MemoryReport]] | None, stale: Callable[[], bool] | None) -> list[MemoryReport]:
        version, text, _ = self.snapshot()
        key = (version, text, config)
        if self.reports is not None and self.reports_key == key and all(self.unchanged(d) for d in self.memory_dependencies):
            return self.reports
        reports: list[MemoryReport] = []
        if estimator is not None:
            # The model of the last analysis, when it is of this very text, spares the
            # estimator a second parse and build of the whole module.
            analysed = self.result if self.result_key is not None and self.result_key[:2] == (version, text) else None
            model = analysed.model if analysed is not None else self.built[1] if self.built is not None and self.built[0] == text else None
            model = None if self.is_cell else model
            view = self.project.view() if self.project is not None and not self.is_cell else None
            extra = {"stale": stale} if stale is not None else {}
            try:
                module = _cell_module(text)[0] if self.is_cell else text
                reports = list(estimator(module, self.path, config, model=model, project=view, **extra))
            except Exception:
                log.exception("estimator failed for %s", self.uri)
            if stale is not None and stale():
                return []
        self.reports_key = None  # `known_reports`, on the event loop, finds no key while the rest changes
        if estimator is not None:
            self.memory_dependencies = tuple(view.used.values()) if view is not None else ()
        self.reports = reports
        self.reports_key = key
        return reports

    def known_reports(self, config: Config) -> list[MemoryReport] | None:
        """The memory reports of the current text when the last estimate was of it (and the files
        it read are unchanged), else None; read on the event loop while the worker may write them
        (`_memory` writes the key last, after clearing it)."""
        key = self.reports_key
        reports, dependencies = self.reports, self.memory_dependencies
        version, text, _ = self.snapshot()
        if key is None or self.reports_key is not key or key != (version, text, config) or reports is None:
            return None
        return reports if all(self.unchanged(d) for d in dependencies) else None

    def close(self) -> None:
        from parso.cache import parser_cache

        with self.busy:
            self.primed = False
            parser_cache.get(parso_grammar()._hashed, {}).pop(self.parso_key, None)


def _cell_module(text: str) -> tuple[str, frozenset[int]]:
    lines, neutral = neutralize(text)
    return "\n".join(lines), frozenset(neutral)


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
