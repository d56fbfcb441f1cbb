"""The cyclic garbage collector around analyses (issue 19).

An analysis allocates a few hundred thousand objects, and CPython's collector, triggered by
allocations, ran its passes in the middle of it: a full collection scanned everything the
earlier versions had left outside the frozen generation, 40-130 ms of CPU on skorch, timm and
ultralytics, the tail of the keystroke latency. What a version keeps (its model, the caches) is
freed by reference counting when a later version replaces it; the collector only finds the
cycles an analysis leaves (parso's nodes, closures, some events), a few thousand objects.

So an analysis runs with automatic collection paused; at its end the young generation (what
this analysis allocated and still tracks) is collected once, which frees this analysis's own
cycles, and what survives is frozen (`gc.freeze`): no later automatic collection scans it
again (an abandoned analysis only freezes it: what waits for the worker comes first). A
cycle among older, frozen objects is found only by a sweep (`gc.unfreeze`, a full
collection, `gc.freeze`), which the server runs when the documents have been idle for
`IDLE_S`, and an analysis runs itself after `SWEEP_AFTER` analyses without one, so memory
stays bounded while someone types without a pause.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from typing import ClassVar


class Collector:
    IDLE_S: ClassVar[float] = 1.0  # seconds without an analysis before the server sweeps
    SWEEP_AFTER: ClassVar[int] = 100  # analyses without a sweep before one sweeps anyway

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0  # analyses running (a handler on the event loop may run one beside the worker's)
        self._resume = False  # automatic collection was enabled when the first of them started
        self.owed = 0  # analyses since the last sweep
        self.sweeps = 0  # (for tests)

    @contextlib.contextmanager
    def analysis(self, abandoned: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
        """Automatic collection paused while the body runs; then the young generation
        collected and the survivors frozen (or a sweep, when `SWEEP_AFTER` is reached). A body
        that raises one of `abandoned` (a newer version, a request waiting) only freezes: what
        waits for the worker does not wait for that collection too (35 ms after a 9,000-line
        file's first analysis), and the next sweep frees that analysis's cycles."""
        with self._lock:
            if self._depth == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._depth += 1
        quick = False
        try:
            yield
        except abandoned:
            quick = True
            raise
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self.owed += 1
                    if self.owed >= self.SWEEP_AFTER and not quick:
                        self._sweep()
                    else:
                        if not quick:
                            gc.collect(0)
                        gc.freeze()
                    if self._resume:
                        gc.enable()

    def sweep(self) -> None:
        """Every unreachable cycle freed, the frozen ones included; the survivors frozen again."""
        with self._lock:
            if self._depth == 0 and self.owed:
                self._sweep()

    def _sweep(self) -> None:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.owed = 0
        self.sweeps += 1
