"""The interpreter's compiled loops (estimator/interp_fast.py) compute what its general path computes: generated programs
(a vocabulary-building class, loops over strings with branches, jumps, arithmetic that fails, methods of plain values,
and nodes the compiler hands back to the interpreter) are run both ways and every value and problem compared."""

from __future__ import annotations

import textwrap
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from torch_preflight.core.parse import parse
from torch_preflight.core.semantic import build
from torch_preflight.core.source import SourceText
from torch_preflight.estimator import EstimateOptions, _interpret
from torch_preflight.estimator.interp import Interpreter
from torch_preflight.estimator.interp_fast import FAST_ITEMS, Compiler
from torch_preflight.estimator.values import ClassValue, Function, Obj, Unknown

PROGRAM = """\
class Box:
    def __init__(self):
        self.seen = {{}}
        self.order = []
        self.total = 0

    def add(self, word):
{add}
        return self.seen.get(word, -1)

    def __len__(self):
        return len(self.order)


def run(data):
    box = Box()
    out = []
    acc = 0
    for item in data:
{body}
    return box, out, acc, len(box)


result = run({data!r})
"""

ADD = [
    "if word not in self.seen:\n    self.order.append(word)\n    self.seen[word] = len(self.order) - 1",
    "self.total += 1",
    "if self.total > 40:\n    return -1",
    "self.order.append(word * 2)",
    "self.seen[word] = self.seen.get(word, 0) + 1",
]
BODY = [
    "box.add(item)",
    "out.append(item.upper())",
    "acc += len(item)",
    "if item in box.seen:\n    acc += 1\nelse:\n    acc -= 1",
    "if len(out) > 5:\n    out.pop()",
    "words = item.split('a') + ['<eos>']\nfor w in words:\n    out.append(box.add(w))",
    "if item == 'b':\n    continue",
    "if acc > 60:\n    break",
    "acc = acc * 3 % 97",
    "out.append(box.seen.get(item, -1))",
    "out.append(item[0] if item else '')",
    "x, y = item, acc\nout.append(y)",
    "out.append((item, acc))",
    "out.append([c for c in item])",
    "out.append(f'{item}-{acc}')",
    "acc += -len(item)",
    "acc = acc // (len(item) - 1)",
    "acc = acc + 'x'",
    "out.append(box.seen[item])",
    "out.append(out[-1] if out else None)",
    "acc = acc + 1 if isinstance(acc, int) else acc",
    "out.append(item < 'c' and len(item) > 1)",
    "for k in range(2):\n    acc += k",
    "box.total = box.total + len(box.order)",
]


def _run(source: str, compiled: bool) -> Interpreter:
    text = SourceText(source)
    model = build(parse(text).tree, text, "prep.py")
    assert model.tree is not None
    if compiled:
        return _interpret(model, model.tree, EstimateOptions())
    with mock.patch.object(Compiler, "usable", lambda self: False):
        return _interpret(model, model.tree, EstimateOptions())


def _plain(value: Any, depth: int = 0) -> Any:
    """A value of the interpreter as plain data to compare (objects by their attributes)."""
    if depth > 6:
        return "..."
    if isinstance(value, Unknown):
        return ("unknown", value.reason)
    if isinstance(value, Obj):
        return ("obj", value.type, {k: _plain(v, depth + 1) for k, v in value.attrs.items() if k != "__class__"})
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_plain(v, depth + 1) for v in value])
    if isinstance(value, dict):
        return ("dict", [(_plain(k, depth + 1), _plain(v, depth + 1)) for k, v in value.items()])
    if isinstance(value, (Function, ClassValue)):
        return type(value).__name__
    return value


def _both(source: str) -> tuple[Interpreter, Interpreter]:
    return _run(source, compiled=False), _run(source, compiled=True)


def _same(slow: Interpreter, fast: Interpreter) -> None:
    assert _plain(fast.globals.vars["result"]) == _plain(slow.globals.vars["result"])
    assert fast.problems == slow.problems
    assert fast.assumptions == slow.assumptions


def _program(add: list[str], body: list[str], data: list[str]) -> str:
    return PROGRAM.format(add=textwrap.indent("\n".join(add) or "pass", " " * 8),
                          body=textwrap.indent("\n".join(body) or "pass", " " * 8), data=data)


@settings(max_examples=60, deadline=None)
@given(add=st.lists(st.sampled_from(ADD), max_size=4), body=st.lists(st.sampled_from(BODY), min_size=1, max_size=6),
       data=st.lists(st.text(alphabet="abc", max_size=4), min_size=FAST_ITEMS, max_size=FAST_ITEMS + 40))
def test_compiled_loops_compute_what_the_general_interpreter_computes(add: list[str], body: list[str], data: list[str]) -> None:
    _same(*_both(_program(add, body, data)))


def test_a_vocabulary_built_word_by_word_is_exact_and_cheaper() -> None:
    lines = [" ".join(f"w{(i * 7 + j) % 50}" for j in range(6)) for i in range(200)]
    source = _program([ADD[0]], ["for w in item.split() + ['<eos>']:\n    out.append(box.add(w))"], lines)
    slow, fast = _both(source)
    _same(slow, fast)
    box, out, _, size = fast.globals.vars["result"]
    assert size == len(box.attrs["seen"]) == 50 + 1 and len(out) == 200 * 7  # w0..w49 and "<eos>"
    # each compiled statement is one unit of work, as one node of the general path: fewer units for the same loop
    assert fast.max_steps - fast.steps_left < (slow.max_steps - slow.steps_left) / 3


def test_a_return_and_a_break_inside_compiled_loops() -> None:
    source = textwrap.dedent(f"""\
        def first_long(words):
            for w in words:
                for c in w:
                    if c == 'z':
                        break
                else:
                    continue
                return w
            return None

        def count(words):
            n = 0
            for w in words:
                if w == 'stop':
                    break
                n += 1
            else:
                n = -1
            return n

        result = (first_long({['ab'] * FAST_ITEMS + ['xzy', 'z']!r}), count({['a'] * FAST_ITEMS + ['stop', 'a']!r}),
                  count({['a'] * FAST_ITEMS!r}))
        """)
    slow, fast = _both(source)
    _same(slow, fast)
    assert fast.globals.vars["result"] == ("xzy", FAST_ITEMS, -1)


def test_a_runaway_compiled_loop_stops_at_the_work_budget() -> None:
    source = textwrap.dedent("""\
        class Count:
            def __init__(self):
                n = 0
                for i in range(5000):
                    for j in range(5000):
                        n += 1
                self.n = n

        result = Count()
        """)
    it = _run(source, compiled=True)
    assert it.out_of_budget and "result" not in it.globals.vars  # 25 million passes: stopped, and said
    assert any("too large to interpret" in text for text, _ in it.problems)
