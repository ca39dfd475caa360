"""Network-namespace hosts for the partition tests: :mod:`flinkpy.cluster.netns`, and whether a
test may skip where namespaces cannot be made."""

from __future__ import annotations

import os

from flinkpy.cluster.netns import Host, Hosts, HostNames, hosts, unavailable  # noqa: F401


def required() -> str | None:
    """The reason to skip a namespace test here, or None to run it (always None on CI, where
    the test then fails with the real error instead of skipping)."""
    return None if os.environ.get("CI") else unavailable()
