"""The estimator reads nn.Module classes (and their helpers and configs) from the user's other modules."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from torch_preflight.core.config import Config
from torch_preflight.core.project import Project
from torch_preflight.estimator import EstimateOptions, estimate_source

from torch_preflight.analyze import analyze

LAYERS = """\
import torch.nn as nn


def conv_block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU())
"""

MODELS = """\
import torch.nn as nn
from layers import conv_block


class Net(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.body = conv_block(3, hidden)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.head(self.body(x).mean(dim=(2, 3)))
"""

TRAIN = """\
import torch
from models import Net

model = Net(hidden=32)
optimizer = torch.optim.Adam(model.parameters())
for step in range(3):
    x = torch.randn(8, 3, 32, 32)
    y = torch.randint(0, 10, (8,))
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
"""


def write(root: Path, train: str = TRAIN) -> Path:
    (root / "pyproject.toml").write_text("")
    (root / "layers.py").write_text(LAYERS)
    (root / "models.py").write_text(MODELS)
    script = root / "train.py"
    script.write_text(train)
    return script


def test_model_class_from_a_sibling_module(tmp_path: Path) -> None:
    script = write(tmp_path)
    reports = estimate_source(TRAIN, str(script), EstimateOptions(device="cpu"))
    assert len(reports) == 1
    report = reports[0]
    assert report.model == "Net" and report.model_line == 3 and report.complete
    rows = {layer.name: layer for layer in report.layers}
    assert rows["body.0"].params == 32 * 3 * 9 + 32  # hidden=32 from the instantiation site in train.py
    assert rows["head"].params == 32 * 10 + 10
    # each layer says where it is built: line 4 (0-based) of layers.py, line 8 of models.py
    assert (rows["body.0"].file, rows["body.0"].line) == (str(tmp_path / "layers.py"), 4)
    assert (rows["head"].file, rows["head"].line) == (str(tmp_path / "models.py"), 8)
    # torch 2.13 (CPU, one thread) measured 3,260,152 bytes for this script
    assert abs(report.peak_bytes - 3_260_152) / 3_260_152 < 0.01


def test_without_the_project_the_class_is_unknown(tmp_path: Path) -> None:
    write(tmp_path)
    assert estimate_source(TRAIN, "<stdin>", EstimateOptions(device="cpu")) == []


def test_class_re_exported_by_a_package(tmp_path: Path) -> None:
    script = write(tmp_path, TRAIN.replace("from models import Net", "from nets import Net"))
    (tmp_path / "nets").mkdir()
    (tmp_path / "nets" / "__init__.py").write_text("from .core import Net\n")
    (tmp_path / "nets" / "core.py").write_text(MODELS)
    view = Project().view()
    reports = estimate_source(script.read_text(), str(script), EstimateOptions(device="cpu"), project=view)
    assert [r.model for r in reports] == ["Net"] and reports[0].complete
    assert {str(tmp_path / "nets" / "__init__.py"), str(tmp_path / "nets" / "core.py")} <= set(view.used)


def test_imported_config_dataclass(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "config.py").write_text("from dataclasses import dataclass\n\n\n@dataclass\nclass Cfg:\n    width: int = 16\n")
    (tmp_path / "models.py").write_text(MODELS.replace("from layers import conv_block\n", "").replace(
        "self.body = conv_block(3, hidden)", "self.body = nn.Conv2d(3, hidden, 3, padding=1)"))
    script = tmp_path / "train.py"
    script.write_text(TRAIN.replace("from models import Net", "from models import Net\nfrom config import Cfg").replace(
        "Net(hidden=32)", "Net(hidden=Cfg(width=24).width)"))
    report = estimate_source(script.read_text(), str(script), EstimateOptions(device="cpu"))[0]
    assert {layer.name: layer.params for layer in report.layers}["body"] == 24 * 3 * 9 + 24


def test_cli_and_budget_rule_read_the_other_module(tmp_path: Path, capsys: object) -> None:
    from torch_preflight.cli import main

    script = write(tmp_path)
    assert main(["estimate", str(script), "--device", "cpu", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)  # type: ignore[attr-defined]
    assert data["models"][0]["model"] == "Net"
    assert {layer["file"] for layer in data["models"][0]["layers"]} == {str(tmp_path / "layers.py"), str(tmp_path / "models.py")}
    # TPF401 sees the imported model too, and the analysis records the files it read
    result = analyze(TRAIN, str(script), Config(select=("TPF401",), gpu_memory=1024))
    assert [d.code for d in result.diagnostics] == ["TPF401"]
    assert {str(tmp_path / "models.py"), str(tmp_path / "layers.py")} <= {d.path for d in result.dependencies}


def test_a_module_over_the_read_budget_is_not_read_and_the_estimate_says_so(tmp_path: Path) -> None:
    # the model's base class lives in a module larger than what one analysis may read of other modules
    from torch_preflight.core.project import FOREIGN_BUDGET_BYTES

    (tmp_path / "pyproject.toml").write_text("")
    filler = "".join(f"X{i} = {i}\n" for i in range(FOREIGN_BUDGET_BYTES // 8))
    (tmp_path / "big.py").write_text(MODELS.replace("from layers import conv_block\n", "").replace(
        "self.body = conv_block(3, hidden)", "self.body = nn.Conv2d(3, hidden, 3, padding=1)") + filler)
    assert (tmp_path / "big.py").stat().st_size > FOREIGN_BUDGET_BYTES
    script = tmp_path / "train.py"
    script.write_text(TRAIN.replace("from models import Net", "from big import Net"))
    (failed,) = estimate_source(script.read_text(), str(script), EstimateOptions(device="cpu"))
    assert not failed.complete and "`big` not read, over the read budget" in failed.unknowns[0].text
    # the same model within the budget is read and complete
    (tmp_path / "small.py").write_text((tmp_path / "big.py").read_text()[: len(MODELS) + 200].rsplit("\n", 1)[0] + "\n")
    script.write_text(TRAIN.replace("from models import Net", "from small import Net"))
    (report,) = estimate_source(script.read_text(), str(script), EstimateOptions(device="cpu"))
    assert report.model == "Net" and report.complete


def test_the_interpreter_reads_other_modules_without_modelling_them(tmp_path: Path) -> None:
    script = write(tmp_path)
    project = Project()
    (report,) = estimate_source(TRAIN, str(script), EstimateOptions(device="cpu"), project=project.view())
    assert report.complete
    assert project._models == {}  # parsed (ParsedModule) but no semantic model built
    assert {key[0] for key in project._trees} == {str(tmp_path / "models.py"), str(tmp_path / "layers.py")}


WIDE_NET = """

class Net(nn.Module):
    def __init__(self, size="large"):
        super().__init__()
        self.fc = nn.Linear(8, WIDTHS[size])

    def forward(self, x):
        return self.fc(x)
"""

PRETRAINED_MODELS = """\
import torch.nn as nn


def _table():
    rows = {}
    for i in range(100_000):
        rows[f"net_{i}"] = {"url": f"https://example.com/{i}", "mean": (0.5, 0.5, 0.5)}
    return rows


PRETRAINED = _table()  # a table of pretrained weights the model never reads
WIDTHS = {"small": 16}
""" + WIDE_NET + """

WIDTHS["large"] = 48  # added after the class: it counts
"""

FILLED_MODELS = """\
import torch.nn as nn

WIDTHS = {}


def _fill():
    WIDTHS["large"] = 48


_fill()


def register(cls):
    REGISTRY.append(cls)
    return cls


REGISTRY = []

@register""" + WIDE_NET + """

class Other(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
"""


def estimate_wide_net(root: Path, models: str) -> list[tuple[str, int]] | None:
    """The layers of `Net()` from `models` (None: the estimate is incomplete)."""
    (root / "pyproject.toml").write_text("")
    (root / "models.py").write_text(models)
    script = root / "train.py"
    script.write_text(TRAIN.replace("Net(hidden=32)", "Net()").replace("torch.randn(8, 3, 32, 32)", "torch.randn(8, 8)"))
    (report,) = estimate_source(script.read_text(), str(script), EstimateOptions(device="cpu"))
    return [(layer.name, layer.params) for layer in report.layers] if report.complete else None


def statements_for(source: str, name: str) -> list[str]:
    """What `ParsedModule.statements_for` keeps of `source` for `name`: names of definitions, text of the rest."""
    import ast

    from torch_preflight.core.names import ImportMap
    from torch_preflight.core.project import ParsedModule

    tree = ast.parse(source)
    module = ParsedModule("models.py", tree, ImportMap.from_tree(tree), source)
    return [getattr(tree.body[i], "name", None) or ast.unparse(tree.body[i]) for i in module.statements_for([name])]


def test_an_imported_name_runs_only_what_it_needs_of_its_module(tmp_path: Path) -> None:
    # running models.py whole would spend the estimate's work budget on a table the model never reads
    assert estimate_wide_net(tmp_path, PRETRAINED_MODELS) == [("fc", 8 * 48 + 48)]


def test_statements_for_keeps_what_binds_changes_or_registers_a_name() -> None:
    # a class alone: what `Net.__init__` looks up (WIDTHS) is bound when it runs, and then both statements count
    assert statements_for(PRETRAINED_MODELS, "Net") == ["import torch.nn as nn", "Net"]
    assert statements_for(PRETRAINED_MODELS, "WIDTHS") == ["import torch.nn as nn", "WIDTHS = {'small': 16}", "WIDTHS['large'] = 48"]
    assert statements_for(PRETRAINED_MODELS, "PRETRAINED") == ["import torch.nn as nn", "_table", "PRETRAINED = _table()"]


def test_a_function_that_fills_a_name_runs_with_it(tmp_path: Path) -> None:
    # `_fill()` mentions nothing Net reads, but `_fill` changes WIDTHS, which Net reads
    assert estimate_wide_net(tmp_path, FILLED_MODELS) == [("fc", 8 * 48 + 48)]


def test_statements_for_follows_what_changes_a_name_and_what_a_decorator_registers() -> None:
    assert statements_for(FILLED_MODELS, "WIDTHS") == ["import torch.nn as nn", "WIDTHS = {}", "_fill", "_fill()"]
    # the registry, the function that appends to it, and the class it decorates
    assert statements_for(FILLED_MODELS, "REGISTRY") == ["import torch.nn as nn", "register", "REGISTRY = []", "Net"]


GLOBAL_MODELS = """\
import torch.nn as nn


def setup():
    global WIDTH
    WIDTH = 48


setup()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, WIDTH)
"""


def test_statements_for_follows_a_name_a_function_declares_global() -> None:
    assert statements_for(GLOBAL_MODELS, "WIDTH") == ["import torch.nn as nn", "setup", "setup()"]


def test_the_variables_read_from_the_text_are_the_walks() -> None:
    # the names a function declares `global` are found in the text; a walk of the syntax tree finds the same
    import ast

    from torch_preflight.core.names import ImportMap
    from torch_preflight.core.project import ParsedModule

    sources = [PRETRAINED_MODELS, FILLED_MODELS, GLOBAL_MODELS, MODELS, LAYERS]
    sources += [p.read_text() for p in sorted((Path(__file__).parent.parent / "examples").rglob("*.py"))]
    for source in sources:
        tree = ast.parse(source)
        module = ParsedModule("m.py", tree, ImportMap.from_tree(tree), source)
        module._index()
        assigned = {t.id for s in tree.body if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                    for t in (s.targets if isinstance(s, ast.Assign) else [s.target]) if isinstance(t, ast.Name)}
        declared = {n for s in tree.body for node in ast.walk(s) if isinstance(node, ast.Global) for n in node.names}
        assert module._variables == assigned | declared


def _changed_names(definition: ast.stmt, variables: set[str]) -> set[str]:
    """The reference for `_changes`: the variables (of `variables`) a def or class may change in place or declares
    `global`, from a walk of all of it."""
    from torch_preflight.core.project import _MUTATORS

    found: set[str] = set()
    declared: set[str] = set()
    local: set[str] = set()
    for node in ast.walk(definition):
        if isinstance(node, ast.Global):
            declared.update(node.names)
        elif isinstance(node, ast.arg):
            local.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            local.add(node.id)
        elif isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            base = node.value
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                found.add(base.id)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS
              and isinstance(node.func.value, ast.Name)):
            found.add(node.func.value.id)
    return ((found - local) & variables) | declared


def test_what_a_definition_changes_from_the_lines_naming_a_variable_is_the_whole_walk() -> None:
    # `_changes` walks only the nodes on lines that name the variable; `_changed_names` walks the whole definition
    import ast

    from torch_preflight.core.names import ImportMap
    from torch_preflight.core.project import ParsedModule, _changes

    root = Path(__file__).parent.parent
    paths = [*sorted((root / "examples").rglob("*.py")), *sorted((root / "core").glob("*.py")), *sorted((root / "estimator").glob("*.py"))]
    checked = 0
    for source in [PRETRAINED_MODELS, FILLED_MODELS, GLOBAL_MODELS, *(p.read_text() for p in paths)]:
        tree = ast.parse(source)
        module = ParsedModule("m.py", tree, ImportMap.from_tree(tree), source)
        module._index()
        # the module's variables, and every name something binds, deletes or changes in place (locals too)
        names = module._variables | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        names |= {n.value.id for n in ast.walk(tree) if isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.value, ast.Name)
                  and not isinstance(n.ctx, ast.Load)}
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                whole = _changed_names(stmt, names)
                for name in names:
                    assert _changes(stmt, name, module._lines_naming(name)) == (name in whole), (stmt.name, name)
                    checked += 1
    assert checked > 10_000


UNCALLED_MODELS = PRETRAINED_MODELS.replace(
    "    def forward(self, x):",
    '    def url(self):  # never called: the table it reads is never built\n        return PRETRAINED["net_0"]["url"]\n\n    def forward(self, x):',
)


def test_what_an_imported_class_looks_up_is_bound_when_its_methods_run(tmp_path: Path) -> None:
    # `Net.__init__` reads WIDTHS, `Net.url` the table: only what runs is bound, when it runs (a module run for
    # everything its classes' methods mention would build the table and spend the estimate's work budget on it)
    assert estimate_wide_net(tmp_path, UNCALLED_MODELS) == [("fc", 8 * 48 + 48)]


def test_statements_for_gives_only_what_has_not_run() -> None:
    import ast

    from torch_preflight.core.names import ImportMap
    from torch_preflight.core.project import ParsedModule

    tree = ast.parse(UNCALLED_MODELS)
    module = ParsedModule("models.py", tree, ImportMap.from_tree(tree), UNCALLED_MODELS)

    def kept(indices: list[int]) -> list[str]:
        return [getattr(tree.body[i], "name", None) or ast.unparse(tree.body[i]) for i in indices]

    headers = module.statements_for(["Net"])
    assert kept(headers) == ["import torch.nn as nn", "Net"]
    # asked later for what `__init__` looks up: only the statements not run yet, the imports not again
    assert kept(module.statements_for(["WIDTHS"], done=headers)) == ["WIDTHS = {'small': 16}", "WIDTHS['large'] = 48"]
    assert kept(module.statements_for(["Net"], done=headers)) == []
