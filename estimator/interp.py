"""A small abstract interpreter over the file's syntax tree.

It runs module-level code, helper functions, `__init__` of nn.Module classes and their
`forward()` with tensors as shapes, never importing torch or the user's code. While a
forward runs with gradients enabled, it records what autograd would save (per op, with
the layer it belongs to) so the timeline can replay forward, backward and step.

The Interpreter is this module (its state, bookkeeping and expressions) and the methods it inherits by kind:
estimator.interp_stmts (statements), estimator.interp_calls (calls of the user's functions, classes and modules),
estimator.interp_tensors (tensor operators, indexing, views, recording an op); estimator.scope holds its frames.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Iterator
from typing import Any

from torch_preflight.core.project import ProjectView
from torch_preflight.core.semantic import ModuleModel
from torch_preflight.estimator import catalog, configs, hf_data
from torch_preflight.estimator.interp_calls import Calls
from torch_preflight.estimator.interp_stmts import Statements
from torch_preflight.estimator.interp_tensors import TensorSemantics
from torch_preflight.estimator.record import Evaluation, Ops, Recorder, StepRecord
from torch_preflight.estimator.scope import (
    LONG_ITERABLE,
    MAX_STEPS,
    Budget,
    Instance,
    Scope,
    _Return,
)
from torch_preflight.estimator.values import (
    UNKNOWN,
    BoundMethod,
    ClassValue,
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
    Unknown,
    is_unknown,
)


class Interpreter(Statements, Calls, TensorSemantics):
    # what torch calls do: estimator.ops, a registry this class reads and never imports (the estimator package sets it)
    ops: Ops

    def __init__(self, model: ModuleModel, tree: ast.Module, *, device: str = "cuda", batch_override: int | None = None,
                 input_shape: tuple[int, ...] | None = None, force_autocast: str | None = None, dtype: str | None = None,
                 project: ProjectView | None = None, argv: tuple[str, ...] | None = None, max_steps: int = MAX_STEPS,
                 library_paths: tuple[str, ...] | None = None, supplied: tuple[tuple[str, str], ...] = ()) -> None:
        self.model = model
        self.argv = list(argv) if argv is not None else None  # the script's own command line, when given
        # values the user supplies for what the script assigns (`estimate --set ntokens=33278`): name -> VALUE's source
        self.supplied = dict(supplied)
        self.saved_files: dict[str, Any] = {}  # what the script saved with torch.save, by path
        self.deepspeed: dict[str, Any] | None = None  # deepspeed.initialize's settings (ZeRO stage), once called
        self.project = project  # resolves imports into the user's other modules (model classes, configs)
        self.library_paths = library_paths  # the import path libraries' models are read from (None: the catalog only)
        self.library_files: set[str] = set()  # the libraries' source files read
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
        self.evaluation: Evaluation | None = None  # the top-level forward running under no_grad
        self.evaluations: list[Evaluation] = []
        self.grads_live = False  # a backward has run and no zero_grad(set_to_none=True) since
        self.stepped = False  # an optimizer step has run
        self.frames: list[Scope] = []  # the running functions' scopes, callers first (the call stack)
        self.loop_counts: list[int | None] = []  # the script's loops around the running code: passes, when a range() says
        self.instances: list[Instance] = []
        self.optimizers: list[Optimizer] = []
        self.optimizer_unknown = False  # an optimizer the script builds is not modelled (reported as unknown)
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
        # what the running code and its callers hold: a tensor in a variable, in a short list, tuple or dict of them, or
        # in an attribute of an object the script holds, a few levels deep (`corpus.train`, `trainer.train_dataset.ixes`)
        scopes: list[Scope] = []
        scope: Scope | None = self.scope
        while scope is not None:
            scopes.append(scope)
            scope = scope.parent
        seen: set[int] = set()
        todo: list[tuple[Any, int]] = [(v, 0) for frame in [*scopes, *self.frames, self.globals] for v in frame.vars.values()]
        while todo:
            value, depth = todo.pop()
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, Tensor):
                if value.storage is None or value.storage is loss.storage:
                    continue
                if value.storage.id in produced:
                    held[value.storage.id] = value.storage.nbytes
                elif self.device == "cpu" and value.external and not value.host and not value.is_param and value.storage.id not in batch:
                    # a tensor the script keeps in CPU memory (a whole tokenized corpus): the CPU's peak holds it
                    held[value.storage.id] = value.storage.nbytes
            elif depth < 3 and isinstance(value, (tuple, list)) and len(value) <= 64:
                todo.extend((v, depth + 1) for v in value)
            elif depth < 3 and isinstance(value, dict) and len(value) <= 64:
                todo.extend((v, depth + 1) for v in value.values())
            elif depth < 3 and isinstance(value, Obj) and len(value.attrs) <= 64:
                todo.extend((v, depth + 1) for v in value.attrs.values())
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

    def truth(self, value: Any) -> bool | None:
        if is_unknown(value) or isinstance(value, (Tensor, Obj, Qualified)):
            return None
        try:
            return bool(value)
        except Exception:
            return None

    def eval(self, node: ast.AST | None, scope: Scope) -> Any:
        ev = self.evaluation
        if ev is None or not isinstance(node, (ast.Call, ast.BinOp, ast.UnaryOp)):
            return self._eval(node, scope)
        # under a no_grad forward: the operands' results are freed when this expression is done with them
        mark = len(ev.pending)
        value = self._eval(node, scope)
        del ev.pending[mark:]
        if isinstance(value, Tensor) and value.storage is not None:
            ev.pending.append((value.storage.id, value.storage.nbytes))
        return value

    def _eval(self, node: ast.AST | None, scope: Scope) -> Any:
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
        if isinstance(value, Obj) and value.type == "hf_dataset":  # a split of a Hugging Face dataset: dataset["train"]
            return value
        if isinstance(value, Obj) and value.type == "config" and isinstance(key, str):  # a YAML config: cfg["model"]
            return value.attrs.get(key, Unknown(f"config value `{key}`"))
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
            return value if isinstance(value, Unknown) and value.reason else UNKNOWN  # a part of it: not known, for that reason
        try:
            return value[key]
        except Exception:
            return UNKNOWN

    def _class_attribute(self, cls: ClassValue, name: str, instance: Any) -> Any:
        """`instance.name` found on its class: a bound method, a property's value, or the
        class attribute itself; None when the class does not define it."""
        found = cls.lookup(name)
        if isinstance(found, Function):
            return found if found.staticmethod else BoundMethod(found, cls if found.classmethod else instance)
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
            if base.type in ("Namespace", "SimpleNamespace", "dict", "config") and not (base.type == "config" and name == "get"):
                return Unknown(f"config value `{name}`")
            return MethodRef(base, name)
        if isinstance(base, ClassValue):
            found = base.lookup(name)
            if isinstance(found, Function) and found.classmethod:
                return BoundMethod(found, base)
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
        if isinstance(func, Obj) and func.type == "partial":
            return self.call(func.attrs["func"], [*func.attrs["args"], *args], {**func.attrs["kwargs"], **kwargs}, node, line, col)
        if isinstance(func, Obj) and func.type == "tokenizer":  # tokenizer(texts, max_length=..., padding=...)
            return hf_data.tokenizer_call(kwargs)
        if is_unknown(func):
            if any(isinstance(a, Tensor) for a in args):
                self.problem(f"call of unknown `{ast.unparse(node.func)[:40] if isinstance(node, ast.Call) else '?'}` on a tensor", node)
            return Unknown(func.reason)
        return UNKNOWN

    def call_module(self, mod: Module, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any:
        ops = self.ops
        started = False
        if self.forward_depth == 0 and self.grad_enabled and self.recorder is None and mod.type not in catalog.LOSSES:
            here = self.cur_path == self.model.path  # a line of the estimated file, or none
            self.recorder = Recorder(autocast=self.autocast, line=getattr(node, "lineno", 0) - 1 if here else -1)
            started = True
        if self.recorder is not None and self.forward_depth == 0:
            if mod.type not in catalog.LOSSES and mod not in self.recorder.models:
                self.recorder.models.append(mod)
                for m in mod.modules():  # per-layer saved bytes are one step's: a loop interpreted twice must not add up
                    m.saved_bytes = 0
            self.recorder.batch.extend(a for a in [*args, *kwargs.values()] if isinstance(a, Tensor) and a.external and not a.is_param)
        evaluating = (self.forward_depth == 0 and not self.grad_enabled and self.evaluation is None
                      and mod.type not in catalog.LOSSES)
        if evaluating:
            self.evaluation = Evaluation(mod, self.grads_live, self.stepped,
                                         sum(a.nbytes for a in [*args, *kwargs.values()] if isinstance(a, Tensor)))
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
            if evaluating and self.evaluation is not None:
                self.evaluations.append(self.evaluation)
                self.evaluation = None
        if self.checker is not None:
            self.checker.leave(mod, args, kwargs, out, top)
        first = out[0] if isinstance(out, tuple) and out else out
        if isinstance(first, Tensor) and (self.evaluation is None or mod.output_shape is None):  # the step's, if any
            mod.output_shape = first.shape
            mod.output_bytes = first.nbytes
        _ = started
        return out


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


BUILTINS = {
    "range", "len", "int", "float", "min", "max", "list", "tuple", "dict", "enumerate", "zip", "isinstance", "print", "super",
    "getattr", "hasattr", "setattr", "sum", "abs", "round", "str", "bool", "sorted", "reversed", "any", "all", "iter", "next",
    "type", "open", "map", "set", "divmod", "pow", "vars", "globals", "exec",
}
