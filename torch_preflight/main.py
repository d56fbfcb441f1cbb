"""The `torch-preflight` entry point: `server` goes to the language server, the rest to the CLI.

This module sits above both the server and the application layer (import-linter's layers
contract), so neither has to import the other. Both are imported lazily: `check` never
pays for pygls, and `server` never pays for the reporters.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

SERVER_MODULES = ("torch_preflight.server.cli", "torch_preflight.server.__main__")


def _server_main() -> Callable[[list[str]], int | None] | None:
    for name in SERVER_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and name.startswith(exc.name):
                continue  # that module does not exist; a missing dependency below it is a real error
            raise
        entry = getattr(module, "main", None)
        if callable(entry):
            return entry  # type: ignore[no-any-return]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "server":
        try:
            entry = _server_main()
        except ModuleNotFoundError as exc:
            print(f"torch-preflight: error: the language server needs {exc.name!r}, which is not installed", file=sys.stderr)
            return 2
        if entry is None:
            print("torch-preflight: error: the language server is not available in this install (no torch_preflight.server main)", file=sys.stderr)
            return 2
        return int(entry(args[1:]) or 0)
    from torch_preflight.cli import main as cli_main

    return cli_main(args)


__all__ = ["main"]
