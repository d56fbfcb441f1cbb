"""A jedi environment that reads source files only: it never imports a module.

jedi introspects a compiled extension module by importing it, in this process or in the
subprocess an ordinary environment starts (about 75 ms to start, then a round trip per question).
The project's import resolution (core/project.py) and the estimator's library reader
(estimator/library_sources.py) want `.py` files only, so they ask jedi through this environment.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any


@functools.cache
def source_only_environment() -> Any:
    """A jedi environment that runs in this process and never loads a compiled module: jedi's accessor would import
    it (here, or in the subprocess an ordinary environment starts); this one answers that there is none, except
    for the modules built into the interpreter (`builtins`, `sys`), which are loaded already."""
    from jedi.api.environment import InterpreterEnvironment
    from jedi.inference.compiled.subprocess import InferenceStateSameProcess

    class SourceOnlyProcess(InferenceStateSameProcess):  # type: ignore[misc]
        def __getattr__(self, name: str) -> Any:
            function = super().__getattr__(name)
            if name != "load_module":
                return function

            def load_builtin(*args: Any, dotted_name: str = "", **kwargs: Any) -> Any:
                return function(*args, dotted_name=dotted_name, **kwargs) if dotted_name in sys.builtin_module_names else None

            return load_builtin

    class SourceOnlyEnvironment(InterpreterEnvironment):  # type: ignore[misc]
        def get_inference_state_subprocess(self, inference_state: Any) -> Any:
            return SourceOnlyProcess(inference_state)

    return SourceOnlyEnvironment()


def holds_top_level(top: str, folders: Iterable[str | Path]) -> bool:
    """Whether a top-level package or module `top` lies in one of `folders`: what jedi could find
    there by source (asking jedi itself takes 8-50 ms to learn that it is not there)."""
    return any((Path(f) / top).is_dir() or (Path(f) / f"{top}.py").is_file() for f in folders)
