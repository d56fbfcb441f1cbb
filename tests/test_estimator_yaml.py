"""YAML configuration (OmegaConf.load, @hydra.main) read as data by a small YAML subset reader; never a loader."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from torch_preflight.core.memory import MemoryReport
from torch_preflight.estimator import EstimateOptions, estimate_source
from torch_preflight.estimator.yaml_config import UNKNOWN_SCALAR, parse

CONFIG = """\
# the model
model:
  hidden: 32        # units
  dims: [8, 16]
  act: 'relu'
  dropout: 0.1
  bias: false
train:
  batch_size: 4
  lr: 1e-3
  name: run-1
  ref: ${model.hidden}
  flag: yes
layers:
  - size: 64
    act: relu
  - size: 32
empty:
"""


def test_the_yaml_subset_reads_what_omegaconf_would() -> None:
    data = parse(CONFIG)
    assert data == {
        "model": {"hidden": 32, "dims": [8, 16], "act": "relu", "dropout": 0.1, "bias": False},
        "train": {"batch_size": 4, "lr": 0.001, "name": "run-1", "ref": UNKNOWN_SCALAR, "flag": UNKNOWN_SCALAR},
        "layers": [{"size": 64, "act": "relu"}, {"size": 32}],
        "empty": None,
    }
    # an interpolation and a YAML 1.1 boolean are present but not read; octal, hex, dates and sexagesimal likewise
    for text in ("0123", "0x1f", "2024-01-01", "1:30", ".inf"):
        assert parse(f"v: {text}") == {"v": UNKNOWN_SCALAR}, text


def test_the_yaml_subset_agrees_with_a_yaml_loader_where_it_reads() -> None:
    yaml = pytest.importorskip("yaml")
    text = CONFIG.replace("1e-3", "0.001")  # PyYAML's YAML 1.1 reads 1e-3 as a string; OmegaConf as a float
    expected = yaml.safe_load(text)
    data = parse(text)
    assert data is not None
    for section in ("model", "layers", "empty"):
        assert data[section] == expected[section]
    assert {k: v for k, v in data["train"].items() if v is not UNKNOWN_SCALAR} == {"batch_size": 4, "lr": 0.001, "name": "run-1"}


@pytest.mark.parametrize("text", [
    "a: &x 1", "a: *x", "a: !!int 3", "a: |\n  text", "a: >\n  text", "a: 1\n  b: 2", "a: 1\n---\nb: 2", "a: [1, [2]]",
    "a b: 1", "a: 1\na: 2", "a:\n\t- 1",
])
def test_outside_the_subset_the_file_is_not_read(text: str) -> None:
    assert parse(text) is None


MODEL = """\
import torch
import torch.nn as nn
{imports}


class Net(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(10, hidden)
        self.fc2 = nn.Linear(hidden, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


{main}
"""
STEP = """\
    model = Net(cfg.model.hidden)
    opt = torch.optim.SGD(model.parameters(), lr=cfg["train"]["lr"])
    x = torch.randn(cfg.train.get("batch_size", 1), 10)
    loss = model(x).sum()
    loss.backward()
    opt.step()
"""


def estimate(tmp_path: Path, main: str, imports: str, argv: tuple[str, ...] | None = None) -> MemoryReport:
    script = tmp_path / "train.py"
    script.write_text(MODEL.format(imports=imports, main=textwrap.dedent(main)))
    (report,) = estimate_source(script.read_text(), str(script), EstimateOptions(device="cpu", argv=argv))
    return report


def params(report: MemoryReport) -> int:
    return sum(layer.params for layer in report.layers)


def test_omegaconf_load_reads_the_projects_yaml(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("model:\n  hidden: 32\ntrain:\n  lr: 0.1\n  batch_size: 4\n")
    main = "cfg = OmegaConf.load('config.yaml')\nif True:\n" + STEP
    report = estimate(tmp_path, main, "from omegaconf import OmegaConf")
    assert report.complete, report.unknowns
    assert params(report) == 10 * 32 + 32 + 32 * 2 + 2
    # a value the subset does not read (an interpolation) is unknown, never guessed: so is the layer built from it,
    # which names the value
    (tmp_path / "config.yaml").write_text("model:\n  hidden: ${width}\ntrain:\n  lr: 0.1\n  batch_size: 4\n")
    report = estimate(tmp_path, main, "from omegaconf import OmegaConf")
    assert not report.complete
    assert any("`out_features` is not a known integer (config value `config.yaml: model: hidden`)" in u.text
               for u in report.unknowns), [u.text for u in report.unknowns]
    # and so is a file it cannot read
    (tmp_path / "config.yaml").write_text("model: &m\n  hidden: 32\n")
    assert not estimate(tmp_path, main, "from omegaconf import OmegaConf").complete


def test_hydra_main_composes_the_defaults_and_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "config.yaml").write_text("defaults:\n  - model: small\n  - _self_\ntrain:\n  lr: 0.1\n  batch_size: 4\n")
    (tmp_path / "conf" / "model" / "small.yaml").write_text("hidden: 16\n")
    (tmp_path / "conf" / "model" / "large.yaml").write_text("hidden: 64\n")
    main = ('@hydra.main(version_base=None, config_path="conf", config_name="config")\ndef main(cfg):\n' + STEP
            + '\n\nif __name__ == "__main__":\n    main()\n')
    small = estimate(tmp_path, main, "import hydra")
    assert small.complete, small.unknowns
    assert params(small) == 10 * 16 + 16 + 16 * 2 + 2
    large = estimate(tmp_path, main, "import hydra", argv=("model=large", "train.batch_size=64"))
    assert large.complete and params(large) == 10 * 64 + 64 + 64 * 2 + 2
    assert large.peak_bytes > estimate(tmp_path, main, "import hydra", argv=("model=large",)).peak_bytes  # batch 64
    # a defaults list the estimator does not compose (an override of a package) leaves the config unknown
    (tmp_path / "conf" / "config.yaml").write_text("defaults:\n  - model@net: small\ntrain:\n  lr: 0.1\n  batch_size: 4\n")
    unknown = estimate(tmp_path, main, "import hydra")
    assert not unknown.complete
    assert any("Hydra config" in u.text for u in unknown.unknowns), unknown.unknowns
