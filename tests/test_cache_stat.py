"""The warm path of the result cache: a file whose stat is unchanged since a clean run is not even
read; a changed stat falls back to the content hash; a fully cached run imports no analysis module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import BAD, CLEAN, make_project, run_cli

import torch_preflight.cache as cache
import torch_preflight.runner as runner

# CLEAN with `.item()` dropped and padded to the same length: a TPF005 finding, not one byte more or less.
SAME_SIZE_BAD = CLEAN.replace("total += loss.item()", "total += loss       ")
assert len(SAME_SIZE_BAD) == len(CLEAN) and SAME_SIZE_BAD != CLEAN


@pytest.fixture(autouse=True)
def _isolated_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("TORCH_PREFLIGHT_CACHE_DIR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trust the stat of files written a moment ago (by default only files older than 2 s are)."""
    monkeypatch.setattr(cache, "SETTLE_NS", 0)
    time.sleep(0.02)  # past the file system's timestamp tick


class Spy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[str] = []
        self.analysed: list[str] = []
        real_read, real_analyze = runner.read_source, runner.analyze

        def read(path: Path, *args: object, **kwargs: object) -> object:
            self.reads.append(Path(path).name)
            return real_read(path, *args, **kwargs)  # type: ignore[arg-type]

        def analyze(text: str, path: str, config: object = None, **kwargs: object) -> object:
            self.analysed.append(Path(path).name)
            return real_analyze(text, path, config, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(runner, "read_source", read)
        monkeypatch.setattr(runner, "analyze", analyze)

    def clear(self) -> None:
        self.reads.clear()
        self.analysed.clear()


def _entry(project: Path, name: str) -> list:
    (cache_file,) = (project / ".torch-preflight-cache").rglob("*.json")
    return json.loads(cache_file.read_text(encoding="utf-8"))["files"][str(project / name)]


def test_unchanged_clean_file_is_not_read(tmp_path, monkeypatch, capsys, settled):
    project = make_project(tmp_path / "p", {"a.py": CLEAN, "b.py": BAD})
    spy = Spy(monkeypatch)
    first = run_cli(["check", "--format", "json"], monkeypatch, capsys, cwd=project)
    assert sorted(spy.reads) == sorted(spy.analysed) == ["a.py", "b.py"]
    spy.clear()
    for fmt in ("json", "text"):
        again = run_cli(["check", "--format", fmt], monkeypatch, capsys, cwd=project)
        if fmt == "json":
            assert again.out == first.out and again.code == first.code == 1
        else:
            assert "b.py:16:1" in again.out  # the code frame of a cached finding still shows its source
    assert spy.analysed == []
    assert spy.reads == ["b.py", "b.py"]  # b.py has findings: read for its source (and hashed); a.py never


def test_same_size_edit_with_a_new_mtime_is_reanalysed(tmp_path, monkeypatch, capsys, settled):
    project = make_project(tmp_path / "p", {"a.py": CLEAN})
    spy = Spy(monkeypatch)
    assert run_cli(["check", "--select", "TPF005"], monkeypatch, capsys, cwd=project).code == 0
    path = project / "a.py"
    before = path.stat()
    path.write_text(SAME_SIZE_BAD, encoding="utf-8")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 5_000_000_000))
    time.sleep(0.02)
    spy.clear()
    result = run_cli(["check", "--select", "TPF005", "--format", "concise"], monkeypatch, capsys, cwd=project)
    assert spy.analysed == ["a.py"]
    assert result.code == 1 and "a.py:13:5: TPF005" in result.out


def test_edit_that_keeps_size_and_restores_mtime_is_reanalysed(tmp_path, monkeypatch, capsys, settled):
    """The decision for the one case a (size, mtime) key cannot see: the ctime is part of the key, and
    no write (nor `os.utime`) can keep it, so the edit is found."""
    project = make_project(tmp_path / "p", {"a.py": CLEAN})
    spy = Spy(monkeypatch)
    assert run_cli(["check", "--select", "TPF005"], monkeypatch, capsys, cwd=project).code == 0
    path = project / "a.py"
    before = path.stat()
    time.sleep(0.02)
    path.write_text(SAME_SIZE_BAD, encoding="utf-8")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns
    time.sleep(0.02)
    spy.clear()
    result = run_cli(["check", "--select", "TPF005", "--format", "concise"], monkeypatch, capsys, cwd=project)
    assert spy.analysed == ["a.py"]
    assert result.code == 1 and "a.py:13:5: TPF005" in result.out


def test_touch_costs_one_hash_then_the_new_stat_is_trusted(tmp_path, monkeypatch, capsys, settled):
    project = make_project(tmp_path / "p", {"a.py": CLEAN})
    spy = Spy(monkeypatch)
    run_cli(["check"], monkeypatch, capsys, cwd=project)
    path = project / "a.py"
    stored = _entry(project, "a.py")[4]
    os.utime(path, ns=(time.time_ns(), time.time_ns()))  # same bytes, new mtime (and ctime)
    time.sleep(0.02)
    spy.clear()
    assert run_cli(["check"], monkeypatch, capsys, cwd=project).code == 0
    assert spy.reads == ["a.py"] and spy.analysed == []  # hashed, found unchanged
    st = path.stat()
    assert _entry(project, "a.py")[4] == [st.st_size, st.st_mtime_ns, st.st_ctime_ns] != stored
    spy.clear()
    assert run_cli(["check"], monkeypatch, capsys, cwd=project).code == 0
    assert spy.reads == [] and spy.analysed == []


def test_recently_modified_file_is_always_hashed(tmp_path, monkeypatch, capsys):
    """Without the `settled` fixture: a file written within SETTLE_NS of the read gets no stat in its
    entry (an edit in the same timestamp tick would not change it), so every run reads and hashes it."""
    project = make_project(tmp_path / "p", {"a.py": CLEAN})
    spy = Spy(monkeypatch)
    run_cli(["check"], monkeypatch, capsys, cwd=project)
    assert _entry(project, "a.py")[4] is None
    spy.clear()
    run_cli(["check"], monkeypatch, capsys, cwd=project)
    assert spy.reads == ["a.py"] and spy.analysed == []


def test_stat_key_refuses_recent_and_irregular_files(tmp_path):
    path = tmp_path / "a.py"
    path.write_text("x = 1\n", encoding="utf-8")
    st = path.stat()
    assert cache.stat_key(st, st.st_ctime_ns + cache.SETTLE_NS) is None
    assert cache.stat_key(st, max(st.st_mtime_ns, st.st_ctime_ns) + cache.SETTLE_NS + 1) == (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    assert cache.stat_key(tmp_path.stat(), time.time_ns() + 10 * cache.SETTLE_NS) is None


def test_stat_hit_of_a_file_that_became_unreadable_is_not_served(tmp_path, monkeypatch, capsys, settled):
    """chmod changes the ctime, so the stat no longer matches and the file is read (and fails)."""
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    project = make_project(tmp_path / "p", {"a.py": CLEAN})
    run_cli(["check"], monkeypatch, capsys, cwd=project)
    (project / "a.py").chmod(0)
    try:
        result = run_cli(["check"], monkeypatch, capsys, cwd=project)
    finally:
        (project / "a.py").chmod(0o644)
    assert result.code == 1 and "permission denied" in result.err


def test_warm_jobs_2_starts_no_pool(tmp_path, monkeypatch, capsys):
    import concurrent.futures

    project = make_project(tmp_path / "p", {f"m{i}.py": CLEAN for i in range(10)})
    assert run_cli(["check", "-j", "2"], monkeypatch, capsys, cwd=project).code == 0

    def no_pool(*args: object, **kwargs: object) -> None:
        raise AssertionError("a process pool was started on a fully cached run")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", no_pool)
    assert run_cli(["check", "-j", "2"], monkeypatch, capsys, cwd=project).code == 0


def test_fully_cached_run_imports_no_analysis_module(tmp_path):
    """`--select ALL` needs no rule to validate it (codes in a pyproject's `select` do import the registry,
    and `--format json` imports it for the rules' URLs), and the cache answers for both files."""
    project = make_project(tmp_path / "p", {"a.py": CLEAN, "b.py": BAD}, config="")
    probe = (
        "import sys\n"
        "from torch_preflight.main import main\n"
        "code = main(sys.argv[1:])\n"
        "heavy = ('torch_preflight.analyze', 'torch_preflight.rules.registry', 'torch_preflight.estimator',\n"
        "         'torch_preflight.core.semantic', 'parso', 'jedi', 'concurrent.futures.process')\n"
        "sys.stderr.write('LOADED ' + ' '.join(m for m in heavy if m in sys.modules) + '\\n')\n"
        "raise SystemExit(code)\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    args = [sys.executable, "-c", probe, "check", "--select", "ALL", "--format", "concise", "-j", "2", "a.py", "b.py"]
    first = subprocess.run(args, cwd=project, capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 1 and "concurrent.futures.process" in first.stderr  # the misses went to a pool
    second = subprocess.run(args, cwd=project, capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 1 and second.stdout == first.stdout
    assert "LOADED \n" in second.stderr, second.stderr


def test_explicit_files_get_their_folders_config(tmp_path, monkeypatch, capsys):
    """Files named on the command line: each gets its nearest pyproject.toml, looked up once per folder;
    a symlinked file gets the config of where it really lives."""
    project = make_project(tmp_path / "p", {"a.py": BAD, "sub/b.py": BAD}, config='select = ["TPF001"]')
    (project / "sub" / "pyproject.toml").write_text('[tool.torch-preflight]\nselect = ["TPF007"]\n', encoding="utf-8")
    (project / "link.py").symlink_to(project / "sub" / "b.py")
    result = run_cli(["check", "--no-cache", "--format", "concise", "a.py", "sub/b.py", "link.py"], monkeypatch, capsys, cwd=project)
    lines = sorted(line.split(" ")[0] + line.split(" ")[1] for line in result.out.splitlines() if ": TPF" in line)
    assert lines == ["a.py:16:1:TPF001", "link.py:24:1:TPF007", "sub/b.py:24:1:TPF007"]
