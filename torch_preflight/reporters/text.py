"""`--format text` (the default): a code frame per finding, rendered with rich.

    train.py:16:1: TPF001 Training loop steps `opt` but never clears gradients ...
       |
    16 | for x, y in loader:
       | ^^^^^^^^^^^^^^^^^^^ TPF001
       |
       = help: Insert `opt.zero_grad()` at the top of the loop (unsafe fix)

Colour only when the stream is a terminal (rich decides; NO_COLOR and FORCE_COLOR are honoured).
"""

from __future__ import annotations

from typing import TextIO

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from torch_preflight.core.diagnostics import Applicability, Diagnostic
from torch_preflight.core.parse import SyntaxProblem
from torch_preflight.core.source import Position, SourceText, Span
from torch_preflight.reporters import FileResult, Report, cell_location, cell_span, ordered
from torch_preflight.reporters.concise import summary

MAX_FRAME_LINES = 4
TAB = 4

_APPLICABILITY = {Applicability.SAFE: "safe fix", Applicability.UNSAFE: "unsafe fix", Applicability.DISPLAY_ONLY: "display-only fix"}


def _frame(source: SourceText, span: Span, label: str, style: str) -> list[Text]:
    first, last = span.start.line, max(span.start.line, span.end.line)
    if span.end.line > span.start.line and span.end.col == 0:
        last -= 1  # a span that ends at the start of a line does not cover that line
    shown = list(range(first, min(last, first + MAX_FRAME_LINES - 1) + 1))
    width = len(str(shown[-1] + 1))
    gutter = " " * width + " |"
    out = [Text(gutter, style="blue")]
    for n in shown:
        raw = source.line(n)
        display = raw.expandtabs(TAB)
        start = span.start.col if n == first else len(raw) - len(raw.lstrip())
        end = span.end.col if n == span.end.line else len(raw)
        start = min(start, len(raw))
        end = max(min(end, len(raw)), start)
        lead = cell_len(raw[:start].expandtabs(TAB))
        marks = max(1, cell_len(raw[:end].expandtabs(TAB)) - lead)
        line = Text()
        line.append(f"{n + 1:>{width}} | ", style="blue")
        line.append(display)
        out.append(line)
        under = Text()
        under.append(gutter + " ", style="blue")
        under.append(" " * lead + "^" * marks, style=style)
        if n == shown[-1]:
            under.append(f" {label}", style=style)
        out.append(under)
    if last > shown[-1]:
        out.append(Text(f"{' ' * width} | ... ({last - shown[-1]} more lines)", style="blue"))
    out.append(Text(gutter, style="blue"))
    return out


def _place(text: Text, file: FileResult, pos: Position) -> None:
    """`path:12:5: `, or `notebook.ipynb:cell 4:12:5: `."""
    cell, inside = cell_location(file, pos)
    text.append(file.display + (f":cell {cell}" if cell is not None else ""), style="bold")
    text.append(f":{inside.line + 1}:{inside.col + 1}: ", style="cyan")


def _framed(file: FileResult, span: Span) -> tuple[SourceText, Span]:
    """The text and span a code frame shows: for a notebook, the cell as written (magics included)."""
    if file.notebook is None:
        return file.source, span
    cell, inside = cell_span(file, span)
    assert cell is not None
    return SourceText(file.notebook.cell_text(cell - 1)), inside


def _header(file: FileResult, pos: Position, code: str, message: str, fixable: bool) -> Text:
    text = Text()
    _place(text, file, pos)
    text.append(code, style="bold red")
    if fixable:
        text.append(" [*]", style="cyan")
    text.append(f" {message}")
    return text


def _diagnostic(report: Report, file: FileResult, d: Diagnostic) -> list[Text]:
    out = [_header(file, d.span.start, d.code, d.message, report.fixable(d))]
    if report.show_source:
        out.extend(_frame(*_framed(file, d.span), d.code, "bold red"))
    if d.fix is not None:
        shown = _framed(file, d.span)[1]
        pad = " " * len(str(min(shown.end.line, shown.start.line + MAX_FRAME_LINES - 1) + 1)) if report.show_source else ""
        help_line = Text(f"{pad} = help: ", style="bold cyan")
        help_line.append(f"{d.fix.title} ({_APPLICABILITY[d.fix.applicability]})")
        out.append(help_line)
    return out


def _syntax(report: Report, file: FileResult, problem: SyntaxProblem) -> list[Text]:
    pos = problem.position
    head = Text()
    _place(head, file, pos)
    head.append(problem.message, style="bold red")
    out = [head]
    if report.show_source:
        out.extend(_frame(*_framed(file, Span(pos, Position(pos.line, pos.col + 1))), "SyntaxError", "bold red"))
    return out


def render(report: Report, stream: TextIO) -> None:
    console = Console(file=stream, highlight=False, soft_wrap=True, emoji=False, markup=False)
    for file in report.files:
        for _, item in ordered(file):
            block = _syntax(report, file, item) if isinstance(item, SyntaxProblem) else _diagnostic(report, file, item)
            for line in block:
                console.print(line)
            console.print()
    style = "bold green" if report.diagnostic_count == 0 else "bold"
    console.print(Text(summary(report), style=style))
