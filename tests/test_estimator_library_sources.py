"""Models of installed libraries read from their source (estimator.library_sources): jedi finds the `.py` file in the
environment `--python` names, the interpreter reads it, nothing imports the library (nor torch)."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from torch_preflight.core.memory import MemoryReport
from torch_preflight.estimator import EstimateOptions, estimate_source, library_sources

# torchvision 0.29.1 and timm 1.0.31 as published (sources only), where this machine has the benchmark corpus
PACKAGES = Path(__file__).resolve().parents[1] / "bench" / "out" / "corpus" / "packages"

TINY = '''\
import torch.nn as nn
from ._helpers import width


class TinyNet(nn.Module):
    def __init__(self, num_classes=10, hidden=width()):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, num_classes)

    @classmethod
    def build(cls, **kwargs):
        return cls(**kwargs)

    def forward(self, x):
        return self.head(self.body(x))


def tinynet(*, weights=None, **kwargs):
    return TinyNet.build(**kwargs)
'''

SCRIPT = """\
import torch
import torch.nn as nn
import torchvision

model = torchvision.models.tinynet(num_classes=5)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad()
    nn.functional.cross_entropy(model(torch.randn(4, 32)), torch.randint(0, 5, (4,))).backward()
    opt.step()
"""


def fake_environment(root: Path, marker: Path) -> Path:
    """A virtual environment's layout with a torchvision whose models are source, and a torch and torchvision whose
    import leaves `marker`: the estimate must read the one and import neither."""
    site = root / "lib" / "python3.12" / "site-packages"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("")
    for package in ("torch", "torchvision"):
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write({package!r})\n")
    models = site / "torchvision" / "models"
    models.mkdir()
    (models / "__init__.py").write_text("from .tiny import *\n")
    (models / "tiny.py").write_text(TINY)
    (models / "_helpers.py").write_text("def width():\n    return 16\n")
    # a compiled extension jedi would import to introspect it (here a file no import could load)
    (site / "torchvision" / f"_C{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"\x7fELF not really")
    return root / "bin" / "python"


def test_a_library_model_is_read_from_its_source_and_nothing_imports_torch(tmp_path: Path) -> None:
    """`--python` names the environment; the estimate reads torchvision/models/tiny.py (through the package's star
    import, a relative import and a classmethod) and no process, jedi's included, imports torch or torchvision:
    the fake packages first on the path leave a marker file when imported."""
    marker = tmp_path / "imported"
    python = fake_environment(tmp_path / "env", marker)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    site = python.parent.parent / "lib" / "python3.12" / "site-packages"
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-m", "torch_preflight", "estimate", str(script), "--device", "cpu", "--python", str(python),
                           "--format", "json"], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (report,) = json.loads(proc.stdout)["models"]
    assert report["complete"], report
    assert sum(layer["params"] for layer in report["layers"]) == 32 * 16 + 16 + 16 * 5 + 5
    assert any("installed library's source (torchvision.models.tiny)" in a["text"] for a in report["assumptions"])
    assert not marker.exists(), marker.read_text()


def test_the_compiled_extension_is_never_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """jedi's accessor loads (imports) a compiled module it meets; the estimator's environment lets it load only
    the modules built into the interpreter."""
    from jedi.inference.compiled.subprocess import functions

    loaded: list[str] = []
    real = functions.load_module
    monkeypatch.setattr(functions, "load_module", lambda state, **kw: loaded.append(kw.get("dotted_name", "")) or real(state, **kw))
    python = fake_environment(tmp_path / "env", tmp_path / "imported")
    paths = library_sources.environment_paths(str(python))
    library_sources.find_definition.cache_clear()
    assert library_sources.find_definition("torchvision._C.nms", paths) is None
    assert library_sources.find_definition("torchvision.models.tinynet", paths) == (
        str(python.parent.parent / "lib" / "python3.12" / "site-packages" / "torchvision" / "models" / "tiny.py"), "torchvision.models.tiny",
        "tinynet")
    assert not [name for name in loaded if name not in sys.builtin_module_names]


def test_environment_paths_from_the_layout(tmp_path: Path) -> None:
    """An interpreter or its environment folder: its site-packages and the folders its .pth files add (not their
    import lines, which are code)."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "venv" / "bin").mkdir()
    (tmp_path / "venv" / "bin" / "python").write_text("")
    (site / "editable.pth").write_text(f"{tmp_path / 'src'}\nimport os; os.remove('x')\n{tmp_path / 'missing'}\n")
    expected = (str(site), str(tmp_path / "src"))
    assert library_sources.environment_paths(str(tmp_path / "venv" / "bin" / "python")) == expected
    assert library_sources.environment_paths(str(tmp_path / "venv")) == expected
    assert library_sources.environment_paths(str(tmp_path / "nothing")) == ()


def one(src: str, python: str) -> MemoryReport:
    (report,) = estimate_source(textwrap.dedent(src), "train.py", EstimateOptions(device="cpu", python=python))
    return report


def packages_env(tmp_path: Path) -> str:
    """An environment folder whose site-packages holds the published torchvision and timm sources."""
    if not (PACKAGES / "torchvision" / "models" / "resnet.py").is_file():
        pytest.skip("the benchmark corpus's library sources are not on this machine")
    site = tmp_path / "env" / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    for package in ("torchvision", "timm"):
        (site / package).symlink_to(PACKAGES / package)
    return str(tmp_path / "env")


@pytest.mark.parametrize(("factory", "count"), [("resnet18", 11_689_512), ("resnet50", 25_557_032), ("vit_b_16", 86_567_656)])
def test_torchvision_models_read_from_the_published_source(tmp_path: Path, factory: str, count: int) -> None:
    report = one(f"""\
    import torch
    import torch.nn as nn
    from torchvision import models

    model = models.{factory}(weights=None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        nn.functional.cross_entropy(model(torch.randn(2, 3, 224, 224)), torch.randint(0, 1000, (2,))).backward()
        opt.step()
    """, packages_env(tmp_path))
    assert report.complete, report.unknowns
    assert sum(layer.params for layer in report.layers) == count
    assert any("installed library's source" in a.text for a in report.assumptions)
    assert not any("catalog" in a.text for a in report.assumptions)


TIMM = """\
import torch
import timm

model = timm.create_model("resnet50", pretrained=False)
loss = model(torch.randn(2, 3, 224, 224)).sum()
loss.backward()
"""


def test_timm_models_the_interpreter_cannot_follow_are_unknown_by_name(tmp_path: Path) -> None:
    """timm builds its models through a registry of pretrained configurations the interpreter does not follow: the
    estimate names what it could not read and is a lower bound, never a complete peak."""
    report = one(TIMM, packages_env(tmp_path))
    assert not report.complete
    assert any("timm.create_model('resnet50') read from the installed library's source" in a.text for a in report.assumptions)
    assert report.unknowns


def test_timm_absent_is_unknown_by_name(tmp_path: Path) -> None:
    report = one(TIMM, str(tmp_path))
    assert not report.complete
    assert any("timm.create_model('resnet50'): the model is not found in an installed timm" in u.text for u in report.unknowns)


def test_without_the_library_the_catalog_is_read(tmp_path: Path) -> None:
    report = one(SCRIPT.replace("torchvision.models.tinynet(num_classes=5)", "torchvision.models.resnet18(num_classes=5)")
                 .replace("torch.randn(4, 32)", "torch.randn(4, 3, 32, 32)"), str(tmp_path))
    assert report.complete, report.unknowns
    assert any("catalog of common architectures" in a.text for a in report.assumptions)


def test_the_python_library_models_are_written_in() -> None:
    """What torchvision's source needs, in a script of the user's own: `super()` through two subclasses of
    nn.Sequential (the layers were lost, and the estimate claimed to be complete), `super(Cls, self)`,
    `functools.partial` of a layer, an OrderedDict of layers, `hasattr` and `isinstance` on the layers built."""
    report = one("""\
    from collections import OrderedDict
    from functools import partial
    import torch
    import torch.nn as nn

    class MLP(nn.Sequential):
        def __init__(self, sizes, norm_layer=None):
            layers = []
            for a, b in zip(sizes[:-1], sizes[1:]):
                layers.append(nn.Linear(a, b))
                if norm_layer is not None:
                    layers.append(norm_layer(b))
            super().__init__(*layers)

    class Block(MLP):
        def __init__(self, dim):
            super(Block, self).__init__([dim, 4 * dim, dim], norm_layer=partial(nn.LayerNorm, eps=1e-6))
            for m in self.modules():
                if isinstance(m, Block) and hasattr(m, "missing"):
                    m.extra = nn.Linear(dim, 1000)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.Sequential(OrderedDict([("b0", Block(8)), ("b1", Block(8))]))

        def forward(self, x):
            return self.blocks(x)

    model = Net()
    model(torch.randn(2, 8)).sum().backward()
    """, "")
    assert report.complete, report.unknowns
    per_block = (8 * 32 + 32) + 2 * 32 + (32 * 8 + 8) + 2 * 8
    assert sum(layer.params for layer in report.layers) == 2 * per_block
