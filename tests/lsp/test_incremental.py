"""Random edit sequences: the document text and its diagnostics equal a fresh full analysis."""

from __future__ import annotations

import ast

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lsprotocol import types
from torch_preflight.core import incremental, members
from torch_preflight.core.config import Config
from torch_preflight.core.dataflow import DataFlow
from torch_preflight.core.incremental import (
    IncrementalBuilder,
    _member_lines,
    _repair_member,
    _split_tree,
    chunk_lines,
    parse_statements,
    statement_starts,
)
from torch_preflight.core.parse import ParseResult, SyntaxProblem
from torch_preflight.core.semantic import build
from torch_preflight.core.source import Position, SourceText
from torch_preflight.server import convert
from torch_preflight.server.documents import Document

from torch_preflight.analyze import analyze

BASE = '''import torch
import torch.nn as nn


@dataclass(frozen=True)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()


def evaluate(model, loader):
    model.eval()
    for x in loader:
        print(model(x))
'''
PASTES = [
    "\ndef helper(model, data):\n    for d in data:\n        model(d)\n",
    "\nimport torch.optim as optim\n",
    "    optimizer.zero_grad()\n",
    "with torch.no_grad():\n",
    "(", ")", "[", "'''", "😀", "é", "\t", "\n", "    ", "x = 1\n", "# noqa: TPF001", "for i in range(3):\n    pass\n",
]


def to_utf16(text: str, offset: int) -> types.Position:
    source = SourceText(text)
    return convert.to_lsp_position(source, source.position(offset))


edit = st.tuples(st.floats(0, 1), st.floats(0, 1), st.one_of(st.sampled_from(PASTES), st.text(max_size=6)))


def incremental_builds(builder: IncrementalBuilder, text: str, edits: list[tuple[float, float, str]], key: str):  # type: ignore[no-untyped-def]
    """Apply `edits` one by one; after each, the builder's model from parso's diff-parsed statements."""
    import parso

    grammar = parso.load_grammar()
    for a, b, new in edits:
        start, end = sorted((int(a * len(text)), int(b * len(text))))
        text = text[:start] + new + text[start + min(end - start, 40):]
        source = SourceText(text)
        module = grammar.parse(text.replace("\x00", " "), diff_cache=True, path=key, cache=False)  # a NUL reads as a space, as in the server
        chunks = chunk_lines(source, statement_starts(module))
        yield source, builder.build(source, chunks, "t.py")


def diagnostics(result):  # type: ignore[no-untyped-def]
    return [(d.code, d.span, d.message, d.fix) for d in result.diagnostics]


def edit_and_compare(doc: Document, edits: list[tuple[float, float, str]], config: Config, window: int) -> None:
    """Apply each random edit (a range of at most `window` characters replaced) to the document
    and to a copy of its text; after each, the server's analysis must equal a fresh `analyze()`."""
    expected = doc.text
    for version, (a, b, new) in enumerate(edits, start=1):
        start, end = sorted((int(a * len(expected)), int(b * len(expected))))
        end = min(end, start + window)
        change = types.TextDocumentContentChangePartial(range=types.Range(start=to_utf16(expected, start), end=to_utf16(expected, end)), text=new)
        doc.update([change], version, convert.UTF16)
        expected = expected[:start] + new + expected[end:]
        assert doc.text == expected
        got = doc.analysis(config)
        full = analyze(expected, doc.path, config)
        assert diagnostics(got) == diagnostics(full)
        assert [d.related for d in got.diagnostics] == [d.related for d in full.diagnostics]
        assert got.suppressed == full.suppressed
        assert got.syntax_errors == full.syntax_errors


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(edit, min_size=1, max_size=8), st.booleans())
def test_random_edits_match_full_analysis(edits: list[tuple[float, float, str]], primed: bool) -> None:
    doc = Document("file:///tmp/prop/t.py", BASE, 0)
    config = Config()
    doc.analysis(config)
    if primed:  # as the server does after the first publish: later versions take parso's diff parser
        doc.prime()
    edit_and_compare(doc, edits, config, 40)
    doc.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(edit, min_size=1, max_size=5))
@example([(0.0, 1.0, ""), (0.0, 0.0, "\t")])  # a repair that takes an indent away gives back the old text, moved
@example([(0.25, 0.28125, ""), (1.0, 0.765625, "\x00")])  # a NUL at a line's start, in a file broken elsewhere
def test_incremental_model_equals_full_build(edits: list[tuple[float, float, str]]) -> None:
    builder = IncrementalBuilder()
    for source, model in incremental_builds(builder, BASE, edits, "<prop-test>"):
        if "\r" in source.text.replace("\r\n", ""):
            continue  # a lone carriage return: the server takes the full path (test_random_edits_match_full_analysis)
        parsed = parse_statements(source)  # broken statements repaired one by one, as the builder does
        assert builder.errors == parsed.errors
        full = build(parsed.tree, source, "t.py")
        assert list(model.functions) == list(full.functions)
        assert model.functions == full.functions
        assert model.classes == full.classes
        assert model.loops == full.loops
        assert list(model.imports.aliases.items()) == list(full.imports.aliases.items())
        assert ast.dump(model.tree, include_attributes=True) == ast.dump(full.tree, include_attributes=True)


CLASS = BASE + '''

class Trainer:
    """Several methods: an edit inside one re-parses and re-models that method only."""

    def fit(self, loader):
        for x in loader:
            self.step(x)  # a comment (

    @torch.no_grad()
    def evaluate(self, loader):
        return [self.net(x) for x in loader]

    def step(self, x):
        import sys as os  # the same alias as in save(): the order of the imports decides
        loss = self.net(x).sum()
        loss.backward()

    def save(self, path):
        import json as os
        if path:
            from os import path as osp
        return osp.join(path, "x")
'''
KEYS = ["(", ")", "1", " ", "x", ":", "'", '"', "#", "\\", "'''", "    ", "\t", "def g():", "@", ",", "import math; ", " as m"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.floats(0.75, 1), st.sampled_from(KEYS), st.booleans()), min_size=1, max_size=8))
@example(keys=[(0.7734375, "    ", False), (0.875, "(", False)])  # a repaired method's text, not its tree, was the same
@example(keys=[(1.0, "(", False), (0.8984375, " ", False)])  # a method indented by one more space parses alone, not in its class
def test_keystrokes_inside_methods_match_a_full_parse(keys: list[tuple[float, str, bool]]) -> None:
    """Typed and deleted keys inside a class's methods (the line count stays; `_reparse_method`
    applies): the builder's tree and model equal a fresh statement-by-statement parse."""
    import parso

    grammar = parso.load_grammar()
    builder = IncrementalBuilder()
    text = CLASS
    versions = []
    for where, key, delete in keys:
        at = int(where * len(text))
        text = text[:at] + key + text[at:]
        versions.append(text)
        if delete:
            text = text[:at] + text[at + len(key) :]
            versions.append(text)
    for text in versions:
        source = SourceText(text)
        module = grammar.parse(text, diff_cache=True, path="<prop-methods>", cache=False)
        model = builder.build(source, chunk_lines(source, statement_starts(module)), "t.py")
        parsed = parse_statements(source)
        full = build(parsed.tree, source, "t.py")
        assert ast.dump(model.tree, include_attributes=True) == ast.dump(full.tree, include_attributes=True)
        assert (model.functions, model.classes, model.loops) == (full.functions, full.classes, full.loops)
        assert list(model.imports.aliases.items()) == list(full.imports.aliases.items())
        assert builder.errors == parsed.errors


def test_an_edit_inside_a_method_with_imports_keeps_the_class_imports_in_order() -> None:
    # `_reparse_method` re-walks only the edited method's imports, `_repair_member` only those of
    # the statements it parses again: the class's import map must still be what a full parse
    # gives (`os` is bound in two methods; the later one wins), broken or not.
    import parso

    builder = IncrementalBuilder()
    grammar = parso.load_grammar()
    valid = CLASS.replace('"x")', '"y")')
    edits = (CLASS, valid, valid.replace('"y")', '"y")('), valid.replace("loss.backward()", "loss.backward()("))
    for text in edits:
        source = SourceText(text)
        module = grammar.parse(text, diff_cache=True, path="<prop-imports>", cache=False)
        model = builder.build(source, chunk_lines(source, statement_starts(module)), "t.py")
        assert model.imports.aliases["os"] == build(parse_statements(source).tree, source, "t.py").imports.aliases["os"] == "json"


def test_a_keystroke_in_a_function_keeps_its_import_nodes_only_when_no_import_line_changed() -> None:
    # `starts_after_edit` parses the edited top-level statement alone and keeps its last import
    # nodes when neither version of the edited lines mentions `import`.
    text = "import torch\n\n\ndef main():\n    import json as codec\n    x = 1\n    return codec(x)\n"
    builder = IncrementalBuilder()
    source = SourceText(text)
    builder.build(source, chunk_lines(source, [0, 3]), "t.py")
    for edited in (text.replace("x = 1", "x = 11"), text.replace("json as codec", "pickle as codec")):
        source = SourceText(edited)
        starts = builder.starts_after_edit(source)
        assert starts == [0, 3]
        model = builder.build(source, chunk_lines(source, starts), "t.py")
        assert model.imports.aliases["codec"] == build(parse_statements(source).tree, source, "t.py").imports.aliases["codec"]


TRAINER = BASE + '''

class Trainer:
    def __init__(self, net, optimizer, loader):
        self.net, self.optimizer, self.loader = net, optimizer, loader
        self.criterion = nn.CrossEntropyLoss()

    def fit(self, epochs):
        for _ in range(epochs):
            self.epoch()

    def epoch(self):
        for x, y in self.loader:
            loss = self.criterion(self.net(x), y)
            loss.backward()
            self.optimizer.step()

    def validate(self):
        self.net.eval()
        for x, y in self.loader:
            print(self.net(x).argmax(1).eq(y).sum())

    def save(self, path):
        torch.save(self.net.state_dict(), path)
'''
METHOD_KEYS = ["(", "1", " ", "x", "#", "self.optimizer.zero_grad()", "with torch.no_grad(): ", "self.epoch()", "\n        ", "self.criterion = None; "]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.floats(0.55, 1), st.floats(0, 1), st.sampled_from(METHOD_KEYS)), min_size=1, max_size=6), st.sampled_from([(), ("ALL",)]))
def test_edits_inside_the_methods_of_a_class_match_full_analysis(edits: list[tuple[float, float, str]], select: tuple[str, ...]) -> None:
    """Edits inside one method of a class (re-parsed and re-modelled alone): the result
    still equals a fresh analysis."""
    _edits_match_full_analysis("file:///tmp/prop/trainer.py", TRAINER, edits, select)


def _edits_match_full_analysis(uri: str, text: str, edits: list[tuple[float, float, str]], select: tuple[str, ...]) -> None:
    doc = Document(uri, text, 0)
    config = Config(select=select)
    doc.analysis(config)
    doc.prime()
    edit_and_compare(doc, [(a, a + b * 0.002, key) for a, b, key in edits], config, 6)
    doc.close()


CONTAINED = """import torch
import torch.nn as nn

HAS_CUDA = torch.cuda.is_available()

if HAS_CUDA:
    device = "cuda"

    def train(model, loader, optimizer):
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()

    @torch.no_grad()
    def evaluate(model, loader):
        for x in loader:
            print(model(x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return torch.softmax(self.fc(x), dim=-1)
elif torch.backends.mps.is_available():
    device = "mps"

    def train(model, loader, optimizer):
        for x in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
else:
    device = "cpu"

try:
    from apex import amp

    def scaled(loss, optimizer):
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
except ImportError:
    amp = None

    def scaled(loss, optimizer):
        history = []
        for _ in range(3):
            loss.backward()
            history.append(loss)
        return history

with torch.no_grad():
    def probe(model, batches):
        total = 0
        for b in batches:
            total += model(b)
        return total
"""


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("            print(model(x))", " or 1"),  # a function under `if`
        ("            return torch.softmax(self.fc(x), dim=-1)", "+1"),  # a method of a class under `if`
        ("            model(x).sum().backward()", " or 1"),  # under `elif`
        ("            history.append(loss)", " or 2"),  # under `except`
        ("            scaled_loss.backward()", "  # x"),  # under `try`
        ("            total += model(b)", " * 2"),  # under `with`, the block's last line
    ],
)
def test_an_edit_inside_a_function_of_a_top_level_block_reparses_that_function_alone(line: str, key: str) -> None:
    """An `if`, `try` or `with` statement at the top level: the function (or method) holding
    the edit is parsed alone, the blocks around it copied; the tree equals a parse of the
    whole statement (positions included), the other functions keep their nodes."""
    tree = ast.parse(CONTAINED)
    lines = CONTAINED.split("\n")
    at = lines.index(line)
    stmt = next(s for s in tree.body if s.lineno - 1 <= at < (s.end_lineno or 0))
    start, end = stmt.lineno - 1, stmt.end_lineno or 0
    old_code = "\n".join(lines[start:end]) + "\n"
    new_lines = [*lines[:at], line + key, *lines[at + 1 :]]
    code = "\n".join(new_lines[start:end]) + "\n"
    old = incremental._Parsed([stmt], incremental._import_nodes([stmt], old_code))
    parsed = incremental._reparse_method(start, old_code, old, code)
    assert parsed, "the function alone parses"
    whole = ast.parse("\n" * start + code).body[0]
    assert ast.dump(parsed.body[0], include_attributes=True) == ast.dump(whole, include_attributes=True)
    kept = {id(n) for n in ast.walk(stmt) if isinstance(n, ast.FunctionDef)} & {id(n) for n in ast.walk(parsed.body[0]) if isinstance(n, ast.FunctionDef)}
    assert len(kept) >= 1 or line.startswith("            total")  # the functions the edit is not in are the same nodes
    assert [n.names[0].name for _, _, n in parsed.imports] == [n.names[0].name for _, _, n in incremental._import_nodes([whole], code)]


def test_an_edit_inside_a_function_under_if_remodels_that_function_only() -> None:
    doc = Document("file:///tmp/prop/contained.py", CONTAINED, 0)
    config = Config(select=("ALL",))
    first = doc.analysis(config).model
    doc.prime()
    insert_and_compare(doc, config, "print(model(x))", "1 and ", 1)  # inside `evaluate`, under `if HAS_CUDA:`
    second = doc.analysis(config).model
    assert second.functions["Net.forward"] is first.functions["Net.forward"]
    assert second.functions["scaled"] is first.functions["scaled"]
    assert second.functions["evaluate"] is not first.functions["evaluate"]
    flow = DataFlow.of(second)
    assert flow.scopes["Net.forward"] is DataFlow.of(first).scopes["Net.forward"]  # its data-flow piece is kept too
    doc.close()


@pytest.mark.parametrize("line", ["            print(model(x))", "            return torch.softmax(self.fc(x), dim=-1)", "            history.append(loss)", "            total += model(b)"])
def test_a_broken_block_statement_spliced_into_the_last_parse_equals_its_parse_with_the_rest(line: str) -> None:
    """The language server splices the repaired block statement into the statement's last
    parse (`_splice_member`): the same tree, positions and import order as the parse of the
    statement with a `pass` there (what a fresh analysis does), the other nodes kept."""
    lines = CONTAINED.split("\n")
    at = lines.index(line)
    stmt = next(s for s in ast.parse(CONTAINED).body if s.lineno - 1 <= at < (s.end_lineno or 0))
    start, end = stmt.lineno - 1, stmt.end_lineno or 0
    old_code = "\n".join(lines[start:end]) + "\n"
    code = "\n".join([*lines[start:at], line + "(", *lines[at + 1 : end]]) + "\n"
    old = incremental._Parsed([stmt], incremental._import_nodes([stmt], old_code))
    fresh, spliced = incremental._repair_block_member(start, code), incremental._repair_block_member(start, code, (old_code, old))
    assert fresh is not None and spliced is not None and fresh.errors
    assert ast.dump(spliced.body[0], include_attributes=True) == ast.dump(fresh.body[0], include_attributes=True)
    assert (spliced.errors, spliced.repaired, len(spliced.unsure)) == (fresh.errors, fresh.repaired, len(fresh.unsure))
    assert [n.lineno for _, _, n in sorted(spliced.imports, key=lambda i: i[:2])] == [n.lineno for _, _, n in sorted(fresh.imports, key=lambda i: i[:2])]
    member = next(n for n in ast.walk(stmt) if isinstance(n, ast.stmt) and n.col_offset == 4 and n.lineno - 1 <= at < (n.end_lineno or 0))
    outside = {id(n) for n in ast.walk(stmt) if isinstance(n, ast.FunctionDef) and not member.lineno <= n.lineno <= (member.end_lineno or 0)}
    assert outside <= {id(n) for n in ast.walk(spliced.body[0])}  # the functions outside the broken statement are the last parse's


def test_a_syntax_error_in_a_function_under_if_repairs_that_function_only() -> None:
    """A top-level `if` (`try`, `with`) that does not parse is repaired one block statement at
    a time: the broken function alone; the others keep their models, and once the bracket is
    deleted the statement's last good parse and data-flow pieces are back."""
    blocks = CONTAINED[CONTAINED.index("if HAS_CUDA:") : CONTAINED.index("try:")]
    assert incremental._block_members(blocks) == ("    ", [(1, 3), (3, 9), (9, 14), (14, 21), (22, 24), (24, 29), (30, 33)])  # `elif`, `else` end a block
    assert incremental._block_members("if x:\n    a = (1,\n2)\n") is None  # a line at column 0 that is no clause
    doc = Document("file:///tmp/prop/contained.py", CONTAINED, 0)
    config = Config(select=("ALL",))
    first = doc.analysis(config).model
    flow = DataFlow.of(first)
    doc.prime()
    insert_and_compare(doc, config, "\n\n    class Net", "(", 1)  # `print(model(x))(`, in `evaluate`
    broken = doc.analysis(config)
    assert broken.syntax_errors and broken.model.functions["Net.forward"] is first.functions["Net.forward"]
    assert broken.model.functions["train"] is first.functions["train"]
    at = to_utf16(doc.text, doc.text.index("(\n\n    class Net"))
    after = types.Position(at.line, at.character + 1)
    doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=at, end=after), text="")], 2, convert.UTF16)
    mended = doc.analysis(config)
    assert not mended.syntax_errors and diagnostics(mended) == diagnostics(analyze(doc.text, doc.path, config))
    assert DataFlow.of(mended.model).scopes["Net.forward"] is flow.scopes["Net.forward"]
    insert_and_compare(doc, config, "\nelif torch.backends", "(", 3)  # `... dim=-1)(`: a method of the class under `if`
    in_class = doc.analysis(config)
    assert in_class.syntax_errors and in_class.model.functions["Net.__init__"] is first.functions["Net.__init__"]  # the class body statement by statement
    assert DataFlow.of(in_class.model).scopes["Net.__init__"] is flow.scopes["Net.__init__"]
    doc.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.floats(0.08, 1), st.floats(0, 1), st.sampled_from(METHOD_KEYS)), min_size=1, max_size=6), st.sampled_from([(), ("ALL",)]))
# a repair that dropped the whole `if` (an empty statement) was taken for an import whose text changed:
# the next edit re-checked nothing around it, and a `train` defined again after it lost
@example(edits=[(0.4375, 0.0, "("), (0.2890625, 0.0, "\n        "), (0.3125, 0.0, "(")], select=())
def test_edits_inside_the_functions_of_top_level_blocks_match_full_analysis(edits: list[tuple[float, float, str]], select: tuple[str, ...]) -> None:
    """Edits inside the functions and methods under a top-level `if`, `try` or `with` (each
    re-parsed, re-modelled and re-indexed alone): the result still equals a fresh analysis."""
    _edits_match_full_analysis("file:///tmp/prop/contained.py", CONTAINED, edits, select)


def test_one_statement_is_rebuilt_after_an_edit_inside_it() -> None:
    doc = Document("file:///tmp/prop/u.py", BASE, 0)
    doc.analysis(Config())
    assert not doc.primed  # the first analysis found the statements with ast, without parso
    doc.prime()
    offset = BASE.index("print(model(x))")
    pos = to_utf16(BASE, offset)
    doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text="y = 1; ")], 1, convert.UTF16)
    doc.analysis(Config())
    assert (doc.builder.rebuilt, doc.full_analyses) == (1, 0)
    assert doc.builder.reused >= 4
    doc.close()


def test_a_syntax_error_in_one_function_rebuilds_only_that_function() -> None:
    doc = Document("file:///tmp/prop/broken.py", BASE, 0)
    config = Config()
    doc.analysis(config)
    doc.prime()
    line = BASE.splitlines().index("        loss.backward()")
    end = types.Position(line, len("        loss.backward()"))
    doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=end, end=end), text="(")], 1, convert.UTF16)
    got = doc.analysis(config)
    assert (doc.builder.rebuilt, doc.full_analyses) == (1, 0)
    assert doc.builder.reused >= 4
    assert got.syntax_errors and got.syntax_errors[0].position.line == line
    assert "evaluate" in got.model.functions  # the statements the error does not touch keep their pieces
    full = analyze(doc.text, doc.path, config)
    assert (diagnostics(got), got.syntax_errors) == (diagnostics(full), full.syntax_errors)
    doc.close()


def test_an_edit_inside_one_method_rebuilds_only_that_method() -> None:
    text = BASE + "\n\nclass Two(nn.Module):\n    def a(self, x):\n        return x\n\n    def b(self, x):\n        return x * 2\n"
    doc = Document("file:///tmp/prop/methods.py", text, 0)
    config = Config()
    before = doc.analysis(config).model
    doc.prime()
    pos = to_utf16(text, text.index("x * 2") + len("x * 2"))
    doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text="0")], 1, convert.UTF16)
    after = doc.analysis(config).model
    assert before is not None and after is not None
    assert after.functions["Two.b"] is not before.functions["Two.b"]
    assert after.functions["Two.a"] is before.functions["Two.a"]  # the class's other method was not re-modelled
    two_before, two_after = (next(s for s in m.tree.body if getattr(s, "name", "") == "Two") for m in (before, after))
    assert two_after.body[0] is two_before.body[0]  # nor parsed again
    assert after.functions["train"] is before.functions["train"]
    full = build(parse_statements(after.source).tree, after.source, doc.path)
    assert (after.functions, after.classes, after.loops) == (full.functions, full.classes, full.loops)
    doc.close()


MEMBERS = BASE + '''

class Two(nn.Module):
    """A docstring whose lines sit at the body's indentation:
    def not_a_method(self):
    """

    def a(self, x):
        return x

    def b(self, x):
        return x * 2
'''


def test_a_syntax_error_in_one_method_repairs_that_method_only() -> None:
    doc = Document("file:///tmp/prop/members.py", MEMBERS, 0)
    config = Config()
    before = doc.analysis(config).model
    doc.prime()
    end = MEMBERS.index("x * 2") + len("x * 2")
    line = MEMBERS[:end].count("\n")
    pos = to_utf16(MEMBERS, end)
    doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text="(")], 1, convert.UTF16)
    got = doc.analysis(config)
    assert before is not None and got.model is not None
    assert got.syntax_errors and got.syntax_errors[0].position.line == line
    two_before, two_after = (next(s for s in m.tree.body if getattr(s, "name", "") == "Two") for m in (before, got.model))
    assert two_after.body[:2] == two_before.body[:2]  # the docstring and `a`: the very nodes of the last version
    assert "Two.a" in got.model.functions
    full = analyze(doc.text, doc.path, config)
    assert (diagnostics(got), got.syntax_errors) == (diagnostics(full), full.syntax_errors)
    assert ast.dump(got.model.tree) == ast.dump(parse_statements(got.model.source).tree)
    after = types.Position(pos.line, pos.character + 1)
    doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=after), text="")], 2, convert.UTF16)
    back = doc.analysis(config).model
    assert back is not None and not doc.analysis(config).syntax_errors
    assert next(s for s in back.tree.body if getattr(s, "name", "") == "Two") is two_before  # its last good parse again
    doc.close()


def test_a_class_split_that_is_not_its_statements_is_repaired_whole() -> None:
    code = "class C:\n    x = foo(1,\n    2)\n\n    def f(self):\n        return (\n"
    assert _member_lines(code) == ("    ", [1, 2, 4])  # `2)` looks like a statement of the body
    assert _repair_member(0, code) is None  # two pieces do not parse: not the class's statements
    parsed = parse_statements(SourceText(code))
    assert parsed.errors and isinstance(parsed.tree.body[0], ast.ClassDef)


FUNCTION = """def main(args):
    model = build(args)
    if args.train:
        loader = make(args.data,
                      batch_size=args.batch_size)
    else:
        loader = None
    try:
        run(model, loader)
    except KeyboardInterrupt:
        pass
    return model
"""


def test_a_syntax_error_in_one_statement_of_a_function_repairs_that_statement_only() -> None:
    """A top-level function is repaired one body statement at a time, as a class is; a clause
    (`else`, `except`) belongs to the statement before it."""
    assert _member_lines(FUNCTION) == ("    ", [1, 2, 7, 11])
    broken = FUNCTION.replace("args.data,", "args.data,(")
    parsed = _repair_member(3, broken)
    assert parsed is not None and parsed.errors and parsed.errors[0].position.line == 3 + 3
    (fn,) = parsed.body
    clean = ast.parse("\n" * 3 + FUNCTION).body[0]
    assert isinstance(fn, ast.FunctionDef) and fn.name == "main" and len(fn.body) == 4
    repaired_if = 3 + 2 + 1  # 1-based: the `if` holding the broken line
    for got, want in zip(fn.body, clean.body, strict=True):  # the intact statements, at their lines
        if got.lineno != repaired_if:
            assert ast.dump(got, include_attributes=True) == ast.dump(want, include_attributes=True)
    assert fn.end_lineno == clean.end_lineno
    assert ast.dump(parse_statements(SourceText("\n" * 3 + broken)).tree) == ast.dump(ast.Module(body=[fn], type_ignores=[]))


DECORATED_CLASS = """@compatibility(
    is_backward_compatible=True)
@dataclass
class Graph:
    \"\"\"Doc.\"\"\"

    def a(self):
        return self.nodes

    @property
    def b(self):
        return len(self.nodes)
"""


def test_a_decorated_class_or_function_is_repaired_one_body_statement_at_a_time() -> None:
    """Decorators, one line or several, come before the header: the body is split and repaired
    as an undecorated one's (`Graph` in torch/fx/graph.py was repaired whole on each keystroke)."""
    assert _member_lines(DECORATED_CLASS) == ("    ", [4, 6, 9])
    broken = DECORATED_CLASS.replace("return self.nodes", "return self.nodes(")
    parsed = _repair_member(2, broken)
    assert parsed is not None and parsed.errors and parsed.errors[0].position.line == 2 + 7
    (cls,) = parsed.body
    clean = ast.parse("\n" * 2 + DECORATED_CLASS).body[0]
    assert isinstance(cls, ast.ClassDef) and [ast.dump(d) for d in cls.decorator_list] == [ast.dump(d) for d in clean.decorator_list]
    assert ast.dump(cls.body[2], include_attributes=True) == ast.dump(clean.body[2], include_attributes=True)  # `b`, intact
    assert ast.dump(parse_statements(SourceText("\n" * 2 + broken)).tree) == ast.dump(ast.Module(body=[cls], type_ignores=[]))
    decorated_function = "@torch.no_grad()\n" + FUNCTION
    assert _member_lines(decorated_function) == ("    ", [2, 3, 8, 12])
    assert _member_lines("@decorator\nx = 1\n") is None  # no `class` or `def` after the decorators


def test_a_method_whose_repair_gives_nothing_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The repair of a large class can take a second: a body statement whose own repair gives
    no tree is dropped (its lines counted as repaired) instead of repairing the whole class."""
    code = "class C:\n    def a(self):\n        return 1\n\n    def b(self):\n        return (\n"
    problem = SyntaxProblem("e", Position(5, 15))
    monkeypatch.setattr(incremental, "parse", lambda source: ParseResult(ast.Module(body=[], type_ignores=[]), [problem]))
    parsed = incremental._repair_member(10, code)
    assert parsed is not None
    (cls,) = parsed.body
    assert isinstance(cls, ast.ClassDef) and [getattr(s, "name", "") for s in cls.body] == ["a"] and cls.end_lineno == 13
    assert parsed.repaired == frozenset(range(14, 17)) and parsed.errors == (problem,)


def test_first_build_splits_the_whole_tree_like_per_statement_parses() -> None:
    """The first analysis hands the builder `ast.parse` of the whole text; the pieces must be
    those of parsing each chunk on its own (and a chunk that is no tree's statement refuses it)."""
    source = SourceText(BASE)
    tree = ast.parse(BASE)
    starts = [min([s.lineno, *(d.lineno for d in getattr(s, "decorator_list", ()))]) - 1 for s in tree.body]
    chunks = chunk_lines(source, starts)
    split = IncrementalBuilder().build(source, chunks, "t.py", tree)
    parsed = IncrementalBuilder().build(source, chunks, "t.py")
    assert split is not None and parsed is not None
    assert split.functions == parsed.functions and split.classes == parsed.classes and split.loops == parsed.loops
    assert ast.dump(split.tree, include_attributes=True) == ast.dump(parsed.tree, include_attributes=True)
    inside = chunks[2][0] + 2  # a line inside the decorated class
    assert _split_tree(tree, [(0, inside), (inside, len(source.line_starts))]) is None


# A module of many small top-level statements, so that an edit leaves most of them clean and
# the per-statement cache (torch_preflight/scoped.py) is what produces the diagnostics.
SCOPED_BASE = '''import torch
import torch.nn as nn
from torch.utils.data import DataLoader

LR = 0.1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.blocks = [nn.Linear(2, 2)]

    def forward(self, x):
        return self.fc(x)


class Head(Net):
    def __init__(self):
        self.out = nn.Linear(2, 1)
        super().__init__()


def step_all(optimizer):
    optimizer.step()


def train(model, loader, optimizer):
    model.train()
    total = 0
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        step_all(optimizer)
        total += loss


def train_direct(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for x in loader:
        optimizer.zero_grad()
        out = model.forward(x)
        out.sum().backward()
        optimizer.step()


def evaluate(model, loader):
    model.eval()
    for x in loader:
        print(model(x))


def load(path):
    return torch.load(path, weights_only=False)


model = Net()
opt = torch.optim.Adam(model.parameters())
for batch in DataLoader([1, 2]):
    opt.zero_grad()
    model(batch).sum().backward()
    opt.step()
'''
SCOPED_PASTES = [
    "    optimizer.zero_grad()\n", "        optimizer.zero_grad()\n", "    model.eval()\n", "model.train()\n",
    "\ndef helper(model, data):\n    for d in data:\n        model(d)\n", "\nLR = 0.2\n", "\n\n", "\n",
    "x = torch.load('a.pt', weights_only=False)\n", "        total += loss.item()\n", "#", "(", "😀", "    ", "step_all",
    "\nclass Other(nn.Module):\n    def __init__(self):\n        self.a = nn.Linear(1, 1)\n",
    # for the whole-module rules and the training model they share across edits (TPF006, TPF007, TPF004)
    "        history.append(loss)\n", "torch.set_grad_enabled(False)\n", "@torch.no_grad()\n", "        loss = loss / 4\n",
    "\ndef run(model, loader):\n    evaluate(model, loader)\n",
]
scoped_edit = st.tuples(st.floats(0, 1), st.floats(0, 1), st.one_of(st.sampled_from(SCOPED_PASTES), st.text(max_size=4)))


OTHER = next(p for p in SCOPED_PASTES if p.startswith("\nclass Other"))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(scoped_edit, min_size=1, max_size=8), st.sampled_from([(), ("ALL",)]), st.booleans())
@example(edits=[(0.0, 0.0, OTHER), (0.0, 0.0, OTHER)], select=(), primed=False)  # a class defined twice: the later one wins
@example(edits=[(0.0, 1.0, "torch.set_grad_enabled(False)\n"), (1.0, 0.359375, "    optimizer.zero_grad()\n"), (0.0, 0.0, "\U0001F600")], select=(), primed=False)
@example(edits=[(1.0, 0.5, "\ndef helper(model, data):\n    for d in data:\n        model(d)\n"), (1.0, 0.19191274342114167, "\x00")], select=(), primed=False)  # parso read a NUL otherwise than the repair
# a statement re-checked as a callee whose own callee (step_all) stays clean: checked against the whole model
@example(edits=[(1.0, 0.65625, "    optimizer.zero_grad()\n"), (1.0, 0.375, "    optimizer.zero_grad()\n"), (1.0, 0.8125, "\nLR = 0.2\n")], select=(), primed=False)
def test_scoped_cache_matches_full_analysis(edits: list[tuple[float, float, str]], select: tuple[str, ...], primed: bool) -> None:
    doc = Document("file:///tmp/prop/s.py", SCOPED_BASE, 0)
    config = Config(select=select)
    doc.analysis(config)
    if primed:
        doc.prime()
    edit_and_compare(doc, edits, config, 30)
    doc.close()


# Data leakage across statements (TPF201/202/203), for the per-statement memos of
# `DataFlow.calls_where` / `defs_where`: a fit in one function, the split in another statement.
DATA_BASE = '''import numpy as np
import torch
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

X = np.load("x.npy")
y = np.load("y.npy")


def augment(data):
    return data[:, ::-1]


def scale(data):
    scaler = StandardScaler()
    scaler.fit(data)
    return scaler


scaler = StandardScaler()
scaler.fit(X)
X_all = np.concatenate([X, augment(X)])
X_train, X_test, y_train, y_test = train_test_split(X_all, y)
X_tr, X_val = train_test_split(X_train)
data = np.load("f.npy")
data = (data - data.mean(axis=0)) / data.std(axis=0)
A_train, A_test = train_test_split(data)


def select(model, sched):
    for epoch in range(3):
        acc = (model(X_test) == y_test).mean()
        sched.step(acc)
'''
DATA_PASTES = [
    "X_val = X_test\n", "from numpy import mean\n", "scaler.fit(X_train)\n", "X = X_train\n", "#", "\n",
    "    data = data[:10]\n", "mean", "X_all", "train_test_split", "sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)\n",
]
data_edit = st.tuples(st.floats(0, 1), st.floats(0, 1), st.one_of(st.sampled_from(DATA_PASTES), st.text(max_size=3)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(data_edit, min_size=1, max_size=6))
def test_data_flow_memos_match_full_analysis(edits: list[tuple[float, float, str]]) -> None:
    doc = Document("file:///tmp/prop/d.py", DATA_BASE, 0)
    config = Config(select=("ALL",))
    assert {"TPF201", "TPF203"} <= {d.code for d in doc.analysis(config).diagnostics}
    edit_and_compare(doc, edits, config, 20)
    doc.close()


def test_an_import_edit_renews_the_data_flow_memos() -> None:
    # `cat` is no concatenation until it is imported as one: the per-statement answers of
    # `calls_where` for the unchanged statements must not survive the new import map.
    text = DATA_BASE.replace("X_all = np.concatenate([X, augment(X)])", "X_all = cat([X, augment(X)])")
    doc = Document("file:///tmp/prop/i.py", text, 0)
    config = Config(select=("ALL",))
    assert "TPF203" not in {d.code for d in doc.analysis(config).diagnostics}
    assert text.splitlines()[1] == "import torch"  # replaced in place: the other statements keep their nodes
    doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=types.Position(1, 0), end=types.Position(1, 12)),
                                                       text="from numpy import concatenate as cat")], 1, convert.UTF16)
    after = doc.analysis(config)
    assert "TPF203" in {d.code for d in after.diagnostics}
    assert diagnostics(after) == diagnostics(analyze(doc.text, doc.path, config))
    doc.close()


def classified_loops(doc: Document) -> dict[str, object]:
    """Function -> its classified TrainingLoop, from the whole-module rules' training model."""
    training = doc.scoped._training
    assert training is not None
    return {t.loop.function: t for t in training.training_loops}


def insert_and_compare(doc: Document, config: Config, anchor: str, text: str, version: int) -> None:
    """Insert `text` before `anchor`; the server's analysis must equal a fresh one."""
    pos = to_utf16(doc.text, doc.text.index(anchor))
    doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text=text)], version, convert.UTF16)
    assert diagnostics(doc.analysis(config)) == diagnostics(analyze(doc.text, doc.path, config))


def test_an_edit_reuses_the_training_model_of_the_functions_it_cannot_affect() -> None:
    doc = Document("file:///tmp/prop/t.py", SCOPED_BASE, 0)
    config = Config(select=("ALL",))
    doc.analysis(config)

    first = classified_loops(doc)
    assert set(first) == {"train", "train_direct", ""}

    insert_and_compare(doc, config, "print(model(x))", "1 and ", 1)  # inside evaluate(), on the same lines: the other functions' pieces are reused
    second = classified_loops(doc)
    assert second["train"] is first["train"] and second["train_direct"] is first["train_direct"]
    insert_and_compare(doc, config, "out.sum().backward()", "1 and ", 2)  # inside train_direct()
    third = classified_loops(doc)
    assert third["train"] is second["train"] and third["train_direct"] is not second["train_direct"]
    doc.close()


def test_an_edit_inside_one_method_reuses_the_training_facts_of_the_methods_it_cannot_affect() -> None:
    # Per-method units (core.members.settled_members): an edit inside `save` leaves the
    # loops of the other methods classified as before; one inside `epoch` reclassifies the loop
    # of `fit`, which calls it, and leaves `validate`'s alone. Each result equals a fresh analysis.
    doc = Document("file:///tmp/prop/trainer.py", TRAINER, 0)
    config = Config(select=("ALL",))
    doc.analysis(config)

    first = classified_loops(doc)
    assert "Trainer.epoch" in first
    insert_and_compare(doc, config, "torch.save(", "1 and ", 1)
    second = classified_loops(doc)
    assert second["Trainer.epoch"] is first["Trainer.epoch"]
    insert_and_compare(doc, config, "self.optimizer.step()", "1 and ", 2)
    third = classified_loops(doc)
    assert third["Trainer.epoch"] is not second["Trainer.epoch"]
    doc.close()


def test_settled_members_takes_the_names_the_caller_knows_before_walking_a_method(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first edit in a class finds no method in `names` (by text, the last call's): the
    `Names` the caller already has of a very node (the server's `Uses`) are taken, not walked again."""
    old_text = TRAINER
    new_text = TRAINER.replace("torch.save(", "1 and torch.save(", 1)
    old, new = (next(s for s in ast.parse(t).body if isinstance(s, ast.ClassDef) and s.name == "Trainer") for t in (old_text, new_text))
    edited = next(i for i, (a, b) in enumerate(zip(old.body, new.body, strict=True)) if ast.dump(a) != ast.dump(b))
    have = {id(m): members.member_names(m) for m in new.body if isinstance(m, ast.FunctionDef) and m is not new.body[edited]}
    walked: list[str] = []
    real = members.member_names
    monkeypatch.setattr(members, "member_names", lambda node: walked.append(node.name) or real(node))
    lines = {False: old_text.split("\n"), True: new_text.split("\n")}

    def text(node: ast.AST, is_new: bool) -> str:
        return "\n".join(lines[is_new][node.lineno - 1 : node.end_lineno])  # type: ignore[attr-defined]

    found = members.settled_members(old, new, lambda name: name != new.body[edited].name, frozenset(), text, {}, lambda node: have.get(id(node)))
    assert found is not None and walked == [new.body[edited].name] * 2  # the edited method's two versions only


SHARED = BASE + '''

class Trainer:
    def __init__(self, net, optimizer, loader):
        self.net, self.optimizer, self.loader = net, optimizer, loader
        self.lr = 0.5

    def epoch(self):
        for x, y in self.loader:
            loss = self.net(x).sum() * self.lr
            loss.backward()
            self.optimizer.step()

    def fit(self, epochs):
        for _ in range(epochs):
            self.epoch()
'''


def test_a_method_whose_bindings_keep_their_text_leaves_the_readers_of_its_attributes_settled() -> None:
    # core/members.py: a digit typed into `self.lr = 0.5` changes no kind or callee that
    # `epoch` reads from `__init__`, so `epoch`'s loop keeps its classification; a binding
    # that changes (`self.optimizer` now made by a call) unsettles it. Each result equals a
    # fresh analysis.
    doc = Document("file:///tmp/prop/shared.py", SHARED, 0)
    config = Config(select=("ALL",))
    doc.analysis(config)
    first = classified_loops(doc)
    assert "Trainer.epoch" in first
    insert_and_compare(doc, config, "0.5\n", "1", 1)
    second = classified_loops(doc)
    assert second["Trainer.epoch"] is first["Trainer.epoch"]
    insert_and_compare(doc, config, "optimizer, loader\n", "make_", 2)
    third = classified_loops(doc)
    assert third["Trainer.epoch"] is not second["Trainer.epoch"]
    doc.close()


def test_an_edit_of_a_callee_reclassifies_the_loops_of_its_callers() -> None:
    # train() steps through step_all(); once step_all() no longer steps, train()'s loop is no
    # training loop and its missing zero_grad() is no finding of TPF001: the callee's edit must
    # not let train()'s unchanged function keep its old training-loop classification. (Its stored
    # losses stay a TPF006 finding: a loop that back-propagates keeps graphs, stepping or not.)
    text = SCOPED_BASE.replace("        total += loss\n", "        total += loss\n        history.append(loss)\n")
    doc = Document("file:///tmp/prop/c.py", text, 0)
    config = Config(select=("ALL",))
    assert {"TPF001", "TPF006"} <= {d.code for d in doc.analysis(config).diagnostics}
    start = text.index("optimizer.step()") + len("optimizer.")
    change = types.TextDocumentContentChangePartial(
        range=types.Range(start=to_utf16(text, start), end=to_utf16(text, start + len("step"))), text="zero_grad"
    )
    doc.update([change], 1, convert.UTF16)
    after = doc.analysis(config)
    assert doc.scoped.rechecked < len(doc.builder.units)
    assert "TPF001" not in {d.code for d in after.diagnostics}
    assert diagnostics(after) == diagnostics(analyze(doc.text, doc.path, config))
    doc.close()


def test_an_edit_inside_one_function_rechecks_only_its_statement() -> None:
    doc = Document("file:///tmp/prop/v.py", SCOPED_BASE, 0)
    config = Config()
    before = doc.analysis(config)
    assert {d.code for d in before.diagnostics} >= {"TPF001", "TPF104", "TPF301"}
    units = len(doc.builder.units)
    offset = SCOPED_BASE.index("print(model(x))")
    pos = to_utf16(SCOPED_BASE, offset)
    doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text="\n        y = 1\n        ")], 1, convert.UTF16)
    after = doc.analysis(config)
    assert doc.scoped.rechecked == 1 < units
    assert diagnostics(after) == diagnostics(analyze(doc.text, doc.path, config))
    # the findings after the edited function moved down by the two inserted lines
    moved = [d for d in after.diagnostics if d.code == "TPF301"]
    assert moved and moved[0].span.start.line == next(d for d in before.diagnostics if d.code == "TPF301").span.start.line + 2
    doc.close()


# A module with splits, fits, nested scopes, a class body and a redefinition, for the
# DataFlow index merged from per-statement pieces (core/dataflow.py `_index_reusing`).
FLOW_BASE = '''import torch
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

X_train, X_test = train_test_split(X)
scaler = StandardScaler()
scaler.fit(X_test)


class Data:
    split = "test"

    def load(self, path):
        self.rows = torch.load(path)
        return self.rows


def prepare(data):
    def inner(v):
        return v * 2
    for row in data:
        yield inner(row)


def prepare(data):
    with open(data) as f:
        return f.read()


for batch in prepare(X_train):
    total = batch
'''


def _flow_shape(flow):  # type: ignore[no-untyped-def]
    def defs(scope):  # type: ignore[no-untyped-def]
        return [(n, [(d.at, d.kind, d.index, d.arity, id(d.value)) for d in ds]) for n, ds in scope.defs.items()]

    return (
        [(q, id(s.node) if q else None, s.parent,  # the module scope's node is the merged ast.Module
          s.owner, defs(s), [id(r) for r in s.returns], [id(c) for c in s.calls]) for q, s in flow.scopes.items()],
        list(flow.scope_of_node.items()),
        [(k, id(v)) for k, v in flow.for_nodes.items()],
        [(k, id(v)) for k, v in flow.classes.items()],
        [(o, s, w, id(c)) for o, s, w, c in flow.fits],
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(edit, min_size=1, max_size=5))
def test_reused_dataflow_index_equals_a_fresh_one(edits: list[tuple[float, float, str]]) -> None:
    from torch_preflight.core.dataflow import DataFlow

    builder = IncrementalBuilder()
    for source, model in incremental_builds(builder, FLOW_BASE, edits, "<flow-test>"):
        if model is None:
            continue
        assert "_tpf_dataflow_parts" in model.__dict__
        reused = DataFlow.of(model)
        plain = build(model.tree, source, "t.py")  # same nodes, no pieces: the whole-tree walk
        fresh = DataFlow(plain)
        assert _flow_shape(reused) == _flow_shape(fresh)
        sub = builder.submodel(list(range(len(builder.units))))
        assert _flow_shape(DataFlow.of(sub)) == _flow_shape(fresh)


# Shape facts for TPF501 are reused while no statement the module's script can reach changes.
SHAPE_BASE = '''import torch
import torch.nn as nn

WIDTH = 120


def make_head():
    return nn.Linear(84, 10)


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, WIDTH)
        self.head = make_head()

    def forward(self, x):
        return self.head(self.fc1(x))


def train(model, loader):
    for x in loader:
        model(x).sum().backward()


def main():
    train(LeNet(), [torch.zeros(2, 32)])
'''
SHAPE_PASTES = [
    "    model = LeNet()\n", "main()\n", "WIDTH = 84\n", "        self.fc2 = nn.Linear(7, 3)\n", "make_head", "\n", "x", "(",
    "\ndef make_head():\n    return nn.Linear(3, 10)\n", "2", "9", "WIDTH", "    return nn.Linear(120, 10)\n", "if __name__ == '__main__':\n    main()\n",
]
shape_edit = st.tuples(st.floats(0, 1), st.floats(0, 1), st.one_of(st.sampled_from(SHAPE_PASTES), st.text(max_size=3)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(shape_edit, min_size=1, max_size=6))
def test_reused_shape_facts_match_full_analysis(edits: list[tuple[float, float, str]]) -> None:
    doc = Document("file:///tmp/prop/shapes.py", SHAPE_BASE, 0)
    config = Config(select=("ALL",))
    assert any(d.code == "TPF501" for d in doc.analysis(config).diagnostics)
    edit_and_compare(doc, edits, config, 30)
    doc.close()


def test_shape_facts_are_reused_after_an_edit_in_an_unreached_function() -> None:
    doc = Document("file:///tmp/prop/shapes2.py", SHAPE_BASE, 0)
    config = Config(select=("ALL",))
    before = [d for d in doc.analysis(config).diagnostics if d.code == "TPF501"]
    assert before and doc.scoped.shapes_computed == 1

    def insert(anchor: str, text: str, version: int) -> None:
        pos = to_utf16(doc.text, doc.text.index(anchor))
        doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text=text)], version, convert.UTF16)

    insert("model(x).sum()", "y = 1; ", 1)  # inside train(), which only the uncalled main() names
    after = doc.analysis(config)
    assert doc.scoped.shapes_computed == 1
    assert [d for d in after.diagnostics if d.code == "TPF501"] == before
    insert("return nn.Linear(84", "z = 2; ", 2)  # inside make_head(), which the class calls
    doc.analysis(config)
    assert doc.scoped.shapes_computed == 2
    insert("\n\ndef main", "\nmain()\n", 3)  # a call at module level reaches main() and train()
    doc.analysis(config)
    assert doc.scoped.shapes_computed == 3
    insert("model(x).sum()", "w = 3; ", 4)
    assert diagnostics(doc.analysis(config)) == diagnostics(analyze(doc.text, doc.path, config))
    assert doc.scoped.shapes_computed == 4
    doc.close()


def test_a_no_grad_removed_around_an_unresolved_method_call_rechecks_the_method() -> None:
    """TPF007 on a module's own layers over a loader stays silent while a call spelled like the
    method runs under no_grad in another function; removing that `with torch.no_grad():` must
    bring the finding back in the server as in a fresh analysis (the loop memo is carried over
    edits of other functions, so that question is asked outside it)."""
    from pathlib import Path

    text = (Path(__file__).parent.parent / "fixtures" / "TPF007" / "module_evaluation_method.py").read_text(encoding="utf-8")
    doc = Document("file:///tmp/module_evaluation_method.py", text, 0)
    config = Config()
    doc.analysis(config)
    old = "    with torch.no_grad():\n        out = evaluator.module.evaluate(x, loader)\n"
    start = text.index(old)
    new = "    if True:\n        out = evaluator.module.evaluate(x, loader)\n"
    change = types.TextDocumentContentChangePartial(
        range=types.Range(start=to_utf16(text, start), end=to_utf16(text, start + len(old))), text=new)
    doc.update([change], 1, convert.UTF16)
    expected = text[:start] + new + text[start + len(old):]
    got, full = doc.analysis(config), analyze(expected, doc.path, config)
    assert diagnostics(got) == diagnostics(full)
    assert sum(d.code == "TPF007" for d in full.diagnostics) == 3  # the third is the method's loop


def _built(text: str) -> IncrementalBuilder:
    """A builder that has built `text` (which parses), as the first analysis of a document does."""
    builder = IncrementalBuilder()
    source = SourceText(text)
    builder.build(source, chunk_lines(source, ast_starts(text) or []), "t.py")
    return builder


def ast_starts(text: str) -> list[int] | None:
    try:
        tree = ast.parse(text.replace("\x00", " "))
    except (SyntaxError, ValueError):
        return None
    return [min([s.lineno, *(d.lineno for d in getattr(s, "decorator_list", ()))]) - 1 for s in tree.body]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(edit, min_size=1, max_size=10))
@example([(0.62, 0.62, "\nx = 1\n")])  # a statement added inside another's lines: two statements now
@example([(0.43, 0.43, "# ")])  # a statement commented out: its lines join the statement before
@example([(0.5, 0.5, "(")])  # broken, then typed back below
def test_statements_found_without_a_parser_are_those_of_ast(edits: list[tuple[float, float, str]]) -> None:
    """Whenever `starts_after_edit` answers, the text parses and its statements start where `ast`'s
    do; after a statement is typed back to its last text that parsed, it answers."""
    builder = IncrementalBuilder()
    text = BASE
    source = SourceText(text)
    builder.build(source, chunk_lines(source, ast_starts(text) or []), "t.py")
    valid = text
    for a, b, new in edits:
        start, end = sorted((int(a * len(text)), int(b * len(text))))
        text = text[:start] + new + text[start + min(end - start, 40) :]
        source = SourceText(text)
        known = builder.starts_after_edit(source)
        expected = ast_starts(text)
        if known is not None:
            assert expected is not None
            assert chunk_lines(source, known) == chunk_lines(source, expected)
        starts = expected if expected is not None else parse_statements_starts(text)
        builder.build(source, chunk_lines(source, starts), "t.py")
        valid = text if expected is not None else valid
    if valid == BASE:  # the last text that parsed, typed back
        source = SourceText(BASE)
        assert chunk_lines(source, builder.starts_after_edit(source) or []) == chunk_lines(source, ast_starts(BASE) or [])


def parse_statements_starts(text: str) -> list[int]:
    import parso

    return statement_starts(parso.load_grammar().parse(text.replace("\x00", " "), error_recovery=True, cache=False))


def test_a_keystroke_that_keeps_the_file_valid_or_makes_it_valid_again_takes_no_parso(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = Document("file:///tmp/noparso/train.py", BASE, 0)
    config = Config()
    doc.analysis(config)
    doc.prime()
    calls: list[str] = []
    grammar = incremental.parso_grammar()
    real = grammar.parse
    monkeypatch.setattr(grammar, "parse", lambda *a, **k: calls.append("parso") or real(*a, **k))
    lines = BASE.splitlines()
    digit = (lines.index("        self.fc = nn.Linear(4, 2)"), len("        self.fc = nn.Linear(4, 2"))
    end = (lines.index("        optimizer.step()"), len("        optimizer.step()"))
    steps = [("1", 0, "valid", digit), ("", 1, "valid", digit), ("(", 0, "broken", end), ("", 1, "typed back", end)]
    for version, (typed, deleted, what, (line, col)) in enumerate(steps, start=1):
        rng = types.Range(start=types.Position(line, col), end=types.Position(line, col + deleted))
        doc.update([types.TextDocumentContentChangePartial(range=rng, text=typed)], version, convert.UTF16)
        calls.clear()
        got = doc.analysis(config)
        if what != "broken":  # a broken one may need parso (see test_a_broken_keystroke_before_a_def_or_at_the_end_takes_no_parso)
            assert calls == [], what
        full = analyze(doc.text, doc.path, config)
        assert diagnostics(got) == diagnostics(full) and got.syntax_errors == full.syntax_errors
    doc.close()


def test_string_lines_are_those_of_pythons_tokenizer() -> None:
    """`_string_lines` (a scan) finds the lines inside multi-line strings that `tokenize` finds,
    on every rule fixture and core module, and on texts the tokenizer stops in."""
    import io
    import tokenize
    from pathlib import Path

    def tokenizer(code: str) -> set[int]:
        inside: set[int] = set()
        try:
            for token in tokenize.generate_tokens(io.StringIO(code).readline):
                if token.type == tokenize.STRING and token.end[0] > token.start[0]:
                    inside.update(range(token.start[0], token.end[0]))
        except (tokenize.TokenError, SyntaxError, ValueError):
            pass
        return inside

    root = Path(__file__).resolve().parents[2]
    texts = [p.read_text(encoding="utf-8") for p in sorted([*root.glob("tests/fixtures/*/*.py"), *root.glob("core/*.py")])]
    texts += ['x = """a\nb\n', "s = 'a\\\nb'\ny = '''\n'''\n", "f(\n'''x\ny''', \"z\n", 'a = "#"\n# """\nb = 1\n']
    assert len(texts) > 100
    for code in texts:
        assert incremental._string_lines(code) == tokenizer(code), code[:200]


def _real_texts() -> list[str]:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    paths = sorted([*root.glob("tests/fixtures/*/*.py"), *root.glob("core/*.py"), *root.glob("server/*.py"), *root.glob("estimator/*.py")])
    texts = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if ast_starts(text) is not None:
            texts.append(text)
    return texts


REAL_TEXTS = _real_texts()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(REAL_TEXTS) - 1), st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.sampled_from(["(", "[", '"', ":", "'", "{"])), min_size=1, max_size=3))
@example(0, [(0.5, 1.0, "(")])
def test_statements_of_a_broken_text_from_its_edited_part_are_parsos(index: int, keys: list[tuple[float, float, str]]) -> None:
    """Whenever `starts_after_broken_edit` answers, the statements are those of parso's full
    parse of the broken text; keys typed anywhere in real files (fixtures, the core, the server),
    one after another, then deleted again."""
    text = REAL_TEXTS[index]
    builder = _built(text)
    typed: list[int] = []
    lines = text.split("\n")
    line = int(keys[0][0] * (len(lines) - 1))
    current = text
    for at, col, key in keys:
        if not typed:
            offset = sum(len(s) + 1 for s in lines[:line]) + int(col * len(lines[line]))
        else:
            offset = typed[-1] + 1 if at < 0.5 else typed[-1]  # the next key after the last, or before it
        current = current[:offset] + key + current[offset:]
        typed.append(offset)
        source = SourceText(current)
        known = builder.starts_after_broken_edit(source)
        expected = parse_statements_starts(current)
        if known is not None:
            assert chunk_lines(source, known) == chunk_lines(source, expected), (current[max(0, offset - 80) : offset + 80], key)
        builder.build(source, chunk_lines(source, expected), "t.py")
    for offset in reversed(typed):  # deleted again, last key first
        current = current[:offset] + current[offset + 1 :]
        source = SourceText(current)
        known = builder.starts_after_broken_edit(source)
        expected = parse_statements_starts(current)
        if known is not None:
            assert chunk_lines(source, known) == chunk_lines(source, expected)
        builder.build(source, chunk_lines(source, expected), "t.py")
    assert current == text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, len(REAL_TEXTS) - 1),
    st.floats(0, 1),
    st.floats(0, 1),
    st.sampled_from(["(", ")", "]", "}", ",", ":", "=", " ", "x", "lambda ", "def ", "class ", "\n", "\nx", "@", "#", "\\", '"', "'''", "return "]),
)
def test_statements_after_a_broken_edit_found_without_parsing_are_parsos(index: int, at: float, col: float, key: str) -> None:
    """`_starts_after_unit` (no parse: the edited statement was the last, or the next starts with
    `def`, `class`, `import` ...) answers only with parso's statements of the whole text; keys
    typed into the last statements of real files, where it answers most."""
    text = REAL_TEXTS[index]
    builder = IncrementalBuilder()
    source = SourceText(text)
    starts = ast_starts(text) or []
    builder.build(source, chunk_lines(source, starts), "t.py")
    lines = text.split("\n")
    line = int(starts[-2] + at * (len(lines) - 1 - starts[-2])) if len(starts) > 1 else 0
    offset = sum(len(s) + 1 for s in lines[:line]) + int(col * len(lines[line]))
    broken = text[:offset] + key + text[offset:]
    old, new = text.split("\n"), broken.split("\n")
    first, tail = incremental._line_diff(old, new)
    units = builder._good_build[1]  # type: ignore[index]
    edited = next((i for i, ((a, b), _, _) in enumerate(units) if a <= first < b), len(units) - 1)
    (a, b), _, _ = units[edited]
    if len(old) - tail > b:
        return
    known = incremental._starts_after_unit(old, new, first, len(old) - tail, a, b, [c[0] for c, _, _ in units[edited + 1 :]])
    if known is not None:
        got = chunk_lines(SourceText(broken), [c[0] for c, _, _ in units[:edited]] + [a] + known)
        assert got == chunk_lines(SourceText(broken), parse_statements_starts(broken)), (broken[max(0, offset - 80) : offset + 80], key)


@pytest.mark.parametrize("tail", ["", "\n\ndef after():\n    return 1\n"], ids=["last", "before a def"])
def test_a_broken_keystroke_in_a_table_before_a_def_or_at_the_end_takes_no_parso(monkeypatch: pytest.MonkeyPatch, tail: str) -> None:
    """A `(` typed at the end of a line of a 2,000-line dict display (a generated table: torch's
    annotated_fn_args.py) that is the file's last statement, or is followed by a `def`: no parse
    at all finds the statements (parso's would read to the end of the text), and they are parso's."""
    text = "import torch\n\nTABLE = {\n" + "".join(f"    torch.f{i}: [{{'name': 'x{i}', 'type': 'Tensor'}}],\n" for i in range(2000)) + "}\n" + tail
    builder = _built(text)
    calls: list[str] = []
    grammar = incremental.parso_grammar()
    real = grammar.parse
    monkeypatch.setattr(grammar, "parse", lambda *a, **k: calls.append("parso") or real(*a, **k))
    offset = text.index("\n    torch.f700:")
    broken = text[:offset] + "(" + text[offset:]
    known = builder.starts_after_broken_edit(SourceText(broken))
    assert calls == []
    assert known is not None and chunk_lines(SourceText(broken), known) == chunk_lines(SourceText(broken), parse_statements_starts(broken))


_METHODS = "".join(f"    def m{i}(self, x):\n        y = f(x,\n              {i})\n        return y\n\n" for i in range(40))
_NESTED = "".join(f"        def m{i}(self, x):\n            y = f(x,\n                  {i})\n            return y\n\n" for i in range(40))


@pytest.mark.parametrize(
    ("text", "markers"),
    [
        (  # a parenthesised import list; one method of a class
            "from a import (\n    b,\n    c,\n)\nimport d\n\n\nclass Big:\n" + _METHODS + "\ndef after():\n    return 1\n",
            ("    b,\n", "    def m20(self, x):\n        y = f(x,\n"),
        ),
        (  # a class in the `else:` of a top-level `if` (torch's device_mesh.py); an `except` clause; `finally`
            "import torch\n\nif not HAVE:\n    def stub():\n        return 1\nelse:\n    class Big:\n" + _NESTED
            + "try:\n    import z\nexcept ImportError:\n    z = None\n\n    def fallback(x):\n        y = g(x,\n              2)\n        return y\n"
            + "finally:\n    done = True\n\n\ndef after():\n    return 1\n",
            ("        def m20(self, x):\n            y = f(x,\n", "        y = g(x,\n", "    done = True\n"),
        ),
    ],
    ids=["body", "clauses"],
)
def test_a_broken_keystroke_parses_only_the_edited_part(monkeypatch: pytest.MonkeyPatch, text: str, markers: tuple[str, ...]) -> None:
    """A `(` typed at the end of a line: the statements come from parsing a few lines (not the
    file), and are parso's. The clauses of a block (`else:`, `except ...:`, `finally:`) are
    descended into like its body, under stand-in headers that put parso's parser there."""
    builder = _built(text)
    sizes: list[int] = []
    grammar = incremental.parso_grammar()
    real = grammar.parse
    monkeypatch.setattr(grammar, "parse", lambda code, *a, **k: sizes.append(code.count("\n")) or real(code, *a, **k))
    for marker in markers:
        offset = text.index(marker) + len(marker) - 1
        broken = text[:offset] + "(" + text[offset:]
        expected = chunk_lines(SourceText(broken), parse_statements_starts(broken))
        sizes.clear()
        known = builder.starts_after_broken_edit(SourceText(broken))
        assert known is not None and chunk_lines(SourceText(broken), known) == expected, marker
        assert max(sizes, default=0) < 20 < text.count("\n")  # none at all when no parse is needed (`_starts_after_unit`)


_CALLS = "".join(f"x{i} = CallFunction(aten.view, x{i - 1}, Ignored(), _users={i})\n" for i in range(300))
_TUPLES = "".join(f"x{i} = x{i - 1}, {i},\n" for i in range(300))  # each ends with a comma: a name may continue it


@pytest.mark.parametrize(
    ("statements", "tail", "whole", "resyncs"),
    [
        (_CALLS, "", False, False),  # nothing closes the bracket: parso's error recovery starts each statement after
        (_CALLS, "\ndef after():\n    return 1\n", False, True),  # `def` closes it (parso's tokenizer), far below the edit
        (_TUPLES, "", True, False),
        (_TUPLES, "\ndef after():\n    return 1\n", True, True),
    ],
    ids=["calls", "calls before a def", "commas", "commas before a def"],
)
def test_a_bracket_left_open_over_many_statements(monkeypatch: pytest.MonkeyPatch, statements: str, tail: str, whole: bool, resyncs: bool) -> None:
    """A `(` typed at the end of the first of 300 one-line statements (a generated table, a
    pattern file) leaves parso's tokenizer inside the bracket to the end of the text or to the
    next `def`. Where each statement ends with a bracket, parso's error recovery starts a
    statement at the identifier that begins the next (`_Chain`): a few lines are parsed. Where
    each ends with a comma, the edited part is parsed once, to the end of the text or the
    `def` (no window grown statement by statement). The diff parser is not asked, and the
    statements are those of a full parse."""
    text = "import torch\n\n" + statements + tail
    builder = _built(text)
    offset = text.index("\nx1 = ")
    broken = text[:offset] + "(" + text[offset:]
    expected = chunk_lines(SourceText(broken), parse_statements_starts(broken))
    calls: list[tuple[bool, int]] = []
    grammar = incremental.parso_grammar()
    real = grammar.parse
    monkeypatch.setattr(grammar, "parse", lambda code, *a, **k: calls.append((bool(k.get("diff_cache")), code.count("\n"))) or real(code, *a, **k))
    known = builder.starts_after_broken_edit(SourceText(broken))
    assert known is not None and chunk_lines(SourceText(broken), known) == expected
    assert not any(diff for diff, _ in calls)
    if whole:
        assert len(calls) == 1 and calls[0][1] >= 300
    else:
        assert 0 < len(calls) <= 3 and max(size for _, size in calls) < 10
    assert (known[-1] == broken.count("\n") - 2) is resyncs  # `def after()` starts a statement of its own


KINDS_BASE = """import torch


class Trainer:
    def fit(self, model, opt, data):
        for x in data:
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()


class Other:
    def fit(self, model, opt, data):
        return len(data)


class Runner:
    def setup(self):
        self.trainer = Other()
        self.size = 10

    def run(self, model, opt, data):
        for epoch in range(3):
            self.trainer.fit(model, opt, data)
"""


def test_what_each_function_may_reach_is_carried_until_a_call_resolves_otherwise() -> None:
    # `TrainingModel.carry_kinds`: a digit typed in `setup` leaves every call's target as it was, so the bits
    # of the last version are the answer; `Other()` -> `Trainer()` there makes `run`'s unchanged call reach
    # `Trainer.fit`, so its own kinds are found again
    from torch_preflight.core.semantic import EventKind
    from torch_preflight.core.training import TrainingModel

    doc = Document("file:///tmp/prop/kinds.py", KINDS_BASE, 0)
    config = Config(select=("ALL",))
    doc.analysis(config)

    def kinds() -> tuple[TrainingModel, dict[str, int]]:
        training = doc.scoped._training
        assert training is not None
        training.may_hold("Runner.run", EventKind.STEP)
        fresh = TrainingModel(build(ast.parse(doc.text), SourceText(doc.text), doc.path))
        fresh.may_hold("Runner.run", EventKind.STEP)
        assert training._kinds == fresh._kinds
        return training, training._kinds

    before, bits = kinds()
    assert not before.may_train("Runner.run")
    insert_and_compare(doc, config, "0\n", "1", 1)  # self.size = 110
    after, same = kinds()
    assert after is not before and after._kinds_before is not None and same == bits
    insert_and_compare(doc, config, "Other()\n        self.size", "Trainer()  # ", 2)
    changed, _ = kinds()
    assert changed._kinds_before is None  # `run`'s call resolves otherwise: nothing carried
    assert changed.may_train("Runner.run")
    doc.close()


_TABLE = (
    "import torch\n\nfrom other import helper\n\n"
    + "ARGS = {\n"
    + "".join(f"    torch.f{i}: [{{'name': 'x{i}', 'n': {i}}}, helper({i})],\n" for i in range(600))
    + "    # generated\n"
    + "}\n"
)


@pytest.mark.parametrize("key", ["(", "[", "+", ")", "x(", ":", "'", "lambda"])
@pytest.mark.parametrize("where", [0.1, 0.5, 0.97])
def test_a_keystroke_in_a_long_display_matches_full_analysis_and_repairs_its_element_alone(monkeypatch: pytest.MonkeyPatch, key: str, where: float) -> None:
    """A key typed at the end of one element's line of a 600-line dict display (a generated
    table), then deleted: the server's result equals a fresh `analyze()` each time (the
    element's lines repaired alone, `_repair_display`, in both), and while the language server
    repairs it, no text of the size of the statement is parsed: the element's own lines are
    parsed, and a bracket left open there is known to break the statement from those lines'
    tokens (`_reparse_display`)."""
    doc = Document("file:///tmp/table/args.py", _TABLE, 0)
    config = Config()
    doc.analysis(config)
    lines = _TABLE.split("\n")
    line = 5 + int(where * 599)
    sizes: list[int] = []
    real = ast.parse
    monkeypatch.setattr(incremental.ast, "parse", lambda code, *a, **k: sizes.append(len(code.strip("\n"))) or real(code, *a, **k))
    for version, (typed, deleted) in enumerate([(key, 0), ("", len(key))], start=1):
        col = len(lines[line])
        rng = types.Range(start=types.Position(line, col), end=types.Position(line, col + deleted))
        doc.update([types.TextDocumentContentChangePartial(range=rng, text=typed)], version, convert.UTF16)
        sizes.clear()
        got = doc.analysis(config)
        if key == "(" and typed:
            assert got.syntax_errors and max(sizes) < 1_000
        monkeypatch.setattr(incremental.ast, "parse", real)
        full = analyze(doc.text, doc.path, config)
        monkeypatch.setattr(incremental.ast, "parse", lambda code, *a, **k: sizes.append(len(code.strip("\n"))) or real(code, *a, **k))
        assert diagnostics(got) == diagnostics(full) and got.syntax_errors == full.syntax_errors, (key, where, typed)
    assert doc.text == _TABLE
    doc.close()


def test_a_display_whose_element_lines_are_not_its_elements_is_repaired_whole() -> None:
    """Lines at the elements' indentation that do not each hold whole elements (a key on one
    line, its value on the next) are no split of the display: two of them do not parse alone,
    and the statement is repaired as a whole, as before."""
    code = "T = {\n    'a':\n    1,\n    'b': 2,(\n}\n"
    assert incremental._display_members(code) is not None
    assert incremental._repair_display(0, code) is None
    whole = incremental._parse_chunk(0, code)
    assert whole.errors
    table = "T = {\n    'a': 1,\n    'b': 2,(\n    'c': 3,\n}\n"
    parsed = incremental._repair_display(0, table)
    assert parsed is not None and parsed.errors and parsed.restored == table.replace(",(", ",")
    assert ast.dump(parsed.body[0]) == ast.dump(ast.parse(parsed.restored).body[0])


def test_a_key_typed_into_the_first_token_of_a_decorated_definition_is_left_to_parso() -> None:
    """`d(ef model():` under `@fixture`: the edit changes the token its line starts with, so the
    line after the decorator may start a statement of its own; `_starts_after_unit` does not
    answer from the lines alone, and what `starts_after_broken_edit` answers is parso's."""
    text = "import x\n\n\n@fixture\ndef model():\n    return 1\n\n\ndef after():\n    return 2\n"
    broken = text.replace("def model", "d(ef model")
    old, new = text.split("\n"), broken.split("\n")
    assert incremental._starts_after_unit(old, new, 4, 5, 3, 8, [8]) is None
    builder = _built(text)
    known = builder.starts_after_broken_edit(SourceText(broken))
    if known is not None:
        assert chunk_lines(SourceText(broken), known) == chunk_lines(SourceText(broken), parse_statements_starts(broken))


_QUIET_TABLE = _TABLE.replace("helper(", "(helper, ")  # no call: the model reads its elements' names once (`_PieceBuilder.walked`)


@pytest.mark.parametrize("table", [_TABLE, _QUIET_TABLE], ids=["calls", "no calls"])
@pytest.mark.parametrize(("old", "new"), [("'n': 300}", "'n': 3001}"), ("301)]", "301), {'n': 7}]"), (", helper(302)]", "]"), ("'n': 303}", "'n': 303, 7}")])
def test_a_keystroke_in_a_long_display_parses_its_element_alone(monkeypatch: pytest.MonkeyPatch, table: str, old: str, new: str) -> None:
    """A digit typed into one element of a 600-line dict display, an element added to its list,
    one taken away, an element that breaks the dict (`, 7`): only that element's lines are
    parsed (`_reparse_display`; the broken one's repair is its own, `_repair_display`), and the
    tree, the model and the findings equal a fresh parse's, build's and `analyze()`'s."""
    doc = Document("file:///tmp/table/args.py", table, 0)
    config = Config()
    doc.analysis(config)
    old = old if old in table else old.replace("helper(", "(helper, ")
    offset = table.index(old)
    line = table.count("\n", 0, offset)
    col = offset - (table.rfind("\n", 0, offset) + 1)
    sizes: list[int] = []
    real = ast.parse
    monkeypatch.setattr(incremental.ast, "parse", lambda code, *a, **k: sizes.append(len(code.strip("\n"))) or real(code, *a, **k))
    rng = types.Range(start=types.Position(line, col), end=types.Position(line, col + len(old)))
    doc.update([types.TextDocumentContentChangePartial(range=rng, text=new)], 1, convert.UTF16)
    got = doc.analysis(config)
    assert sizes and max(sizes) < 1_000
    monkeypatch.setattr(incremental.ast, "parse", real)
    full = analyze(doc.text, doc.path, config)
    assert diagnostics(got) == diagnostics(full) and got.syntax_errors == full.syntax_errors
    assert bool(got.syntax_errors) == new.endswith(", 7}")
    if not got.syntax_errors:
        assert got.model is not None and ast.dump(got.model.tree, include_attributes=True) == ast.dump(ast.parse(doc.text), include_attributes=True)
        fresh = build(ast.parse(doc.text), SourceText(doc.text), doc.path)
        assert got.model.functions == fresh.functions
        assert _flow_shape(DataFlow.of(got.model)) == _flow_shape(DataFlow(build(got.model.tree, SourceText(doc.text), doc.path)))
        assert len(got.model.__dict__["_tpf_dataflow_elements"]) >= 600  # each element read once, then kept
    doc.close()


_SHAPES = [
    "T = {\n" + "".join(f"    'k{i}': [{i}, f({i})],  # c\n" for i in range(30)) + "}\n",
    "M = OrderedDict([\n" + "".join(f"    (\"a{i}\", (\"b{i}\", X, Y)),\n" for i in range(30)) + "    (\"z\", 1)\n])\n",
    "S = {\n" + "".join(f"    {i} + g(\n        {i}),\n" for i in range(30)) + "}\n",
]


@settings(max_examples=400, deadline=None)
@given(st.integers(0, len(_SHAPES) - 1), st.floats(0, 1), st.floats(0, 1), st.sampled_from(["(", ")", ",", ":", "+", "'", '"""', "#", "\\", "1", " ", "lambda", "**", "}", "]", "x for x in y", ", 7", "\n", "'a': "]))
def test_a_display_element_parsed_alone_is_what_the_whole_statement_parses_into(shape: int, at: float, col: float, key: str) -> None:
    """`_reparse_display` answers only as `ast.parse` of the whole statement does: the same tree
    when it gives one, a statement that does not parse when it says False."""
    code = _SHAPES[shape]
    start = 3
    old = incremental._parse_alone(start, code)
    assert old is not None
    lines = code.split("\n")
    row = 1 + int(at * (len(lines) - 3))
    offset = sum(len(s) + 1 for s in lines[:row]) + int(col * len(lines[row]))
    new = code[:offset] + key + code[offset:]
    got = incremental._reparse_display(start, code, old, new)
    whole = incremental._body_of("\n" * start + new)
    if got is False:
        assert whole is None, new
    elif got is not None:
        assert whole is not None and [ast.dump(n, include_attributes=True) for n in got.body] == [ast.dump(n, include_attributes=True) for n in whole]


# Members of long displays (one line each, `{i}` its number) and the displays that hold them, for
# `_display_reaches`: `expr` elements it may leave unparsed, and others it must not.
_MEMBERS = {
    "list": ['("a{i}", ("b{i}", X, Y)),', "x{i},", "-{i},", "f(x{i}).y[{i}],", "{i}, {i} + 1,", "lambda: {i},", "a{i} < b,", "*x{i},", "x{i} if c else y,", "[v for v in r{i}],", "not x{i},"],
    "dict": ["'k{i}': [{i}, f({i})],", "x{i}: -{i},", "({i}, 1): lambda: {i},", "**d{i},", "k{i} if c else j: {i},"],
}
_OPENERS = {"list": [("L = [", "]"), ("M = collections.OrderedDict([", "])"), ("T = (", ")"), ("S = {", "}")], "dict": [("D = {", "}"), ("D = dict({", "})")]}
_AFTER = [
    "Y = f(x)", "Y = x", "Y = 1", "Y = 'two'", "Y = None", "Y = x,", "Y: int", "Y += [1]", "raise", "print(x); z = 1", "from m import n",
    "import m", "def f():\n    return 1", "@dec\ndef g():\n    pass", "if c:\n    z = 1", '"""doc"""', "match = 1", "Y = [\n    1,\n]", "Y = yield",
    "async def h():\n    pass", "class C:\n    pass", "Y = a if b else c", "Y = lambda: x", "Y = x  # note", "Y = 2.", "Y = ...",
    "if c:\n    z = 1\n    w = 2\nelse:\n    v = 3", "for i in r:\n    a = 1\n    b = 2\nelse:\n    pass",
    "match x:\n    case 1:\n        a = 1\n        b = 2\n    case _:\n        pass",
]
_TYPED = ["(", "[", "{", ")", "]", "}", ",", ":", "=", "x", "lambda ", "if ", "not ", "*", "**", " ", "1", "(x", "= (", "for ", "\n", "\n)"]


@st.composite
def _tables(draw: st.DrawFn) -> tuple[str, int, str]:
    kind = draw(st.sampled_from(sorted(_MEMBERS)))
    opener, closer = draw(st.sampled_from(_OPENERS[kind]))
    plain = _MEMBERS[kind][:3] if kind == "list" else _MEMBERS[kind][:2]
    mixed = draw(st.booleans())  # else `expr` elements only
    members = [draw(st.sampled_from(_MEMBERS[kind] if mixed and draw(st.booleans()) else plain)) for _ in range(draw(st.integers(4, 40)))]
    after = [*(["Y0 = f(x)"] if draw(st.booleans()) else []), *draw(st.lists(st.sampled_from(_AFTER), max_size=5))]
    text = "import torch\n\n" + opener + "\n" + "".join(f"    {m.format(i=i)}\n" for i, m in enumerate(members)) + closer + "\n" + "".join(f"{s}\n" for s in after)
    return text, 3 + draw(st.integers(0, len(members) - 1)), draw(st.sampled_from(_TYPED))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tables(), st.floats(0, 1))
@example(("import torch\n\nM = collections.OrderedDict([\n" + "".join(f'    ("a{i}", ("b{i}", X, Y)),\n' for i in range(20)) + "])\nY = f(x)\nY = 1\n", 6, "("), 1.0)
def test_statements_after_a_key_typed_into_a_table_are_parsos(table: tuple[str, int, str], col: float) -> None:
    """A key typed into a member of a long display followed by other statements: whenever
    `starts_after_broken_edit` answers (from a few members of the table, `_display_reaches`, or a
    parse of the table and the statements after it, `_Chain`), the statements are parso's."""
    text, row, key = table
    lines = text.split("\n")
    offset = sum(len(s) + 1 for s in lines[:row]) + int(col * len(lines[row]))
    broken = text[:offset] + key + text[offset:]
    known = _built(text).starts_after_broken_edit(SourceText(broken))
    if known is not None:
        assert chunk_lines(SourceText(broken), known) == chunk_lines(SourceText(broken), parse_statements_starts(broken)), broken


_SIMPLE_STATEMENTS = [
    "x{i} = f(x{i})", "x{i} = x", "x{i} = {i}", "x{i} = 's'", "x{i} = None", "x{i} = a, {i},", "x{i}: int", "x{i} += [{i}]", "print(x{i}); z = 1",
    "x{i} = (\n    {i},\n)", "x{i} = a if b else c", "x{i} = lambda: {i}", "x{i} = yield", "x{i} = not y", "x{i} = ...", "x{i} = 2.",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from([*_SIMPLE_STATEMENTS, *_AFTER]), min_size=2, max_size=30),
    st.floats(0, 1),
    st.floats(0, 1),
    st.sampled_from(_TYPED),
)
def test_statements_after_a_bracket_left_open_among_simple_statements_are_parsos(statements: list[str], at: float, col: float, key: str) -> None:
    """A key typed into one of many top-level statements, most of them simple ones that begin
    with a name (a pattern file, a module of constants): whenever `starts_after_broken_edit`
    answers (`_resynchronised` with `_Chain`: a statement of the module parso's error recovery
    starts inside a bracket), the statements are parso's."""
    text = "import torch\n" + "".join(f"{s.format(i=i)}\n" for i, s in enumerate(statements))
    lines = text.split("\n")
    row = 1 + int(at * (len(lines) - 2))
    offset = sum(len(s) + 1 for s in lines[:row]) + int(col * len(lines[row]))
    broken = text[:offset] + key + text[offset:]
    known = _built(text).starts_after_broken_edit(SourceText(broken))
    if known is not None:
        assert chunk_lines(SourceText(broken), known) == chunk_lines(SourceText(broken), parse_statements_starts(broken)), broken


def test_a_broken_keystroke_deep_in_a_table_before_other_tables_parses_a_few_members(monkeypatch: pytest.MonkeyPatch) -> None:
    """A `(` typed at the end of a line deep in a 2,000-member table followed by other tables
    (torch's cuda_to_hip_mappings.py): parso's tokenizer stays inside the bracket to the end of
    the text, yet the statements come from a parse of ten lines (`_display_reaches`), and are
    parso's."""
    table = "".join(f'    ("cuda{i}", ("hip{i}", CONV_TYPE, API_RUNTIME)),\n' for i in range(2000))
    text = "import collections\n\nMAP = collections.OrderedDict([\n" + table + "])\n\nOTHER = collections.OrderedDict([\n" + table + "])\n\nLAST = [x for x in OTHER]\n"
    builder = _built(text)
    rows: list[int] = []
    grammar = incremental.parso_grammar()
    real, reaches = grammar.parse, incremental._parse_reaches
    monkeypatch.setattr(grammar, "parse", lambda *a, **k: rows.append(-1) or real(*a, **k))
    monkeypatch.setattr(incremental, "_parse_reaches", lambda r, *a: rows.append(len(r)) or reaches(r, *a))
    offset = text.index('\n    ("cuda1200"')
    broken = text[:offset] + "(" + text[offset:]
    known = builder.starts_after_broken_edit(SourceText(broken))
    assert rows == [10]
    assert known is not None and chunk_lines(SourceText(broken), known) == chunk_lines(SourceText(broken), parse_statements_starts(broken))
