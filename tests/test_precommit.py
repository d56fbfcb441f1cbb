"""The pre-commit hooks of .pre-commit-hooks.yaml, used exactly as docs/ci.md documents them.

A temporary git repository holds this working tree (committed and tagged with the documented
`rev`); a second temporary repository is the user's project, whose .pre-commit-config.yaml is
the documented snippet with only the `repo:` URL pointed at the first. pre-commit then builds
the hook's environment from that repository the way it would from GitHub.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ci.md"

BAD = """\
import torch


def train(model, loader, optimizer, criterion):
    model.train()
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
"""

CLEAN = """\
import torch


def train(model, loader, optimizer, criterion):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
"""

EVAL = """\
import torch


def evaluate(model, loader):
    model.eval()
    correct = 0
    for x, y in loader:
        correct += (model(x).argmax(1) == y).sum().item()
    return correct
"""


def documented_snippet(marker: str) -> str:
    """The YAML block after `<!-- test: MARKER -->` in docs/ci.md."""
    text = DOC.read_text(encoding="utf-8")
    match = re.search(rf"<!-- test: {re.escape(marker)} -->\s*```yaml\n(.*?)```", text, re.DOTALL)
    assert match, f"docs/ci.md has no ```yaml block after <!-- test: {marker} -->"
    return match.group(1)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    try:
        import pre_commit  # noqa: F401
    except ImportError:
        install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "pre-commit"], capture_output=True, text=True)
        if install.returncode != 0:
            pytest.skip(f"pre-commit is not installed and `pip install pre-commit` failed: {install.stderr.strip()[-300:]}")
    home = tmp_path_factory.mktemp("precommit-home")
    return {
        **os.environ,
        "PRE_COMMIT_HOME": str(home / "cache"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_CONFIG_GLOBAL": str(home / "gitconfig"),
        "GIT_CONFIG_NOSYSTEM": "1",
    }


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Path:
    """This working tree, committed into a fresh repository and tagged with the documented rev."""
    repo = tmp_path_factory.mktemp("torch-preflight-src")
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file() and not rel.startswith(("vscode-client/", "bench/")):
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / rel)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "snapshot", "--no-verify"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    rev = re.search(r"^\s*rev:\s*(\S+)", documented_snippet("pre-commit"), re.MULTILINE)
    assert rev, "the documented snippet has no `rev:`"
    subprocess.run(["git", "tag", rev.group(1)], cwd=repo, env=env, check=True, capture_output=True)
    return repo


@pytest.fixture
def project(tmp_path: Path, hook_repo: Path, env: dict[str, str]) -> Path:
    """A user's project whose .pre-commit-config.yaml is the documented snippet."""
    config = documented_snippet("pre-commit")
    config, n = re.subn(r"(repo:\s*)https://github\.com/\S+", lambda m: m.group(1) + str(hook_repo), config)
    assert n == 1, "the documented snippet should name the GitHub repository once"
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, env=env, check=True)
    (tmp_path / ".pre-commit-config.yaml").write_text(config, encoding="utf-8")
    return tmp_path


def pre_commit(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", *args], cwd=project, env=env, capture_output=True, text=True, timeout=900
    )


def test_manifest_defines_both_hooks() -> None:
    text = (ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    ids = re.findall(r"^- id:\s*(\S+)", text, re.MULTILINE)
    assert ids == ["torch-preflight", "torch-preflight-fix"]
    assert re.search(r"entry:\s*torch-preflight check\n", text)
    assert re.search(r"entry:\s*torch-preflight check --fix\n", text)


def test_hook_fails_on_a_bad_file_and_passes_a_clean_one(project: Path, env: dict[str, str]) -> None:
    (project / "bad.py").write_text(BAD, encoding="utf-8")
    (project / "clean.py").write_text(CLEAN, encoding="utf-8")
    git(project, "add", "-A")

    bad = pre_commit(project, env, "run", "--files", "bad.py")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "TPF001" in bad.stdout, bad.stdout
    assert "Failed" in bad.stdout

    clean = pre_commit(project, env, "run", "--files", "clean.py")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "Passed" in clean.stdout

    # Installed as a git hook, it blocks the commit of the bad file.
    install = pre_commit(project, env, "install")
    assert install.returncode == 0, install.stderr
    commit = subprocess.run(["git", "commit", "-q", "-m", "bad"], cwd=project, env=env, capture_output=True, text=True)
    assert commit.returncode != 0
    assert "TPF001" in commit.stdout + commit.stderr
    assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, env=env, capture_output=True).returncode != 0, (
        "nothing was committed"
    )


def test_fix_hook_applies_safe_fixes(project: Path, env: dict[str, str]) -> None:
    config = (project / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    (project / ".pre-commit-config.yaml").write_text(
        config.replace("id: torch-preflight\n", "id: torch-preflight-fix\n"), encoding="utf-8"
    )
    (project / "evaluate.py").write_text(EVAL, encoding="utf-8")
    git(project, "add", "-A")

    first = pre_commit(project, env, "run", "--files", "evaluate.py")
    assert first.returncode == 1, first.stdout + first.stderr  # files were modified by the hook
    fixed = (project / "evaluate.py").read_text(encoding="utf-8")
    assert "    with torch.no_grad():\n        for x, y in loader:\n            correct +=" in fixed

    second = pre_commit(project, env, "run", "--files", "evaluate.py")
    assert second.returncode == 0, second.stdout + second.stderr
