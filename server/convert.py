"""The one place where core results become lsprotocol types (and LSP positions become core ones).

Core positions are (line, column in code points). LSP columns count units of the negotiated
encoding: UTF-16 code units by default, UTF-8 bytes or UTF-32 code points when the client
offers them. A non-BMP character (an emoji) is 1 code point, 2 UTF-16 units, 4 UTF-8 bytes.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from lsprotocol import types
from torch_preflight.core.diagnostics import Diagnostic, Edit, Severity
from torch_preflight.core.memory import LayerEstimate, MemoryReport, format_bytes
from torch_preflight.core.source import Position, SourceText, Span
from torch_preflight.rules.base import doc_page
from torch_preflight.rules.registry import BY_CODE

SOURCE = "torch-preflight"
UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"

_SEVERITY = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
    Severity.HINT: types.DiagnosticSeverity.Hint,
}


def _units(text: str, encoding: str) -> int:
    if encoding == UTF32 or text.isascii():
        return len(text)
    if encoding == UTF8:
        return len(text.encode("utf-8"))
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def to_lsp_position(source: SourceText, pos: Position, encoding: str = UTF16) -> types.Position:
    line = source.line(pos.line)
    return types.Position(line=pos.line, character=_units(line[: pos.col], encoding))


def to_lsp_range(source: SourceText, span: Span, encoding: str = UTF16) -> types.Range:
    return types.Range(start=to_lsp_position(source, span.start, encoding), end=to_lsp_position(source, span.end, encoding))


def from_lsp_position(source: SourceText, pos: types.Position, encoding: str = UTF16) -> Position:
    """A client position in code points, clamped to the document (past the end -> the end)."""
    count = len(source.line_starts)
    if pos.line < 0:
        return Position(0, 0)
    if pos.line >= count:
        return Position(count - 1, len(source.line(count - 1)))
    return Position(pos.line, col_from_units(source.line(pos.line), pos.character, encoding))


def col_from_units(line: str, units: int, encoding: str = UTF16) -> int:
    if units <= 0:
        return 0
    if encoding == UTF32 or line.isascii():
        return min(units, len(line))
    counted = 0
    for index, ch in enumerate(line):
        size = (len(ch.encode("utf-8")) if encoding == UTF8 else (2 if ord(ch) > 0xFFFF else 1))
        if counted + size > units:
            return index
        counted += size
    return len(line)


def from_lsp_range(source: SourceText, rng: types.Range, encoding: str = UTF16) -> Span:
    return Span(from_lsp_position(source, rng.start, encoding), from_lsp_position(source, rng.end, encoding))


# --- diagnostics ----------------------------------------------------------------------


def diagnostic_data(d: Diagnostic) -> dict[str, Any]:
    """What a code action needs to find the finding again in the cached analysis."""
    s = d.span
    return {"code": d.code, "span": [s.start.line, s.start.col, s.end.line, s.end.col], "fixable": d.fix is not None, **dict(d.data)}


@cache
def code_description(code: str) -> types.CodeDescription | None:
    """A link to the rule's page, a local file (see rules.base.DOCS_DIR); none when it is missing."""
    rule = BY_CODE.get(code)
    return types.CodeDescription(href=rule.meta.url) if rule and doc_page(code).is_file() else None


def to_lsp_diagnostic(d: Diagnostic, source: SourceText, uri: str, encoding: str = UTF16) -> types.Diagnostic:
    return types.Diagnostic(
        range=to_lsp_range(source, d.span, encoding),
        message=d.message,
        severity=_SEVERITY.get(d.severity, types.DiagnosticSeverity.Warning),
        code=d.code,
        code_description=code_description(d.code),
        source=SOURCE,
        related_information=[
            types.DiagnosticRelatedInformation(
                location=types.Location(uri=uri, range=to_lsp_range(source, r.span, encoding)), message=r.message
            )
            for r in d.related
        ]
        or None,
        data=diagnostic_data(d),
    )


def syntax_diagnostic(message: str, pos: Position, source: SourceText, encoding: str = UTF16) -> types.Diagnostic:
    start = to_lsp_position(source, pos, encoding)
    end = to_lsp_position(source, Position(pos.line, len(source.line(pos.line))), encoding)
    return types.Diagnostic(range=types.Range(start=start, end=end), message=message, severity=types.DiagnosticSeverity.Error,
                            source=SOURCE, code="E999")


def span_from_data(data: Any) -> tuple[str, Span] | None:
    """(code, core span) from a diagnostic's `data`, or None when it is not ours / malformed."""
    if not isinstance(data, dict):
        return None
    code, span = data.get("code"), data.get("span")
    if not isinstance(code, str) or not isinstance(span, list) or len(span) != 4 or not all(isinstance(v, int) for v in span):
        return None
    return code, Span.of(*span)


# --- edits ----------------------------------------------------------------------------


def to_text_edits(edits: tuple[Edit, ...] | list[Edit], source: SourceText, encoding: str = UTF16) -> list[types.TextEdit]:
    return [types.TextEdit(range=to_lsp_range(source, e.span, encoding), new_text=e.content) for e in edits]


def workspace_edit(uri: str, version: int | None, edits: list[types.TextEdit]) -> types.WorkspaceEdit:
    return types.WorkspaceEdit(
        document_changes=[
            types.TextDocumentEdit(text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version), edits=edits)
        ]
    )


# --- memory: inlay hints and hover ----------------------------------------------------


def count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def shape_label(shape: tuple[str | int, ...]) -> str:
    """(64, 16, 5, 5) -> '[64, 16, 5, 5]', as in TPF501's messages."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def layer_label(layer: LayerEstimate) -> str:
    parts = [f"{count(layer.params)} params · {format_bytes(layer.param_bytes)}"]
    if layer.activation_bytes is not None:
        parts.append(f"act {format_bytes(layer.activation_bytes)}")
    if layer.output_shape:
        parts.append("→ " + shape_label(layer.output_shape))
    return "  " + " · ".join(parts)


def total_label(report: MemoryReport) -> str:
    label = f"  peak ≈ {format_bytes(report.peak_bytes)}"
    if report.budget_bytes is not None:
        verdict = "fits" if report.fits else "exceeds"
        label += f" ({verdict} {format_bytes(report.budget_bytes)})"
    return label


def inlay_hints(reports: list[MemoryReport], source: SourceText, rng: Span, encoding: str = UTF16) -> list[types.InlayHint]:
    hints: list[types.InlayHint] = []
    seen: set[int] = set()
    for report in reports:
        rows = [(layer.line, layer_label(layer)) for layer in report.layers if layer.file is None]  # not built in another file
        rows.append((report.model_line, total_label(report)))
        for line, label in rows:
            if line in seen or not rng.start.line <= line <= rng.end.line or line >= len(source.line_starts):
                continue
            seen.add(line)
            end = to_lsp_position(source, Position(line, len(source.line(line).rstrip())), encoding)
            hints.append(types.InlayHint(position=end, label=label, kind=types.InlayHintKind.Type, padding_left=True))
    hints.sort(key=lambda h: (h.position.line, h.position.character))
    return hints


def hover_markdown(report: MemoryReport, layer: LayerEstimate | None = None) -> str:
    lines: list[str] = []
    if layer is not None:
        lines += [f"**{layer.name}** ({layer.type})", "", "| | |", "|---|---|",
                  f"| params | {layer.params:,} |", f"| param memory | {format_bytes(layer.param_bytes)} |",
                  f"| activations | {format_bytes(layer.activation_bytes)} |"]
        if layer.output_shape:
            lines.append(f"| output shape | {shape_label(layer.output_shape)} |")
        lines.append("")
    lines += [f"**{report.model}**: training step", "", "| | |", "|---|---|",
              f"| params | {sum(x.params for x in report.layers):,} |"]
    for key, value in report.breakdown.items():
        lines.append(f"| {key.replace('_', ' ')} | {format_bytes(value)} |")
    lines.append(f"| **peak** | **{format_bytes(report.peak_bytes)}** |")
    if report.budget_bytes is not None:
        lines.append(f"| budget | {format_bytes(report.budget_bytes)} ({'fits' if report.fits else 'does not fit'}) |")
    if report.assumptions:
        lines += ["", "Assumptions:"]
        lines += [f"- {a.text}" + (f" (line {a.line + 1})" if a.line is not None else "") for a in report.assumptions]
    if not report.complete:
        lines += ["", "_Partial estimate: part of the model or step could not be read._"]
    return "\n".join(lines)
