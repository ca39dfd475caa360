"""man/ is generated from the command tree; these tests keep them in step."""

from __future__ import annotations

from pathlib import Path

import pytest

from commands.main import command
from commands.manpages import MAN_DIR, commands, exit_codes, generate, page_name

TREE = list(commands(command()))
PAGES = generate()


@pytest.mark.parametrize("path, cmd", TREE, ids=[page_name(p) for p, _ in TREE])
def test_every_command_has_a_page_mentioning_every_option(path: tuple[str, ...], cmd: object) -> None:
    page = MAN_DIR / f"{page_name(path)}.1"
    assert page.is_file(), f"{page} is missing: run python -m commands.manpages"
    text = page.read_text().replace("\\-", "-")
    for param in cmd.params:  # type: ignore[attr-defined]
        for opt in (*param.opts, *param.secondary_opts):
            if opt.startswith("-"):
                assert opt in text, f"{page.name} does not mention {opt}"


def test_no_page_without_a_command() -> None:
    committed = {p.name for p in MAN_DIR.glob("*.1")}
    assert committed - set(PAGES) == set(), "pages for commands that no longer exist"


def test_committed_pages_are_the_generated_ones() -> None:
    for name, text in PAGES.items():
        assert (MAN_DIR / name).read_text() == text, f"{name} is out of date: run python -m commands.manpages"


def test_root_page_documents_every_exit_code_and_environment() -> None:
    text = (MAN_DIR / "flinkpy.1").read_text()
    for _, value in exit_codes():
        assert f"\\fB{value}\\fR" in text
    for var in ("FLINKPY_HOME", "FLINKPY_JOBMANAGER", "NO_COLOR", "flinkpy.yaml"):
        assert var.replace("-", "\\-") in text


def test_check_mode_detects_drift(tmp_path: Path) -> None:
    from commands.manpages import main

    assert main(["--dir", str(tmp_path)]) == 0
    assert main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / "flinkpy-run.1").write_text("stale\n")
    (tmp_path / "flinkpy-gone.1").write_text("orphan\n")
    assert main(["--check", "--dir", str(tmp_path)]) == 1


def test_every_help_page_fits_80_columns() -> None:
    """`flinkpy ... --help` at 80 columns, examples included: an example wider than the terminal
    wraps mid-word and cannot be copied as it stands."""
    from click.testing import CliRunner

    runner = CliRunner()
    root = command()
    wide = []
    for path, _ in TREE:
        result = runner.invoke(root, [*path[1:], "--help"], env={"COLUMNS": "80", "TERM": "dumb", "NO_COLOR": "1"}, terminal_width=80)
        assert result.exit_code == 0, (path, result.output)
        wide += [f"{' '.join(path)}: {line}" for line in result.output.splitlines() if len(line) > 80]
    assert not wide, "\n".join(wide)
