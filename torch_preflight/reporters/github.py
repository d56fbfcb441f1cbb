"""`--format github`: GitHub Actions workflow commands, one annotation per finding.

`::error file=PATH,line=L,col=C,endLine=L2,endColumn=C2,title=CODE::message`, with the
command's escaping (`%`, CR, LF everywhere; `:` and `,` in properties too). Rows and
columns are 1-based; warnings map to `::warning`, infos and hints to `::notice`.
For a Jupyter notebook the line and column are those of the stored .ipynb (JSON) file, as
in the SARIF output, and the message starts with the place in notebook terms (`cell 4:12:5:`).
"""

from __future__ import annotations

from typing import TextIO

from torch_preflight.core.notebook import raw_position
from torch_preflight.core.parse import SyntaxProblem
from torch_preflight.core.source import Position, Span
from torch_preflight.reporters import FileResult, Report, cell_span, ordered

_LEVEL = {"error": "error", "warning": "warning", "info": "notice", "hint": "notice"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, path: str, start: Position, end: Position, title: str, message: str) -> str:
    props = (
        f"file={escape_property(path)},line={start.line + 1},col={start.col + 1},"
        f"endLine={end.line + 1},endColumn={end.col + 1},title={escape_property(title)}"
    )
    return f"::{level} {props}::{escape_data(message)}"


def _stored(file: FileResult, start: Position, end: Position, message: str) -> tuple[Position, Position, str]:
    """For a notebook: the positions in the stored JSON, and the message led by `cell N:L:C:`."""
    if file.notebook is None:
        return start, end, message
    cell, inside = cell_span(file, Span(start, max(start, end)))
    assert cell is not None
    a = raw_position(file.notebook.notebook, cell - 1, inside.start)
    b = raw_position(file.notebook.notebook, cell - 1, inside.end)
    label = f"cell {cell}:{inside.start.line + 1}:{inside.start.col + 1}: {message}"
    if a is None or b is None:
        return inside.start, inside.end, label
    return a, b, label


def render(report: Report, stream: TextIO) -> None:
    out: list[str] = []
    for file in report.files:
        path = file.display.replace("\\", "/")
        for pos, item in ordered(file):
            if isinstance(item, SyntaxProblem):
                start, end, message = _stored(file, pos, pos, item.message)
                out.append(command("error", path, start, end, "SyntaxError", message))
            else:
                level = _LEVEL[item.severity.value]
                start, end, message = _stored(file, item.span.start, item.span.end, item.message)
                out.append(command(level, path, start, end, item.code, message))
    for error in report.errors:
        out.append(f"::error file={escape_property(error.display)},title=torch-preflight::{escape_data(error.reason)}")
    if out:
        stream.write("\n".join(out) + "\n")
