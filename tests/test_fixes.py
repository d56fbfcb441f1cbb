"""Fix fixtures: tests/fixes/<CODE>/<name>.in.py is fixed (unsafe fixes included) and must
equal <name>.out.py; the result parses, the diagnostic is gone, and fixing again changes
nothing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import FIXES
from torch_preflight.core.config import Config
from torch_preflight.core.diagnostics import apply_fixes

from torch_preflight.analyze import analyze

CASES = sorted(FIXES.rglob("*.in.py"))


def fix_all(text: str, code: str) -> str:
    config = Config(select=(code,))
    for _ in range(10):
        result = analyze(text, "fixture.py", config)
        fixes = [d.fix for d in result.diagnostics if d.fix and d.fix.applies(unsafe=True)]
        if not fixes:
            return text
        text, _ = apply_fixes(result.source, fixes)
    raise AssertionError("fixes did not converge")


@pytest.mark.parametrize("path", CASES, ids=[str(p.relative_to(FIXES)) for p in CASES])
def test_fix(path: Path) -> None:
    code = path.parent.name
    fixed = fix_all(path.read_text(encoding="utf-8"), code)
    expected_path = path.with_name(path.name.replace(".in.py", ".out.py"))
    assert fixed == expected_path.read_text(encoding="utf-8")
    ast.parse(fixed)
    assert not [d for d in analyze(fixed, "fixture.py", Config(select=(code,))).diagnostics if d.fix]
    assert fix_all(fixed, code) == fixed
