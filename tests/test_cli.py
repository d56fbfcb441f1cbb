"""`torch-preflight check / rule / rules / estimate / server`, in process and as a subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from cli_helpers import BAD, BAD_EXPECTED, CLEAN, RULES, VENV_BIN, make_project, run_cli

import torch_preflight
from torch_preflight import __version__


@pytest.fixture(autouse=True)
def _isolated_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("TORCH_PREFLIGHT_CACHE_DIR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)


def found(json_out: str) -> list[tuple[str, int, int]]:
    return [(i["code"], i["location"]["row"], i["location"]["column"]) for i in json.loads(json_out)]


# -- exit codes ------------------------------------------------------------------------------


def test_clean_project_exits_0(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": CLEAN})
    result = run_cli(["check"], monkeypatch, capsys, cwd=project)
    assert result.code == 0, result.err
    assert "All checks passed!" in result.out


def test_findings_exit_1_and_exit_zero(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": BAD, "ok.py": CLEAN})
    result = run_cli(["check", "--format", "json"], monkeypatch, capsys, cwd=project)
    assert result.code == 1
    assert found(result.out) == BAD_EXPECTED
    assert run_cli(["check", "--exit-zero"], monkeypatch, capsys, cwd=project).code == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["check", "--format", "xml"], "invalid choice"),
        (["check", "--select", "TPF999"], "TPF999"),
        (["check", "--ignore", "NOPE1"], "NOPE1"),
        (["check", "-j", "0"], "positive integer"),
        (["frobnicate"], "invalid choice"),
        (["rule", "TPF999"], "unknown rule"),
    ],
)
def test_usage_errors_exit_2(tmp_path, monkeypatch, capsys, args, needle):
    project = make_project(tmp_path / "p", {"train.py": BAD})
    result = run_cli(args, monkeypatch, capsys, cwd=project)
    assert result.code == 2
    assert needle in result.err


def test_no_command_prints_help_and_exits_2(tmp_path, monkeypatch, capsys):
    result = run_cli([], monkeypatch, capsys, cwd=tmp_path)
    assert result.code == 2
    assert "check" in result.err and "usage" in result.err


def test_unknown_config_key_names_the_key(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": BAD}, config='selectt = ["TPF001"]')
    result = run_cli(["check"], monkeypatch, capsys, cwd=project)
    assert result.code == 2
    assert "selectt" in result.err
    assert result.out == ""


def test_unknown_code_in_config_names_the_key_and_file(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": BAD}, config='ignore = ["TPF404"]')
    result = run_cli(["check"], monkeypatch, capsys, cwd=project)
    assert result.code == 2
    assert "TPF404" in result.err and "ignore" in result.err and "pyproject.toml" in result.err


def test_version(tmp_path, monkeypatch, capsys):
    result = run_cli(["--version"], monkeypatch, capsys, cwd=tmp_path)
    assert result.code == 0
    assert result.out.strip() == f"torch-preflight {__version__}"


# -- selection and configuration ---------------------------------------------------------------


def test_cli_select_overrides_config(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": BAD}, config='select = ["TPF005"]')
    only_config = run_cli(["check", "--format", "json"], monkeypatch, capsys, cwd=project)
    assert [c for c, *_ in found(only_config.out)] == ["TPF005"]
    overridden = run_cli(["check", "--format", "json", "--select", "TPF001,TPF007"], monkeypatch, capsys, cwd=project)
    assert [c for c, *_ in found(overridden.out)] == ["TPF001", "TPF007"]
    ignored = run_cli(["check", "--format", "json", "--ignore", "TPF001", "--ignore", "TPF007"], monkeypatch, capsys, cwd=project)
    assert [c for c, *_ in found(ignored.out)] == ["TPF005"]
    extended = run_cli(["check", "--format", "json", "--extend-select", "TPF007"], monkeypatch, capsys, cwd=project)
    assert [c for c, *_ in found(extended.out)] == ["TPF005", "TPF007"]


def test_per_file_ignores_from_config(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"a.py": BAD, "b.py": BAD}, config='[tool.torch-preflight.per-file-ignores]\n"b.py" = ["TPF0"]')
    result = run_cli(["check", "--format", "concise"], monkeypatch, capsys, cwd=project)
    assert result.code == 1
    assert "a.py:16:1: TPF001" in result.out
    assert "b.py" not in result.out


def test_explicit_config_file(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": BAD}, config=None)
    other = tmp_path / "elsewhere" / "pyproject.toml"
    other.parent.mkdir()
    other.write_text('[tool.torch-preflight]\nselect = ["TPF007"]\n', encoding="utf-8")
    result = run_cli(["check", "--format", "json", "--config", str(other)], monkeypatch, capsys, cwd=project)
    assert [c for c, *_ in found(result.out)] == ["TPF007"]
    missing = run_cli(["check", "--config", str(tmp_path / "nope.toml")], monkeypatch, capsys, cwd=project)
    assert missing.code == 2 and "nope.toml" in missing.err


def test_config_comes_from_the_nearest_pyproject_of_the_path(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": BAD}, config='select = ["TPF005"]')
    result = run_cli(["check", "--format", "json", str(project)], monkeypatch, capsys, cwd=tmp_path)
    assert [c for c, *_ in found(result.out)] == ["TPF005"]


# -- discovery ---------------------------------------------------------------------------------


def test_discovery_skips_venv_build_hidden_and_configured_excludes(tmp_path, monkeypatch, capsys):
    files = {
        "src/train.py": BAD,
        ".venv/lib/site.py": BAD,
        "build/lib/train.py": BAD,
        ".hidden/train.py": BAD,
        "node_modules/x.py": BAD,
        "generated/train.py": BAD,
        "legacy/old/train.py": BAD,
        "notes.txt": BAD,
    }
    project = make_project(tmp_path / "p", files, config='extend-exclude = ["generated", "legacy/old"]')
    scanned: list[str] = []
    real_scandir = os.scandir

    def recording_scandir(path):
        scanned.append(Path(path).name)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", recording_scandir)
    result = run_cli(["check", "--format", "concise", "--no-cache"], monkeypatch, capsys, cwd=project)
    assert result.code == 1
    paths = {line.split(":")[0] for line in result.out.splitlines() if ":" in line and "TPF" in line}
    assert paths == {os.path.join("src", "train.py")}
    # excluded folders are never opened, let alone their contents
    for folder in (".venv", "build", ".hidden", "node_modules", "generated", "old"):
        assert folder not in scanned
    assert "legacy" in scanned  # only its excluded child is pruned


def test_exclude_replaces_the_defaults(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"build/train.py": BAD, "skip/train.py": BAD}, config='exclude = ["skip"]')
    result = run_cli(["check", "--format", "concise"], monkeypatch, capsys, cwd=project)
    assert os.path.join("build", "train.py") in result.out
    assert "skip" not in result.out


def test_explicit_file_is_checked_even_when_excluded_or_not_py(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"build/train.py": BAD, "script": BAD})
    result = run_cli(["check", "--format", "concise", "build/train.py", "script"], monkeypatch, capsys, cwd=project)
    assert result.code == 1
    assert os.path.join("build", "train.py") + ":16:1: TPF001" in result.out
    assert "script:16:1: TPF001" in result.out


def test_missing_path_is_reported_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": CLEAN})
    result = run_cli(["check", "train.py", "nope.py"], monkeypatch, capsys, cwd=project)
    assert result.code == 1
    assert "nope.py" in result.err and "no such file" in result.err
    assert "All checks passed!" in result.out


# -- unreadable files ----------------------------------------------------------------------------


def test_binary_and_non_utf8_files_are_reported_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    files = {
        "bad.py": BAD,
        "binary.py": b"\x00\x01\x02PK\x03\x04" * 10,
        "latin.py": "x = 'caf\xe9'\n".encode("latin-1"),
        "declared.py": b"# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n" + BAD.encode(),
    }
    project = make_project(tmp_path / "p", files)
    result = run_cli(["check", "--format", "json"], monkeypatch, capsys, cwd=project)
    assert result.code == 1
    assert re.search(r"binary\.py: binary file", result.err)
    assert re.search(r"latin\.py: not valid UTF-8: byte 0xe9", result.err)
    items = json.loads(result.out)
    by_file = {(Path(i["filename"]).name, i["code"]) for i in items}
    # the rest of the run: bad.py, and declared.py whose PEP 263 cookie makes it readable
    assert {("bad.py", "TPF001"), ("declared.py", "TPF001")} <= by_file
    assert not any(name in ("binary.py", "latin.py") for name, _ in by_file)


def test_permission_denied_is_reported(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"locked.py": BAD, "bad.py": BAD})
    real = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.name == "locked.py":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    result = run_cli(["check", "--format", "concise", "--no-cache"], monkeypatch, capsys, cwd=project)
    assert result.code == 1
    assert "locked.py: permission denied" in result.err
    assert "bad.py:16:1: TPF001" in result.out


def test_large_files_are_skipped_with_a_note(tmp_path, monkeypatch, capsys):
    import torch_preflight.files as files

    monkeypatch.setattr(files, "MAX_FILE_SIZE", 100)
    project = make_project(tmp_path / "p", {"big.py": BAD, "small.py": "x = 1\n"})
    result = run_cli(["check", "--format", "concise"], monkeypatch, capsys, cwd=project)
    assert result.code == 0
    assert "note: big.py: skipped" in result.err
    assert "TPF" not in result.out


def test_syntax_errors_are_shown_and_the_rest_is_analysed(tmp_path, monkeypatch, capsys):
    broken = BAD + "\ndef broken(:\n    pass\n"
    project = make_project(tmp_path / "p", {"train.py": broken})
    concise = run_cli(["check", "--format", "concise"], monkeypatch, capsys, cwd=project)
    assert concise.code == 1
    assert re.search(r"^train\.py:27:\d+: SyntaxError: ", concise.out, flags=re.M)
    assert "train.py:16:1: TPF001" in concise.out
    items = json.loads(run_cli(["check", "--format", "json"], monkeypatch, capsys, cwd=project).out)
    syntax = [i for i in items if i["code"] is None]
    assert len(syntax) == 1 and syntax[0]["message"].startswith("SyntaxError")
    assert {i["code"] for i in items} >= {"TPF001", "TPF005", "TPF007"}


# -- output formats --------------------------------------------------------------------------


def test_text_format_shows_a_code_frame_without_colour_when_piped(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": BAD})
    result = run_cli(["check"], monkeypatch, capsys, cwd=project)
    assert "\x1b[" not in result.out
    assert "train.py:21:5: TPF005 [*] `total` accumulates `loss`" in result.out
    assert "21 |     total += loss\n   |     ^^^^^^^^^^^^^ TPF005" in result.out
    assert "= help: Accumulate `loss.item()` instead (safe fix)" in result.out
    assert "(unsafe fix)" in result.out
    assert result.out.rstrip().endswith("Found 3 errors (2 fixable with --fix; 1 more with --unsafe-fixes).")
    no_source = run_cli(["check", "--no-show-source"], monkeypatch, capsys, cwd=project)
    assert "^^^" not in no_source.out and "TPF005" in no_source.out


def test_concise_format(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": BAD})
    result = run_cli(["check", "--format", "concise"], monkeypatch, capsys, cwd=project)
    lines = result.out.splitlines()
    assert lines[:3] == [
        "train.py:16:1: TPF001 Training loop steps `opt` but never clears gradients, so they accumulate across iterations",
        "train.py:21:5: TPF005 [*] `total` accumulates `loss` with its autograd graph; every iteration's graph stays in memory",
        "train.py:24:1: TPF007 [*] Loop runs `model` forward without `torch.no_grad()`; autograd records a graph it never uses",
    ]


def test_github_format(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"src/train.py": BAD})
    result = run_cli(["check", "--format", "github"], monkeypatch, capsys, cwd=project)
    lines = result.out.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("::error file=src/train.py,line=16,col=1,endLine=16,endColumn=19,title=TPF001::Training loop")
    assert lines[2].startswith("::warning file=src/train.py,line=24,col=1,")


def test_output_file(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": BAD})
    result = run_cli(["check", "--format", "sarif", "-o", "out.sarif"], monkeypatch, capsys, cwd=project)
    assert result.code == 1 and result.out == ""
    log = json.loads((project / "out.sarif").read_text(encoding="utf-8"))
    assert [r["ruleId"] for r in log["runs"][0]["results"]] == ["TPF001", "TPF005", "TPF007"]


def test_statistics(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"a.py": BAD, "b.py": BAD})
    result = run_cli(["check", "--statistics"], monkeypatch, capsys, cwd=project)
    assert result.code == 1
    assert result.out.splitlines() == ["2\tTPF001\t    missing-zero-grad", "2\tTPF005\t[*] loss-accumulated-with-graph", "2\tTPF007\t[*] eval-loop-without-no-grad"]
    as_json = json.loads(run_cli(["check", "--statistics", "--format", "json"], monkeypatch, capsys, cwd=project).out)
    assert as_json[0] == {"code": "TPF001", "name": "missing-zero-grad", "count": 2, "fixable": False}


# -- fixes ---------------------------------------------------------------------------------------


def test_fix_applies_safe_fixes_only(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": BAD})
    result = run_cli(["check", "--fix", "--format", "concise"], monkeypatch, capsys, cwd=project)
    fixed = (project / "train.py").read_text(encoding="utf-8")
    assert "total += loss.item()" in fixed
    assert "with torch.no_grad():\n    for x, y in val_loader:\n        pred = model(x)\n" in fixed
    assert "zero_grad" not in fixed  # TPF001's fix is unsafe
    assert result.code == 1  # TPF001 remains
    assert "TPF001" in result.out and "TPF005" not in result.out and "TPF007" not in result.out
    assert "2 fixed, 1 remaining" in result.out
    compile(fixed, "train.py", "exec")


def test_unsafe_fixes_apply_the_rest(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": BAD})
    result = run_cli(["check", "--fix", "--unsafe-fixes"], monkeypatch, capsys, cwd=project)
    fixed = (project / "train.py").read_text(encoding="utf-8")
    assert "for x, y in loader:\n    opt.zero_grad()\n    out = model(x)" in fixed
    assert result.code == 0
    assert "Fixed 3 errors" in result.out
    assert run_cli(["check", "--no-cache"], monkeypatch, capsys, cwd=project).code == 0


def test_fix_keeps_crlf_and_bom(tmp_path, monkeypatch, capsys):
    data = b"\xef\xbb\xbf" + BAD.replace("\n", "\r\n").encode()
    project = make_project(tmp_path / "p", {"train.py": data})
    run_cli(["check", "--fix"], monkeypatch, capsys, cwd=project)
    fixed = (project / "train.py").read_bytes()
    assert fixed.startswith(b"\xef\xbb\xbf")
    assert b"total += loss.item()\r\n" in fixed
    assert b"\n" not in fixed.replace(b"\r\n", b"")


def test_diff_prints_and_does_not_write(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": BAD})
    result = run_cli(["check", "--diff"], monkeypatch, capsys, cwd=project)
    assert result.code == 1
    assert (project / "train.py").read_text(encoding="utf-8") == BAD
    assert result.out.startswith("--- train.py\n+++ train.py\n@@")
    assert "-    total += loss\n+    total += loss.item()\n" in result.out
    assert "+with torch.no_grad():" in result.out
    assert "zero_grad" not in result.out
    assert "Would fix 2 errors." in result.err
    unsafe = run_cli(["check", "--diff", "--unsafe-fixes"], monkeypatch, capsys, cwd=project)
    assert "+    opt.zero_grad()" in unsafe.out


def test_diff_exits_0_when_nothing_to_fix(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"train.py": CLEAN})
    result = run_cli(["check", "--diff"], monkeypatch, capsys, cwd=project)
    assert result.code == 0 and result.out == ""


# -- stdin -----------------------------------------------------------------------------------------


def test_stdin_dash(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {})
    result = run_cli(["check", "-", "--format", "concise"], monkeypatch, capsys, cwd=project, stdin=BAD.encode())
    assert result.code == 1
    assert result.out.splitlines()[0].startswith("-:16:1: TPF001")


def test_stdin_filename_uses_name_and_config(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {}, config='select = ["TPF005"]')
    result = run_cli(["check", "--stdin-filename", "pkg/train.py", "--format", "json"], monkeypatch, capsys, cwd=project, stdin=BAD.encode())
    items = json.loads(result.out)
    assert [i["code"] for i in items] == ["TPF005"]
    assert items[0]["filename"] == "pkg/train.py" or items[0]["filename"].endswith(os.path.join("pkg", "train.py"))


def test_stdin_fix_prints_the_fixed_source(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {})
    result = run_cli(["check", "--stdin-filename", "t.py", "--fix"], monkeypatch, capsys, cwd=project, stdin=BAD.encode())
    assert "total += loss.item()" in result.out
    assert result.out.startswith("import torch\n")
    assert "t.py:16:1: TPF001" in result.err
    assert result.code == 1


def test_stdin_binary_is_reported(tmp_path, monkeypatch, capsys):
    result = run_cli(["check", "-"], monkeypatch, capsys, cwd=tmp_path, stdin=b"\x00\xff\x00")
    assert result.code == 1
    assert "binary" in result.err


# -- parallelism and cache -------------------------------------------------------------------------


def _many_files(n: int) -> dict[str, str]:
    files: dict[str, str] = {}
    for i in range(n):
        files[f"pkg/mod{i:02d}.py"] = BAD if i % 3 else CLEAN
    files["pkg/broken.py"] = BAD + "\nx = = 1\n"
    return files


def test_jobs_2_matches_jobs_1(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", _many_files(12))
    one = run_cli(["check", "--format", "json", "-j", "1", "--no-cache"], monkeypatch, capsys, cwd=project)
    two = run_cli(["check", "--format", "json", "-j", "2", "--no-cache"], monkeypatch, capsys, cwd=project)
    assert one.code == two.code == 1
    assert json.loads(one.out) == json.loads(two.out)
    assert len(json.loads(one.out)) == 8 * 3 + 4  # 8 BAD modules + broken.py (3 findings and a syntax error)


def test_process_pool_really_runs(tmp_path):
    """-j 2 goes through ProcessPoolExecutor and gives what the serial path gives."""
    from torch_preflight.core.config import Config

    from torch_preflight.runner import Work, execute

    work = [Work(i, f"m{i}.py", BAD if i % 2 else CLEAN, Config(select=RULES), False, False) for i in range(6)]
    serial = execute(work, 1)
    parallel = execute(work, 2)
    assert [o.diagnostics for o in serial] == [o.diagnostics for o in parallel]
    assert [len(o.diagnostics) for o in parallel] == [0, 3, 0, 3, 0, 3]


def test_cache_hit_gives_identical_output(tmp_path, monkeypatch, capsys):
    import torch_preflight.runner as runner

    project = make_project(tmp_path / "p", _many_files(4))
    first = run_cli(["check", "--format", "json"], monkeypatch, capsys, cwd=project)
    cache_files = list((project / ".torch-preflight-cache").rglob("*.json"))
    assert len(cache_files) == 1
    assert (project / ".torch-preflight-cache" / ".gitignore").read_text().strip().endswith("*")

    def no_analysis(*args, **kwargs):
        raise AssertionError("cache miss: the file was analysed again")

    monkeypatch.setattr(runner, "analyze", no_analysis)
    for fmt in ("json", "text", "sarif"):
        again = run_cli(["check", "--format", fmt], monkeypatch, capsys, cwd=project)
        assert again.err == ""
        if fmt == "json":
            assert again.out == first.out
            assert again.code == first.code


def test_cache_hit_text_matches_uncached_text(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", _many_files(3))
    uncached = run_cli(["check"], monkeypatch, capsys, cwd=project)
    cached_first = run_cli(["check"], monkeypatch, capsys, cwd=project)
    cached_second = run_cli(["check"], monkeypatch, capsys, cwd=project)
    assert uncached.out == cached_first.out == cached_second.out


def test_cache_is_invalidated_by_content_and_config(tmp_path, monkeypatch, capsys):
    import torch_preflight.runner as runner

    project = make_project(tmp_path / "p", {"a.py": BAD, "b.py": CLEAN})
    calls: list[str] = []
    real = runner.analyze

    def counting(text, path, config=None, **kw):
        calls.append(Path(path).name)
        return real(text, path, config, **kw)

    monkeypatch.setattr(runner, "analyze", counting)
    run_cli(["check"], monkeypatch, capsys, cwd=project)
    assert sorted(calls) == ["a.py", "b.py"]
    calls.clear()
    run_cli(["check"], monkeypatch, capsys, cwd=project)
    assert calls == []
    (project / "b.py").write_text(BAD, encoding="utf-8")
    changed = run_cli(["check", "--format", "concise"], monkeypatch, capsys, cwd=project)
    assert calls == ["b.py"]
    assert "b.py:16:1: TPF001" in changed.out
    calls.clear()
    (project / "pyproject.toml").write_text('[tool.torch-preflight]\nselect = ["TPF007"]\n', encoding="utf-8")
    narrowed = run_cli(["check", "--format", "concise"], monkeypatch, capsys, cwd=project)
    assert sorted(calls) == ["a.py", "b.py"]
    assert "TPF001" not in narrowed.out and "TPF007" in narrowed.out
    calls.clear()
    run_cli(["check", "--select", "TPF005"], monkeypatch, capsys, cwd=project)
    assert sorted(calls) == ["a.py", "b.py"]  # CLI overrides are part of the key too


def test_cache_is_invalidated_by_version(tmp_path, monkeypatch, capsys):
    import torch_preflight.cache as cache

    project = make_project(tmp_path / "p", {"a.py": BAD})
    run_cli(["check"], monkeypatch, capsys, cwd=project)
    monkeypatch.setattr(cache, "__version__", "99.0.0")
    entry = cache.Cache.open(cache.Config(root=project))
    assert entry.entries == {}
    assert "99.0.0" in str(entry.file)


def test_corrupt_cache_never_crashes(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"a.py": BAD})
    expected = run_cli(["check", "--format", "json"], monkeypatch, capsys, cwd=project).out
    (cache_file,) = (project / ".torch-preflight-cache").rglob("*.json")
    for garbage in ("{not json", '{"format": 1, "files": []}', json.dumps({"format": 1, "version": __version__, "fingerprint": cache_file.stem, "files": {str(project / "a.py"): ["x", [{"c": 1}], "y"]}})):
        cache_file.write_text(garbage, encoding="utf-8")
        result = run_cli(["check", "--format", "json"], monkeypatch, capsys, cwd=project)
        assert result.out == expected and result.code == 1
    # an entry whose hash matches but whose payload is damaged is a miss, not a crash
    data = json.loads(cache_file.read_text(encoding="utf-8"))
    key = str(project / "a.py")
    data["files"][key][1] = [{"c": "TPF001"}]
    cache_file.write_text(json.dumps(data), encoding="utf-8")
    result = run_cli(["check", "--format", "json"], monkeypatch, capsys, cwd=project)
    assert result.out == expected


def test_unwritable_cache_dir_is_ignored(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"a.py": BAD})
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder", encoding="utf-8")
    result = run_cli(["check", "--cache-dir", str(blocker / "sub"), "--format", "concise"], monkeypatch, capsys, cwd=project)
    assert result.code == 1 and "TPF001" in result.out and result.err == ""


def test_no_cache_writes_nothing(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"a.py": BAD})
    run_cli(["check", "--no-cache"], monkeypatch, capsys, cwd=project)
    assert not (project / ".torch-preflight-cache").exists()


# -- rule / rules ----------------------------------------------------------------------------------


def test_rule_prints_its_sections(tmp_path, monkeypatch, capsys):
    result = run_cli(["rule", "TPF001"], monkeypatch, capsys, cwd=tmp_path)
    assert result.code == 0
    for section in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety"):
        assert section in result.out
    assert "missing-zero-grad" in result.out
    by_name = run_cli(["rule", "missing-zero-grad"], monkeypatch, capsys, cwd=tmp_path)
    assert by_name.out == result.out


def test_rules_lists_every_rule(tmp_path, monkeypatch, capsys):
    from torch_preflight.rules.registry import ALL_RULES

    table = run_cli(["rules"], monkeypatch, capsys, cwd=tmp_path)
    assert table.code == 0
    for rule in ALL_RULES:
        assert rule.code in table.out and rule.meta.name in table.out
    rows = json.loads(run_cli(["rules", "--format", "json"], monkeypatch, capsys, cwd=tmp_path).out)
    assert [r["code"] for r in rows] == [r.code for r in ALL_RULES]
    assert set(rows[0]) == {"code", "name", "summary", "fix", "severity", "status", "default", "url"}


# -- estimate and server dispatch ---------------------------------------------------------------


def test_estimate_without_the_estimator_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch_preflight.estimate_command", None)  # import fails as if absent
    result = run_cli(["estimate", "train.py"], monkeypatch, capsys, cwd=tmp_path)
    assert result.code == 2
    assert "estimator not available" in result.err


def test_estimate_delegates_to_estimate_command(tmp_path, monkeypatch, capsys):
    fake = types.ModuleType("torch_preflight.estimate_command")
    seen = {}

    def add_arguments(parser):
        parser.add_argument("files", nargs="+")
        parser.add_argument("--gpu-memory")

    def run(args):
        seen["files"], seen["gpu"] = args.files, args.gpu_memory
        return 7

    fake.add_arguments, fake.run = add_arguments, run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch_preflight.estimate_command", fake)
    monkeypatch.setattr(torch_preflight, "estimate_command", fake, raising=False)  # `import a.b as m` reads the attribute
    result = run_cli(["estimate", "a.py", "b.py", "--gpu-memory", "24GiB"], monkeypatch, capsys, cwd=tmp_path)
    assert result.code == 7
    assert seen == {"files": ["a.py", "b.py"], "gpu": "24GiB"}


def test_server_is_dispatched_to_the_server_main(tmp_path, monkeypatch, capsys):
    fake = types.ModuleType("torch_preflight.server.cli")
    fake.main = lambda argv: 5 if argv == ["--tcp", "127.0.0.1:1"] else 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch_preflight.server.cli", fake)
    assert run_cli(["server", "--tcp", "127.0.0.1:1"], monkeypatch, capsys, cwd=tmp_path).code == 5


def test_server_missing_is_a_clear_error(tmp_path, monkeypatch, capsys):
    import torch_preflight.main as entry

    monkeypatch.setattr(entry, "SERVER_MODULES", ("torch_preflight.server.does_not_exist",))
    result = run_cli(["server"], monkeypatch, capsys, cwd=tmp_path)
    assert result.code == 2
    assert "language server is not available" in result.err


# -- as a subprocess -----------------------------------------------------------------------------


def _subprocess(cmd: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cwd / ".xdg")}
    env.pop("FORCE_COLOR", None)
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, env=env, **kw)


@pytest.mark.parametrize("launcher", ["script", "module"])
def test_subprocess_entry_points(tmp_path, launcher):
    script = VENV_BIN / "torch-preflight"
    if launcher == "script" and not script.exists():
        pytest.skip("console script not installed in this environment")
    base = [str(script)] if launcher == "script" else [sys.executable, "-m", "torch_preflight"]
    project = make_project(tmp_path / "p", {"train.py": BAD, "ok.py": CLEAN})
    bad = _subprocess([*base, "check", "--format", "json"], project)
    assert bad.returncode == 1, bad.stderr
    assert found(bad.stdout) == BAD_EXPECTED
    clean = _subprocess([*base, "check", "ok.py"], project)
    assert clean.returncode == 0 and "All checks passed!" in clean.stdout
    usage = _subprocess([*base, "check", "--select", "TPF999"], project)
    assert usage.returncode == 2 and "TPF999" in usage.stderr
    stdin = _subprocess([*base, "check", "-", "--format", "concise"], project, input=BAD)
    assert stdin.returncode == 1 and "-:21:5: TPF005" in stdin.stdout
    version = _subprocess([*base, "--version"], project)
    assert version.returncode == 0 and __version__ in version.stdout


TORCH_BLOCKER = """
import sys

class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"torch-preflight must not import {name}")
        return None

sys.meta_path.insert(0, _NoTorch())
"""


def test_check_works_without_ever_importing_torch(tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(TORCH_BLOCKER, encoding="utf-8")
    project = make_project(tmp_path / "p", {"train.py": BAD})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    probe = subprocess.run([sys.executable, "-c", "import torch"], cwd=project, capture_output=True, text=True, env=env, timeout=60)
    assert probe.returncode != 0 and "must not import torch" in probe.stderr  # the hook is active
    for fmt in ("json", "text", "sarif"):
        result = subprocess.run(
            [sys.executable, "-m", "torch_preflight", "check", "--format", fmt, "-j", "2", "--no-cache"],
            cwd=project, capture_output=True, text=True, env=env, timeout=120,
        )
        assert result.returncode == 1, result.stderr
        assert "must not import" not in result.stderr
        if fmt == "json":
            assert found(result.stdout) == BAD_EXPECTED
    rules = subprocess.run([sys.executable, "-m", "torch_preflight", "rule", "TPF007"], cwd=project, capture_output=True, text=True, env=env, timeout=60)
    assert rules.returncode == 0 and "## What it does" in rules.stdout


def test_stale_caches_of_other_configs_are_pruned(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path / "p", {"a.py": BAD})
    run_cli(["check"], monkeypatch, capsys, cwd=project)
    (current,) = (project / ".torch-preflight-cache").rglob("*.json")
    old = current.with_name("0" * 32 + ".json")
    recent = current.with_name("1" * 32 + ".json")
    old.write_text("{}", encoding="utf-8")
    recent.write_text("{}", encoding="utf-8")
    os.utime(old, (0, 0))
    (project / "a.py").write_text(CLEAN, encoding="utf-8")  # a change, so the cache is saved again
    run_cli(["check"], monkeypatch, capsys, cwd=project)
    assert not old.exists()
    assert recent.exists() and current.exists()
