"""The language server (pygls): diagnostics, quick fixes, VRAM inlay hints and hover.

`main(argv)` is imported lazily so that `import torch_preflight.server` stays cheap.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from torch_preflight.server.cli import main as _main

    return _main(argv)


__all__ = ["main"]
