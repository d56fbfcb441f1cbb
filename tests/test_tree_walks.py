"""core/names.py's tree walks visit exactly what the standard library's do, in the same order."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from torch_preflight.core.names import breadth_first, child_nodes

ROOT = Path(__file__).parent.parent
FILES = sorted([*(ROOT / "tests" / "fixtures").rglob("*.py"), *(ROOT / "core").glob("*.py"), *(ROOT / "estimator").glob("*.py")])

EVERY_KIND = '''
import a.b as c
from .x import y as z
@dec(k=1)
async def f(p: int = 2, *args, q, **kw) -> None:
    global g
    async with m as n:
        async for i in range(3):
            yield i
    x: int = 1
    del x
    try:
        pass
    except (ValueError, KeyError) as e:
        raise RuntimeError("x") from e
    lam = lambda v: v if v else -v
    s = {**kw}, [*args], {i for i in args}, {i: i for i in args}, (i for i in args)
    print(f"{p!r:>{q}}", b"b", 1j, ..., None, True)
    match p:
        case None | True:
            pass
        case [1, *rest]:
            pass
        case {"k": v, **others}:
            pass
        case Point(x=0, y=yy) as pt:
            pass
        case _:
            pass
class C(B, metaclass=M):
    a = b = 1
    a += (yield_ := 2)
    assert a, "msg"
'''


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_the_walks_match_the_standard_library(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert breadth_first(tree) == list(ast.walk(tree))
    assert all(child_nodes(node) == list(ast.iter_child_nodes(node)) for node in ast.walk(tree))


def test_every_kind_of_node() -> None:
    tree = ast.parse(EVERY_KIND)
    assert breadth_first(tree) == list(ast.walk(tree))
    assert all(child_nodes(node) == list(ast.iter_child_nodes(node)) for node in ast.walk(tree))
