"""Output formats for `torch-preflight check`.

Every reporter takes one `Report` (the results of a run) and writes it to a text stream.
Positions are converted here, at the edge: the core is 0-based in code points; the
machine-readable formats (json, sarif, github) are 1-based rows and columns, still in
code points (SARIF says so with `columnKind: unicodeCodePoints`). End columns are
exclusive, as in ruff's JSON and SARIF's `endColumn`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from torch_preflight.core.diagnostics import Applicability, Diagnostic
from torch_preflight.core.notebook import Joined
from torch_preflight.core.parse import SyntaxProblem
from torch_preflight.core.source import Position, SourceText, Span

FORMATS = ("text", "concise", "json", "sarif", "github")


@dataclass
class FileResult:
    """The findings of one file, as the reporters see them."""

    path: Path  # absolute
    display: str  # as shown to the user (relative to the working directory when below it)
    source: SourceText
    diagnostics: list[Diagnostic]
    syntax_errors: list[SyntaxProblem] = field(default_factory=list)
    fixed: int = 0  # fixes applied by --fix
    notebook: Joined | None = None  # a Jupyter notebook: `source` is its joined Python cells


@dataclass
class FileError:
    """A file that could not be checked (unreadable, not UTF-8, binary, or an internal error)."""

    display: str
    reason: str
    path: Path | None = None
    internal: bool = False


@dataclass
class Report:
    files: list[FileResult]
    errors: list[FileError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. files skipped for their size
    unsafe_fixes: bool = False  # whether --unsafe-fixes is on (changes what counts as fixable)
    show_source: bool = True
    fix_mode: bool = False  # --fix ran: diagnostics are what remains

    @property
    def diagnostic_count(self) -> int:
        return sum(len(f.diagnostics) + len(f.syntax_errors) for f in self.files)

    @property
    def fixed_count(self) -> int:
        return sum(f.fixed for f in self.files)

    def fixable(self, diagnostic: Diagnostic) -> bool:
        return diagnostic.fix is not None and diagnostic.fix.applies(unsafe=self.unsafe_fixes)

    def fixable_count(self) -> int:
        return sum(1 for f in self.files for d in f.diagnostics if self.fixable(d))

    def hidden_unsafe_count(self) -> int:
        """Fixes that --unsafe-fixes would enable."""
        if self.unsafe_fixes:
            return 0
        return sum(
            1 for f in self.files for d in f.diagnostics if d.fix is not None and d.fix.applicability is Applicability.UNSAFE
        )


def ordered(file: FileResult) -> list[tuple[Position, Diagnostic | SyntaxProblem]]:
    """Syntax errors and diagnostics of one file, in source order."""
    items: list[tuple[Position, Diagnostic | SyntaxProblem]] = [(p.position, p) for p in file.syntax_errors]
    items.extend((d.span.start, d) for d in file.diagnostics)
    items.sort(key=lambda item: (item[0].line, item[0].col, 0 if isinstance(item[1], SyntaxProblem) else 1))
    return items


def row_col(pos: Position) -> dict[str, int]:
    """1-based row and code-point column."""
    return {"row": pos.line + 1, "column": pos.col + 1}


def uri_path(path: Path, display: str) -> str:
    """A relative URI path with forward slashes (absolute file URI when outside the working directory)."""
    if os.path.isabs(display):
        return path.as_uri()
    return display.replace(os.sep, "/")


def cell_location(file: FileResult, pos: Position) -> tuple[int | None, Position]:
    """(cell, position inside it) for a notebook; (None, pos) for a Python file.
    The cell is 1-based among all cells of the notebook, as ruff's `cell`."""
    if file.notebook is None:
        return None, pos
    where = file.notebook.to_cell(pos)
    return where.cell, Position(where.line, where.col)


def cell_span(file: FileResult, span: Span) -> tuple[int | None, Span]:
    """(cell, span inside it); the end is clamped to the start's cell."""
    if file.notebook is None:
        return None, span
    index, inside = file.notebook.cell_span(span)
    return index + 1, inside


def where(file: FileResult, pos: Position) -> str:
    """`path:12:5`, or `notebook.ipynb:cell 4:12:5` (1-based, as ruff prints them)."""
    cell, inside = cell_location(file, pos)
    prefix = f"{file.display}:cell {cell}" if cell is not None else file.display
    return f"{prefix}:{inside.line + 1}:{inside.col + 1}"


Renderer = Callable[[Report, TextIO], None]


def get(name: str) -> Renderer:
    """The `render(report, stream)` function of one format (imported lazily: rich is slow to import)."""
    if name == "text":
        from torch_preflight.reporters import text

        return text.render
    if name == "concise":
        from torch_preflight.reporters import concise

        return concise.render
    if name == "json":
        from torch_preflight.reporters import json as json_reporter

        return json_reporter.render
    if name == "sarif":
        from torch_preflight.reporters import sarif

        return sarif.render
    if name == "github":
        from torch_preflight.reporters import github

        return github.render
    raise ValueError(f"unknown format {name!r}; choose from {', '.join(FORMATS)}")


__all__ = ["FORMATS", "FileError", "FileResult", "Report", "cell_location", "cell_span", "get", "ordered", "row_col", "uri_path", "where"]
