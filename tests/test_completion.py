"""Shell completion: the scripts `flinkpy completion` prints work in the real shells."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flinkpy.errors import ExitCode

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.timeout(60)


def env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def bash_completions(*words: str) -> list[str]:
    """What Tab offers after ``flinkpy WORDS`` in bash with the completion script loaded."""
    array = " ".join(f"'{w}'" for w in ("flinkpy", *words))
    script = f'source <(flinkpy completion bash) && COMP_WORDS=({array}) && COMP_CWORD={len(words)} && _flinkpy_completion flinkpy && printf "%s\\n" "${{COMPREPLY[@]}}"'
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env(), timeout=50)
    assert res.returncode == 0, res.stderr
    return [line for line in res.stdout.splitlines() if line]


def test_bash_completes_commands_subcommands_and_options() -> None:
    assert "savepoint" in bash_completions("sa")
    assert set(bash_completions("savepoint", "")) >= {"trigger", "status", "dispose", "list", "plan"}
    assert bash_completions("checkpoint", "tr") == ["trigger"]
    assert {"--detached", "--parallelism", "--fromSavepoint"} <= set(bash_completions("run", "--"))
    assert bash_completions("--debug", "checkpoint", "li") == ["list"]


def test_a_completion_request_builds_only_the_group_already_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tab after `flinkpy savepoint` imports and builds that group alone (the whole tree costs a
    completion 0.2 s more); the top level, and what cannot be read, get the whole tree."""
    from commands.main import _invoked

    monkeypatch.setenv("_FLINKPY_COMPLETE", "complete_bash")
    for words, cword, name in (("flinkpy savepoint tr", 2, "savepoint"), ("flinkpy --debug list --", 3, "list"),
                               ("flinkpy sa", 1, None), ("flinkpy 'un closed", 1, None), ("flinkpy savepoint", "x", None)):
        monkeypatch.setenv("COMP_WORDS", words)
        monkeypatch.setenv("COMP_CWORD", str(cword))
        assert _invoked([]) == name, words
    monkeypatch.setenv("_FLINKPY_COMPLETE", "complete_zsh")
    for line, name in (("flinkpy savepoint ", "savepoint"), ("flinkpy savepoint", None), ("flinkpy run --de", "run")):
        monkeypatch.setenv("_TYPER_COMPLETE_ARGS", line)
        assert _invoked([]) == name, line


def test_zsh_script_and_its_callback() -> None:
    res = subprocess.run([str(BIN / "flinkpy"), "completion", "zsh"], capture_output=True, text=True, env=env(), timeout=50)
    assert res.returncode == 0 and res.stdout.startswith("#compdef flinkpy"), res.stderr
    # what the script asks flinkpy when Tab is pressed after `flinkpy savepoint `
    answer = subprocess.run([str(BIN / "flinkpy")], capture_output=True, text=True, timeout=50,
                            env={**env(), "_TYPER_COMPLETE_ARGS": "flinkpy savepoint ", "_FLINKPY_COMPLETE": "complete_zsh"})
    assert answer.returncode == 0 and '"trigger":' in answer.stdout and '"plan":' in answer.stdout, answer.stdout + answer.stderr
    if shutil.which("zsh"):
        loaded = subprocess.run(["zsh", "-c", "autoload -U compinit && compinit -u && source <(flinkpy completion zsh) && echo ok"],
                                capture_output=True, text=True, env=env(), timeout=50)
        assert loaded.stdout.strip() == "ok", loaded.stderr


def test_other_shells_are_a_usage_error_and_json_carries_the_script() -> None:
    res = subprocess.run([str(BIN / "flinkpy"), "completion", "fish"], capture_output=True, text=True, env=env(), timeout=50)
    assert res.returncode == ExitCode.USAGE and "bash, zsh" in res.stderr
    doc = json.loads(subprocess.run([str(BIN / "flinkpy"), "completion", "bash", "--json"], capture_output=True, text=True,
                                    env=env(), timeout=50).stdout)
    assert doc["shell"] == "bash" and "_FLINKPY_COMPLETE=complete_bash" in doc["script"]
