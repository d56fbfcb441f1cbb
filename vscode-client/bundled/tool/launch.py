"""Runs torch-preflight for the VS Code extension: `python launch.py server`, or `estimate FILE ...`.

The extension ships the package and its pure-Python dependencies in ../libs (`make vsix` fills it
with `pip install --target`), so any Python >= 3.11 runs the server with nothing installed.
TORCH_PREFLIGHT_IMPORT_STRATEGY picks the copy: `useBundled` (the default) puts the bundle first on
sys.path, ahead of anything the interpreter has; `fromEnvironment` runs the interpreter's own
installation when it has one and falls back to the bundle when it has none.
"""

import importlib.util
import os
import sys

LIBS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "libs")


def use_libs(strategy: str) -> None:
    if strategy == "fromEnvironment" and importlib.util.find_spec("torch_preflight") is not None:
        return
    sys.path.insert(0, LIBS)


if __name__ == "__main__":
    if sys.version_info < (3, 11):
        sys.exit(f"torch-preflight needs Python >= 3.11; {sys.executable} is Python {sys.version.split()[0]}")
    use_libs(os.environ.get("TORCH_PREFLIGHT_IMPORT_STRATEGY", "useBundled"))
    from torch_preflight.main import main

    sys.argv[0] = "torch-preflight"
    sys.exit(main())
