"""Diagnostics and fixes: plain data, shared by the CLI, the server and the tests."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from torch_preflight.core.source import Position, SourceText, Span


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    HINT = "hint"


class Applicability(StrEnum):
    """How safe a fix is (ruff's terms)."""

    SAFE = "safe"  # keeps the intended behaviour
    UNSAFE = "unsafe"  # may change runtime behaviour
    DISPLAY_ONLY = "display-only"  # shown, never applied automatically


@dataclass(frozen=True, slots=True)
class Edit:
    span: Span
    content: str

    @classmethod
    def insert(cls, at: Position, content: str) -> Edit:
        return cls(Span(at, at), content)

    @classmethod
    def replace(cls, span: Span, content: str) -> Edit:
        return cls(span, content)


@dataclass(frozen=True, slots=True)
class Fix:
    title: str
    edits: tuple[Edit, ...]
    applicability: Applicability

    def applies(self, *, unsafe: bool) -> bool:
        if self.applicability is Applicability.SAFE:
            return True
        return unsafe and self.applicability is Applicability.UNSAFE


@dataclass(frozen=True, slots=True)
class Related:
    span: Span
    message: str


@dataclass(frozen=True, slots=True)
class Diagnostic:
    code: str
    name: str
    message: str
    span: Span
    severity: Severity
    fix: Fix | None = None
    related: tuple[Related, ...] = ()
    data: tuple[tuple[str, str], ...] = field(default=())

    def sort_key(self) -> tuple[int, int, str]:
        return (self.span.start.line, self.span.start.col, self.code)


def apply_edits(source: SourceText, edits: Iterable[Edit]) -> str:
    """Apply non-overlapping edits; later overlapping ones are dropped."""
    ordered = sorted(edits, key=lambda e: (source.offset(e.span.start), source.offset(e.span.end)))
    out: list[str] = []
    cursor = 0
    text = source.text
    for edit in ordered:
        start, end = source.offset(edit.span.start), source.offset(edit.span.end)
        if start < cursor:
            continue
        out.append(text[cursor:start])
        out.append(edit.content)
        cursor = end
    out.append(text[cursor:])
    return "".join(out)


def apply_fixes(source: SourceText, fixes: Sequence[Fix]) -> tuple[str, int]:
    """Apply whole fixes whose edits do not overlap earlier ones. Returns (text, count)."""
    taken: list[tuple[int, int]] = []
    chosen: list[Edit] = []
    count = 0
    for fix in fixes:
        ranges = [(source.offset(e.span.start), source.offset(e.span.end)) for e in fix.edits]
        if any(_overlaps(r, t) for r in ranges for t in taken):
            continue
        taken.extend(ranges)
        chosen.extend(fix.edits)
        count += 1
    return apply_edits(source, chosen), count


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    if a[0] == a[1] == b[0] == b[1]:
        return True
    return a[0] < b[1] and b[0] < a[1]


# -- places named in messages ------------------------------------------------------------------
# A message that names another place says `line N` (1-based), written by `cite_line`; front ends
# whose lines are not the file's (a notebook's cells) rewrite every such mention with `relocate`.
_LINE_MENTION = re.compile(r"\bline (\d+)\b")


def cite_line(line: int) -> str:
    """How a message names a 0-based line of the analysed text: `line 12`."""
    return f"line {line + 1}"


def relocate_text(text: str, where: Callable[[int], str], path: str | None = None) -> str:
    """`text` with each `line N` replaced by `where(N - 1)` (e.g. `cell 5, line 3`); with `path`,
    each `name:N` too (`train.ipynb:370`, as the estimator cites the analysed file)."""
    text = _LINE_MENTION.sub(lambda m: where(int(m.group(1)) - 1), text)
    if path:
        name = re.escape(path.replace("\\", "/").rsplit("/", 1)[-1])
        text = re.sub(rf"\b{name}:(\d+)\b", lambda m: where(int(m.group(1)) - 1), text)
    return text


def relocate(diagnostic: Diagnostic, where: Callable[[int], str]) -> Diagnostic:
    """The diagnostic with the lines its message and related messages mention rewritten by `where`."""
    message = relocate_text(diagnostic.message, where)
    related = tuple(replace(r, message=relocate_text(r.message, where)) for r in diagnostic.related)
    if message == diagnostic.message and related == diagnostic.related:
        return diagnostic
    return replace(diagnostic, message=message, related=related)
