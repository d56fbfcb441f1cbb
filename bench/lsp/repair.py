"""How the parse repair treats a half-typed line (issue 19): the broken keystrokes of the
real-files mode (`(` typed at a code line's end, `realfiles.broken_edits`, 10 per file with the
bench's seed), each applied to the top-level statement that holds it, which is what the
language server and `parse_statements` repair on their own.

    .venv/bin/python bench/lsp/repair.py [--max-lines 3500] [--worst 15]

Per edit: the `ast.parse` rounds the repair took (each compiles the whole statement), whether
the repaired statement's tree equals the statement before the keystroke (nothing the user did
not type was changed: the rest of the statement keeps its findings), and whether the repair
dropped a statement (neutralised a line with code on it). Prints the totals and the costliest
repairs. Without the corpus (bench/out/corpus) only the named real files are read.
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from realfiles import broken_edits, files, sample


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-lines", type=int, default=3500)
    parser.add_argument("--worst", type=int, default=15)
    args = parser.parse_args()

    from torch_preflight.core import parse as repair
    from torch_preflight.core.source import SourceText

    compile_ = repair._ast_parse
    rounds = [0]

    def counted(text: str) -> ast.Module:
        rounds[0] += 1
        return compile_(text)

    repair._ast_parse = counted  # type: ignore[assignment]
    same = dropped = 0
    per_edit: list[int] = []
    worst: list[tuple[float, int, str, int, int]] = []
    cpu = time.process_time()
    for path in files(300):
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = text.split("\n")
        if len(lines) > args.max_lines:
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        tops = [(min([s.lineno, *(d.lineno for d in getattr(s, "decorator_list", ()))]) - 1, s.end_lineno or s.lineno) for s in tree.body]
        for edit in sample(broken_edits(text), 10):
            a, b = next(((a, b) for a, b in tops if a <= edit.line < b), (-1, -1))
            if a < 0:
                continue
            chunk = lines[a:b]
            before = ast.dump(ast.parse("\n" * a + "\n".join(chunk) + "\n"))
            row = edit.line - a
            chunk[row] = chunk[row][: edit.col] + edit.text + chunk[row][edit.col :]
            rounds[0] = 0
            start = time.process_time()
            result = repair.parse(SourceText("\n" * a + "\n".join(chunk) + "\n"))
            spent = time.process_time() - start
            per_edit.append(rounds[0])
            same += ast.dump(result.tree) == before
            dropped += bool(result.repaired)
            worst.append((spent, rounds[0], str(path.relative_to(path.parents[2])), edit.line + 1, b - a))
    total = len(per_edit)
    if not total:
        print("no files: run bench/lsp/realfiles.py (and `make bench-real` for the corpus)")
        return 1
    histogram = Counter(min(n, 10) for n in per_edit)
    print(f"{total} broken keystrokes in {len({w[2] for w in worst})} files (up to {args.max_lines} lines), {time.process_time() - cpu:.0f} s CPU")
    print(f"repaired statement equals the one before the keystroke: {same} ({100 * same / total:.1f}%)")
    print(f"a statement dropped by the repair: {dropped} ({100 * dropped / total:.1f}%)")
    print(f"ast.parse rounds per repair: mean {sum(per_edit) / total:.2f}, max {max(per_edit)}; "
          + ", ".join(f"{'10+' if k == 10 else k}: {v}" for k, v in sorted(histogram.items())))
    print("costliest repairs:")
    for spent, n, name, line, size in sorted(worst, reverse=True)[: args.worst]:
        print(f"  {spent * 1e3:7.1f} ms  {n:2} rounds  {name}:{line} (statement of {size} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
