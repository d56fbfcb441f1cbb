"""`torch_preflight.main.run`: after `check` the process leaves with `os._exit` once its output is flushed
(no interpreter teardown); every other command, and an output that cannot be flushed, exits normally."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torch_preflight import main as entry

ROOT = Path(__file__).parent.parent
BAD = ROOT / "tests" / "fixtures" / "TPF501" / "layers.py"


def _run(monkeypatch: pytest.MonkeyPatch, argv: list[str], code: int) -> tuple[str, int | None]:
    """(how `run` left, the code it left with), with `main` answering `code`."""
    left: list[tuple[str, int | None]] = []

    def fast(status: int) -> None:
        left.append(("os._exit", status))
        raise SystemExit(status)

    monkeypatch.setattr(entry, "main", lambda: code)
    monkeypatch.setattr(entry.os, "_exit", fast)
    monkeypatch.setattr(sys, "argv", ["torch-preflight", *argv])
    with pytest.raises(SystemExit) as raised:
        entry.run()
    return left[0] if left else ("SystemExit", raised.value.code)  # type: ignore[return-value]


def test_check_leaves_at_once_with_its_code(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run(monkeypatch, ["check", "x.py"], 1) == ("os._exit", 1)
    assert _run(monkeypatch, ["check", "x.py"], 0) == ("os._exit", 0)


@pytest.mark.parametrize("argv", [["server"], ["estimate", "x.py"], ["measure", "x.py"], ["--version"], []])
def test_other_commands_exit_normally(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    assert _run(monkeypatch, argv, 2) == ("SystemExit", 2)


def test_an_output_that_cannot_be_flushed_exits_normally(monkeypatch: pytest.MonkeyPatch) -> None:
    class Closed:
        def flush(self) -> None:
            raise BrokenPipeError

    monkeypatch.setattr(sys, "stdout", Closed())
    assert _run(monkeypatch, ["check", "x.py"], 1) == ("SystemExit", 1)


@pytest.mark.parametrize("output", ["stdout", "file"])
def test_the_whole_output_is_written_before_leaving(tmp_path: Path, output: str) -> None:
    """Through a pipe and to `-o`, as the module and the console script run it: every finding, the exit code."""
    in_process = subprocess.run([sys.executable, "-c", "import sys; from torch_preflight.main import main; "
                                 f"sys.exit(main(['check', '--format', 'json', '--select', 'ALL', '--no-cache', {str(BAD)!r}]))"],
                                capture_output=True, text=True, timeout=120)
    command = [sys.executable, "-m", "torch_preflight", "check", "--format", "json", "--select", "ALL", "--no-cache", str(BAD)]
    target = tmp_path / "out.json"
    done = subprocess.run([*command, "-o", str(target)] if output == "file" else command, capture_output=True, text=True, timeout=120)
    written = target.read_text() if output == "file" else done.stdout
    assert done.returncode == in_process.returncode == 1
    assert written == in_process.stdout and written.count('"code": "TPF501"') >= 6
