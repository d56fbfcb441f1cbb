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
from torch_preflight.core.parse import SyntaxProblem
from torch_preflight.core.source import Position, SourceText

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


def row_col(pos: Position) -> dict[str, int]:
    """1-based row and code-point column."""
    return {"row": pos.line + 1, "column": pos.col + 1}


def uri_path(path: Path, display: str) -> str:
    """A relative URI path with forward slashes (absolute file URI when outside the working directory)."""
    if os.path.isabs(display):
        return path.as_uri()
    return display.replace(os.sep, "/")


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


__all__ = ["FORMATS", "FileError", "FileResult", "Report", "get", "row_col", "uri_path"]
