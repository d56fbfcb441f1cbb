"""A small abstract interpreter over the file's syntax tree.

It runs module-level code, helper functions, `__init__` of nn.Module classes and their
`forward()` with tensors as shapes, never importing torch or the user's code. While a
forward runs with gradients enabled, it records what autograd would save (per op, with
the layer it belongs to) so the timeline can replay forward, backward and step.
"""

from __future__ import annotations

import ast
import math
import operator
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from torch_preflight.core.names import ImportMap, dotted
from torch_preflight.core.parse import parse
from torch_preflight.core.project import ProjectView
from torch_preflight.core.semantic import ModuleModel, build
from torch_preflight.core.source import SourceText
from torch_preflight.estimator import architectures, catalog, configs
from torch_preflight.estimator.record import Op, Ops, Recorder, StepRecord, broadcast, dims_of, norm_dim, promote
from torch_preflight.estimator.values import (
    DTYPE_ALIASES,
    UNKNOWN,
    BoundMethod,
    ClassValue,
    ContextValue,
    Dataset,
    Function,
    Loader,
    MethodRef,
    Module,
    Obj,
    Optimizer,
    ParamValue,
    Qualified,
    Tensor,
    Transform,
    Unknown,
    is_unknown,
)

MAX_STEPS = 200_000  # statements executed before giving up (keeps the editor fast); the estimate passes its own
FILE_LINES = 2_000  # `for line in f` reads a file of the project up to this many lines
LONG_ITERABLE = 100_000  # a comprehension over more items gives that many unread values (a corpus encoded char by char)
# imported names from these packages are never looked for among the user's own modules
LIBRARIES = {
    "torch", "torchvision", "torchaudio", "torchtext", "numpy", "math", "os", "sys", "random", "dataclasses", "typing",
    "collections", "functools", "itertools", "argparse", "json", "time", "pathlib", "re", "copy", "logging", "warnings",
    "transformers", "lightning", "pytorch_lightning", "timm", "einops", "tqdm", "wandb", "bitsandbytes", "accelerate",
    "deepspeed", "datasets", "PIL", "scipy", "sklearn", "pandas", "hydra", "omegaconf", "yaml", "tensorboard",
}
FLOATS = ("float32", "float16", "bfloat16", "float64")


class Budget(Exception):
    """Too much work: the interpreter stops and the report is marked incomplete."""


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class Scope:
    def __init__(self, parent: Scope | None = None, imports: ImportMap | None = None, path: str = "") -> None:
        self.vars: dict[str, Any] = {}
        self.parent = parent
        # the module this scope's code belongs to: its imports and its file (the estimated file, or
        # one of the user's other modules that a model class was read from)
        self.imports: ImportMap | None = imports if imports is not None or parent is None else parent.imports
        self.path: str = path or (parent.path if parent is not None else "")

    def lookup(self, name: str) -> Any:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.vars:
                return scope.vars[name]
            scope = scope.parent
        raise KeyError(name)


@dataclass
class Instance:
    module: Module
    line: int
    col: int
    name: str  # the variable it was bound to, if any


class Interpreter:
    # what torch calls do: estimator.ops, a registry this class reads and never imports (the estimator package sets it)
    ops: Ops

    def __init__(self, model: ModuleModel, tree: ast.Module, *, device: str = "cuda", batch_override: int | None = None,
                 input_shape: tuple[int, ...] | None = None, force_autocast: str | None = None, dtype: str | None = None,
                 project: ProjectView | None = None, argv: tuple[str, ...] | None = None, max_steps: int = MAX_STEPS) -> None:
        self.model = model
        self.argv = list(argv) if argv is not None else None  # the script's own command line, when given
        self.project = project  # resolves imports into the user's other modules (model classes, configs)
        self.user_modules: dict[str, Scope | None] = {}  # path -> its module scope (None while it loads)
        self.user_values: dict[tuple[str, str], Any] = {}
        self.cur_path = model.path  # the file whose code is running
        self.tree = tree
        self.device = device
        self.batch_override = batch_override
        self.input_shape = input_shape
        self.force_autocast = force_autocast
        self.dtype_override = dtype
        self.globals = Scope(imports=model.imports, path=model.path)
        self.steps_left = self.max_steps = max_steps
        self.out_of_budget = False
        self.setup_bytes = 0  # the largest tensor the script builds outside its steps (the CPU's peak may be there)
        self.grad_enabled = True
        self.autocast: str | None = force_autocast
        self.forward_depth = 0
        self.recorder: Recorder | None = None
        self.step_records: list[StepRecord] = []
        self.instances: list[Instance] = []
        self.optimizers: list[Optimizer] = []
        self.zero_grad_set_to_none: bool | None = None
        self.zero_grad_seen = False
        self.zero_grad_after_forward = False  # `loss = model(x); opt.zero_grad(); loss.backward()`: last step's grads live through forward
        self.checkpointed = False
        self.assumptions: list[tuple[str, int | None]] = []
        self.problems: list[tuple[str, int | None]] = []
        self.batch_sizes: list[tuple[int, int]] = []  # (value, line)
        self.decisions: dict[str, bool] = {}  # a condition that is not known -> the value it was taken to have
        self.line = 0
        self.in_script = 0  # > 0 while running script code (not model code)
        self.classes: dict[str, ClassValue] = {}
        self.iterated_loops = 0
        # shape checking (TPF501): set by estimator.shapes; None while estimating memory
        self.checker: Any = None
        self.guessing = 0  # > 0 while running a branch taken on a condition that is not known
        self.fwd_doubt = 0  # problems met in the running top-level forward (a check after one stays silent)
        self.fwd_guessed = False  # the running top-level forward's input shape rests on a guess
        self.mstack: list[Module] = []  # modules whose forward is running, outermost first
        self.cur_node: ast.AST | None = None  # the call being evaluated
        self.scope: Scope = self.globals  # the scope of the running statement

    def held_outputs(self, rec: Recorder, loss: Tensor) -> list[tuple[int, int]]:
        """Forward outputs the running code still holds in its variables when backward() runs (`logits, loss =
        model(x, y)`): autograd frees its saved tensors, but these stay allocated through backward and the step."""
        produced = {op.out_id for op in rec.ops}
        batch = {t.storage.id for t in rec.batch if t.storage is not None}
        held: dict[int, int] = {}
        scope: Scope | None = self.scope
        while scope is not None:
            for value in scope.vars.values():
                for t in value if isinstance(value, (tuple, list)) and len(value) <= 64 else (value,):
                    if not isinstance(t, Tensor) or t.storage is None or t.storage is loss.storage:
                        continue
                    if t.storage.id in produced:
                        held[t.storage.id] = t.storage.nbytes
                    elif self.device == "cpu" and t.external and not t.host and not t.is_param and t.storage.id not in batch:
                        # a tensor the script keeps in CPU memory (a whole tokenized corpus): the CPU's peak holds it
                        held[t.storage.id] = t.storage.nbytes
            scope = scope.parent
        return list(held.items())

    # ---- bookkeeping -------------------------------------------------------------------------
    def problem(self, text: str, node: ast.AST | None = None) -> None:
        line = getattr(node, "lineno", None)
        if line and self.cur_path != self.model.path:  # in another module: its line means nothing here
            text, line = f"{text} (in {self.cur_path.rsplit('/', 1)[-1]}:{line})", None
        entry = (text, line - 1 if line else None)
        if self.forward_depth > 0:
            self.fwd_doubt += 1
        if entry not in self.problems:
            self.problems.append(entry)

    def doubt(self, text: str) -> None:
        """A guess inside model code: shape checks after it in the same forward stay silent."""
        if self.forward_depth > 0:
            self.fwd_doubt += 1

    def guessed_block(self, stmts: list[ast.stmt], scope: Scope) -> None:
        self.guessing += 1
        try:
            self.exec_block(stmts, scope)
        finally:
            self.guessing -= 1

    def decide(self, test: ast.expr) -> bool:
        """The branch to take on a condition that is not known: the first, unless the same condition (or its
        negation) was decided before, so that `if not self.flash:` in __init__ and `if self.flash:` in forward
        agree on what `self.flash` is."""
        negated = False
        while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, negated = test.operand, not negated
        key = ast.unparse(test)
        value = self.decisions.setdefault(key, not negated)
        return value != negated

    def assume(self, text: str, line: int | None, path: str | None = None) -> None:
        """A value the estimate rests on, read at `line` of `path` (default: the running file)."""
        path = path or self.cur_path
        if line is not None and path != self.model.path:  # another module's line: name the file in the text
            text, line = f"{text} from {path.rsplit('/', 1)[-1]}:{line + 1}", None
        if (text, line) not in self.assumptions:
            self.assumptions.append((text, line))

    def tick(self) -> None:
        self.steps_left -= 1
        if self.steps_left <= 0:
            raise Budget

    # ---- entry ------------------------------------------------------------------------------
    def run(self) -> None:
        self.globals.vars["__name__"] = "__main__"
        self.in_script = 1
        try:
            self.exec_block(self.tree.body, self.globals)
        except _Return:
            pass
        except Budget:
            self.out_of_budget = True
            self.problem("the file is too large to interpret fully")
            self.steps_left = self.max_steps // 10  # enough to build the models the report names

    def construct_class(self, cls: ClassValue, line: int, col: int) -> Any:
        return self.call(cls, [], {}, None, line=line, col=col)

    # ---- statements ---------------------------------------------------------------------------
    def exec_block(self, stmts: list[ast.stmt], scope: Scope) -> None:
        for stmt in stmts:
            self.exec_stmt(stmt, scope)

    def exec_stmt(self, node: ast.stmt, scope: Scope) -> None:
        self.tick()
        self.line = node.lineno - 1
        self.scope = scope
        try:
            self._exec_stmt(node, scope)
        except (_Return, _Break, _Continue, Budget):
            raise
        except RecursionError:
            raise Budget from None
        except Exception as exc:  # a bug or a gap in the interpreter: say so, and go on with the next statement
            self.problem(f"internal error in estimator ({type(exc).__name__}: {str(exc)[:60]}) at "
                         f"`{ast.unparse(node).splitlines()[0][:60]}`", node)

    def _exec_stmt(self, node: ast.stmt, scope: Scope) -> None:
        if isinstance(node, ast.Expr):
            self.eval(node.value, scope)
        elif isinstance(node, ast.Assign):
            value = self.eval(node.value, scope)
            for target in node.targets:
                self.assign(target, value, scope, node)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.assign(node.target, self.eval(node.value, scope), scope, node)
        elif isinstance(node, ast.AugAssign):
            current = self.eval(node.target, scope) if not isinstance(node.target, ast.Subscript) else UNKNOWN
            value = self.binop(node.op, current, self.eval(node.value, scope), node, inplace=True)
            self.assign(node.target, value, scope, node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn: Any = Function(node, scope)
            for dec in reversed(node.decorator_list):
                name = self.qualify(dec, scope)
                if name in ("property", "functools.cached_property"):
                    fn = Obj("property", {"fget": fn})
                elif isinstance(fn, Function) and {name, self.qualify(dec.func, scope) if isinstance(dec, ast.Call) else None} & {
                        "torch.no_grad", "torch.inference_mode"}:
                    fn.no_grad = True  # runs without recording: an evaluation helper
                elif name in ("staticmethod", "classmethod", "functools.wraps"):
                    continue
            scope.vars[node.name] = fn
        elif isinstance(node, ast.ClassDef):
            scope.vars[node.name] = self.define_class(node, scope)
        elif isinstance(node, ast.Return):
            raise _Return(self.eval(node.value, scope) if node.value is not None else None)
        elif isinstance(node, ast.If):
            cond = self.truth(self.eval(node.test, scope))
            if cond is None:
                if self.in_script:
                    self.guessed_block(node.body, scope)  # script code: take the main branch
                else:
                    taken = self.decide(node.test)
                    self.problem(f"condition `{ast.unparse(node.test)[:50]}` is not known; took its "
                                 f"{'first' if taken else 'second'} branch", node)
                    self.guessed_block(node.body if taken else node.orelse, scope)
            elif cond:
                self.exec_block(node.body, scope)
            else:
                self.exec_block(node.orelse, scope)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self.exec_for(node, scope)
        elif isinstance(node, ast.While):
            if self.in_script and self.forward_depth == 0:
                try:
                    self.exec_block(node.body, scope)
                except _Break:
                    pass
                except _Continue:
                    pass
            else:
                self.problem("a while loop in model code is not modelled", node)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            self.exec_with(node, scope)
        elif isinstance(node, ast.Try):
            self.exec_block(node.body, scope)
            self.exec_block(node.orelse, scope)
            self.exec_block(node.finalbody, scope)
        elif isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            self.import_star(node, scope)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                # the import map knows the file's own imports; an exec'd file's are read from the statement
                if isinstance(node, ast.Import):
                    here = alias.name if alias.asname else local
                elif node.module and not node.level:
                    here = f"{node.module}.{alias.name}"
                else:  # a relative import: the import map knows the package
                    here = (scope.imports or self.model.imports).resolve(local) or local
                scope.vars[local] = Qualified(here)
        elif isinstance(node, ast.Break):
            raise _Break
        elif isinstance(node, ast.Continue):
            raise _Continue
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    scope.vars.pop(target.id, None)
        elif isinstance(node, (ast.Pass, ast.Global, ast.Nonlocal, ast.Assert, ast.Raise)):
            pass
        else:
            self.problem(f"statement `{type(node).__name__}` is not modelled", node)

    def exec_for(self, node: ast.For | ast.AsyncFor, scope: Scope) -> None:
        iterable = self.eval(node.iter, scope)
        items = self.iterate(iterable, node)
        if items is None:
            return
        # script loops run once (one pass is one training step), but a loop over plain values that trains nothing
        # runs through (a configurator reading sys.argv, a list of layer sizes)
        every = len(items) <= 256 and all(isinstance(v, (str, int, float, bool)) for v in items) and not _trains(node)
        for index, item in enumerate(items):
            if self.in_script and self.forward_depth == 0 and index >= 1 and not every:
                break
            self.tick()
            self.assign(node.target, item, scope, node)
            try:
                self.exec_block(node.body, scope)
            except _Break:
                return
            except _Continue:
                continue
        else:
            self.exec_block(node.orelse, scope)

    def iterate(self, value: Any, node: ast.AST) -> list[Any] | None:
        if isinstance(value, range):
            if len(value) > 10_000 and not self.in_script:
                raise Budget
            return list(value)
        if isinstance(value, (list, tuple)):
            return list(value)
        if isinstance(value, dict):
            return [k for k in value if k != "__class__"]  # an instance's __dict__ holds its class for the interpreter
        if isinstance(value, (set, frozenset)):
            return sorted(value, key=repr)
        if isinstance(value, str):
            return list(value)
        if isinstance(value, Obj) and value.type in ("enumerate", "zip"):
            return value.attrs["items"]
        if isinstance(value, Obj) and value.type == "items":
            return value.attrs["items"]
        if isinstance(value, Loader):
            batch = self.loader_batch(value, node)
            return [batch]
        if isinstance(value, Module) and value.type in ("ModuleList", "Sequential"):
            return list(value.children.values())
        if isinstance(value, Module) and value.type == "ModuleDict":
            return list(value.children)
        if isinstance(value, Obj) and value.type == "file":  # `for line in f:` over a short text file of the project
            text = configs.read_text(value.attrs["path"], os.path.dirname(self.model.path), value.attrs.get("mode", "r"))
            lines = text.splitlines(keepends=True) if isinstance(text, str) else None
            if lines is not None and len(lines) <= FILE_LINES:
                return lines  # a longer one (a corpus read word by word) would take the whole work budget: unknown
        if isinstance(value, Obj) and value.type == "parameters":
            return [p for _, p in value.attrs["module"].named_parameters()]
        if isinstance(value, Tensor):
            if not value.shape:
                return None
            # a tensor iterates over its first dimension: as many items as it has rows (a batch of indices)
            count = value.shape[0] if self.forward_depth == 0 and isinstance(value.shape[0], int) and value.shape[0] <= 4096 else 1
            return [value.view(value.shape[1:]) for _ in range(count)]
        if self.in_script:
            return [UNKNOWN]
        self.problem(f"cannot iterate `{ast.unparse(getattr(node, 'iter', node))[:40]}`", node)
        return None

    def exec_with(self, node: ast.With | ast.AsyncWith, scope: Scope) -> None:
        saved = (self.grad_enabled, self.autocast)
        for item in node.items:
            value = self.eval(item.context_expr, scope)
            if isinstance(value, ContextValue):
                if value.kind == "no_grad":
                    self.grad_enabled = False
                elif value.kind == "enable_grad":
                    self.grad_enabled = True
                elif value.kind == "autocast" and value.enabled:
                    self.autocast = value.dtype or ("float16" if self.device == "cuda" else "bfloat16")
                    self.assume(f"autocast {self.autocast}", node.lineno - 1)
            if item.optional_vars is not None:
                self.assign(item.optional_vars, value, scope, node)
        try:
            self.exec_block(node.body, scope)
        finally:
            self.grad_enabled, self.autocast = saved
            if self.force_autocast:
                self.autocast = self.force_autocast

    def release(self, value: Any) -> None:
        """A variable that held `value` is rebound or goes out of scope: a tensor it held (or a short list or tuple of
        them) is live until now, as CPython frees it when its last reference goes."""
        rec = self.recorder
        if rec is None or not rec.ops:
            return
        for t in value if isinstance(value, (tuple, list)) and len(value) <= 64 else (value,):
            if isinstance(t, Tensor) and t.storage is not None and t.requires_grad and not t.is_param:
                rec.released[t.storage.id] = (len(rec.ops), t.storage.nbytes)

    def assign(self, target: ast.expr, value: Any, scope: Scope, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            old = scope.vars.get(target.id)
            scope.vars[target.id] = value
            if old is not None and old is not value:
                self.release(old)
            if self.in_script and self.forward_depth == 0 and isinstance(value, Module) and not getattr(value, "_registered", False):
                if value.type not in catalog.LOSSES:
                    value._registered = True  # type: ignore[attr-defined]
                    self.instances.append(Instance(value, getattr(node, "lineno", 1) - 1, getattr(node, "col_offset", 0), target.id))
        elif isinstance(target, (ast.Tuple, ast.List)):
            starred = any(isinstance(elt, ast.Starred) for elt in target.elts)
            values = self.unpack(value, len(target.elts), node, exact=not starred)
            for elt, v in zip(target.elts, values, strict=False):
                if isinstance(elt, ast.Starred):
                    self.assign(elt.value, UNKNOWN, scope, node)
                else:
                    self.assign(elt, v, scope, node)
        elif isinstance(target, ast.Attribute):
            obj = self.eval(target.value, scope)
            self.setattr(obj, target.attr, value, node)
        elif isinstance(target, ast.Subscript):
            obj = self.eval(target.value, scope)
            key = self.eval(target.slice, scope)
            if isinstance(obj, (list, dict)) and not is_unknown(key):
                try:
                    obj[key] = value
                except (IndexError, TypeError):
                    pass
            elif isinstance(obj, Module) and obj.type == "ModuleDict" and isinstance(value, Module):
                obj.children[str(key)] = value

    def unpack(self, value: Any, n: int, node: ast.AST, exact: bool = False) -> list[Any]:
        if exact and isinstance(value, Obj) and value.type == "shape" and len(value.attrs["dims"]) != n:
            # `b, n, d = x.shape` on a tensor of another rank: a ValueError at run time when the shape is
            # known, and nothing known about b, n, d either way
            if self.checker is not None:
                self.checker.unpack(value, n, node)
            self.problem(f"unpacking a {len(value.attrs['dims'])}-D shape into {n} names", node)
            return [UNKNOWN] * n
        if isinstance(value, (tuple, list)):
            return list(value) + [UNKNOWN] * (n - len(value))
        if isinstance(value, Tensor):
            if value.shape and value.shape[0] == n:
                return [value.view(value.shape[1:]) for _ in range(n)]
            return [UNKNOWN] * n
        if isinstance(value, Obj) and value.type == "shape":
            return list(value.attrs["dims"])
        return [UNKNOWN] * n

    def setattr(self, obj: Any, name: str, value: Any, node: ast.AST) -> None:
        if isinstance(obj, Module):
            if isinstance(value, Module):
                obj.children[name] = value
                obj.attrs.pop(name, None)
            elif isinstance(value, ParamValue):
                if value.owner is not None and value.owner is not obj:
                    if name in obj.params:
                        obj.tied.add(name)  # weight tying: counted once, at its owner
                    else:
                        obj.attrs[name] = value
                else:
                    obj.params[name] = value.shape
                    value.owner, value.name = obj, name
            else:
                if name in obj.children and value is None:
                    del obj.children[name]
                obj.attrs[name] = value
        elif isinstance(obj, Obj):
            obj.attrs[name] = value

    # ---- classes -------------------------------------------------------------------------------
    def define_class(self, node: ast.ClassDef, scope: Scope) -> ClassValue:
        bases = tuple(self.eval(b, scope) for b in node.bases)
        bases = tuple(self.user_value(b.name) or b if isinstance(b, Qualified) else b for b in bases)
        is_module = any(
            (isinstance(b, Qualified) and b.name in ("torch.nn.Module", "torch.nn.modules.module.Module", "pytorch_lightning.LightningModule",
                                                      "lightning.LightningModule", "lightning.pytorch.LightningModule",
                                                      "torch.nn.Sequential", "torch.nn.modules.container.Sequential"))
            or (isinstance(b, Qualified) and b.name.startswith("torch.nn.") and b.name.rsplit(".", 1)[-1] in catalog.SIGNATURES)
            or (isinstance(b, ClassValue) and b.is_module)
            for b in bases
        )
        is_dc = any(self.qualify(d.func if isinstance(d, ast.Call) else d, scope) in ("dataclasses.dataclass", "dataclass") for d in node.decorator_list)
        cls = ClassValue(node, scope, bases, is_module, is_dc)
        body_scope = Scope(scope)
        saved_script = self.in_script
        self.in_script = 0
        try:
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    cls.attrs.setdefault("__fields__", []).append(stmt.target.id)
                    if stmt.value is not None:
                        default = self.eval(stmt.value, body_scope)
                        if isinstance(default, Obj) and default.type == "field":
                            default = default.attrs.get("default", UNKNOWN)
                        cls.attrs[stmt.target.id] = default
                        body_scope.vars[stmt.target.id] = default
                    continue
                self.exec_stmt(stmt, body_scope)
        finally:
            self.in_script = saved_script
        for name, value in body_scope.vars.items():
            fn = value.attrs.get("fget") if isinstance(value, Obj) and value.type == "property" else value
            if isinstance(fn, Function):
                fn.owner = cls
                if fn.env is body_scope:
                    fn.env = scope  # as in Python, a method does not see the class body's names (`next` is the builtin)
            cls.attrs.setdefault(name, value)
        if scope.path == self.model.path:
            self.classes[node.name] = cls  # the file's own classes (the fallback models when nothing is trained)
        return cls

    def instantiate(self, cls: ClassValue, args: list[Any], kwargs: dict[str, Any], line: int, col: int) -> Any:
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

    def all_fields(self, cls: ClassValue) -> list[str]:
        names: list[str] = []
        for base in cls.bases:
            if isinstance(base, ClassValue):
                names.extend(self.all_fields(base))
        names.extend(n for n in cls.attrs.get("__fields__", []) if n not in names)
        return names

    # ---- functions -----------------------------------------------------------------------------
    def call_function(self, fn: Function, args: list[Any], kwargs: dict[str, Any]) -> Any:
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

    def _call_function(self, fn: Function, args: list[Any], kwargs: dict[str, Any]) -> Any:
        self.tick()
        node = fn.node
        scope = Scope(fn.env)
        a = node.args
        positional = [*a.posonlyargs, *a.args]
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
        if isinstance(node, ast.Lambda):
            return self.eval(node.body, scope)
        try:
            self.exec_block(node.body, scope)
        except _Return as ret:
            return ret.value
        except (_Break, _Continue):
            return None
        finally:
            if self.recorder is not None:  # the frame's locals go (the returned value lives on in the caller)
                for value in scope.vars.values():
                    self.release(value)
        return None

    # ---- expressions ---------------------------------------------------------------------------
    def qualify(self, node: ast.AST, scope: Scope | None = None) -> str | None:
        name = dotted(node)
        imports = scope.imports if scope is not None and scope.imports is not None else self.model.imports
        return imports.resolve(name) if name else None

    # ---- the user's other modules ----------------------------------------------------------------
    def user_value(self, qualified: str) -> Any:
        """`models.UNet` imported from the user's own module (`from models import UNet`): the value
        that module's top level binds to the name, its top level run once, like an import; None when
        the name is not one of the project's modules (libraries, unresolved imports)."""
        module, _, name = qualified.rpartition(".")
        module = module.lstrip(".")  # a relative import (`from .parts import Down`): looked for beside the importer, then above
        if self.project is None or not module or module.split(".")[0] in LIBRARIES:
            return None
        key = (self.cur_path, qualified)
        if key in self.user_values:
            return self.user_values[key]
        self.user_values[key] = None  # a cycle resolves to nothing
        try:
            model = self.project.project.module(self.cur_path, module, self.project.used)
        except Exception:  # the project lookup is best effort
            model = None
        value = None
        if model is not None and model.tree is not None and model.path != self.model.path:
            scope = self.load_module(model, module)
            value = scope.vars.get(name) if scope is not None else None
            if isinstance(value, Qualified):  # re-exported: `from .layers import Block` in a package __init__
                saved, self.cur_path = self.cur_path, model.path
                try:
                    value = self.user_value(value.name)
                finally:
                    self.cur_path = saved
        self.user_values[key] = value
        return value

    def library_value(self, qualified: str) -> Any:
        """A model function or class of a library (`torchvision.models.resnet50`) from the bundled catalog of common
        architectures (estimator.architectures), read like a user module; None when the catalog does not hold it."""
        found = architectures.library_source(qualified)
        if found is None:
            return None
        module, name = found
        path = f"<{module}>"
        if path not in self.user_modules:
            source = SourceText(architectures.source(module))
            self.load_module(build(parse(source).tree, source, path), module)
        scope = self.user_modules.get(path)
        self.assume(f"{qualified} read from torch-preflight's catalog of common architectures (the library itself is not read)", None)
        return scope.vars.get(name) if scope is not None else None

    def import_star(self, node: ast.ImportFrom, scope: Scope) -> None:
        """`from models import *` / `from .parts import *` of the user's own module: its public names (or its
        `__all__`), its top level run once; a library's star import binds nothing the estimate can use."""
        module = (node.module or "").lstrip(".")
        if self.project is None or not module or module.split(".")[0] in LIBRARIES:
            return
        try:
            model = self.project.project.module(self.cur_path, module, self.project.used)
        except Exception:  # the project lookup is best effort
            model = None
        other = self.load_module(model, module) if model is not None and model.tree is not None and model.path != self.model.path else None
        if other is None:
            self.problem(f"`from {'.' * node.level}{node.module or ''} import *`: the module was not found", node)
            return
        names = other.vars.get("__all__")
        public = [n for n in names if isinstance(n, str)] if isinstance(names, list) else [n for n in other.vars if not n.startswith("_")]
        for name in public:
            if name in other.vars:
                scope.vars[name] = other.vars[name]

    def module_vars(self) -> dict[str, Any]:
        """`globals()`: the running module's variables, live (a configurator assigns through it)."""
        scope = self.user_modules.get(self.cur_path) if self.cur_path != self.model.path else None
        return (scope or self.globals).vars

    def exec_file(self, path: str, node: ast.AST | None) -> None:
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

    def foreign_file(self) -> str:
        """The running file when it is one of the user's other modules, else ""."""
        return self.cur_path if self.cur_path != self.model.path else ""

    def load_module(self, model: ModuleModel, name: str) -> Scope | None:
        if model.path in self.user_modules:
            return self.user_modules[model.path]
        self.user_modules[model.path] = None
        scope = Scope(imports=model.imports, path=model.path)
        scope.vars["__name__"] = name
        saved = (self.in_script, self.cur_path)
        self.in_script, self.cur_path = 0, model.path
        try:
            self.exec_block(model.tree.body, scope)  # type: ignore[union-attr]
        except (_Return, _Break, _Continue):
            pass
        finally:
            self.in_script, self.cur_path = saved
        self.user_modules[model.path] = scope
        return scope

    def truth(self, value: Any) -> bool | None:
        if is_unknown(value) or isinstance(value, (Tensor, Obj, Qualified)):
            return None
        try:
            return bool(value)
        except Exception:
            return None

    def eval(self, node: ast.AST | None, scope: Scope) -> Any:
        if node is None:
            return None
        self.tick()
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            try:
                return scope.lookup(node.id)
            except KeyError:
                pass
            if node.id in BUILTINS:
                return Qualified(node.id)
            imports = scope.imports or self.model.imports
            resolved = imports.resolve(node.id)
            if resolved and imports.is_imported(node.id):
                return Qualified(resolved)
            return Unknown(f"name `{node.id}`")
        if isinstance(node, ast.Attribute):
            base = self.eval(node.value, scope)
            return self.getattr(base, node.attr, node)
        if isinstance(node, ast.Call):
            return self.eval_call(node, scope)
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.eval(node.left, scope), self.eval(node.right, scope), node)
        if isinstance(node, ast.UnaryOp):
            value = self.eval(node.operand, scope)
            if isinstance(value, Tensor):
                return self.elementwise([value], value.shape, "neg")
            if is_unknown(value):
                return value
            try:
                unary: Any = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert}[type(node.op)]
                return unary(value)
            except Exception:
                return UNKNOWN
        if isinstance(node, ast.BoolOp):
            values = [self.eval(v, scope) for v in node.values]
            result: Any = values[0]
            for v in values[1:]:
                t = self.truth(result)
                if t is None:
                    return UNKNOWN
                if isinstance(node.op, ast.And):
                    result = v if t else result
                else:
                    result = result if t else v
            return result
        if isinstance(node, ast.Compare):
            left = self.eval(node.left, scope)
            for op, comp in zip(node.ops, node.comparators, strict=False):
                right = self.eval(comp, scope)
                if isinstance(op, (ast.Is, ast.IsNot)) and (isinstance(left, Tensor) or isinstance(right, Tensor)):
                    if is_unknown(left) or is_unknown(right):
                        return UNKNOWN
                    if not COMPARE[type(op)](left, right):
                        return False  # `targets is not None`: identity, not an elementwise comparison
                    left = right
                    continue
                if isinstance(left, Tensor) or isinstance(right, Tensor):
                    t = left if isinstance(left, Tensor) else right
                    return Tensor(t.shape, "bool")
                if is_unknown(left) or is_unknown(right):
                    return UNKNOWN
                try:
                    ok = COMPARE[type(op)](left, right)
                except Exception:
                    return UNKNOWN
                if not ok:
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            t = self.truth(self.eval(node.test, scope))
            if t is None:
                self.doubt("a conditional expression that is not known")
                self.guessing += 1
                try:
                    return self.eval(node.body, scope)
                finally:
                    self.guessing -= 1
            return self.eval(node.body if t else node.orelse, scope)
        if isinstance(node, (ast.Tuple, ast.List)):
            items: list[Any] = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    inner = self.eval(elt.value, scope)
                    items.extend(self.iterate(inner, elt) or [])
                else:
                    items.append(self.eval(elt, scope))
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Dict):
            return {self.eval(k, scope): self.eval(v, scope) for k, v in zip(node.keys, node.values, strict=False) if k is not None}
        if isinstance(node, ast.Set):
            elements = [self.eval(e, scope) for e in node.elts]
            return set(elements) if all(isinstance(e, (str, int, float, bool, tuple)) for e in elements) else UNKNOWN
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return self.comprehension(node, scope)
        if isinstance(node, ast.DictComp):
            pairs = self.comprehension(ast.ListComp(ast.Tuple([node.key, node.value], ast.Load()), node.generators), scope)
            return {k: v for k, v in pairs if not is_unknown(k)} if all(isinstance(p, tuple) for p in pairs) else UNKNOWN
        if isinstance(node, ast.Slice):
            parts = [self.eval(p, scope) if p is not None else None for p in (node.lower, node.upper, node.step)]
            return slice(*parts) if all(p is None or isinstance(p, int) for p in parts) else UNKNOWN
        if isinstance(node, ast.Subscript):
            return self.subscript(self.eval(node.value, scope), node.slice, scope, node)
        if isinstance(node, ast.Lambda):
            return Function(node, scope)
        if isinstance(node, ast.JoinedStr):
            return self.fstring(node, scope)
        if isinstance(node, ast.Starred):
            return self.eval(node.value, scope)
        if isinstance(node, ast.NamedExpr):
            value = self.eval(node.value, scope)
            self.assign(node.target, value, scope, node)
            return value
        return UNKNOWN

    def fstring(self, node: ast.JoinedStr, scope: Scope) -> str:
        """An f-string of known plain values is that string; otherwise an opaque "<str>"."""
        parts: list[str] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
                continue
            if not isinstance(value, ast.FormattedValue):
                return "<str>"
            v = self.eval(value.value, scope)
            spec = self.fstring(value.format_spec, scope) if isinstance(value.format_spec, ast.JoinedStr) else ""
            if not isinstance(v, (str, int, float, bool)) or spec == "<str>":
                return "<str>"
            try:
                convert: dict[int, Any] = {115: str, 114: repr, 97: ascii}
                shown = convert[value.conversion](v) if value.conversion in convert else v
                parts.append(format(shown, spec))
            except (ValueError, TypeError):
                return "<str>"
        return "".join(parts)

    def comprehension(self, node: ast.ListComp | ast.GeneratorExp | ast.SetComp, scope: Scope) -> list[Any]:
        results: list[Any] = []

        def rec(i: int, inner: Scope) -> None:
            if i == len(node.generators):
                results.append(self.eval(node.elt, inner))
                return
            gen = node.generators[i]
            items = self.iterate(self.eval(gen.iter, inner), gen.iter)
            if items is not None and len(items) > LONG_ITERABLE and len(node.generators) == 1 and not gen.ifs:
                # `[stoi[c] for c in text]` over a whole corpus: as many values as items, their values not read
                results.extend([UNKNOWN] * len(items))
                return
            for item in items or []:
                self.tick()
                s = Scope(inner)
                self.assign(gen.target, item, s, gen.iter)
                if all(self.truth(self.eval(c, s)) is not False for c in gen.ifs):
                    rec(i + 1, s)

        saved_script = self.in_script
        self.in_script = 0
        try:
            rec(0, Scope(scope))
        finally:
            self.in_script = saved_script
        return results

    def subscript(self, value: Any, slice_node: ast.AST, scope: Scope, node: ast.AST) -> Any:
        if isinstance(value, ParamValue):  # `self.logits[idx]`: indexing a parameter
            value = self.param_tensor(value)
        if isinstance(value, Tensor):
            return self.tensor_index(value, slice_node, scope)
        key = self.eval(slice_node, scope)
        if isinstance(value, Module):
            items = list(value.children.values())
            if value.type == "ModuleDict":
                return value.children.get(str(key), UNKNOWN)
            if isinstance(key, int):
                return items[key] if -len(items) <= key < len(items) else UNKNOWN
            if isinstance(key, slice):
                seq = Module("Sequential", value.line, value.col, catalog=True)
                seq.children = {str(i): m for i, m in enumerate(items[key])}
                return seq
            return UNKNOWN
        if isinstance(value, Obj) and value.type == "shape":
            dims = value.attrs["dims"]
            try:
                picked = dims[key]
            except Exception:
                return UNKNOWN
            return Obj("shape", {"dims": picked}) if isinstance(picked, tuple) else picked
        if is_unknown(value) or is_unknown(key):
            return UNKNOWN
        try:
            return value[key]
        except Exception:
            return UNKNOWN

    def _class_attribute(self, cls: ClassValue, name: str, instance: Any) -> Any:
        """`instance.name` found on its class: a bound method, a property's value, or the
        class attribute itself; None when the class does not define it."""
        found = cls.lookup(name)
        if isinstance(found, Function):
            return BoundMethod(found, instance)
        if isinstance(found, Obj) and found.type == "property":
            return self.call_function(found.attrs["fget"], [instance], {})
        return found

    def getattr(self, base: Any, name: str, node: ast.AST) -> Any:
        if isinstance(base, Qualified):
            if base.name == "sys" and name == "argv":
                return [self.model.path, *(self.argv or [])]
            user = (self.user_value(base.name) or self.library_value(base.name)) if "." in base.name else None
            if user is not None and not isinstance(user, Qualified):  # `GPT.get_default_config` of an imported class
                return self.getattr(user, name, node)
            return Qualified(f"{base.name}.{name}")
        if isinstance(base, configs.Parser):
            return MethodRef(base, name)
        if name == "__dict__" and isinstance(base, (Obj, Module)):
            return base.attrs  # live: `self.__dict__.update(kwargs)` sets attributes
        if isinstance(base, Module):
            if name in base.children:
                return base.children[name]
            if name in base.attrs:
                return base.attrs[name]
            if name in base.params:
                return ParamValue(base.params[name], base, name)
            if name in base.buffers:
                shape, dtype = base.buffers[name]
                return Tensor(shape, dtype, external=True)
            if base.catalog and name in base.args:
                return base.args[name]
            if base.cls is not None:
                found = self._class_attribute(base.cls, name, base)
                if found is not None:
                    return found
            if base.type in ("Linear",) and name in ("in_features", "out_features"):
                return base.args.get(name, UNKNOWN)
            return MethodRef(base, name)
        if isinstance(base, Obj):
            if base.type == "shape":
                return MethodRef(base, name)
            if name in base.attrs:
                return base.attrs[name]
            cls = base.attrs.get("__class__")
            if isinstance(cls, ClassValue):
                found = self._class_attribute(cls, name, base)
                if found is not None:
                    return found
            if base.type in ("Namespace", "SimpleNamespace", "dict", "config"):
                return Unknown(f"config value `{name}`")
            return MethodRef(base, name)
        if isinstance(base, ClassValue):
            found = base.lookup(name)
            return found if found is not None else UNKNOWN
        if isinstance(base, Tensor):
            if name == "shape":
                return Obj("shape", {"dims": base.shape, "tensor": base})
            if name == "dtype":
                return Qualified(f"torch.{base.dtype}")
            if name == "T":
                return base.view(tuple(reversed(base.shape)), contiguous=False)
            if name in ("ndim",):
                return len(base.shape)
            if name in ("device", "grad", "data"):
                return base if name == "data" else UNKNOWN
            return MethodRef(base, name)
        if isinstance(base, ParamValue):
            if name == "shape":
                return Obj("shape", {"dims": base.shape})
            if name == "data":
                return base
            return MethodRef(base, name)
        if isinstance(base, (list, dict, str, Optimizer, Loader, Dataset, int, float, tuple, set)):
            return MethodRef(base, name)
        return Unknown(f"attribute `{name}`")

    def binop(self, op: ast.operator, left: Any, right: Any, node: ast.AST, inplace: bool = False) -> Any:
        if isinstance(left, ParamValue):
            left = self.param_tensor(left)
        if isinstance(right, ParamValue):
            right = self.param_tensor(right)
        if isinstance(left, Tensor) or isinstance(right, Tensor):
            if isinstance(op, ast.MatMult):
                return self.matmul(left, right)
            if self.checker is not None and not self.checker.binop(op, left, right, node):
                self.problem("tensor shapes do not broadcast")
                return UNKNOWN
            out = self.tensor_binop(op, left, right, inplace)
            if self.checker is not None and isinstance(out, Tensor):
                first = left if isinstance(left, Tensor) else right
                if out is not first:
                    out.trail = first.trail
                    out.guessed = any(isinstance(t, Tensor) and t.guessed for t in (left, right))
                if any(is_unknown(v) and not v.reason.startswith("config value") for v in (left, right)):
                    out.guessed = True  # broadcast with a value of unknown shape (a config value is a number): unknown
            return out
        if isinstance(left, Obj) and left.type == "shape" and isinstance(right, tuple):
            left = left.attrs["dims"]
        if is_unknown(left) or is_unknown(right):
            return UNKNOWN
        try:
            return BINOPS[type(op)](left, right)
        except Exception:
            return UNKNOWN

    # ---- calls ---------------------------------------------------------------------------------
    def eval_call(self, node: ast.Call, scope: Scope) -> Any:
        func = self.eval(node.func, scope)
        args: list[Any] = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                inner = self.eval(a.value, scope)
                if isinstance(inner, Obj) and inner.type == "shape":
                    inner = inner.attrs["dims"]
                items = self.iterate(inner, a)
                if items is None:
                    return UNKNOWN
                args.extend(items)
            else:
                args.append(self.eval(a, scope))
        kwargs: dict[str, Any] = {}
        for kw in node.keywords:
            value = self.eval(kw.value, scope)
            if kw.arg is None:
                if isinstance(value, dict):
                    kwargs.update({str(k): v for k, v in value.items()})
                elif isinstance(value, Obj):
                    kwargs.update({k: v for k, v in value.attrs.items() if not k.startswith("__")})
            else:
                kwargs[kw.arg] = value
        saved_node, self.cur_node = self.cur_node, node
        try:
            out = self.call(func, args, kwargs, node, line=node.lineno - 1, col=node.col_offset)
        finally:
            self.cur_node = saved_node
        if self.checker is not None:
            if isinstance(out, Module) and out.end is None and out.line == node.lineno - 1 and out.col == node.col_offset:
                out.end = ((node.end_lineno or node.lineno) - 1, node.end_col_offset or 0)
            if isinstance(func, (Qualified, MethodRef)) and not isinstance(func, Module):
                self.checker.follow(func, args, out, node)
        return out

    def call(self, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None, line: int = 0, col: int = 0) -> Any:
        ops = self.ops
        if isinstance(func, ClassValue):
            return self.instantiate(func, args, kwargs, line, col)
        if isinstance(func, Function):
            return self.call_function(func, args, kwargs)
        if isinstance(func, BoundMethod):
            if isinstance(func.self, Module) and func.func.node.name == "forward":
                return self.call_module(func.self, args, kwargs, node)
            return self.call_function(func.func, [func.self, *args], kwargs)
        if isinstance(func, Module):
            return self.call_module(func, args, kwargs, node)
        if isinstance(func, Qualified):
            user = self.user_value(func.name)
            if user is None:
                user = self.library_value(func.name)
            if user is not None and not isinstance(user, Qualified):
                return self.call(user, args, kwargs, node, line, col)
            return ops.call_qualified(self, func.name, args, kwargs, node, line, col)
        if isinstance(func, MethodRef):
            return ops.call_method(self, func.obj, func.name, args, kwargs, node)
        if is_unknown(func):
            if any(isinstance(a, Tensor) for a in args):
                self.problem(f"call of unknown `{ast.unparse(node.func)[:40] if isinstance(node, ast.Call) else '?'}` on a tensor", node)
            return Unknown(func.reason)
        return UNKNOWN

    def call_module(self, mod: Module, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any:
        ops = self.ops
        started = False
        if self.forward_depth == 0 and self.grad_enabled and self.recorder is None and mod.type not in catalog.LOSSES:
            self.recorder = Recorder(autocast=self.autocast)
            started = True
        if self.recorder is not None and self.forward_depth == 0:
            if mod.type not in catalog.LOSSES and mod not in self.recorder.models:
                self.recorder.models.append(mod)
                for m in mod.modules():  # per-layer saved bytes are one step's: a loop interpreted twice must not add up
                    m.saved_bytes = 0
            self.recorder.batch.extend(a for a in [*args, *kwargs.values()] if isinstance(a, Tensor) and a.external and not a.is_param)
        self.forward_depth += 1
        saved_script = self.in_script
        self.in_script = 0
        if self.recorder is not None:
            self.recorder.stack.append(mod)
        mod.seen_forward = True
        top = self.forward_depth == 1
        if self.checker is not None:
            if top:
                self.checker.enter(mod, args, kwargs)
            self.mstack.append(mod)
        try:
            if mod.catalog:
                out = ops.catalog_forward(self, mod, args, kwargs, node)
            else:
                forward = mod.cls.lookup("forward") if mod.cls is not None else None
                if not isinstance(forward, Function) and ops.container_base(mod) == "Sequential":
                    out = args[0] if args else UNKNOWN
                    for child in mod.children.values():
                        out = self.call_module(child, [out], {}, node)
                elif not isinstance(forward, Function):
                    self.problem(f"`{mod.type}` has no readable forward()", node)
                    out = UNKNOWN
                else:
                    out = self.call_function(forward, [mod, *args], kwargs)
        finally:
            if self.recorder is not None and self.recorder.stack:
                self.recorder.stack.pop()
            self.forward_depth -= 1
            self.in_script = saved_script
            if self.checker is not None and self.mstack:
                self.mstack.pop()
        if self.checker is not None:
            self.checker.leave(mod, args, kwargs, out, top)
        first = out[0] if isinstance(out, tuple) and out else out
        if isinstance(first, Tensor):
            mod.output_shape = first.shape
            mod.output_bytes = first.nbytes
        _ = started
        return out

    def param_tensor(self, p: ParamValue) -> Tensor:
        dtype = p.owner.dtype if p.owner is not None else "float32"
        t = Tensor(p.shape, dtype, requires_grad=True, external=True, is_param=True)
        t._owner = p.owner  # type: ignore[attr-defined]
        return t

    # ---- tensor primitives (used by ops) ---------------------------------------------------------
    def tensor_view(self, t: Tensor, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return _view(self, t, name, *args, **kwargs)
        except (TypeError, IndexError, KeyError, ValueError, ZeroDivisionError):
            self.problem(f"tensor.{name}() with arguments that are not known")
            return UNKNOWN

    def loader_batch(self, loader: Loader, node: ast.AST) -> Any:
        b = loader.batch_size
        if self.batch_override:
            self.assume(f"batch_size={b} (--batch-size)", None)
        elif loader.batch_known:  # an unknown batch size is reported as unknown where the loader is built
            self.assume(f"batch_size={b}", loader.line, loader.file)
        if self.input_shape is not None:
            return (Tensor((b, *self.input_shape), external=True), Tensor((b,), "int64", external=True))
        if loader.dataset is None:
            self.problem("the DataLoader's dataset is not known (pass --input-shape)", node)
            return UNKNOWN
        guessed = loader.guessed or loader.dataset.guessed or self.guessing > 0
        items = tuple(Tensor((b, *shape), dtype, external=True, guessed=guessed) for shape, dtype in loader.dataset.sample)
        return items if len(items) != 1 else items[0]

    def record(self, out: Tensor, inputs: list[Any], saved: list[Tensor], params: Module | None = None,
               extra_transient: int = 0, recompute: int = 0, backward_transient: int = 0) -> Tensor:
        """Register one autograd op producing `out`; mark `out` as requiring grad when it does."""
        tensors = [t for t in inputs if isinstance(t, Tensor)]
        owners = [t._owner for t in tensors if t.is_param and getattr(t, "_owner", None) is not None]  # type: ignore[attr-defined]
        has_params = (params is not None and params.own_param_count() > 0) or bool(owners)
        requires = any(t.requires_grad and not t.is_param for t in tensors) or has_params
        rec = self.recorder
        if not (self.grad_enabled and requires and rec is not None):
            return out
        out.requires_grad = True
        layer = rec.stack[-1] if rec.stack else None
        layer_name = layer.name if layer is not None else ""
        entries: list[tuple[int, int]] = []
        for t in saved:
            if t.external or t.is_param or t.storage is None:
                continue
            sid = t.storage.id
            entries.append((sid, t.storage.nbytes))
            if sid not in rec.saved:
                rec.saved[sid] = (t.storage.nbytes, layer_name)
                if layer is not None:
                    layer.saved_bytes += t.storage.nbytes
        grads: list[tuple[int, int]] = []
        for m in {id(m): m for m in [*([params] if params is not None else []), *owners]}.values():
            grads.extend((m.id * 1000 + i, size * 4 if m.dtype == "float32" else size * 2) for i, size in enumerate(m.own_param_sizes()))
        # autocast's cast copies of weights: their gradient (in the cast dtype) is converted to the
        # parameter's dtype by the cast's own backward node, after this op's backward has released
        # what it saved; it does not flow on to the ops before this one
        casts = sum(t.nbytes for t in tensors if t.requires_grad and not t.is_param and getattr(t, "_owner", None) is not None)
        in_grad = sum(t.nbytes for t in tensors if t.requires_grad and not t.is_param) - casts
        in_grads = [(t.storage.id if t.storage is not None else 0, t.nbytes) for t in tensors
                    if t.requires_grad and not t.is_param and getattr(t, "_owner", None) is None]
        rec.ops.append(Op(layer_name, entries, out.nbytes, in_grad, grads, out.nbytes + extra_transient, recompute, backward_transient, casts,
                          out.storage.id if out.storage is not None else 0, in_grads))
        return out

    def elementwise(self, inputs: list[Tensor], shape: tuple[int, ...], kind: str, saved: list[Tensor] | None = None) -> Tensor:
        dtype = next((t.dtype for t in inputs if isinstance(t, Tensor) and t.dtype in FLOATS), None)
        dtype = dtype or next((t.dtype for t in inputs if isinstance(t, Tensor)), "float32")
        out = Tensor(shape, dtype)
        return self.record(out, list(inputs), saved or [])

    def tensor_binop(self, op: ast.operator, left: Any, right: Any, inplace: bool) -> Any:
        lt, rt = isinstance(left, Tensor), isinstance(right, Tensor)
        shape = broadcast(left.shape if lt else (), right.shape if rt else ())
        if shape is None:
            self.problem("tensor shapes do not broadcast")
            return UNKNOWN
        tensors = [t for t in (left, right) if isinstance(t, Tensor)]
        saved: list[Tensor] = []
        if isinstance(op, ast.Mult):
            if lt and rt:
                saved = [t for t in (left, right) if t.requires_grad or (left.requires_grad or right.requires_grad)]
                saved = [right] if left.requires_grad and not right.requires_grad else [left] if right.requires_grad and not left.requires_grad else [left, right]
        elif isinstance(op, ast.Div) and rt:
            saved = [left, right] if lt else [right]
        elif isinstance(op, ast.Pow):
            saved = [left] if lt else []
        out = self.elementwise(tensors, shape, "binop", saved)
        if lt and rt and left.dtype != right.dtype:
            out.dtype = promote(left.dtype, right.dtype)
        elif lt and not rt:
            out.dtype = left.dtype if not isinstance(right, float) or left.dtype in FLOATS else "float32"
        if inplace and lt and not left.requires_grad and shape == left.shape:
            return left
        return out

    def matmul(self, left: Any, right: Any) -> Any:
        if isinstance(left, ParamValue):
            left = self.param_tensor(left)
        if isinstance(right, ParamValue):
            right = self.param_tensor(right)
        if not (isinstance(left, Tensor) and isinstance(right, Tensor)):
            return UNKNOWN
        a, b = left.shape, right.shape
        if len(a) == 0 or len(b) == 0:
            return UNKNOWN
        if len(b) == 1:
            shape = a[:-1]
        elif len(a) == 1:
            shape = b[:-2] + b[-1:]
        else:
            batch = broadcast(a[:-2], b[:-2])
            if batch is None or a[-1] != b[-2]:
                self.problem(f"matmul shapes {a} @ {b} do not match")
                return UNKNOWN
            shape = (*batch, a[-2], b[-1])
        left, right = self.autocast_inputs([left, right])
        out = Tensor(shape, promote(left.dtype, right.dtype))
        # a non-contiguous operand is copied before the bmm, and the copy is what gets saved
        saved = [t if t.contiguous else Tensor(t.shape, t.dtype) for t in (left, right)]
        return self.record(out, [left, right], saved)

    def autocast_inputs(self, tensors: list[Tensor]) -> list[Tensor]:
        """Under autocast, matmul-class ops run on casts of their float32 inputs (weights cached)."""
        if not self.autocast or not self.grad_enabled:
            return tensors
        out: list[Tensor] = []
        for t in tensors:
            if t.dtype != "float32":
                out.append(t)
                continue
            if t.is_param and self.recorder is not None:
                key = id(getattr(t, "_owner", t)) * 31 + hash(t.shape)
                cached = self.recorder.weight_casts.get(key)
                if cached is None:
                    cached = Tensor(t.shape, self.autocast, requires_grad=True)
                    cached._owner = getattr(t, "_owner", None)  # type: ignore[attr-defined]
                    self.recorder.weight_casts[key] = cached
                out.append(cached)
            else:
                cast = Tensor(t.shape, self.autocast, requires_grad=t.requires_grad)
                out.append(cast)
        return out

    def tensor_index(self, t: Tensor, slice_node: ast.AST, scope: Scope) -> Any:
        items = list(slice_node.elts) if isinstance(slice_node, ast.Tuple) else [slice_node]
        shape = list(t.shape)
        out: list[int] = []
        dim = 0
        copy = False
        for item in items:
            if isinstance(item, ast.Constant) and item.value is Ellipsis:
                rest = len(items) - items.index(item) - 1
                keep = len(shape) - dim - sum(1 for i in items[items.index(item) + 1:] if not (isinstance(i, ast.Constant) and i.value is None))
                out.extend(shape[dim:dim + keep])
                dim += keep
                _ = rest
                continue
            if isinstance(item, ast.Constant) and item.value is None:
                out.append(1)
                continue
            if dim >= len(shape):
                return UNKNOWN
            if isinstance(item, ast.Slice):
                lo = self.eval(item.lower, scope) if item.lower else None
                hi = self.eval(item.upper, scope) if item.upper else None
                st = self.eval(item.step, scope) if item.step else None
                if any(is_unknown(v) or isinstance(v, Tensor) for v in (lo, hi, st)):
                    width = _offset_width(item, lambda e: self.eval(e, scope))
                    if width is None or st is not None:
                        return UNKNOWN
                    out.append(min(width, shape[dim]))  # x[i:i + k]: k wide, wherever i is (a window of a sequence)
                    dim += 1
                    continue
                out.append(len(range(*slice(lo, hi, st).indices(shape[dim]))))
                dim += 1
                continue
            value = self.eval(item, scope)
            if isinstance(value, int):
                dim += 1
                continue
            if isinstance(value, Tensor):
                copy = True
                if value.dtype == "bool":
                    return UNKNOWN
                out.extend(value.shape)
                dim += 1
                continue
            return UNKNOWN
        out.extend(shape[dim:])
        if copy:
            return self.elementwise([t], tuple(out), "index")
        return t.view(tuple(out), contiguous=False if tuple(out) != t.shape[len(t.shape) - len(out):] else t.contiguous)


def _view(it: Interpreter, t: Tensor, name: str, *args: Any, **kwargs: Any) -> Any:
    shape = list(t.shape)
    n = len(shape)
    if name in ("view", "reshape"):
        dims = dims_of(list(args)) if args else list(kwargs.get("shape", ()))
        if any(not isinstance(d, int) for d in dims):
            return UNKNOWN
        raw = list(dims)
        if -1 in dims:
            known = math.prod(d for d in dims if d != -1)
            dims = [t.numel // known if d == -1 else d for d in dims]
        if it.checker is not None and not it.checker.view(t, name, raw):
            it.problem(f"cannot view {tuple(shape)} as {tuple(dims)}")
            return UNKNOWN
        if math.prod(dims) != t.numel:
            it.problem(f"cannot view {tuple(shape)} as {tuple(dims)}")
            return UNKNOWN
        if name == "reshape" and not t.contiguous:
            return it.record(Tensor(tuple(dims), t.dtype), [t], [])
        return t.view(tuple(dims))
    if name in ("view_as", "reshape_as", "expand_as"):
        other = args[0] if args else None
        return t.view(other.shape, contiguous=name != "expand_as") if isinstance(other, Tensor) else UNKNOWN
    if name == "expand":
        dims = dims_of(list(args))
        dims = [shape[i - (len(dims) - n)] if d == -1 else d for i, d in enumerate(dims)]
        return t.view(tuple(dims), contiguous=False) if all(isinstance(d, int) for d in dims) else UNKNOWN
    if name == "repeat":
        dims = dims_of(list(args))
        base = [1] * (len(dims) - n) + shape
        return it.elementwise([t], tuple(b * d for b, d in zip(base, dims, strict=False)), "repeat")
    if name == "flatten":
        start = args[0] if args else kwargs.get("start_dim", 0)
        end = args[1] if len(args) > 1 else kwargs.get("end_dim", -1)
        if n == 0:
            return t.view((1,))
        start, end = norm_dim(start, n), norm_dim(end, n)
        new = (*shape[:start], math.prod(shape[start:end + 1]), *shape[end + 1:])
        if not t.contiguous:
            return it.record(Tensor(new, t.dtype), [t], [])
        return t.view(new)
    if name == "unflatten":
        dim, sizes = args[0], list(args[1])
        dim = norm_dim(dim, n)
        if -1 in sizes:
            known = math.prod(s for s in sizes if s != -1)
            sizes = [shape[dim] // known if s == -1 else s for s in sizes]
        return t.view((*shape[:dim], *sizes, *shape[dim + 1:]))
    if name in ("transpose", "swapaxes"):
        d0, d1 = (norm_dim(args[0], n), norm_dim(args[1], n)) if len(args) >= 2 else (0, 1)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        return t.view(tuple(shape), contiguous=False)
    if name in ("t", "mT"):
        return t.view(tuple(shape[:-2] + shape[-2:][::-1]), contiguous=False)
    if name == "permute":
        dims = dims_of(list(args))
        return t.view(tuple(shape[norm_dim(d, n)] for d in dims), contiguous=False)
    if name == "movedim":
        src, dst = norm_dim(args[0], n), norm_dim(args[1], n)
        d = shape.pop(src)
        shape.insert(dst, d)
        return t.view(tuple(shape), contiguous=False)
    if name == "unsqueeze":
        d = norm_dim(args[0] if args else kwargs["dim"], n + 1)
        return t.view((*shape[:d], 1, *shape[d:]), contiguous=t.contiguous)
    if name == "squeeze":
        if args:
            d = norm_dim(args[0], n)
            return t.view(tuple(s for i, s in enumerate(shape) if not (i == d and s == 1)))
        return t.view(tuple(s for s in shape if s != 1))
    if name in ("chunk", "split", "unbind"):
        dim = norm_dim(kwargs.get("dim", args[1] if len(args) > 1 else 0), n)
        if name == "unbind":
            dim = norm_dim(args[0] if args else 0, n)
            return tuple(t.view((*shape[:dim], *shape[dim + 1:]), contiguous=False) for _ in range(shape[dim]))
        if name == "chunk":
            k = args[0]
            size = -(-shape[dim] // k)
            sizes = [size] * (shape[dim] // size) + ([shape[dim] % size] if shape[dim] % size else [])
        else:
            arg = args[0]
            if isinstance(arg, int):
                sizes = [arg] * (shape[dim] // arg) + ([shape[dim] % arg] if shape[dim] % arg else [])
            else:
                sizes = list(arg)
        return tuple(t.view((*shape[:dim], s, *shape[dim + 1:]), contiguous=dim == 0 and t.contiguous) for s in sizes)
    if name == "narrow":
        dim, _, length = args
        shape[norm_dim(dim, n)] = length
        return t.view(tuple(shape), contiguous=False)
    return UNKNOWN


def iter_modules(mod: Module) -> Iterator[Module]:
    yield from mod.modules()


BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift,
    ast.RShift: operator.rshift, ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor,
}
COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not, ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
def _offset_width(item: ast.Slice, evaluate: Any) -> int | None:
    """The width of `x[a:a + k]`, `x[i + 1:i + k + 1]` and the like: upper minus lower, their common unknown terms
    cancelled and the rest known integers; None for other slices."""
    if item.lower is None or item.upper is None:
        return None
    upper, lower = _terms(item.upper), _terms(item.lower)
    for t in [t for t in lower if isinstance(t, str)]:
        if t in upper:  # `i` on both sides: whatever it is, it cancels
            upper.remove(t)
            lower.remove(t)
    width = 0
    for terms, sign in ((upper, 1), (lower, -1)):
        for t in terms:
            value = t if isinstance(t, int) else evaluate(ast.parse(t.lstrip("-"), mode="eval").body)
            if not isinstance(value, int) or isinstance(value, bool):
                return None
            width += sign * (-value if isinstance(t, str) and t.startswith("-") else value)
    return width if width >= 0 else None


def _terms(node: ast.expr, sign: int = 1) -> list[Any]:
    """`i + block_size + 1` -> ['i', 'block_size', 1]: an additive expression's terms, constants as ints, the rest as
    source text ('-' in front when subtracted)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _terms(node.left, sign) + _terms(node.right, sign if isinstance(node.op, ast.Add) else -sign)
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return [sign * node.value]
    return [("-" if sign < 0 else "") + ast.unparse(node)]


def _trains(node: ast.AST) -> bool:
    """Whether a loop's body calls backward() or step() itself."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("backward", "step")
               for n in ast.walk(node))


BUILTINS = {
    "range", "len", "int", "float", "min", "max", "list", "tuple", "dict", "enumerate", "zip", "isinstance", "print", "super",
    "getattr", "hasattr", "setattr", "sum", "abs", "round", "str", "bool", "sorted", "reversed", "any", "all", "iter", "next",
    "type", "open", "map", "set", "divmod", "pow", "vars", "globals", "exec",
}
_ = (math, DTYPE_ALIASES, Dataset, Loader, Optimizer, Transform, ContextValue)
