"""Inline expectations: `# error: TPF001` on the line a rule must flag (several codes may
be listed, comma-separated). Lines without one must stay clean."""

from __future__ import annotations

import re
from collections import Counter

_EXPECT = re.compile(r"#\s*error:\s*(?P<codes>TPF\d{3}(?:\s*,\s*TPF\d{3})*)")


def expected(text: str) -> Counter[tuple[int, str]]:
    found: Counter[tuple[int, str]] = Counter()
    for number, line in enumerate(text.splitlines(), start=1):
        match = _EXPECT.search(line)
        if match:
            for code in re.split(r"\s*,\s*", match.group("codes")):
                found[(number, code)] += 1
    return found


def render(items: Counter[tuple[int, str]], lines: list[str]) -> list[str]:
    return [f"{line:4}: {code}  | {lines[line - 1].strip()[:70]}" for (line, code), n in sorted(items.items()) for _ in range(n)]
