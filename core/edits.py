"""Building blocks for fixes: inserting a statement, indenting a block, wrapping it."""

from __future__ import annotations

import io
import tokenize

from torch_preflight.core.diagnostics import Edit
from torch_preflight.core.source import Position, SourceText


def insert_statement(source: SourceText, line: int, indent: str, statement: str) -> Edit:
    """Insert `statement` as a new line before `line`, at `indent`."""
    return Edit.insert(Position(line, 0), f"{indent}{statement}{source.newline}")


def indent_unit(outer: str, inner: str) -> str:
    """The indentation step between a header and its body ('    ' or '\\t')."""
    if inner.startswith(outer) and len(inner) > len(outer):
        return inner[len(outer) :]
    return "\t" if "\t" in outer else "    "


def string_continuation_lines(source: SourceText, start: int, end: int) -> set[int]:
    """Lines in [start, end] that continue a multi-line string: indenting them would change
    the string's value."""
    segment = "".join(source.lines[start : end + 1])
    inside: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(segment).readline):
            if token.type == tokenize.STRING or token.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
                first, last = token.start[0], token.end[0]
                inside.update(range(start + first, start + last))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return inside


def wrap_block(source: SourceText, start: int, end: int, indent: str, unit: str, header: str) -> list[Edit]:
    """Wrap lines [start, end] in a compound statement `header` (e.g. `with torch.no_grad():`)."""
    skip = string_continuation_lines(source, start, end)
    edits = [insert_statement(source, start, indent, header)]
    for line in range(start, end + 1):
        if line in skip or not source.line(line).strip():
            continue
        edits.append(Edit.insert(Position(line, 0), unit))
    return edits
