"""`--format sarif`: SARIF 2.1.0 for GitHub code scanning (and any SARIF viewer).

One run; `tool.driver.rules` lists every rule (id, name, descriptions, helpUri, help text,
default level); each result points at its rule by `ruleId`/`ruleIndex`. Locations use
relative URIs with forward slashes (absolute `file://` URIs for files outside the working
directory) and 1-based regions with code-point columns (`columnKind: unicodeCodePoints`);
`endColumn` is exclusive, as SARIF defines it. Syntax errors are results of the
`syntax-error` rule. Files that could not be read become tool execution notifications.

Jupyter notebooks: the region is *inside the .ipynb file as stored*, the JSON line and
column where the code sits in the cell's `source` string (so GitHub code scanning and any
SARIF viewer open the notebook file at the right line), and the location's property bag
says where that is in notebook terms: `{"notebookCell": 4, "cellRegion": {...}}`, the
1-based cell (among all cells, as ruff counts) and the region inside the cell.
"""

from __future__ import annotations

import json
import re
from typing import Any, TextIO

from torch_preflight import __version__
from torch_preflight.core.diagnostics import Diagnostic, Severity
from torch_preflight.core.notebook import raw_position
from torch_preflight.core.parse import SyntaxProblem
from torch_preflight.core.source import Position, Span
from torch_preflight.reporters import FileResult, Report, cell_span, ordered, uri_path
from torch_preflight.rules.base import Rule
from torch_preflight.rules.registry import ALL_RULES

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SYNTAX_RULE_ID = "syntax-error"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note", Severity.HINT: "note"}


def _summary(rule: Rule) -> str:
    """The first paragraph of the rule's `## What it does` section, as plain text."""
    match = re.search(r"^## What it does\s*\n(.+?)(?:\n\s*\n|\n## |\Z)", rule.doc, flags=re.S | re.M)
    text = match.group(1) if match else rule.meta.message
    return " ".join(text.split())


def rule_descriptor(rule: Rule) -> dict[str, Any]:
    meta = rule.meta
    return {
        "id": meta.code,
        "name": meta.name,
        "shortDescription": {"text": meta.message},
        "fullDescription": {"text": _summary(rule)},
        "helpUri": meta.url,
        "help": {"text": f"{meta.message}. See {meta.url}", "markdown": rule.doc.strip()},
        "defaultConfiguration": {"level": _LEVEL[meta.severity], "enabled": meta.default_enabled},
        "properties": {"tags": [meta.name, meta.status.value]},
    }


SYNTAX_DESCRIPTOR: dict[str, Any] = {
    "id": SYNTAX_RULE_ID,
    "name": "syntax-error",
    "shortDescription": {"text": "The file does not parse; findings come from its intact parts"},
    "defaultConfiguration": {"level": "error"},
}


def region(span: Span) -> dict[str, int]:
    return {
        "startLine": span.start.line + 1,
        "startColumn": span.start.col + 1,
        "endLine": span.end.line + 1,
        "endColumn": span.end.col + 1,
    }


def notebook_region(file: FileResult, span: Span) -> tuple[dict[str, int], dict[str, Any] | None]:
    """The region of `span` in the file as stored, and for a notebook the cell-relative place."""
    if file.notebook is None:
        return region(span), None
    cell, inside = cell_span(file, span)
    assert cell is not None
    notebook = file.notebook.notebook
    start = raw_position(notebook, cell - 1, inside.start)
    end = raw_position(notebook, cell - 1, inside.end)
    in_cell = region(inside)
    stored = region(Span(start, end)) if start is not None and end is not None else in_cell
    return stored, {"notebookCell": cell, "cellRegion": in_cell}


def location(file: FileResult, span: Span) -> dict[str, Any]:
    stored, cell = notebook_region(file, span)
    out: dict[str, Any] = {"physicalLocation": {"artifactLocation": {"uri": uri_path(file.path, file.display)}, "region": stored}}
    if cell is not None:
        out["properties"] = cell
    return out


def result(file: FileResult, d: Diagnostic, index: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ruleId": d.code,
        "ruleIndex": index,
        "level": _LEVEL[d.severity],
        "message": {"text": d.message},
        "locations": [location(file, d.span)],
    }
    if d.related:
        out["relatedLocations"] = [
            {"id": i, **location(file, r.span), "message": {"text": r.message}} for i, r in enumerate(d.related)
        ]
    if d.fix is not None:
        out["properties"] = {"fix": d.fix.title, "fixApplicability": d.fix.applicability.value}
    return out


def syntax_result(file: FileResult, problem: SyntaxProblem, index: int) -> dict[str, Any]:
    pos = problem.position
    return {
        "ruleId": SYNTAX_RULE_ID,
        "ruleIndex": index,
        "level": "error",
        "message": {"text": problem.message},
        "locations": [location(file, Span(pos, Position(pos.line, pos.col + 1)))],
    }


def log(report: Report) -> dict[str, Any]:
    rules = [rule_descriptor(rule) for rule in ALL_RULES]
    index = {rule.code: i for i, rule in enumerate(ALL_RULES)}
    rules.append(SYNTAX_DESCRIPTOR)
    syntax_index = len(rules) - 1
    results: list[dict[str, Any]] = []
    for file in report.files:
        for _, item in ordered(file):
            if isinstance(item, SyntaxProblem):
                results.append(syntax_result(file, item, syntax_index))
            else:
                results.append(result(file, item, index[item.code]))
    invocation: dict[str, Any] = {"executionSuccessful": not any(e.internal for e in report.errors)}
    notifications = [
        {
            "level": "error",
            "message": {"text": f"{e.display}: {e.reason}"},
            **({"locations": [{"physicalLocation": {"artifactLocation": {"uri": uri_path(e.path, e.display)}}}]} if e.path else {}),
        }
        for e in report.errors
    ]
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "torch-preflight",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": rules,
                    }
                },
                "columnKind": "unicodeCodePoints",
                "invocations": [invocation],
                "results": results,
            }
        ],
    }


def render(report: Report, stream: TextIO) -> None:
    json.dump(log(report), stream, indent=2, ensure_ascii=False)
    stream.write("\n")
