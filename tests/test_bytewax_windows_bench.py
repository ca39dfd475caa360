"""The benchmark's Bytewax part: without Bytewax it says it was skipped and how to install it;
with Bytewax (never a test dependency) a small run reports a rate for each kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from flinkpy.benchmarks import bytewax_windows
from flinkpy.benchmarks.workloads import make_lines


@pytest.mark.timeout(30)
def test_without_bytewax_the_part_is_skipped_with_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bytewax_windows, "available", lambda: False)
    logged: list[str] = []
    result = bytewax_windows.measure([], 0, 1, min, logged.append)
    assert "skipped" in result and bytewax_windows.INSTALL in result["skipped"]
    assert any(bytewax_windows.INSTALL in line for line in logged)
    assert bytewax_windows.INSTALL in bytewax_windows.report(result)[0]
    assert bytewax_windows.report({}) == []


@pytest.mark.timeout(120)
def test_with_bytewax_each_kind_gets_a_rate(tmp_path: Path) -> None:
    pytest.importorskip("bytewax")
    lines = make_lines(200)
    path = tmp_path / "words.txt"
    path.write_text("\n".join(lines) + "\n")
    result = bytewax_windows.measure([str(path)], 2000, 1, min, lambda _: None)
    for kind in bytewax_windows.KINDS:
        result[f"{kind}_vs_flinkpy_rolling"] = 1.0
        assert result[f"{kind}_rate"] > 0
    assert len(bytewax_windows.report(result)) == 1 + len(bytewax_windows.KINDS)
