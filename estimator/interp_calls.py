"""The interpreter's calls of the user's code: functions and their arguments, classes and instances, imports of the
user's modules and the bundled catalog of library models (methods the Interpreter inherits)."""

from __future__ import annotations

import ast
import os
from typing import TYPE_CHECKING, Any

from torch_preflight.core.names import ImportMap, dotted
from torch_preflight.core.parse import parse
from torch_preflight.core.project import FOREIGN_BUDGET_BYTES, ParsedModule
from torch_preflight.core.source import SourceText
from torch_preflight.estimator import architectures, configs, library_sources
from torch_preflight.estimator.scope import (
    LIBRARIES,
    Scope,
    _Break,
    _Continue,
    _Return,
)
from torch_preflight.estimator.values import (
    UNKNOWN,
    ClassValue,
    Function,
    Module,
    Obj,
    Qualified,
    Unknown,
)

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter


class Calls:
    """Methods of the Interpreter (it inherits them); `self` is the Interpreter."""

    def instantiate(self: Interpreter, cls: ClassValue, args: list[Any], kwargs: dict[str, Any], line: int, col: int) -> Any:
        if cls.is_module:
            mod = Module(cls.name, line, col, cls=cls)
            mod.file = self.foreign_file()
            mod.doubtful = self.guessing > 0
            init = cls.lookup("__init__")
            if isinstance(init, Function):
                saved = (self.in_script, self.forward_depth)
                before = len(self.problems)
                self.in_script = 0
                try:
                    self.call_function(init, [mod, *args], kwargs)
                finally:
                    self.in_script, self.forward_depth = saved
                if len(self.problems) != before:
                    mod.doubtful = True  # part of __init__ could not be read
            if self.dtype_override and self.dtype_override != "float32":
                pass
            return mod
        obj = Obj(cls.name)
        if cls.is_dataclass or (cls.lookup("__init__") is None and "__fields__" in cls.attrs):
            fields = self.all_fields(cls)
            for name in fields:
                default = cls.lookup(name)
                obj.attrs[name] = default if default is not None else UNKNOWN
            for name, value in zip(fields, args, strict=False):
                obj.attrs[name] = value
            obj.attrs.update(kwargs)
            post = cls.lookup("__post_init__")
            if isinstance(post, Function):
                self.call_function(post, [obj], {})
            obj.attrs["__class__"] = cls
            return obj
        obj.attrs["__class__"] = cls
        init = cls.lookup("__init__")
        if isinstance(init, Function):
            saved_script = self.in_script
            self.in_script = 0
            try:
                self.call_function(init, [obj, *args], kwargs)
            finally:
                self.in_script = saved_script
        return obj

    def all_fields(self: Interpreter, cls: ClassValue) -> list[str]:
        names: list[str] = []
        for base in cls.bases:
            if isinstance(base, ClassValue):
                names.extend(self.all_fields(base))
        names.extend(n for n in cls.attrs.get("__fields__", []) if n not in names)
        return names

    # ---- functions -----------------------------------------------------------------------------
    def call_function(self: Interpreter, fn: Function, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if fn.no_grad and self.grad_enabled:
            self.grad_enabled = False
            try:
                return self.call_function(fn, args, kwargs)
            finally:
                self.grad_enabled = True
        path = getattr(fn.env, "path", "") or self.cur_path
        if path == self.cur_path:
            return self._call_function(fn, args, kwargs)
        saved, self.cur_path = self.cur_path, path
        try:
            return self._call_function(fn, args, kwargs)
        finally:
            self.cur_path = saved

    def _call_function(self: Interpreter, fn: Function, args: list[Any], kwargs: dict[str, Any]) -> Any:
        self.tick()
        node = fn.node
        scope = Scope(fn.env)
        if fn.owner is not None:
            scope.vars["__class__"] = fn.owner  # as Python's cell: what `super()` in a method starts from
        a = node.args
        positional = [*a.posonlyargs, *a.args]
        if fn.config is not None and not args and not kwargs:
            args = [fn.config]  # `main()` of @hydra.main: Hydra passes the composed config
        defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
        for i, (param, default) in enumerate(zip(positional, defaults, strict=False)):
            if i < len(args):
                scope.vars[param.arg] = args[i]
            elif param.arg in kwargs:
                scope.vars[param.arg] = kwargs.pop(param.arg)
            elif default is not None:
                scope.vars[param.arg] = self.eval(default, fn.env)
            else:
                scope.vars[param.arg] = Unknown(f"argument `{param.arg}`")
        if a.vararg:
            scope.vars[a.vararg.arg] = tuple(args[len(positional):])
        for param, default in zip(a.kwonlyargs, a.kw_defaults, strict=False):
            if param.arg in kwargs:
                scope.vars[param.arg] = kwargs.pop(param.arg)
            else:
                scope.vars[param.arg] = self.eval(default, fn.env) if default is not None else UNKNOWN
        if a.kwarg:
            scope.vars[a.kwarg.arg] = dict(kwargs)
        self.frames.append(scope)
        try:
            if isinstance(node, ast.Lambda):
                return self.eval(node.body, scope)
            self.exec_block(node.body, scope)
        except _Return as ret:
            return ret.value
        except (_Break, _Continue):
            return None
        finally:
            self.leave_frame(scope)
        return None

    def leave_frame(self: Interpreter, scope: Scope) -> None:
        """A function's frame ends: its locals go (the returned value lives on in the caller)."""
        self.frames.pop()
        if self.recorder is not None:
            for value in scope.vars.values():
                self.release(value)
        if self.evaluation is not None:
            for name in scope.vars:
                self.evaluation.bound.pop((id(scope), name), None)

    # ---- expressions ---------------------------------------------------------------------------
    def qualify(self: Interpreter, node: ast.AST, scope: Scope | None = None) -> str | None:
        name = dotted(node)
        imports = scope.imports if scope is not None and scope.imports is not None else self.model.imports
        return imports.resolve(name) if name else None

    # ---- the user's other modules ----------------------------------------------------------------
    def user_value(self: Interpreter, qualified: str) -> Any:
        """`models.UNet` imported from the user's own module (`from models import UNet`): the value
        that module's top level binds to the name (what binding it needs of the top level run once); None when
        the name is not one of the project's modules (libraries, unresolved imports)."""
        module, _, name = qualified.rpartition(".")
        module = module.lstrip(".")  # a relative import (`from .parts import Down`): looked for beside the importer, then above
        if self.project is None or not module or module.split(".")[0] in LIBRARIES:
            return None
        key = (self.cur_path, qualified)
        if key in self.user_values:
            return self.user_values[key]
        self.user_values[key] = None  # a cycle resolves to nothing
        found = self.other_module(module)
        value = None
        if found is not None and found.path != self.model.path:
            value = self.run_module(found, module, (name,)).vars.get(name)
            if isinstance(value, Qualified):  # re-exported: `from .layers import Block` in a package __init__
                saved, self.cur_path = self.cur_path, found.path
                try:
                    value = self.user_value(value.name)
                finally:
                    self.cur_path = saved
        self.user_values[key] = value
        return value

    def other_module(self: Interpreter, module: str) -> ParsedModule | None:
        """The project's module `module` as seen from the running file, within the read budget of the
        analysis (`ProjectView.budget`, which also bounds the whole-program model): one that does not fit
        is not read, and the estimate says so rather than running on without it."""
        assert self.project is not None
        budget = self.project.budget
        cuts = budget.cuts
        try:
            found = self.project.project.parsed_module(self.cur_path, module, self.project.used, budget)
        except Exception:  # the project lookup is best effort
            return None
        if budget.cuts > cuts:
            self.unread.append(module)
            self.problem(f"module `{module}` was not read: {_OVER_BUDGET}", None)
        return found

    def library_value(self: Interpreter, qualified: str) -> Any:
        """A model function or class of a library (`torchvision.models.resnet50`): read from the library's source file
        when the environment has the library (estimator.library_sources), else from the bundled catalog of common
        architectures (estimator.architectures), read like a user module; None when neither holds it."""
        found = library_sources.locate(qualified, self.library_paths)
        if found is not None:
            if self.cur_path not in self.library_files:  # named in the user's code, not in the library's own
                self.assume(f"{qualified} read from the installed library's source ({found[1]})", None)
            return self.library_definition(*found)
        catalogued = architectures.library_source(qualified)
        if catalogued is None:
            return None
        module, name = catalogued
        path = f"<{module}>"
        tree = self.library_trees.get(path)
        if tree is None:
            tree = self.library_trees[path] = _parsed(architectures.source(module), path)
        self.assume(f"{qualified} read from torch-preflight's catalog of common architectures (the library itself is not read)", None)
        return self.run_module(tree, module, (name,)).vars.get(name)

    def library_definition(self: Interpreter, path: str, module: str, name: str) -> Any:
        """What the top level of a library's source file (`module`, read from `path`) binds to `name`, the part of
        the file that binding needs run once."""
        self.library_files.add(path)
        found = self.project.project.parsed_file(path, {}, module_name=module) if self.project is not None else None
        if found is None:
            found = self.library_trees.get(path)
            if found is None:
                found = self.library_trees[path] = _parsed(library_sources.read(path), path, module)
        return self.run_module(found, module, (name,)).vars.get(name)

    def import_star(self: Interpreter, node: ast.ImportFrom, scope: Scope) -> None:
        """`from models import *` / `from .parts import *` of the user's own module: its public names (or its
        `__all__`), its top level run once; a library's star import binds nothing the estimate can use."""
        module = (node.module or "").lstrip(".")
        if self.project is None or not module or module.split(".")[0] in LIBRARIES:
            return
        found = self.other_module(module)
        other = self.run_module(found, module) if found is not None and found.path != self.model.path else None
        if other is None:
            self.problem(f"`from {'.' * node.level}{node.module or ''} import *`: the module was not found", node)
            return
        names = other.vars.get("__all__")
        public = [n for n in names if isinstance(n, str)] if isinstance(names, list) else [n for n in other.vars if not n.startswith("_")]
        for name in public:
            if name in other.vars:
                scope.vars[name] = other.vars[name]

    def module_vars(self: Interpreter) -> dict[str, Any]:
        """`globals()`: the running module's variables, live (a configurator assigns through it)."""
        loaded = self.loaded.get(self.cur_path) if self.cur_path != self.model.path else None
        return (loaded[0] if loaded is not None else self.globals).vars

    def exec_file(self: Interpreter, path: str, node: ast.AST | None) -> None:
        """`exec(open(path).read())`: read that file of the project and run it in the script's globals (a
        configurator); lines in it are reported as that file's."""
        full = configs.project_path(path, os.path.dirname(self.model.path))
        try:
            with open(full, encoding="utf-8") as f:
                tree = ast.parse(f.read(), full)
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
            self.problem(f"exec() of `{path}`, which could not be read", node)
            return
        saved, self.cur_path = self.cur_path, full
        try:
            self.exec_block(tree.body, self.globals)
        finally:
            self.cur_path = saved

    def bind_late(self: Interpreter, scope: Scope, name: str) -> bool:
        """Run what binding `name` needs of the module `scope`'s chain ends in, when that module's top level was run
        only in part (`run_module`: a function's body runs only when called, and what it looks up is bound then);
        whether anything ran. Each name is asked once per module."""
        while scope.parent is not None:
            scope = scope.parent
        lazy = scope.lazy
        if lazy is None or name in lazy[2] or not lazy[0].binds(name):
            return False
        module, module_name, asked = lazy
        asked.add(name)
        done = self.loaded[module.path][1]
        before = len(done)
        self.run_module(module, module_name, (name,))
        return len(done) > before

    def foreign_file(self: Interpreter) -> str:
        """The running file when it is one of the user's other modules, else ""."""
        return self.cur_path if self.cur_path != self.model.path else ""

    def run_module(self: Interpreter, module: ParsedModule, name: str, wanted: tuple[str, ...] | None = None) -> Scope:
        """Another module's scope, as an import would bind it, with of its top level only what binding `wanted`
        needs (`ParsedModule.statements_for`; all of it when None) run, each statement once: a model module's
        table of pretrained weights or its other models are not run for the one block the script imports.
        A statement asked for again while it runs (an import cycle) finds what is bound so far."""
        loaded = self.loaded.get(module.path)
        if loaded is None:
            scope = Scope(imports=module.imports, path=module.path)
            scope.vars["__name__"] = name
            loaded = self.loaded[module.path] = (scope, set())
        scope, done = loaded
        if wanted is not None and scope.lazy is None:
            scope.lazy = (module, name, set())  # what its functions look up when they run is bound then (`bind_late`)
        body = module.tree.body
        todo = [i for i in (module.statements_for(wanted, done) if wanted is not None else range(len(body))) if i not in done]
        if todo:
            done.update(todo)
            saved = (self.in_script, self.cur_path)
            self.in_script, self.cur_path = 0, module.path
            try:
                self.exec_block([body[i] for i in todo], scope)
            except (_Return, _Break, _Continue):
                pass
            finally:
                self.in_script, self.cur_path = saved
        return scope


_OVER_BUDGET = f"the project's modules the estimate needs are over the read budget ({FOREIGN_BUDGET_BYTES // 1000} kB)"


def _parsed(text: str, path: str, module: str = "") -> ParsedModule:
    """A library's source file (or a catalogued architecture) as the interpreter runs it; relative imports
    resolved against `module`."""
    tree = parse(SourceText(text)).tree
    return ParsedModule(path, tree, ImportMap.from_tree(tree, module), text)



