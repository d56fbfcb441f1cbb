"""DeepSpeed: `deepspeed.initialize` with a JSON config (its ZeRO stage, micro-batch, precision, accumulation and
optimizer) read as the step's settings, and ZeRO's sharding across the GPUs the job runs on (issue 18)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from torch_preflight.core.memory import MemoryReport
from torch_preflight.estimator import EstimateOptions, configs, estimate_source

CONFIG = Path(__file__).parent / "data" / "deepspeed" / "ds_config.json"  # stage 2, micro-batch 32, bf16, AdamW
SCRIPT = """\
import argparse
import deepspeed
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(1024, 4096)
        self.fc2 = nn.Linear(4096, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


parser = argparse.ArgumentParser()
parser.add_argument('--local_rank', type=int, default=-1)
parser = deepspeed.add_config_arguments(parser)
args = parser.parse_args()
model = Net()
data = torch.utils.data.TensorDataset(torch.randn(1000, 1024), torch.randint(0, 10, (1000,)))
engine, optimizer, loader, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters(),
                                                    training_data=data)
for x, y in loader:
    loss = nn.functional.cross_entropy(engine(x), y)
    engine.backward(loss)
    engine.step()
"""
PARAMS = 1024 * 4096 + 4096 + 4096 * 10 + 10
ARGV = ("--deepspeed", "--deepspeed_config", "ds_config.json")


def estimate(tmp_path: Path, config: dict | None = None, **options: object) -> MemoryReport:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    if config is None:
        shutil.copy(CONFIG, tmp_path / "ds_config.json")
    else:
        (tmp_path / "ds_config.json").write_text(json.dumps(config))
    (report,) = estimate_source(SCRIPT, str(script), EstimateOptions(argv=ARGV, **options))  # type: ignore[arg-type]
    return report


def test_the_config_file_is_the_steps_settings(tmp_path: Path) -> None:
    report = estimate(tmp_path, world_size=4)
    assert report.complete, report.unknowns
    texts = [a.text for a in report.assumptions]
    assert any(t.startswith("DeepSpeed ZeRO stage 2") for t in texts), texts
    assert any(t.startswith("batch_size=32") for t in texts), texts  # train_micro_batch_size_per_gpu
    assert any(t.startswith("optimizer AdamW") for t in texts), texts
    assert report.layers[0].param_bytes + report.layers[1].param_bytes == pytest.approx(PARAMS * 2, rel=0.01)  # bf16
    # float32 master weights and AdamW's two states, sharded across 4 GPUs
    assert report.breakdown["optimizer_state"] == pytest.approx(PARAMS * 12 / 4, rel=0.01)


def test_zero_stages_shard_more_and_the_world_size_must_be_known(tmp_path: Path) -> None:
    data = json.loads(CONFIG.read_text())
    peaks = {}
    for stage in (0, 1, 2, 3):
        report = estimate(tmp_path, {**data, "zero_optimization": {"stage": stage}}, world_size=8)
        assert report.complete, report.unknowns
        peaks[stage] = report.peak_bytes
    assert peaks[0] > peaks[1] > peaks[3]
    assert peaks[1] >= peaks[2]
    unknown = estimate(tmp_path)  # stage 2, and no --gpus
    assert not unknown.complete
    assert any("ZeRO stage 2" in u.text and "--gpus N" in u.text for u in unknown.unknowns)


def test_what_the_config_does_not_say_is_unknown_by_name(tmp_path: Path) -> None:
    data = json.loads(CONFIG.read_text())
    auto = estimate(tmp_path, {**data, "train_micro_batch_size_per_gpu": "auto"}, world_size=2)
    assert not auto.complete
    assert any("train_micro_batch_size_per_gpu" in u.text for u in auto.unknowns), auto.unknowns
    settings = configs.deepspeed_settings({"fp16": {"enabled": True}, "zero_optimization": {"stage": 3}})
    assert settings["stage"] == 3 and settings["fp16"] is True and settings["bf16"] is False and settings["micro_batch"] is None
    assert configs.deepspeed_config("missing.json", str(tmp_path)).reason.startswith("the DeepSpeed config 'missing.json'")


def test_the_hugging_face_trainer_under_deepspeed(tmp_path: Path) -> None:
    src = """\
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
model = AutoModelForCausalLM.from_pretrained("distilgpt2")
args = TrainingArguments("out", per_device_train_batch_size=4, bf16=True, deepspeed="ds_config.json")
Trainer(model=model, args=args, train_dataset=None).train()
"""
    script = tmp_path / "train.py"
    script.write_text(src)
    shutil.copy(CONFIG, tmp_path / "ds_config.json")
    (sharded,) = estimate_source(src, str(script), EstimateOptions(world_size=4))
    (single,) = estimate_source(src, str(script), EstimateOptions(world_size=1))
    texts = [a.text for a in sharded.assumptions]
    assert any(t.startswith("DeepSpeed ZeRO stage 2") for t in texts) and not any("autocast" in t for t in texts), texts
    assert sharded.breakdown["optimizer_state"] * 4 == pytest.approx(single.breakdown["optimizer_state"], rel=0.001)
    assert single.breakdown["optimizer_state"] == pytest.approx(3 * single.breakdown["parameters"] * 2, rel=0.01)
