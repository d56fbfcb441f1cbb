"""The `torch-preflight` command line: `check`, `rule`, `rules`, `estimate`, `measure` (runs the script; needs torch).

Exit codes: 0 no findings, 1 findings (or files that could not be read), 2 a usage,
configuration or internal error. `torch-preflight server` is dispatched one level up,
in `torch_preflight.main`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import stat
import sys
import time
import tomllib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from torch_preflight import __version__
from torch_preflight.cache import stat_key
from torch_preflight.core.config import Config, ConfigError, config_from_table, find_pyproject, load_config
from torch_preflight.files import MAX_FILE_SIZE, Excluder, ReadError, display_path, read_bytes, read_source, walk
from torch_preflight.reporters import FORMATS, FileError, Report
from torch_preflight.runner import Options, RunOutput, Target, run

PROG = "torch-preflight"


class UsageError(Exception):
    """A bad flag, path or configuration: exit 2 with the message."""


# -- argument parsing ------------------------------------------------------------------------


def _codes(value: str) -> list[str]:
    return [c.strip() for c in value.split(",") if c.strip()]


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return number


def _flatten(values: list[list[str]] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    return tuple(code for group in values for code in group)


def _add_check(sub: Any) -> None:
    p = sub.add_parser(
        "check",
        help="lint files and folders",
        description="Lint PyTorch training code. Exit 0: no findings; 1: findings; 2: usage or internal error.",
    )
    p.add_argument("paths", nargs="*", metavar="PATH", help="files or folders to check (default: .); '-' reads stdin")
    p.add_argument("--format", "--output-format", dest="format", choices=FORMATS, default="text", help="output format (default: text)")
    p.add_argument("-o", "--output-file", metavar="FILE", help="write the report to FILE instead of stdout")
    sel = p.add_argument_group("rule selection (comma-separated codes, prefixes or names; override the configuration)")
    sel.add_argument("--select", type=_codes, action="append", metavar="CODES", help="the rules to enable (replaces `select`)")
    sel.add_argument("--ignore", type=_codes, action="append", metavar="CODES", help="rules to disable (added to `ignore`)")
    sel.add_argument("--extend-select", type=_codes, action="append", metavar="CODES", help="rules to enable on top of the selection")
    sel.add_argument("--preview", action=argparse.BooleanOptionalAction, default=None, help="enable preview rules")
    fix = p.add_argument_group("fixes")
    fix.add_argument("--fix", action="store_true", help="apply safe fixes in place")
    fix.add_argument("--unsafe-fixes", action="store_true", help="also apply (or count as fixable) unsafe fixes")
    fix.add_argument("--diff", action="store_true", help="print the fixes as a unified diff, write nothing; exit 1 if any")
    files = p.add_argument_group("files")
    files.add_argument("--stdin-filename", metavar="NAME", help="read the source from stdin; NAME is its path for messages and config")
    files.add_argument("--exclude", type=_codes, action="append", metavar="GLOBS", help="folders/files to skip (replaces the defaults)")
    files.add_argument("--extend-exclude", type=_codes, action="append", metavar="GLOBS", help="more folders/files to skip")
    files.add_argument("--config", metavar="PATH", help="use this pyproject.toml instead of the nearest one")
    out = p.add_argument_group("output and run")
    out.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    out.add_argument("--statistics", action="store_true", help="print the number of findings per rule instead of the findings")
    out.add_argument("--show-source", action=argparse.BooleanOptionalAction, default=True, help="show a code frame (text format)")
    out.add_argument("-j", "--jobs", type=_positive, metavar="N", help="worker processes (default: min(CPUs, files))")
    out.add_argument("--no-cache", action="store_true", help="do not read or write the result cache")
    out.add_argument("--cache-dir", metavar="DIR", help="where to keep the cache (default: <project>/.torch-preflight-cache)")
    p.set_defaults(func=cmd_check)


def _add_rules(sub: Any) -> None:
    p = sub.add_parser("rule", help="show a rule's documentation", description="Show a rule's documentation.")
    p.add_argument("code", metavar="CODE", help="a rule code (TPF001) or name (missing-zero-grad)")
    p.set_defaults(func=cmd_rule)
    p = sub.add_parser("rules", help="list the rules", description="List every rule.")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_rules)


def _estimate_unavailable(args: argparse.Namespace) -> int:
    print(f"{PROG}: error: estimator not available (torch_preflight.estimate_command is not installed)", file=sys.stderr)
    return 2


def _load_estimate_command() -> Any:
    try:
        import torch_preflight.estimate_command as module
    except ModuleNotFoundError as exc:
        if exc.name not in ("torch_preflight.estimate_command", "torch_preflight"):
            raise  # the module exists but something it needs is missing: a real error
        return None
    return module


def _add_estimate(sub: Any, load: bool) -> None:
    """The `estimate` command belongs to torch_preflight.estimate_command, imported only when used."""
    p = sub.add_parser("estimate", help="estimate peak GPU memory of a training script", description="Estimate peak GPU memory.")
    module = _load_estimate_command() if load else None
    if module is not None:
        module.add_arguments(p)
        p.set_defaults(func=module.run)
    else:
        p.add_argument("files", nargs="*", metavar="FILE")
        p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        p.set_defaults(func=_estimate_unavailable)


def _measure_needs_torch(args: argparse.Namespace) -> int:
    from torch_preflight.measure.command import missing_torch_message

    print(missing_torch_message(), file=sys.stderr)
    return 2


def _add_measure(sub: Any, load: bool) -> None:
    """`measure` RUNS the user's script under torch (the `measure` extra); torch_preflight.measure.command is
    imported only when this command is used, and it imports torch (in measure.runtime) only after checking for it."""
    from torch_preflight.measure.command import HELP

    p = sub.add_parser("measure", help=HELP, description=HELP)
    if load:
        from torch_preflight.measure import command

        command.add_arguments(p)
        p.set_defaults(func=command.run)
    else:
        p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        p.set_defaults(func=_measure_needs_torch)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="A static linter and language server for PyTorch training code.",
        epilog="Run `torch-preflight COMMAND --help` for a command's options. `torch-preflight server` starts the language server.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_check(sub)
    _add_rules(sub)
    _add_estimate(sub, load=command == "estimate")
    _add_measure(sub, load=command == "measure")
    sub.add_parser("server", help="run the language server (stdio by default)")
    return parser


# -- configuration ---------------------------------------------------------------------------


def load_config_file(path: Path) -> Config:
    """`--config PATH`: a pyproject.toml ([tool.torch-preflight]) or a file holding that table at the top."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--config: {path}: no such file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"--config: cannot read {path}: {exc}") from None
    table = data.get("tool", {}).get("torch-preflight")
    if table is None:
        table = {} if path.name == "pyproject.toml" else data
    return config_from_table(table, root=path.resolve().parent, source=str(path))


def validate_codes(codes: Iterable[str], key: str) -> None:
    """`rules.registry.validate_codes`, as a UsageError; the rules are imported only for a selector
    other than `ALL` (always valid), so a fully cached `--select ALL` run never loads them."""
    rest = [code for code in codes if code.strip().upper() != "ALL"]
    if not rest:
        return
    from torch_preflight.rules.registry import SelectionError
    from torch_preflight.rules.registry import validate_codes as validate

    try:
        validate(rest, key)
    except SelectionError as exc:
        raise UsageError(str(exc)) from None


def validate_config(config: Config) -> None:
    where = f" ({config.source})" if config.source != "defaults" else ""
    validate_codes(config.select, f"`select`{where}")
    validate_codes(config.ignore, f"`ignore`{where}")
    validate_codes(config.extend_select, f"`extend-select`{where}")
    for pattern, codes in config.per_file_ignores:
        validate_codes(codes, f"`per-file-ignores.\"{pattern}\"`{where}")


class ConfigResolver:
    """The configuration for each path: `--config`, or the nearest pyproject.toml (loaded once)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self._by_file: dict[Path | None, Config] = {}
        self._by_folder: dict[str, Config] = {}  # a regular file's config is its folder's
        self._pyproject_in: dict[str, Path | None] = {}  # resolved folder -> nearest pyproject.toml
        self._explicit: Config | None = None
        select, ignore, extend = _flatten(args.select), _flatten(args.ignore), _flatten(args.extend_select)
        validate_codes(select or (), "--select")
        validate_codes(ignore or (), "--ignore")
        validate_codes(extend or (), "--extend-select")
        self.select, self.ignore, self.extend = select, ignore, extend
        if args.config:
            self._explicit = self._finish(load_config_file(Path(args.config)))

    def _finish(self, config: Config) -> Config:
        validate_config(config)
        overrides: dict[str, Any] = {"select": self.select, "preview": self.args.preview}
        if self.ignore:
            overrides["ignore"] = (*config.ignore, *self.ignore)
        if self.extend:
            overrides["extend_select"] = (*config.extend_select, *self.extend)
        if self.args.exclude:
            overrides["exclude"] = _flatten(self.args.exclude)
        if self.args.extend_exclude:
            overrides["extend_exclude"] = (*config.extend_exclude, *(_flatten(self.args.extend_exclude) or ()))
        return config.merged(**overrides)

    def for_path(self, path: Path) -> Config:
        if self._explicit is not None:
            return self._explicit
        try:
            regular = stat.S_ISREG(os.lstat(path).st_mode)  # not a symlink: its pyproject is its folder's
        except OSError:
            regular = False
        if regular:
            folder = os.path.dirname(path)
            if folder not in self._by_folder:
                self._by_folder[folder] = self._config_of(self._nearest_pyproject(os.path.realpath(folder)))
            return self._by_folder[folder]
        return self._config_of(find_pyproject(path))

    def _nearest_pyproject(self, folder: str) -> Path | None:
        """`find_pyproject` of an existing, resolved folder, remembering every folder it walked."""
        walked: list[str] = []
        found: Path | None = None
        current = folder
        while True:
            if current in self._pyproject_in:
                found = self._pyproject_in[current]
                break
            walked.append(current)
            candidate = os.path.join(current, "pyproject.toml")
            if os.path.isfile(candidate):
                found = Path(candidate)
                break
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        for name in walked:
            self._pyproject_in[name] = found
        return found

    def _config_of(self, pyproject: Path | None) -> Config:
        if pyproject not in self._by_file:
            self._by_file[pyproject] = self._finish(load_config(pyproject.parent) if pyproject is not None else Config())
        return self._by_file[pyproject]


# -- check -----------------------------------------------------------------------------------


def _discover(args: argparse.Namespace, resolver: ConfigResolver, cwd: Path) -> tuple[list[Target], list[FileError], list[str]]:
    targets: list[Target] = []
    errors: list[FileError] = []
    notes: list[str] = []
    seen: set[Path] = set()
    paths: list[str] = list(args.paths)
    read_stdin = "-" in paths or (args.stdin_filename is not None and not paths)
    if not paths and not read_stdin:
        paths = ["."]

    now = time.time_ns()  # taken before any file is read: stat_key() trusts only files older than this

    def add(path: Path, config: Config) -> None:
        if path in seen:
            return
        seen.add(path)
        display = display_path(path, cwd)
        try:
            st = os.stat(path)
        except OSError:
            st = None
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_size <= MAX_FILE_SIZE:
            targets.append(Target(path, display, config, None, stat=stat_key(st, now)))  # read by run() if needed
            return
        loaded = read_source(path)  # its error, or its note when too large
        if isinstance(loaded, ReadError):
            if loaded.skipped:
                notes.append(f"{display}: {loaded.reason}")
            else:
                errors.append(FileError(display, loaded.reason, path))
            return
        targets.append(Target(path, display, config, loaded))

    for raw in paths:
        if raw == "-":
            continue
        path = Path(os.path.abspath(os.path.join(cwd, raw)))
        config = resolver.for_path(path)
        if path.is_dir():
            for file in walk(path, Excluder(config, path)):
                add(file, config)
        elif path.exists() or path.is_symlink():
            add(path, config)
        else:
            errors.append(FileError(display_path(path, cwd), "no such file or directory", path))

    if read_stdin:
        name = args.stdin_filename or "-"
        path = Path(os.path.abspath(cwd / args.stdin_filename)) if args.stdin_filename else cwd / "<stdin>"
        config = resolver.for_path(path)
        loaded = read_bytes(sys.stdin.buffer.read())
        if isinstance(loaded, ReadError):
            errors.append(FileError(name, loaded.reason))
        else:
            targets.append(Target(path, name, config, loaded, stdin=True))
    return targets, errors, notes


def _statistics(report: Report, fmt: str, stream: TextIO) -> None:
    counts: Counter[str] = Counter()
    names: dict[str, str] = {}
    fixable: Counter[str] = Counter()
    for file in report.files:
        for d in file.diagnostics:
            counts[d.code] += 1
            names[d.code] = d.name
            fixable[d.code] += report.fixable(d)
        if file.syntax_errors:
            counts["SyntaxError"] += len(file.syntax_errors)
            names["SyntaxError"] = "syntax-error"
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if fmt == "json":
        rows = [{"code": c, "name": names[c], "count": n, "fixable": fixable[c] > 0} for c, n in ordered]
        stream.write(json.dumps(rows, indent=2) + "\n")
        return
    width = max((len(str(n)) for _, n in ordered), default=1)
    for code, n in ordered:
        mark = "[*] " if fixable[code] else "    "
        stream.write(f"{n:>{width}}\t{code}\t{mark}{names[code]}\n")


@contextlib.contextmanager
def _output(path: str | None) -> Iterator[TextIO]:
    if path is None:
        yield sys.stdout
        return
    try:
        handle = open(path, "w", encoding="utf-8", newline="")
    except OSError as exc:
        raise UsageError(f"--output-file: cannot write {path}: {exc.strerror or exc}") from None
    with handle:
        yield handle


def _print_problems(report: Report) -> None:
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    for error in report.errors:
        prefix = "error: internal error while checking" if error.internal else "error: cannot check"
        print(f"{prefix} {error.display}: {error.reason}", file=sys.stderr)


def _exit_code(args: argparse.Namespace, out: RunOutput) -> int:
    if out.internal_error:
        return 2
    if args.exit_zero:
        return 0
    if args.diff:
        return 1 if out.would_fix else 0
    report = out.report
    return 1 if report.diagnostic_count or report.errors else 0


def cmd_check(args: argparse.Namespace) -> int:
    cwd = Path.cwd()
    resolver = ConfigResolver(args)
    targets, errors, notes = _discover(args, resolver, cwd)
    options = Options(
        fix=args.fix and not args.diff,
        unsafe_fixes=args.unsafe_fixes,
        diff=args.diff,
        jobs=args.jobs,
        cache=not args.no_cache,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        show_source=args.show_source,
    )
    out = run(targets, options, errors, notes)
    report = out.report
    _print_problems(report)
    if args.diff:
        with _output(args.output_file) as stream:
            for diff in out.diffs:
                stream.write(diff)
        print(f"Would fix {out.would_fix} error{'s' * (out.would_fix != 1)}.", file=sys.stderr)
        return _exit_code(args, out)
    if out.fixed_stdin is not None:
        sys.stdout.write(out.fixed_stdin)
        sys.stdout.flush()
        from torch_preflight.reporters import get

        get("concise")(report, sys.stderr)
        return _exit_code(args, out)
    with _output(args.output_file) as stream:
        if args.statistics:
            _statistics(report, args.format, stream)
        else:
            from torch_preflight.reporters import get

            get(args.format)(report, stream)
    return _exit_code(args, out)


# -- rule / rules ----------------------------------------------------------------------------


def _find_rule(code: str) -> Any:
    from torch_preflight.rules.registry import BY_CODE, BY_NAME

    rule = BY_CODE.get(code.upper()) or BY_NAME.get(code.lower())
    if rule is None:
        raise UsageError(f"unknown rule `{code}` (see `torch-preflight rules`)")
    return rule


def cmd_rule(args: argparse.Namespace) -> int:
    from torch_preflight.rules.docs import render

    rule = _find_rule(args.code)
    text = render(rule)
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.markdown import Markdown

        Console().print(Markdown(text))
    else:
        sys.stdout.write(text)
    return 0


def rule_rows() -> list[dict[str, Any]]:
    from torch_preflight.rules.registry import ALL_RULES

    return [
        {
            "code": r.meta.code,
            "name": r.meta.name,
            "summary": r.meta.message,
            "fix": r.meta.fix_title,
            "severity": r.meta.severity.value,
            "status": r.meta.status.value,
            "default": r.meta.default_enabled,
            "url": r.meta.url,
        }
        for r in ALL_RULES
    ]


def cmd_rules(args: argparse.Namespace) -> int:
    rows = rule_rows()
    if args.format == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="torch-preflight rules")
    for column in ("Code", "Name", "Fix", "Status", "Default", "Summary"):
        table.add_column(column, no_wrap=column != "Summary")
    for row in rows:
        table.add_row(row["code"], row["name"], "yes" if row["fix"] else "-", row["status"], "on" if row["default"] else "off", row["summary"])
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(table)
    return 0


# -- entry point -----------------------------------------------------------------------------


def _command_of(argv: Sequence[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(_command_of(argv))
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help, --version, or a usage error (argparse printed it)
            return int(exc.code) if isinstance(exc.code, int) else 2
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
        if args.command == "server":
            print(f"{PROG}: error: run the server through the `torch-preflight` entry point (torch_preflight.main)", file=sys.stderr)
            return 2
        return int(args.func(args) or 0)
    except (UsageError, ConfigError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:
        import traceback

        buffer = io.StringIO()
        traceback.print_exc(file=buffer)
        print(f"{PROG}: internal error: {exc!r}\n{buffer.getvalue()}This is a bug in torch-preflight: please report it with the traceback above and the file that triggered it.", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
