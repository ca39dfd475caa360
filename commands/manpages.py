"""Generate the roff man pages in man/ from the command tree itself, so they cannot drift.

    python -m commands.manpages            # (re)write man/*.1, man/flinkpy-connectors.7, docs/connectors.md's table
    python -m commands.manpages --check    # exit 1 if any of them differs from the code

One page per command and group (flinkpy-cluster.1, flinkpy-cluster-start.1, ...), and
flinkpy.1 with the exit codes, environment, files and configuration keys.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Iterator

from commands._click import click
from flinkpy.config import SCHEMA
from flinkpy.errors import ExitCode

MAN_DIR = Path(__file__).resolve().parent.parent / "man"
SECTION = "1"
MANUAL = "flinkpy manual"

EXIT_DESCRIPTIONS: dict[str, str] = {
    "OK": "Success. Stopping a cluster that is not running is a success too.",
    "INTERNAL": "Internal error: a bug in flinkpy. Re-run with --debug and report the traceback.",
    "USAGE": "Bad usage: unknown command or flag, bad flag value, missing argument.",
    "UNREACHABLE": "No cluster is running, or the JobManager does not answer at the address.",
    "NOT_FOUND": "Something named does not exist: a job id, a job file, a TaskManager.",
    "JOB_FAILED": "The job reached FAILED.",
    "TIMEOUT": "An operation did not finish within its timeout.",
    "INVALID_PROGRAM": "The job file cannot be loaded (syntax error, exception before execute()) or builds an invalid job.",
    "CONFIGURATION": "Unknown configuration key or bad value (in flinkpy.yaml, FLINKPY_* variables or -D); or a package the job needs is not installed (PySpark for --runner spark, a connector's driver), the message naming the pip command.",
    "CONFLICT": "The thing is in the wrong state: a cluster is already running, the job is not running.",
    "JOB_CANCELED": "The job was cancelled while the command waited for it.",
    "AUTHENTICATION": "The request lacked the cluster's token, or it was wrong.",
    "SAVEPOINT_FAILED": "A savepoint or checkpoint was triggered and accepted but did not complete (its cause is on stderr).",
    "VERIFY_FAILED": "flinkpy verify found records lost or duplicated in a job's output.",
    "UNSUPPORTED": "The job program uses a PyFlink module, class or method that flinkpy does not have (the Table API, a connector such as Pulsar or Elasticsearch, DataStream.infer, ...); the message names it and what flinkpy offers instead. The same code ends 'python JOB.py'.",
    "UPGRADE_FAILED": "'flinkpy upgrade': the new job was not healthy within --ready-timeout (it restarted, failed, or did not run and complete a checkpoint); the message names its root cause. With --rollback-on-failure the old program runs again from the same snapshot.",
    "INTERRUPTED": "Interrupted by Ctrl-C (SIGINT). An attached 'flinkpy run' on its embedded cluster first cancels the job and stops the cluster; on a running cluster the job keeps running (unless execution.shutdown-on-attached-exit) and the one line on stderr says how to cancel it.",
    "TERMINATED": "Stopped by SIGTERM, after doing what Ctrl-C does (see 130).",
}

ENVIRONMENT: list[tuple[str, str]] = [
    ("FLINKPY_HOME", "The cluster home: where flinkpy.yaml is read and where a cluster started by 'flinkpy cluster start' keeps its pids, logs and token. Default: ~/.flinkpy."),
    ("FLINKPY_JOBMANAGER", "Address (HOST:PORT) of the JobManager that commands talk to when -m is not given; wins over the cluster recorded in FLINKPY_HOME."),
    ("FLINKPY_<KEY>", "Any configuration key, upper-cased with '.' and '-' written as '_', e.g. FLINKPY_PARALLELISM_DEFAULT=2. Wins over flinkpy.yaml, loses to -D."),
    ("FLINKPY_DEBUG", "When set, a job program run with 'python JOB.py' that stops on a PyFlink name flinkpy lacks shows the traceback, not one line."),
    ("NO_COLOR", "When set, output has no colour (output that is not a terminal never has colour)."),
]


def exit_codes() -> list[tuple[str, int]]:
    return sorted(((n, v) for n, v in vars(ExitCode).items() if n.isupper() and isinstance(v, int)), key=lambda x: x[1])


# --------------------------------------------------------------------------- roff helpers


def esc(text: str) -> str:
    """Escape text for roff: backslashes, hyphens of flags, and lines starting with . or '."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line[:1] in (".", "'") else line for line in text.split("\n"))


def bold(text: str) -> str:
    return f"\\fB{esc(text)}\\fR"


def split_help(help_text: str) -> tuple[str, list[str], list[str]]:
    """(summary, description paragraphs, example lines) from a command's docstring."""
    text = help_text.replace("\b", "")
    match = re.search(r"^\s*Examples:\s*$", text, flags=re.M)
    body, examples = (text[: match.start()], text[match.end() :]) if match else (text, "")
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", body.strip()) if p.strip()]
    summary = paragraphs[0] if paragraphs else ""
    example_lines = [line.strip() for line in examples.splitlines() if line.strip()]
    return summary, paragraphs[1:], example_lines


def commands(cmd: click.Command, path: tuple[str, ...] = ("flinkpy",)) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command and group of the tree, depth first, with its full name."""
    yield path, cmd
    if is_group(cmd):
        for name in sorted(cmd.commands):  # type: ignore[attr-defined]
            yield from commands(cmd.commands[name], path + (name,))  # type: ignore[attr-defined]


def is_group(cmd: click.Command) -> bool:
    # Duck-typed: typer's vendored click has no Group class, real click does.
    return isinstance(getattr(cmd, "commands", None), dict)


def page_name(path: tuple[str, ...]) -> str:
    return "-".join(path)


def usage_pieces(cmd: click.Command, path: tuple[str, ...]) -> str:
    """What follows the command's name in its synopsis: ``[OPTIONS] JOB_ID``."""
    ctx = click.Context(cmd, info_name=" ".join(path))
    # typer marks required arguments with braces; in a synopsis, roman type already says it.
    return re.sub(r"[{}]", "", " ".join(cmd.collect_usage_pieces(ctx)))


def _synopsis(cmd: click.Command, path: tuple[str, ...]) -> str:
    return f'.SY "{esc(" ".join(path))}"\n{esc(usage_pieces(cmd, path))}\n.YS'



def _option_lines(cmd: click.Command) -> list[str]:
    lines: list[str] = []
    for param in cmd.params:
        if param.param_type_name == "option":
            names = ", ".join(bold(o) for o in (*param.opts, *param.secondary_opts))
            if not param.is_flag:
                metavar = param.metavar or str(getattr(param.type, 'name', 'VALUE')).upper()
                names += f" \\fI{esc(metavar)}\\fR"
            text = param.help or ""
        else:
            names = f"\\fI{esc(param.metavar or (param.name or 'ARG').upper())}\\fR"
            text = getattr(param, "help", None) or ""
        lines += [".TP", names, esc(" ".join(text.split()))]
    lines += [".TP", ", ".join(bold(o) for o in ("-h", "--help")), "Show the command's help and exit."]
    return lines


def render(path: tuple[str, ...], cmd: click.Command, *, version: str) -> str:
    name = page_name(path)
    summary, paragraphs, examples = split_help(cmd.help or "")
    out = [
        f'.\\" Generated by "python -m commands.manpages" from the flinkpy command tree; do not edit.',
        f'.TH {name.upper()} {SECTION} "" "flinkpy {version}" "{MANUAL}"',
        ".SH NAME",
        f"{esc(name)} \\- {esc(summary[0].lower() + summary[1:] if summary else '')}",
        ".SH SYNOPSIS",
        _synopsis(cmd, path),
        ".SH DESCRIPTION",
    ]
    for paragraph in [summary, *paragraphs]:
        out += [".PP", esc(paragraph)]
    if is_group(cmd):
        out.append(".SH COMMANDS")
        for sub_name in sorted(cmd.commands):
            sub = cmd.commands[sub_name]
            out += [".TP", bold(f"{' '.join(path[1:] + (sub_name,))}"), esc(split_help(sub.help or "")[0]) + f" See \\fB{esc(page_name(path + (sub_name,)))}\\fR(1)."]
    out.append(".SH OPTIONS")
    out += _option_lines(cmd)
    if examples:
        out += [".SH EXAMPLES", ".PP", ".nf", ".RS 4", *(esc(line) for line in examples), ".RE", ".fi"]
    out.append(".SH EXIT STATUS")
    if len(path) == 1:
        for code_name, value in exit_codes():
            out += [".TP", f"\\fB{value}\\fR", esc(EXIT_DESCRIPTIONS[code_name])]
        out += _root_sections()
    else:
        out += [".PP", esc("0 on success; otherwise one of the codes listed in flinkpy(1), e.g. 2 for bad usage, "
                          "3 when no cluster answers, 4 for an unknown job, 8 for bad configuration. "
                          "Errors are one line on stderr: 'flinkpy: error: WHAT (WHAT TO DO)'; with --json, "
                          "stdout also gets {\"error\": {\"message\", \"remedy\", \"kind\", \"exit_code\"}}.")]
    out += [".SH SEE ALSO", _see_also(path, cmd)]
    return "\n".join(out) + "\n"


def _root_sections() -> list[str]:
    out = [".SH ENVIRONMENT"]
    for var, text in ENVIRONMENT:
        out += [".TP", bold(var), esc(text)]
    out += [
        ".SH FILES",
        ".TP", bold("$FLINKPY_HOME/flinkpy.yaml"),
        esc("The configuration file: one 'key: value' per line (Flink's flat keys), or nested maps. "
            "Precedence: defaults < flinkpy.yaml < FLINKPY_* environment < -D key=value."),
        ".TP", bold("$FLINKPY_HOME/"),
        esc("The cluster home. A running cluster keeps there its process ids, its REST address, the "
            "logs and stdout of the JobManager and TaskManagers, and its token (mode 0600); "
            "every request that changes anything must carry that token."),
        ".SH CONFIGURATION",
        ".PP",
        esc("Known keys, their defaults and meaning. Durations use Flink's syntax ('100 ms', '10 s', "
            "'10 min', '1 h'; a bare number is milliseconds); memory sizes use binary units ('32 kb')."),
    ]
    for key, option in SCHEMA.items():
        default = "unset" if option.default is None else option.type.format(option.default)
        out += [".TP", bold(key), esc(f"{option.description} Default: {default}; {option.type.allowed}.")]
    return out


def _see_also(path: tuple[str, ...], cmd: click.Command) -> str:
    refs: list[str] = []
    if len(path) > 1:
        refs.append(page_name(path[:-1]))
    if is_group(cmd):
        refs += [page_name(path + (n,)) for n in sorted(cmd.commands)]
    if "flinkpy" not in refs and len(path) > 2:
        refs.insert(0, "flinkpy")
    return ",\n".join(f"\\fB{esc(r)}\\fR(1)" for r in refs) if refs else "\\fBman\\fR(1)"


CONNECTORS_INTRO = (
    "Exactly-once state is not exactly-once output. A job's output is exactly-once end to end "
    "only when every source is replayable (a restored reader rewinds to the checkpoint's "
    "position), checkpoints align barriers (execution.checkpointing.mode: EXACTLY_ONCE), and "
    "every sink either commits transactionally with checkpoints (two-phase commit: written "
    "invisibly, prepared at the checkpoint, committed when the checkpoint completes) or writes "
    "idempotently (rewriting a deterministic result per key changes nothing). One weaker link "
    "makes the whole job weaker: 'flinkpy info JOB.py' prints each source's and sink's "
    "guarantee and the job's end to end, and a checkpointed job warns at submission about a "
    "source that cannot be replayed."
)


def render_connectors(*, version: str) -> str:
    """flinkpy-connectors(7): the guarantees table, from the connector classes themselves."""
    from flinkpy.connectors.guarantees import catalog_rows

    out = [
        '.\\" Generated by "python -m commands.manpages" from flinkpy.connectors.guarantees; do not edit.',
        f'.TH FLINKPY\\-CONNECTORS 7 "" "flinkpy {version}" "{MANUAL}"',
        ".SH NAME",
        "flinkpy\\-connectors \\- sources and sinks, and the delivery guarantee of each",
        ".SH DESCRIPTION",
        ".PP",
        esc(CONNECTORS_INTRO),
    ]
    for kind, title in (("source", "SOURCES"), ("sink", "SINKS")):
        out.append(f".SH {title}")
        for row in catalog_rows():
            if row["kind"] == kind:
                out += [".TP", f"{bold(row['connector'])} \\(em {bold(row['guarantee'])}",
                        esc(f"{row['api']}"), ".br", esc(f"Needs: {row['needs']}.")]
    out += [".SH SEE ALSO", "\\fBflinkpy\\fR(1),\n\\fBflinkpy\\-info\\fR(1)"]
    return "\n".join(out) + "\n"


def generate(root: click.Command | None = None) -> dict[str, str]:
    """File name -> page text for the whole command tree."""
    if root is None:
        from commands.main import command

        root = command()
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("flinkpy")
    except PackageNotFoundError:
        v = "unknown"
    pages = {f"{page_name(path)}.{SECTION}": render(path, cmd, version=v) for path, cmd in commands(root)}
    pages["flinkpy-connectors.7"] = render_connectors(version=v)
    return pages


CONNECTORS_PAGE = MAN_DIR.parent / "docs" / "connectors.md"
TABLE_START, TABLE_END = "<!-- connectors-table: generated by python -m commands.manpages -->", "<!-- end connectors-table -->"


def with_connectors_table(text: str) -> str:
    """docs/connectors.md with the connectors table between its markers replaced by the current one."""
    from flinkpy.connectors.guarantees import markdown_table

    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    return text[:start] + "\n" + markdown_table() + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m commands.manpages", description="Generate man/*.1 from the CLI.")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if man/ is out of date")
    parser.add_argument("--dir", type=Path, default=MAN_DIR)
    opts = parser.parse_args(argv)
    pages = generate()
    existing = {p.name for p in opts.dir.glob("*.[17]")} if opts.dir.is_dir() else set()
    stale = sorted(existing - set(pages))
    changed = sorted(n for n, text in pages.items() if not (opts.dir / n).is_file() or (opts.dir / n).read_text() != text)
    page = CONNECTORS_PAGE.read_text() if CONNECTORS_PAGE.is_file() else ""
    page_stale = TABLE_START in page and with_connectors_table(page) != page
    if opts.check:
        if page_stale:
            print(f"out of date: the connectors table in {CONNECTORS_PAGE}", file=sys.stderr)
        for name in changed:
            print(f"out of date: {opts.dir / name}", file=sys.stderr)
        for name in stale:
            print(f"no such command: {opts.dir / name}", file=sys.stderr)
        return 1 if changed or stale or page_stale else 0
    if page_stale:
        CONNECTORS_PAGE.write_text(with_connectors_table(page))
    opts.dir.mkdir(parents=True, exist_ok=True)
    for name in changed:
        (opts.dir / name).write_text(pages[name])
    for name in stale:
        (opts.dir / name).unlink()
    print(f"wrote {len(changed)} page(s), removed {len(stale)} to {opts.dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
