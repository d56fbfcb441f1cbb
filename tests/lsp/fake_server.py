"""Runs the real server with a small fake estimator (the tests must not depend on its numbers)."""

from __future__ import annotations

import re
import sys

from torch_preflight.core.memory import Assumption, LayerEstimate, MemoryReport
from torch_preflight.server import server as server_module

LINEAR = re.compile(r"self\.(\w+) = nn\.Linear\((\d+), (\d+)\)")


def fake_estimate(
    text: str, path: str, config: object, model: object = None, project: object = None, stale: object = None
) -> list[MemoryReport]:
    layers = []
    assumptions = []
    model_line = -1
    for number, line in enumerate(text.splitlines()):
        batch = re.search(r"DataLoader\(.*batch_size=(\d+)", line)
        if batch:  # cited the way the real estimator cites the analysed file
            assumptions.append(Assumption(f"batch_size={batch.group(1)} from {path.rsplit('/', 1)[-1]}:{number + 1}", number))
        match = LINEAR.search(line)
        if match:
            n_in, n_out = int(match.group(2)), int(match.group(3))
            params = n_in * n_out + n_out
            layers.append(LayerEstimate(match.group(1), "Linear", number, match.start(), params, params * 4, None, None))
        if re.search(r"=\s*Net\(\)", line):
            model_line = number
    if not layers:
        return []
    budget = getattr(config, "gpu_memory", None)
    peak = sum(x.param_bytes for x in layers) * 4
    return [MemoryReport("Net", model_line, peak, {"parameters": peak // 4}, tuple(layers), tuple(assumptions), (), True,
                         budget_bytes=budget, fits=None if budget is None else peak <= budget)]


original = server_module.create_server


def create_server():  # type: ignore[no-untyped-def]
    server = original()
    server.estimator = fake_estimate
    return server


server_module.create_server = create_server

if __name__ == "__main__":
    from torch_preflight.server.cli import main

    sys.exit(main(sys.argv[1:]))
