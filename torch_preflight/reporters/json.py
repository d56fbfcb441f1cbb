"""`--format json`: a JSON array shaped like ruff's `--output-format json`.

Each item: `code`, `message`, `severity`, `filename` (absolute), `location` and
`end_location` ({`row`, `column`}, 1-based, columns in code points, end exclusive),
`cell` (for a Jupyter notebook, the 1-based index of the cell among all the notebook's
cells, as ruff gives it, with the rows and columns inside that cell; null for a Python file),
`fix` (null or {`applicability`, `message`, `edits`: [{`content`, `location`,
`end_location`}]}), `url` and `noqa_row` (the row a `# noqa` comment must sit on).
Syntax errors are items with `code: null`, as ruff reports them.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from torch_preflight.core.diagnostics import Diagnostic
from torch_preflight.core.parse import SyntaxProblem
from torch_preflight.core.source import Span
from torch_preflight.reporters import FileResult, Report, cell_span, ordered, row_col
from torch_preflight.rules.base import doc_url


def _edit(file: FileResult, span: Span, content: str) -> dict[str, Any]:
    cell, inside = cell_span(file, span)
    out: dict[str, Any] = {"content": content, "location": row_col(inside.start), "end_location": row_col(inside.end)}
    if cell is not None:
        out["cell"] = cell
    return out


def diagnostic_item(file: FileResult, d: Diagnostic) -> dict[str, Any]:
    fix = None
    if d.fix is not None:
        fix = {
            "applicability": d.fix.applicability.value,
            "message": d.fix.title,
            "edits": [_edit(file, e.span, e.content) for e in d.fix.edits],
        }
    cell, span = cell_span(file, d.span)
    return {
        "cell": cell,
        "code": d.code,
        "message": d.message,
        "severity": d.severity.value,
        "filename": str(file.path),
        "location": row_col(span.start),
        "end_location": row_col(span.end),
        "fix": fix,
        "url": doc_url(d.code),
        "noqa_row": span.start.line + 1,
    }


def syntax_item(file: FileResult, problem: SyntaxProblem) -> dict[str, Any]:
    cell, span = cell_span(file, Span(problem.position, problem.position))
    return {
        "cell": cell,
        "code": None,
        "message": problem.message,
        "severity": "error",
        "filename": str(file.path),
        "location": row_col(span.start),
        "end_location": row_col(span.end),
        "fix": None,
        "url": None,
        "noqa_row": None,
    }


def items(report: Report) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for file in report.files:
        for _, item in ordered(file):
            if isinstance(item, SyntaxProblem):
                out.append(syntax_item(file, item))
            else:
                out.append(diagnostic_item(file, item))
    return out


def render(report: Report, stream: TextIO) -> None:
    json.dump(items(report), stream, indent=2, ensure_ascii=False)
    stream.write("\n")
