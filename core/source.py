"""Source text and positions.

Every position in the core is 0-based and counted in code points: ``Position(line, col)``
or an absolute character offset into the text. Converting to UTF-16 (LSP) or to 1-based
rows and columns (CLI output) happens at the edges, never here.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cached_property


# Not `frozen` (never assigned to all the same): a frozen dataclass sets each field through
# `object.__setattr__`, about 3x slower to build, and the model and the data-flow index build these
# by the hundred thousand per file. `unsafe_hash` keeps the field-wise hash `frozen` gave.
@dataclass(order=True, slots=True, unsafe_hash=True)
class Position:
    line: int
    col: int


@dataclass(order=True, slots=True, unsafe_hash=True)  # not `frozen`: see Position
class Span:
    start: Position
    end: Position

    @classmethod
    def of(cls, line: int, col: int, end_line: int, end_col: int) -> Span:
        return cls(Position(line, col), Position(end_line, end_col))

    def contains(self, other: Span) -> bool:
        return self.start <= other.start and other.end <= self.end


class SourceText:
    """Immutable source text with line tables and offset conversion."""

    def __init__(self, text: str) -> None:
        self.text = text

    @cached_property
    def line_starts(self) -> list[int]:
        starts = [0]
        text = self.text
        find = text.find
        i = find("\n")
        while i != -1:
            starts.append(i + 1)
            i = find("\n", i + 1)
        return starts

    @cached_property
    def lines(self) -> list[str]:
        """Lines with their line endings kept."""
        return self.text.splitlines(keepends=True) or [""]

    @cached_property
    def _line_facts(self) -> tuple[list[int], list[bool]]:
        """Per line (split at "\\n", as `line_starts`): its length without the line ending, and
        whether it is ASCII. Positions are converted hundreds of thousands of times in a large file,
        and slicing the line out each time cost more than the rest of the conversion."""
        pieces = [piece.rstrip("\r") for piece in self.text.split("\n")]
        return [len(piece) for piece in pieces], [piece.isascii() for piece in pieces]

    def line(self, line: int) -> str:
        """The text of a 0-based line without its line ending ('' past the end)."""
        starts = self.line_starts
        if line < 0 or line >= len(starts):
            return ""
        end = starts[line + 1] if line + 1 < len(starts) else len(self.text)
        return self.text[starts[line] : end].rstrip("\r\n")

    def offset(self, pos: Position) -> int:
        starts = self.line_starts
        if pos.line >= len(starts):
            return len(self.text)
        length = self._line_facts[0][pos.line] if pos.line >= 0 else 0  # len(self.line(pos.line))
        return starts[pos.line] + min(pos.col, length)

    def position(self, offset: int) -> Position:
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self.line_starts, offset) - 1
        return Position(line, offset - self.line_starts[line])

    def slice(self, span: Span) -> str:
        return self.text[self.offset(span.start) : self.offset(span.end)]

    @cached_property
    def is_ascii(self) -> bool:
        return self.text.isascii()

    def char_col(self, line: int, utf8_col: int) -> int:
        """Convert a UTF-8 byte column (as `ast` reports it) into a code-point column."""
        if self.is_ascii or not 0 <= line < len(self.line_starts) or self._line_facts[1][line]:
            return utf8_col
        text = self.line(line)
        return len(text.encode("utf-8")[:utf8_col].decode("utf-8", errors="ignore"))

    def indentation(self, line: int) -> str:
        text = self.line(line)
        return text[: len(text) - len(text.lstrip(" \t"))]

    @cached_property
    def newline(self) -> str:
        """The file's dominant line ending."""
        crlf = self.text.count("\r\n")
        return "\r\n" if crlf and crlf * 2 >= self.text.count("\n") else "\n"
