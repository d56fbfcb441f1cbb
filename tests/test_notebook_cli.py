"""`torch-preflight check` on Jupyter notebooks: discovery, every output format with cells,
--fix / --diff that touch only the fixed cells, malformed notebooks, stdin and the cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import BAD, make_project, run_cli
from test_reporters import sarif_schema, validate_sarif  # noqa: F401  (the fixture)

NOTEBOOKS = Path(__file__).parent / "notebooks"
SELECT = 'select = ["ALL"]'


@pytest.fixture(autouse=True)
def _isolated_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("TORCH_PREFLIGHT_CACHE_DIR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)


def project_with(tmp_path: Path, *names: str, extra: dict[str, str | bytes] | None = None) -> Path:
    project = make_project(tmp_path / "p", dict(extra or {}), config=SELECT)
    for name in names:
        shutil.copy(NOTEBOOKS / name, project / name)
    return project


TRAINING_FINDINGS = [
    "training.ipynb:cell 7:2:1: TPF001 ",
    "training.ipynb:cell 7:7:5: TPF005 [*] ",
    "training.ipynb:cell 8:2:1: TPF007 [*] ",
]


def test_directory_walk_includes_notebooks(tmp_path, monkeypatch, capsys):
    project = project_with(tmp_path, "training.ipynb", "leakage.ipynb", "good.ipynb", extra={"train.py": BAD})
    (project / ".ipynb_checkpoints").mkdir()
    shutil.copy(NOTEBOOKS / "training.ipynb", project / ".ipynb_checkpoints" / "training-checkpoint.ipynb")
    result = run_cli(["check", "--format", "concise", "--no-cache"], monkeypatch, capsys, cwd=project)
    assert result.code == 1, result.err
    lines = result.out.splitlines()
    for needle in TRAINING_FINDINGS:
        assert any(line.startswith(needle) for line in lines), (needle, result.out)
    assert any(line.startswith("leakage.ipynb:cell 3:5:12: TPF201 ") for line in lines)
    assert any(line.startswith("train.py:16:1: TPF001") for line in lines)
    assert "checkpoint" not in result.out and "good.ipynb" not in result.out


def test_explicit_notebook_path_and_text_frame_shows_the_cell(tmp_path, monkeypatch, capsys):
    project = project_with(tmp_path, "training.ipynb")
    result = run_cli(["check", "training.ipynb", "--no-cache"], monkeypatch, capsys, cwd=project)
    assert result.code == 1
    out = result.out
    assert "training.ipynb:cell 7:2:1: TPF001" in out
    # the frame numbers the lines of the cell, and shows the cell as written
    assert "2 | for x, y in loader:  # error: TPF001" in out
    assert "7 |     total += loss  # error: TPF005" in out
    assert "Found 3 errors" in out


def test_json_items_carry_the_cell_like_ruff(tmp_path, monkeypatch, capsys):
    project = project_with(tmp_path, "training.ipynb", extra={"train.py": BAD})
    result = run_cli(["check", "--format", "json", "--no-cache", "--select", "TPF001,TPF005,TPF007"], monkeypatch, capsys, cwd=project)
    items = json.loads(result.out)
    notebook = [(i["cell"], i["code"], i["location"]["row"], i["location"]["column"], i["noqa_row"]) for i in items if i["filename"].endswith(".ipynb")]
    assert notebook == [(7, "TPF001", 2, 1, 2), (7, "TPF005", 7, 5, 7), (8, "TPF007", 2, 1, 2)]
    assert all(i["cell"] is None for i in items if i["filename"].endswith(".py"))
    tpf005 = next(i for i in items if i["code"] == "TPF005" and i["cell"] == 7)
    assert tpf005["end_location"] == {"row": 7, "column": 18}
    edit = tpf005["fix"]["edits"][0]
    assert edit["cell"] == 7 and edit["location"]["row"] == 7


def test_sarif_region_is_inside_the_stored_notebook(tmp_path, monkeypatch, capsys, sarif_schema):  # noqa: F811
    project = project_with(tmp_path, "training.ipynb")
    result = run_cli(["check", "--format", "sarif", "--no-cache"], monkeypatch, capsys, cwd=project)
    log = json.loads(result.out)
    validate_sarif(log, sarif_schema)
    stored = (project / "training.ipynb").read_text(encoding="utf-8").split("\n")
    results = log["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["TPF001", "TPF005", "TPF007"]
    for r in results:
        loc = r["locations"][0]
        region = loc["physicalLocation"]["region"]
        assert loc["physicalLocation"]["artifactLocation"]["uri"] == "training.ipynb"
        line = stored[region["startLine"] - 1]
        assert line.lstrip().startswith('"')  # an element of the cell's "source" list
        cell = loc["properties"]["notebookCell"]
        assert cell in (7, 8) and loc["properties"]["cellRegion"]["startLine"] in (2, 7)
    first = results[0]["locations"][0]["physicalLocation"]["region"]
    line = stored[first["startLine"] - 1]
    assert line[first["startColumn"] - 1 : first["endColumn"] - 1] == "for x, y in loader"


def test_github_annotations_point_into_the_stored_notebook(tmp_path, monkeypatch, capsys):
    project = project_with(tmp_path, "training.ipynb")
    result = run_cli(["check", "--format", "github", "--no-cache"], monkeypatch, capsys, cwd=project)
    first = result.out.splitlines()[0]
    assert first.startswith("::error file=training.ipynb,line=")
    assert first.endswith("title=TPF001::cell 7:2:1: Training loop steps `solver` but never clears gradients, so they accumulate across iterations")
    line = int(first.split("line=")[1].split(",")[0])
    assert "for x, y in loader" in (project / "training.ipynb").read_text(encoding="utf-8").split("\n")[line - 1]


# -- every place a user reads names a cell and a line ------------------------------------------

EPOCH_LOOP = "(cell 4, line 1)"  # the epoch loop of epochs.ipynb, line 9 of its joined cells


@pytest.mark.parametrize("fmt", ["text", "concise", "json", "sarif", "github"])
def test_messages_name_cells_in_every_format(tmp_path, monkeypatch, capsys, fmt):
    project = project_with(tmp_path, "epochs.ipynb", "exercise.ipynb")
    result = run_cli(["check", "--format", fmt, "--no-cache"], monkeypatch, capsys, cwd=project)
    assert result.code == 1, result.err
    assert EPOCH_LOOP in result.out and "line 9" not in result.out
    if fmt in ("text", "concise"):
        assert "epochs.ipynb:cell 3:2:5: TPF009" in result.out
        # one syntax error per broken cell, each where the cell has it
        assert "exercise.ipynb:cell 2:3:16: SyntaxError" in result.out
        assert "exercise.ipynb:cell 3:2:28: SyntaxError" in result.out
    if fmt == "json":
        items = json.loads(result.out)
        assert sorted((i["cell"], i["code"]) for i in items if i["filename"].endswith("exercise.ipynb")) == [
            (2, None), (3, None), (4, "TPF001")]
    if fmt == "sarif":
        (tpf009,) = [r for r in json.loads(result.out)["runs"][0]["results"] if r["ruleId"] == "TPF009"]
        assert EPOCH_LOOP in tpf009["message"]["text"]
        # `eval()` and the epoch loop in cell 4, the start of the training function in cell 3
        assert sorted(r["properties"]["notebookCell"] for r in tpf009["relatedLocations"]) == [3, 4, 4]
    if fmt == "github":
        assert sum(line.startswith("::error file=exercise.ipynb") and "title=SyntaxError" in line for line in result.out.splitlines()) == 2


def test_fix_rewrites_only_the_fixed_cells(tmp_path, monkeypatch, capsys):
    project = project_with(tmp_path, "training.ipynb")
    before = (project / "training.ipynb").read_bytes()
    result = run_cli(["check", "--fix", "--no-cache", "--format", "concise"], monkeypatch, capsys, cwd=project)
    assert result.code == 1  # TPF001 stays: its fix is unsafe
    after = (project / "training.ipynb").read_bytes()
    assert after != before
    old, new = json.loads(before), json.loads(after)
    changed = [i for i, (a, b) in enumerate(zip(old["cells"], new["cells"], strict=True)) if a != b]
    assert changed == [6, 7]
    for a, b in zip(old["cells"], new["cells"], strict=True):
        assert {k: v for k, v in a.items() if k != "source"} == {k: v for k, v in b.items() if k != "source"}
    assert old["metadata"] == new["metadata"]
    assert list(new) == list(old)
    # bytes before cell 7's source and after cell 8's source are untouched
    text_before, text_after = before.decode(), after.decode()
    head = text_before.index('"source": [\n    "%%time')
    assert text_after[:head] == text_before[:head]
    marker = '    "    pred = model(x)"\n   ]'
    tail = text_before.index(marker) + len(marker)
    assert text_after.endswith(text_before[tail:])
    assert text_after.endswith("}\n")
    assert "training.ipynb:cell 7:2:1: TPF001" in result.out
    assert "TPF005" not in result.out and "TPF007" not in result.out
    assert "".join(new["cells"][7]["source"]) == "model.eval()\nwith torch.no_grad():\n    for x, y in val_loader:  # error: TPF007\n        pred = model(x)"
    again = run_cli(["check", "--no-cache", "--format", "json"], monkeypatch, capsys, cwd=project)
    assert [i["code"] for i in json.loads(again.out)] == ["TPF001"]


def test_unsafe_fix_inserts_into_the_loop_cell_after_the_cell_magic(tmp_path, monkeypatch, capsys):
    project = project_with(tmp_path, "training.ipynb")
    result = run_cli(["check", "--fix", "--unsafe-fixes", "--no-cache"], monkeypatch, capsys, cwd=project)
    assert result.code == 0, result.out
    cell = "".join(json.loads((project / "training.ipynb").read_text(encoding="utf-8"))["cells"][6]["source"])
    assert cell.startswith("%%time\nfor x, y in loader:  # error: TPF001\n    solver.zero_grad()\n    out = model(x)\n")


def test_diff_shows_cells_and_writes_nothing(tmp_path, monkeypatch, capsys):
    project = project_with(tmp_path, "training.ipynb")
    before = (project / "training.ipynb").read_bytes()
    result = run_cli(["check", "--diff", "--no-cache"], monkeypatch, capsys, cwd=project)
    assert result.code == 1
    assert (project / "training.ipynb").read_bytes() == before
    assert "--- training.ipynb:cell 7\n+++ training.ipynb:cell 7\n" in result.out
    assert "-    total += loss  # error: TPF005\n+    total += loss.item()  # error: TPF005\n" in result.out
    assert "--- training.ipynb:cell 8\n" in result.out
    assert "outputs" not in result.out and "image/png" not in result.out
    assert "Would fix 2 errors." in result.err


def test_malformed_notebook_is_a_per_file_error_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    project = project_with(
        tmp_path,
        "training.ipynb",
        extra={"broken.ipynb": '{"cells": [', "old.ipynb": '{"nbformat": 3, "worksheets": []}', "list.ipynb": "[]"},
    )
    result = run_cli(["check", "--format", "concise", "--no-cache"], monkeypatch, capsys, cwd=project)
    assert result.code == 1
    assert "error: cannot check broken.ipynb: not a Jupyter notebook: invalid JSON" in result.err
    assert "error: cannot check old.ipynb: unsupported notebook format: nbformat 3" in result.err
    assert "error: cannot check list.ipynb: not a Jupyter notebook: the top-level JSON value is a list" in result.err
    assert "Traceback" not in result.err
    assert "training.ipynb:cell 7:2:1: TPF001" in result.out
    sarif = run_cli(["check", "--format", "sarif", "--no-cache"], monkeypatch, capsys, cwd=project)
    notes = json.loads(sarif.out)["runs"][0]["invocations"][0]
    assert notes["executionSuccessful"] is True
    assert len(notes["toolExecutionNotifications"]) == 3


def test_non_python_notebook_is_skipped_with_a_note(tmp_path, monkeypatch, capsys):
    project = project_with(tmp_path, "r_kernel.ipynb", "good.ipynb")
    result = run_cli(["check", "--no-cache"], monkeypatch, capsys, cwd=project)
    assert result.code == 0, result.out
    assert "r_kernel.ipynb: skipped: not a Python notebook (kernel language `r`)" in result.err


def test_notebook_on_stdin(tmp_path, monkeypatch, capsys):
    project = project_with(tmp_path)
    data = (NOTEBOOKS / "leakage.ipynb").read_bytes()
    result = run_cli(["check", "--format", "concise", "--stdin-filename", "nb.ipynb"], monkeypatch, capsys, cwd=project, stdin=data)
    assert result.code == 1
    assert "nb.ipynb:cell 3:5:12: TPF201" in result.out
    fixed = run_cli(["check", "--fix", "--stdin-filename", "t.ipynb"], monkeypatch, capsys, cwd=project,
                    stdin=(NOTEBOOKS / "training.ipynb").read_bytes())
    assert json.loads(fixed.out)["cells"][7]["outputs"] == json.loads((NOTEBOOKS / "training.ipynb").read_bytes())["cells"][7]["outputs"]
    assert "loss.item()" in fixed.out


def test_cache_serves_notebooks(tmp_path, monkeypatch, capsys):
    import torch_preflight.runner as runner

    project = project_with(tmp_path, "training.ipynb", "leakage.ipynb")
    first = run_cli(["check", "--format", "json"], monkeypatch, capsys, cwd=project)
    first_text = run_cli(["check"], monkeypatch, capsys, cwd=project)

    def no_analysis(*args, **kwargs):
        raise AssertionError("cache miss: the notebook was analysed again")

    with monkeypatch.context() as m:
        m.setattr(runner, "analyze", no_analysis)
        again = run_cli(["check", "--format", "json"], monkeypatch, capsys, cwd=project)
        assert again.out == first.out and again.err == ""
        assert run_cli(["check"], monkeypatch, capsys, cwd=project).out == first_text.out
    # an edited cell is analysed again
    path = project / "training.ipynb"
    path.write_text(path.read_text(encoding="utf-8").replace("total += loss  #", "total += loss.item()  #"), encoding="utf-8")
    edited = run_cli(["check", "--format", "json"], monkeypatch, capsys, cwd=project)
    assert [i["code"] for i in json.loads(edited.out) if "training" in i["filename"]] == ["TPF001", "TPF007"]


def test_demo_shows_the_example_notebook(monkeypatch, capsys):
    root = Path(__file__).resolve().parent.parent
    result = run_cli(["check", "examples/", "--format", "concise", "--no-cache"], monkeypatch, capsys, cwd=root)
    lines = result.out.splitlines()
    for needle in (
        "examples/bad/train_notebook.ipynb:cell 4:3:5: TPF201 ",
        "examples/bad/train_notebook.ipynb:cell 10:4:5: TPF001 ",
        "examples/bad/train_notebook.ipynb:cell 10:8:9: TPF005 ",
        "examples/bad/train_notebook.ipynb:cell 12:3:1: TPF007 ",
    ):
        assert any(line.startswith(needle) for line in lines), (needle, result.out)
