"""A document's cached analysis and memory reports follow the other files they read (in-process)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lsprotocol import types
from torch_preflight.core.config import Config
from torch_preflight.core.project import Project
from torch_preflight.core.source import SourceText
from torch_preflight.estimator import estimate_source
from torch_preflight.server import convert
from torch_preflight.server.documents import Document

from torch_preflight.analyze import analyze

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


HELPERS = """import torch


def step(model, batch, optimizer):
    loss = model(batch).sum()
    loss.backward()
    optimizer.step()


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)
"""
USER = """import torch

from helpers import Head, step

model = Head()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for batch in range(3):
    step(model, batch, optimizer)
"""
KEYS = ["(", ")", "\n", "    ", "optimizer.zero_grad()\n    ", "x", "'''", "torch.no_grad()", "#"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), st.floats(0, 1), st.integers(0, 8), st.sampled_from(KEYS)), min_size=1, max_size=6))
def test_edits_in_another_file_of_the_project_match_a_fresh_analysis(edits: list[tuple[bool, float, int, str]]) -> None:
    """Random edits to an imported module's buffer and to the open document: the document's
    analysis after each equals a fresh `analyze()` that sees the same buffers."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "pyproject.toml").write_text("", encoding="utf-8")
        (root / "helpers.py").write_text(HELPERS, encoding="utf-8")
        (root / "train.py").write_text(USER, encoding="utf-8")
        project = Project()
        doc = Document((root / "train.py").as_uri(), USER, 1, project=project)
        config = Config(select=("ALL",))
        doc.analysis(config)
        doc.prime()
        helpers = HELPERS
        for version, (in_helpers, where, cut, key) in enumerate(edits, start=2):
            if in_helpers:  # the other file, edited (unsaved) in the editor
                at = int(where * len(helpers))
                helpers = helpers[:at] + key + helpers[at + cut :]
                project.overrides[str(root / "helpers.py")] = helpers
            else:
                at = int(where * len(doc.text))
                source = SourceText(doc.text)
                rng = types.Range(start=convert.to_lsp_position(source, source.position(at)),
                                  end=convert.to_lsp_position(source, source.position(min(at + cut, len(doc.text)))))
                doc.update([types.TextDocumentContentChangePartial(range=rng, text=key)], version, convert.UTF16)
            got = doc.analysis(config)
            fresh = Project(overrides=dict(project.overrides))
            full = analyze(doc.text, doc.path, config, project=fresh)
            assert [(d.code, d.span, d.message) for d in got.diagnostics] == [(d.code, d.span, d.message) for d in full.diagnostics]
            assert got.syntax_errors == full.syntax_errors
        doc.close()
