"""`torch-preflight measure --device cuda`: the CUDA path, run only where torch sees a GPU.

Skipped without torch or without CUDA (CI has neither a GPU nor, by default, a reason to fake one).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torch_preflight.cli import main as cli_main

torch = pytest.importorskip("torch", reason="torch is not installed: the measured runs need the `measure` extra")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

CUDA_SCRIPT = """
import torch
import torch.nn as nn

device = torch.device("cuda")
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.MSELoss()
for step in range(10):
    x, y = torch.randn(8, 16, device=device), torch.randn(8, 4, device=device)
    optimizer.zero_grad(set_to_none=True)
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""
PARAMS = (16 * 32 + 32 + 32 * 4 + 4) * 4


def test_measures_a_cuda_step_with_the_allocator_counters(tmp_path: Path) -> None:
    from torch_preflight.measure.runtime import measure_script

    script = tmp_path / "tiny_cuda.py"
    script.write_text(CUDA_SCRIPT, encoding="utf-8")
    m = measure_script(str(script), steps=2, device="cuda")
    assert m.device == "cuda" and m.steps_completed == 2 and m.error is None
    assert m.breakdown["parameters"] == PARAMS
    # every block is rounded up to 512 B by the caching allocator: 4 parameters, their 4 grads, 8 Adam moments
    assert m.peak_bytes >= 16 * 512
    assert sum(m.breakdown.values()) == m.peak_bytes
    (model,) = m.models
    assert {lay.name: lay.activation_bytes for lay in model.layers} == {"1": 8 * 32 * 4, "2": 8 * 32 * 4}
    assert set(m.phases) >= {"f", "b", "o"} and max(m.timeline) <= m.peak_bytes


def test_measure_cli_on_cuda_writes_json_plot_and_memory_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib")
    script = tmp_path / "tiny_cuda.py"
    script.write_text(CUDA_SCRIPT, encoding="utf-8")
    svg, history = tmp_path / "memory.svg", tmp_path / "snapshot.pickle"
    rc = cli_main(["measure", str(script), "--device", "cuda", "--format", "json", "--plot", str(svg),
                   "--memory-history", str(history)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    data = json.loads(captured.out)
    assert data["device"] == "cuda" and data["steps_completed"] == 2
    assert data["breakdown"]["parameters"] == PARAMS
    assert data["estimate"]["model"] == "Sequential"
    assert b"<svg" in svg.read_bytes() and history.stat().st_size > 0
