"""The click that typer runs on (typer >= 0.22 vendors it), imported from one place.

Only this module knows where click lives, so a typer upgrade touches one file.
"""

from __future__ import annotations

from typer.exceptions import Abort, Exit

try:
    from typer import _click as click  # type: ignore[attr-defined]
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError  # type: ignore[attr-defined]
except ImportError:  # older typer depends on click itself
    import click  # type: ignore[no-redef]
    from click.exceptions import ClickException, NoArgsIsHelpError, UsageError  # type: ignore[no-redef]

__all__ = ["Abort", "ClickException", "Exit", "NoArgsIsHelpError", "UsageError", "click"]
