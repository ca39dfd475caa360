"""The CLI's contract with scripts: exit codes, one-line errors, JSON on stdout, no tracebacks.

Every test runs the real console entry point in a subprocess with an empty FLINKPY_HOME; no
cluster is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import one_error_line, run_cli_in as flinkpy
from flinkpy.errors import ExitCode


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def test_help(home: Path) -> None:
    result = flinkpy(home, "--help")
    assert result.returncode == 0
    for verb in ("run", "info", "list", "cancel", "job", "cluster"):
        assert verb in result.stdout


def test_list_without_cluster_exits_3(home: Path) -> None:
    line = one_error_line(flinkpy(home, "list"), ExitCode.UNREACHABLE)
    assert "no cluster is running" in line and "flinkpy cluster start" in line


def test_list_json_error_document(home: Path) -> None:
    result = flinkpy(home, "list", "--json")
    assert result.returncode == ExitCode.UNREACHABLE
    doc = json.loads(result.stdout)
    assert doc["error"]["exit_code"] == ExitCode.UNREACHABLE
    assert doc["error"]["message"] and doc["error"]["remedy"] and doc["error"]["kind"]


def test_refused_address_exits_3(home: Path) -> None:
    line = one_error_line(flinkpy(home, "list", "-m", "127.0.0.1:1"), ExitCode.UNREACHABLE)
    assert "127.0.0.1:1" in line


def test_bad_flag_value_exits_2(home: Path) -> None:
    line = one_error_line(flinkpy(home, "cluster", "start", "--slots", "zero"), ExitCode.USAGE)
    assert "--slots" in line


def test_unknown_flag_exits_2(home: Path) -> None:
    one_error_line(flinkpy(home, "list", "--bogus"), ExitCode.USAGE)


def test_run_missing_file_exits_4(home: Path) -> None:
    line = one_error_line(flinkpy(home, "run", str(home / "missing.py")), ExitCode.NOT_FOUND)
    assert "missing.py" in line


def test_run_syntax_error_exits_7_naming_file_and_line(home: Path) -> None:
    job = home / "broken.py"
    job.write_text("from flinkpy.datastream import StreamExecutionEnvironment\n\ndef oops(:\n    pass\n")
    line = one_error_line(flinkpy(home, "run", str(job)), ExitCode.INVALID_PROGRAM)
    assert "broken.py" in line and "3" in line


def test_debug_shows_traceback(home: Path) -> None:
    result = flinkpy(home, "--debug", "run", str(home / "missing.py"))
    assert result.returncode == ExitCode.NOT_FOUND
    assert "Traceback" in result.stderr


def test_bad_dynamic_property_exits_8(home: Path) -> None:
    job = home / "job.py"
    job.write_text("raise SystemExit('must not run')\n")
    line = one_error_line(flinkpy(home, "run", "-D", "parallelism.defualt=2", str(job)), ExitCode.CONFIGURATION)
    assert "parallelism.default" in line


def test_bad_config_file_exits_8_with_json(home: Path) -> None:
    (home / "flinkpy.yaml").write_text("rest.port: lots\n")
    result = flinkpy(home, "cluster", "start", "--json")
    assert result.returncode == ExitCode.CONFIGURATION
    assert json.loads(result.stdout)["error"]["kind"] == "Configuration"
    assert "rest.port" in result.stderr and str(home / "flinkpy.yaml") in result.stderr


def test_bad_env_config_exits_8(home: Path) -> None:
    result = flinkpy(home, "cluster", "start", env={"FLINKPY_TASKMANAGER_NUMBEROFTASKSLOTS": "-1"})
    one_error_line(result, ExitCode.CONFIGURATION)


@pytest.mark.timeout(60)
def test_missing_object_store_credentials_exit_8_naming_what_to_set(home: Path, tmp_path: Path) -> None:
    pytest.importorskip("s3fs")
    # no credentials anywhere botocore looks (variables, files, the instance metadata service)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"HOME": str(tmp_path), "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                "AWS_EC2_METADATA_DISABLED": "true", "FLINKPY_HOME": str(home), "NO_COLOR": "1"})
    for args in (["savepoint", "list", "s3://no-bucket/savepoints"], ["checkpoint", "verify", "s3://no-bucket/cp/chk-1"]):
        result = subprocess.run([sys.executable, "-m", "commands.main", *args], capture_output=True, text=True, env=env,
                                stdin=subprocess.DEVNULL, timeout=50)
        line = one_error_line(result, ExitCode.CONFIGURATION)
        assert "no credentials" in line and "AWS_ACCESS_KEY_ID" in line and "bug" not in line, line


def test_a_call_builds_only_the_command_it_names_and_that_tree_holds_it() -> None:
    """Each top-level name of the whole tree is found in the tree built for a call to it alone
    (commands.main.TREE says which module adds which names), and that tree holds nothing else."""
    from commands.main import _invoked, command

    whole = command()
    for name in whole.commands:
        assert _invoked([name, "--json"]) == name
        alone = command(name)
        assert name in alone.commands, f"{name!r}: commands.main.TREE names the wrong module"
        assert len(alone.commands) <= 2, sorted(alone.commands)
    assert _invoked(["--debug", "list"]) == "list"
    for args in ([], ["--help"], ["--version"], ["lst"], ["-h", "list"]):
        assert _invoked(args) is None, args


def test_a_command_that_only_talks_rest_loads_neither_pydantic_nor_the_message_catalog(home: Path) -> None:
    """The CLI starts in about 0.3 s because a REST command imports only what it uses: typer
    0.29 coerces every parameter through pydantic (0.2 s of imports and schema building before
    the first line; pyproject keeps typer below it), and the control messages' catalog (fifty
    dataclasses) loads only in a process that decodes one (flinkpy.protocol.codec)."""
    probe = ("import sys\n"
             "from commands.main import main\n"
             "sys.argv = ['flinkpy', 'list']\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in ('pydantic', 'flinkpy.protocol.messages') if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, FLINKPY_HOME=str(home)))
    assert "no cluster is running" in result.stderr, result.stderr
    assert result.stdout.strip() == "[]", result.stdout


def test_a_message_of_the_catalog_decodes_in_a_process_that_never_imported_it() -> None:
    """The catalog loads on the first name decode() has not seen, so a TaskManager's first message
    decodes even where nothing imported flinkpy.protocol.messages before."""
    from flinkpy.protocol import encode
    from flinkpy.protocol.messages import Refused

    probe = ("import sys\n"
             "from flinkpy.protocol import decode\n"
             "assert 'flinkpy.protocol.messages' not in sys.modules\n"
             "print(repr(decode(bytes.fromhex(sys.stdin.read()))))\n")
    result = subprocess.run([sys.executable, "-c", probe], input=encode(Refused("another term")).hex(),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Refused(reason='another term')"
