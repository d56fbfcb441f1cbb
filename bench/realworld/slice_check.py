"""Check that a module's slice answers like the whole module (core/project.py `_slice`).

For every top-level function of a random sample of files, compare what the model of the slice around
it and the model of the whole module give: its expansion (same-file callees inlined, loop ids
renumbered), its whole-program summary, its return kind and its parameters. Prints each function
that differs and a count.

    python bench/realworld/slice_check.py --files LIST.txt [--sample 400] [--seed 1]
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import random
import sys
from pathlib import Path

from torch_preflight.core.parse import parse
from torch_preflight.core.program import return_kind
from torch_preflight.core.project import Project, _slice
from torch_preflight.core.semantic import Event, build
from torch_preflight.core.source import SourceText
from torch_preflight.core.training import TrainingModel


def normalised(events: tuple[Event, ...]) -> list[Event]:
    ids: dict[int, int] = {}
    return [dataclasses.replace(e, loops=tuple(ids.setdefault(i, len(ids)) for i in e.loops)) for e in events]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", required=True, help="a text file with one .py path per line")
    parser.add_argument("--sample", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    files = [Path(line.strip()) for line in Path(args.files).read_text().splitlines() if line.strip()]
    random.Random(args.seed).shuffle(files)
    checked = differ = 0
    for path in files[: args.sample]:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        source = SourceText(text)
        tree = parse(source).tree
        whole = build(tree, source, str(path))
        full = TrainingModel(whole)
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            name = node.name
            part = build(_slice(tree, name), source, str(path), imports=whole.imports)
            checked += 1
            same = (
                normalised(TrainingModel(part).expanded(name)) == normalised(full.expanded(name))
                and Project().view().summary(part, name) == Project().view().summary(whole, name)
                and return_kind(part, name) == return_kind(whole, name)
                and part.functions[name].params == whole.functions[name].params
            )
            if not same:
                differ += 1
                print(f"differs: {path} {name}")
    print(f"functions {checked}, differing {differ}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
