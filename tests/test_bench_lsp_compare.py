"""bench/lsp/compare.py: targets met per run, from the raw JSON of `bench_lsp.py --real --in-process`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("lsp_compare", Path(__file__).resolve().parents[1] / "bench" / "lsp" / "compare.py")
assert _SPEC is not None and _SPEC.loader is not None
compare = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(compare)


def _run(path: Path, rows: dict[str, tuple[int, list[float], list[float], float]]) -> Path:
    path.write_text(json.dumps({"rows": [
        {"file": name, "lines": lines, "ours": {"cpu": {"valid": valid, "broken": broken}, "hints_first_cpu": hints}}
        for name, (lines, valid, broken, hints) in rows.items()
    ]}))
    return path


def test_a_file_meets_a_target_by_its_p95_and_files_over_the_line_limit_are_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quick = [0.010] * 19 + [0.2]  # one slow keystroke of 20: the nearest-rank p95 is the 19th, 10 ms
    before = _run(tmp_path / "before.json", {
        "a.py": (400, quick, [0.02] * 20, 0.005),
        "b.py": (900, [0.06] * 20, [0.02] * 20, 0.150),  # valid p95 60 ms, hints at open 150 ms
        "huge.py": (9000, [0.5] * 20, [0.5] * 20, 0.001),  # over --max-lines
    })
    after = _run(tmp_path / "after.json", {
        "a.py": (400, quick, [0.02] * 20, 0.005),
        "b.py": (900, [0.03] * 20, [0.13] * 20, 0.050),  # half-typed p95 130 ms now
        "huge.py": (9000, [0.5] * 20, [0.5] * 20, 0.001),
    })
    assert compare.main([str(before), str(after), "--worst", "1"]) == 0
    out = capsys.readouterr().out
    assert "2 files up to 3,500 lines measured by every run (3 in all)" in out
    assert "| before.json | 1 | 1 | 2 | 60.0 / 20.0 ms | 1 |" in out
    assert "| after.json | 1 | 2 | 1 | 30.0 / 130.0 ms | 0 |" in out
    assert "b.py (900 lines): 60.0 / 20.0   30.0 / 130.0" in out and "a.py (" not in out
    assert "b.py: 1.20 → 1.30" in out  # the larger share of its target in the first and the last run
