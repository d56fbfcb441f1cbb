"""Cross-file resolution: a model class imported from the user's own module."""

from __future__ import annotations

from pathlib import Path

from torch_preflight.core.config import Config
from torch_preflight.core.project import Project

from torch_preflight.analyze import analyze

TRAIN = """\
import torch
from models.net import Net

model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        for x, y in val_loader:
            val = model(x)
"""

PLAIN = "import torch.nn as nn\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(2, 2)\n"
DROPOUT = PLAIN.replace("nn.Linear(2, 2)", "nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))")


def write_project(root: Path, net: str) -> Path:
    (root / "pyproject.toml").write_text("")
    (root / "models").mkdir()
    (root / "models" / "__init__.py").write_text("")
    (root / "models" / "net.py").write_text(net)
    script = root / "train.py"
    script.write_text(TRAIN)
    return script


def test_resolves_a_class_from_a_sibling_package(tmp_path: Path) -> None:
    script = write_project(tmp_path, PLAIN)
    view = Project().view()
    found = view.resolve_class(str(script), "models.net.Net")
    assert found is not None and found[1].is_module
    assert list(view.used) == [str(tmp_path / "models" / "net.py")]
    assert view.resolve_class(str(script), "models.missing.Net") is None


def test_missing_eval_mode_reads_the_imported_class(tmp_path: Path) -> None:
    script = write_project(tmp_path, PLAIN)
    config = Config(select=("TPF008",))
    quiet = analyze(TRAIN, str(script), config)
    assert not quiet.diagnostics  # no dropout or batch norm: eval mode changes nothing
    assert [d.path for d in quiet.dependencies] == [str(tmp_path / "models" / "net.py")]
    (tmp_path / "models" / "net.py").write_text(DROPOUT)
    loud = analyze(TRAIN, str(script), config)
    assert [d.code for d in loud.diagnostics] == ["TPF008"]
    assert not quiet.dependencies[0].unchanged()


def test_unsaved_editor_text_overrides_the_file(tmp_path: Path) -> None:
    script = write_project(tmp_path, PLAIN)
    project = Project(overrides={str(tmp_path / "models" / "net.py"): DROPOUT})
    assert [d.code for d in analyze(TRAIN, str(script), Config(select=("TPF008",)), project=project).diagnostics] == ["TPF008"]


def test_cli_cache_is_invalidated_when_an_imported_module_changes(tmp_path: Path, monkeypatch, capsys) -> None:
    import os

    from cli_helpers import run_cli

    write_project(tmp_path, PLAIN)
    (tmp_path / "pyproject.toml").write_text('[tool.torch-preflight]\nselect = ["TPF008"]\n')
    args = ["check", "--format", "concise", "train.py"]
    assert run_cli(args, monkeypatch, capsys, cwd=tmp_path).code == 0
    assert run_cli(args, monkeypatch, capsys, cwd=tmp_path).code == 0  # served from the cache
    net = tmp_path / "models" / "net.py"
    net.write_text(DROPOUT)
    os.utime(net, ns=(net.stat().st_atime_ns, net.stat().st_mtime_ns + 10**9))
    result = run_cli(args, monkeypatch, capsys, cwd=tmp_path)
    assert result.code == 1 and "TPF008" in result.out


def test_src_layout_is_resolved_through_jedi(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    package = tmp_path / "src" / "mypkg" / "models"
    package.mkdir(parents=True)
    (tmp_path / "src" / "mypkg" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "net.py").write_text(PLAIN)
    script = tmp_path / "scripts" / "train.py"
    script.parent.mkdir()
    text = TRAIN.replace("from models.net import Net", "from mypkg.models.net import Net")
    script.write_text(text)
    result = analyze(text, str(script), Config(select=("TPF008",)))
    assert result.diagnostics == []  # silent only because the class was found and read
    assert [d.path for d in result.dependencies] == [str(package / "net.py")]
