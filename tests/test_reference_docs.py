"""docs/reference/ is generated from the configuration schema and the command tree; these tests
keep the committed pages in step with the code."""

from __future__ import annotations

from pathlib import Path

from commands.main import command
from commands.manpages import commands
from commands.reference import COMMAND, DOCS_DIR, anchor, generate, main, section_of
from flinkpy.config import SCHEMA

PAGES = generate()


def test_committed_reference_pages_are_the_generated_ones() -> None:
    for name, text in PAGES.items():
        path = DOCS_DIR / name
        assert path.is_file(), f"{path} is missing: run {COMMAND}"
        assert path.read_text() == text, f"{path} is out of date: run {COMMAND}"


def test_every_configuration_key_is_documented_with_its_default_and_section() -> None:
    page = PAGES["configuration.md"]
    for key, option in SCHEMA.items():
        row = next((line for line in page.splitlines() if line.startswith(f"| `{key}`<br>")), None)
        assert row is not None, f"{key} has no row"
        assert option.env_var in row
        if option.default is not None:
            assert f"`{option.type.format(option.default)}`" in row, key
        assert section_of(key) != "Other", f"{key} matches no section of commands.reference.SECTIONS: add its prefix"


def test_every_command_and_option_is_in_the_cli_page() -> None:
    page = PAGES["cli.md"]
    for path, cmd in commands(command()):
        heading = f"# {' '.join(path)}\n"
        assert heading in page, f"no section for {' '.join(path)}"
        section = page.split(heading, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
        for param in cmd.params:
            for opt in (*param.opts, *param.secondary_opts):
                if opt.startswith("-"):
                    assert opt in section, f"{' '.join(path)}: {opt} is not documented"


def test_links_point_only_at_headings_of_the_same_page() -> None:
    page = PAGES["cli.md"]
    import re

    headings = {anchor(tuple(h.split())) for h in re.findall(r"^#{2,3} (flinkpy.*)$", page, flags=re.M)}
    for target in re.findall(r"\]\(([^)]*)\)", page):
        assert target.startswith("#"), f"a link leaves the page: {target}"
        assert target[1:] in headings | {"exit-codes"}, f"a link to no heading: {target}"
    assert "](" not in PAGES["configuration.md"]


def test_check_mode_detects_drift_and_names_the_command(tmp_path: Path, capsys) -> None:
    assert main(["--check", "--dir", str(tmp_path)]) == 1
    assert main(["--dir", str(tmp_path)]) == 0
    assert main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / "cli.md").write_text("stale\n")
    capsys.readouterr()
    assert main(["--check", "--dir", str(tmp_path)]) == 1
    assert COMMAND in capsys.readouterr().err
