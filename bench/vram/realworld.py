"""The estimator on real code: unmodified scripts from public repositories (bench/vram/realworld/manifest.json).

For each case it materialises the repository's files at the pinned commit from the fetched mirror
(/work/.mirror/OWNER+NAME/repo, made by `fetch github:OWNER/NAME`; MIRROR= overrides) into bench/out/realworld/CASE,
writes the synthetic data the case's setup names, then
- measures the CPU peak of the script's first two optimizer steps with the torch venv (`--torch`, default .venv), or
  of the whole run for a case marked `whole` (a script that evaluates under no_grad after its epoch, at a larger batch),
  or of its first `steps` optimizer steps (a GAN steps two optimizers an iteration: 4 is its second iteration):
  torch_preflight.measure.runtime.measure_script, the profiler's memory events replayed into a running peak;
- estimates it with `torch-preflight estimate SCRIPT --device cpu [--set NAME=VALUE ...] -- ARGV` (static; never
  imports torch): a case's `set` are the values a user supplies for what the script computes from its data at run time
  (a vocabulary size), typed as a user would; each such case is also estimated without them,
and prints one row per case (with the values it supplies) and the summary the issue asks for, with and without the
supplied values: the share of complete estimates, the median and worst |error| of the complete ones, and every
complete estimate more than 10% low. A measurement that failed (an exception before any optimizer step) is no truth.

Measurements are cached in bench/out/realworld/measured.json (`--remeasure` refreshes them). makemore's script
imports torch.utils.tensorboard: `pip install --target bench/out/realworld-site tensorboard` first; Pytorch-UNet's imports
wandb and tqdm: `pip install --target bench/out/realworld-site-extra wandb tqdm`; torchvision is read from its sources in
bench/out/corpus/packages (bench/realworld/corpus.py puts them there, for `make bench-real`). Only the measuring process
sees these.

Usage: python bench/vram/realworld.py [--torch PYTHON] [--only NAME] [--markdown] [--remeasure] [--estimate-only]
       [--as-they-stand]  (every case without its `set` values, with each estimate's wall time)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import string
import subprocess
import sys
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = ROOT / "bench" / "out" / "realworld"
MANIFEST = HERE / "realworld" / "manifest.json"
MIRROR = Path(os.environ.get("MIRROR", "/work/.mirror"))
sys.path.insert(0, str(ROOT))

SITE = ROOT / "bench" / "out" / "realworld-site"  # what the scripts import beyond torch: `pip install --target ... tensorboard`
# wandb and tqdm (Pytorch-UNet): `pip install --target bench/out/realworld-site-extra wandb tqdm` (kept apart: its protobuf)
EXTRA_SITE = ROOT / "bench" / "out" / "realworld-site-extra"
# torchvision's published sources (bench/out/corpus/packages, as bench/vram/library_models.py); its compiled extension is
# absent, and the one module that needs it is stubbed
TORCHVISION = ROOT / "bench" / "out" / "corpus" / "packages" / "torchvision"
TV_SITE = OUT / "torchvision-site"
MEASURE = """\
import json, os, sys, types
sys.path.insert(0, {root!r})
sys.path.extend([{site!r}, {tv_site!r}, {extra_site!r}])
sys.modules['torchvision._meta_registrations'] = types.ModuleType('torchvision._meta_registrations')
if {no_checksum!r}:  # synthetic CIFAR files in torchvision's format cannot have the published md5 sums
    import torchvision.datasets.cifar
    torchvision.datasets.cifar.check_integrity = lambda *args, **kwargs: True
from torch_preflight.measure.runtime import measure_script
os.chdir({cwd!r})
m = measure_script({script!r}, {argv!r}, steps={steps!r}, device="cpu", quiet=True)
print("@@" + json.dumps({{"peak_bytes": m.peak_bytes, "steps": m.steps_completed, "error": m.error}}))
"""


def materialise(case: dict, commit: str) -> Path:
    """The case's folder of the repository at `commit`, file by file (a mirror may lack its largest files, such as
    datasets: the case's setup writes synthetic ones in their place)."""
    dest = OUT / case["name"]
    if not (dest / ".materialised").exists():
        git_dir = MIRROR / case["repo"].replace("/", "+") / "repo"
        if not git_dir.exists():
            raise SystemExit(f"{case['repo']} is not fetched: `fetch github:{case['repo']}` (or set MIRROR)")
        git = ["git", "--git-dir", str(git_dir)]
        names = subprocess.run([*git, "ls-tree", "-r", "--name-only", commit, "--", case["dir"] or "."], check=True,
                               capture_output=True, text=True).stdout.split("\n")
        for name in filter(None, names):
            blob = subprocess.run([*git, "cat-file", "blob", f"{commit}:{name}"], capture_output=True)
            if blob.returncode == 0:
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                (dest / name).write_bytes(blob.stdout)
        (dest / ".materialised").write_text(commit)
    work = dest / case["dir"] if case["dir"] else dest
    for step in case["setup"]:
        setup(step, work)
    return work


def setup(step: str, work: Path) -> None:
    """Synthetic data in the layout the script reads: its content does not change the memory of a step."""
    kind, *args = step.split()
    rng = random.Random(0)
    if kind == "tokens":  # nanoGPT's uint16 token files
        folder, vocab = work / args[0], int(args[1])
        folder.mkdir(parents=True, exist_ok=True)
        for name, n in (("train.bin", 200_000), ("val.bin", 20_000)):
            if not (folder / name).exists():
                (folder / name).write_bytes(b"".join(rng.randrange(vocab).to_bytes(2, "little") for _ in range(n)))
    elif kind == "text":  # a character-level corpus
        path, n = work / args[0], int(args[1])
        if not path.exists():
            letters = string.ascii_letters + " ,.!?\n"
            path.write_text("".join(rng.choice(letters) for _ in range(n)))
    elif kind == "words":  # a word-level corpus (wikitext's layout): train/valid/test.txt over a vocabulary of `args[1]`
        folder, vocab = work / args[0], int(args[1])
        folder.mkdir(parents=True, exist_ok=True)
        for name, lines in (("train.txt", 4000), ("valid.txt", 400), ("test.txt", 400)):
            if not (folder / name).exists():
                text = "\n".join(" ".join(f"w{rng.randrange(vocab)}" for _ in range(20)) for _ in range(lines))
                (folder / name).write_text(text + "\n")
    elif kind == "mnist":  # torchvision's MNIST files (ROOT/MNIST/raw, idx format): `args[1]` training, `args[2]` test images
        raw = work / args[0] / "MNIST" / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        for split, n in (("train", int(args[1])), ("t10k", int(args[2]))):
            images, labels = raw / f"{split}-images-idx3-ubyte", raw / f"{split}-labels-idx1-ubyte"
            if not images.exists():
                images.write_bytes(bytes([0, 0, 8, 3]) + b"".join(v.to_bytes(4, "big") for v in (n, 28, 28))
                                   + bytes(rng.randrange(256) for _ in range(n * 28 * 28)))
                labels.write_bytes(bytes([0, 0, 8, 1]) + n.to_bytes(4, "big") + bytes(rng.randrange(10) for _ in range(n)))
    elif kind == "cifar10":  # torchvision's CIFAR-10 python batches (ROOT/cifar-10-batches-py), `args[1]` images each
        generate(CIFAR10.format(root=str(work / args[0]), n=int(args[1])), work)
    elif kind == "images":  # FOLDER/imgs/*.jpg and FOLDER/masks/*_mask.gif: `args[1]` RGB images of W x H, binary masks
        generate(IMAGES.format(root=str(work / args[0]), n=int(args[1]), w=int(args[2]), h=int(args[3])), work)
    elif kind == "run":  # the repository's own data generator (it needs torch)
        if not (work / ".setup-done").exists() and DATA:
            subprocess.run([DATA, args[0]], cwd=work, check=True, capture_output=True, timeout=600)
            (work / ".setup-done").write_text("")
    else:
        raise SystemExit(f"unknown setup step {step!r}")


CIFAR10 = """\
import os, pickle, numpy as np
root = os.path.join({root!r}, 'cifar-10-batches-py')
os.makedirs(root, exist_ok=True)
rng = np.random.default_rng(0)
for name in ['data_batch_%d' % i for i in range(1, 6)] + ['test_batch']:
    with open(os.path.join(root, name), 'wb') as f:
        pickle.dump({{'data': rng.integers(0, 256, ({n}, 3072), dtype=np.uint8), 'labels': [int(v) for v in rng.integers(0, 10, {n})]}}, f)
with open(os.path.join(root, 'batches.meta'), 'wb') as f:
    pickle.dump({{'label_names': ['plane', 'car', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck']}}, f)
"""
IMAGES = """\
import os, numpy as np
from PIL import Image
rng = np.random.default_rng(0)
os.makedirs(os.path.join({root!r}, 'imgs'), exist_ok=True)
os.makedirs(os.path.join({root!r}, 'masks'), exist_ok=True)
for i in range({n}):
    Image.fromarray(rng.integers(0, 256, ({h}, {w}, 3), dtype=np.uint8)).save(os.path.join({root!r}, 'imgs', 'c%03d.jpg' % i))
    Image.fromarray((rng.integers(0, 2, ({h}, {w})) * 255).astype(np.uint8)).save(os.path.join({root!r}, 'masks', 'c%03d_mask.gif' % i))
"""


def generate(code: str, work: Path) -> None:
    """Run a data generator that needs numpy/PIL with the measuring interpreter (`--estimate-only` too: the estimate
    reads the images' headers and the files torch.save wrote)."""
    done = work / f".generated-{zlib.crc32(code.encode())}"
    if DATA and not done.exists():
        subprocess.run([DATA, "-c", f"import sys; sys.path.append({str(SITE)!r})\n" + code], cwd=work, check=True, timeout=600)
        done.write_text("")


def measure(case: dict, work: Path) -> dict:
    TV_SITE.mkdir(parents=True, exist_ok=True)
    if not (TV_SITE / "torchvision").exists() and TORCHVISION.is_dir():
        (TV_SITE / "torchvision").symlink_to(TORCHVISION)
    steps = 10**9 if case.get("whole") else case.get("steps", 2)
    cifar = any(s.startswith("cifar") for s in case["setup"])
    code = MEASURE.format(root=str(ROOT), site=str(SITE), tv_site=str(TV_SITE), extra_site=str(EXTRA_SITE), cwd=str(work),
                          script=case["script"], argv=case["argv"], steps=steps, no_checksum=cifar)
    # scripts written before torch 2.6 load their own pickled data with torch.load's old default (weights_only=False);
    # wandb (Pytorch-UNet) runs offline and records nothing
    env = {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "WANDB_MODE": "disabled"}
    master, slave = os.openpty()  # a terminal, as a user runs it (pytorch-cifar's utils read `stty size` on import)
    try:
        proc = subprocess.run([TORCH, "-c", code], stdin=slave, capture_output=True, text=True, timeout=3600, cwd=work, env=env)
    except subprocess.TimeoutExpired:
        return {"peak_bytes": None, "error": "the measurement took more than an hour"}
    finally:
        os.close(master)
        os.close(slave)
    for line in proc.stdout.splitlines():
        if line.startswith("@@"):
            return json.loads(line[2:])
    return {"peak_bytes": None, "error": (proc.stderr or proc.stdout)[-400:]}


def estimate(case: dict, work: Path, supplied: bool = True) -> tuple[int | None, bool, int]:
    """The estimate as `torch-preflight estimate SCRIPT --device cpu [--set NAME=VALUE ...] -- ARGV` gives it; the
    case's `set` values (what a user supplies for values the script computes from its data) only when `supplied`."""
    from torch_preflight.estimator import EstimateOptions, estimate_source
    from torch_preflight.estimator.configs import parse_supplied

    path = work / case["script"]
    cwd = os.getcwd()
    os.chdir(work)  # the script's relative paths (config files, data) are read from where it runs
    values = tuple(parse_supplied(v) for v in case.get("set", [])) if supplied else ()
    try:
        reports = estimate_source(path.read_text(encoding="utf-8"), str(path),
                                  EstimateOptions(device="cpu", argv=tuple(case["argv"]), values=values))
    finally:
        os.chdir(cwd)
    if not reports:
        return None, False, 0
    return reports[0].peak_bytes, reports[0].complete, len(reports[0].unknowns)


def main() -> int:
    global TORCH, DATA
    parser = argparse.ArgumentParser()
    parser.add_argument("--torch", default=str(ROOT / ".venv" / "bin" / "python"))
    parser.add_argument("--only")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--remeasure", action="store_true")
    parser.add_argument("--estimate-only", action="store_true", help="estimate every case; measure none (cached truth is shown)")
    parser.add_argument("--as-they-stand", action="store_true",
                        help="the rows without the values users supply (`set`), with each estimate's wall time")
    args = parser.parse_args()
    TORCH = "" if args.estimate_only else args.torch
    DATA = args.torch
    manifest = json.loads(MANIFEST.read_text())
    OUT.mkdir(parents=True, exist_ok=True)
    cache_path = OUT / "measured.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() and not args.remeasure else {}
    rows: list[tuple] = []
    bare: list[tuple] = []  # without the values the user supplies
    for case in manifest["cases"]:
        if args.only and args.only != case["name"]:
            continue
        work = materialise(case, manifest["repos"][case["repo"]])
        if not args.estimate_only and (case["name"] not in cache or cache[case["name"]].get("peak_bytes") is None
                                       or cache[case["name"]].get("error")):
            cache[case["name"]] = measure(case, work)
            cache_path.write_text(json.dumps(cache, indent=1))
        m = cache.get(case["name"], {})
        truth = m.get("peak_bytes") if not m.get("error") and m.get("steps", 1) >= 1 else None  # a failed run measures nothing
        started = time.perf_counter()
        est, complete, unknown = estimate(case, work, supplied=not args.as_they_stand)
        wall = time.perf_counter() - started
        err = (est - truth) / truth if truth and est is not None else None
        rows.append((case, truth, est, complete, unknown, err, wall))
        if case.get("set") and not args.as_they_stand:  # the same estimate without the supplied values: what a new user sees first
            est0, complete0, unknown0 = estimate(case, work, supplied=False)
            err0 = (est0 - truth) / truth if truth and est0 is not None else None
            bare.append((case, truth, est0, complete0, unknown0, err0, None))
        else:
            bare.append(rows[-1])
    mib = lambda n: f"{n / 2**20:.2f}" if n is not None else "-"  # noqa: E731
    if args.markdown:
        print("| case | script | user-supplied values (`--set`) | measured CPU (MiB) | estimate (MiB) | complete | error | without `--set` |")
        print("|---|---|---|---:|---:|---|---:|---|")
    for (case, truth, est, complete, unknown, err, wall), (_, _, est0, complete0, unknown0, err0, _) in zip(rows, bare, strict=True):
        where = f"{case['repo']}/{case['dir'] + '/' if case['dir'] else ''}{case['script']}"
        e = f"{err:+.1%}" if err is not None else "-"
        status = "yes" if complete else f"no ({unknown} unknown; at least)"
        supplied = " ".join(f"`{v}`" for v in case.get("set", [])) or "-"
        # the same case as it stands (without the supplied values): what a new user sees first
        stands = (f"{mib(est0)} MiB, {'complete' if complete0 else f'at least ({unknown0} unknown)'}, "
                  f"{f'{err0:+.1%}' if err0 is not None else '-'}") if case.get("set") else "(the same)"
        if args.markdown:
            print(f"| {case['name']} | {where} `{shlex.join(case['argv'])}` | {supplied} | {mib(truth)} | {mib(est)} | {status} | {e} "
                  f"| {stands} |")
        else:
            supplying = f"set: {supplied}; without: {stands}" if case.get("set") and not args.as_they_stand else ""
            print(f"{case['name']:28} {mib(truth):>10} {mib(est):>10} {status:24} {e:>8} {wall:6.2f}s  {supplying}")
    print()
    if args.as_they_stand:
        summary(rows, "as they stand (no values supplied)")
        return 0
    summary(rows, "with the values users supply (`--set`)")
    summary(bare, "without them")
    return 0


def summary(rows: list[tuple], label: str) -> None:
    measured = [r for r in rows if r[1] is not None]
    done = [r for r in measured if r[3] and r[5] is not None]
    errors = [abs(r[5]) for r in done]
    low = [r[0]["name"] for r in done if r[5] < -0.10]
    print(f"{label}: cases measured: {len(measured)} of {len(rows)}; complete: {len(done)} ({len(done) / max(len(measured), 1):.0%})")
    if errors:
        print(f"  complete estimates: median |error| {statistics.median(errors):.1%}, worst {max(errors):.1%}; "
              f"complete and more than 10% low: {len(low)} {low if low else ''}")


TORCH = sys.executable  # the measuring interpreter ("" with --estimate-only)
DATA = sys.executable  # the interpreter that writes the cases' data (numpy, PIL, torch)

if __name__ == "__main__":
    sys.exit(main())
