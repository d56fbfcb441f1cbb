"""A document's cached analysis and memory reports follow the other files they read (in-process)."""

from __future__ import annotations

from pathlib import Path

from torch_preflight.core.config import Config
from torch_preflight.core.project import Project
from torch_preflight.estimator import estimate_source
from torch_preflight.server.documents import Document

MODELS = "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, {n})\n\n    def forward(self, x):\n        return self.fc(x)\n"
TRAIN = """import torch

from models import Net

model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    optimizer.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
"""


def test_memory_reports_follow_an_edited_model_buffer(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    models = tmp_path / "models.py"
    models.write_text(MODELS.format(n=8), encoding="utf-8")
    train = tmp_path / "train.py"
    train.write_text(TRAIN, encoding="utf-8")
    project = Project()
    doc = Document(train.as_uri(), TRAIN, 1, project=project)

    def params() -> int:
        (report,) = doc.memory(Config(), estimate_source)
        return sum(layer.params for layer in report.layers)

    assert params() == 4 * 8 + 8
    assert doc.depends_on(str(models))
    project.overrides[str(models)] = MODELS.format(n=16)  # the model file edited in the editor, unsaved
    assert params() == 4 * 16 + 16
    del project.overrides[str(models)]  # closed without saving: the file on disk again
    assert params() == 4 * 8 + 8
