"""Parsing: Python's `ast` for clean files, a repair of the compiler's errors for broken ones.

A file that parses cleanly goes straight through `ast.parse` (about 14x faster than parso
here). A broken file is repaired where the compiler points, round by round: a bracket typed
where none opens is dropped (`_drop_dangling`, `_typed_opener`), a half-typed line's brackets
closed, a mis-indented line re-indented, else the line neutralised (replaced with `pass` at
its indentation, then blanked). When that does not converge, every region parso's
error-recovering parser marks as broken is neutralised and the rounds run again. Line numbers
never move, so every finding in the intact parts keeps its true position. The syntax errors
themselves are reported.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

from torch_preflight.core.source import Position, SourceText

MAX_REPAIR_ROUNDS = 32
_NAME = re.compile(r"[^\W\d]")


@dataclass(frozen=True)
class SyntaxProblem:
    message: str
    position: Position


@dataclass
class ParseResult:
    tree: ast.Module
    errors: list[SyntaxProblem] = field(default_factory=list)
    repaired: frozenset[int] = frozenset()  # 0-based lines whose statement the error recovery dropped (neutralised)
    text: str | None = None  # the text the repair made, when it dropped no statement

    @property
    def ok(self) -> bool:
        return not self.errors


def parse(source: SourceText, *, force_recovery: bool = False, cells: Sequence[tuple[int, int]] | None = None) -> ParseResult:
    """Parse `source` into an `ast.Module`, never raising on bad input.

    `cells`: (first line, line count) of parts that compile on their own, as a notebook's cells
    do; a broken part is repaired alone and reported once, the others stay intact."""
    text = source.text.replace("\x00", " ")
    if cells and not force_recovery:
        # Each cell must compile on its own, as IPython runs it: two cells of `'''` join
        # into a valid string, but each is a syntax error.
        return _parse_cells(_lines(text), source, cells)
    if not force_recovery:
        try:
            return ParseResult(_ast_parse(text))
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            first = _problem(exc, source)
            if not isinstance(exc, (SyntaxError, ValueError)):
                return ParseResult(ast.Module(body=[], type_ignores=[]), [first])
    else:
        first = None
    lines = _lines(text)
    if cells:
        return _parse_cells(lines, source, cells)
    # First the narrowest repair: neutralise the lines the compiler points at. When that
    # does not converge, neutralise every region parso's error recovery marks, then retry.
    tree, problem, repaired = _recover(lines, source)
    errors = [p for p in (first or problem,) if p is not None]
    if tree is None:
        return ParseResult(ast.Module(body=[], type_ignores=[]), errors or [SyntaxProblem("invalid syntax", Position(0, 0))])
    return ParseResult(tree, errors, repaired, None if repaired else "".join(lines))


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def _lines(text: str) -> list[str]:
    """The lines as Python's tokenizer counts them, ends kept: `str.splitlines` also breaks at
    form feeds, `\x1c`-`\x1e`, `\x85` and the Unicode separators, which are no line ends to the
    compiler, so a repair aimed at its line numbers would neutralise the wrong line."""
    return _LINE.findall(text)


def _recover(lines: list[str], source: SourceText) -> tuple[ast.Module | None, SyntaxProblem | None, frozenset[int]]:
    """Repair `lines` (in place) until they parse: (tree or None, the first problem, lines neutralised)."""
    original = list(lines)
    work = list(lines)
    tree, problem = _repair(work, source)
    if tree is None:
        work = list(original)
        for line in _parso_error_lines("".join(original)):
            _neutralise(work, line)
        tree, _ = _repair(work, source)
    lines[:] = work
    # the statements lost: lines with a name on them replaced by `pass` or blanked (a closed
    # bracket or a re-indented line keeps its statement; a stray `)` held none)
    lost = frozenset(
        n for n, (a, b) in enumerate(zip(original, work, strict=True))
        if a != b and b.strip() in ("", "pass") and _NAME.search(a.split("#", 1)[0])
    )
    return tree, problem, lost


def _parse_cells(lines: list[str], source: SourceText, cells: Sequence[tuple[int, int]]) -> ParseResult:
    """Each cell parsed alone; each broken one repaired alone, with its first problem reported."""
    errors: list[SyntaxProblem] = []
    repaired: set[int] = set()
    for start, count in cells:
        part = lines[start : start + count]
        if not part:
            continue
        # the cell at its place in the file: blank lines before it keep the line numbers
        padded = ["\n"] * start + part
        try:
            _ast_parse("".join(padded))
            continue
        except (SyntaxError, ValueError):
            pass
        except (RecursionError, MemoryError) as exc:
            errors.append(_problem(exc, source))
            lines[start : start + count] = ["pass\n" if n == 0 else "\n" for n in range(count)]
            repaired.update(range(start, start + count))
            continue
        tree, problem, changed = _recover(padded, source)
        if problem is not None:
            errors.append(problem)
        if tree is None:  # beyond repair: the cell counts as empty
            padded[start:] = ["\n"] * count
            changed = frozenset(range(start, start + count))
        lines[start : start + count] = [_ending(old, new) for old, new in zip(part, padded[start:], strict=True)]
        repaired.update(changed)
    try:
        tree = _ast_parse("".join(lines))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ParseResult(ast.Module(body=[], type_ignores=[]), errors or [SyntaxProblem("invalid syntax", Position(0, 0))])
    return ParseResult(tree, errors, frozenset(repaired))


def _ending(old: str, new: str) -> str:
    """`new` with the line ending `old` had (a cell's last line may have none)."""
    body = new.rstrip("\r\n")
    return body + old[len(old.rstrip("\r\n")) :]


def _repair(lines: list[str], source: SourceText) -> tuple[ast.Module | None, SyntaxProblem | None]:
    first: SyntaxProblem | None = None
    closed: set[int] = set()
    for _ in range(MAX_REPAIR_ROUNDS):
        try:
            return _ast_parse("".join(lines)), first
        except (SyntaxError, ValueError) as exc:
            problem = _problem(exc, source)
            first = first or problem
            line = problem.position.line
            if "was never closed" in problem.message and line not in closed and (_drop_dangling(lines, line) or _close_brackets(lines, line)):
                closed.add(line)
                continue
            typed = _typed_opener(lines, line, problem.message)
            if typed is not None and -1 - typed not in closed and _drop_opener(lines, typed):
                closed.add(-1 - typed)  # apart from the lines closed above
                continue
            if ("unindent" in problem.message or "unexpected indent" in problem.message) and line not in closed and _reindent(lines, line):
                closed.add(line)
                continue
            if not _neutralise(lines, line, escalate=True):
                return None, first
        except (RecursionError, MemoryError) as exc:
            return None, first or _problem(exc, source)
    return None, first


def _ast_parse(text: str) -> ast.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(text)


def _problem(exc: BaseException, source: SourceText) -> SyntaxProblem:
    if isinstance(exc, SyntaxError):
        line = max((exc.lineno or 1) - 1, 0)
        col = max((exc.offset or 1) - 1, 0)
        return SyntaxProblem(f"SyntaxError: {exc.msg}", Position(line, min(col, len(source.line(line)))))
    if isinstance(exc, RecursionError):
        return SyntaxProblem("file is nested too deeply to analyse", Position(0, 0))
    return SyntaxProblem(f"cannot parse: {exc}", Position(0, 0))


def _parso_error_lines(text: str) -> list[int]:
    """0-based lines that parso's error recovery marks as broken."""
    import parso

    try:
        module = parso.parse(text, error_recovery=True)
    except Exception:  # parso is best effort; the ast repair loop follows
        return []
    bad: set[int] = set()
    stack = [module]
    while stack:
        node = stack.pop()
        kind = node.type
        if kind in ("error_node", "error_leaf"):
            start, end = node.start_pos[0], node.end_pos[0]
            if kind == "error_node" and end > start and node.children:
                # An unfinished compound statement: only its header is broken.
                end = node.children[0].end_pos[0]
            bad.update(range(start - 1, end))
            continue
        stack.extend(getattr(node, "children", ()))
    return sorted(bad)


_PAIRS = {"(": ")", "[": "]", "{": "}"}


def _close_brackets(lines: list[str], line: int) -> bool:
    """Append the closers a half-typed line lacks (`f(a, b` -> `f(a, b)`), before any comment."""
    if not 0 <= line < len(lines):
        return False
    raw = lines[line]
    body = raw.rstrip("\r\n")
    ending = raw[len(body) :] or "\n"
    code, hash_, comment = body.partition("#") if "'" not in body and '"' not in body else (body, "", "")
    stack: list[str] = []
    for char in code:
        if char in _PAIRS:
            stack.append(_PAIRS[char])
        elif char in _PAIRS.values() and stack and stack[-1] == char:
            stack.pop()
    if not stack:
        return False
    lines[line] = code.rstrip() + "".join(reversed(stack)) + (f"  {hash_}{comment}" if hash_ else "") + ending
    return True


def _drop_dangling(lines: list[str], line: int) -> bool:
    """For a bracket the compiler says was never closed on `line`, drop the bracket typed where
    none was meant to open, rather than close or neutralise the statement:
    - at the end of a block's header (`def f(x):(`: closed there, the block would end on that
      line and every line of its body would be an unexpected indent);
    - at the end of a later line of the bracket's statement, where the line after it shows that
      no bracket opens there (`_dangling_after`): `GIT,(` typed into a multi-line
      `from m import (` block, `x: int = 0,(` into a signature (the compiler points at the
      outer bracket, whose closing makes no sense);
    - at the end of `line` after another bracket still open there, where a continuation follows
      (`raise ValueError((`, `add_argument('--x', default=False,(`): the one before opens it."""
    if not 0 <= line < len(lines):
        return False
    code = _code(lines[line])
    if code is None or not code.endswith(_OPENERS):
        later = _dangling_after(lines, line)
        return later is not None and _drop_opener(lines, later)
    if code[:-1].rstrip().endswith(":"):
        return _drop_opener(lines, line)
    later = _dangling_after(lines, line)
    if later is not None:
        return _drop_opener(lines, later)
    after = next((n for n in range(line + 1, len(lines)) if lines[n].strip()), None)
    deeper = after is not None and _indent(lines[after]) > _indent(lines[line])
    return deeper and _unclosed(code) >= 2 and _drop_opener(lines, line)


def _unclosed(code: str) -> int:
    """How many brackets are still open at the end of a line's code (strings skipped)."""
    depth = 0
    quote: str | None = None
    escaped = False
    for char in code:
        if quote is not None:
            quote, escaped = (None if char == quote and not escaped else quote), (char == "\\" and not escaped)
        elif char in "'\"":
            quote = char
        elif char in _OPENERS:
            depth += 1
        elif char in ")]}" and depth:
            depth -= 1
    return depth


def _dangling_after(lines: list[str], line: int) -> int | None:
    """The first line after `line`, inside the statement `line` opens a bracket in, that ends with
    an opener although the line after it is no more indented, or closes a bracket while less
    indented: no bracket was meant to open there."""
    width = _indent(lines[line])
    previous: tuple[int, int] | None = None  # (line, indentation) of the last line ending with an opener
    for n in range(line + 1, len(lines)):
        body = lines[n].rstrip("\r\n")
        stripped = body.strip()
        if not stripped:
            continue
        indent = _indent(body)
        closes = stripped[0] in ")]}"
        if previous is not None and (indent < previous[1] if closes else indent <= previous[1]):
            return previous[0]
        if indent <= width and not closes:
            return None  # past the statement the outer bracket opens
        code = _code(body)
        if code is not None and code.endswith(_OPENERS) and code[:-1].rstrip().endswith(_OPENERS):
            return n  # `f((` inside the statement: the second one typed after the first
        previous = (n, indent) if code is not None and code.endswith(_OPENERS) else None
    return None


def _typed_opener(lines: list[str], line: int, message: str) -> int | None:
    """The line whose last bracket was typed where none opens, for a syntax error other than an
    unclosed bracket: a closing bracket that matches none, where the compiler names the bracket
    it displaced (the one typed is that line's, or a later line's inside its statement); or
    invalid syntax on a line that ends with a dangling bracket (`)(` closing a multi-line import,
    `import ((`), or on the statement after one."""
    mismatch = _MISMATCH.search(message)
    if mismatch:
        named = int(mismatch[1]) - 1
        later = _dangling_after(lines, named) if 0 <= named < len(lines) else None
        return named if later is None else later
    if not message.endswith("invalid syntax") or not 0 <= line < len(lines):
        return None
    code = _code(lines[line])
    if code is not None and code.endswith(_OPENERS):
        after = next((n for n in range(line + 1, len(lines)) if lines[n].strip()), None)
        if after is None or _indent(lines[after]) <= _indent(lines[line]) or code[:-1].rstrip().endswith(_OPENERS):
            return line
    return _dangles_before(lines, line)


def _dangles_before(lines: list[str], line: int) -> int | None:
    """The line before `line` when it ends with an opener and `line` starts a statement no deeper
    (`x = f(` then `y = 1`, or `)(` then `def g():`), where the compiler reports `line`."""
    before = next((n for n in range(line - 1, -1, -1) if lines[n].strip()), None)
    if before is None or not 0 <= line < len(lines):
        return None
    code = _code(lines[before])
    start = lines[line].strip()
    if code is None or not code.endswith(_OPENERS) or not start or start[0] in ")]}" or _indent(lines[line]) > _indent(lines[before]):
        return None
    return before


_OPENERS = ("(", "[", "{")
_MISMATCH = re.compile(r"does not match opening parenthesis '[(\[{]' on line (\d+)")


def _drop_opener(lines: list[str], line: int) -> bool:
    """Remove the bracket at the end of a line's code."""
    raw = lines[line]
    code = _code(raw)
    if code is None or not code.endswith(_OPENERS):
        return False
    at = raw.index(code) + len(code) - 1
    lines[line] = raw[:at] + raw[at + 1 :]
    return True


def _code(raw: str) -> str | None:
    """A line's code without its indentation, trailing comment and line end; None when a string
    may be open on it (its quotes do not pair up), so where its code ends is not known."""
    body = raw.rstrip("\r\n")
    quote: str | None = None
    escaped = False
    for i, char in enumerate(body):
        if quote is not None:
            quote, escaped = (None if char == quote and not escaped else quote), (char == "\\" and not escaped)
        elif char in "'\"":
            quote = char
        elif char == "#":
            body = body[:i]
            break
    if quote is not None or '"""' in body or "\'\'\'" in body or body.rstrip().endswith("\\"):
        return None
    return body.strip()


def _indent(raw: str) -> int:
    return len(raw) - len(raw.lstrip(" \t"))


def _reindent(lines: list[str], line: int) -> bool:
    """Give a mis-indented line the indentation of the statement before it."""
    if not 0 <= line < len(lines):  # the first line too: no statement before it, column 0 (as after blank lines)
        return False
    previous = next((lines[i] for i in range(line - 1, -1, -1) if lines[i].strip()), "")
    indent = previous[: len(previous) - len(previous.lstrip(" \t"))]
    body = lines[line].lstrip(" \t")
    if previous.rstrip().endswith(":") or lines[line] == indent + body:
        return False
    lines[line] = indent + body
    return True


def _neutralise(lines: list[str], line: int, *, escalate: bool = False) -> bool:
    """Replace a line with `pass` at its indentation; blank it if that was done already."""
    if not 0 <= line < len(lines):
        return False
    raw = lines[line]
    ending = raw[len(raw.rstrip("\r\n")) :] or "\n"
    body = raw.rstrip("\r\n")
    indent = body[: len(body) - len(body.lstrip(" \t"))]
    replacement = f"{indent}pass{ending}"
    if raw == replacement or (escalate and body.strip() == "pass"):
        if body.strip() == "":
            return False
        lines[line] = ending
        return True
    lines[line] = replacement
    return True


_SCOPES = (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef)


def uncertain_regions(tree: ast.Module, repaired: frozenset[int] | set[int]) -> list[tuple[int, int]]:
    """The (first, last) 0-based lines of each outermost loop or function that holds a repaired
    (neutralised) line: the error recovery dropped part of what it does, so nothing found in it
    is certain. (A caller of such a function is not: what it does around the call is known.)"""
    if not repaired:
        return []
    regions: list[tuple[int, int]] = []
    stack: list[ast.AST] = [tree]
    while stack:  # the outermost loops and functions, through classes, ifs, withs and trys
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _SCOPES):
                first, last = child.lineno - 1, (child.end_lineno or child.lineno) - 1
                if any(first <= n <= last for n in repaired):
                    regions.append((first, last))
            elif isinstance(child, ast.stmt):
                stack.append(child)
    return sorted(regions)
