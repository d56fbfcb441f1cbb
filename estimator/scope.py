"""The interpreter's frames and limits: a scope of names, the exceptions that carry return/break/continue, the
statement budget, and the libraries whose names are never looked for among the user's modules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch_preflight.core.names import ImportMap
from torch_preflight.estimator.values import Module

MAX_STEPS = 200_000  # statements executed before giving up (keeps the editor fast); the estimate passes its own
FILE_LINES = 2_000  # `for line in f` reads a file of the project up to this many lines
# a longer one (a corpus read word by word) is read when the loop runs compiled (estimator.interp_fast), up to this many
# bytes in all (a 3 MB corpus read twice, as a vocabulary is built and then encoded), and the work budget grows by
# STEPS_PER_BYTE for each byte: a pass over wikitext-2's word-level files takes ~0.7 units of work per byte, about
# 1.2 us each (the same per unit in both of the interpreter's paths), so a corpus at the limit takes ~7 s at most
CORPUS_BYTES = 6 * 2**20
STEPS_PER_BYTE = 1
LONG_ITERABLE = 100_000  # a comprehension over more items gives that many unread values (a corpus encoded char by char)
# imported names from these packages are never looked for among the user's own modules
LIBRARIES = {
    "torch", "torchvision", "torchaudio", "torchtext", "numpy", "math", "os", "sys", "random", "dataclasses", "typing",
    "collections", "functools", "itertools", "argparse", "json", "time", "pathlib", "re", "copy", "logging", "warnings",
    "transformers", "lightning", "pytorch_lightning", "timm", "einops", "tqdm", "wandb", "bitsandbytes", "accelerate",
    "deepspeed", "datasets", "PIL", "scipy", "sklearn", "pandas", "hydra", "omegaconf", "yaml", "tensorboard", "pickle",
}


class Budget(Exception):
    """Too much work: the interpreter stops and the report is marked incomplete."""


class Cancelled(BaseException):
    """The caller no longer wants the estimate (`EstimateOptions.stale`): past every handler of the interpreter's."""


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class Scope:
    def __init__(self, parent: Scope | None = None, imports: ImportMap | None = None, path: str = "") -> None:
        self.vars: dict[str, Any] = {}
        self.parent = parent
        # the module this scope's code belongs to: its imports and its file (the estimated file, or
        # one of the user's other modules that a model class was read from)
        self.imports: ImportMap | None = imports if imports is not None or parent is None else parent.imports
        self.path: str = path or (parent.path if parent is not None else "")
        # another module's scope whose top level ran in part: the module, its name, and the names asked for since
        self.lazy: tuple[Any, str, set[str]] | None = None

    def lookup(self, name: str) -> Any:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.vars:
                return scope.vars[name]
            scope = scope.parent
        raise KeyError(name)


@dataclass
class Instance:
    module: Module
    line: int
    col: int
    name: str  # the variable it was bound to, if any
