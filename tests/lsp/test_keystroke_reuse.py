"""What a keystroke may leave alone (issue 19): the repair of a bracket typed inside another
statement's brackets, statements parso's error recovery starts on an indented line, an import
whose text changed but not what it brings in, the callees of an edited function that it passes
the same values, and findings that read another file of the project. Each re-checks less and
still equals a fresh analysis."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from torch_preflight.core import members
from torch_preflight.core.config import Config
from torch_preflight.core.incremental import chunk_lines
from torch_preflight.core.members import Names, Uses, member_names, passes_changed, uses_of
from torch_preflight.core.parse import parse
from torch_preflight.core.project import Project
from torch_preflight.core.source import SourceText
from torch_preflight.server import convert
from torch_preflight.server.documents import Document

from torch_preflight import scoped
from torch_preflight.analyze import analyze


def _other_callers(callee: str, arg: str, loop: str, names: tuple[str, ...]) -> str:
    """Functions that each call `callee` alike, one per name: the other callers an edit must leave alone."""
    return "".join(f"\n\ndef {name}({arg}):\n    for {loop} in range(3):\n        {callee}({arg})\n        print({loop})\n" for name in names)


IMPORTS = """from utils import (
    CFG,
    RANK,
    LOGGER,
)
import torch


def train(model, loader, optimizer):
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
"""

SIGNATURE = """class Saver:
    def save(
        self,
        path,
        state=None,
    ) -> None:
        import json

        json.dump(state, open(path, "w"))
"""


def _typed(text: str, line: int, key: str = "(") -> str:
    lines = text.split("\n")
    lines[line] += key
    return "\n".join(lines)


def _dump(text: str) -> str:
    return ast.dump(parse(SourceText(text)).tree)


def test_a_bracket_typed_into_a_multiline_import_is_dropped_not_the_import() -> None:
    result = parse(SourceText(_typed(IMPORTS, 2)))  # `    RANK,(`
    assert result.errors and not result.repaired
    assert ast.dump(result.tree) == _dump(IMPORTS)


def test_a_bracket_typed_into_a_signature_keeps_the_method() -> None:
    result = parse(SourceText(_typed(SIGNATURE, 4)))  # `        state=None,(`
    assert result.errors and not result.repaired
    assert ast.dump(result.tree) == _dump(SIGNATURE)


def test_a_bracket_typed_after_a_block_header_keeps_the_block() -> None:
    text = 'class T:\n    def make(self) -> Type["T"]:\n        """Docs."""\n        x = self.load()\n        return x\n'
    result = parse(SourceText(_typed(text, 1)))  # `def make(self) -> Type["T"]:(`
    assert result.errors and not result.repaired
    assert ast.dump(result.tree) == _dump(text)


def test_a_bracket_that_opens_an_indented_continuation_is_kept() -> None:
    # `g(` is followed by a line indented deeper: a bracket meant to open there, not dropped (the
    # outer one is closed where it opened, as before, and the rest parses on its own)
    result = parse(SourceText("y = f(\n    g(\n        1,\n    ),\n"))
    assert ast.unparse(result.tree) == "y = f()\n(g(1),)"


def test_a_statement_starting_on_an_indented_line_joins_the_one_before() -> None:
    source = SourceText(_typed(IMPORTS, 2))
    assert chunk_lines(source, [0, 3, 5, 6]) == [(0, 5), (5, 6), (6, len(source.line_starts))]


def _edit(doc: Document, line: int, col: int, text: str, version: int) -> None:
    at = types.Position(line=line, character=col)
    doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=text)], version, convert.UTF16)


def _same_as_fresh(doc: Document, config: Config, project: Project | None = None) -> None:
    got = doc.analysis(config)
    full = analyze(doc.text, doc.path, config, project=project)
    assert [(d.code, d.span, d.message) for d in got.diagnostics] == [(d.code, d.span, d.message) for d in full.diagnostics]
    assert got.syntax_errors == full.syntax_errors


ALL = Config(select=("ALL",))


def _type_into(uri: str, source: str, line_text: str, before: str, text: str) -> Document:
    """`source` opened and analysed, then `text` typed after `before` on the line that reads `line_text`:
    the document, whose analysis is checked to equal a fresh one."""
    doc = Document(uri, source, 0)
    doc.analysis(ALL)
    _edit(doc, source.split("\n").index(line_text), len(before), text, 1)
    _same_as_fresh(doc, ALL)
    return doc


def test_a_bracket_typed_into_an_import_rechecks_that_import_only() -> None:
    doc = Document("file:///tmp/reuse/imports.py", IMPORTS, 0)
    config = Config(select=("ALL",))
    assert "TPF001" in {d.code for d in doc.analysis(config).diagnostics}
    doc.prime()
    _edit(doc, 2, len("    RANK,"), "(", 1)
    _same_as_fresh(doc, config)
    assert doc.scoped.rechecked == 0 and doc.builder.rebuilt == 0  # the repair undid the keystroke: the last good import stands
    assert doc.analysis(config).syntax_errors  # and the error is reported
    assert "TPF001" in {d.code for d in doc.analysis(config).diagnostics}  # the loop below keeps its finding
    _edit(doc, 2, len("    RANK,("), "  # rank", 2)  # the import's text changes, not what it brings in
    _same_as_fresh(doc, config)
    assert doc.scoped.rechecked == 1 and doc.builder.rebuilt == 1
    doc.close()


CALLEES = """import torch


def make(model, lr):
    return torch.optim.SGD(model.parameters(), lr=lr)


def run_a(model, loader):
    optimizer = make(model, 0.1)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()


def run_b(model, loader):
    optimizer = make(model, 0.2)
    for x in loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()


def run_c(model, loader):
    optimizer = make(model, 0.3)
    for x in loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
"""


def test_a_digit_typed_in_a_caller_leaves_the_callees_other_callers_alone() -> None:
    doc = Document("file:///tmp/reuse/callees.py", CALLEES, 0)
    config = Config(select=("ALL",))
    before = doc.analysis(config)
    assert [d.span.start.line for d in before.diagnostics if d.code == "TPF001"] == [9]
    units = len(doc.builder.units)
    line = CALLEES.split("\n").index("    optimizer = make(model, 0.1)")
    _edit(doc, line, len("    optimizer = make(model, 0."), "5", 1)  # 0.1 -> 0.51: make() receives what it received
    _same_as_fresh(doc, config)
    assert doc.scoped.rechecked == 2 < units - 2  # run_a and make (checked again: a caller changed), not run_b nor run_c
    _edit(doc, line, len("    optimizer = make("), "x or ", 2)  # make(x or model, ...): what make() receives changed
    _same_as_fresh(doc, config)
    assert doc.scoped.rechecked >= 4  # make's other callers too
    doc.close()


HELPERS = """def step(model, batch, optimizer):
    model(batch).sum().backward()
    optimizer.step()
"""
TRAIN = """import torch

from helpers import step


def train(model, loader, optimizer):
    for batch in loader:
        step(model, batch, optimizer)


def evaluate(model, loader):
    model.eval()
    for batch in loader:
        print(model(batch))
"""


def test_findings_that_read_another_file_are_kept_until_it_changes(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    (tmp_path / "helpers.py").write_text(HELPERS, encoding="utf-8")
    project = Project()
    doc = Document((tmp_path / "train.py").as_uri(), TRAIN, 0, project=project)
    config = Config(select=("ALL",))
    assert "TPF001" in {d.code for d in doc.analysis(config).diagnostics}  # step() steps without clearing
    assert doc.analysis(config).dependencies
    line = TRAIN.split("\n").index("        print(model(batch))")
    _edit(doc, line, len("        print("), "1 + ", 1)
    _same_as_fresh(doc, config, Project(overrides=dict(project.overrides)))
    assert doc.scoped.rechecked == 1  # evaluate() only: train()'s finding, read from helpers.py, is carried
    project.overrides[str(tmp_path / "helpers.py")] = HELPERS.replace("    optimizer.step()\n", "    optimizer.zero_grad()\n    optimizer.step()\n")
    _edit(doc, line, len("        print("), "2 + ", 2)
    _same_as_fresh(doc, config, Project(overrides=dict(project.overrides)))
    assert doc.scoped.rechecked == len(doc.builder.units)  # the file the findings read changed: all of them again
    assert "TPF001" not in {d.code for d in doc.analysis(config).diagnostics}
    doc.close()


OVERLOADS = '''import torch
from typing import overload


class Ops(Handler):
    """Ops."""

    @overload
    def fallback(
    ) -> Result: ...

    def fallback(
    ) -> Result:
        return self.wrap(getattr(self._inner, name)(*args))

    def statically_true(self, e):
        """


        """
        ranges = (
            *(
                (k, Ranges(0, v - 1))
                for k, v in self.ranges.items()
            ),
        )
        return known_true(self.env, e, ranges)
'''


def test_a_method_defined_again_keeps_its_function_when_the_first_definition_breaks() -> None:
    # the second `def fallback` was cached (core/incremental.py `_Method`) while it redefined the
    # first: replayed alone, it must still define the qualname its class's methods point to
    doc = Document("file:///tmp/reuse/overloads.py", OVERLOADS, 0)
    config = Config(select=("ALL",))
    doc.analysis(config)
    doc.prime()
    line = OVERLOADS.split("\n").index("    def fallback(")
    for version, key in enumerate(["(", ")"], start=1):
        _edit(doc, line, len("    def fallback("), key, 2 * version)
        _same_as_fresh(doc, config)
        at = types.Position(line=line, character=len("    def fallback("))
        end = types.Position(line=line, character=len("    def fallback(") + 1)
        doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=at, end=end), text="")], 2 * version + 1, convert.UTF16)
        _same_as_fresh(doc, config)
    doc.close()


TYPES = """class Step:
    def __init__(self, n):
        self.n = n


def make(n: int) -> Step:
    return Step(n)


def first(steps: list[Step]) -> Step:
    return steps[0]


def last(steps: list[Step]) -> Step:
    return steps[-1]


def pick(x):
    if isinstance(x, Step):
        return x.n + 1
    return 0
"""


def test_a_type_check_or_an_annotation_passes_a_class_nothing() -> None:
    doc = _type_into("file:///tmp/reuse/types.py", TYPES, "        return x.n + 1", "        return x.n + ", "2")
    assert doc.scoped.rechecked == 2  # pick() and Step (checked again as a callee), not make/first/last
    doc.close()


RETURNS = """import torch


def scale(x):
    y = x * 2
    print("scaling", 1)
    return y


def run(model, loader, optimizer):
    for x in loader:
        x = scale(x)
        loss = model(x).sum()
        report(loss)
        loss.backward()
        optimizer.step()


def report(loss):
    print(loss)
""" + _other_callers("report", "loss", "step", ("watch", "audit", "trace"))


def test_a_function_that_returns_the_same_values_changes_its_callers_not_what_they_pass_on() -> None:
    doc = Document("file:///tmp/reuse/returns.py", RETURNS, 0)
    config = Config(select=("ALL",))
    assert [d.span.start.line for d in doc.analysis(config).diagnostics if d.code == "TPF001"]
    line = RETURNS.split("\n").index('    print("scaling", 1)')
    _edit(doc, line, len('    print("scaling", '), "2", 1)  # scale() returns what it returned
    _same_as_fresh(doc, config)
    assert doc.scoped.rechecked == 3  # scale, run (it inlines scale) and report (checked again: a caller changed), not report's other callers
    _edit(doc, line - 1, len("    y = x * 2"), " + x", 2)  # y = x * 2 + x: what scale() returns changed
    _same_as_fresh(doc, config)
    assert doc.scoped.rechecked == 7  # report receives another loss from run: its other callers too
    doc.close()


DECORATED = """import torch


def flip(x):
    return kernel(flip, x)


@register(flip, torch.Tensor)
def flip_image(image):
    return image.flip(-1)


@register(flip, list)
def flip_list(items):
    return items[::-1]


@register(flip, tuple)
def flip_tuple(items):
    return tuple(flip_list(list(items)))


@register(flip, dict)
def flip_dict(items):
    keys = list(items)
    return {k: items[k] for k in keys[::-1]}


@register(flip, str)
def flip_str(text):
    chars = list(text)
    return "".join(chars[::-1])


def kernel(fn, x):
    return fn(x)
"""


def test_a_decorator_passes_the_names_it_reads_nothing_of_the_function() -> None:
    uses = uses_of(ast.parse(DECORATED).body[3])  # flip_list
    assert passes_changed(uses, frozenset({"flip_image"})) == frozenset({"items"})  # what the body reads as a value
    assert passes_changed(uses, frozenset({"list"})) == frozenset({"register", "flip", "list", "items"})
    doc = _type_into("file:///tmp/reuse/decorated.py", DECORATED, "    return items[::-1]", "    return items[::-", "2")  # items[::-21]
    assert doc.scoped.rechecked == 3  # flip_list, its caller flip_tuple and flip (read there), not flip's other registrations
    doc.close()


def test_a_definition_takes_back_its_decorators_from_a_broken_statement_before() -> None:
    broken = _typed(DECORATED, DECORATED.split("\n").index("    return kernel(flip, x)"))  # `kernel(flip, x)(`
    source = SourceText(broken)
    decorator = broken.split("\n").index("@register(flip, torch.Tensor)")
    # parso's recovery runs the unclosed bracket over the decorator: the statement after starts at the `def`
    assert chunk_lines(source, [0, 3, decorator + 1]) == [(0, 3), (3, decorator), (decorator, len(source.line_starts))]
    doc = _type_into("file:///tmp/reuse/decorated.py", DECORATED, "    return kernel(flip, x)", "    return kernel(flip, x)", "(")
    assert doc.builder.units[2][1].startswith("@register(flip, torch.Tensor)\n")
    doc.close()


METHODS = """import torch


def clip(x):
    return x


def log(x):
    print(x)


class Trainer:
    def __init__(self, model):
        self.model = model

    def step(self, loader, optimizer):
        for x in loader:
            loss = self.model(clip(x)).sum()
            log(loss)
            loss.backward()
            optimizer.step()

    def report(self, n):
        log(n * 2)
""" + _other_callers("log", "v", "k", ("audit", "watch", "trace", "probe", "count"))


def test_a_digit_typed_in_a_method_leaves_the_callees_other_callers_alone() -> None:
    doc = Document("file:///tmp/reuse/methods.py", METHODS, 0)
    config = Config(select=("ALL",))
    assert "TPF001" in {d.code for d in doc.analysis(config).diagnostics}
    line = METHODS.split("\n").index("        log(n * 2)")
    _edit(doc, line, len("        log(n * 2"), "3", 1)  # log() receives what it received
    _same_as_fresh(doc, config)
    assert doc.scoped.rechecked == 3  # Trainer, and clip and log (checked again: a caller changed), not log's other callers
    _edit(doc, line, len("        log("), "self.model or ", 2)  # log(self.model or n * 23): another value
    _same_as_fresh(doc, config)
    assert doc.scoped.rechecked == len(doc.builder.units)  # log's other callers too: the whole module
    doc.close()


def test_a_class_read_again_finds_the_uses_of_its_kept_methods_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A class's `Uses` (what `_dirty` narrows the callees it spreads to by) is its methods'
    together: after an edit of one method, the others are the very nodes of the last version,
    and the `Uses` found of the edited one are not found again."""
    asked: list[str] = []

    def counting(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Uses:
        asked.append(fn.name)
        return uses_of(fn)

    monkeypatch.setattr(scoped, "uses_of", counting)
    doc = Document("file:///tmp/reuse/methods.py", METHODS, 0)
    doc.analysis(ALL)
    lines = METHODS.split("\n")
    report, log = lines.index("        log(n * 2)"), lines.index("    print(x)")
    _edit(doc, report, len("        log(n * 2"), "3", 1)
    _same_as_fresh(doc, ALL)
    assert asked.count("report") == 2  # its two versions
    asked.clear()
    _edit(doc, log, len("    print(x"), " or 1", 2)  # `print(x or 1)`: Trainer reads `log`, and spreads
    _same_as_fresh(doc, ALL)
    assert "report" not in asked and "step" in asked  # the edited Trainer's Uses: its kept methods found, the edited one not again
    doc.close()


@pytest.mark.parametrize(
    ("extra", "before"),
    [
        # the class, then another class: `settled_members` keeps a memo per class
        ("\n\nclass Logger:\n    def write(self, x):\n        print(x)\n", [("        log(n * 2", "3"), ("        print(x", " or 1")]),
        # a function the class calls: the narrowing found the `Uses` of the class's methods, kept while their nodes stay
        ("", [("    print(x", " or 1")]),
    ],
)
def test_an_edit_of_a_method_after_edits_elsewhere_walks_that_method_s_names_only(
    monkeypatch: pytest.MonkeyPatch, extra: str, before: list[tuple[str, str]]
) -> None:
    """`settled_members` reads the names of every method of the edited class; only the edited
    method's new version is walked, also when the last edits were in another statement."""
    walked: list[str] = []

    def counting(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Names:
        walked.append(fn.name)
        return member_names(fn)

    monkeypatch.setattr(members, "member_names", counting)
    text = METHODS + extra
    doc = Document("file:///tmp/reuse/methods.py", text, 0)
    doc.analysis(ALL)
    lines = text.split("\n")
    for version, (at, typed) in enumerate([*before, ("        log(n * 2", "4")], 1):
        if version == len(before) + 1:
            walked.clear()
        _edit(doc, next(i for i, line in enumerate(lines) if line.startswith(at)), len(at), typed, version)
        _same_as_fresh(doc, ALL)
    assert walked == ["report"]
    doc.close()


MODULES = """import torch.nn as nn

WIDTH = 64


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(WIDTH, WIDTH) for _ in range(3)]


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(WIDTH, WIDTH)])
"""


@pytest.mark.parametrize(("rule", "facts"), [("unregistered_submodules", "_candidates"), ("missing_super_init", "_init_facts")])
def test_a_rule_s_facts_of_a_class_are_kept_while_another_statement_is_edited(monkeypatch: pytest.MonkeyPatch, rule: str, facts: str) -> None:
    """TPF101 and TPF102 read each module class's own nodes (`DataFlow.statement_memo`): an edit of
    the constant both classes read checks them again, and finds those facts kept with their pieces."""
    module = importlib.import_module(f"torch_preflight.rules.model.{rule}")
    walked: list[str] = []
    search = getattr(module, facts)

    def counting(*args: Any) -> Any:
        walked.append(args[-1].name)
        return search(*args)

    monkeypatch.setattr(module, facts, counting)
    doc = Document("file:///tmp/reuse/modules.py", MODULES, 0)
    assert [d.code for d in doc.analysis(ALL).diagnostics].count("TPF101") == 1  # Encoder's plain list
    assert sorted(walked) == ["Decoder", "Encoder"]
    walked.clear()
    _edit(doc, MODULES.split("\n").index("WIDTH = 64"), len("WIDTH = 64"), "0", 1)
    doc.analysis(ALL)
    assert doc.scoped.rechecked == len(doc.builder.units)  # the classes read WIDTH: the whole module
    assert walked == []
    _same_as_fresh(doc, ALL)
    doc.close()


def test_the_names_of_a_split_statement_are_those_of_the_whole_walk() -> None:
    """`scoped._unit` reads a class's or a top-level block's names statement by statement
    (`_split_names`, kept per node): the same binds, reads and plainness as one walk of it,
    for every top-level statement of the project's sources and fixtures."""
    root = Path(__file__).resolve().parents[2]
    paths = sorted([*root.glob("tests/fixtures/*/*.py"), *root.glob("core/*.py"), *root.glob("torch_preflight/*.py"), *root.glob("tests/lsp/*.py")])
    checked = 0
    for path in paths:
        for stmt in ast.parse(path.read_text(encoding="utf-8")).body:
            whole, split = scoped._unit("", [stmt]), scoped._unit("", [stmt], {})
            assert (split.binds, split.reads, split.plain) == (whole.binds, whole.reads, whole.plain), (path, stmt.lineno)
            checked += isinstance(stmt, (ast.If, ast.Try, ast.With, ast.ClassDef))
    assert checked > 100


def test_an_edit_in_a_function_under_if_walks_that_function_s_names_only(monkeypatch: pytest.MonkeyPatch) -> None:
    source = "import torch\n\nif torch.cuda.is_available():\n" + "".join(f"    def f{i}(x):\n        return x * {i}\n\n" for i in range(30)) + "else:\n    f0 = None\n"
    walked: list[int] = []
    real = scoped._names
    monkeypatch.setattr(scoped, "_names", lambda roots, top, *a, **k: walked.extend(getattr(r, "lineno", 0) for r in roots) or real(roots, top, *a, **k))
    doc = Document("file:///tmp/reuse/blocks.py", source, 0)
    doc.analysis(ALL)
    walked.clear()
    _edit(doc, source.split("\n").index("        return x * 7"), len("        return x * 7"), "0", 1)
    _same_as_fresh(doc, ALL)
    assert 4 + 7 * 3 in walked and len([line for line in walked if line > 3]) < 6  # `f7`, not the thirty (and the `else` block's)
    doc.close()


LOCAL_IMPORTS = """import torch


def rank():
    import torch.distributed as dist
    return dist.get_rank() + 1


def world():
    import torch.distributed as dist
    return dist.get_world_size()


def train(model, loader, optimizer):
    for x in loader:
        model(x).sum().backward()
        optimizer.step()


def evaluate(model, loader):
    for x in loader:
        print(model(x))
"""


def test_an_import_inside_a_function_binds_no_module_level_name() -> None:
    doc = _type_into("file:///tmp/reuse/local_imports.py", LOCAL_IMPORTS, "    return dist.get_rank() + 1", "    return dist.get_rank() + 1", "0")
    assert doc.scoped.rechecked == 1  # rank() only: world() imports `dist` into its own scope
    doc.close()


CONFIGS = """import torch


def _cfg(url="", **kwargs):
    return {"url": url, **kwargs}


default_cfgs = dict({
    "a": _cfg(
        url="a.pth",
        crop=0.9),
    "b": _cfg(
        url="b.pth",
        crop=0.8),
})


@register_model
def model_a(pretrained=False):
    return torch.nn.Linear(2, 2)


def train(model, loader, optimizer):
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
"""


def test_a_keystroke_the_repair_undoes_rechecks_nothing() -> None:
    doc = Document("file:///tmp/reuse/configs.py", CONFIGS, 0)
    config = Config(select=("ALL",))
    assert "TPF001" in {d.code for d in doc.analysis(config).diagnostics}
    line = CONFIGS.split("\n").index('    "a": _cfg(')
    _edit(doc, line, len('    "a": _cfg('), "(", 1)  # `_cfg((`: parso ends the dict's statement at `})` and at `@register_model`
    _same_as_fresh(doc, config)
    assert doc.analysis(config).syntax_errors
    assert doc.scoped.rechecked == 0 and doc.builder.rebuilt == 0  # the statements as they were, with their findings
    starts = [chunk[0] for chunk, _, _ in doc.builder.units]
    assert CONFIGS.split("\n").index("})") not in starts and CONFIGS.split("\n").index("@register_model") in starts
    doc.close()
