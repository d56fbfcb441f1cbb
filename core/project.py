"""The user's other modules: a model class imported from `model.py` next to the script.

`Project.resolve_class(importer, "models.resnet.ResNet")` finds `models/resnet.py` (or
`models/resnet/__init__.py`) beside the importing file or in one of its parent folders
up to the project root, parses and models it with the same core, and returns the class.
Nothing is imported or executed. A function is answered from a slice of its module (the
statements it reaches by name, `_slice`), within the analysis's `Budget` of bytes read.
Results are cached per path and modification time in the `Project` instance (one per CLI run, per language-server session). Each analysis
looks through its own `ProjectView`, which records the files it used, so that caches of
the importing file can be invalidated when one of them changes.

This is the one place besides configuration loading where the core reads files. Rules
receive a `Project` through their context and never touch the file system themselves.
"""

from __future__ import annotations

import ast
import bisect
import copy
import itertools
import os
import re
import sys
from collections import OrderedDict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from torch_preflight.core.jedi_env import holds_top_level, source_only_environment
from torch_preflight.core.names import ImportMap, breadth_first
from torch_preflight.core.parse import parse
from torch_preflight.core.program import FunctionSummary, Program, SummaryStore, decorator_disables_grad
from torch_preflight.core.semantic import ClassInfo, ModuleModel, build
from torch_preflight.core.source import SourceText

MAX_MODULE_BYTES = 2_000_000
MAX_PARENT_LEVELS = 3
# What one analysis may read of other modules to follow calls (`ProjectView.resolve_function`): past it a
# callee is unknown (`Budget.cuts`), never "does nothing". A user's helper modules fit many times over;
# torch's own 10k-line modules, which its internals call in every loop, do not.
FOREIGN_BUDGET_BYTES = 400_000
PARSED_KEPT = 8  # whole-module syntax trees kept for slicing (they are large; slices and models are kept)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_IMPORTS = (ast.Import, ast.ImportFrom)


OVERRIDE = -1  # Dependency.mtime_ns of an editor buffer (its size field holds the text's hash)


@dataclass(frozen=True)
class Dependency:
    path: str
    mtime_ns: int
    size: int

    def unchanged(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return st.st_mtime_ns == self.mtime_ns and st.st_size == self.size


@dataclass
class Project:
    """Resolves imports into the user's own modules, lazily and with a cache."""

    overrides: dict[str, str] = field(default_factory=dict)  # path -> unsaved editor text
    store: SummaryStore | None = None  # summaries kept across processes (core/program.py), when given
    _models: dict[tuple[str, int], ModuleModel | None] = field(default_factory=dict, repr=False)
    _jedi: dict[tuple[str, str], str | None] = field(default_factory=dict, repr=False)
    _program: Program | None = field(default=None, repr=False)
    _parsed: OrderedDict[tuple[str, int], _Parsed | None] = field(default_factory=OrderedDict, repr=False)
    _slices: dict[tuple[str, int, str], ModuleModel | None] = field(default_factory=dict, repr=False)
    _trees: dict[tuple[str, int, str], ParsedModule | None] = field(default_factory=dict, repr=False)

    @property
    def program(self) -> Program:
        """The function summaries of the project (core/program.py), shared by every analysis."""
        if self._program is None:
            self._program = Program(self, self.store)
        return self._program

    def view(self) -> ProjectView:
        return ProjectView(self)

    def cached_modules(self) -> int:
        """How many module models and slices this project holds (a long run starts a new one past a bound)."""
        return len(self._models) + len(self._slices) + len(self._trees)

    def unchanged(self, dep: Dependency) -> bool:
        """Whether what an analysis read is still there: an editor buffer by its text, a file by its stat."""
        text = self.overrides.get(dep.path)
        if text is not None:
            return dep.mtime_ns == OVERRIDE and dep.size == hash(text)
        return dep.mtime_ns != OVERRIDE and dep.unchanged()

    def resolve_class(self, importer: str, qualified: str, used: dict[str, Dependency]) -> tuple[ModuleModel, ClassInfo] | None:
        """The class `qualified` (`package.module.Class`) as seen from the file `importer`."""
        module, _, name = qualified.rpartition(".")
        if not module or not name or not importer or importer.startswith("<"):
            return None
        model = self.module(importer, module, used)
        if model is None:
            return None
        cls = model.classes.get(name)
        if cls is not None:
            return model, cls
        # `from .layers import Block` re-exported through a package __init__.
        target = model.imports.aliases.get(name)
        if target and target != qualified and "." in target:
            return self.resolve_class(model.path, target, used)
        return None

    def resolve_function(
        self, importer: str, qualified: str, used: dict[str, Dependency], budget: Budget | None = None
    ) -> tuple[ModuleModel, str] | None:
        """The top-level function `qualified` (`package.module.func`) as seen from `importer`:
        a model of its module and the function's qualname. Only files on disk beside the importer
        or in its parent folders up to the project root (and `<root>/src`) count; jedi is not
        asked, so a library name costs a few `stat` calls.

        The model is the module's whole model when it is loaded already, else a slice of it that
        answers every question about the function alike (`_slice`): the module is parsed, but only
        the statements the function reaches by name are modelled. `budget`: what may still be parsed;
        a module that does not fit is not read (counted in `budget.cuts`) and the answer is None."""
        module, _, name = qualified.rpartition(".")
        if not module or not name or not importer or importer.startswith("<") or module.startswith("."):
            return None
        path = self._find_on_disk(importer, module)
        if path is None:
            return None
        model = self._function_model(path, name, used, budget)
        if model is None:
            return None
        fn = model.functions.get(name)
        if fn is not None and not fn.parent and not fn.owner:
            return model, name
        target = model.imports.aliases.get(name)  # re-exported through a package __init__
        if target and target != qualified and "." in target and target.count(".") < 8:
            return self.resolve_function(model.path, target, used, budget)
        return None

    def may_define_grad_decorator(self, importer: str, qualified: str) -> bool:
        """A cheap look at the text before a decorator's module is parsed: False when the module
        defines the function and never names no_grad / inference_mode (a re-export is looked at
        no further here: resolution follows it)."""
        module, _, name = qualified.rpartition(".")
        path = self._find_on_disk(importer, module) if module else None
        if path is None:
            return False
        text = self.overrides.get(path)
        if text is None:
            try:
                text = _read(path, os.stat(path).st_size)
            except OSError:
                return False
        if text is None:
            return False
        return f"def {name}" not in text or "no_grad" in text or "inference_mode" in text

    def _find_on_disk(self, importer: str, module: str) -> str | None:
        return self._walk_up(importer, module, with_src=True)[0]

    def _walk_up(self, importer: str, module: str, with_src: bool) -> tuple[str | None, Path]:
        """The module's file beside the importer or in a parent folder up to the project root (and
        in the root's `src/` when `with_src`), or None; and the last folder looked in. (`os.path`
        on strings: a keystroke asks this for every name it cannot resolve, and pathlib costs
        several times more.)"""
        relative = os.path.join(*module.split("."))
        folder = os.path.dirname(os.path.abspath(importer))
        for _ in range(MAX_PARENT_LEVELS + 1):
            root = _is_root(folder)
            for base in (folder, os.path.join(folder, "src")) if with_src and root else (folder,):
                stem = os.path.join(base, relative)
                for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
                    if candidate in self.overrides or os.path.isfile(candidate):
                        return candidate, Path(folder)
            parent = os.path.dirname(folder)
            if root or parent == folder:
                break
            folder = parent
        return None, Path(folder)

    def module(self, importer: str, module: str, used: dict[str, Dependency]) -> ModuleModel | None:
        path = self._find(importer, module)
        if path is None:
            return None
        return self._load(path, used)

    def parsed_module(self, importer: str, module: str, used: dict[str, Dependency], budget: Budget | None = None) -> ParsedModule | None:
        """`module` as seen from `importer`, parsed but not modelled: what the estimator's interpreter runs
        (a semantic model costs about three parses and it reads none of it). The tree of a module
        modelled already is reused. None also when it does not fit `budget` (then `budget.cuts` grows)."""
        path = self._find(importer, module)
        return self.parsed_file(path, used, budget) if path is not None else None

    def parsed_file(self, path: str, used: dict[str, Dependency], budget: Budget | None = None, module_name: str = "") -> ParsedModule | None:
        """The file `path` parsed (cached per version, like the models); `module_name` resolves its relative
        imports (a library's file), else they keep their dots."""
        version = self._version(path, used)
        if version is None:
            return None
        key, text, size = version
        if budget is not None and not budget.spend(path, size):
            return None
        tree_key = (*key, module_name)
        if tree_key not in self._trees:
            for stale in [k for k in self._trees if k[0] == path and k[1] != key[1]]:
                del self._trees[stale]  # an older version of an editor buffer
            model = None if module_name else self._models.get(key)
            parsed: _Parsed | ModuleModel | None = model if model is not None and model.tree is not None else self._parsed.get(key)
            if parsed is None or module_name:
                text = self._text(path, text, size)
                parsed = _Parsed.of(SourceText(text), module_name) if text is not None else None
            self._trees[tree_key] = (
                ParsedModule(path, parsed.tree, parsed.imports, parsed.source.text) if parsed is not None and parsed.tree is not None else None
            )
        return self._trees[tree_key]

    def _find(self, importer: str, module: str) -> str | None:
        """Beside the importer or in a parent folder up to the project root; else ask jedi,
        which knows `src/` layouts and installed-editable packages of the project."""
        found, folder = self._walk_up(importer, module, with_src=False)
        if found is not None:
            return found
        key = (str(folder), module)
        if key not in self._jedi:
            self._jedi[key] = _jedi_find(importer, module, folder if _is_root(folder) else None)
        return self._jedi[key]

    def _version(self, path: str, used: dict[str, Dependency]) -> tuple[tuple[str, int], str | None, int] | None:
        """(cache key, the editor buffer's text or None for a file, its size) of the current version
        of `path`, recorded in `used`; None when it cannot be read."""
        text = self.overrides.get(path)
        if text is not None:
            used[path] = Dependency(path, OVERRIDE, hash(text))
            return (path, hash(text)), text, len(text)
        try:
            st = os.stat(path)
        except OSError:
            return None
        used[path] = Dependency(path, st.st_mtime_ns, st.st_size)
        return (path, st.st_mtime_ns), None, st.st_size

    def _text(self, path: str, text: str | None, size: int) -> str | None:
        return text if text is not None else _read(path, size)

    def _load(self, path: str, used: dict[str, Dependency]) -> ModuleModel | None:
        version = self._version(path, used)
        if version is None:
            return None
        key, text, size = version
        if key not in self._models:
            for stale in [k for k in self._models if k[0] == path]:
                del self._models[stale]  # an older version of the same file (an editor buffer changes on every keystroke)
            parsed = self._parsed.get(key)
            if parsed is not None:
                self._models[key] = build(parsed.tree, parsed.source, path, imports=parsed.imports, imported=True)
            else:
                text = self._text(path, text, size)
                source = SourceText(text) if text is not None else None
                self._models[key] = build(parse(source).tree, source, path, imported=True) if source is not None else None
        return self._models[key]

    def _function_model(self, path: str, name: str, used: dict[str, Dependency], budget: Budget | None) -> ModuleModel | None:
        """A model of `path` that answers every question about its top-level `name` (see `_slice`)."""
        version = self._version(path, used)
        if version is None:
            return None
        key, text, size = version
        if budget is not None and not budget.spend(path, size):
            return None  # unknown: the caller must not read this as "no such function"
        if key in self._models:
            return self._models[key]
        slice_key = (*key, name)
        if slice_key in self._slices:
            return self._slices[slice_key]
        parsed = self._parsed.get(key)
        if parsed is None and key not in self._parsed:
            for stale in [k for k in self._parsed if k[0] == path]:
                del self._parsed[stale]
            for old in [k for k in self._slices if k[0] == path and k[1] != key[1]]:
                del self._slices[old]
            text = self._text(path, text, size)
            parsed = _Parsed.of(SourceText(text)) if text is not None else None
            self._parsed[key] = parsed
            while len(self._parsed) > PARSED_KEPT:
                self._parsed.popitem(last=False)
        if parsed is None:
            model = None
        else:
            self._parsed.move_to_end(key)
            model = build(_slice(parsed.tree, name, parsed.mentions), parsed.source, path, imports=parsed.imports, imported=True)
        self._slices[slice_key] = model
        return model


@dataclass
class ProjectView:
    """One analysis's window on the project: resolves through the shared cache and
    records which files the analysis depended on."""

    project: Project
    used: dict[str, Dependency] = field(default_factory=dict)
    budget: Budget = field(default_factory=lambda: Budget(FOREIGN_BUDGET_BYTES))

    def sub(self) -> ProjectView:
        """A view that records its own dependencies and spends this view's budget (a callee's analysis)."""
        return ProjectView(self.project, budget=self.budget)

    def resolve_class(self, importer: str, qualified: str) -> tuple[ModuleModel, ClassInfo] | None:
        return self.project.resolve_class(importer, qualified, self.used)

    def resolve_function(self, importer: str, qualified: str) -> tuple[ModuleModel, str] | None:
        """`Project.resolve_function` within this analysis's budget: None also when the module did not
        fit (then `budget.cuts` grows, and whatever rests on the answer is unknown)."""
        return self.project.resolve_function(importer, qualified, self.used, self.budget)

    def may_define(self, importer: str, qualified: str) -> bool:
        """A file of the project may define `qualified` (`package.module.func`): its module's file is
        where `resolve_function` looks. Nothing is read; a few `stat` calls."""
        module = qualified.rpartition(".")[0]
        return bool(module) and not module.startswith(".") and self.project._find_on_disk(importer, module) is not None

    def summary(self, model: ModuleModel, qualname: str) -> FunctionSummary | None:
        """The whole-program summary of a function of `model` (core/program.py)."""
        return self.project.program.summary(model, qualname, self.used, budget=self.budget)

    def resolve_call(self, model: ModuleModel, name: str, scope: str) -> tuple[ModuleModel, str] | None:
        """The function a call of `name` in `scope` reaches, in this file or another module of the project."""
        return self.project.program.resolve(model, name, scope, self.used, self.budget)

    def decorator_disables_grad(self, model: ModuleModel, decorator: str) -> bool:
        """A decorator of the project (`@smart_inference_mode()`) that applies no_grad / inference_mode."""
        return decorator_disables_grad(self.project.program, model, decorator, self.used)


@dataclass
class Budget:
    """Bytes of other modules one analysis may still read to follow calls, charged once per file and
    whether or not the file was cached already, so that an answer never depends on what an earlier
    analysis of the same run read: a memoised answer replays the charges of its computation
    (`since` / `replay`). `cuts` counts the files refused; an answer computed while it grew is unknown."""

    left: int
    charged: dict[str, int] = field(default_factory=dict)
    touched: list[tuple[str, int]] = field(default_factory=list)
    cuts: int = 0

    def spend(self, path: str, size: int) -> bool:
        self.touched.append((path, size))
        if path in self.charged:
            return True
        if size > self.left:
            self.cuts += 1
            return False
        self.left -= size
        self.charged[path] = size
        return True

    def mark(self) -> tuple[int, int]:
        return len(self.touched), self.cuts

    def cut_since(self, mark: tuple[int, int]) -> bool:
        return self.cuts > mark[1]

    def since(self, mark: tuple[int, int]) -> tuple[tuple[str, int], ...]:
        """The files charged (or found charged) since `mark`, in order: what a memo entry replays."""
        return tuple(dict.fromkeys(self.touched[mark[0] :]))

    def replay(self, files: tuple[tuple[str, int], ...]) -> bool:
        """Charge what a memoised computation read, as computing it again would; False when one does not fit."""
        return all(self.spend(path, size) for path, size in files)


@dataclass
class ParsedModule:
    """Another module of the project (or a library's source file) as a syntax tree and its import map, without
    a semantic model: what the estimator's interpreter runs."""

    path: str
    tree: ast.Module
    imports: ImportMap
    text: str = field(compare=False, repr=False)  # its source: the lines that name a variable
    _by_name: dict[str, list[int]] | None = field(default=None, compare=False, repr=False)
    _variables: set[str] = field(default_factory=set, compare=False, repr=False)
    _changers: dict[str, list[int]] = field(default_factory=dict, compare=False, repr=False)
    _ends: list[int] | None = field(default=None, compare=False, repr=False)  # offset after each line of the text
    _mentions: dict[int, set[str]] = field(default_factory=dict, compare=False, repr=False)
    _headers: dict[int, set[str]] = field(default_factory=dict, compare=False, repr=False)

    def statements_for(self, names: Iterable[str], done: Collection[int] = ()) -> list[int]:
        """The indices, in order, of the top-level statements that binding `names` as the module's top level
        needs: the imports, and to a fixed point from `names`, every def or class of a name the kept code
        mentions, or one that changes a variable it mentions (`def _fill(): WIDTHS["large"] = 48`), or one
        decorated by a name it mentions (`@register("resnet")`: the decorator runs as the module loads);
        and every other statement that mentions one (it may bind, change, register or fill it:
        `Block.forward = ...`, `registry[name] = Block`, `if fused: Attention = FusedAttention`, `_fill()`).
        Of a def or class only what its header mentions counts: its functions' bodies run only when called,
        and the caller binds what they look up then (`Interpreter.bind_late`). What no kept name reaches (a
        table of pretrained weights, the module's other models) is left unrun. `done`: statements kept by
        an earlier call (and run), whose names were followed then: not given again."""
        by_name = self._index()
        body = self.tree.body
        kept = set() if done else {i for i, stmt in enumerate(body) if isinstance(stmt, _IMPORTS)}  # done: run with them
        todo = list(dict.fromkeys(names))
        seen = set(todo)
        while todo:
            name = todo.pop()
            for index in (*by_name.get(name, ()), *(self._changing(name) if name in self._variables else ())):
                if index not in kept and index not in done:
                    kept.add(index)
                    for mentioned in self._defined_with(index):
                        if mentioned not in seen:
                            seen.add(mentioned)
                            todo.append(mentioned)
        return sorted(kept)

    def binds(self, name: str) -> bool:
        """Some top-level statement may bind `name` (a def or class of that name, or another that mentions it)."""
        return name in self._index()

    def _defined_with(self, index: int) -> set[str]:
        """What a statement mentions as it runs: all of it, but of a def or class only its header (decorators,
        bases, defaults, annotations, a class's other body statements and its methods' headers)."""
        stmt = self.tree.body[index]
        if not isinstance(stmt, _DEFS):
            return self._mentioned(index)
        found = self._headers.get(index)
        if found is None:
            if isinstance(stmt, ast.ClassDef):
                found = _mentions_of_header(stmt)[0] | {stmt.name}
            else:
                parts = (*stmt.decorator_list, stmt.args, *([stmt.returns] if stmt.returns else []))
                found = {stmt.name}.union(*(_mentions(part)[0] for part in parts))
            self._headers[index] = found
        return found

    def _index(self) -> dict[str, list[int]]:
        """Defs and classes by their name and the module's own decorators they carry; other statements (not
        imports) by every name they mention."""
        if self._by_name is None:
            self._by_name = {}
            body = self.tree.body
            self._variables = {target.id for stmt in body if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                               for target in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]) if isinstance(target, ast.Name)}
            # a name a function declares global is a variable of the module too (`global CACHE; CACHE = {}`)
            self._variables.update(re.findall(r"\w+", " ".join(re.findall(r"\bglobal\s+(\w+(?:\s*,\s*\w+)*)", self.text))))
            # a decorator of this module's own may register what it decorates; an imported one (`torch.no_grad`) not here
            own = {stmt.name for stmt in body if isinstance(stmt, _DEFS)} | self._variables
            for index, stmt in enumerate(body):
                if isinstance(stmt, _DEFS):
                    decorators = {n.id for d in stmt.decorator_list for n in ast.walk(d) if isinstance(n, ast.Name)} & own
                    for name in {stmt.name} | decorators:
                        self._by_name.setdefault(name, []).append(index)
                elif not isinstance(stmt, _IMPORTS):
                    for name in self._mentioned(index):
                        self._by_name.setdefault(name, []).append(index)
        return self._by_name

    def _changing(self, variable: str) -> list[int]:
        """The top-level defs and classes that may change the module-level `variable` in place or declare it
        global (`_changes`, which walks only the parts of them on lines that name it)."""
        found = self._changers.get(variable)
        if found is None:
            lines = self._lines_naming(variable)
            found = self._changers[variable] = [i for i, stmt in enumerate(self.tree.body) if isinstance(stmt, _DEFS) and _changes(stmt, variable, lines)]
        return found

    def _lines_naming(self, name: str) -> list[int]:
        """The lines (1-based, sorted) of the text where the word `name` appears."""
        if self._ends is None:
            self._ends = list(itertools.accumulate(len(line) + 1 for line in self.text.split("\n")))  # offset after each line
        text = self.text
        lines: list[int] = []
        at = text.find(name)
        while at >= 0:
            after = at + len(name)
            if (at == 0 or not _word_char(text[at - 1])) and (after == len(text) or not _word_char(text[after])):
                line = bisect.bisect_right(self._ends, at) + 1
                if not lines or lines[-1] != line:
                    lines.append(line)
            at = text.find(name, after)
        return lines

    def _mentioned(self, index: int) -> set[str]:
        found = self._mentions.get(index)
        if found is None:
            found = self._mentions[index] = _mentions(self.tree.body[index])[0]
        return found


@dataclass(frozen=True)
class _Parsed:
    """A module's source, syntax tree and import map (of the whole module, imports at any depth)."""

    source: SourceText
    tree: ast.Module
    imports: ImportMap
    # `_mentions` of each top-level statement (by index), for every slice of this module: a module that
    # many functions are sliced from is walked once per statement, not once per slice
    mentions: dict[int, tuple[set[str], set[str]]] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, source: SourceText, module_name: str = "") -> _Parsed:
        tree = parse(source).tree
        return cls(source, tree, ImportMap.from_tree(tree, module_name))


def _slice(tree: ast.Module, name: str, memo: dict[int, tuple[set[str], set[str]]] | None = None) -> ast.Module:
    """The statements of `tree` that questions about its top-level function `name` can reach.

    The model resolves callees, classes, kinds and re-exports by name (through the whole module's
    import map, which the caller passes), never by what else the module holds, so the slice keeps,
    to a fixed point from `name`: the imports; every top-level def, and every other top-level
    statement, that binds or mentions a name the kept code mentions; and every class the kept
    code mentions, whole when the kept code calls it (`trainer = Trainer(...)`: its methods can be
    reached through the instance) or derives from it, else with its methods' bodies left out (their
    names, parameters and decorators stay, so `is_module`, `methods` and bases read the same).
    What the slice cannot answer alike are questions about the module as a whole (who calls `name`,
    what the module body runs), which no question about a callee asks. `memo`: `_mentions` of the
    top-level statements by index, kept between slices of the same tree (never changed by a caller)."""
    body = tree.body
    memo = {} if memo is None else memo

    def mentions(index: int) -> tuple[set[str], set[str]]:
        found = memo.get(index)
        if found is None:
            found = memo[index] = _mentions(body[index])
        return found

    if not _defines_function(body, name):
        return ast.Module(body=[stmt for stmt in body if isinstance(stmt, _IMPORTS)], type_ignores=[])  # only a re-export counts
    by_name: dict[str, list[int]] = {}
    for index, stmt in enumerate(body):
        if isinstance(stmt, _DEFS):
            by_name.setdefault(stmt.name, []).append(index)
        elif not isinstance(stmt, _IMPORTS):
            for mentioned in mentions(index)[0]:
                by_name.setdefault(mentioned, []).append(index)
    kept: dict[int, bool] = {i: True for i, stmt in enumerate(body) if isinstance(stmt, _IMPORTS)}  # index -> whole
    seen: dict[str, bool] = {name: True}  # name -> called (a class reached through it is kept whole)
    todo = [name]
    while todo:
        current = todo.pop()
        for index in by_name.get(current, ()):
            stmt = body[index]
            whole = not isinstance(stmt, ast.ClassDef) or seen[current]
            if kept.get(index, False) or (index in kept and not whole):
                continue
            kept[index] = whole
            names, called = _mentions_of_header(stmt) if isinstance(stmt, ast.ClassDef) and not whole else mentions(index)
            for mentioned in names:
                upgrade = mentioned in called or (isinstance(stmt, ast.ClassDef) and whole and mentioned in _base_names(stmt))
                if mentioned not in seen or (upgrade and not seen[mentioned]):
                    seen[mentioned] = seen.get(mentioned, False) or upgrade
                    todo.append(mentioned)
    return ast.Module(body=[body[i] if kept[i] else _stub(body[i]) for i in sorted(kept)], type_ignores=[])


_MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "add", "pop", "popitem", "remove", "clear", "discard",
                       "__setitem__"})


def _word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _any_between(lines: list[int], first: int, last: int) -> bool:
    """A line of the sorted `lines` lies in first..last."""
    at = bisect.bisect_left(lines, first)
    return at < len(lines) and lines[at] <= last


def _changes(definition: ast.stmt, variable: str, lines: list[int]) -> bool:
    """Whether a def or class may change the module-level `variable` in place when it runs (`X[k] = v`, `X.a = v`,
    `del X[k]`, `X.append(v)`: a mutating method; at any depth, not where it binds X itself: a parameter, a
    local) or declares it `global`; from the nodes on the lines (1-based, sorted) that name it: a node that
    declares, binds or changes it spans such a line (and so do the nodes holding it, a def or class from its
    first decorator), so a node spanning none is not walked."""
    found = local = False
    todo: list[ast.AST] = [definition]
    while todo:
        node = todo.pop()
        first = getattr(node, "lineno", None)
        if first is not None:
            first = min([first, *(d.lineno for d in getattr(node, "decorator_list", ()))])
            if not _any_between(lines, first, getattr(node, "end_lineno", None) or first):
                continue
        if isinstance(node, ast.Global):
            if variable in node.names:
                return True
        elif isinstance(node, ast.arg):
            local = local or node.arg == variable
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            local = local or node.id == variable
        elif isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            base = node.value
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            found = found or (isinstance(base, ast.Name) and base.id == variable)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS
              and isinstance(node.func.value, ast.Name)):
            found = found or node.func.value.id == variable
        todo.extend(ast.iter_child_nodes(node))
    return found and not local


def _base_names(cls: ast.ClassDef) -> set[str]:
    return {n.id for base in cls.bases for n in ast.walk(base) if isinstance(n, ast.Name)}


def _mentions_of_header(cls: ast.ClassDef) -> tuple[set[str], set[str]]:
    """What a class mentions outside its methods' bodies (decorators, bases, keywords, its methods'
    decorators and signatures, nested classes' headers)."""
    names: set[str] = set()
    called: set[str] = set()
    for part in (*cls.decorator_list, *cls.bases, *cls.keywords):
        n, c = _mentions(part)
        names |= n
        called |= c
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for part in (*stmt.decorator_list, stmt.args, *([stmt.returns] if stmt.returns else [])):
                n, c = _mentions(part)
                names |= n
                called |= c
        else:
            n, c = _mentions_of_header(stmt) if isinstance(stmt, ast.ClassDef) else _mentions(stmt)
            names |= n
            called |= c
    return names, called


def _stub(cls: ast.stmt) -> ast.stmt:
    """A class with every method's body replaced by `pass` (positions kept): its methods stay unread."""
    assert isinstance(cls, ast.ClassDef)
    body: list[ast.stmt] = []
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = stmt.body[0]
            stub = copy.copy(stmt)
            stub.body = [
                ast.Pass(
                    lineno=first.lineno, col_offset=first.col_offset, end_lineno=first.lineno, end_col_offset=first.col_offset
                )
            ]
            body.append(stub)
        else:
            body.append(_stub(stmt) if isinstance(stmt, ast.ClassDef) else stmt)
    out = copy.copy(cls)
    out.body = body
    return out


def _defines_function(body: list[ast.stmt], name: str) -> bool:
    """A def of `name` at module level, also inside a top-level `if`, `try`, `with` or loop."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return True
        if not isinstance(stmt, _DEFS):
            blocks = [getattr(stmt, f, None) or [] for f in ("body", "orelse", "finalbody")]
            blocks += [h.body for h in getattr(stmt, "handlers", None) or []] + [
                c.body for c in getattr(stmt, "cases", None) or []
            ]
            if any(_defines_function(block, name) for block in blocks):
                return True
    return False


def _mentions(node: ast.AST) -> tuple[set[str], set[str]]:
    """Every name a statement reads, binds or defines, at any depth; and those it calls."""
    found: set[str] = set()
    called: set[str] = set()
    for sub in breadth_first(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
            called.add(sub.func.id)
        elif isinstance(sub, _DEFS):
            found.add(sub.name)
        elif isinstance(sub, ast.alias):
            found.add((sub.asname or sub.name).partition(".")[0])
        elif isinstance(sub, (ast.Global, ast.Nonlocal)):
            found.update(sub.names)
    return found, called


def _is_root(folder: str | Path) -> bool:
    join = os.path.join
    return (
        os.path.isfile(join(folder, "pyproject.toml"))
        or os.path.exists(join(folder, ".git"))
        or os.path.isfile(join(folder, "setup.py"))
    )


def _jedi_find(importer: str, module: str, root: Path | None) -> str | None:
    """Resolve `module` with jedi, accepting only a file inside the project root."""
    if root is None or not module.replace(".", "").replace("_", "").isalnum():
        return None
    top = module.partition(".")[0]
    folders = [root, root / "src", *(Path(p) for p in sys.path if p and root in Path(p).parents)]
    if not holds_top_level(top, folders):
        return None  # no file of the project can be it (jedi would take 15-50 ms to say so)
    try:
        import jedi

        extra = [str(root / "src")] if (root / "src").is_dir() else []
        project = jedi.Project(str(root), added_sys_path=extra)
        code = f"import {module}\n"
        names = jedi.Script(code, path=importer, project=project, environment=source_only_environment()).goto(
            1, len(code) - 1, follow_imports=True
        )
    except Exception:  # jedi is best effort: an unresolved import only makes rules quieter
        return None
    for name in names:
        path = name.module_path
        if path is not None and path.suffix == ".py" and root in path.parents and "site-packages" not in path.parts:
            return str(path)
    return None


def _read(path: str, size: int) -> str | None:
    if size > MAX_MODULE_BYTES:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None
