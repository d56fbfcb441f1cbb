"""A small abstract interpreter over the file's syntax tree.

It runs module-level code, helper functions, `__init__` of nn.Module classes and their
`forward()` with tensors as shapes, never importing torch or the user's code. While a
forward runs with gradients enabled, it records what autograd would save (per op, with
the layer it belongs to) so the timeline can replay forward, backward and step.

The Interpreter is this module (its state, bookkeeping and calls) and the methods it inherits by kind:
estimator.interp_stmts (statements), estimator.interp_loops (for loops and what they iterate), estimator.interp_exprs
(expressions), estimator.interp_calls (calls of the user's functions, classes and modules), estimator.interp_tensors
(tensor operators, indexing, views, recording an op); estimator.interp_fast compiles loops over many plain values;
estimator.scope holds its frames and limits.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from torch_preflight.core.project import ParsedModule, ProjectView
from torch_preflight.core.semantic import ModuleModel
from torch_preflight.estimator import catalog, hf_data
from torch_preflight.estimator.interp_calls import Calls
from torch_preflight.estimator.interp_exprs import Expressions
from torch_preflight.estimator.interp_fast import Compiler
from torch_preflight.estimator.interp_loops import Loops
from torch_preflight.estimator.interp_stmts import Statements
from torch_preflight.estimator.interp_tensors import TensorSemantics
from torch_preflight.estimator.record import Evaluation, Ops, Recorder, StepRecord
from torch_preflight.estimator.scope import (
    MAX_STEPS,
    Budget,
    Cancelled,
    Instance,
    Scope,
    _Return,
)
from torch_preflight.estimator.values import (
    UNKNOWN,
    BoundMethod,
    ClassValue,
    Function,
    MethodRef,
    Module,
    Obj,
    Optimizer,
    Qualified,
    Tensor,
    Unknown,
    is_unknown,
)

STALE_EVERY = 512  # steps between two questions to `stale` (a step is a statement, an expression or a call: microseconds)


class Interpreter(Statements, Loops, Expressions, Calls, TensorSemantics):
    # what torch calls do: estimator.ops, a registry this class reads and never imports (the estimator package sets it)
    ops: Ops

    def __init__(self, model: ModuleModel, tree: ast.Module, *, device: str = "cuda", batch_override: int | None = None,
                 input_shape: tuple[int, ...] | None = None, force_autocast: str | None = None, dtype: str | None = None,
                 project: ProjectView | None = None, argv: tuple[str, ...] | None = None, max_steps: int = MAX_STEPS,
                 library_paths: tuple[str, ...] | None = None, supplied: tuple[tuple[str, str], ...] = (), corpus_bytes: int = 0,
                 stale: Callable[[], bool] | None = None) -> None:
        self.model = model
        self.stale = stale  # asked every STALE_EVERY steps: true stops the run (Cancelled)
        self.argv = list(argv) if argv is not None else None  # the script's own command line, when given
        # values the user supplies for what the script assigns (`estimate --set ntokens=33278`): name -> VALUE's source
        self.supplied = dict(supplied)
        self.saved_files: dict[str, Any] = {}  # what the script saved with torch.save, by path
        self.deepspeed: dict[str, Any] | None = None  # deepspeed.initialize's settings (ZeRO stage), once called
        self.project = project  # resolves imports into the user's other modules (model classes, configs)
        self.library_paths = library_paths  # the import path libraries' models are read from (None: the catalog only)
        self.library_files: set[str] = set()  # the libraries' source files read
        self.loaded: dict[str, tuple[Scope, set[int]]] = {}  # path -> its module scope, the top-level statements run
        self.library_trees: dict[str, ParsedModule] = {}  # library sources parsed without a project (architectures' too)
        self.user_values: dict[tuple[str, str], Any] = {}
        self.cur_path = model.path  # the file whose code is running
        self.tree = tree
        self.device = device
        self.batch_override = batch_override
        self.input_shape = input_shape
        self.force_autocast = force_autocast
        self.dtype_override = dtype
        self.globals = Scope(imports=model.imports, path=model.path)
        self.max_steps = max_steps
        self.steps_left = max_steps  # work left: a node of the general interpreter, or a compiled statement, is one
        self.corpus_limit = corpus_bytes  # the most bytes of files longer than FILE_LINES read line by line (a corpus)
        self.corpus_bytes = 0  # read so far
        self.unread_data = False  # a loop over a file was skipped: the lengths of lists, dicts and objects are not known
        self.fast = Compiler(self)  # loops over many values run compiled (estimator.interp_fast)
        self.out_of_budget = False
        self.unread: list[str] = []  # the project's modules over the read budget (`other_module`)
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
        if self.stale is not None and not self.steps_left % STALE_EVERY and self.stale():
            raise Cancelled

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
