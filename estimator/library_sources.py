"""Models of installed libraries, read from their source files (never imported).

`torchvision.models.resnet18` in a script is looked up with jedi in the environment's import path: the `.py` file that
defines it (torchvision/models/resnet.py) is what the interpreter then reads, like one of the user's modules.
`timm.create_model("resnet50")` is the function of that name that timm's model files register (`@register_model`).
Hugging Face models come from the catalog (see MODEL_NAMESPACES).

Reading a library never imports it, in this process or another:
- jedi runs in this process with an environment whose accessor refuses to load a compiled module (jedi would import
  an extension module, `torch._C`, to introspect it; here it finds nothing there instead), so jedi starts no
  subprocess and imports nothing but modules built into the interpreter;
- only `.py` files are followed.

Which environment: `--python PATH` (an interpreter or a virtual environment, as pyright and jedi users name it), read
from its folder layout (`lib/python3.X/site-packages` and the folders its `.pth` files add), never run; by default
the import path of the Python the estimate runs in.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path
from typing import Any

from torch_preflight.core.jedi_env import holds_top_level, source_only_environment
from torch_preflight.estimator.values import Module

# a registered timm model: `@register_model` (possibly with other decorators) above `def NAME(`
_TIMM_REGISTERED = r"@register_model\s*(?:\(\s*\))?\s*\n(?:\s*@[^\n]*\n)*def {name}\("


def environment_paths(python: str | None) -> tuple[str, ...]:
    """The import path of an environment: `python` is an interpreter (`.venv/bin/python`) or an environment folder;
    its site-packages folders and what their `.pth` files add, read from the folder layout (the interpreter is not
    run). None: the import path of the running Python."""
    if python is None:
        return tuple(p for p in sys.path if p and Path(p).is_dir())
    where = Path(python).expanduser()
    if not where.exists():
        return ()
    root = where if where.is_dir() else where.parent.parent  # <env>/bin/python, <env>\Scripts\python.exe
    sites = [
        site
        for pattern in (
            "lib/python3*/site-packages",
            "lib64/python3*/site-packages",
            "lib/python3*/dist-packages",
            "local/lib/python3*/dist-packages",
        )
        for site in sorted(root.glob(pattern))
    ]  # venvs, Debian
    sites += [root / "Lib" / "site-packages"] if (root / "Lib" / "site-packages").is_dir() else []
    paths: list[str] = []
    for site in sites:
        paths.append(str(site))
        for pth in sorted(site.glob("*.pth")):
            paths.extend(_pth_folders(pth))
    return tuple(dict.fromkeys(paths))


def _pth_folders(pth: Path) -> list[str]:
    """The folders a `.pth` file adds (editable installs); its `import` lines are code and are not run."""
    try:
        lines = pth.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    found = []
    for line in lines:
        line = line.strip()
        if line and not line.startswith(("#", "import ", "import\t")):
            folder = (pth.parent / line).resolve()
            if folder.is_dir():
                found.append(str(folder))
    return found


@functools.cache
def find_definition(qualified: str, paths: tuple[str, ...]) -> tuple[str, str, str] | None:
    """(source file, module name, name in it) where `qualified` (`torchvision.models.resnet50`) is defined, followed
    through the library's re-exports by jedi; None when it is not defined in a `.py` file on `paths`."""
    module = qualified.rpartition(".")[0]
    if not module or not all(part.isidentifier() for part in qualified.split(".")):
        return None
    code = f"import {module}\n{qualified}"
    names = _goto(code, 2, len(qualified), paths)
    for found in names:
        path = found.module_path
        full = found.full_name or ""
        if path is not None and Path(path).suffix == ".py" and found.type in ("function", "class") and "." in full:
            owner, _, own_name = full.rpartition(".")
            return str(path), owner, own_name
    return None


@functools.cache
def timm_model(model_name: str, paths: tuple[str, ...]) -> tuple[str, str, str] | None:
    """(source file, module name, function) of the model `timm.create_model(model_name)` builds: the function of that
    name a file of timm.models registers with `@register_model`; None when timm is not on `paths` or has no such
    model (a pretrained tag, `resnet50.a1_in1k`, names the same function)."""
    name = model_name.split(".", 1)[0]
    if not name.isidentifier():
        return None
    package = _module_file("timm.models", paths)
    if package is None:
        return None
    pattern = re.compile(_TIMM_REGISTERED.format(name=re.escape(name)))
    for path in sorted(Path(package).parent.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if f"def {name}(" in text and pattern.search(text):
            return str(path), f"timm.models.{path.stem}", name
    return None


def _module_file(module: str, paths: tuple[str, ...]) -> str | None:
    code = f"import {module}"
    for found in _goto(code, 1, len(code), paths):
        if found.module_path is not None and Path(found.module_path).suffix == ".py":
            return str(found.module_path)
    return None


def _goto(code: str, line: int, column: int, paths: tuple[str, ...]) -> list[Any]:
    top = code.split()[1].split(".")[0]  # `import timm.models...`
    if not _on_paths(top, paths):
        return []  # jedi, searching `paths` only, would find nothing (about 8 ms a name to learn it)
    try:
        import jedi

        project = jedi.Project(paths[0] if paths else ".", sys_path=list(paths), smart_sys_path=False)
        return list(
            jedi.Script(code, project=project, environment=source_only_environment()).goto(line, column, follow_imports=True)
        )
    except Exception:  # jedi is best effort: a library not found is read from the catalog, or reported unknown
        return []


@functools.cache
def _on_paths(top: str, paths: tuple[str, ...]) -> bool:
    """Whether a top-level package or module `top` lies in one of the folders `paths` (memoised per name)."""
    return holds_top_level(top, paths)


# the parts of a library whose functions and classes are read from its source: its models and their building blocks
# (datasets, transforms, trainers and the like are the estimator's own). Hugging Face transformers is not among them:
# its package resolves names through a lazy module jedi does not follow (and spends ~40 s of CPU trying, per name,
# on transformers 5.24), so its models come from the catalog (estimator.architectures).
MODEL_NAMESPACES = ("torchvision.models.", "torchvision.ops.", "timm.")
# ...and the modules they may be defined in (a name of timm's top level is defined in timm.models or timm.layers)
DEFINED_IN = ("torchvision.models.", "torchvision.ops.", "timm.models.", "timm.layers.")
# names the estimator resolves itself: timm's factory names its model by a string (`timm_model`)
FACTORIES = {"timm.create_model", "timm.models.create_model"}


def locate(qualified: str, paths: tuple[str, ...] | None) -> tuple[str, str, str] | None:
    """(source file, module, name) of a library's model function or class when the environment `paths` has the
    library; None when there are no paths, the name is not a model's or is not found in a `.py` file."""
    if not paths or not qualified.startswith(MODEL_NAMESPACES) or qualified in FACTORIES:
        return None
    found = find_definition(qualified, paths)
    return found if found is not None and f"{found[1]}.".startswith(DEFINED_IN) else None


# create_model's own arguments: the rest go on to the model's function
_CREATE_MODEL_ONLY = (
    "model_name",
    "checkpoint_path",
    "cache_dir",
    "scriptable",
    "exportable",
    "no_jit",
    "pretrained_cfg_overlay",
)


def timm_create_model(it: Any, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None, line: int, col: int) -> Any:
    """`timm.create_model("resnet50", num_classes=10)`: the function timm registers under that name, read from the
    installed timm's source and called with the model's arguments; a model listed as unknown, by name, when timm
    is not installed or does not register it."""
    model_name = args[0] if args else kwargs.get("model_name")
    found = timm_model(model_name, it.library_paths) if isinstance(model_name, str) and it.library_paths else None
    if found is None:
        shown = repr(model_name) if isinstance(model_name, str) else "a name that is not known"
        mod = Module(f"timm.create_model({shown})", line, col, catalog=True)
        mod.file, mod.doubtful = it.foreign_file(), True
        mod.args["incomplete"] = f"timm.create_model({shown}): the model is not found in an installed timm (pass --python)"
        it.problem(mod.args["incomplete"], node)
        return mod
    it.assume(f"timm.create_model({model_name!r}) read from the installed library's source ({found[1]}.{found[2]})", None)
    rest = {k: v for k, v in kwargs.items() if k not in _CREATE_MODEL_ONLY}
    return it.call(it.library_definition(*found), list(args[1:]), rest, node)


def read(path: str) -> str:
    """The text of a library's source file ("" when it cannot be read)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
