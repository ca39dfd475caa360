"""`flinkpy completion SHELL`: the shell completion script, printed for the shell to load.

Completion itself runs in `flinkpy`: the script calls it back with the words typed so far in
an environment variable (``_FLINKPY_COMPLETE``), and the command tree answers with the
commands, options and choices that fit. Typer provides both halves; it registers its bash and
zsh support when ``register`` runs (commands.main does, at start-up).
"""

from __future__ import annotations

from typing import Annotated

import typer

from commands.output import emit_json
from commands.options import JsonFlag
from commands.session import session
from flinkpy.errors import UsageError

app = typer.Typer()

SHELLS = ("bash", "zsh")
COMPLETE_VAR = "_FLINKPY_COMPLETE"


def register() -> None:
    """Teach the command tree to answer completion requests from bash and zsh."""
    from typer._completion_classes import completion_init

    completion_init()


@app.command("completion")
def completion(
    shell: Annotated[str, typer.Argument(metavar="SHELL", help="bash or zsh.", show_default=False)],
    json_: JsonFlag = False,
) -> None:
    """Print the completion script for bash or zsh: commands, options and their choices
    complete with Tab.

    Load it in the current shell with source, or install it where the shell looks for
    completions (bash-completion's directory; a directory on zsh's $fpath, as _flinkpy,
    then compinit). With --json, prints {"shell", "script"}.

    Exit status: 0; 2 for a shell other than bash or zsh.

    Examples:

    \b
        source <(flinkpy completion bash)
        flinkpy completion bash > \\
            ~/.local/share/bash-completion/completions/flinkpy
        flinkpy completion zsh > ~/.zfunc/_flinkpy  # put ~/.zfunc in fpath
    """
    from typer._completion_shared import get_completion_script

    if shell not in SHELLS:
        raise UsageError(f"no completion for shell {shell!r}", remedy=f"use one of {', '.join(SHELLS)}")
    script = get_completion_script(prog_name="flinkpy", complete_var=COMPLETE_VAR, shell=shell)
    if session.json:
        emit_json({"shell": shell, "script": script})
    else:
        print(script)
