"""`torch-preflight estimate`: flags, JSON output, budget exit status, and the TPF401 rule's inputs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from torch_preflight.core.config import Config

from torch_preflight import estimate_command
from torch_preflight.analyze import analyze

SCRIPT = """\
import torch
import torch.nn as nn

class MLP(nn.Module):
    def __init__(self, hidden=256):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

model = MLP(hidden=512)
optimizer = torch.optim.Adam(model.parameters())
criterion = nn.CrossEntropyLoss()
for step in range(100):
    x = torch.randn(32, 64)
    y = torch.randint(0, 10, (32,))
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""


def run(tmp_path: Path, *argv: str) -> tuple[int, str]:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT, encoding="utf-8")
    parser = argparse.ArgumentParser()
    estimate_command.add_arguments(parser)
    args = parser.parse_args([str(path), *argv])
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = estimate_command.run(args)
    return code, out.getvalue()


def test_json_output(tmp_path: Path) -> None:
    code, out = run(tmp_path, "--format", "json", "--device", "cpu")
    assert code == 0
    data = json.loads(out)
    (model,) = data["models"]
    assert model["model"] == "MLP" and model["model_line"] == 13  # 1-based, as in the text
    assert sum(layer["params"] for layer in model["layers"]) == 64 * 512 + 512 + 512 * 10 + 10
    assert set(model["breakdown"]) == {"parameters", "gradients", "optimizer_state", "activations", "other"}
    assert model["peak_bytes"] == sum(model["breakdown"].values())
    assert any("batch_size" in a["text"] or "Adam" in a["text"] for a in model["assumptions"])


def test_budget_exit_status_and_text(tmp_path: Path) -> None:
    code, out = run(tmp_path, "--gpu-memory", "100KiB")
    assert code == 1
    assert "does not fit" in out and "bf16 autocast" in out and "ZeRO-2" in out
    code, out = run(tmp_path, "--gpu", "a100-80gb", "--batch-size", "64", "--optimizer", "sgd")
    assert code == 0 and "fits" in out and "largest batch size that fits" in out


def test_bad_flags(tmp_path: Path) -> None:
    assert run(tmp_path, "--gpu", "nonexistent-gpu")[0] == 2
    assert run(tmp_path, "--gpu-memory", "lots")[0] == 2
    with pytest.raises(SystemExit):
        run(tmp_path, "--device", "tpu")


def test_tpf401_needs_a_budget_and_fires_over_it() -> None:
    assert not [d for d in analyze(SCRIPT, "t.py", Config(select=("ALL",))).diagnostics if d.code == "TPF401"]
    over = [d for d in analyze(SCRIPT, "t.py", Config(select=("ALL",), gpu_memory=100 * 1024)).diagnostics if d.code == "TPF401"]
    assert len(over) == 1 and over[0].span.start.line == 12
    assert "over the 100.0 KiB budget" in over[0].message and "try" in over[0].message
    fits = [d for d in analyze(SCRIPT, "t.py", Config(select=("ALL",), gpu="h100-80gb")).diagnostics if d.code == "TPF401"]
    assert fits == []


def test_notebook_locations_are_cells(tmp_path: Path) -> None:
    """The model defined in one cell and trained in later ones; lines are reported per cell."""
    first, second = SCRIPT.split("model = MLP")

    def cell(kind: str, text: str) -> dict[str, object]:
        return {"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True), "outputs": [], "execution_count": None}

    notebook = {
        "cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# MLP"]}, cell("code", first), cell("code", "model = MLP" + second)],
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "train.ipynb"
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    parser = argparse.ArgumentParser()
    estimate_command.add_arguments(parser)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = estimate_command.run(parser.parse_args([str(path), "--format", "json", "--device", "cpu"]))
    assert code == 0
    (model,) = json.loads(out.getvalue())["models"]
    assert model["location"] == "cell 3:1"  # `model = MLP(hidden=512)`, the first line of the third cell
    assert [layer["location"] for layer in model["layers"] if layer["name"] in ("fc1", "fc2")] == ["cell 2:7", "cell 2:8"]
    assert any("train.ipynb:cell 3:" in a["text"] for a in model["assumptions"])
