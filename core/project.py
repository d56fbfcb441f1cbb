"""The user's other modules: a model class imported from `model.py` next to the script.

`Project.resolve_class(importer, "models.resnet.ResNet")` finds `models/resnet.py` (or
`models/resnet/__init__.py`) beside the importing file or in one of its parent folders
up to the project root, parses and models it with the same core, and returns the class.
Nothing is imported or executed. Results are cached per path and modification time in
the `Project` instance (one per CLI run, per language-server session). Each analysis
looks through its own `ProjectView`, which records the files it used, so that caches of
the importing file can be invalidated when one of them changes.

This is the one place besides configuration loading where the core reads files. Rules
receive a `Project` through their context and never touch the file system themselves.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from torch_preflight.core.parse import parse
from torch_preflight.core.program import FunctionSummary, Program, decorator_disables_grad
from torch_preflight.core.semantic import ClassInfo, ModuleModel, build
from torch_preflight.core.source import SourceText

MAX_MODULE_BYTES = 2_000_000
MAX_PARENT_LEVELS = 3


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
    _models: dict[tuple[str, int], ModuleModel | None] = field(default_factory=dict, repr=False)
    _jedi: dict[tuple[str, str], str | None] = field(default_factory=dict, repr=False)
    _program: Program | None = field(default=None, repr=False)

    @property
    def program(self) -> Program:
        """The function summaries of the project (core/program.py), shared by every analysis."""
        if self._program is None:
            self._program = Program(self)
        return self._program

    def view(self) -> ProjectView:
        return ProjectView(self)

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

    def resolve_function(self, importer: str, qualified: str, used: dict[str, Dependency]) -> tuple[ModuleModel, str] | None:
        """The top-level function `qualified` (`package.module.func`) as seen from `importer`:
        its module's model and the function's qualname. Only files on disk beside the importer
        or in its parent folders up to the project root (and `<root>/src`) count; jedi is not
        asked, so a library name costs a few `stat` calls."""
        module, _, name = qualified.rpartition(".")
        if not module or not name or not importer or importer.startswith("<") or module.startswith("."):
            return None
        path = self._find_on_disk(importer, module)
        if path is None:
            return None
        model = self._load(path, used)
        if model is None:
            return None
        fn = model.functions.get(name)
        if fn is not None and not fn.parent and not fn.owner:
            return model, name
        target = model.imports.aliases.get(name)  # re-exported through a package __init__
        if target and target != qualified and "." in target and target.count(".") < 8:
            return self.resolve_function(model.path, target, used)
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
        in the root's `src/` when `with_src`), or None; and the last folder looked in."""
        parts = module.split(".")
        folder = Path(os.path.abspath(importer)).parent
        for _ in range(MAX_PARENT_LEVELS + 1):
            roots = (folder, folder / "src") if with_src and _is_root(folder) else (folder,)
            for root in roots:
                base = root.joinpath(*parts)
                for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                    if str(candidate) in self.overrides or candidate.is_file():
                        return str(candidate), folder
            if _is_root(folder) or folder.parent == folder:
                break
            folder = folder.parent
        return None, folder

    def module(self, importer: str, module: str, used: dict[str, Dependency]) -> ModuleModel | None:
        path = self._find(importer, module)
        if path is None:
            return None
        return self._load(path, used)

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

    def _load(self, path: str, used: dict[str, Dependency]) -> ModuleModel | None:
        text = self.overrides.get(path)
        if text is None:
            try:
                st = os.stat(path)
            except OSError:
                return None
            used[path] = Dependency(path, st.st_mtime_ns, st.st_size)
            key = (path, st.st_mtime_ns)
            if key not in self._models:
                text = _read(path, st.st_size)
        else:
            used[path] = Dependency(path, OVERRIDE, hash(text))
            key = (path, hash(text))
        if key not in self._models:
            for stale in [k for k in self._models if k[0] == path]:
                del self._models[stale]  # an older version of the same file (an editor buffer changes on every keystroke)
            model = None
            if text is not None:
                source = SourceText(text)
                model = build(parse(source).tree, source, path)
            self._models[key] = model
        return self._models[key]


@dataclass
class ProjectView:
    """One analysis's window on the project: resolves through the shared cache and
    records which files the analysis depended on."""

    project: Project
    used: dict[str, Dependency] = field(default_factory=dict)

    def resolve_class(self, importer: str, qualified: str) -> tuple[ModuleModel, ClassInfo] | None:
        return self.project.resolve_class(importer, qualified, self.used)

    def resolve_function(self, importer: str, qualified: str) -> tuple[ModuleModel, str] | None:
        return self.project.resolve_function(importer, qualified, self.used)

    def summary(self, model: ModuleModel, qualname: str) -> FunctionSummary | None:
        """The whole-program summary of a function of `model` (core/program.py)."""
        return self.project.program.summary(model, qualname, self.used)

    def resolve_call(self, model: ModuleModel, name: str, scope: str) -> tuple[ModuleModel, str] | None:
        """The function a call of `name` in `scope` reaches, in this file or another module of the project."""
        return self.project.program.resolve(model, name, scope, self.used)

    def decorator_disables_grad(self, model: ModuleModel, decorator: str) -> bool:
        """A decorator of the project (`@smart_inference_mode()`) that applies no_grad / inference_mode."""
        return decorator_disables_grad(self.project.program, model, decorator, self.used)


def _is_root(folder: Path) -> bool:
    return (folder / "pyproject.toml").is_file() or (folder / ".git").exists() or (folder / "setup.py").is_file()


def _jedi_find(importer: str, module: str, root: Path | None) -> str | None:
    """Resolve `module` with jedi, accepting only a file inside the project root."""
    if root is None or not module.replace(".", "").replace("_", "").isalnum():
        return None
    try:
        import jedi

        extra = [str(root / "src")] if (root / "src").is_dir() else []
        project = jedi.Project(str(root), added_sys_path=extra)
        code = f"import {module}\n"
        names = jedi.Script(code, path=importer, project=project).goto(1, len(code) - 1, follow_imports=True)
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
