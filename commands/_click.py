"""The click that typer runs on (typer vendors it as ``typer._click``), imported from one place.

Only this module knows where click lives, so a typer upgrade touches one file.
"""

from __future__ import annotations

from typer import _click as click  # type: ignore[attr-defined]
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError  # type: ignore[attr-defined]
from typer.exceptions import Abort, Exit

__all__ = ["Abort", "ClickException", "Exit", "NoArgsIsHelpError", "UsageError", "click"]
