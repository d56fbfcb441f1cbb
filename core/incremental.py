"""Incremental model building: the ModuleModel from per-top-level-statement pieces.

The language server splits a module into top-level statements (from its parso tree) and
asks `IncrementalBuilder.build` for the model. Each statement is parsed with `ast` on its
own (padded with blank lines so line numbers stay absolute) and turned into a *piece*: its
module-level events, functions, classes and loops. A piece is reused while the statement's
text, its first line, the module's import aliases and the number of loops before it are
unchanged, so an edit inside one function rebuilds one piece. Class classification and the
import map are recomputed over the merged pieces, so the merged model equals
`semantic.build` of the whole file (tests/test_incremental.py checks it with hypothesis).

A statement that does not parse on its own (a syntax error, a statement split by a broken
region) is repaired on its own by `core.parse` (the padded statement alone: its broken lines
closed or neutralised), so an edit that breaks one statement re-models that statement only
and the others keep their pieces. `parse_statements` is the same for a whole file: the CLI's
`analyze()` parses a broken file statement by statement too (parso's error recovery finds
the top-level statements), so the language server's result equals a fresh analysis.
"""

from __future__ import annotations

import ast
import bisect
import copy
import functools
import io
import itertools
import keyword
import re
import tokenize
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from torch_preflight.core.dataflow import piece_nodes
from torch_preflight.core.names import BLOCK_FIELDS, DISPLAYS, ONCE_BLOCKS, PIECEWISE, ImportMap, child_nodes, long_display
from torch_preflight.core.parse import ParseResult, SyntaxProblem, parse
from torch_preflight.core.semantic import ClassInfo, Function, Loop, ModuleModel, _Builder
from torch_preflight.core.source import SourceText, Span

Chunk = tuple[int, int]  # [start line, end line) of one top-level statement
# What `_repair_member` takes from the last version that parsed, by (first line in the chunk, text) of a
# body statement: its nodes, and the import nodes in them with their depth under the top-level statement.
Known = dict[tuple[int, str], tuple[list[ast.stmt], list[tuple[int, ast.Import | ast.ImportFrom]]]]
MethodKey = tuple[int, str, str | None, int, tuple[tuple[str, str], ...], tuple[object, ...], tuple[object, ...], tuple[int, ...]]
# (`_PieceBuilder`: first line, text, owner, loop base, imports, the guards, contexts and loops around it)


@dataclass(frozen=True)
class _Parsed:
    body: list[ast.stmt]
    imports: list[tuple[int, int, ast.Import | ast.ImportFrom]]  # (BFS depth, BFS index, node)
    errors: tuple[SyntaxProblem, ...] = ()  # the statement did not parse: it was repaired on its own
    repaired: frozenset[int] = frozenset()  # lines whose statement that repair dropped (core.parse.ParseResult.repaired)
    # ids of the functions a repair gave (`_functions_in`): text and lines do not say what they
    # hold (the repair of a larger unit may differ), so `_PieceBuilder` never reuses their models
    unsure: frozenset[int] = frozenset()
    restored: str | None = None  # the text a repair that dropped no statement made of it


@dataclass
class _Piece:
    events: list
    functions: dict[str, Function]
    classes: dict[str, ClassInfo]
    loops: dict[int, Loop]
    methods: dict[MethodKey, _Method] = field(default_factory=dict)  # its classes' methods, for the next rebuild
    elements: dict[int, _Element] = field(default_factory=dict)  # its long displays' elements, for the next rebuild


def _functions_in(nodes: list[ast.stmt]) -> frozenset[int]:
    """The ids of the functions among and inside repaired statements: `_PieceBuilder` must not
    take what it cached for a function of the same text (the repair may have changed its nodes)."""
    return frozenset(id(n) for _, n in _statements(nodes) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def _statements(nodes: list[ast.stmt]) -> Iterator[tuple[int, ast.AST]]:
    """The statements among and inside `nodes` with the depth `ast.walk` reaches them at (`nodes`
    at 1), and the `except` and `case` clauses between a statement and its blocks; only blocks
    are descended (a statement, a function definition or an import, is never in an expression)."""
    stack: list[tuple[int, ast.AST]] = [(1, node) for node in nodes]
    while stack:
        depth, node = stack.pop()
        yield depth, node
        for name in _STATEMENT_LISTS:
            children = getattr(node, name, None)
            if type(children) is list:
                stack.extend((depth + 1, child) for child in children)


_STATEMENT_LISTS = (*BLOCK_FIELDS, "cases")  # where statements (and `except`/`case` clauses) hang


def _import_nodes(body: list[ast.stmt], code: str) -> list[tuple[int, int, ast.Import | ast.ImportFrom]]:
    """Import nodes with the depth `ast.walk` reaches them at and an index that orders those of
    one depth as its breadth-first walk does (their position: a node's children are in source
    order); `code` is the statements' text: without the keyword there is nothing to walk for."""
    if "import" not in code:
        return []
    return [(depth, node.lineno * 100_000 + node.col_offset, node) for depth, node in _statements(body) if isinstance(node, (ast.Import, ast.ImportFrom))]


_DEFINITION = re.compile(r"(?:async\s+)?(?:def|class)\b")
_CONTINUES = (" ", "\t", ")", "]", "}")  # a line starting so starts no top-level statement


def chunk_lines(source: SourceText, starts: list[int]) -> list[Chunk]:
    """Chunks from the first lines of the top-level statements (the first starts at 0). A
    statement parso's error recovery starts on an indented line joins the one before it: no
    top-level statement starts there, but a bracket typed into the one before can end it for
    parso (`TORCH_2_4,(` in a multi-line import: the rest of the import is a statement of its
    own), and the two repaired apart would lose what the whole keeps. So does one starting with a
    closing bracket (`})` ending a dict that a bracket typed inside left open: parso closes brackets
    at a dedent). A `def` or `class` takes back the one-line decorators right above it that an
    unclosed bracket before them made part of the statement before, or a statement of their own
    (`@` does not end a bracket for parso as `def` does): the definition keeps its text, and its
    caches."""
    count = len(source.line_starts)
    bounds = sorted({0, *(s for s in starts if 0 < s < count and source.line(s)[:1] not in _CONTINUES)})
    for i in range(len(bounds) - 1, 0, -1):
        if _DEFINITION.match(source.line(bounds[i])):
            top = bounds[i]
            while top - 1 >= bounds[i - 1] and source.line(top - 1).startswith("@"):
                top -= 1
            if top == bounds[i - 1]:
                del bounds[i]  # the statement before is the decorators alone
            else:
                bounds[i] = top
    return [(a, b) for a, b in zip(bounds, [*bounds[1:], count], strict=False)]


class IncrementalBuilder:
    """Caches parsed statements and model pieces between builds of one document."""

    def __init__(self, module_name: str = "") -> None:
        self.module_name = module_name
        self._parsed: dict[tuple[int, str], _Parsed] = {}
        self._by_start: dict[int, tuple[str, _Parsed]] = {}  # last build: each statement's text and parse, by first line
        self._good: dict[int, tuple[str, _Parsed]] = {}  # the same, as it last parsed without an error
        self._known: tuple[int, str, Known | None] | None = None  # see `_known_members`
        self.errors: list[SyntaxProblem] = []  # last build: the first syntax error, when a statement was repaired
        self.repaired: frozenset[int] = frozenset()  # last build: lines whose statement the repair dropped
        self._pieces: dict[tuple[int, str, tuple[tuple[str, str], ...], int], _Piece] = {}
        self._methods: dict[MethodKey, _Method] = {}  # the methods of the last build's classes, see _PieceBuilder
        self._elements: dict[int, _Element] = {}  # the elements of the last build's long displays, see _PieceBuilder
        self.reused = 0
        self.rebuilt = 0
        self.units: list[tuple[Chunk, str, list[ast.stmt]]] = []  # last build: (chunk, its text, its statements)
        self._last: tuple[SourceText, ImportMap, list[_Piece], str] | None = None
        self._flow_parts: dict[int, tuple[ast.stmt, object]] = {}  # DataFlow index per top-level statement node
        self._flow_elements: dict[int, tuple[ast.AST, object]] = {}  # DataFlow index per element of a long display
        # The last build in which every statement parsed: its text, its units and their parses
        # (see `starts_after_edit`), and its pieces, for a statement typed back to that text.
        self._good_build: tuple[str, list[tuple[Chunk, str, _Parsed]]] | None = None
        self._good_pieces: dict[tuple[int, str, tuple[tuple[str, str], ...], int], _Piece] = {}
        self._hint: dict[tuple[int, str], _Parsed] = {}  # a parse `starts_after_edit` made, for the next build
        self._not_alone: tuple[int, str] | None = None  # a statement whose edited method `starts_after_edit` found not to parse alone
        self._unparsed: tuple[int, str] | None = None  # a statement whose text `starts_after_edit` found not to parse alone
        self._alone: dict[str, bool] = {}  # whether a block statement's text parses alone (`_repair_block_member`)

    def build(self, source: SourceText, chunks: list[Chunk], path: str, tree: ast.Module | None = None) -> ModuleModel:
        """`tree`, when given, is `ast.parse` of this very text: its top-level statements are
        split by chunk instead of parsing each new chunk again (the same nodes either way)."""
        text = source.text.replace("\x00", " ")
        starts = source.line_starts
        parsed: list[tuple[int, str, _Parsed]] = []
        broken: list[_Parsed] = []  # each statement's parse, a repaired one as it is (`parsed` may hold the last good one instead)
        new_parsed: dict[tuple[int, str], _Parsed] = {}
        given = _split_tree(tree, chunks) if tree is not None else None
        for index, (start, end) in enumerate(chunks):
            code = text[starts[start] : starts[end] if end < len(starts) else len(text)]
            key = (start, code)
            entry = self._parsed.get(key) or self._hint.get(key)
            if entry is None and given is not None:
                entry = _Parsed(given[index], _import_nodes(given[index], code))
            if entry is None:
                before = self._by_start.get(start)
                if before is not None and before[1].errors:  # broken at the last version: compare with the last that parsed
                    before = self._good.get(start)
                if before is not None and before[0] == code:
                    entry = before[1]
                else:
                    method = before is not None and key != self._not_alone and _reparse_method(start, before[0], before[1], code)
                    if len(self._alone) > 4096:
                        self._alone.clear()
                    entry = method or _parse_chunk(
                        start, code, self._known_members(start, before) if before is not None else None, before, self._alone, key != self._unparsed
                    )
            new_parsed[key] = entry
            broken.append(entry)
            good = self._good.get(start) if entry.errors and entry.restored is not None else None
            if good is not None and good[0] == entry.restored and _reads_alike(good[0], code):
                code, entry = good  # the repair undid the keystroke (a bracket typed where none opens): the last good statement stands
            parsed.append((start, code, entry))
        self._parsed = new_parsed
        self._hint, self._not_alone, self._unparsed = {}, None, None
        self._by_start = {start: (code, entry) for start, code, entry in parsed}
        self._good = {start: self._good[start] if entry.errors else (code, entry) for start, code, entry in parsed if not entry.errors or start in self._good}
        self.errors = _first_error(broken)
        self.repaired = frozenset().union(*(p.repaired for p in broken))

        imports = ImportMap()
        ordered = sorted(
            ((depth, chunk, index, node) for chunk, (_, _, p) in enumerate(parsed) for depth, index, node in p.imports),
            key=lambda item: item[:3],
        )
        for _, _, _, node in ordered:
            _replay_import(imports, node, self.module_name)
        imports_key = tuple(sorted(imports.aliases.items()))

        module = Function("", "<module>", Span.of(0, 0, 0, 0), Span.of(0, 0, 0, 0), (), {}, (), None, None, "", 0)
        functions: dict[str, Function] = {"": module}
        classes: dict[str, ClassInfo] = {}
        loops: dict[int, Loop] = {}
        new_pieces: dict[tuple[int, str, tuple[tuple[str, str], ...], int], _Piece] = {}
        self.reused = self.rebuilt = 0
        ordered_pieces: list[_Piece] = []
        for start, code, p in parsed:
            piece_key = (start, code, imports_key, len(loops))
            piece = self._pieces.get(piece_key) or self._good_pieces.get(piece_key)
            if piece is None:
                piece = _build_piece(p.body, source, imports, len(loops), self._methods, p.unsure, self._elements)
                self.rebuilt += 1
            else:
                self.reused += 1
            new_pieces[piece_key] = piece
            ordered_pieces.append(piece)
            module.events.extend(piece.events)
            functions.update(piece.functions)
            classes.update({name: replace(cls, is_module=False, owns_loop=False) for name, cls in piece.classes.items()})
            loops.update(piece.loops)
        self._pieces = new_pieces
        if not self.errors:
            self._good_pieces = new_pieces
            self._good_build = (text, [(chunk, code, p) for chunk, (_, code, p) in zip(chunks, parsed, strict=True)])
        self._methods = {k: m for piece in ordered_pieces for k, m in piece.methods.items()}
        self._elements = {k: e for piece in ordered_pieces for k, e in piece.elements.items()}
        self.units = [(chunk, code, p.body) for chunk, (_, code, p) in zip(chunks, parsed, strict=True)]
        self._last = (source, imports, ordered_pieces, path)
        classifier = _Builder(source, imports)
        classifier.classes = classes
        classifier._classify_classes()
        tree = ast.Module(body=[stmt for _, _, p in parsed for stmt in p.body], type_ignores=[])
        # the pieces of this version's statements, and of the last version that parsed (a keystroke that
        # broke a statement and the one that mends it go back to its nodes)
        last_good = [stmt for _, _, p in self._good_build[1] for stmt in p.body] if self._good_build is not None else []
        live = {id(node) for stmt in (*tree.body, *last_good) for node in piece_nodes(stmt)}
        self._flow_parts = {k: v for k, v in self._flow_parts.items() if k in live}
        self._flow_elements = {k: v for k, v in self._flow_elements.items() if self.holds_element(k)}
        return self._with_flow_parts(ModuleModel(source, path, imports, functions, classes, loops, tree))

    def holds_element(self, key: int) -> bool:
        """Whether the node of that id is an element of a long display of the last build (whose
        readers keep what they read of it while it stays)."""
        return key in self._elements

    def starts_after_edit(self, source: SourceText) -> list[int] | None:
        """The first lines of the top-level statements of `source`, without parso, when its text
        differs from that of the last build in which every statement parsed only inside one of
        that build's statements, and that statement's new text parses alone (a method of a class
        re-parsed alone as `_reparse_method` does, else the whole statement): the other
        statements' first lines (moved by the lines the edit added) and those of the statements
        the new text holds. Then the whole text parses too, into those statements (each piece
        parses alone and leaves the tokenizer at a line start outside every bracket, string and
        block, where the next piece starts at column 0), which are the statements `ast` and
        parso find. The parse is kept for the next `build`. None otherwise: a statement that
        does not parse alone may be split otherwise by parso's error recovery, which decides."""
        if self._good_build is None:
            return None
        old_text, units = self._good_build
        text = source.text.replace("\x00", " ")
        if text == old_text:
            return [chunk[0] for chunk, _, _ in units]
        old, new = old_text.split("\n"), text.split("\n")
        first, tail = _line_diff(old, new)
        index = next((i for i, ((a, b), _, _) in enumerate(units) if a <= first < b), len(units) - 1)
        (a, b), old_code, old_parsed = units[index]
        if len(old) - tail > b:
            return None  # the edit crosses into the next statement
        end = b + len(new) - len(old)
        starts = source.line_starts
        code = text[starts[a] : starts[end] if end < len(starts) else len(text)]
        method = _reparse_method(a, old_code, old_parsed, code)
        if method is False:
            self._not_alone = (a, code)  # `build` need not find it out again
            return None  # the edited method does not parse alone: the class most likely not either (parsing it would tell)
        # lines that mention no `import`, before and after: the statement's import nodes are the same (see `_reparse_method`)
        same_imports = not old_parsed.errors and not any("import" in line for line in (*old[first : len(old) - tail], *new[first : len(new) - tail]))
        display = None if method else _reparse_display(a, old_code, old_parsed, code)
        if display is False:
            entry = None  # found without parsing the whole statement (a table of 500 kB)
        else:
            entry = method or display or _parse_alone(a, code, old_parsed.imports if same_imports else None)
        if entry is None:
            self._unparsed = (a, code)  # `build` need not parse it again to find out
            return None
        own = sorted({min([s.lineno, *(d.lineno for d in getattr(s, "decorator_list", ()))]) - 1 for s in entry.body})
        if own == [a] or (index == 0 and len(own) <= 1):  # the new text is one statement's, or the first's
            self._hint = {(a, code): entry}
        before = [chunk[0] for chunk, _, _ in units[:index]]
        after = [chunk[0] + end - b for chunk, _, _ in units[index + 1 :]]
        return [*before, *own, *after]

    def starts_after_broken_edit(self, source: SourceText) -> list[int] | None:
        """The first lines of the top-level statements of `source` as parso's error recovery
        finds them in the whole text, from a parse of the edited part only, when the text
        differs from that of the last build in which every statement parsed only inside one of
        that build's statements (a keystroke that breaks the file). The statements before the
        edited one are unchanged and complete: the tokenizer and the parser reach its first line
        as a fresh parse of it would. The parse (`_resynchronised`) starts there or, when the
        edit stays inside one body statement of a block (class, function, loop, `if`, `with`,
        `try`; nested blocks likewise), at the innermost such statement under stand-in headers
        of its blocks (the parser is in the same blocks). It runs until a later statement of the
        last valid text (of the same block, else of an enclosing one) starts at its column as a
        statement of that block, after a NEWLINE token or with a keyword at which parso's
        tokenizer closes every open bracket: from there the tokenizer (no bracket, string or
        deeper indentation open), the parser (the same blocks) and the rest of the text are the
        valid text's, so its statements are the valid text's, moved by the lines the edit added.
        None when no such statement comes within `_RESYNC_CHARS` characters, or the edited
        statement's first line could continue the statement before it (`else`, ...): parso's
        diff parser then decides. tests/lsp/test_incremental.py compares with a full parse."""
        if self._good_build is None:
            return None
        old_text, units = self._good_build
        text = source.text.replace("\x00", " ")
        old, new = old_text.split("\n"), text.split("\n")
        first, tail = _line_diff(old, new)
        index = next((i for i, ((a, b), _, _) in enumerate(units) if a <= first < b), len(units) - 1)
        (a, b), old_code, parsed = units[index]
        last = len(old) - tail  # the edited lines of the valid text are [first, last)
        if last > b:
            return None
        delta = len(new) - len(old)
        before = [chunk[0] for chunk, _, _ in units[:index]]
        later = units[index + 1 :]
        after = _starts_after_unit(old, new, first, last, a, b, [chunk[0] for chunk, _, _ in later])
        if after is not None:
            return [*before, a, *after]
        chain = _Chain(new, later, delta)
        table = later and not delta and new[a].rstrip().endswith(("(", "[", "{"))  # a long display's first line (`_display_members`)
        if table and chain.starts(0) and _settled_edit(old, new, first, last, a, b) is not None and _display_reaches(new, a, b, (old_code, parsed), later[0][0][0]):
            return [*before, a, *(chunk[0] for chunk, _, _ in later)]
        top, col, cands = a, 0, [(chunk[0] + delta, 0, 0) for chunk, _, _ in units[index + 1 :]]  # (line, column, header row)
        header: list[str] = []
        block: Any = parsed.body[0] if len(parsed.body) == 1 and type(parsed.body[0]) in _BLOCK_HEADERS and not parsed.body[0].col_offset else None
        indent, bottom = "", b
        while block is not None:  # down to the innermost body statement of a block that holds the edit
            hit = None
            clauses = _clauses(block)
            for k, (lead, stmts) in enumerate(clauses):
                members = [(_first_line(s), s) for s in stmts]
                end = (members[-1][1].end_lineno or bottom) if k + 1 < len(clauses) else bottom  # a clause ends before the next
                member = next((i for i, (t, _) in enumerate(members) if t <= first and last <= (members[i + 1][0] if i + 1 < len(members) else end)), None)
                if member is not None:
                    hit = (lead, members, member, end)
                    break
            if hit is None:
                break
            lead, members, member, bottom = hit
            inner, stmt = members[member]
            inner_col = _first_col(stmt)
            inner_indent = old[inner][:inner_col]
            if not inner_col or inner_indent.strip() or new[inner][:inner_col] != inner_indent:
                break  # on its header's line, or the edit is in its indentation
            row = len(header) + 1  # the stand-in statement's row: parso's suites of its clauses hang from it
            deeper = inner_indent[len(indent) :]
            header = [*header, *(indent + line.replace("\0", deeper) for line in lead), *([inner_indent + "pass"] if member else [])]  # a statement before it, as in the block
            cands = [*((t + delta, _first_col(s), row) for t, s in members[member + 1 :]), *cands]
            top, col, indent = inner, inner_col, inner_indent
            bottom = members[member + 1][0] if member + 1 < len(members) else bottom
            block = stmt if type(stmt) in _BLOCK_HEADERS else None
        offset = len(cands) - len(later)  # the top-level candidates are the last
        found = _resynchronised(new, top, header, col, cands, lambda index: index >= offset and chain.starts(index - offset))
        if found is None:
            return None
        inside, resumed = found
        return [*before, *([a, *inside[1:]] if header else inside), *resumed]

    def _known_members(self, start: int, before: tuple[str, _Parsed]) -> Known | None:
        """`_known_members` of the last statement asked, kept while someone types in it."""
        if self._known is None or self._known[:2] != (start, before[0]):
            self._known = (start, before[0], _known_members(start, before))
        return self._known[2]

    def _with_flow_parts(self, model: ModuleModel) -> ModuleModel:
        """Let `DataFlow.of(model)` reuse the index of unchanged statements (core/dataflow.py)."""
        model.__dict__["_tpf_dataflow_parts"] = self._flow_parts
        model.__dict__["_tpf_dataflow_elements"] = self._flow_elements
        return model

    def owned(self, indices: set[int]) -> tuple[set[str], set[int]]:
        """The function qualnames and loop ids that the statements `indices` (into `units`) define."""
        assert self._last is not None
        pieces = self._last[2]
        functions: set[str] = set()
        loops: set[int] = set()
        for index in indices:
            functions.update(pieces[index].functions)
            loops.update(pieces[index].loops)
        return functions, loops

    def module_events(self, indices: set[int]) -> frozenset[int]:
        """The ids of the module-level events of the statements `indices` (into `units`)."""
        assert self._last is not None
        pieces = self._last[2]
        return frozenset(id(e) for index in indices for e in pieces[index].events)

    def submodel(self, keep: list[int]) -> ModuleModel:
        """The model of the last build restricted to the statements `keep` (indices into
        `units`), merged like `build` does; spans and loop ids stay those of the whole file."""
        assert self._last is not None
        source, imports, pieces, path = self._last
        module = Function("", "<module>", Span.of(0, 0, 0, 0), Span.of(0, 0, 0, 0), (), {}, (), None, None, "", 0)
        functions: dict[str, Function] = {"": module}
        classes: dict[str, ClassInfo] = {}
        loops: dict[int, Loop] = {}
        body: list[ast.stmt] = []
        for index in keep:
            piece = pieces[index]
            module.events.extend(piece.events)
            functions.update(piece.functions)
            classes.update({name: replace(cls, is_module=False, owns_loop=False) for name, cls in piece.classes.items()})
            loops.update(piece.loops)
            body.extend(self.units[index][2])
        classifier = _Builder(source, imports)
        classifier.classes = classes
        classifier._classify_classes()
        return self._with_flow_parts(
            ModuleModel(source, path, imports, functions, classes, loops, ast.Module(body=body, type_ignores=[]))
        )


def _line_diff(old: list[str], new: list[str]) -> tuple[int, int]:
    """The first line that differs, and how many lines at the end are the same (not overlapping it)."""
    common = min(len(old), len(new))
    first = 0
    while first < common and old[first] == new[first]:
        first += 1
    tail = 0
    while tail < common - first and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return first, tail


def _first_line(stmt: ast.stmt) -> int:
    """A statement's first line (0-based), its decorators included."""
    return min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))]) - 1


def _first_col(stmt: ast.stmt) -> int:
    return min([stmt.col_offset, *(d.col_offset for d in getattr(stmt, "decorator_list", ()))])


# Stand-in headers: the parser is in the same block after each as after the real one
_BLOCK_HEADERS: dict[type, str] = {
    ast.ClassDef: "class _:", ast.FunctionDef: "def _():", ast.AsyncFunctionDef: "async def _():", ast.For: "for _ in _:",
    ast.AsyncFor: "async for _ in _:", ast.While: "while _:", ast.If: "if _:", ast.With: "with _:", ast.AsyncWith: "async with _:", ast.Try: "try:",
}


def _clauses(block: ast.stmt) -> list[tuple[list[str], list[ast.stmt]]]:
    """The clauses of a block statement whose statements `starts_after_broken_edit` may descend
    into, each with the stand-in lines that put the parser at its first statement (relative to
    the statement's indentation; NUL stands for one level deeper): the body, and an `else`,
    `except` or `finally` clause's statements (not an `elif`'s: its `if` is no statement)."""
    header = _BLOCK_HEADERS[type(block)]
    found = [([header], block.body)]  # type: ignore[attr-defined]  # a statement of `_BLOCK_HEADERS`
    if isinstance(block, ast.Try):
        found += [([header, "\0pass", "except:"], h.body) for h in block.handlers]
        if block.orelse:
            found.append(([header, "\0pass", "except:", "\0pass", "else:"], block.orelse))
        if block.finalbody:
            found.append(([header, "\0pass", "finally:"], block.finalbody))
    elif isinstance(block, (ast.If, ast.For, ast.AsyncFor, ast.While)) and block.orelse:
        elif_ = isinstance(block, ast.If) and len(block.orelse) == 1 and isinstance(block.orelse[0], ast.If) and block.orelse[0].col_offset == block.col_offset
        if not elif_:
            found.append(([header, "\0pass", "else:"], block.orelse))
    return found


# The longest part of a broken text `_resynchronised` parses (parso: about 0.7 µs a character, and
# its tokenizer, which `_token_resyncs` runs first, a quarter of that); parso's diff parser takes
# 30-100 ms for a keystroke that breaks a file of 600-3,000 lines.
_RESYNC_CHARS = 50_000
_STATEMENT_START = re.compile(r"(?!(?:else|elif|except|finally)\b)[^\s#\\]")  # cannot continue the statement before


def _resynchronised(
    lines: list[str], top: int, header: list[str], col: int, cands: list[tuple[int, int, int]], chained: Callable[[int], bool] | None = None
) -> tuple[list[int], list[int]] | None:
    """parso's top-level statements of a text (`lines`) from line `top`, where a statement of
    the block `header` stands in for (the whole module when empty) starts at column `col`, the
    tokenizer and the parser being where a fresh parse of `header` leaves them: the first lines
    of the module's statements from `top` up to the first of `cands` (later statements of the
    valid text, as line, column and stand-in header row, in order) at which the parse
    resynchronises, and the top-level ones of `cands` from there; every statement to the end of
    the text when it ends first. A candidate can only be one where parso's tokenizer is back
    where the valid text had it (`_token_resyncs`: after a NEWLINE token or at a keyword of
    `_BREAKS`); the parse of the part up to it says whether the parser is too
    (`_starts_statement`), and a part that fails is followed by one at least twice as long.
    `chained`: whether parso reads the statements from a candidate (by index) as the valid
    text's once its parser starts one of the module there (`_Chain`): such a candidate may also
    be one where the tokenizer is still inside a bracket, at an identifier with no block open,
    where the parse shows a statement of the module starting. None (parso's diff
    parser decides) when no candidate within `_RESYNC_CHARS` characters of `top` resynchronises."""
    if top >= len(lines) or not _STATEMENT_START.match(lines[top], col):
        return None
    grammar = parso_grammar()
    shift = top - len(header)  # window row (1-based) - 1 + shift = line
    limit, size = top, 0
    while limit < len(lines) and size < _RESYNC_CHARS:
        size += len(lines[limit]) + 1
        limit += 1
    rows = [*header, *lines[top:limit]]
    near = [(line - shift + 1, column) for line, column, _ in cands if line < limit]
    need = 0  # the next part parsed ends at or after this line: twice the last that failed
    for index in itertools.chain(_token_resyncs(rows, grammar.version_info, near, chained), [len(cands)] if limit == len(lines) else []):
        end = cands[index][0] + 1 if index < len(cands) else len(lines)
        if end < need and index < len(cands):  # the end of the text is always worth its parse
            continue
        module = grammar.parse("\n".join(rows[: end - shift]) + ("\n" if end < len(lines) else ""), error_recovery=True, cache=False, diff_cache=False)
        children = [child.start_pos[0] - 1 + shift for child in module.children if child.type != "endmarker"]
        if index == len(cands):  # the end of the text
            return children, []
        line, column, row = cands[index]
        position = (line - shift + 1, column)
        if _starts_statement(module, position, row) or (chained is not None and chained(index) and any(child.start_pos == position for child in module.children)):
            return [c for c, child in zip(children, module.children, strict=False) if child.start_pos < position], [c[0] for c in cands[index:] if not c[2]]
        need = top + 2 * (end - top)
    return None


def _token_resyncs(rows: list[str], version: Any, positions: list[tuple[int, int]], chained: Callable[[int], bool] | None = None) -> Iterator[int]:
    """The indices of `positions` (1-based row, column; in order) at which a token of `rows`
    starts right after a NEWLINE token (INDENT and DEDENT between them) or is a keyword of
    `_BREAKS`: where parso's tokenizer has no bracket or string open, as after that statement's
    start in the valid text; and those `chained` takes (see `_resynchronised`) where a name starts
    with every INDENT token before it closed by a DEDENT. The text is tokenized only as far as the
    candidates asked."""
    from parso.python.token import PythonTokenTypes
    from parso.python.tokenize import tokenize

    if not positions:
        return
    skip = (PythonTokenTypes.INDENT, PythonTokenTypes.DEDENT, PythonTokenTypes.ERROR_DEDENT)
    at, after_newline, depth = 0, False, 0
    for token in tokenize("\n".join(rows), version_info=version):
        while at < len(positions) and positions[at] < token.start_pos:
            at += 1  # no token starts there: inside a string, or past its line's end
        if at == len(positions):
            return
        if positions[at] == token.start_pos and (
            after_newline or token.string in _BREAKS or (not depth and token.type is PythonTokenTypes.NAME and chained is not None and chained(at))
        ):
            yield at
            at += 1
        if token.type not in skip:
            after_newline = token.type is PythonTokenTypes.NEWLINE
        else:
            depth += (token.type is PythonTokenTypes.INDENT) - (token.type is PythonTokenTypes.DEDENT)


# Keywords at which parso's tokenizer closes every bracket and f-string still open and dedents to
# their column (`ALWAYS_BREAK_TOKENS` in parso/python/tokenize.py): after one at a line start it
# is where it is after a NEWLINE token and that line's indentation.
_BREAKS = frozenset({"import", "class", "def", "try", "except", "finally", "while", "with", "return", "continue", "break", "del", "pass", "global", "assert", "nonlocal"})

_TOKEN_FREE = ("", " ", "\t", ")", "]", "}", "#")  # a line starting so starts no chunk (`chunk_lines`)
_UNSETTLING = re.compile(r"['\"#\\@]")  # typed or deleted, what is a string, a comment, a line's end or a decorator may change
_BREAK_LINE = re.compile(rf"(?:{'|'.join(sorted(_BREAKS - {'except', 'finally'}))})\b")  # clauses continue a `try`


def _starts_after_unit(old: list[str], new: list[str], first: int, last: int, a: int, b: int, later: list[int]) -> list[int] | None:
    """For `starts_after_broken_edit`, without parsing: the chunk starts after the edited
    statement (lines `a`..`b` of the valid text `old`; its lines `first`..`last` edited into
    `new`), when nothing after the edit can start a chunk before the next statement, and that
    one is known to start one. A chunk starts only at a line whose first character is no
    space, closing bracket or `#` (`chunk_lines`); parso reads the text before the edit as in
    the valid text, so no statement starts between `a` and the edited line that did not there
    (the edit may change the first token of its line: the first line of the statement still
    starts one; a later one must start with a space, a closing bracket or a comment). When
    the edit neither types nor deletes a quote, `#`, backslash or `@` and is not inside a
    string or comment, strings and comments are where they were, so the lines after it that
    started inside the statement with a space, a closing bracket or a comment still do. Then
    either the statement was the last (no chunk starts after it), or the next one starts at
    column 0 with a keyword at which parso's tokenizer closes every bracket and dedents to
    column 0 (`_BREAKS`: `def`, `class`, `import` ...): parso starts a statement there and
    reads the rest as in the valid text (no `@` between the edit and it, which a broken line
    could turn into a decorator of a `def` or `class`). None when that is not so."""
    delta = len(new) - len(old)
    row = _settled_edit(old, new, first, last, a, b)
    if row is None:
        return None
    if any(text[:1] not in _TOKEN_FREE for text in new[row + 1 : b + delta]) or (row > a and new[row][:1] not in _TOKEN_FREE):
        return None
    if not later:
        return []
    following = later[0] + delta
    if not _BREAK_LINE.match(new[following]) or any("@" in text for text in new[row:following]):
        return None
    return [start + delta for start in later]


def _settled_edit(old: list[str], new: list[str], first: int, last: int, a: int, b: int) -> int | None:
    """The line (of the valid text `old`) where an edit of lines `first`..`last` of the statement
    on lines `a`..`b` begins, when it leaves strings and comments where they were: it neither
    types nor deletes a quote, `#`, backslash or `@`, is not inside a string or comment, and
    does not begin at the statement's first character. None otherwise."""
    delta = len(new) - len(old)
    old_seg, new_seg = "\n".join(old[first:last]), "\n".join(new[first : last + delta])
    p = 0
    limit = min(len(old_seg), len(new_seg))
    while p < limit and old_seg[p] == new_seg[p]:
        p += 1
    s = 0
    while s < limit - p and old_seg[len(old_seg) - 1 - s] == new_seg[len(new_seg) - 1 - s]:
        s += 1
    if _UNSETTLING.search(old_seg, p, len(old_seg) - s) or _UNSETTLING.search(new_seg, p, len(new_seg) - s):
        return None
    row = first + old_seg.count("\n", 0, p)
    col = p - (old_seg.rfind("\n", 0, p) + 1)
    if row >= len(old):
        return None  # lines added at the end
    line = old[row]
    if (row == a and col == 0) or '"""' in line or "'''" in line or any(m.start() < col < m.end() for m in _LITERALS.finditer(line)):
        return None
    unit = "\n".join(old[a:b])
    if ('"""' in unit or "'''" in unit or "\\\n" in unit) and row - a in _string_lines(unit):
        return None
    return row


_SIMPLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)
_NAME_LINE = re.compile(r"([^\W\d]\w*)(?!['\"])")  # an identifier at a line's start (no string prefix)
_LAST_WORD = re.compile(r"\w+$")
# An element that is an `expr` of Python's grammar (no comparison, `not`, `and`, `lambda`, `await`, ...): wherever the
# parser takes a number, a name, a string, a bracket and a unary operator, it takes all of it and nothing after it.
_PLAIN_ELEMENTS = (
    ast.Constant, ast.Name, ast.Attribute, ast.Subscript, ast.Call, ast.Tuple, ast.List, ast.Set, ast.Dict,
    ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.JoinedStr, ast.BinOp,
)


def _plain(node: ast.AST | None) -> bool:
    return isinstance(node, _PLAIN_ELEMENTS) or (isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not))


def _ends_expression(start: int, code: str, parsed: _Parsed) -> bool:
    """Whether a top-level statement (its text `code` from line `start`, parsed alone) is one
    simple statement whose last token ends an expression (a closing bracket, a string, a name or
    number that is no keyword) with nothing but comments after it: no grammar rule takes an
    identifier after it, and no suite is open, so parso's error recovery starts a statement of
    the module at an identifier that follows it without a NEWLINE token."""
    if len(parsed.body) != 1 or type(parsed.body[0]) not in _SIMPLE:
        return False
    stmt = parsed.body[0]
    lines = code.split("\n")
    row = (stmt.end_lineno or 0) - 1 - start
    if not 0 <= row < len(lines):
        return False
    line, end = lines[row], stmt.end_col_offset or 0
    head = line[:end] if line.isascii() else line.encode()[:end].decode(errors="replace")
    if any(rest.strip() and not rest.lstrip().startswith("#") for rest in (line[len(head) :], *lines[row + 1 :])):
        return False  # a `;`, a backslash
    if head[-1:] in (")", "]", "}", "'", '"'):
        return True
    word = _LAST_WORD.search(head)
    return word is not None and (word.group() in ("None", "True", "False") or not keyword.iskeyword(word.group()))


def _name_line(line: str) -> bool:
    """Whether a line starts at column 0 with an identifier that is no keyword (nor a string's prefix)."""
    match = _NAME_LINE.match(line)
    return match is not None and not keyword.iskeyword(match.group(1))


class _Chain:
    """Whether parso's statements from a later statement of the valid text (`units`: those after
    a broken one, moved by `delta` lines in the broken text `lines`) are theirs when its parser
    reaches that one at the module's level with a bracket left open before it (no NEWLINE token
    until a keyword of `_BREAKS` closes it), that one starting with an identifier. Each
    statement from there is one simple statement whose brackets balance, so its tokens are the
    valid text's less the NEWLINE and parse as there, and the next starts with an identifier
    that cannot continue it (`_ends_expression`): parso's error recovery, no suite being open,
    starts a statement of the module there; the last is one simple statement too, or the next
    starts with a keyword of `_BREAKS` at column 0 (`_BREAK_LINE`), where the tokenizer closes
    the bracket and the text from there reads as in the valid text. Answers are kept: what holds
    from one statement holds from each before it on the way."""

    def __init__(self, lines: list[str], units: list[tuple[Chunk, str, _Parsed]], delta: int) -> None:
        self.lines, self.units, self.delta = lines, units, delta
        self._holds: dict[int, bool] = {}

    def starts(self, index: int) -> bool:
        """Whether it holds from `units[index]`, and from the one before (a statement that a name
        could continue may well have: no parse is spent to find out)."""
        return _name_line(self.lines[self.units[index][0][0] + self.delta]) and self._from(index - 1 if index else 0)

    def _from(self, index: int) -> bool:
        units, path, at = self.units, [], index
        while at not in self._holds:
            (start, _), code, parsed = units[at]
            simple = len(parsed.body) == 1 and type(parsed.body[0]) in _SIMPLE  # no `match` block, whose clauses parso reads otherwise
            following = self.lines[units[at + 1][0][0] + self.delta] if at + 1 < len(units) else None
            if following is None or _BREAK_LINE.match(following):
                self._holds[at] = simple
                break
            if not _name_line(following) or not _ends_expression(start, code, parsed):
                self._holds[at] = False
                break
            path.append(at)
            at += 1
        for on in path:
            self._holds[on] = self._holds[at]
        return self._holds[at]


def _display_reaches(new: list[str], a: int, b: int, before: tuple[str, _Parsed], following: int) -> bool:
    """Whether parso's parser, reading the broken statement on lines `a`..`b` of the text `new`
    (one long display, `_display`: a generated table of thousands of lines, whose edit since its
    last version that parsed, `before`, stays in one member's lines, `_known_display`), reaches
    line `following` (the next statement's, starting with an identifier) at the module's level
    with no block open, so that a statement of the module starts there, found without parsing
    the whole table. The parse reads the statement's first lines, the members from the one
    before the edited one to two after it, the last member and the closing lines, then that
    line. The members left out before read as in the valid text: each holds whole elements
    and their commas, after which the parser is back in the same state. Those left out after
    are shown to read alike: the parser's stack is the same after the second member after the
    edit as after the first, no error was recovered from and no NEWLINE, INDENT or DEDENT token
    came between (the tokenizer is inside a bracket), the state takes every start of an
    expression, and each element left out is an `expr` (`_PLAIN_ELEMENTS`; of a dict, its key,
    and no `**`), which the parser reads whole from that state and returns to it after its
    comma. No line of the statement but its first can start a chunk (`chunk_lines`)."""
    code = "\n".join(new[a:b]) + "\n"  # as a statement's text (a later one follows)
    split = _display(code)
    if split is None:
        return False
    close, members, lines, col = split
    known = _known_display(a, code, before, close, members, col)
    if known is None:
        return False
    edited, stmt, _, _ = known
    inside = _string_lines(code)
    if any(line[:1] not in _TOKEN_FREE and i not in inside for i, line in enumerate(lines[1:], 1)):
        return False
    k, n = members.index(edited), len(members)
    keep = sorted({i for i in (k - 1, k, k + 1, k + 2, n - 1) if 0 <= i < n})
    gap = n - 1 > k + 3  # members k + 3 .. n - 2 left out
    if gap:
        found = _display_node(stmt, a, col, a + close)
        if found is None:
            return False
        display, lo, hi = found[1], a + members[k + 3][0], a + members[n - 2][1]
        firsts = zip(display.keys, display.values, strict=True) if isinstance(display, ast.Dict) else ((e, e) for e in display.elts)  # type: ignore[attr-defined]
        if any(lo <= value.lineno - 1 < hi and not _plain(first) for first, value in firsts):
            return False  # (a `**` entry has no key)
    rows = lines[: members[0][0]]
    at: dict[int, int] = {}
    for i in keep:
        at[i] = len(rows) + 1  # 1-based, as parso's positions
        rows = [*rows, *lines[members[i][0] : members[i][1]]]
    rows = [*rows, *lines[close:], new[following]]
    target = (len(rows), 0)
    try:
        return _parse_reaches(rows, [at[k + 2], at[n - 1]] if gap else [], target)
    except (AttributeError, KeyError, TypeError):  # parso's parser internals as of 0.8: another version decides by a parse
        return False


def _parse_reaches(rows: list[str], marks: list[int], target: tuple[int, int]) -> bool:
    """For `_display_reaches`: parse `rows` with parso's parser, reading its state at the first
    token of each of the two `marks` rows; whether the state is the same at both (as there
    described), and a statement of the module starts at `target` with no block open."""
    from parso.python.parser import Parser
    from parso.python.token import PythonTokenTypes as T
    from parso.python.tokenize import tokenize_lines
    from parso.utils import split_lines

    grammar = parso_grammar()
    pgen = grammar._pgen_grammar
    parser = Parser(pgen, error_recovery=True)
    errors = 0
    recover = parser.error_recovery

    def counted(token: Any) -> None:
        nonlocal errors
        errors += 1
        recover(token)

    parser.error_recovery = counted  # type: ignore[method-assign]
    seen: list[tuple[tuple[Any, ...], int, int]] = []  # (the stack's DFA states, errors, layout tokens) at each mark
    layout, depth, reached = 0, 0, False

    def tokens() -> Iterator[Any]:
        nonlocal layout, depth, reached
        for token in tokenize_lines(split_lines("\n".join(rows) + "\n", keepends=True), version_info=grammar.version_info):
            while len(seen) < len(marks) and token.start_pos[0] >= marks[len(seen)]:
                seen.append((tuple(node.dfa for node in parser.stack), errors, layout))
            if token.type in (T.NEWLINE, T.INDENT, T.DEDENT, T.ERROR_DEDENT):
                layout += 1
                depth += (token.type is T.INDENT) - (token.type is T.DEDENT)
            elif token.start_pos == target:
                reached = depth == 0
            yield token

    module = parser.parse(tokens())
    if marks:
        if len(seen) < 2 or seen[0][1:] != seen[1][1:] or len(seen[0][0]) != len(seen[1][0]) or any(x is not y for x, y in zip(*(s[0] for s in seen), strict=True)):
            return False
        starts = [T.NAME, T.NUMBER, T.STRING, T.FSTRING_START, *(pgen.reserved_syntax_strings[s] for s in ("(", "[", "{", "-", "+", "~", "None", "True", "False", "..."))]
        if not all(start in seen[0][0][-1].transitions for start in starts):
            return False
    return reached and any(child.start_pos == target for child in module.children)


def _starts_statement(module: Any, position: tuple[int, int], row: int) -> bool:
    """Whether a statement of the module (`row`: of the body of the stand-in header on that row)
    starts at `position` of `module`, right after a NEWLINE token or with a keyword of `_BREAKS`."""
    try:
        leaf = module.get_leaf_for_position(position)
    except ValueError:
        return False
    if leaf is None or leaf.start_pos != position:
        return False
    previous = leaf.get_previous_leaf()
    if previous is None or (previous.type != "newline" and leaf.value not in _BREAKS):
        return False
    node = leaf
    while node.parent is not None and node.parent.start_pos == position:
        node = node.parent
    parent = node.parent
    if not row:
        return parent is module
    return parent is not None and parent.type == "suite" and parent.parent is not None and parent.parent.start_pos[0] == row and _child_of(module, parent) is module.children[0]


def _child_of(module: Any, node: Any) -> Any:
    while node.parent is not None and node.parent is not module:
        node = node.parent
    return node


def _split_tree(tree: ast.Module, chunks: list[Chunk]) -> list[list[ast.stmt]] | None:
    """The top-level statements of `tree` grouped by the chunk their first line (decorators
    included) falls in; None when a statement crosses a chunk's end (the chunks are not this
    tree's statements). A chunk of comments only gets no statement, as its own parse would."""
    groups: list[list[ast.stmt]] = [[] for _ in chunks]
    index = 0
    for stmt in tree.body:
        first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))]) - 1
        while index < len(chunks) and first >= chunks[index][1]:
            index += 1
        if index == len(chunks) or first < chunks[index][0] or (stmt.end_lineno or stmt.lineno) > chunks[index][1]:
            return None
        groups[index].append(stmt)
    return groups


def _reads_alike(restored: str, code: str) -> bool:
    """Every line of `restored` starts its line of `code` (a repair that dropped what was typed at a line's end):
    a position in the restored statement reads the same text in both, so its model is the broken statement's.
    A repair that moved text (a line's unexpected indent taken away) does not qualify."""
    old, new = restored.split("\n"), code.split("\n")
    return len(old) == len(new) and all(b.startswith(a) for a, b in zip(old, new, strict=True))


def _parse_chunk(
    start: int, code: str, known: Known | None = None, before: tuple[str, _Parsed] | None = None, alone: dict[str, bool] | None = None, may_parse: bool = True
) -> _Parsed:
    """One top-level statement, parsed alone (padded with blank lines so line numbers stay
    absolute); one that does not parse is repaired alone, its first syntax error kept: a class
    or function, one statement of its body at a time when that can be done (`_repair_member`;
    `known` as there), an `if`, `try` or `with` one statement of its blocks at a time
    (`_repair_block_member`; `before`, `alone` as there). `may_parse` False: the caller found
    that the text does not parse (the repair starts at once)."""
    padded = "\n" * start + code
    tree = _body_of(padded) if may_parse else None
    if tree is None:
        by_member = _repair_member(start, code, known) or _repair_block_member(start, code, before, alone) or _repair_display(start, code, before)
        if by_member is not None:
            return by_member
        repaired = parse(SourceText(padded))
        body = repaired.tree.body
        unsure = _functions_in(body)
        restored = repaired.text[start:] if repaired.text is not None else None  # less the padding
        return _Parsed(body, _import_nodes(body, code), tuple(repaired.errors[:1]), repaired.repaired, unsure, restored)
    return _Parsed(tree, _import_nodes(tree, code))


def _parse_alone(start: int, code: str, imports: list[tuple[int, int, ast.Import | ast.ImportFrom]] | None = None) -> _Parsed | None:
    """One top-level statement's text parsed alone, as `_parse_chunk` does, or None when it does not parse;
    `imports`: its import nodes when the caller knows them (an edit of lines without `import`)."""
    tree = _body_of("\n" * start + code)
    if tree is None:
        return None
    return _Parsed(tree, imports if imports is not None else _import_nodes(tree, code))


def _body_of(text: str) -> list[ast.stmt] | None:
    """The statements of `text` as `ast.parse` gives them, or None when it does not parse."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(text).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


_BLOCKS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)  # statements `_repair_member` repairs by body statement
_STAND_INS = {"class ": "class _:", "def ": "def _():", "async def ": "async def _():"}  # by the header's start
_CLAUSE = re.compile(r"(?:else|elif|except|finally)\b")  # continues the compound statement before it


def _stand_in(lines: list[str]) -> tuple[int, str] | None:
    """The header line of a class or function (`lines`: its text's, at the top level or, indented
    alike, in a block; a one-line header, after its decorators) and the stand-in header under
    which its body statements parse alone, or None for any other statement. Decorators are the
    lines before the first that starts `class` or `def` (what they hold is parsed with the
    header: `_repair_member`)."""
    lead = lines[0][: len(lines[0]) - len(lines[0].lstrip())]
    at = 0
    if lines[0].startswith("@", len(lead)):
        at = next((i for i, line in enumerate(lines) if line.startswith(lead) and line.startswith(("class ", "def ", "async def "), len(lead))), -1)
        if at < 0:
            return None
    first = lines[at][len(lead) :]
    if not first.rstrip().endswith(":"):
        return None
    return next(((at, header) for start, header in _STAND_INS.items() if first.startswith(start)), None)


# Comments and string literals as Python's tokenizer reads them, in this order: a comment, a
# closed triple-quoted string (either quote), a triple quote never closed (`open`: the tokenizer
# stops there), a string on one line or continued by a backslash, a lone quote (a string never
# closed on its line: the tokenizer skips the quote).
_LITERALS = re.compile(
    r"""#[^\n]*|\"\"\"(?:\\.|[^\\])*?\"\"\"|'\''(?:\\.|[^\\])*?'\''|(?P<open>\"\"\"|'\'')|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|["']""",
    re.S,
)


def _string_lines(code: str) -> set[int]:
    """The lines (0-based) that start inside a string literal: the lines after the first of a
    triple-quoted string or one continued by a backslash, as Python's tokenizer finds them (its
    `tokenize` module took about 15 ms of a broken keystroke in a large class; this scan about
    1 ms). Where the tokenizer gives up before the end (a stray backslash or quote on a line
    of its own) the scan goes on, so it may know more strings, never fewer."""
    inside: set[int] = set()
    if '"""' not in code and "'''" not in code and "\\\n" not in code:
        return inside  # no string can span lines (a generated table of 500 kB: 25 ms for the scan)
    line, at = 0, 0
    for match in _LITERALS.finditer(code):
        if match.group("open") is not None:
            break  # never closed: the tokenizer stops, the strings before it are known
        text = match.group()
        if "\n" in text and text[0] != "#":
            line += code.count("\n", at, match.start())
            at = match.start()
            inside.update(range(line + 1, line + 1 + text.count("\n")))
    return inside


def _member_lines(code: str) -> tuple[str, list[int]] | None:
    """A top-level class's or function's body split by lines, from its text alone (it need not
    parse): the body's indentation and the first line (0-based, in the chunk) of each body
    statement, a decorated one from its first decorator: lines at that indentation that start
    neither a comment, a closing bracket nor a clause of the statement before (`else`, `elif`,
    `except`, `finally`), outside multi-line strings (`_string_lines`, which keeps strings
    apart even inside an unclosed bracket). None when the chunk is no plain `class Name...:`,
    `def name(...):` or `async def` with a one-line header (decorators before it may take any
    lines) and an indented body."""
    lines = code.split("\n")
    header = _stand_in(lines)
    if header is None:
        return None
    body = header[0] + 1
    inside = _string_lines(code)
    indent = next((line[: len(line) - len(line.lstrip())] for line in lines[body:] if line.strip() and not line.lstrip().startswith("#")), "")
    if not indent or indent.strip():
        return None
    starts: list[int] = []
    decorated = False
    for i, line in enumerate(lines[body:], body):
        if i in inside or not line.startswith(indent) or line[len(indent) : len(indent) + 1] in ("", " ", "\t", "#", ")", "]", "}"):
            continue
        if _CLAUSE.match(line, len(indent)):
            continue
        if not decorated:
            starts.append(i)
        decorated = line[len(indent)] == "@"
    return (indent, starts) if starts and starts[0] == next(i for i, line in enumerate(lines[body:], body) if line.strip() and not line.lstrip().startswith("#")) else None


_BLOCK_HEADER = re.compile(r"(?:if|try|with|async\s+with)\b")  # a top-level statement `_repair_block_member` repairs by block statement


def _block_members(code: str) -> tuple[str, list[tuple[int, int]]] | None:
    """A top-level `if`, `try` or `with` statement's block statements by lines, from its text
    alone (it need not parse): the blocks' indentation and each statement's lines (0-based in
    the chunk, [first, end)), as `_member_lines` finds a class's; a clause at column 0
    (`elif ...:`, `else:`, `except ...:`, `finally:`) ends the statement before it. None when
    the chunk is none of those with one-line headers and clauses, or its blocks are indented
    alike nowhere."""
    lines = code.split("\n")
    if not _BLOCK_HEADER.match(lines[0]) or not lines[0].rstrip().endswith(":"):
        return None
    inside = _string_lines(code)
    indent = next((line[: len(line) - len(line.lstrip())] for line in lines[1:] if line.strip() and not line.lstrip().startswith("#")), "")
    if not indent or indent.strip():
        return None
    ranges: list[tuple[int, int]] = []
    at: int | None = None  # the first line of the statement being read
    decorated = False
    for i, line in enumerate(lines[1:], 1):
        if i in inside or not line.strip() or line.startswith("#"):
            continue
        if not line[0].isspace():
            if not (_CLAUSE.match(line) and line.rstrip().endswith(":")):
                return None
            if at is not None:
                ranges.append((at, i))
            at, decorated = None, False
            continue
        if not line.startswith(indent) or line[len(indent) : len(indent) + 1] in (" ", "\t", "#", ")", "]", "}") or _CLAUSE.match(line, len(indent)):
            continue
        if not decorated:
            if at is not None:
                ranges.append((at, i))
            at = i
        decorated = line[len(indent)] == "@"
    if at is not None:
        ranges.append((at, len(lines)))
    return (indent, ranges) if ranges else None


def _repair_block_member(start: int, code: str, before: tuple[str, _Parsed] | None = None, alone: dict[str, bool] | None = None) -> _Parsed | None:
    """A top-level `if`, `try` or `with` statement that does not parse, repaired one block
    statement at a time (`_block_members`): each is parsed alone under a stand-in `class _:`
    header, and when exactly one does not parse, the statement is parsed with that one's lines
    blank but for a `pass` at its first line, and that `pass` replaced by the statement's own
    repair: a class or function one body statement at a time (`_repair_member`), else alone
    under the stand-in header (`core.parse`). None otherwise, or when that repair gives nothing:
    the caller repairs the whole statement. A function under `if HAS_TRITON:` that breaks costs
    its own repair, not the block's (torch's mkldnn_fusion.py is one 1,500-line `if`; its
    device_mesh.py a 1,500-line `else:` holding a 1,200-line class). `before`: the statement's
    last version that parsed, whose other nodes the language server keeps where the rest of
    the text is the same (`_old_member`); `alone`: whether a block statement's text parses
    alone, read and filled (the language server's, from the last keystrokes)."""
    split = _block_members(code)
    if split is None:
        return None
    indent, ranges = split
    lines = code.split("\n")
    broken: tuple[int, int, str] | None = None
    for a, b in ranges:
        text = "\n".join(lines[a:b])
        parses = alone.get(text) if alone is not None else None
        if parses is None:
            parses = _body_of("class _:\n" + text + "\n") is not None  # where it stands does not decide whether it parses
            if alone is not None:
                alone[text] = parses
        if not parses:
            if broken is not None:
                return None  # a second one: not the statement's own blocks, or two errors
            broken = (a, b, "\n" * (start + a - 1) + "class _:\n" + text + "\n")
    if broken is None:
        return None  # the error is in a header or clause
    a, b, padded = broken
    old = _old_member(start, code, before, a, b, indent) if before is not None else None
    # the last version's statement there, for its body statements (its import nodes' depths do not matter here)
    known = _known_members(start + a, (old[2], _Parsed([old[1]], before[1].imports))) if old is not None and before is not None else None  # type: ignore[list-item]
    by_member = _repair_member(start + a, "\n".join(lines[a:b]), known)
    member: str | None = None  # the text the repair made of the broken statement, when it dropped no statement
    if by_member is not None:
        nodes, errors, repaired, unsure, member = by_member.body, by_member.errors, by_member.repaired, by_member.unsure, by_member.restored
    else:
        repair = parse(SourceText(padded))
        wrapper = repair.tree.body
        nodes = wrapper[0].body if len(wrapper) == 1 and isinstance(wrapper[0], ast.ClassDef) else []
        errors, repaired, unsure = tuple(repair.errors[:1]), repair.repaired, _functions_in(nodes)
        prefix = len(padded) - (b - a) - sum(map(len, lines[a:b]))
        if repair.text is not None and repair.text.endswith("\n") and repair.text.startswith(padded[:prefix]):
            member = repair.text[prefix:-1]
    if not nodes:
        return None
    restored = "\n".join([*lines[:a], member, *lines[b:]]) if member is not None else None
    if old is not None and before is not None:  # the last version's nodes, that statement replaced
        body: list[ast.stmt] = [_replaced(old[0], old[1], nodes)]  # type: ignore[list-item]
        first_line, last_line = start + a + 1, start + b
        kept = [(d, n) for d, _, n in before[1].imports if not first_line <= n.lineno <= last_line]
        fresh = [(d + len(old[0]), n) for d, _, n in _import_nodes(nodes, "import")]  # the statement is at depth len(path) + 1
        return _Parsed(body, [(d, n.lineno * 100_000 + n.col_offset, n) for d, n in kept + fresh], errors, repaired, unsure, restored)
    skeleton = "\n".join([*lines[:a], indent + "pass", *([""] * (b - a - 1)), *lines[b:]])
    rest = _body_of("\n" * start + skeleton)
    if rest is None or len(rest) != 1:
        return None
    path = _statement_path(rest[0], start + a)
    if path is None or not isinstance(path[1], ast.Pass):
        return None
    return _Parsed([_replaced(path[0], path[1], nodes)], _import_nodes(rest, code), errors, repaired, unsure, restored)  # type: ignore[list-item]


def _statement_path(top: ast.AST, line: int) -> tuple[list[tuple[ast.AST, str, int]], ast.AST] | None:
    """The blocks from `top` down to the block statement that starts on `line` (0-based, its
    decorators included), through `PIECEWISE` statements, and that statement; or None."""
    path: list[tuple[ast.AST, str, int]] = []
    node = top
    while node is top or _first_line(node) != line:  # type: ignore[arg-type]
        step = _holding(node, line, line) if isinstance(node, PIECEWISE) else None
        if step is None:
            return None
        path.append((node, step[0], step[1]))
        node = step[2]
    return path, node


def _replaced(path: list[tuple[ast.AST, str, int]], node: ast.AST, nodes: list[ast.stmt]) -> ast.AST:
    """The top of `path` with the statement `node` at its end replaced by `nodes`, the blocks
    on the way copied; a block that ended where `node` ended ends where `nodes` end."""
    end = (node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
    new: ast.AST | None = None
    for outer, name, at in reversed(path):
        copied = copy.copy(outer)
        items = list(getattr(outer, name))
        items[at : at + 1] = nodes if new is None else [new]
        setattr(copied, name, items)
        if (outer.end_lineno, outer.end_col_offset) == end:  # type: ignore[attr-defined]
            copied.end_lineno, copied.end_col_offset = nodes[-1].end_lineno, nodes[-1].end_col_offset  # type: ignore[attr-defined]
        new = copied
    assert new is not None
    return new


def _old_member(
    start: int, code: str, before: tuple[str, _Parsed], a: int, b: int, indent: str
) -> tuple[list[tuple[ast.AST, str, int]], ast.AST, str] | None:
    """For `_repair_block_member`: the block statement of the statement's last version that
    parsed (`before`) at the lines `a`..`b`, with the blocks down to it and its text, when only
    those lines (the broken block statement) differ: the parse of the new text with a `pass`
    there is the last version's nodes with that statement replaced (the other statements have
    the same text at the same lines, and those lines were one block statement of the last
    version too, whose lines a `pass` could stand for). None when the texts differ elsewhere,
    or not one statement of the last version's blocks held those lines."""
    old_code, old = before
    if old.errors or len(old.body) != 1 or not isinstance(old.body[0], ONCE_BLOCKS):
        return None
    old_lines, lines = old_code.split("\n"), code.split("\n")
    if len(old_lines) != len(lines) or old_lines[:a] != lines[:a] or old_lines[b:] != lines[b:]:
        return None
    split = _block_members(old_code)
    if split is None or split[0] != indent or (a, b) not in split[1]:
        return None  # the lines are no statement of the last version's blocks (a clause typed into them)
    found = _statement_path(old.body[0], start + a)
    if found is None:
        return None
    path, node = found
    holder, field, index = path[-1]
    siblings = getattr(holder, field)
    if node.col_offset != len(indent) or (node.end_lineno or 0) > start + b or (index + 1 < len(siblings) and _first_line(siblings[index + 1]) < start + b):  # type: ignore[attr-defined]
        return None
    return path, node, "\n".join(old_lines[a:b])


def _known_members(start: int, before: tuple[str, _Parsed]) -> Known | None:
    """For `_repair_member`: the body statements of a class that parsed, by (first line in the
    chunk, text) of the `_member_lines` split of its text, where that split holds whole
    statements (each the nodes whose first line falls in it, ending in it)."""
    code, old = before
    if old.errors or len(old.body) != 1 or not isinstance(old.body[0], _BLOCKS) or _first_col(old.body[0]) != len(code) - len(code.lstrip(" \t")):
        return None
    split = _member_lines(code)
    if split is None:
        return None
    lines = code.split("\n")
    bounds = [*split[1], len(lines)]
    known: Known = {}
    stmts = old.body[0].body
    index = 0
    for a, b in itertools.pairwise(bounds):
        nodes: list[ast.stmt] = []
        while index < len(stmts) and min([stmts[index].lineno, *(d.lineno for d in getattr(stmts[index], "decorator_list", ()))]) - 1 - start < b:
            nodes.append(stmts[index])
            index += 1
        first = min([nodes[0].lineno, *(d.lineno for d in getattr(nodes[0], "decorator_list", ()))]) - 1 - start if nodes else -1
        if nodes and first == a and (nodes[-1].end_lineno or 0) - 1 - start < b:
            imports = [(d, n) for d, _, n in old.imports if start + a < n.lineno <= start + b]
            known[(a, "\n".join(lines[a:b]))] = (nodes, imports)
    return known


def _repair_member(start: int, code: str, known: Known | None = None) -> _Parsed | None:
    """A top-level class or function that does not parse, repaired one body statement at a
    time: each statement of its body (`_member_lines`) is parsed alone inside a stand-in header
    (`class _:`, `def _():`, `async def _():`; padded so line numbers stay absolute), and when
    exactly one does not parse, it alone is repaired by `core.parse`; the others are what a
    parse of the class or function gives them. None otherwise (the caller repairs the whole
    statement). A statement whose repair gives nothing is left out, its lines counted as
    repaired, rather than repairing the whole class (the repair of a large class or function
    can take a second). `known`: parses of body statements by (first line in the chunk, text),
    which the language server takes from the last version."""
    split = _member_lines(code)
    if split is None:
        return None
    _, starts = split
    lines = code.split("\n")
    stand_in = _stand_in(lines)[1]  # type: ignore[index]  # `_member_lines` found the header
    bounds = [*starts, len(lines)]
    nested = lines[0][:1].isspace()  # a class or function in a block (`_repair_block_member`): parsed inside a stand-in class
    header = ("\n" * (start - 1) + "class _:\n" if nested else "\n" * start) + "\n".join(lines[: starts[0]]) + "\n" + split[0] + "pass\n"
    head = _body_of(header)
    if head is None:
        return None
    if nested:
        head = head[0].body if len(head) == 1 and isinstance(head[0], ast.ClassDef) else []
    if len(head) != 1 or not isinstance(head[0], _BLOCKS):
        return None
    kind = type(head[0])
    body: list[ast.stmt] = []
    broken: ParseResult | None = None
    restored: str | None = None
    dropped: frozenset[int] = frozenset()
    unsure: frozenset[int] = frozenset()
    imports: list[tuple[int, ast.Import | ast.ImportFrom]] = []  # with their depth under the class or function
    for a, b in itertools.pairwise(bounds):
        text = "\n".join(lines[a:b])
        hit = known.get((a, text)) if known is not None else None
        if hit is not None:
            nodes, found = hit
        else:
            padded = "\n" * (start + a - 1) + stand_in + "\n" + text + "\n"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    wrapper = ast.parse(padded).body
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                if broken is not None:
                    return None  # a second one: the split is not the class's statements
                broken = parse(SourceText(padded))
                wrapper = broken.tree.body
                if not wrapper:  # the repair gave nothing: the statement is dropped, its lines repaired
                    dropped = frozenset(range(start + a, start + b))
                    continue
                prefix = len(padded) - len(text) - 1
                if broken.text is not None and broken.text.endswith("\n") and broken.text.startswith(padded[:prefix]):
                    restored = "\n".join([*lines[:a], broken.text[prefix:-1], *lines[b:]])
            if len(wrapper) != 1 or type(wrapper[0]) is not kind:
                return None
            nodes = wrapper[0].body
            if broken is not None and broken.tree.body is wrapper:  # this statement's repair
                unsure = _functions_in(nodes)
            found = [(d + 1, n) for d, _, n in _import_nodes(nodes, text)]  # body statements are at depth 2
        body.extend(nodes)
        imports += found
    if broken is None or not body:
        return None
    cls = head[0]
    cls.body = body
    cls.end_lineno, cls.end_col_offset = body[-1].end_lineno, body[-1].end_col_offset
    # by position, as `_reparse_method` orders them: the breadth-first walk's order at each depth
    return _Parsed([cls], [(d, n.lineno * 100_000 + n.col_offset, n) for d, n in imports], tuple(broken.errors[:1]), broken.repaired | dropped, unsure, restored)


@functools.lru_cache(maxsize=4)  # a keystroke asks it of the same texts in `starts_after_edit` and `build`
def _display_members(code: str) -> tuple[int, tuple[tuple[int, int], ...]] | None:
    """A top-level statement that is one long bracketed display by lines, from its text alone
    (it need not parse): its first line ends with the opening bracket (`TABLE = {`, `MAP =
    OrderedDict([`), a later line holds nothing but the closing brackets (`}`, `])`), and the
    lines between are its elements, each starting at the indentation of the first (outside
    multi-line strings, and not with a closing bracket, a comma or a comment). The closing line's index
    and each element's lines ((first, end), 0-based in the chunk); None otherwise."""
    head = code[: code.find("\n")]
    if not head.rstrip().endswith(("{", "[", "(")) or head[:1].isspace():
        return None  # asked of every statement a keystroke edits: told from its first line
    lines = code.split("\n")
    close = next((i for i in range(len(lines) - 1, 0, -1) if lines[i].strip()), 0)
    if close < 2 or lines[close].strip().strip("})]") or any(line.strip() and not line.lstrip().startswith("#") for line in lines[close + 1 :]):
        return None
    inside = _string_lines(code)
    first = next((i for i in range(1, close) if lines[i].strip() and not lines[i].lstrip().startswith("#")), None)
    if first is None:
        return None
    indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
    if not indent or indent.strip():
        return None
    starts = [i for i in range(first, close) if i not in inside and lines[i].startswith(indent) and lines[i][len(indent) : len(indent) + 1] not in ("", " ", "\t", "#", ")", "]", "}", ",")]
    if not starts or starts[0] != first:
        return None
    return close, tuple(itertools.pairwise([*starts, close]))


def _display(code: str) -> tuple[int, tuple[tuple[int, int], ...], list[str], int] | None:
    """`_display_members` of a statement, with its lines and the column of its opening bracket."""
    split = _display_members(code)
    if split is None:
        return None
    lines = code.split("\n")
    return split[0], split[1], lines, len(lines[0].rstrip()) - 1


def _display_node(tree: ast.stmt, start: int, col: int, close: int) -> tuple[list[tuple[ast.AST, str, int | None]], ast.AST] | None:
    """The display node of a statement from `_display_members` (opening at column `col` of its
    first line `start`, closing on line `close`, 0-based absolute), with the nodes and fields on
    the way down to it; None when there is none."""
    path: list[tuple[ast.AST, str, int | None]] = []  # (node, field, index in that field when it is a list)
    node: ast.AST = tree
    while not (isinstance(node, DISPLAYS) and node.lineno - 1 == start and node.col_offset == col):  # type: ignore[attr-defined]
        step = next(
            (
                (name, index, child)
                for name, value in ast.iter_fields(node)
                for index, child in (enumerate(value) if isinstance(value, list) else [(None, value)])
                if isinstance(child, ast.expr) and child.lineno - 1 <= start and (child.end_lineno or 0) - 1 >= close
            ),
            None,
        )
        if step is None:
            return None
        path.append((node, step[0], step[1]))
        node = step[2]
    return path, node


def _elements(display: ast.AST) -> list[ast.AST]:
    return [k if k is not None else v for k, v in zip(display.keys, display.values, strict=True)] if isinstance(display, ast.Dict) else list(display.elts)  # type: ignore[attr-defined]


def _with_elements(path: list[tuple[ast.AST, str, int | None]], display: ast.AST, index: int, removed: int, added: ast.AST) -> ast.AST:
    """The statement at the top of `path` with `removed` elements of `display` from `index`
    replaced by the elements of `added` (a display of the same kind); the nodes on the way copied."""
    new = copy.copy(display)
    if isinstance(display, ast.Dict):
        new.keys = [*display.keys[:index], *added.keys, *display.keys[index + removed :]]  # type: ignore[attr-defined]
        new.values = [*display.values[:index], *added.values, *display.values[index + removed :]]  # type: ignore[attr-defined]
    else:
        new.elts = [*display.elts[:index], *added.elts, *display.elts[index + removed :]]  # type: ignore[attr-defined]
    for outer, name, index_in in reversed(path):
        copied = copy.copy(outer)
        if index_in is None:
            setattr(copied, name, new)
        else:
            items = list(getattr(outer, name))
            items[index_in] = new
            setattr(copied, name, items)
        new = copied
    return new


def _repair_display(start: int, code: str, before: tuple[str, _Parsed] | None = None) -> _Parsed | None:
    """A top-level statement that is one long display (`_display_members`: a generated table of
    thousands of lines) and does not parse, repaired one element at a time: each element's lines
    are parsed alone between the statement's first and closing lines, and when exactly one does
    not parse, it alone is repaired (`core.parse`) and its elements take its place in the parse
    of the statement without those lines. None otherwise: the caller repairs the whole
    statement (on torch's 529 kB annotated_fn_args.py, two parses of it and more). `before`: the
    statement's last version that parsed; when the text differs from it only in that element's
    lines, its other elements parsed then (each element's lines held whole elements), so its
    nodes, less that element's, are that parse."""
    split = _display(code)
    if split is None:
        return None
    close, members, lines, col = split
    head, tail = lines[0], lines[close]

    def wrapped(a: int, b: int, padded: bool) -> str:  # padded: at its lines (whether it parses does not depend on them)
        return ("\n" * start + head + "\n" * a if padded else head + "\n") + "\n".join(lines[a:b]) + "\n" + tail + "\n"

    old = _known_display(start, code, before, close, members, col) if before is not None else None
    broken: tuple[int, int] | None = None
    for a, b in members:
        if old is not None and (a, b) != old[0]:
            continue  # parsed in the last version
        if _body_of(wrapped(a, b, padded=False)) is None:
            if broken is not None:
                return None  # a second one: not the display's elements, or two errors
            broken = (a, b)
    if broken is None:
        return None  # the error is in the first or the closing line
    a, b = broken
    repair = parse(SourceText(wrapped(a, b, padded=True)))
    if len(repair.tree.body) != 1:
        return None
    found = _display_node(repair.tree.body[0], start, col, start + a)  # its closing line is b
    if found is None:
        return None
    added = found[1]
    if old is not None:
        stmt, index, removed = old[1], old[2], old[3]
    else:  # the statement without those lines, which hold whole elements when it parses
        body = _body_of("\n" * start + "\n".join([*lines[:a], *([""] * (b - a)), *lines[b:]]))
        if body is None or len(body) != 1:
            return None
        stmt, index, removed = body[0], None, 0
    there = _display_node(stmt, start, col, start + close)
    if there is None or type(there[1]) is not type(added):
        return None
    if index is None:
        index = len([e for e in _elements(there[1]) if getattr(e, "lineno", 0) - 1 < start + a])
    node = _with_elements(there[0], there[1], index, removed, added)
    prefix = len(start * "\n" + head) + a
    text = repair.text
    member = text[prefix : len(text) - len(tail) - 2] if text is not None and text.startswith("\n" * start + head + "\n" * a) and text.endswith("\n" + tail + "\n") else None
    restored = "\n".join([*lines[:a], member, *lines[b:]]) if member is not None else None
    return _Parsed([node], _import_nodes([node], code), tuple(repair.errors[:1]), repair.repaired, _functions_in([node]), restored)  # type: ignore[list-item]


def _reparse_display(start: int, old_code: str, old: _Parsed, code: str) -> _Parsed | Literal[False] | None:
    """The parse of a display statement (a generated table) whose edit stays inside one
    element's lines, from its last version that parsed (`_known_display`: each element's lines
    held whole elements there), as `_reparse_method` does for a method: only those lines are
    parsed, between the statement's first and closing lines, and their elements take the place
    of the old ones in the last version's nodes. The other lines are the same whole elements,
    each ending with a comma, and the edited lines start where an element may start (inside the
    brackets, at a line's start) and tokenize alone: when they parse and end with a comma (or
    are the last), the statement parses into exactly that, and when they do not, it does not
    either. False when it cannot parse: so, or their brackets do not balance (a `(` typed at a
    line's end: the statement's do not either). None otherwise (the caller parses the whole
    statement: the lines lost their trailing comma, or a string stays open)."""
    split = _display(code)
    if split is None:
        return None
    close, members, lines, col = split
    known = _known_display(start, code, (old_code, old), close, members, col)
    if known is None:
        return None
    (a, b), stmt, index, removed = known
    text = "\n".join(lines[a:b])
    depth, last = 0, ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(text + "\n").readline):
            if token.type == tokenize.OP:
                depth += (token.string in "([{") - (token.string in ")]}")
            if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
                last = token.string
    except tokenize.TokenError as error:  # at the end: a bracket left open (then depth > 0), or a string
        return False if "statement" in str(error.args[0]) and depth > 0 else None
    except (SyntaxError, IndentationError):
        return None
    if depth:
        return False
    if last != "," and (a, b) != members[-1]:
        return None
    body = _body_of("\n" * start + lines[0] + "\n" * a + text + "\n" + lines[close] + "\n")
    if body is None:
        return False  # its elements are no elements of that display, between the commas around them
    if len(body) != 1:
        return None
    found = _display_node(body[0], start, col, start + a)
    there = _display_node(stmt, start, col, start + close)
    if found is None or there is None or type(found[1]) is not type(there[1]):
        return None
    node = _with_elements(there[0], there[1], index, removed, found[1])
    return _Parsed([node], _import_nodes([node], code))  # type: ignore[list-item]


def _known_display(
    start: int, code: str, before: tuple[str, _Parsed], close: int, members: tuple[tuple[int, int], ...], col: int
) -> tuple[tuple[int, int], ast.stmt, int, int] | None:
    """For `_repair_display`: when `code` differs from the last version that parsed (`before`)
    only in one element's lines of the same split, and every element's lines there held whole
    elements of its display: those lines, the last version's statement, and the index and
    number of the elements those lines held."""
    old_code, old = before
    if old.errors or len(old.body) != 1:
        return None
    old_lines, lines = old_code.split("\n"), code.split("\n")
    if len(old_lines) != len(lines):
        return None
    changed = [i for i, (x, y) in enumerate(zip(old_lines, lines, strict=True)) if x != y]
    if not changed:
        return None
    edited = next(((a, b) for a, b in members if a <= changed[0] and changed[-1] < b), None)
    if edited is None or _display_members(old_code) != (close, members):
        return None
    found = _display_node(old.body[0], start, col, start + close)
    if found is None:
        return None
    elements = _elements(found[1])
    bounds = [a for a, _ in members]
    counts = [0] * len(members)
    values = found[1].values if isinstance(found[1], ast.Dict) else elements  # type: ignore[attr-defined]
    for element, value in zip(elements, values, strict=True):
        first, last = element.lineno - 1 - start, (value.end_lineno or 0) - 1 - start  # type: ignore[attr-defined]
        k = bisect.bisect_right(bounds, first) - 1
        if k < 0 or last >= members[k][1]:
            return None  # an element across two members' lines: the split is not the elements
        counts[k] += 1
    if not all(counts):
        return None
    k = members.index(edited)
    return edited, old.body[0], sum(counts[:k]), counts[k]


def _path_to_function(top: ast.stmt, first: int, last: int) -> list[tuple[ast.AST, str, int]] | None:
    """The blocks from `top` down to the function (a method, a function in an `if` ...) whose
    lines (0-based, decorators included) hold lines `first`..`last`, each as (node, field,
    index in that field), through `PIECEWISE` only; None when no function holds them."""
    path: list[tuple[ast.AST, str, int]] = []
    node: ast.AST = top
    while not path or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        step = _holding(node, first, last) if isinstance(node, PIECEWISE) else None
        if step is None:
            return None
        path.append((node, step[0], step[1]))
        node = step[2]
    return path


def _holding(node: ast.AST, first: int, last: int) -> tuple[str, int, ast.AST] | None:
    """The statement of `node`'s blocks (field, index, statement) whose lines (0-based, its
    decorators included) hold lines `first`..`last`, or None."""
    for name in BLOCK_FIELDS:
        for index, child in enumerate(getattr(node, name, None) or ()):
            if _first_line(child) <= first and last <= (child.end_lineno or child.lineno) - 1:
                return name, index, child
    return None


def _reparse_method(start: int, old_code: str, old: _Parsed, code: str) -> _Parsed | Literal[False] | None:
    """The parse of a top-level class, or of an `if`, `try` or `with` statement (`PIECEWISE`),
    whose edit stays inside one function of its blocks (a method, a function defined under
    `if`, a method of a class there), from its previous parse: only that function is parsed
    again (inside a stand-in `class _:` header, so its indentation and absolute line numbers
    hold), the other statements are the previous nodes, and the blocks around the function are
    copies holding the new one. Only when the line count is unchanged and the function alone
    parses into one function ending on the same line, which is then what a parse of the whole
    statement gives (the text around it is the same, and the function leaves the tokenizer
    where the old one did). False when the edited function does not parse alone; None
    otherwise: the caller parses the whole statement."""
    if old.errors or len(old.body) != 1 or type(old.body[0]) not in PIECEWISE or old.body[0].col_offset:
        return None
    old_lines, lines = old_code.split("\n"), code.split("\n")
    if len(old_lines) != len(lines):
        return None
    first = next((i for i, (a, b) in enumerate(zip(old_lines, lines, strict=True)) if a != b), None)
    if first is None:
        return None
    last = max(i for i, (a, b) in enumerate(zip(old_lines, lines, strict=True)) if a != b)
    path = _path_to_function(old.body[0], start + first, start + last)
    if path is None:
        return None
    holder, field, index = path[-1]
    stmt = getattr(holder, field)[index]
    top, bottom = _first_line(stmt) - start, (stmt.end_lineno or stmt.lineno) - 1 - start  # 0-based lines in the chunk
    padded = "\n" * (start + top - 1) + "class _:\n" + "\n".join(lines[top : bottom + 1]) + "\n"
    wrapper = _body_of(padded)
    if wrapper is None:
        return False
    body = wrapper[0].body if len(wrapper) == 1 and isinstance(wrapper[0], ast.ClassDef) else []
    if len(body) != 1 or type(body[0]) is not type(stmt) or body[0].end_lineno != stmt.end_lineno:
        return None
    if [n.col_offset for n in (body[0], *getattr(body[0], "decorator_list", ()))] != [n.col_offset for n in (stmt, *getattr(stmt, "decorator_list", ()))]:
        return None  # indented otherwise than the block around it: the stand-in header would accept it, the block not
    new = _replaced(path, stmt, [body[0]])
    if not any("import" in line for line in (*old_lines[top : bottom + 1], *lines[top : bottom + 1])):
        # Neither version of the function mentions `import`: the statement's import nodes are the
        # same nodes, in the same relative order (their breadth-first indices only order them
        # within this statement), so the walk over the whole statement is not needed.
        return _Parsed([new], old.imports)  # type: ignore[list-item]
    # The other import nodes are the same; the function's own are walked. Statements at one
    # depth are visited breadth first in the order of their positions, so an index made of the
    # position orders them as the walk over the whole statement would.
    first_line, last_line = stmt.lineno, stmt.end_lineno or stmt.lineno
    kept = [(d, n) for d, _, n in old.imports if not first_line <= n.lineno <= last_line]
    fresh = [(d + len(path), n) for d, _, n in _import_nodes([body[0]], "import")]  # the function is at depth len(path) + 1
    return _Parsed([new], [(d, n.lineno * 100_000 + n.col_offset, n) for d, n in kept + fresh])  # type: ignore[list-item]


def _first_error(parsed: Any) -> list[SyntaxProblem]:
    return next(([*p.errors] for p in parsed if p.errors), [])


def statement_starts(module: Any) -> list[int]:
    """First lines (0-based) of the top-level statements of a parso module."""
    return [child.start_pos[0] - 1 for child in module.children if child.type != "endmarker"]


@functools.cache
def parso_grammar() -> Any:
    """parso's grammar, loaded when first needed (not before the first diagnostics of a valid file)."""
    import parso

    return parso.load_grammar()


def parse_statements(source: SourceText) -> ParseResult:
    """`core.parse` for a file `ast` accepts. A broken file is parsed statement by statement:
    parso's error recovery finds the top-level statements, each is parsed alone and a broken
    one repaired alone (`_parse_chunk`), so a syntax error costs the findings of its own
    statement only; the first error in the file is reported. The language server's
    incremental builder does the same per statement, so both give the same model."""
    text = source.text.replace("\x00", " ")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ParseResult(ast.parse(text))
    except (SyntaxError, ValueError):
        pass
    except (RecursionError, MemoryError):
        return parse(source)
    try:
        module = parso_grammar().parse(text, error_recovery=True, cache=False)
    except Exception:  # parso is best effort: the whole-file repair is always right
        return parse(source)
    starts = source.line_starts
    parsed = [
        _parse_chunk(a, text[starts[a] : starts[b] if b < len(starts) else len(text)])
        for a, b in chunk_lines(source, statement_starts(module))
    ]
    body = [stmt for p in parsed for stmt in p.body]
    return ParseResult(ast.Module(body=body, type_ignores=[]), _first_error(parsed), frozenset().union(*(p.repaired for p in parsed)))


def _replay_import(imports: ImportMap, node: ast.Import | ast.ImportFrom, module_name: str) -> None:
    if isinstance(node, ast.Import):
        imports.add_import(node.names)
        return
    base = node.module or ""
    if node.level and module_name:
        package = module_name.rsplit(".", node.level)[0]
        base = f"{package}.{base}" if base else package
    imports.add_from(base, node.names)


@dataclass
class _Method:
    """What building one method added: decorator events (module level), functions, classes, loops."""

    events: list
    functions: dict[str, Function]
    classes: dict[str, ClassInfo]
    loops: dict[int, Loop]
    stmt: Span | None  # the builder's statement span afterwards


class _PieceBuilder(_Builder):
    """`_Builder` that reuses the functions defined at the module level (the methods of a
    top-level class, the functions and methods under a top-level `if`, `try` or `with`) whose
    text, first line, owner, loop ids, import map and the guards, contexts and loops around
    them are unchanged, so an edit inside one method of a large class re-models that method,
    not the class. Functions nested in a function are not cached apart: they are part of
    theirs. A hit replays what `_Builder.function` adds (module-level decorator events,
    functions, classes, loops, the statement span): state that `_Builder` may gain later must
    be added to `_Method` (the hypothesis tests in tests/lsp/test_incremental.py compare with
    a full build)."""

    def __init__(
        self, source: SourceText, imports: ImportMap, methods: dict[MethodKey, _Method], kept: dict[MethodKey, _Method], unsure: frozenset[int]
    ) -> None:
        super().__init__(source, imports)
        self.methods, self.kept, self.unsure = methods, kept, unsure
        self.imports_key = tuple(sorted(imports.aliases.items()))
        self.elements: dict[int, _Element] = {}  # the last build's, by node id: read
        self.kept_elements: dict[int, _Element] = {}  # this build's: filled

    def _long(self, node: ast.AST) -> list[_Element] | None:
        """The elements of a long display (`names.long_display`), each read once while its node
        stays (an edit inside one element of a generated table gives the others as the last
        version's nodes, `_reparse_display`: at module level only); None for any other node."""
        if type(node) not in DISPLAYS or self.fn is None or self.fn.qualname:  # (`expr` asks of displays only)
            return None
        children = child_nodes(node)
        if not long_display(node, children):
            return None
        found: list[_Element] = []
        for child in children:
            element = self.elements.get(id(child))
            if element is None or element.node is not child:
                element = self.kept_elements.get(id(child)) or _read_element(child)
            self.kept_elements[id(child)] = element
            found.append(element)
        return found

    def display(self, node: ast.AST) -> bool:
        elements = self._long(node)
        if elements is None:
            return False
        for element in elements:  # a display emits nothing of its own
            if not element.quiet:
                self.expr(element.node)
        return True

    def walked(self, node: ast.AST) -> tuple[list[str], list[str], list[str]]:
        """`_Builder.walked` with the names of a long display's elements taken from what was
        read of them, depth by depth: the nodes `ast.walk` reaches at one depth below a display
        are its elements' nodes at that depth, element after element. Only for a value of many
        lines (the plain walk is quicker for the others, and gives the same)."""
        if (getattr(node, "end_lineno", None) or 0) - getattr(node, "lineno", 0) < 64:
            return super().walked(node)
        names: list[str] = []
        methods: list[str] = []
        calls: list[str] = []
        queue: list[Any] = [node]  # nodes, and (elements, depth) for a long display's elements' nodes at that depth
        i = 0
        while i < len(queue):
            sub = queue[i]
            i += 1
            if type(sub) is tuple:
                elements, depth = sub
                for element in elements:
                    if depth < len(element.levels):
                        names.extend(element.levels[depth])
                if any(depth + 1 < len(element.levels) for element in elements):
                    queue.append((elements, depth + 1))
                continue
            self.used([sub], names, methods, calls)
            elements = self._long(sub)
            if elements is not None and all(element.levels is not None for element in elements):
                queue.append((elements, 0))
            else:
                queue.extend(child_nodes(sub))
        return names, methods, calls

    def _statement(self) -> Span | None:
        stmt: Span | None = self.stmt
        return stmt

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, owner: str | None = None) -> None:
        assert self.fn is not None
        if self.fn.qualname or id(node) in self.unsure:
            super().function(node, owner)
            return
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
        starts = self.source.line_starts
        end = node.end_lineno or node.lineno
        text = self.source.text[starts[first] : starts[end] if end < len(starts) else len(self.source.text)]
        key = (first, text, owner, len(self.loops), self.imports_key, tuple(self.guards), tuple(self.contexts), tuple(self.loop_stack))
        method = self.methods.get(key)
        if method is None:
            events, functions, classes, loops = len(self.fn.events), len(self.functions), len(self.classes), len(self.loops)
            # a function defined again (`@overload def f`, then `def f`; one under `if`, one under `else`) sets qualnames that are there already
            again = (dict(self.functions), dict(self.classes)) if self._qualname(node.name, owner) in self.functions else None
            super().function(node, owner)
            method = _Method(
                self.fn.events[events:],
                dict(list(self.functions.items())[functions:]) if again is None else {q: f for q, f in self.functions.items() if again[0].get(q) is not f},
                dict(list(self.classes.items())[classes:]) if again is None else {q: c for q, c in self.classes.items() if again[1].get(q) is not c},
                dict(list(self.loops.items())[loops:]),
                self._statement(),
            )
        else:
            self.fn.events.extend(method.events)
            self.functions.update(method.functions)
            self.classes.update(method.classes)
            self.loops.update(method.loops)
            self.stmt = method.stmt
        self.kept[key] = method


@dataclass(frozen=True)
class _Element:
    """What the model reads of one element of a long display, kept by its node while it stays."""

    node: ast.AST
    quiet: bool  # no call and no lambda in it: `_Builder.expr` emits nothing for it
    levels: tuple[tuple[str, ...], ...] | None  # the names its nodes read, depth by depth (the element at 0); None: it calls


def _read_element(node: ast.AST) -> _Element:
    levels: list[tuple[str, ...]] = []
    calls = lambdas = False
    frontier = [node]
    while frontier:
        levels.append(tuple(n.id for n in frontier if type(n) is ast.Name))  # type: ignore[attr-defined]
        calls = calls or any(type(n) is ast.Call for n in frontier)
        lambdas = lambdas or any(type(n) is ast.Lambda for n in frontier)
        frontier = [child for n in frontier for child in child_nodes(n)]
    return _Element(node, not (calls or lambdas), None if calls else tuple(levels))


def _build_piece(
    body: list[ast.stmt],
    source: SourceText,
    imports: ImportMap,
    loop_base: int,
    methods: dict[MethodKey, _Method],
    unsure: frozenset[int],
    elements: dict[int, _Element] | None = None,
) -> _Piece:
    builder = _PieceBuilder(source, imports, methods, {}, unsure)
    builder.elements = elements or {}
    module = Function("", "<module>", Span.of(0, 0, 0, 0), Span.of(0, 0, 0, 0), (), {}, (), None, None, "", 0)
    builder.functions[""] = module
    builder.fn = module
    placeholder = dict.fromkeys(range(loop_base))
    builder.loops = placeholder  # type: ignore[assignment]  # loop ids continue from the pieces before
    builder.body(body)
    loops = {k: v for k, v in builder.loops.items() if k >= loop_base}
    functions = {k: v for k, v in builder.functions.items() if k}
    return _Piece(module.events, functions, builder.classes, loops, builder.kept, builder.kept_elements)


__all__ = ["Chunk", "IncrementalBuilder", "chunk_lines", "parse_statements", "parso_grammar", "statement_starts"]
