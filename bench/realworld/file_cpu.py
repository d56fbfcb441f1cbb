"""CPU seconds per file, checked one after another in one process (as `blind.py timing` does), and
optionally with the whole-program model unable to read any other module: what a file costs on its own.

    python bench/realworld/file_cpu.py [--no-project] FILE...

Each file is checked by `check --no-cache -j 1 --select ALL` through `torch_preflight.main.main`, after a
warm-up file, and timed with `time.process_time()`. `--no-project` makes `Project.resolve_function` and
`Project.resolve_class` answer None (nothing of the user's other modules is read).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-project", action="store_true", help="read no other module of the project")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    if args.no_project:
        from torch_preflight.core import project

        project.Project.resolve_function = lambda *a, **k: None  # type: ignore[method-assign]
        project.Project.resolve_class = lambda *a, **k: None  # type: ignore[method-assign]
    from torch_preflight.main import main as cli

    def one(path: str) -> float:
        start = time.process_time()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            cli(["check", "--no-cache", "-j", "1", "--select", "ALL", "--exit-zero", path])
        return time.process_time() - start

    with tempfile.TemporaryDirectory() as tmp:
        warm = Path(tmp) / "warm.py"
        warm.write_text("import torch\n\nmodel = torch.nn.Linear(2, 2)\n")
        one(str(warm))
    for path in args.files:
        print(f"{one(path):.2f} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
