"""Throughput of `check` against the peer, without the rest of `make bench-real` (issue 16).

Uses run.py's own corpus sets, commands and timing (`corpus_sets`, `ours_cmd`, `peer_cmd`,
`run_timed`, the byte-compiled snapshot), over the training scripts and the every-Nth-file sample
of torch, in one process so that every ratio comes from the same run:

- ours with a cold result cache (`--cache-dir` a fresh folder), then warm (the same command again);
- ours after one file changed: a copy of the corpus parts that hold the files is made, the files
  are checked warm, the module that most of their results rest on (by the dependencies the result cache
  recorded) is edited, and the copy is checked again (only it and the files that read it are
  analysed again, over the summaries stored beside the cache);
- the peer (bench/.venv-peer, CLI only; it has no cache).

    python bench/realworld/throughput.py [--jobs 1] [--sample-lines 20000] [--out bench/out/throughput.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import run  # bench/realworld/run.py: the same commands and timing as `make bench-real`


def _changed_run(files: list[Path], jobs: int, tmp: Path) -> dict[str, float | str | int]:
    """Copy the corpus parts that hold the files (a package, a repository: their helper modules
    come along), check the files twice, edit the module that most of their results rest on (the
    dependencies the result cache recorded), check them again: the time of the last run and what
    was edited."""
    root = tmp / "copy"
    for part in sorted({f.relative_to(run.CORPUS).parts[:2] for f in files}):
        shutil.copytree(run.CORPUS.joinpath(*part), root.joinpath(*part), ignore=shutil.ignore_patterns("__pycache__"))
    copies = [root / f.relative_to(run.CORPUS) for f in files]
    cache = tmp / "cache-changed"
    for _ in range(2):
        run.run_timed(run.ours_cmd(copies, jobs, cache))
    readers: Counter[str] = Counter()
    for file in cache.rglob("*.json"):
        if not file.name.endswith(".summaries.json"):
            for entry in json.loads(file.read_text()).get("files", {}).values():
                readers.update({dep[0] for dep in entry[3]})
    edited = Path(readers.most_common(1)[0][0]) if readers else copies[0]
    time.sleep(2.1)  # past the cache's "racily clean" window, as an edit minutes later would be
    edited.write_text(edited.read_text(errors="replace") + "\n\ndef _throughput_edit():\n    return 1\n")
    wall, cpu, _ = run.run_timed(run.ours_cmd(copies, jobs, cache))
    return {"wall_s": wall, "cpu_s": cpu, "edited": str(edited.relative_to(root)), "readers": readers.get(str(edited), 0)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--sample-lines", type=int, default=20_000, help="as run.py's: about this many torch lines")
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
            cold, cold_cpu, _ = run.run_timed(run.ours_cmd(files, args.jobs, cache))
            warm, warm_cpu, _ = run.run_timed(run.ours_cmd(files, args.jobs, cache))
            peer, peer_cpu, _ = run.run_timed(run.peer_cmd(files, args.jobs))
            row = {"files": target, "n": len(files), "lines": lines, "jobs": args.jobs,
                   "wall_s": {"ours_cold": round(cold, 2), "ours_warm": round(warm, 2), "peer": round(peer, 2)},
                   "cpu_s": {"ours_cold": round(cold_cpu, 2), "ours_warm": round(warm_cpu, 2), "peer": round(peer_cpu, 2)},
                   "ratio_wall": {"cold": round(peer / cold, 1), "warm": round(peer / warm, 1)},
                   "ratio_cpu": {"cold": round(peer_cpu / cold_cpu, 1), "warm": round(peer_cpu / warm_cpu, 1)}}
            if target == "training":
                changed = _changed_run(files, args.jobs, tmp)
                row["one_changed"] = {"wall_s": round(float(changed["wall_s"]), 2), "cpu_s": round(float(changed["cpu_s"]), 2),
                                      "ratio_wall": round(peer / float(changed["wall_s"]), 1),
                                      "ratio_cpu": round(peer_cpu / float(changed["cpu_s"]), 1),
                                      "edited": changed["edited"], "files_reading_it": changed["readers"]}
            rows.append(row)
            run.log(json.dumps(row))
    Path(args.out).write_text(json.dumps({"measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
