"""Throughput of `check` against the peer, without the rest of `make bench-real` (issue 16).

Uses run.py's own corpus sets, commands and timing (`corpus_sets`, `ours_cmd`, `peer_cmd`,
`run_timed`, the byte-compiled snapshot), over the training scripts and the every-Nth-file sample
of torch, in one process so that every ratio comes from the same run:

- ours with a cold result cache (`--cache-dir` a fresh folder), then warm (the same command again);
- ours after one file changed: a copy of the training scripts' folder tree is checked warm, one
  helper module that other files import is edited, and the copy is checked again (only the edited
  file and the files that read it are analysed again);
- the peer (bench/.venv-peer, CLI only; it has no cache).

    python bench/realworld/throughput.py [--jobs 1] [--sample-lines 150000] [--out bench/out/throughput.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import run  # bench/realworld/run.py: the same commands and timing as `make bench-real`


def _changed_run(files: list[Path], jobs: int, tmp: Path) -> dict[str, float | str]:
    """Copy the files (keeping their tree under the corpus), check warm, edit one module that another
    file imports, check again: the wall time of the last run and what was edited."""
    root = tmp / "copy"
    copies = []
    for f in files:
        dest = root / f.relative_to(run.CORPUS)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest)
        copies.append(dest)
    # the module most often imported by name among the copies (`from utils import ...`)
    stems = {c.stem: c for c in copies if c.stem != "__init__"}
    counts = {stem: sum(f"import {stem}" in c.read_text(errors="replace") or f"from {stem} " in c.read_text(errors="replace")
                        for c in copies) for stem in stems}
    edited = stems[max(counts, key=lambda s: counts[s])] if counts else copies[0]
    cache = tmp / "cache-changed"
    for _ in range(2):
        run.run_timed(run.ours_cmd(copies, jobs, cache))
    time.sleep(2.1)  # past the cache's "racily clean" window, as an edit minutes later would be
    edited.write_text(edited.read_text(errors="replace") + "\n\ndef _throughput_edit():\n    return 1\n")
    wall, cpu, _ = run.run_timed(run.ours_cmd(copies, jobs, cache))
    return {"wall_s": wall, "cpu_s": cpu, "edited": str(edited.relative_to(root)), "importers": counts.get(edited.stem, 0)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--sample-lines", type=int, default=150_000, help="as run.py's: lines in the torch sample")
    parser.add_argument("--out", default=str(run.OUT / "throughput.json"))
    args = parser.parse_args()
    if not run.PEER.exists():
        raise SystemExit(f"{run.PEER} missing: `make bench/.venv-peer/bin/torch-preflight`")
    run.take_snapshot()
    sets = run.corpus_sets(args.sample_lines)
    rows = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for target in ("training", "torch-sample"):
            files = sets[target]
            lines = run.count_lines(files)
            cache = tmp / f"cache-{target}"
            cold = run.run_timed(run.ours_cmd(files, args.jobs, cache))[0]
            warm = run.run_timed(run.ours_cmd(files, args.jobs, cache))[0]
            peer = run.run_timed(run.peer_cmd(files, args.jobs))[0]
            row = {"files": target, "n": len(files), "lines": lines, "jobs": args.jobs, "ours_cold_s": round(cold, 2),
                   "ours_warm_s": round(warm, 2), "peer_s": round(peer, 2), "cold_ratio": round(peer / cold, 1),
                   "warm_ratio": round(peer / warm, 1)}
            if target == "training":
                changed = _changed_run(files, args.jobs, tmp)
                row |= {"ours_one_changed_s": round(float(changed["wall_s"]), 2), "one_changed_ratio": round(peer / float(changed["wall_s"]), 1),
                        "edited": changed["edited"], "edited_importers": changed["importers"]}
            rows.append(row)
            run.log(json.dumps(row))
    Path(args.out).write_text(json.dumps({"measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
