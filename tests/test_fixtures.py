"""Every fixture under tests/fixtures/<CODE>/ is checked with all rules selected: the
findings must equal the inline `# error:` expectations, line for line."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import FIXTURES
from expectations import expected, render
from torch_preflight.core.config import Config, config_from_table

from torch_preflight.analyze import analyze

_CONFIG_HEADER = re.compile(r"^#\s*torch-preflight-test-config:\s*(?P<pairs>.+)$", re.M)


def fixture_config(text: str) -> Config:
    """All rules, plus `# torch-preflight-test-config: gpu-memory=1GiB, batch-size=8` settings from the fixture."""
    table: dict[str, object] = {"select": ["ALL"]}
    for match in _CONFIG_HEADER.finditer(text):
        for pair in match.group("pairs").split(","):
            key, _, value = pair.partition("=")
            key, value = key.strip(), value.strip()
            table[key] = int(value) if value.isdigit() else value
    return config_from_table(table, source="fixture header")


CASES = sorted(p for p in FIXTURES.rglob("*.py"))


@pytest.mark.parametrize("path", CASES, ids=[str(p.relative_to(FIXTURES)) for p in CASES])
def test_fixture(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    result = analyze(text, str(path), fixture_config(text))
    actual = Counter((d.span.start.line + 1, d.code) for d in result.diagnostics)
    want = expected(text)
    if actual != want:
        lines = text.splitlines()
        missing = render(want - actual, lines)
        extra = render(actual - want, lines)
        messages = {(d.span.start.line + 1, d.code): d.message for d in result.diagnostics}
        detail = "\n".join(
            ["missing (expected, not reported):", *missing, "unexpected (reported, not expected):", *extra]
            + [f"  {line}: {code}: {messages[(line, code)]}" for (line, code) in sorted(actual - want)]
        )
        pytest.fail(f"{path.relative_to(FIXTURES)}\n{detail}")


def test_every_rule_has_fixtures() -> None:
    from torch_preflight.rules.registry import ALL_RULES

    for rule in ALL_RULES:
        folder = FIXTURES / rule.code
        assert folder.is_dir() and any(folder.glob("*.py")), f"{rule.code} has no fixtures in {folder}"
        codes = {code for p in folder.glob("*.py") for (_, code) in expected(p.read_text(encoding="utf-8"))}
        assert rule.code in codes, f"{rule.code}'s fixtures expect no finding of it"
