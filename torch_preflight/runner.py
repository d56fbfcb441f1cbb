"""Checking many files: cache look-ups, a process pool for the misses, fixes and diffs.

The main process discovers the files (a stat each), answers what it can from the cache
(a file whose stat is the one cached with a clean entry is not even read; the others are
read and hashed), and hands the rest to `process()`, serially or over a
`ProcessPoolExecutor`. The analysis modules and the process pool are imported only when
some file must be analysed, so a fully warm run stays light.
Each file is parsed once per analysis; `--fix` re-analyses only after applying edits,
until nothing more applies (at most `MAX_FIX_ROUNDS` rounds). The files one process analyses
share a `Project` (what they read of the user's other modules, the function summaries), over
the summaries earlier runs stored beside the cache; the new ones come back with each outcome
and are saved after the run.
"""

from __future__ import annotations

import difflib
import gc
import os
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_preflight.cache import Cache, StatKey, content_hash
from torch_preflight.core.config import Config
from torch_preflight.core.diagnostics import Diagnostic, apply_fixes
from torch_preflight.core.notebook import Joined, NotebookError, changed_cells, is_notebook_path, join, parse_notebook
from torch_preflight.core.notebook import apply_fixes as apply_notebook_fixes
from torch_preflight.core.parse import SyntaxProblem
from torch_preflight.core.source import SourceText
from torch_preflight.files import Loaded, ReadError, encode, read_source
from torch_preflight.reporters import FileError, FileResult, Report

if TYPE_CHECKING:
    from torch_preflight.analyze import Result
    from torch_preflight.core.project import Dependency


def analyze(text: str, path: str = "<stdin>", config: Config | None = None, **kwargs: Any) -> Result:
    """`torch_preflight.analyze.analyze`, imported on first use (a fully cached run never needs it),
    with this process's `Project`: the files of one run (one worker) share what they read of the
    user's other modules and the function summaries, instead of reading them again per file."""
    from torch_preflight.analyze import analyze as real

    return real(text, path, config, project=_project(), **kwargs)


_PROJECT: list[Any] = []  # this process's Project (one per worker of a run)
_STORE: list[Any] = []  # this process's SummaryStore: the summaries of earlier runs (the cache), and those made now
MAX_PROJECT_MODULES = 2000  # modules and slices a Project keeps before it starts afresh (memory)


def _project() -> Any:
    from torch_preflight.core.project import Project

    if not _PROJECT or _PROJECT[0].cached_modules() > MAX_PROJECT_MODULES:
        _PROJECT[:] = [Project(store=_STORE[0] if _STORE else None)]
    return _PROJECT[0]


def _start(summaries: dict[str, Any] | None) -> None:
    """Begin a run in this process (the main one, or a worker of the pool): a fresh Project, over the
    stored summaries when the run has a cache (None: no cache, nothing kept)."""
    _PROJECT.clear()
    _STORE.clear()
    if summaries is not None:
        from torch_preflight.core.program import SummaryStore

        _STORE.append(SummaryStore(summaries))


MAX_FIX_ROUNDS = 10
PARALLEL_MIN_FILES = 8  # below this, without an explicit -j, a pool costs more than it saves


@dataclass
class Target:
    """One file to check: read already (stdin), or read by run() when the cache cannot answer."""

    path: Path  # absolute (for stdin: where it would live)
    display: str
    config: Config
    loaded: Loaded | None  # None: not read yet
    stdin: bool = False
    notebook: Joined | None = None  # a Jupyter notebook: its Python cells joined (set by run())
    stat: StatKey | None = None  # cache.stat_key() taken before the file is read; None: always hash


@dataclass
class Options:
    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False
    jobs: int | None = None
    cache: bool = True
    cache_dir: Path | None = None
    show_source: bool = True

    @property
    def fixing(self) -> bool:
        return self.fix or self.diff


@dataclass
class Work:
    index: int
    path: str
    text: str
    config: Config
    fix: bool
    unsafe: bool
    notebook: bool = False  # `text` is the .ipynb JSON


@dataclass
class Outcome:
    index: int
    diagnostics: list[Diagnostic] = field(default_factory=list)
    syntax_errors: list[SyntaxProblem] = field(default_factory=list)
    text: str | None = None  # the fixed text, when fixes were applied
    fixed: int = 0
    error: str | None = None
    dependencies: tuple[Dependency, ...] = ()  # other project files the findings rest on
    summaries: dict[str, Any] = field(default_factory=dict)  # whole-program summaries made for this file (to store)


@dataclass
class RunOutput:
    report: Report
    diffs: list[str] = field(default_factory=list)
    fixed_stdin: str | None = None  # --fix on stdin: the fixed source, for stdout
    would_fix: int = 0  # --diff: fixes that would be applied

    @property
    def internal_error(self) -> bool:
        return any(e.internal for e in self.report.errors)


def fix_source(text: str, path: str, config: Config, *, unsafe: bool) -> tuple[str, int, Result]:
    """Apply fixes until none applies; returns (text, fixes applied, analysis of the final text).

    A round whose edits would turn a file that parses into one that does not is discarded.
    """
    applied = 0
    result = analyze(text, path, config)
    for _ in range(MAX_FIX_ROUNDS):
        fixes = [d.fix for d in result.diagnostics if d.fix is not None and d.fix.applies(unsafe=unsafe)]
        if not fixes:
            break
        new_text, count = apply_fixes(result.source, fixes)
        if count == 0 or new_text == text:
            break
        new_result = analyze(new_text, path, config)
        if len(new_result.syntax_errors) > len(result.syntax_errors):
            break
        text, result, applied = new_text, new_result, applied + count
    return text, applied, result


def fix_notebook(raw: str, path: str, config: Config, *, unsafe: bool) -> tuple[str, int, Result, Joined]:
    """`fix_source` for a notebook: each round applies the fixes that fit inside single cells
    and writes only those cells' `source` back into the JSON; returns (raw, applied, result, joined)."""
    notebook = parse_notebook(raw)
    if isinstance(notebook, NotebookError):  # pragma: no cover - run() parsed it first
        raise ValueError(notebook.message)
    joined = join(notebook)
    result = analyze(joined.text, path, config, notebook=joined)
    applied = 0
    for _ in range(MAX_FIX_ROUNDS):
        fixes = [d.fix for d in result.diagnostics if d.fix is not None and d.fix.applies(unsafe=unsafe)]
        if not fixes:
            break
        outcome = apply_notebook_fixes(joined, fixes)
        if outcome.applied == 0 or outcome.raw == raw:
            break
        reparsed = parse_notebook(outcome.raw)
        if isinstance(reparsed, NotebookError):  # pragma: no cover - splicing keeps valid JSON
            break
        new_joined = join(reparsed)
        new_result = analyze(new_joined.text, path, config, notebook=new_joined)
        if len(new_result.syntax_errors) > len(result.syntax_errors):
            break
        raw, joined, result, applied = outcome.raw, new_joined, new_result, applied + outcome.applied
    return raw, applied, result, joined


def process(work: Work) -> Outcome:
    """Analyse (and fix) one file, with the summaries it made (to store). Runs in a worker process; never raises.

    The cyclic garbage collector is paused while one file is analysed: the analysis allocates
    millions of small objects (the syntax tree, events, values) that all live until it ends, and
    each collection of the oldest generation would scan them all again (a third of the CPU time of
    a 10,000-line file). Reference counting still frees what is dropped; cycles made by one file
    are collected by the next collection after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        outcome = _process(work)
    finally:
        if enabled:
            gc.enable()
    if _STORE:
        outcome.summaries = _STORE[0].drain()
    return outcome


def _process(work: Work) -> Outcome:
    try:
        if work.notebook:
            if work.fix:
                raw, fixed, result, _ = fix_notebook(work.text, work.path, work.config, unsafe=work.unsafe)
                return Outcome(work.index, result.diagnostics, result.syntax_errors, raw if fixed else None, fixed, None, result.dependencies)
            notebook = parse_notebook(work.text)
            if isinstance(notebook, NotebookError):  # pragma: no cover - run() parsed it first
                return Outcome(work.index, error=notebook.message)
            joined = join(notebook)
            result = analyze(joined.text, work.path, work.config, notebook=joined)
            return Outcome(work.index, result.diagnostics, result.syntax_errors, dependencies=result.dependencies)
        if work.fix:
            text, fixed, result = fix_source(work.text, work.path, work.config, unsafe=work.unsafe)
            return Outcome(work.index, result.diagnostics, result.syntax_errors, text if fixed else None, fixed, None, result.dependencies)
        result = analyze(work.text, work.path, work.config)
        return Outcome(work.index, result.diagnostics, result.syntax_errors, dependencies=result.dependencies)
    except Exception as exc:  # pragma: no cover - analyze() is built not to raise
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return Outcome(work.index, error=f"internal error: {detail}\n{traceback.format_exc()}")


def choose_jobs(requested: int | None, count: int) -> int:
    if count <= 1:
        return 1
    if requested is not None:
        return max(1, min(requested, count))
    if count < PARALLEL_MIN_FILES:
        return 1
    return max(1, min(os.cpu_count() or 1, count))


def execute(work: Sequence[Work], jobs: int, summaries: dict[str, Any] | None = None) -> list[Outcome]:
    """Analyse `work`, serially or over a process pool; each process reads the project afresh, over
    the stored `summaries` (None: the run keeps none)."""
    _start(summaries)
    if jobs <= 1 or len(work) <= 1:
        return [process(w) for w in work]
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    chunk = max(1, len(work) // (jobs * 4))
    try:
        with ProcessPoolExecutor(max_workers=jobs, initializer=_start, initargs=(summaries,)) as pool:
            return list(pool.map(process, work, chunksize=chunk))
    except (BrokenProcessPool, OSError):
        return [process(w) for w in work]  # no pool here (or a worker died): finish serially


def unified_diff(display: str, before: str, after: str) -> str:
    a = before.splitlines(keepends=True)
    b = after.splitlines(keepends=True)
    for lines in (a, b):
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += "\n\\ No newline at end of file\n"
    return "".join(difflib.unified_diff(a, b, fromfile=display, tofile=display))


def notebook_diff(display: str, before: Joined, after_raw: str) -> str:
    """A unified diff per changed cell, headed `path:cell N` (as ruff shows notebook fixes)."""
    after = parse_notebook(after_raw)
    if isinstance(after, NotebookError):  # pragma: no cover
        return unified_diff(display, before.notebook.raw, after_raw)
    out: list[str] = []
    for index, old, new in changed_cells(before.notebook, after):
        name = f"{display}:cell {index + 1}"
        a = old.splitlines(keepends=True)
        b = new.splitlines(keepends=True)
        for lines in (a, b):
            if lines and not lines[-1].endswith(("\n", "\r")):
                lines[-1] += "\n"  # a cell's last line has no newline of its own: not worth a marker
        out.append("".join(difflib.unified_diff(a, b, fromfile=name, tofile=name)))
    return "".join(out)


def _load(target: Target, report: Report) -> bool:
    """Read a target that is not read yet; False (an error or a note in `report`) when it cannot be."""
    if target.loaded is not None:
        return True
    loaded = read_source(target.path)
    if isinstance(loaded, ReadError):
        if loaded.skipped:
            report.notes.append(f"{target.display}: {loaded.reason}")
        else:
            report.errors.append(FileError(target.display, loaded.reason, target.path))
        return False
    target.loaded = loaded
    return True


def _open_notebooks(targets: Sequence[Target], report: Report) -> list[Target]:
    """Read, parse and join the notebooks among `targets`; a malformed one becomes a per-file error,
    a notebook of another language a note."""
    kept: list[Target] = []
    for target in targets:
        if not is_notebook_path(str(target.path) if not target.stdin else target.display):
            kept.append(target)
            continue
        if not _load(target, report):
            continue
        assert target.loaded is not None
        notebook = parse_notebook(target.loaded.text)
        if isinstance(notebook, NotebookError):
            report.errors.append(FileError(target.display, notebook.message, None if target.stdin else target.path))
            continue
        if not notebook.is_python:
            report.notes.append(f"{target.display}: skipped: not a Python notebook (kernel language `{notebook.language}`)")
            continue
        target.notebook = join(notebook)
        kept.append(target)
    return kept


def run(targets: Sequence[Target], options: Options, errors: list[FileError] | None = None, notes: list[str] | None = None) -> RunOutput:
    report = Report(
        files=[],
        errors=list(errors or ()),
        notes=list(notes or ()),
        unsafe_fixes=options.unsafe_fixes,
        show_source=options.show_source,
        fix_mode=options.fix,
    )
    out = RunOutput(report)
    targets = _open_notebooks(targets, report)
    caches: dict[int, Cache] = {}

    def cache_for(config: Config) -> Cache:
        key = id(config)
        if key not in caches:
            caches[key] = Cache.open(config, options.cache_dir) if options.cache else Cache.disabled()
        return caches[key]

    digests: list[str] = [""] * len(targets)
    results: list[FileResult | None] = [None] * len(targets)
    work: list[Work] = []
    for i, target in enumerate(targets):
        if not target.stdin and target.loaded is None:
            clean = cache_for(target.config).get_clean_by_stat(str(target.path), target.stat)
            if clean is not None:  # unchanged since a run that found nothing: not even read
                results[i] = FileResult(target.path, target.display, SourceText(""), clean.diagnostics, clean.syntax_errors)
                continue
        if not _load(target, report):
            continue
        assert target.loaded is not None
        digest = content_hash(target.loaded.data)
        digests[i] = digest
        source = target.notebook.source if target.notebook is not None else SourceText(target.loaded.text)
        entry = None if target.stdin else cache_for(target.config).get(str(target.path), digest, target.stat)
        if entry is not None and not (
            options.fixing and any(d.fix is not None and d.fix.applies(unsafe=options.unsafe_fixes) for d in entry.diagnostics)
        ):
            results[i] = FileResult(target.path, target.display, source, entry.diagnostics, entry.syntax_errors, notebook=target.notebook)
            continue
        work.append(
            Work(i, str(target.path), target.loaded.text, target.config, options.fixing, options.unsafe_fixes, target.notebook is not None)
        )

    used = list({id(c): c for c in (cache_for(targets[w.index].config) for w in work) if c.file is not None}.values())
    stored: dict[str, Any] = {}
    for cache in used:
        stored.update(cache.load_summaries())
    added: dict[str, Any] = {}
    for outcome in execute(work, choose_jobs(options.jobs, len(work)), stored if used else None):
        added.update(outcome.summaries)
        target = targets[outcome.index]
        if outcome.error is not None:
            report.errors.append(FileError(target.display, outcome.error, target.path, internal=True))
            continue
        assert target.loaded is not None
        text = target.loaded.text
        is_notebook = target.notebook is not None
        fixed = 0
        new_text = outcome.text
        if new_text is not None and new_text != text:
            if options.diff:
                diff = notebook_diff(target.display, target.notebook, new_text) if target.notebook else unified_diff(target.display, text, new_text)
                out.diffs.append(diff)
                out.would_fix += outcome.fixed
                # show what the file holds now, not what it would hold
                outcome = process(Work(outcome.index, str(target.path), text, target.config, False, False, is_notebook))
            elif target.stdin:
                out.fixed_stdin = new_text
                text, fixed = new_text, outcome.fixed
            else:
                data = encode(target.loaded, new_text)
                try:
                    target.path.write_bytes(data)
                except OSError as exc:
                    report.errors.append(FileError(target.display, f"cannot write fixes: {exc.strerror or exc}", target.path))
                    outcome = process(Work(outcome.index, str(target.path), text, target.config, False, False, is_notebook))
                else:
                    text, fixed = new_text, outcome.fixed
                    digests[outcome.index] = content_hash(data)
                    target.stat = None  # just written: its stat cannot be trusted yet
        elif target.stdin and options.fix:
            out.fixed_stdin = text
        if not target.stdin and not (options.diff and outcome.fixed):
            cache_for(target.config).put(
                str(target.path), digests[outcome.index], outcome.diagnostics, outcome.syntax_errors, outcome.dependencies, target.stat
            )
        joined = target.notebook
        if joined is not None and text != joined.notebook.raw:
            reparsed = parse_notebook(text)
            joined = join(reparsed) if not isinstance(reparsed, NotebookError) else joined
        source = joined.source if joined is not None else SourceText(text)
        results[outcome.index] = FileResult(
            target.path, target.display, source, outcome.diagnostics, outcome.syntax_errors, fixed, notebook=joined
        )

    report.files = [r for r in results if r is not None]
    report.files.sort(key=lambda f: f.display)
    for cache in caches.values():
        cache.save()
    for cache in used:
        cache.save_summaries(stored, added)
    return out
