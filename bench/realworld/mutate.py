"""Inject one known training bug per copy of a clean real training script (stdlib only).

For every source file given (files, or folders searched for `*.py`), `ast` finds the sites
where a bug kind can be injected, and line-based text surgery writes a copy holding exactly
that one bug. Each mutant is parsed again with `ast.parse` and dropped when it does not parse.

Output (default bench/out/mutants):
- `<kind>/<n>/<basename>`: the mutant (its folder holds nothing else);
- `_orig/<m>/<basename>`: an unmodified copy of each source, isolated the same way, so a
  tool's findings on the clean file and on its mutants are comparable;
- `manifest.json`: one entry per mutant with `kind`, `expected` (our rule codes),
  `source`, `orig` (the isolated clean copy), `file`, `line` (the mutated line in the
  mutant, 1-based), `orig_line` (the same place in the clean file), `anchors` (mutant
  lines of the enclosing loop/with/def headers a rule may legitimately report on) and
  `anchors_orig` (the same places in the clean file).

Kinds (see KINDS): delete the zero_grad call; move zero_grad between backward and step;
make zero_grad unconditional under accumulation; accumulate the loss tensor instead of
.item(); append the loss tensor to a list; remove a torch.no_grad() wrapper; delete
model.eval(); delete model.train() in an epoch loop; construct the optimizer inside the
loop; delete sampler.set_epoch; apply softmax before cross-entropy; fit a scaler before the
split; call forward() directly. With `--harder` (issue 16, HARD_KINDS): remove an evaluation
function's no_grad decorator; drop one of a GAN's two clears; delete `x.sampler.set_epoch` (an
attribute chain); delete a zero_grad / eval() / train() / no_grad block inside a helper that a loop
calls. bench/realworld/score.py scores them strictly.

Usage: python bench/realworld/mutate.py [--harder] [--out DIR] [--per-kind N] [--per-file N] SOURCE ...
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# kind -> (our expected rule codes, description)
KINDS: dict[str, tuple[tuple[str, ...], str]] = {
    "delete_zero_grad": (("TPF001",), "delete the zero_grad() call of a training loop"),
    "zero_grad_between_backward_and_step": (("TPF002",), "move zero_grad() between backward() and step()"),
    "unconditional_zero_grad": (("TPF003",), "make zero_grad() unconditional under an accumulation guard"),
    "loss_accumulated": (("TPF005",), "accumulate the loss tensor instead of loss.item()"),
    "loss_appended": (("TPF006",), "append the loss tensor to a list"),
    "remove_no_grad": (("TPF007",), "remove a torch.no_grad() wrapper around an eval loop"),
    "delete_eval": (("TPF008",), "delete model.eval() before evaluation"),
    "delete_train": (("TPF009",), "delete model.train() in an epoch loop that also evaluates"),
    "optimizer_in_loop": (("TPF010",), "construct the optimizer inside the training loop"),
    "delete_set_epoch": (("TPF014",), "delete sampler.set_epoch(epoch)"),
    "softmax_before_ce": (("TPF103",), "apply softmax to the logits passed to cross-entropy"),
    "scaler_before_split": (("TPF201",), "fit a scaler on the whole data before the train/test split"),
    "forward_direct": (("TPF104",), "call model.forward(x) instead of model(x)"),
}

OPTIMIZERS = {
    "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "ASGD", "Rprop",
    "SparseAdam", "LBFGS",
}
MODEL_NAMES = {"model", "net", "netG", "netD", "encoder", "decoder", "classifier", "generator",
               "discriminator", "policy", "critic", "actor", "student", "teacher", "mlp", "cnn", "rnn", "lstm"}


@dataclass
class Mutant:
    kind: str
    text: str
    line: int  # mutant, 1-based
    orig_line: int
    anchors: list[int] = field(default_factory=list)  # mutant lines
    anchors_orig: list[int] = field(default_factory=list)


# ---------------------------------------------------------------- helpers


def call_attr(node: ast.AST) -> str | None:
    """`x.y.name(...)` -> 'name'; `name(...)` -> 'name'."""
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute):
            return f.attr
        if isinstance(f, ast.Name):
            return f.id
    return None


def expr_call_attr(stmt: ast.stmt) -> str | None:
    return call_attr(stmt.value) if isinstance(stmt, ast.Expr) else None


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def calls_in(node: ast.AST, attr: str) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and call_attr(n) == attr]


def indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


class Index:
    """Parent links, enclosing headers, and own-line checks for one parsed file."""

    def __init__(self, text: str):
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.tree = ast.parse(text)
        self.parent: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parent:
            node = self.parent[node]
            yield node

    def enclosing_loops(self, node: ast.AST) -> list[ast.For | ast.While | ast.AsyncFor]:
        out = []
        for a in self.ancestors(node):
            if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
                break
            if isinstance(a, ast.For | ast.While | ast.AsyncFor):
                out.append(a)
        return out

    def function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for a in self.ancestors(node):
            if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
                return a
        return None

    def headers(self, node: ast.AST) -> list[int]:
        """Lines of the enclosing loop / with / def headers (1-based, clean file), and of the loops
        of this file that call the enclosing function: a missing per-epoch call (`set_epoch`,
        `model.train()`) is reported at the epoch loop that calls `train_one_epoch(...)`."""
        out = []
        for a in self.ancestors(node):
            if isinstance(a, ast.For | ast.While | ast.AsyncFor | ast.With | ast.AsyncWith):
                out.append(a.lineno)
            if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
                out.append(a.lineno)
                out.extend(self.loops_calling(a.name))
                break
        return out

    def loops_calling(self, name: str) -> list[int]:
        """Header lines of the loops whose body calls `name(...)` or `<obj>.name(...)`."""
        out = []
        for loop in ast.walk(self.tree):
            if not isinstance(loop, ast.For | ast.While | ast.AsyncFor):
                continue
            for call in ast.walk(loop):
                func = getattr(call, "func", None)
                if isinstance(call, ast.Call) and (getattr(func, "id", None) == name or getattr(func, "attr", None) == name):
                    out.append(loop.lineno)
                    break
        return out

    def own_lines(self, stmt: ast.stmt) -> bool:
        """The statement alone on its lines (no `a; b`, no trailing code)."""
        first = self.lines[stmt.lineno - 1]
        if first[: stmt.col_offset].strip():
            return False
        last = self.lines[stmt.end_lineno - 1]
        rest = last[stmt.end_col_offset :].strip()
        return not rest or rest.startswith("#")

    def block_of(self, stmt: ast.stmt) -> list[ast.stmt]:
        parent = self.parent.get(stmt)
        for name in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and stmt in block:
                return block
        return []

    def no_grad_scope(self, node: ast.AST) -> bool:
        """Under `with torch.no_grad()/inference_mode()` or in a function decorated so."""
        for a in self.ancestors(node):
            if isinstance(a, ast.With | ast.AsyncWith) and any(_disables_grad(i.context_expr) for i in a.items):
                return True
            if isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef):
                return any(_disables_grad(d) for d in a.decorator_list)
        return False


def _disables_grad(expr: ast.AST) -> bool:
    name = dotted(expr.func) if isinstance(expr, ast.Call) else dotted(expr)
    return name.split(".")[-1] in ("no_grad", "inference_mode")


def line_map(removed: tuple[int, int] | None = None, inserted: tuple[int, int] | None = None) -> Callable[[int], int]:
    """Map a clean line to the mutant after removing lines [a, b] and then inserting n lines
    before mutant line k (both 1-based). Used for anchors."""

    def f(x: int) -> int:
        if removed is not None:
            a, b = removed
            if x > b:
                x -= b - a + 1
            elif x >= a:
                x = a
        if inserted is not None:
            k, n = inserted
            if x >= k:
                x += n
        return x

    return f


def delete_stmt(ix: Index, stmt: ast.stmt) -> tuple[str, int, Callable[[int], int]]:
    """Delete a statement's lines; leave `pass` if it was alone in its block."""
    lines = list(ix.lines)
    a, b = stmt.lineno, stmt.end_lineno
    block = ix.block_of(stmt)
    ind = indent_of(lines[a - 1])
    nl = "\r\n" if lines[a - 1].endswith("\r\n") else "\n"
    if len(block) == 1:
        lines[a - 1 : b] = [f"{ind}pass{nl}"]
        return "".join(lines), a, (lambda x: x - (b - a) if x > b else (a if x >= a else x))
    lines[a - 1 : b] = []
    return "".join(lines), min(a, len(lines)), line_map((a, b))


def reindent(stmt_lines: list[str], old: str, new: str) -> list[str]:
    out = []
    for i, ln in enumerate(stmt_lines):
        if i == 0:
            out.append(new + ln[len(old) :])
        elif len(new) >= len(old):
            out.append((" " * (len(new) - len(old))) + ln if ln.strip() else ln)
        else:
            cut = len(old) - len(new)
            out.append(ln[min(cut, len(indent_of(ln))) :])
    return out


def move_stmt(ix: Index, stmt: ast.stmt, before_line: int, indent: str) -> tuple[str, int, Callable[[int], int]]:
    """Move a statement so that it sits before clean line `before_line` with `indent`."""
    lines = list(ix.lines)
    a, b = stmt.lineno, stmt.end_lineno
    chunk = reindent(lines[a - 1 : b], indent_of(lines[a - 1]), indent)
    n = b - a + 1
    del lines[a - 1 : b]
    target = before_line if before_line < a else before_line - n
    lines[target - 1 : target - 1] = chunk
    text = "".join(lines)

    def f(x: int) -> int:
        if a <= x <= b:
            return target + (x - a)
        y = x - n if x > b else x
        return y + n if y >= target else y

    return text, target, f


def insert_lines(ix: Index, before_line: int, new: list[str]) -> tuple[str, Callable[[int], int]]:
    lines = list(ix.lines)
    lines[before_line - 1 : before_line - 1] = new
    n = len(new)
    return "".join(lines), (lambda x: x + n if x >= before_line else x)


def replace_segment(ix: Index, node: ast.AST, new: str) -> str | None:
    if node.lineno != node.end_lineno:
        return None
    lines = list(ix.lines)
    ln = lines[node.lineno - 1]
    lines[node.lineno - 1] = ln[: node.col_offset] + new + ln[node.end_col_offset :]
    return "".join(lines)


def segment(ix: Index, node: ast.AST) -> str:
    return ast.get_source_segment(ix.text, node) or ""


def loop_trains(loop: ast.AST) -> bool:
    return bool(calls_in(loop, "backward")) and bool(calls_in(loop, "step"))


def mk(kind: str, ix: Index, text: str, line: int, orig_line: int, site: ast.AST, mapf: Callable[[int], int],
       extra_orig: list[int] = ()) -> Mutant:
    anchors_orig = sorted(set(ix.headers(site)) | set(extra_orig))
    return Mutant(kind, text, line, orig_line, sorted({mapf(x) for x in anchors_orig}), anchors_orig)


# ---------------------------------------------------------------- operators


def op_delete_zero_grad(ix: Index) -> Iterator[Mutant]:
    for stmt in ast.walk(ix.tree):
        if expr_call_attr(stmt) != "zero_grad" or not ix.own_lines(stmt):
            continue
        loops = ix.enclosing_loops(stmt)
        if not loops or not loop_trains(loops[0]):
            continue
        outer = loops[-1]
        if len(calls_in(outer, "zero_grad")) != 1 or any(calls_in(outer, n) for n in ("accumulate", "no_sync")):
            continue
        if any(isinstance(n, ast.Attribute) and n.attr == "grad" for n in ast.walk(outer)):
            continue  # clears p.grad by hand
        text, line, f = delete_stmt(ix, stmt)
        extra = [c.lineno for c in calls_in(loops[0], "backward") + calls_in(loops[0], "step")]
        yield mk("delete_zero_grad", ix, text, line, stmt.lineno, stmt, f, extra)


def _block_sequence(ix: Index, block: list[ast.stmt]) -> tuple[ast.stmt | None, ast.stmt | None, ast.stmt | None]:
    zg = bw = st = None
    for s in block:
        attr = expr_call_attr(s)
        if attr == "zero_grad" and zg is None:
            zg = s
        elif attr == "backward" and bw is None:
            bw = s
        elif attr == "step" and bw is not None and st is None:
            st = s
    return zg, bw, st


def op_zero_grad_between(ix: Index) -> Iterator[Mutant]:
    for loop in ast.walk(ix.tree):
        if not isinstance(loop, ast.For | ast.While):
            continue
        zg, bw, st = _block_sequence(ix, loop.body)
        if not (zg and bw and st) or not all(ix.own_lines(s) for s in (zg, bw, st)):
            continue
        if len(calls_in(loop, "zero_grad")) != 1 or len(calls_in(loop, "step")) != 1:
            continue
        if not (zg.lineno < bw.lineno or zg.lineno > st.lineno):
            continue  # already in between
        text, line, f = move_stmt(ix, zg, bw.end_lineno + 1, indent_of(ix.lines[bw.lineno - 1]))
        yield mk("zero_grad_between_backward_and_step", ix, text, line, bw.end_lineno, zg, f, [bw.lineno, st.lineno])


def _is_modulo_guard(node: ast.If) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(node.test))


def op_unconditional_zero_grad(ix: Index) -> Iterator[Mutant]:
    for node in ast.walk(ix.tree):
        if not isinstance(node, ast.If) or node.orelse or not _is_modulo_guard(node):
            continue
        loops = ix.enclosing_loops(node)
        if not loops or not calls_in(loops[0], "backward"):
            continue
        zgs = [s for s in node.body if expr_call_attr(s) == "zero_grad" and ix.own_lines(s)]
        if len(zgs) != 1 or not any(expr_call_attr(s) == "step" for s in node.body) or len(node.body) < 2:
            continue
        if len(calls_in(loops[0], "zero_grad")) != 1:
            continue
        zg = zgs[0]
        text, line, f = move_stmt(ix, zg, node.end_lineno + 1, indent_of(ix.lines[node.lineno - 1]))
        yield mk("unconditional_zero_grad", ix, text, line, node.end_lineno, zg, f, [node.lineno])


def _loss_item(call: ast.AST) -> ast.Call | None:
    """`<name>.item()` where the name looks like a loss."""
    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "item"
            and not call.args and isinstance(call.func.value, ast.Name) and "loss" in call.func.value.id.lower()):
        return call
    return None


def _backward_names(loop: ast.AST) -> set[str]:
    out = set()
    for c in calls_in(loop, "backward"):
        if isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name):
            out.add(c.func.value.id)
    return out


def op_loss_accumulated(ix: Index) -> Iterator[Mutant]:
    for node in ast.walk(ix.tree):
        if not isinstance(node, ast.AugAssign) or not isinstance(node.op, ast.Add) or ix.no_grad_scope(node):
            continue
        loops = ix.enclosing_loops(node)
        if not loops or not ix.own_lines(node):
            continue
        items = [c for c in ast.walk(node.value) if _loss_item(c)]
        if len(items) != 1 or items[0].func.value.id not in _backward_names(loops[0]):
            continue
        item = items[0]
        text = replace_segment(ix, item, item.func.value.id)
        if text:
            yield mk("loss_accumulated", ix, text, node.lineno, node.lineno, node, lambda x: x)


def op_loss_appended(ix: Index) -> Iterator[Mutant]:
    found = False
    for node in ast.walk(ix.tree):
        if not (isinstance(node, ast.Expr) and call_attr(node.value) == "append") or ix.no_grad_scope(node):
            continue
        loops = ix.enclosing_loops(node)
        if not loops or not ix.own_lines(node):
            continue
        args = node.value.args
        if len(args) != 1 or not _loss_item(args[0]) or args[0].func.value.id not in _backward_names(loops[0]):
            continue
        text = replace_segment(ix, args[0], args[0].func.value.id)
        if text:
            found = True
            yield mk("loss_appended", ix, text, node.lineno, node.lineno, node, lambda x: x)
    if found:
        return
    # No `.append(loss.item())` site: log the loss tensor itself after backward().
    for loop in ast.walk(ix.tree):
        if not isinstance(loop, ast.For | ast.While) or ix.enclosing_loops(loop) or not loop_trains(loop):
            continue
        for stmt in loop.body:
            attr = expr_call_attr(stmt)
            if attr != "backward" or not ix.own_lines(stmt):
                continue
            recv = stmt.value.func.value if isinstance(stmt.value.func, ast.Attribute) else None
            if not isinstance(recv, ast.Name):
                continue
            nl = "\n"
            body_ind = indent_of(ix.lines[stmt.lineno - 1])
            loop_ind = indent_of(ix.lines[loop.lineno - 1])
            lines = list(ix.lines)
            lines.insert(stmt.end_lineno, f"{body_ind}loss_history.append({recv.id}){nl}")
            lines.insert(loop.lineno - 1, f"{loop_ind}loss_history = []{nl}")
            text = "".join(lines)
            a = loop.lineno

            def f(x: int, a: int = a, e: int = stmt.end_lineno) -> int:
                return x + (x >= a) + (x > e)

            yield mk("loss_appended", ix, text, stmt.end_lineno + 2, stmt.end_lineno, stmt, f)
            break


def op_remove_no_grad(ix: Index) -> Iterator[Mutant]:
    for node in ast.walk(ix.tree):
        if not isinstance(node, ast.With) or len(node.items) != 1 or not _disables_grad(node.items[0].context_expr):
            continue
        if ix.no_grad_scope(node) or not any(isinstance(s, ast.For | ast.While) for s in node.body):
            continue
        if ix.lines[node.lineno - 1][: node.col_offset].strip():
            continue
        first = node.body[0].lineno
        header = (node.lineno, first - 1)
        if first <= node.lineno or node.items[0].optional_vars is not None:
            continue
        body_ind = indent_of(ix.lines[first - 1])
        with_ind = indent_of(ix.lines[node.lineno - 1])
        cut = len(body_ind) - len(with_ind)
        if cut <= 0:
            continue
        lines = list(ix.lines)
        for i in range(first - 1, node.end_lineno):
            ln = lines[i]
            lines[i] = ln[min(cut, len(indent_of(ln))) :] if ln.strip() else ln
        n = header[1] - header[0] + 1
        del lines[header[0] - 1 : header[1]]
        text = "".join(lines)
        inner = [s.lineno for s in node.body if isinstance(s, ast.For | ast.While)]

        def f(x: int, a: int = header[0], b: int = header[1], n: int = n) -> int:
            return x - n if x > b else (a if x >= a else x)

        m = mk("remove_no_grad", ix, text, node.lineno, node.lineno, node, f, inner)
        yield m


_EVAL_NAME = re.compile(r"(eval|valid|test|infer|predict)", re.I)


def op_delete_eval(ix: Index) -> Iterator[Mutant]:
    for stmt in ast.walk(ix.tree):
        if expr_call_attr(stmt) != "eval" or stmt.value.args or not ix.own_lines(stmt):
            continue
        scope = ix.function(stmt) or ix.tree
        if len(calls_in(scope, "eval")) != 1:
            continue
        block = ix.block_of(stmt)
        after = block[block.index(stmt) + 1 :]
        followers = [s for s in after if isinstance(s, ast.With | ast.For | ast.While)]
        named = isinstance(scope, ast.FunctionDef) and _EVAL_NAME.search(scope.name)
        if not followers or not (named or any(isinstance(s, ast.With) and any(_disables_grad(i.context_expr)
                                                                               for i in s.items) for s in followers)):
            continue
        text, line, f = delete_stmt(ix, stmt)
        yield mk("delete_eval", ix, text, line, stmt.lineno, stmt, f, [s.lineno for s in followers])


def _train_calls(ix: Index) -> Iterator[ast.Expr]:
    """The `model.train()` (or `.train(True)`) statements of a file that also calls `.eval()`:
    only there can deleting one leave a model in eval mode."""
    if not any(call_attr(n) == "eval" and not n.args for n in ast.walk(ix.tree) if isinstance(n, ast.Call)):
        return
    for stmt in ast.walk(ix.tree):
        if expr_call_attr(stmt) != "train" or not ix.own_lines(stmt):
            continue
        args = stmt.value.args  # type: ignore[attr-defined]
        if args and not (isinstance(args[0], ast.Constant) and args[0].value is True):
            continue
        yield stmt  # type: ignore[misc]


def op_delete_train(ix: Index) -> Iterator[Mutant]:
    for stmt in _train_calls(ix):
        scope = ix.function(stmt) or ix.tree
        if len(calls_in(scope, "train")) != 1:
            continue
        loops = ix.enclosing_loops(stmt)
        in_epoch_loop = bool(loops) and bool(calls_in(loops[-1], "eval") or any(
            isinstance(c, ast.Call) and _EVAL_NAME.search(dotted(c.func)) for c in ast.walk(loops[-1])))
        # A model starts in train mode: deleting train() is a bug only when evaluation runs
        # between training passes, i.e. an epoch loop calls this function and evaluates too.
        train_fn = isinstance(scope, ast.FunctionDef) and loop_trains(scope) and any(
            isinstance(loop, ast.For | ast.While)
            and any(isinstance(c, ast.Call) and dotted(c.func).split(".")[-1] == scope.name for c in ast.walk(loop))
            and any(isinstance(c, ast.Call) and (call_attr(c) == "eval" or (c.func is not None and _EVAL_NAME.search(
                dotted(c.func).split(".")[-1] or ""))) for c in ast.walk(loop))
            for loop in ast.walk(ix.tree))
        if not (in_epoch_loop or train_fn):
            continue
        text, line, f = delete_stmt(ix, stmt)
        yield mk("delete_train", ix, text, line, stmt.lineno, stmt, f)


def _optimizer_ctor(value: ast.AST) -> bool:
    return isinstance(value, ast.Call) and dotted(value.func).split(".")[-1] in OPTIMIZERS and (
        "optim" in dotted(value.func) or isinstance(value.func, ast.Name))


def op_optimizer_in_loop(ix: Index) -> Iterator[Mutant]:
    for stmt in ast.walk(ix.tree):
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and _optimizer_ctor(stmt.value) and ix.own_lines(stmt)):
            continue
        if ix.enclosing_loops(stmt):
            continue
        name = stmt.targets[0].id
        block = ix.block_of(stmt)
        rest = block[block.index(stmt) + 1 :]
        target_loop = None
        for s in rest:
            if isinstance(s, ast.For | ast.While):
                inner = [n for n in ast.walk(s) if isinstance(n, ast.For | ast.While) and loop_trains(n)
                         and any(isinstance(c.func, ast.Attribute) and dotted(c.func.value) == name
                                 for c in calls_in(n, "step"))]
                if inner:
                    target_loop = inner[-1]
                    # innermost loop that steps
                    for cand in inner:
                        if not any(isinstance(x, ast.For | ast.While) and x is not cand and loop_trains(x)
                                   for x in ast.walk(cand)):
                            target_loop = cand
                            break
                break
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(s)):
                break  # used before the loop (e.g. a scheduler): moving it would break that
        if target_loop is None:
            continue
        first = target_loop.body[0]
        text, line, f = move_stmt(ix, stmt, first.lineno, indent_of(ix.lines[first.lineno - 1]))
        yield mk("optimizer_in_loop", ix, text, line, first.lineno, first, f, [target_loop.lineno])


def op_delete_set_epoch(ix: Index) -> Iterator[Mutant]:
    for stmt in ast.walk(ix.tree):
        if expr_call_attr(stmt) != "set_epoch" or not ix.own_lines(stmt):
            continue
        text, line, f = delete_stmt(ix, stmt)
        yield mk("delete_set_epoch", ix, text, line, stmt.lineno, stmt, f)


def _softmax_call(ix: Index) -> str | None:
    src = ix.text
    if re.search(r"^\s*import torch\b", src, re.M):
        return "torch.softmax({}, dim=-1)"
    if re.search(r"import torch\.nn\.functional as F\b", src):
        return "F.softmax({}, dim=-1)"
    return None


def op_softmax_before_ce(ix: Index) -> Iterator[Mutant]:
    wrap = _softmax_call(ix)
    if wrap is None:
        return
    criteria = {t.id for n in ast.walk(ix.tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                and dotted(n.value.func).split(".")[-1] == "CrossEntropyLoss" for t in n.targets
                if isinstance(t, ast.Name)}
    criteria |= {f"self.{t.attr}" for n in ast.walk(ix.tree) if isinstance(n, ast.Assign)
                 and isinstance(n.value, ast.Call) and dotted(n.value.func).split(".")[-1] == "CrossEntropyLoss"
                 for t in n.targets if isinstance(t, ast.Attribute)}
    for call in ast.walk(ix.tree):
        if not isinstance(call, ast.Call) or not call.args:
            continue
        fn = dotted(call.func)
        if not (fn.split(".")[-1] == "cross_entropy" or fn in criteria):
            continue
        arg = call.args[0]
        if arg.lineno != arg.end_lineno or _disables_grad(arg):
            continue
        if isinstance(arg, ast.Call) and "softmax" in dotted(arg.func):
            continue
        text = replace_segment(ix, arg, wrap.format(segment(ix, arg)))
        if text:
            stmt = next(a for a in [call, *ix.ancestors(call)] if isinstance(a, ast.stmt))
            yield mk("softmax_before_ce", ix, text, arg.lineno, arg.lineno, stmt, lambda x: x, [stmt.lineno])


def op_scaler_before_split(ix: Index) -> Iterator[Mutant]:
    for stmt in ast.walk(ix.tree):
        if not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
                and dotted(stmt.value.func).split(".")[-1] == "train_test_split" and ix.own_lines(stmt)):
            continue
        if not stmt.value.args or not isinstance(stmt.value.args[0], ast.Name):
            continue
        x = stmt.value.args[0].id
        ind = indent_of(ix.lines[stmt.lineno - 1])
        new = [f"{ind}{x} = StandardScaler().fit_transform({x})\n"]
        if re.search(r"^\s*from sklearn\.preprocessing import .*\bStandardScaler\b", ix.text, re.M) is None:
            new.insert(0, f"{ind}from sklearn.preprocessing import StandardScaler\n")
        text, f = insert_lines(ix, stmt.lineno, new)
        line = stmt.lineno + len(new) - 1
        yield mk("scaler_before_split", ix, text, line, stmt.lineno, stmt, f, [stmt.lineno])


def _module_classes(ix: Index) -> set[str]:
    return {c.name for c in ast.walk(ix.tree) if isinstance(c, ast.ClassDef)
            and any(dotted(b).split(".")[-1] in ("Module", "nn.Module") or dotted(b).endswith("Module") for b in c.bases)}


def op_forward_direct(ix: Index) -> Iterator[Mutant]:
    classes = _module_classes(ix)
    defined_funcs = {f.name for f in ast.walk(ix.tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
    models = set()
    for n in ast.walk(ix.tree):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
            ctor = dotted(n.value.func).split(".")[-1]
            for t in n.targets:
                if isinstance(t, ast.Name) and (ctor in classes or t.id in MODEL_NAMES):
                    models.add(t.id)
    models -= defined_funcs
    for call in ast.walk(ix.tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in models):
            continue
        if call.func.lineno != call.func.end_lineno or any(isinstance(a, ast.ClassDef) for a in ix.ancestors(call)):
            continue
        text = replace_segment(ix, call.func, f"{call.func.id}.forward")
        if text:
            stmt = next(a for a in [call, *ix.ancestors(call)] if isinstance(a, ast.stmt))
            yield mk("forward_direct", ix, text, call.lineno, call.lineno, stmt, lambda x: x)


OPERATORS: dict[str, Callable[[Index], Iterator[Mutant]]] = {
    "delete_zero_grad": op_delete_zero_grad,
    "zero_grad_between_backward_and_step": op_zero_grad_between,
    "unconditional_zero_grad": op_unconditional_zero_grad,
    "loss_accumulated": op_loss_accumulated,
    "loss_appended": op_loss_appended,
    "remove_no_grad": op_remove_no_grad,
    "delete_eval": op_delete_eval,
    "delete_train": op_delete_train,
    "optimizer_in_loop": op_optimizer_in_loop,
    "delete_set_epoch": op_delete_set_epoch,
    "softmax_before_ce": op_softmax_before_ce,
    "scaler_before_split": op_scaler_before_split,
    "forward_direct": op_forward_direct,
}
assert set(OPERATORS) == set(KINDS)


# ---------------------------------------------------------------- harder kinds (issue 16, `--harder`)

HARD_KINDS: dict[str, tuple[tuple[str, ...], str]] = {
    "remove_no_grad_decorator": (("TPF007",), "remove the @torch.no_grad()/@torch.inference_mode() decorator of an evaluation function"),
    "gan_drop_zero_grad": (("TPF001",), "delete one zero_grad() of a loop that clears two modules and steps two optimizers (GAN clears)"),
    "delete_set_epoch_chain": (("TPF014",), "delete `x.sampler.set_epoch(epoch)` reached through an attribute chain"),
    "helper_drop_zero_grad": (("TPF001",), "delete the zero_grad() of a step helper (no loop of its own) that a loop calls"),
    "helper_drop_eval": (("TPF008",), "delete model.eval() in an evaluation helper (no loop of its own) that a loop calls"),
    "helper_drop_train": (("TPF009",), "delete model.train() in a step helper (no loop of its own) that an epoch loop calls"),
    "helper_remove_no_grad": (("TPF007",), "remove the torch.no_grad() block of an evaluation helper (no loop of its own) that a loop calls"),
}


def _helper(ix: Index, stmt: ast.stmt) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function holding `stmt` when it has no loop of its own around or beside `stmt` and a loop of
    this file calls it (a step or evaluation helper), else None."""
    fn = ix.function(stmt)
    if fn is None or fn.name.startswith("__") or ix.enclosing_loops(stmt):
        return None
    if any(isinstance(n, ast.For | ast.While | ast.AsyncFor) for n in ast.walk(fn)):
        return None
    return fn if ix.loops_calling(fn.name) else None


def _remove_decorator(ix: Index, fn: ast.AST, deco: ast.AST) -> tuple[str, int, Callable[[int], int]]:
    lines = list(ix.lines)
    a, b = deco.lineno, deco.end_lineno  # the `@` sits on deco.lineno
    del lines[a - 1 : b]
    n = b - a + 1
    return "".join(lines), fn.lineno - n, (lambda x: x - n if x > b else (a if x >= a else x))


def op_remove_no_grad_decorator(ix: Index) -> Iterator[Mutant]:
    for fn in ast.walk(ix.tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        decos = [d for d in fn.decorator_list if _disables_grad(d)]
        if len(decos) != 1 or fn.name.startswith("__") or fn.name == "forward":
            continue
        evaluates = bool(_EVAL_NAME.search(fn.name)) or bool(calls_in(fn, "eval"))
        loops = [n for n in ast.walk(fn) if isinstance(n, ast.For | ast.While | ast.AsyncFor)]
        if not evaluates or not loops or ix.no_grad_scope(ix.parent.get(fn, ix.tree)):
            continue
        text, line, f = _remove_decorator(ix, fn, decos[0])
        yield mk("remove_no_grad_decorator", ix, text, line, fn.lineno, fn, f, [loops[0].lineno])


def op_gan_drop_zero_grad(ix: Index) -> Iterator[Mutant]:
    """A training loop (with whatever loops it nests, e.g. a critic's inner loop) that clears two
    different modules or optimizers and steps two optimizers: delete one of its clears."""
    seen: set[int] = set()
    for loop in ast.walk(ix.tree):
        if not isinstance(loop, ast.For | ast.While) or not loop_trains(loop) or ix.enclosing_loops(loop):
            continue
        zgs = [s for s in ast.walk(loop) if isinstance(s, ast.stmt) and expr_call_attr(s) == "zero_grad" and ix.own_lines(s)]
        receivers = {dotted(s.value.func.value) for s in zgs if isinstance(s.value.func, ast.Attribute)}
        steps = {dotted(c.func.value) for c in calls_in(loop, "step") if isinstance(c.func, ast.Attribute)}
        if len(receivers) != 2 or len(steps) < 2 or "" in receivers:
            continue
        for zg in zgs:
            if zg.lineno in seen:
                continue
            seen.add(zg.lineno)
            text, line, f = delete_stmt(ix, zg)
            extra = [c.lineno for c in calls_in(loop, "backward") + calls_in(loop, "step")]
            yield mk("gan_drop_zero_grad", ix, text, line, zg.lineno, zg, f, extra)


def _set_epoch_receiver(stmt: ast.stmt) -> ast.AST | None:
    if expr_call_attr(stmt) != "set_epoch" or not isinstance(stmt.value.func, ast.Attribute):
        return None
    return stmt.value.func.value


def op_delete_set_epoch_chain(ix: Index) -> Iterator[Mutant]:
    for stmt in ast.walk(ix.tree):
        recv = _set_epoch_receiver(stmt)
        if not isinstance(recv, ast.Attribute) or not ix.own_lines(stmt):
            continue
        text, line, f = delete_stmt(ix, stmt)
        yield mk("delete_set_epoch_chain", ix, text, line, stmt.lineno, stmt, f)


def op_delete_set_epoch_name(ix: Index) -> Iterator[Mutant]:
    """delete_set_epoch restricted to a plain-name receiver (the chains are their own kind)."""
    for m in op_delete_set_epoch(ix):
        stmt = next(s for s in ast.walk(ix.tree) if isinstance(s, ast.stmt) and s.lineno == m.orig_line
                    and expr_call_attr(s) == "set_epoch")
        if not isinstance(_set_epoch_receiver(stmt), ast.Attribute):
            yield m


def op_helper_drop_zero_grad(ix: Index) -> Iterator[Mutant]:
    for stmt in ast.walk(ix.tree):
        if expr_call_attr(stmt) != "zero_grad" or not ix.own_lines(stmt):
            continue
        fn = _helper(ix, stmt)
        if fn is None or not (calls_in(fn, "backward") or calls_in(fn, "step")) or len(calls_in(fn, "zero_grad")) != 1:
            continue
        text, line, f = delete_stmt(ix, stmt)
        extra = [c.lineno for c in calls_in(fn, "backward") + calls_in(fn, "step")]
        yield mk("helper_drop_zero_grad", ix, text, line, stmt.lineno, stmt, f, extra)


def op_helper_drop_eval(ix: Index) -> Iterator[Mutant]:
    for stmt in ast.walk(ix.tree):
        if expr_call_attr(stmt) != "eval" or stmt.value.args or not ix.own_lines(stmt):
            continue
        fn = _helper(ix, stmt)
        if fn is None or len(calls_in(fn, "eval")) != 1 or calls_in(fn, "backward"):
            continue
        text, line, f = delete_stmt(ix, stmt)
        yield mk("helper_drop_eval", ix, text, line, stmt.lineno, stmt, f)


def op_helper_drop_train(ix: Index) -> Iterator[Mutant]:
    for stmt in _train_calls(ix):
        fn = _helper(ix, stmt)
        if fn is None or not calls_in(fn, "backward") or len(calls_in(fn, "train")) != 1:
            continue
        text, line, f = delete_stmt(ix, stmt)
        yield mk("helper_drop_train", ix, text, line, stmt.lineno, stmt, f)


def op_helper_remove_no_grad(ix: Index) -> Iterator[Mutant]:
    for node in ast.walk(ix.tree):
        if not isinstance(node, ast.With) or len(node.items) != 1 or not _disables_grad(node.items[0].context_expr):
            continue
        if node.items[0].optional_vars is not None or ix.lines[node.lineno - 1][: node.col_offset].strip():
            continue
        fn = _helper(ix, node)
        if fn is None or calls_in(fn, "backward") or any(_disables_grad(d) for d in fn.decorator_list):
            continue
        first = node.body[0].lineno
        if first <= node.lineno:
            continue
        cut = len(indent_of(ix.lines[first - 1])) - len(indent_of(ix.lines[node.lineno - 1]))
        if cut <= 0:
            continue
        lines = list(ix.lines)
        for i in range(first - 1, node.end_lineno):
            ln = lines[i]
            lines[i] = ln[min(cut, len(indent_of(ln))) :] if ln.strip() else ln
        a, b = node.lineno, first - 1
        n = b - a + 1
        del lines[a - 1 : b]

        def f(x: int, a: int = a, b: int = b, n: int = n) -> int:
            return x - n if x > b else (a if x >= a else x)

        yield mk("helper_remove_no_grad", ix, "".join(lines), node.lineno, node.lineno, node, f)


HARD_OPERATORS: dict[str, Callable[[Index], Iterator[Mutant]]] = {
    **OPERATORS,
    "delete_set_epoch": op_delete_set_epoch_name,
    "remove_no_grad_decorator": op_remove_no_grad_decorator,
    "gan_drop_zero_grad": op_gan_drop_zero_grad,
    "delete_set_epoch_chain": op_delete_set_epoch_chain,
    "helper_drop_zero_grad": op_helper_drop_zero_grad,
    "helper_drop_eval": op_helper_drop_eval,
    "helper_drop_train": op_helper_drop_train,
    "helper_remove_no_grad": op_helper_remove_no_grad,
}
assert set(HARD_OPERATORS) == set(KINDS) | set(HARD_KINDS)


# ---------------------------------------------------------------- driver


def sources_from(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            out.extend(sorted(q for q in path.rglob("*.py") if "__pycache__" not in q.parts))
        elif path.suffix == ".py":
            out.append(path)
    return out


def is_training_script(text: str) -> bool:
    return ".backward(" in text or "train_test_split" in text


def stable_key(*parts: object) -> str:
    return hashlib.sha1("|".join(map(str, parts)).encode()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "out" / "mutants"))
    parser.add_argument("--per-kind", type=int, default=20, help="at most this many mutants per kind")
    parser.add_argument("--per-file", type=int, default=2, help="at most this many mutants per kind and file")
    parser.add_argument("--max-lines", type=int, default=1500, help="skip source files longer than this")
    parser.add_argument("--root", default=None, help="record source paths relative to this folder")
    parser.add_argument("--skip", action="append", default=[], help="skip source paths containing this text")
    parser.add_argument("--harder", action="store_true",
                        help="add the harder kinds of issue 16 (HARD_KINDS: decorators, GAN clears, attribute-chain "
                             "set_epoch, helper-level deletions); delete_set_epoch then keeps plain-name receivers only")
    args = parser.parse_args(argv)
    operators = HARD_OPERATORS if args.harder else OPERATORS
    kinds = {**KINDS, **HARD_KINDS} if args.harder else KINDS

    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    root = Path(args.root).resolve() if args.root else Path.cwd()

    candidates: dict[str, list[tuple[str, Path, Mutant]]] = {k: [] for k in kinds}
    dropped = 0
    for path in sources_from(args.sources):
        if any(part in path.as_posix() for part in args.skip):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if not is_training_script(text) or text.count("\n") > args.max_lines:
            continue
        try:
            ix = Index(text)
        except (SyntaxError, ValueError):
            continue
        for kind, op in operators.items():
            per_file = 0
            for m in op(ix):
                if per_file >= args.per_file:
                    break
                try:
                    ast.parse(m.text)
                except (SyntaxError, ValueError):
                    dropped += 1
                    continue
                if m.text == text:
                    continue
                per_file += 1
                candidates[kind].append((stable_key(path.name, kind, m.orig_line), path, m))

    manifest = []
    orig_ids: dict[Path, str] = {}
    counts = {}
    for kind, items in candidates.items():
        items.sort(key=lambda t: t[0])  # a deterministic spread over files
        chosen = items[: args.per_kind]
        counts[kind] = (len(chosen), len(items))
        for n, (_, path, m) in enumerate(chosen):
            if path not in orig_ids:
                oid = str(len(orig_ids))
                orig_ids[path] = oid
                dest = out / "_orig" / oid / path.name
                dest.parent.mkdir(parents=True)
                shutil.copyfile(path, dest)
            mdir = out / kind / str(n)
            mdir.mkdir(parents=True)
            (mdir / path.name).write_text(m.text, encoding="utf-8")
            try:
                src = str(path.resolve().relative_to(root))
            except ValueError:
                src = str(path)
            manifest.append({
                "id": f"{kind}/{n}",
                "kind": kind,
                "expected": list(kinds[kind][0]),
                "source": src,
                "orig": str((out / "_orig" / orig_ids[path] / path.name).relative_to(out)),
                "file": str((mdir / path.name).relative_to(out)),
                "line": m.line,
                "orig_line": m.orig_line,
                "anchors": m.anchors,
                "anchors_orig": m.anchors_orig,
            })
    (out / "manifest.json").write_text(json.dumps({"kinds": {k: {"expected": list(v[0]), "description": v[1]}
                                                             for k, v in kinds.items()},
                                                   "mutants": manifest, "dropped_unparsable": dropped}, indent=1))
    for kind, (chosen, total) in counts.items():
        print(f"[mutate] {kind:38s} {chosen:3d} mutants (of {total} sites)", file=sys.stderr)
    print(f"[mutate] {len(manifest)} mutants from {len(orig_ids)} files, {dropped} dropped (did not parse) -> {out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
