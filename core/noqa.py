"""Suppression comments: `# noqa`, `# noqa: TPF001,TPF005` and `# torch-preflight: noqa`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from torch_preflight.core.diagnostics import Diagnostic, Edit
from torch_preflight.core.source import Position, SourceText, Span

_LINE = re.compile(r"#\s*noqa(?::[\s]*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.I)
_FILE = re.compile(r"#\s*torch-preflight:\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.I)
ALL = frozenset({"*"})


def _split(codes: str | None) -> frozenset[str]:
    return frozenset(c.upper() for c in re.split(r"[\s,]+", codes) if c) if codes else ALL


@dataclass(frozen=True)
class Suppressions:
    file: frozenset[str]
    lines: dict[int, frozenset[str]]

    def suppresses(self, diagnostic: Diagnostic) -> bool:
        if "*" in self.file or diagnostic.code in self.file:
            return True
        codes = self.lines.get(diagnostic.span.start.line)
        return bool(codes) and ("*" in codes or diagnostic.code in codes)  # type: ignore[operator]


def scan(source: SourceText) -> Suppressions:
    file: set[str] = set()
    lines: dict[int, frozenset[str]] = {}
    if "noqa" not in source.text:
        return Suppressions(frozenset(), lines)
    for number, line in enumerate(source.text.splitlines()):
        if "noqa" not in line or "#" not in line:
            continue
        whole = _FILE.search(line)
        if whole:
            file |= _split(whole.group("codes"))
            continue
        match = _LINE.search(line)
        if match:
            lines[number] = _split(match.group("codes"))
    return Suppressions(frozenset(file), lines)


def suppress_edit(source: SourceText, line: int, code: str) -> Edit:
    """The edit that adds `code` to the line's `# noqa`, creating one if needed."""
    text = source.line(line)
    match = _LINE.search(text)
    if match and match.group("codes"):
        codes = sorted(_split(match.group("codes")) | {code})
        return Edit.replace(Span.of(line, match.start(), line, match.end()), f"# noqa: {', '.join(codes)}")
    if match:  # a bare noqa already suppresses everything
        return Edit.replace(Span.of(line, match.start(), line, match.end()), match.group(0))
    stripped = len(text.rstrip())
    return Edit.insert(Position(line, stripped), f"  # noqa: {code}")
