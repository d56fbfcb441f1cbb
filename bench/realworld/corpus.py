"""Assemble the real-world corpus for `make bench-real`, offline-repeatably, into bench/out/corpus.

Sources:
- torch's own sources, read from the torch venv at bench/.venv-torch (created with
  `pip install torch==2.13.0`, the CPU build this machine has on disk); created here the
  same way when it is missing;
- pinned PyPI packages that ship real training loops and models, installed with `--no-deps`
  into bench/.venv-corpus (we only read their source, so no multi-GB CUDA torch is pulled);
- any directories or git mirrors named on the command line (pytorch/examples, nanoGPT,
  minGPT, ...). A git directory is materialised with `git archive <commit> | tar -x` under
  bench/out/repos/<name>; a plain directory is copied.

Only `.py` files are copied. bench/out/corpus.json records the package versions, the repo
commits and the file/line counts of each part. Nothing here is committed (bench/out/ is
ignored). Run again with no arguments to rebuild from what is already recorded.

Usage: python bench/realworld/corpus.py [--name NAME=]PATH_OR_GITDIR ...
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
OUT = BENCH / "out"
CORPUS = OUT / "corpus"
REPOS = OUT / "repos"
TORCH_VENV = BENCH / ".venv-torch"
PKG_VENV = BENCH / ".venv-corpus"
TORCH_VERSION = "2.13.0"

# (distribution==version, import folder(s) to copy, optional sub-folders to keep)
PACKAGES: list[tuple[str, list[str]]] = [
    ("accelerate==1.15.0", ["accelerate"]),
    ("d2l==1.0.3", ["d2l"]),
    ("pytorch-lightning==2.6.6", ["pytorch_lightning", "lightning_fabric"]),
    ("skorch==1.4.0", ["skorch"]),
    ("pytorch-ignite==0.5.5", ["ignite"]),
    ("timm==1.0.31", ["timm"]),
    ("torchvision==0.29.1", ["torchvision"]),
    # Ray is large; only its Train and Tune libraries (with their examples) are read.
    ("ray==2.60.0", ["ray/train", "ray/tune"]),
]


def log(msg: str) -> None:
    print(f"[corpus] {msg}", file=sys.stderr, flush=True)


def site_packages(env: Path) -> Path:
    found = sorted(env.glob("lib/python3*/site-packages"))
    if not found:
        raise SystemExit(f"no site-packages under {env}")
    return found[0]


def ensure_venv(env: Path) -> Path:
    if not (env / "bin" / "python").exists():
        log(f"creating {env}")
        venv.EnvBuilder(with_pip=True).create(env)
    return env / "bin" / "python"


def installed_version(env: Path, dist: str) -> str | None:
    norm = dist.lower().replace("-", "_")
    for info in site_packages(env).glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        if name.lower().replace("-", "_") == norm:
            return version
    return None


def ensure_torch() -> Path:
    py = ensure_venv(TORCH_VENV)
    if installed_version(TORCH_VENV, "torch") is None:
        log(f"installing torch=={TORCH_VERSION} into {TORCH_VENV}")
        subprocess.run([str(py), "-m", "pip", "install", "-q", f"torch=={TORCH_VERSION}"], check=True)
    return site_packages(TORCH_VENV) / "torch"


def ensure_packages() -> Path:
    py = ensure_venv(PKG_VENV)
    missing = [spec for spec, _ in PACKAGES if installed_version(PKG_VENV, spec.split("==")[0]) != spec.split("==")[1]]
    if missing:
        log(f"installing (--no-deps) {' '.join(missing)}")
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", *missing], check=True)
    return site_packages(PKG_VENV)


def copy_py(src: Path, dst: Path) -> tuple[int, int]:
    """Copy every .py file under src to dst; return (files, lines)."""
    files = lines = 0
    for path in sorted(src.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = path.read_bytes()
        target.write_bytes(data)
        files += 1
        lines += data.count(b"\n")
    return files, lines


def is_git_dir(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


def materialise(spec: str) -> dict[str, str]:
    """A command-line source -> {name, path, commit, origin}; materialises git mirrors."""
    name, sep, raw = spec.partition("=")
    if not sep:
        raw, name = spec, ""
    path = Path(raw).resolve()
    if not path.exists():
        raise SystemExit(f"no such directory: {raw}")
    git_dir = path if is_git_dir(path) else (path / ".git" if (path / ".git").exists() else None)
    commit = "unknown"
    origin = str(path)
    if git_dir is not None:
        commit = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        url = subprocess.run(["git", "--git-dir", str(git_dir), "config", "--get", "remote.origin.url"],
                             capture_output=True, text=True).stdout.strip()
        origin = url or origin
    if "+" in (path.parent.name if path.name in ("repo", ".git") else path.name):
        # a fetched mirror folder is named owner+name: record the repository, not the local path
        origin = "github:" + (path.parent.name if path.name in ("repo", ".git") else path.name).replace("+", "/", 1)
    if not name:
        # /x/pytorch+examples/repo -> examples; /x/nanoGPT -> nanoGPT
        base = path.parent.name if path.name in ("repo", ".git") else path.name
        name = base.split("+")[-1]
    dest = REPOS / name
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if git_dir is not None and is_git_dir(path):
        # Only Python files: a fetched mirror may lack its largest blobs (data files).
        archive = subprocess.Popen(["git", "--git-dir", str(git_dir), "archive", commit, "--", "*.py"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise SystemExit(f"git archive failed for {path}")
    else:
        copy_py(path, dest)
    return {"name": name, "path": str(dest.relative_to(OUT)), "commit": commit, "origin": origin}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="*", help="directories or git dirs to add, optionally NAME=PATH")
    args = parser.parse_args(argv)

    previous: dict = {}
    manifest_path = OUT / "corpus.json"
    if manifest_path.exists():
        previous = json.loads(manifest_path.read_text())

    repos = {r["name"]: r for r in previous.get("repos", [])}
    for spec in args.sources:
        info = materialise(spec)
        repos[info["name"]] = info
        log(f"repo {info['name']} @ {info['commit'][:12]}")
    repos = {k: v for k, v in repos.items() if (OUT / v["path"]).is_dir()}

    torch_dir = ensure_torch()
    site = ensure_packages()

    if CORPUS.exists():
        shutil.rmtree(CORPUS)
    parts = []
    files, lines = copy_py(torch_dir, CORPUS / "packages" / "torch")
    parts.append({"name": "torch", "kind": "package", "group": "torch", "version": installed_version(TORCH_VENV, "torch"),
                  "path": "corpus/packages/torch", "files": files, "lines": lines})
    for spec, folders in PACKAGES:
        dist = spec.split("==")[0]
        version = installed_version(PKG_VENV, dist)
        for folder in folders:
            dest = CORPUS / "packages" / folder.replace("/", "_")
            files, lines = copy_py(site / folder, dest)
            parts.append({"name": folder.replace("/", "."), "kind": "package", "group": "packages", "dist": dist,
                          "version": version, "path": str(dest.relative_to(OUT)), "files": files, "lines": lines})
    for name, info in sorted(repos.items()):
        dest = CORPUS / "repos" / name
        files, lines = copy_py(OUT / info["path"], dest)
        parts.append({"name": name, "kind": "repo", "group": "repos", "commit": info["commit"], "origin": info["origin"],
                      "path": str(dest.relative_to(OUT)), "files": files, "lines": lines})
        log(f"{name}: {files} files, {lines} lines")

    manifest = {
        "python": sys.version.split()[0],
        "parts": parts,
        "repos": list(repos.values()),
        "total_files": sum(p["files"] for p in parts),
        "total_lines": sum(p["lines"] for p in parts),
    }
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    log(f"{manifest['total_files']} files, {manifest['total_lines']} lines -> {CORPUS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
