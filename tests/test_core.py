from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch_preflight.core.config import Config, ConfigError, config_from_table, load_config, parse_size
from torch_preflight.core.diagnostics import Applicability, Edit, Fix, apply_fixes
from torch_preflight.core.edits import indent_unit, wrap_block
from torch_preflight.core.names import ImportMap
from torch_preflight.core.noqa import scan, suppress_edit
from torch_preflight.core.parse import parse
from torch_preflight.core.semantic import EventKind, Kind, build
from torch_preflight.core.source import Position, SourceText, Span

from torch_preflight.analyze import analyze

BAD_LOOP = """\
import torch
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""


# --- source and positions -----------------------------------------------------------


def test_offsets_round_trip_with_non_bmp_text() -> None:
    source = SourceText("a = '😀'\nb = 1\r\nc")
    for offset in range(len(source.text) + 1):
        assert source.offset(source.position(offset)) == offset or source.text[offset - 1] == "\r"
    assert source.line(1) == "b = 1"
    assert source.position(len(source.text)) == Position(2, 1)


def test_utf8_columns_from_ast_become_code_points() -> None:
    source = SourceText("s = '😀é'; loss.backward()\n")
    tree = parse(source).tree
    call = tree.body[1].value  # type: ignore[attr-defined]
    assert source.char_col(0, call.col_offset) == source.line(0).index("loss")


# --- parsing ------------------------------------------------------------------------


def test_clean_file_has_no_errors() -> None:
    assert parse(SourceText(BAD_LOOP)).ok


@pytest.mark.parametrize(
    "broken",
    [
        BAD_LOOP.replace("model(x), y)", "model(x), y"),  # unclosed bracket
        BAD_LOOP + "def half_typed(:\n",
        BAD_LOOP.replace("loss.backward()", "loss.backward(  # typing"),
        "def f(\n" + BAD_LOOP,
        BAD_LOOP + "    )\n",
        BAD_LOOP.replace("    loss.backward()", "  loss.backward()"),  # bad dedent
    ],
)
def test_half_typed_file_keeps_findings_of_intact_parts(broken: str) -> None:
    result = analyze(broken, "broken.py")
    assert result.syntax_errors
    assert result.syntax_errors[0].message.startswith("SyntaxError")
    assert any(d.code == "TPF001" for d in result.diagnostics), result.diagnostics


def test_an_indented_first_line_is_repaired_as_it_is_after_blank_lines() -> None:
    # The language server repairs a broken statement alone, padded with blank lines to its first
    # line; a whole file starting with the same text must read the same (it once dropped the loop).
    code = "    for x, y in loader:\n        loss = model(x).sum()\n        loss.backward()\n        optimizer.step()\n"
    at_top, padded = parse(SourceText(code)), parse(SourceText("\n\n" + code))
    assert [type(s).__name__ for s in at_top.tree.body] == [type(s).__name__ for s in padded.tree.body] == ["For"]
    assert at_top.errors and at_top.errors[0].message.endswith("unexpected indent")


def test_a_repair_counts_lines_as_the_compiler_does() -> None:
    # `\x1e` (and form feeds, `\x85`, ...) end a line for `str.splitlines`, not for the compiler: the
    # repair once neutralised the line after the broken one, and a model built from it read its
    # values' text from the wrong lines.
    code = "x = 1  # a\x1erecord separator\ny = f(\nz = 2\n"
    result = parse(SourceText(code))
    assert [ast.unparse(s) for s in result.tree.body] == ["x = 1", "y = f()", "z = 2"]


def test_recovery_path_equals_direct_path_on_clean_files() -> None:
    """The differential test of the two front-end paths."""
    for path in sorted((Path(__file__).parent / "fixtures").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        direct = analyze(text, str(path), Config(select=("ALL",)))
        recovered = analyze(text, str(path), Config(select=("ALL",)), force_recovery=True)
        assert [(d.code, d.span) for d in direct.diagnostics] == [(d.code, d.span) for d in recovered.diagnostics], path


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.sampled_from(list("()[]{}:=+-*#'\"\\\n\t .,xyloss_backwardstep0123😀é\x00")), max_size=300))
def test_arbitrary_text_never_crashes(text: str) -> None:
    result = analyze(text, "fuzz.py", Config(select=("ALL",)))
    assert isinstance(result.diagnostics, list)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(BAD_LOOP)), st.integers(0, 40))
def test_truncated_sources_never_crash(cut: int, extra: int) -> None:
    analyze(BAD_LOOP[:cut] + "(" * (extra % 3) + BAD_LOOP[cut:], "t.py")


def test_deeply_nested_expression_is_a_clean_error() -> None:
    result = analyze("x = " + "(" * 5000 + ")" * 5000 + "\n" + BAD_LOOP, "deep.py")
    assert isinstance(result.diagnostics, list)


# --- names and the semantic model ---------------------------------------------------


@pytest.mark.parametrize(
    ("code", "name", "qualified"),
    [
        ("import torch.nn as nn", "nn.Linear", "torch.nn.Linear"),
        ("from torch import optim", "optim.Adam", "torch.optim.Adam"),
        ("from torch.optim import AdamW as A", "A", "torch.optim.AdamW"),
        ("import torch.nn.functional as F", "F.cross_entropy", "torch.nn.functional.cross_entropy"),
        ("import torch", "torch.no_grad", "torch.no_grad"),
        ("import numpy as np", "unknown.thing", "unknown.thing"),
    ],
)
def test_import_aliases(code: str, name: str, qualified: str) -> None:
    assert ImportMap.from_tree(ast.parse(code)).resolve(name) == qualified


def test_alias_for_prefers_the_local_spelling() -> None:
    imports = ImportMap.from_tree(ast.parse("import torch as T\nfrom torch import no_grad"))
    assert imports.alias_for("torch.no_grad") == "no_grad"
    assert imports.alias_for("torch.inference_mode") == "T.inference_mode"


def model_of(code: str):
    source = SourceText(code)
    return build(parse(source).tree, source)


def test_bindings_follow_assignments_and_subclass_chains() -> None:
    model = model_of(
        "import torch.nn as nn\nfrom torch.optim import AdamW as A\n"
        "class Base(nn.Module): pass\nclass Net(Base): pass\n"
        "model = Net().cuda()\nopt = A(model.parameters())\ncrit = nn.CrossEntropyLoss()\n"
        "loss = crit(model(x), y)\nvalue = loss.item()\nsched = torch.optim.lr_scheduler.StepLR(opt, 1)\n"
    )
    assert model.classes["Net"].is_module
    assert model.kind_of("model", "") is Kind.MODEL
    assert model.kind_of("opt", "") is Kind.OPTIMIZER
    assert model.kind_of("crit", "") is Kind.LOSS_FN
    assert model.kind_of("loss", "") is Kind.LOSS
    assert model.kind_of("value", "") is Kind.SCALAR


def test_events_carry_guards_contexts_and_loops() -> None:
    model = model_of(
        "import torch\nfor i, b in enumerate(loader):\n    with torch.no_grad():\n        out = model(b)\n"
        "    if (i + 1) % 4 == 0:\n        optimizer.step()\n"
    )
    events = model.functions[""].events
    step = next(e for e in events if e.kind is EventKind.STEP)
    assert step.guards and step.guards[0].cadence
    assert step.loops == (0,)
    forward = next(e for e in events if e.kind is EventKind.CALL and e.name == "model")
    assert forward.no_grad


# --- config -------------------------------------------------------------------------


def test_unknown_config_key_names_the_key() -> None:
    with pytest.raises(ConfigError, match="`selct`"):
        config_from_table({"selct": ["TPF001"]})


def test_config_is_read_from_the_nearest_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.torch-preflight]\nignore = ["TPF005"]\ngpu-memory = "24GiB"\n[tool.torch-preflight.per-file-ignores]\n"tests/*" = ["TPF001"]\n'
    )
    (tmp_path / "pkg").mkdir()
    config = load_config(tmp_path / "pkg")
    assert config.ignore == ("TPF005",)
    assert config.gpu_memory == 24 * 1024**3
    assert config.ignores_for(str(tmp_path / "tests" / "t.py")) == ("TPF001",)
    assert config.ignores_for(str(tmp_path / "pkg" / "t.py")) == ()


@pytest.mark.parametrize(("text", "size"), [("24GiB", 24 * 1024**3), ("80GB", 80 * 10**9), ("512 MiB", 512 * 1024**2), (1024, 1024)])
def test_parse_size(text, size) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["lots", "-1GB", "12XB", 0])
def test_parse_size_rejects_nonsense(bad) -> None:
    with pytest.raises(ConfigError):
        parse_size(bad)


def test_select_ignore_and_per_file_ignores_apply(tmp_path: Path) -> None:
    assert {d.code for d in analyze(BAD_LOOP, "a.py", Config(ignore=("TPF001",))).diagnostics} == set()
    config = Config(per_file_ignores=(("a.py", ("TPF001",)),))
    assert not analyze(BAD_LOOP, "a.py", config).diagnostics
    assert analyze(BAD_LOOP, "b.py", config).diagnostics


# --- suppression --------------------------------------------------------------------


def test_noqa_variants() -> None:
    flagged = BAD_LOOP.replace("for x, y in loader:", "for x, y in loader:{}")
    assert not analyze(flagged.format("  # noqa: TPF001"), "a.py").diagnostics
    assert not analyze(flagged.format("  # noqa"), "a.py").diagnostics
    assert analyze(flagged.format("  # noqa: TPF005"), "a.py").diagnostics
    assert not analyze("# torch-preflight: noqa\n" + BAD_LOOP, "a.py").diagnostics
    assert analyze(flagged.format(""), "a.py").suppressed == 0


def test_suppress_edit_adds_and_merges() -> None:
    source = SourceText("x = 1\ny = 2  # noqa: TPF005\n")
    added = apply_fixes(source, [Fix("s", (suppress_edit(source, 0, "TPF001"),), Applicability.SAFE)])[0]
    assert added.splitlines()[0] == "x = 1  # noqa: TPF001"
    merged = apply_fixes(source, [Fix("s", (suppress_edit(source, 1, "TPF001"),), Applicability.SAFE)])[0]
    assert merged.splitlines()[1] == "y = 2  # noqa: TPF001, TPF005"
    assert scan(SourceText(merged)).lines[1] == frozenset({"TPF001", "TPF005"})


# --- edits --------------------------------------------------------------------------


def test_wrap_block_keeps_multiline_strings_and_tabs() -> None:
    code = 'def f():\n\tfor x in y:\n\t\ts = """a\nb"""\n\n\t\tg(x)\n'
    source = SourceText(code)
    edits = wrap_block(source, 1, 5, "\t", indent_unit("\t", "\t\t"), "with torch.no_grad():")
    fixed = apply_fixes(source, [Fix("w", tuple(edits), Applicability.SAFE)])[0]
    assert fixed == 'def f():\n\twith torch.no_grad():\n\t\tfor x in y:\n\t\t\ts = """a\nb"""\n\n\t\t\tg(x)\n'
    ast.parse(fixed)


def test_overlapping_fixes_apply_one_at_a_time() -> None:
    source = SourceText("abc")
    first = Fix("1", (Edit.replace(Span.of(0, 0, 0, 2), "X"),), Applicability.SAFE)
    second = Fix("2", (Edit.replace(Span.of(0, 1, 0, 3), "Y"),), Applicability.SAFE)
    assert apply_fixes(source, [first, second]) == ("Xc", 1)


@pytest.mark.parametrize(("value", "shape"), [([3, 224, 224], (3, 224, 224)), ("3x32x32", (3, 32, 32))])
def test_input_shape_config(value, shape) -> None:
    assert config_from_table({"input-shape": value}).input_shape == shape


@pytest.mark.parametrize("bad", [[3, 0], "three", [3.5], True])
def test_input_shape_config_rejects_nonsense(bad) -> None:
    with pytest.raises(ConfigError, match="input-shape"):
        config_from_table({"input-shape": bad})
