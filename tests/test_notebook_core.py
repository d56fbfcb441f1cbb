"""core/notebook.py: parsing, joining, IPython syntax, position maps, fixes written into cells,
byte-identical round trips, malformed notebooks; and the fixture notebooks in tests/notebooks/
(inline `# error: TPF001` comments in code cells are the expected findings, cell by cell)."""

from __future__ import annotations

import ast
import json
from collections import Counter
from pathlib import Path

import pytest
from expectations import expected
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch_preflight.core.config import config_from_table
from torch_preflight.core.diagnostics import Applicability, Edit, Fix
from torch_preflight.core.notebook import (
    CellPosition,
    Notebook,
    NotebookError,
    apply_fixes,
    cell_edit,
    from_cells,
    join,
    neutralize,
    parse_notebook,
    raw_position,
    replace_sources,
)
from torch_preflight.core.parse import parse, uncertain_regions
from torch_preflight.core.semantic import build
from torch_preflight.core.source import Position, SourceText, Span

from torch_preflight.analyze import analyze, check_model

NOTEBOOKS = Path(__file__).parent / "notebooks"
CASES = sorted(NOTEBOOKS.glob("*.ipynb"))
ALL = config_from_table({"select": ["ALL"]}, source="test")


def load(name: str) -> Notebook:
    nb = parse_notebook((NOTEBOOKS / name).read_text(encoding="utf-8"))
    assert isinstance(nb, Notebook), nb
    return nb


def findings(nb: Notebook) -> Counter[tuple[int, int, str]]:
    """(cell, line, code) of each finding; a syntax error's code is `SyntaxError`."""
    joined = join(nb)
    result = analyze(joined.text, "nb.ipynb", ALL, notebook=joined)
    out: Counter[tuple[int, int, str]] = Counter()
    for d in result.diagnostics:
        where = joined.to_cell(d.span.start)
        out[(where.cell, where.line + 1, d.code)] += 1
    for problem in result.syntax_errors:
        where = joined.to_cell(problem.position)
        out[(where.cell, where.line + 1, "SyntaxError")] += 1
    return out


# -- the fixture notebooks -------------------------------------------------------------------


@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_fixture_notebook(path: Path) -> None:
    nb = load(path.name)
    want: Counter[tuple[int, int, str]] = Counter()
    for cell in nb.cells:
        if cell.cell_type == "code" and nb.is_python:
            for (line, code), n in expected(cell.text).items():
                want[(cell.number, line, code)] += n
            for line, text in enumerate(cell.text.split("\n"), start=1):
                want[(cell.number, line, "SyntaxError")] += "# syntax error" in text
    # a `# error:` comment in a cell that is not Python (a %%writefile cell) must not count
    want -= Counter({k: v for k, v in want.items() if not _is_python(nb, k[0])})
    assert findings(nb) == want


def _is_python(nb: Notebook, number: int) -> bool:
    return number - 1 in join(nb).ranges


def test_fixtures_cover_cross_cell_analysis() -> None:
    """The leak is fitted in cell 3 and split in cell 5; the loop of cell 7 steps the optimizer of cell 6."""
    leak = findings(load("leakage.ipynb"))
    assert (3, 5, "TPF201") in leak
    train = findings(load("training.ipynb"))
    assert {(7, 2, "TPF001"), (7, 7, "TPF005"), (8, 2, "TPF007")} <= set(train)
    # each cell alone: the loop cell does not know `opt` is an optimizer, the fit cell sees no split
    alone = [analyze(c.text.replace("%%time", "pass"), "c.py", ALL) for c in load("training.ipynb").cells if c.cell_type == "code"]
    assert not any(d.code == "TPF001" for r in alone for d in r.diagnostics)
    alone = [analyze(c.text, "c.py", ALL) for c in load("leakage.ipynb").cells if c.cell_type == "code"]
    assert not any(d.code == "TPF201" for r in alone for d in r.diagnostics)


def test_estimator_finds_a_model_defined_in_one_cell_and_built_in_another() -> None:
    from torch_preflight.estimator import estimate_source

    nb = load("training.ipynb")
    joined = join(nb)
    reports = estimate_source(joined.text, "training.ipynb")
    assert reports, "no memory report for the notebook"
    report = reports[0]
    assert report.model == "Net"
    defined = joined.to_cell(Position(report.layers[0].line, 0))
    assert defined.cell == 3  # the layers are in the class of cell 3
    built = joined.to_cell(Position(report.model_line, 0))
    assert built.cell == 5  # `model = Net()` is in cell 5


def test_non_python_kernel_has_no_python_cells() -> None:
    nb = load("r_kernel.ipynb")
    assert not nb.is_python and nb.language == "r"
    assert join(nb).text == ""


# -- joining and IPython syntax --------------------------------------------------------------


@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_every_module_line_maps_back_to_its_cell_line(path: Path) -> None:
    nb = load(path.name)
    joined = join(nb)
    module_lines = joined.text.split("\n")[:-1] if joined.text else []
    assert len(module_lines) == len(joined.lines)
    for n, text in enumerate(module_lines):
        index, line = joined.lines[n]
        shift = joined.shifts.get(n, 0)  # columns IPython's dedent removed
        original = nb.cells[index].text.split("\n")[line]
        assert original[:shift].strip() == ""
        original = original[shift:]
        if n in joined.neutral:
            assert text == "" or (text.strip() == "pass" and text[: len(text) - 4] == original[: len(text) - 4])
        else:
            assert text == original
        assert joined.to_module(index, Position(line, shift + 3)) == Position(n, 3)
        assert joined.to_cell(Position(n, 3)) == CellPosition(index + 1, line, shift + 3)


@pytest.mark.parametrize(
    ("line", "neutral"),
    [
        ("%matplotlib inline", True),
        ("!pip install torch", True),
        ("!!ls", True),
        ("files = !ls", True),
        ("a, b = %sx ls", True),
        ("?torch.nn", True),
        ("??torch", True),
        ("torch.nn.Linear?", True),
        ("model.fc??", True),
        ("pip install numpy", True),
        ("conda install -y numpy", True),
        ("get_ipython().run_line_magic('time', 'x')", True),
        ("x = 5 % 3", False),
        ("x != y", False),
        ("x %= 3", False),
        ('print("what?")', False),
        ("# %matplotlib inline", False),
        ("pip = install", False),
        ("get_ipython().run_cell_magic('time', '', (", False),  # multi-line call: valid Python, kept
    ],
)
def test_line_magics(line: str, neutral: bool) -> None:
    lines, magic = neutralize(f"import torch\n{line}\nx = 1")
    assert len(lines) == 3
    assert (1 in magic) is neutral
    assert lines[1] == ("pass" if neutral else line)


def test_magics_inside_strings_brackets_and_blocks() -> None:
    text = 'doc = """\n%not magic\nwhy?\n"""\ncall(\n    !x\n)\nif x:\n    !ls \\\n      -la\n    %time y()\nz = 1'
    lines, magic = neutralize(text)
    assert len(lines) == len(text.split("\n"))
    assert magic == {8, 9, 10}
    assert lines[8] == "    pass" and lines[9] == "" and lines[10] == "    pass"
    compile("\n".join(lines).replace("call(\n    !x\n)", "call(\n    1\n)"), "<t>", "exec")


def test_cell_magics_python_bodies_and_other_languages() -> None:
    nb = from_cells(
        [
            ("code", "%%time\nx = 1", None),
            ("code", "%%bash\necho $HOME", None),
            ("markdown", "# title", None),
            ("code", "SELECT 1", "sql"),
            ("code", "\n%%timeit\ny = 2", None),
            ("raw", "for", None),
        ]
    )
    joined = join(nb)
    assert joined.code_cells == [0, 4]
    assert joined.text == "pass\nx = 1\n\npass\ny = 2\n"
    assert joined.to_cell(Position(4, 2)).cell == 5
    assert joined.to_cell(Position(4, 2)).line == 2


def test_source_as_string_or_list_and_trailing_newlines() -> None:
    raw = json.dumps(
        {
            "cells": [
                {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": "a = 1\nb = 2\n"},
                {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": ["c = 3"]},
                {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None},  # no source: tolerated
            ],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 2,
        }
    )
    nb = parse_notebook(raw)
    assert isinstance(nb, Notebook)
    joined = join(nb)
    assert joined.text == "a = 1\nb = 2\n\nc = 3\n\n"
    assert [joined.to_cell(Position(n, 0)).cell for n in range(5)] == [1, 1, 1, 2, 3]


# -- malformed notebooks ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("{", "invalid JSON"),
        ('{"cells": [}', "invalid JSON"),
        ("[1, 2]", "is a list, not an object"),
        ("import torch\n", "invalid JSON"),
        ('{"cells": []}', 'no "nbformat"'),
        ('{"nbformat": "4", "cells": []}', "not an integer"),
        ('{"nbformat": 3, "worksheets": []}', "nbformat 3"),
        ('{"nbformat": 5, "cells": []}', "nbformat 5"),
        ('{"nbformat": 4, "cells": {}}', '"cells" is missing or not a list'),
        ('{"nbformat": 4}', '"cells" is missing'),
        ('{"nbformat": 4, "cells": [], "metadata": []}', '"metadata" is not an object'),
        ('{"nbformat": 4, "cells": [1]}', "cell 1 is a number"),
        ('{"nbformat": 4, "cells": [{"source": "x"}]}', 'cell 1 has no "cell_type"'),
        ('{"nbformat": 4, "cells": [{"cell_type": "code", "source": 5}]}', "not a string or a list"),
        ('{"nbformat": 4, "cells": [{"cell_type": "code", "source": ["a", 1]}]}', "non-string items"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_malformed_notebooks_are_error_values(raw: str, needle: str) -> None:
    result = parse_notebook(raw)
    assert isinstance(result, NotebookError)
    assert needle in result.message


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.data())
def test_parse_never_raises_on_damaged_notebooks(data: st.DataObject) -> None:
    raw = (NOTEBOOKS / "training.ipynb").read_text(encoding="utf-8")
    cut = data.draw(st.integers(0, len(raw)))
    junk = data.draw(st.text(max_size=8))
    damaged = raw[:cut] + junk + raw[cut + data.draw(st.integers(0, 20)) :]
    result = parse_notebook(damaged)
    if isinstance(result, Notebook):
        joined = join(result)
        for n in range(len(joined.lines)):
            joined.to_cell(Position(n, 0))


# -- round trips and fixes -------------------------------------------------------------------

STYLES = [
    {"indent": 1, "sort_keys": True, "ensure_ascii": False},  # Jupyter
    {"indent": 2, "sort_keys": False, "ensure_ascii": False},
    {"indent": 4, "sort_keys": True, "ensure_ascii": True},
    {"indent": 1, "sort_keys": True, "ensure_ascii": True},
]


def restyle(name: str, style: dict, newline: str = "\n", tail: str = "\n", string_sources: bool = False) -> tuple[dict, str]:
    data = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))
    if string_sources:
        for cell in data["cells"]:
            cell["source"] = "".join(cell["source"])
    raw = json.dumps(data, **style) + tail
    if newline != "\n":
        raw = raw.replace("\n", newline)
    return data, raw


def safe_fixes(nb: Notebook) -> tuple[list[Fix], object]:
    joined = join(nb)
    result = analyze(joined.text, "t.ipynb", ALL)
    return [d.fix for d in result.diagnostics if d.fix and d.fix.applicability is Applicability.SAFE], joined


@pytest.mark.parametrize("style", STYLES, ids=lambda s: f"indent{s['indent']}-ascii{s['ensure_ascii']}-sort{s['sort_keys']}")
@pytest.mark.parametrize("name", [p.name for p in CASES])
def test_round_trip_without_edits_is_byte_identical(name: str, style: dict) -> None:
    for newline, tail in (("\n", "\n"), ("\n", ""), ("\r\n", "\r\n")):
        _, raw = restyle(name, style, newline, tail)
        nb = parse_notebook(raw)
        assert isinstance(nb, Notebook)
        assert replace_sources(nb, {}) == raw
        assert replace_sources(nb, {c.index: c.text for c in nb.cells}) == raw
        assert apply_fixes(join(nb), []).raw == raw


@pytest.mark.parametrize("style", STYLES, ids=lambda s: f"indent{s['indent']}-ascii{s['ensure_ascii']}-sort{s['sort_keys']}")
@pytest.mark.parametrize("string_sources", [False, True], ids=["list-source", "string-source"])
def test_fix_rewrites_only_the_fixed_cells_as_jupyter_would(style: dict, string_sources: bool) -> None:
    data, raw = restyle("training.ipynb", style, string_sources=string_sources)
    nb = parse_notebook(raw)
    assert isinstance(nb, Notebook)
    fixes, joined = safe_fixes(nb)
    assert len(fixes) == 2  # TPF005 in cell 7, TPF007 in cell 8
    outcome = apply_fixes(joined, fixes)  # type: ignore[arg-type]
    assert outcome.applied == 2 and sorted(outcome.cells) == [6, 7]
    after = json.loads(outcome.raw)
    # the same notebook, written by json.dumps with the same style, with the two cells changed
    for index, text in outcome.cells.items():
        data["cells"][index]["source"] = text if string_sources else _lines(text)
    assert outcome.raw == json.dumps(data, **style) + "\n"
    fixed_source = after["cells"][6]["source"]
    assert "    total += loss.item()" in (fixed_source if string_sources else "".join(fixed_source))
    assert isinstance(fixed_source, str) is string_sources
    assert after["cells"][7]["outputs"] == json.loads(raw)["cells"][7]["outputs"]
    # everything outside the two source values is the same bytes
    first, last = nb.cells[6].value, nb.cells[7].value
    assert first is not None and last is not None
    assert outcome.raw.startswith(raw[: first.start])
    assert outcome.raw.endswith(raw[last.end :])


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def test_fix_keeps_crlf_and_missing_trailing_newline() -> None:
    _, raw = restyle("training.ipynb", STYLES[0], "\r\n", "")
    nb = parse_notebook(raw)
    assert isinstance(nb, Notebook)
    fixes, joined = safe_fixes(nb)
    new = apply_fixes(joined, fixes).raw  # type: ignore[arg-type]
    assert new != raw and not new.endswith("\n")
    assert "\n" not in new.replace("\r\n", "")
    again = parse_notebook(new)
    assert isinstance(again, Notebook)
    assert "with torch.no_grad():" in again.cells[7].text


def test_fixed_notebook_analyses_clean_of_the_fixed_findings() -> None:
    nb = load("training.ipynb")
    fixes, joined = safe_fixes(nb)
    new = parse_notebook(apply_fixes(joined, fixes).raw)  # type: ignore[arg-type]
    assert isinstance(new, Notebook)
    assert {code for (_, _, code) in findings(new)} == {"TPF001"}
    assert new.cells[7].text == "model.eval()\nwith torch.no_grad():\n    for x, y in val_loader:  # error: TPF007\n        pred = model(x)"


def test_edits_that_cross_cells_or_rewrite_magics_are_dropped() -> None:
    nb = from_cells([("code", "%time x = 1\ny = 2", None), ("code", "z = 3", None)])
    joined = join(nb)
    assert cell_edit(joined, Edit(Span.of(1, 0, 2, 1), "")) is None  # cell 1 into cell 2
    assert cell_edit(joined, Edit(Span.of(0, 2, 0, 4), "")) is None  # inside the magic line
    assert cell_edit(joined, Edit(Span.of(0, 0, 1, 0), "")) is None  # deletes the magic line
    assert cell_edit(joined, Edit.insert(Position(0, 0), "a = 0\n")) == (0, Edit.insert(Position(0, 0), "a = 0\n"))
    assert cell_edit(joined, Edit.insert(Position(2, 0), "w = 4\n")) == (1, Edit.insert(Position(0, 0), "w = 4\n"))
    # replacing a cell's last line up to the next cell: the separator is not the cell's
    assert cell_edit(joined, Edit(Span.of(1, 0, 2, 0), "y = 5\n")) == (0, Edit(Span.of(1, 0, 1, 5), "y = 5"))
    assert cell_edit(joined, Edit(Span.of(1, 0, 2, 0), "")) == (0, Edit(Span.of(0, 11, 1, 5), ""))


def test_raw_positions_point_into_the_stored_json() -> None:
    for style in STYLES:
        for string_sources in (False, True):
            _, raw = restyle("training.ipynb", style, string_sources=string_sources)
            nb = parse_notebook(raw)
            assert isinstance(nb, Notebook)
            stored = raw.split("\n")
            for cell in nb.cells:
                for n, line in enumerate(cell.text.split("\n")):
                    for col, ch in enumerate(line):
                        pos = raw_position(nb, cell.index, Position(n, col))
                        assert pos is not None
                        found = stored[pos.line][pos.col]
                        assert found == ch or found == "\\", (cell.index, n, col, ch, found)


# -- IPython as IPython runs it ----------------------------------------------------------------


@pytest.mark.parametrize(
    "cell",
    [
        "import torch\ntorch.*Tensor?",
        "torch.nn.*?",
        "obj??",
        "x = 1\nx.bit_length?",
        "files = !ls *.pt",
        "first, rest[0] = !ls",
        "result = %timeit -o f()",
        "%time total = sum(\n    range(10))\ny = 1",
        "x = %timeit -o f(\n  2)\nz = 1",
        "    x = 1\n    if x:\n        y = 2\n\n    z = 3",
        "\n  for i in range(3):\n      print(i)",
        "%%time\nx = 1",
        "%%capture out\nfor i in range(2):\n    print(i)",
    ],
)
def test_valid_ipython_is_not_a_syntax_error(cell: str) -> None:
    joined = join(from_cells([("code", cell, None)]))
    assert len(joined.lines) == len(cell.split("\n"))
    compile(joined.text, "<cell>", "exec")
    assert not analyze(joined.text, "nb.ipynb", notebook=joined).syntax_errors


def test_a_cell_indented_as_a_whole_is_dedented_and_maps_back() -> None:
    cell = "    import torch\n    def load(p):\n        return torch.load(p, weights_only=False)\n  # a comment less indented"
    joined = join(from_cells([("markdown", "# t", None), ("code", cell, None)]))
    assert joined.text.split("\n")[:3] == ["import torch", "def load(p):", "    return torch.load(p, weights_only=False)"]
    assert joined.shifts == {0: 4, 1: 4, 2: 4}  # the comment does not start with the first line's indentation
    result = analyze(joined.text, "nb.ipynb", notebook=joined)
    (d,) = [d for d in result.diagnostics if d.code == "TPF301"]
    index, span = joined.cell_span(d.span)
    assert (index, span.start) == (1, Position(2, cell.split("\n")[2].index("torch.load")))
    # a fix computed on the dedented text would indent wrongly in the cell: it is not offered there
    assert cell_edit(joined, Edit(Span(Position(2, 4), Position(2, 4)), "x")) is None


def test_each_broken_cell_is_one_syntax_error_and_the_others_are_analysed() -> None:
    nb = load("exercise.ipynb")
    joined = join(nb)
    result = analyze(joined.text, "nb.ipynb", ALL, notebook=joined)
    assert [joined.to_cell(p.position).cell for p in result.syntax_errors] == [2, 3]
    assert [(joined.to_cell(d.span.start).cell, d.code) for d in result.diagnostics] == [(4, "TPF001")]


def test_a_loop_whose_statement_was_dropped_is_not_analysed_as_certain() -> None:
    nb = load("exercise.ipynb")
    joined = join(nb)
    parsed = parse(joined.source, cells=joined.segments)
    loop = joined.ranges[1].first_line  # cell 2: `d_loss = ` left blank inside the loop
    assert parsed.repaired == {loop + 2}  # cell 3's unclosed call is closed, its statement kept
    model = build(parsed.tree, joined.source, "nb.ipynb")
    guessed = check_model(model, ALL, "nb.ipynb", parsed.errors)  # as if the repaired loop were known
    assert any(joined.cell_of_line(d.span.start.line)[0] == 1 and d.code == "TPF001" for d in guessed.diagnostics)
    certain = check_model(model, ALL, "nb.ipynb", parsed.errors, repaired=parsed.repaired)
    assert all(joined.cell_of_line(d.span.start.line)[0] != 1 for d in certain.diagnostics)
    assert any(d.code == "TPF001" for d in certain.diagnostics)  # cell 4's loop is intact


def test_uncertain_regions_are_the_outermost_loops_and_functions_that_lost_a_statement() -> None:
    text = ("class Trainer:\n    def step(self, batch):\n        for x in batch:\n            loss = \n        return loss\n"
            "for batch in loader:\n    step(batch)\nvalue = \n")
    parsed = parse(SourceText(text))
    assert parsed.repaired == {3, 7}
    # the method holding the blank; not its caller (known around the call), not the top level
    assert uncertain_regions(parsed.tree, parsed.repaired) == [(1, 4)]


EVAL_IN_EPOCH = [
    ("code", "import torch\nmodel = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1))\nopt = torch.optim.SGD(model.parameters(), lr=0.1)", None),
    ("markdown", "## train", None),
    ("code", "def train_one_epoch(model, loader):\n    for x, y in loader:\n        opt.zero_grad()\n"
             "        model(x).sum().backward()\n        opt.step()", None),
    ("code", "for epoch in range(3):\n    train_one_epoch(model, loader)\n    model.eval()\n    with torch.no_grad():\n"
             "        for x, y in val:\n            model(x)", None),
]


def test_messages_name_notebook_lines_as_cells() -> None:
    joined = join(from_cells(EVAL_IN_EPOCH))
    result = analyze(joined.text, "nb.ipynb", ALL, notebook=joined)
    (d,) = [d for d in result.diagnostics if d.code == "TPF009"]
    assert "epoch loop (cell 4, line 1)" in d.message
    plain = analyze(joined.text, "nb.py", ALL)  # the same text as a module: its own line
    assert "epoch loop (line 9)" in next(d.message for d in plain.diagnostics if d.code == "TPF009")


_SNIPPETS = st.sampled_from([
    "x = 1", "for b in loader:", "    loss = ", "    loss.backward()", "  opt.step()", "f(a,", ")", "%time g()",
    "!ls", "obj?", "def f(:", "    return", "if x:", "'''", "model.eval()", "", "\t", "x = [", "%%time",
])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(_SNIPPETS, max_size=6).map("\n".join), min_size=1, max_size=5))
def test_broken_cells_never_crash_and_each_is_one_error(cells: list[str]) -> None:
    joined = join(from_cells([("code", text, None) for text in cells]))
    result = analyze(joined.text, "nb.ipynb", ALL, notebook=joined)
    broken = set()
    for index, rng in joined.ranges.items():
        try:
            ast.parse("\n".join(joined.text.split("\n")[rng.first_line : rng.first_line + rng.line_count]))
        except SyntaxError:
            broken.add(index)
    assert sorted(joined.cell_of_line(p.position.line)[0] for p in result.syntax_errors) == sorted(broken)
