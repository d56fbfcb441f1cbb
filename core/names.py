"""Names: import aliases to qualified names, and dotted expressions to text.

`import torch.nn as nn` makes `nn.Linear` resolve to `torch.nn.Linear`;
`from torch.optim import AdamW as A` makes `A` resolve to `torch.optim.AdamW`.
Nothing is imported: this is pure bookkeeping over the syntax tree.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from collections.abc import Iterable, Iterator


def dotted(node: ast.AST | None) -> str | None:
    """`a.b.c` for a chain of Name/Attribute nodes, `None` for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super":
        parts.append("super()")
        return ".".join(reversed(parts))
    return None


# The conventional spellings of torch in snippets and notebook cells that never import it:
# `nn.Linear`, `F.relu`, `torch.zeros` read as torch's when the file binds no such name.
CONVENTIONAL = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional"}


class ImportMap:
    """Local alias -> qualified name, for one module (imports at any depth count)."""

    def __init__(self, aliases: dict[str, str] | None = None) -> None:
        self.aliases: dict[str, str] = dict(aliases or {})
        self.stars: list[str] = []  # modules imported with `from m import *`
        self._targets: frozenset[str] | None = None  # the aliases' targets, built when first asked

    def brings_in(self, qualified: str) -> bool:
        """`qualified` is an import's target or inside one (`utils.make_opt` after `import utils`)."""
        if self._targets is None:
            self._targets = frozenset(self.aliases.values())
        name = qualified
        while True:
            if name in self._targets:
                return True
            name, dot, _ = name.rpartition(".")
            if not dot:
                return False

    @classmethod
    def from_tree(cls, tree: ast.AST, module_name: str = "") -> ImportMap:
        imports = cls()
        for node in _statements(tree):
            if isinstance(node, ast.Import):
                imports.add_import(node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level and module_name:
                    package = module_name.rsplit(".", node.level)[0]
                    base = f"{package}.{base}" if base else package
                imports.add_from(base, node.names)
        return imports

    def add_import(self, names: Iterable[ast.alias]) -> None:
        self._targets = None
        for alias in names:
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                self.aliases.setdefault(top, top)

    def add_from(self, module: str, names: Iterable[ast.alias]) -> None:
        self._targets = None
        for alias in names:
            if alias.name == "*":
                if module and module not in self.stars:
                    self.stars.append(module)
                continue
            self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}" if module else alias.name

    def resolve(self, name: str | None) -> str | None:
        """Qualify a dotted name through the import aliases (unknown heads stay as they are)."""
        if not name:
            return name
        head, _, rest = name.partition(".")
        target = self.aliases.get(head)
        if target is None:
            target = CONVENTIONAL.get(head) if rest and self.conventional(head) else None
            return f"{target}.{rest}" if target else name
        return f"{target}.{rest}" if rest else target

    def conventional(self, head: str) -> bool:
        """`head` is `torch`, `nn` or `F`, which no import of the file binds: an attribute of it
        (`nn.Linear`) means torch's (snippets and notebook cells often skip the imports)."""
        return head in CONVENTIONAL and head not in self.aliases

    def is_imported(self, name: str) -> bool:
        return name.partition(".")[0] in self.aliases

    def alias_for(self, qualified: str) -> str | None:
        """The shortest local spelling of a qualified name, if the imports allow one."""
        best: str | None = None
        for local, target in self.aliases.items():
            if qualified == target:
                candidate = local
            elif qualified.startswith(target + "."):
                candidate = local + qualified[len(target) :]
            else:
                continue
            if best is None or len(candidate) < len(best):
                best = candidate
        return best


def matches(qualified: str | None, *candidates: str) -> bool:
    """True when `qualified` is one of `candidates` (exact qualified names)."""
    return qualified is not None and qualified in candidates


def tail(name: str | None) -> str:
    """The last component of a dotted name."""
    return name.rsplit(".", 1)[-1] if name else ""


_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)


def _statements(tree: ast.AST) -> Iterator[ast.AST]:
    """The statements of `tree` at any depth, in `ast.walk`'s breadth-first order, without walking
    into expressions (an import is a statement: only statements, handlers and cases hold one)."""
    todo = deque([tree])
    while todo:
        node = todo.popleft()
        yield node
        todo.extend(child for child in child_nodes(node) if isinstance(child, _BLOCKS))


# Fields that never hold a node (names, numbers, flags), per node class: the walks below skip them.
_SCALAR_FIELDS = frozenset({"id", "attr", "arg", "name", "asname", "module", "level", "kind", "conversion",
                            "type_comment", "simple", "is_async", "tag"})


def _node_classes(cls: type[ast.AST]) -> list[type[ast.AST]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _node_classes(sub))]


_CHILD_FIELDS: dict[type[ast.AST], tuple[str, ...]] = {
    cls: tuple(f for f in cls._fields if f not in _SCALAR_FIELDS and not (f == "value" and cls in (ast.Constant, ast.MatchSingleton)))
    for cls in _node_classes(ast.AST)
}


_SINGLE, _MANY, _MANY_OR_NONE = 0, 1, 2
_SCALAR_TYPES = frozenset({"identifier", "int", "string", "constant"})
_SIGNATURE = re.compile(r"(\w+)\((.*)\)")


def _node_fields(cls: type[ast.AST]) -> tuple[tuple[str, int], ...] | None:
    """The fields of a node class that hold nodes, each as (name, how): one node or None (`_SINGLE`), a
    list of nodes (`_MANY`), or a list that may hold None (`_MANY_OR_NONE`: a dict display's keys with
    `**`, the defaults of keyword-only arguments), read from the class's signature in the grammar
    (`Call(expr func, expr* args, keyword* keywords)`). None when the class has no such signature (an
    abstract class, a deprecated alias): the walks then test every field's value."""
    doc = cls.__doc__ or ""
    match = _SIGNATURE.fullmatch(doc)
    if match is None:
        return () if doc == cls.__name__ and not cls._fields else None  # `Load`, `Pass`: no fields
    declared = [part.split() for part in match.group(2).split(",") if part.strip()]
    if match.group(1) != cls.__name__ or tuple(name for _, name in declared) != cls._fields:
        return None
    fields: list[tuple[str, int]] = []
    for kind, name in declared:
        if kind.rstrip("*?") in _SCALAR_TYPES:
            continue
        if not kind.endswith("*"):
            fields.append((name, _SINGLE))
        elif (cls, name) in ((ast.Dict, "keys"), (ast.arguments, "kw_defaults")):
            fields.append((name, _MANY_OR_NONE))
        else:
            fields.append((name, _MANY))
    return tuple(fields)


_NODE_FIELDS: dict[type[ast.AST], tuple[tuple[str, int], ...]] = {
    cls: fields for cls in _node_classes(ast.AST) if (fields := _node_fields(cls)) is not None
}


def _children_by_value(node: ast.AST, into: list[ast.AST]) -> None:
    """The children of a node of a class without a signature, testing each field's value."""
    for name in _CHILD_FIELDS.get(type(node), node._fields):
        child = getattr(node, name, None)
        if isinstance(child, ast.AST):
            into.append(child)
        elif isinstance(child, list):
            into.extend(c for c in child if isinstance(c, ast.AST))


# The blocks of a compound statement, in `ast`'s field order; and the statements that run their
# blocks once where they stand (at the top level, their functions and classes are defined there:
# `if TYPE_CHECKING: ... else:`, `try: ... except ImportError:`, `with`), which the incremental
# builder and the data-flow index split into pieces per block statement, as they split classes.
BLOCK_FIELDS = ("body", "handlers", "orelse", "finalbody")
ONCE_BLOCKS = (ast.If, ast.Try, ast.With, ast.AsyncWith, ast.ExceptHandler)
PIECEWISE = (ast.ClassDef, *ONCE_BLOCKS)  # a class is split likewise, one piece per body statement
DISPLAYS = (ast.Dict, ast.List, ast.Tuple, ast.Set)


def long_display(node: ast.AST, children: list[ast.AST]) -> bool:
    """A display of 64 elements or more (`children`: its child nodes), such as a generated table:
    the model and the data-flow index read its elements one by one and keep what they read of
    each while its node stays (core/incremental.py splices an edited element into the last parse)."""
    return type(node) in DISPLAYS and len(children) >= 64


def piecewise(node: ast.AST) -> bool:
    """A class or a statement that runs its blocks once (`PIECEWISE`)."""
    return isinstance(node, PIECEWISE)


def blocks(node: ast.AST) -> list[ast.AST]:
    """The statements of a node's blocks (an `except` clause counts as one), in order."""
    return [child for name in BLOCK_FIELDS for child in getattr(node, name, None) or ()]


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """`list(ast.iter_child_nodes(node))`, the same nodes in the same order, without its two
    generators: the model and the data-flow index visit every node of a file."""
    found: list[ast.AST] = []
    fields = _NODE_FIELDS.get(type(node))
    if fields is None:
        _children_by_value(node, found)
        return found
    for name, how in fields:
        child = getattr(node, name, None)
        if how == _SINGLE:
            if child is not None:
                found.append(child)
        elif how == _MANY:
            if child:
                found.extend(child)
        elif child:
            found.extend(c for c in child if c is not None)
    return found


def breadth_first(node: ast.AST) -> list[ast.AST]:
    """`list(ast.walk(node))`: the same nodes in the same order (a value's summary walks its whole expression).
    Each class's node-holding fields come from its signature (`_NODE_FIELDS`), so no value is tested."""
    nodes = [node]
    append, extend = nodes.append, nodes.extend
    table = _NODE_FIELDS
    i = 0
    while i < len(nodes):
        sub = nodes[i]
        i += 1
        fields = table.get(type(sub))
        if fields is None:
            _children_by_value(sub, nodes)
            continue
        for name, how in fields:
            child = getattr(sub, name, None)
            if how == _SINGLE:
                if child is not None:
                    append(child)
            elif how == _MANY:
                if child:
                    extend(child)
            elif child:
                extend(c for c in child if c is not None)
    return nodes
