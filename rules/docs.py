"""Rule documentation, generated from each rule module's docstring.

`python -m torch_preflight.rules.docs docs/rules` writes one page per rule; a test fails
when the committed pages differ from what this produces.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from torch_preflight.rules.base import DOC_SECTIONS, Rule
from torch_preflight.rules.registry import ALL_RULES


def sections(rule: Rule) -> list[str]:
    return re.findall(r"^## (.+?)\s*$", rule.doc, flags=re.M)


def missing_sections(rule: Rule) -> list[str]:
    present = set(sections(rule))
    return [s for s in DOC_SECTIONS if s not in present]


def render(rule: Rule) -> str:
    meta = rule.meta
    fix = meta.fix_title or "none"
    header = [
        f"# {meta.code} {meta.name}",
        "",
        f"{meta.message}.",
        "",
        "| | |",
        "|---|---|",
        f"| Code | `{meta.code}` |",
        f"| Name | `{meta.name}` |",
        f"| Default severity | {meta.severity.value} |",
        f"| Status | {meta.status.value} |",
        f"| Enabled by default | {'yes' if meta.default_enabled else 'no'} |",
        f"| Fix | {fix} |",
        "",
        "<!-- generated from the rule's docstring by `make docs`; do not edit -->",
        "",
    ]
    return "\n".join(header) + rule.doc.strip() + "\n"


def render_index(rules: tuple[Rule, ...] = ALL_RULES) -> str:
    lines = ["# Rules", "", "| Code | Name | Summary | Fix | Default |", "|---|---|---|---|---|"]
    for rule in rules:
        meta = rule.meta
        lines.append(
            f"| [{meta.code}]({meta.code}.md) | `{meta.name}` | {meta.message} | {'yes' if meta.fix_title else ''} | "
            f"{'on' if meta.default_enabled else 'off'} |"
        )
    return "\n".join(lines) + "\n"


def expected_pages(rules: tuple[Rule, ...] = ALL_RULES) -> dict[str, str]:
    pages = {f"{rule.code}.md": render(rule) for rule in rules}
    pages["README.md"] = render_index(rules)
    return pages


def write(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in expected_pages().items():
        path = folder / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/rules")
    for path in write(target):
        print(f"wrote {path}")
