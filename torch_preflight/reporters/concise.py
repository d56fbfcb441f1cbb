"""`--format concise`: one line per finding, `path:line:col: CODE message`."""

from __future__ import annotations

from typing import TextIO

from torch_preflight.core.parse import SyntaxProblem
from torch_preflight.reporters import Report, ordered, where


def lines(report: Report) -> list[str]:
    out: list[str] = []
    for file in report.files:
        for pos, item in ordered(file):
            at = where(file, pos)
            if isinstance(item, SyntaxProblem):
                out.append(f"{at}: {item.message}")
            else:
                mark = "[*] " if report.fixable(item) else ""
                out.append(f"{at}: {item.code} {mark}{item.message}")
    return out


def summary(report: Report) -> str:
    count = report.diagnostic_count
    fixed = report.fixed_count
    if count == 0:
        return f"Fixed {fixed} error{'s' * (fixed != 1)}; all checks passed!" if fixed else "All checks passed!"
    text = f"Found {count} error{'s' * (count != 1)}"
    extras: list[str] = []
    if fixed:
        extras.append(f"{fixed} fixed, {count} remaining")
    fixable = report.fixable_count()
    if fixable:
        extras.append(f"{fixable} fixable with --fix" + (" --unsafe-fixes" if report.unsafe_fixes else ""))
    hidden = report.hidden_unsafe_count()
    if hidden:
        extras.append(f"{hidden} more with --unsafe-fixes")
    if extras:
        text += f" ({'; '.join(extras)})"
    return text + "."


def render(report: Report, stream: TextIO) -> None:
    out = lines(report)
    out.append(summary(report))
    stream.write("\n".join(out) + "\n")
