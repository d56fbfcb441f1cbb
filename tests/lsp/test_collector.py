"""The collector around analyses (server/collector.py): paused while one runs, its survivors
frozen after it, frozen cycles freed by a sweep, and a sweep forced when none ran for long."""

from __future__ import annotations

import asyncio
import gc
import weakref

from torch_preflight.server.collector import Collector
from torch_preflight.server.documents import Document
from torch_preflight.server.server import PreflightServer


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_an_analysis_runs_without_automatic_collection_and_its_survivors_are_frozen() -> None:
    collector = Collector()
    gc.enable()
    frozen = gc.get_freeze_count()
    seen: list[bool] = []
    with collector.analysis():
        with collector.analysis():  # nested: the outer one resumes collection
            seen.append(gc.isenabled())
        seen.append(gc.isenabled())
        kept = [Node() for _ in range(100)]
    assert seen == [False, False]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + 100
    assert collector.owed == 1
    del kept
    gc.unfreeze()


def test_a_cycle_of_this_analysis_is_freed_at_its_end_and_a_frozen_one_by_a_sweep() -> None:
    collector = Collector()
    with collector.analysis():
        young = cycle()
    assert young() is None  # the young generation is collected after the analysis
    held = Node()
    held.other = Node()
    held.other.other = held
    old = weakref.ref(held)
    with collector.analysis():
        pass  # freezes `held`
    del held
    gc.collect()
    assert old() is not None  # frozen: no collection sees it
    collector.sweep()
    assert old() is None
    assert collector.owed == 0 and collector.sweeps == 1
    gc.unfreeze()


def test_a_sweep_is_forced_after_many_analyses_without_one() -> None:
    class Soon(Collector):
        SWEEP_AFTER = 3

    collector = Soon()
    for _ in range(7):
        with collector.analysis():
            pass
    assert collector.sweeps == 2 and collector.owed == 1
    gc.unfreeze()


def test_the_server_sweeps_once_no_analysis_is_pending() -> None:
    class Server(PreflightServer):
        encoding = "utf-16"  # no client negotiated one

    server = Server()
    server.config_ready.set()
    uri = "file:///tmp/collector/train.py"
    doc = server.docs[uri] = Document(uri, "import torch\nx = torch.zeros(3)\n", 1)
    server.lsp_diagnostics(doc)
    assert server.collector.owed == 1

    async def idle() -> None:
        server.pending[uri] = asyncio.ensure_future(asyncio.sleep(0))  # an analysis waits: no sweep yet
        server._sweep_if_idle()
        assert server._sweep_timer is not None
        await server.pending.pop(uri)
        server._sweep_timer.cancel()
        server._sweep_if_idle()
        await asyncio.get_running_loop().run_in_executor(server.executor, lambda: None)  # the sweep ran before this

    asyncio.run(idle())
    assert server.collector.sweeps == 1 and server.collector.owed == 0
    server.executor.shutdown()
    gc.unfreeze()


def test_an_abandoned_analysis_only_freezes_its_young_generation() -> None:
    """An analysis stopped for a newer version or a waiting request does not collect (the request
    would wait for it): its cycles are frozen with the rest and freed by the next sweep."""
    collector = Collector()
    gc.enable()
    try:
        with collector.analysis(abandoned=(KeyError,)):
            garbage = cycle()
            raise KeyError("a newer version")
    except KeyError:
        pass
    assert gc.isenabled() and collector.owed == 1
    assert garbage() is not None  # frozen, not collected
    with collector.analysis(abandoned=(KeyError,)):
        freed = cycle()
    assert freed() is None  # a finished analysis collects its young generation
    gc.unfreeze()
    gc.collect()
    assert garbage() is None
    gc.freeze()
