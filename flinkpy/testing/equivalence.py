"""assert_restore_equivalent: a snapshot and a restore anywhere in a script change nothing.

A function keeps its promise of exactly-once state when a run that is snapshotted, stopped and
restored — at the same parallelism or another, its key groups redistributed — emits what a run
without interruption emits. The check replays one script three ways on
:class:`~flinkpy.testing.OperatorHarness`:

1. uninterrupted (the reference);
2. the same, with a snapshot before each chosen step (a snapshot must change nothing either);
3. for each snapshot and each restore parallelism, a new harness restored from it that runs the
   rest of the script.

Outputs are compared step by step: a step's records (and each side output's) as a multiset,
because records of different keys may leave different subtasks in any order, as in a job. The
first difference fails with a :class:`RestoreDivergence` that names the snapshot, the restore
parallelism, the step, and the records missing and unexpected.

The classic bug it catches is state in a plain attribute of the function instead of managed
state: the attribute is not in the snapshot, so the restored run starts it afresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from flinkpy.errors import UsageError
from flinkpy.testing.harness import OperatorHarness
from flinkpy.testing.records import Snapshot, Step, StepOutput, StreamRecord

#: how many records a failure message lists per side before it says how many more there are
SHOWN = 8


@dataclass(frozen=True)
class Divergence:
    """Where one interrupted run's output differs from the uninterrupted run's."""

    #: the snapshot was taken after this many steps
    snapshot_after: int
    #: the parallelism of the restored run (None: the snapshotting run itself differed)
    restored_parallelism: int | None
    #: the step (0-based) whose output differs; None: output emitted on restore
    step: int | None
    step_text: str
    #: "main output" or "side output '<tag>'"
    output: str
    expected: tuple[StreamRecord, ...]
    actual: tuple[StreamRecord, ...]
    missing: tuple[StreamRecord, ...]
    unexpected: tuple[StreamRecord, ...]

    def where(self, steps: int, parallelism: int) -> str:
        if self.restored_parallelism is None:
            return f"taking snapshots (the first after step {self.snapshot_after} of {steps}) changed the output"
        return (f"restored from a snapshot after step {self.snapshot_after} of {steps} (parallelism {parallelism}) "
                f"at parallelism {self.restored_parallelism}")


class RestoreDivergence(AssertionError):
    """A restored run emitted something else than the uninterrupted run; ``divergences`` lists
    the first difference of every interrupted run that differed."""

    def __init__(self, divergences: list[Divergence], steps: int, parallelism: int, runs: int):
        self.divergences = divergences
        first = divergences[0]
        step = "on restore, before any step" if first.step is None else f"step {first.step + 1} ({first.step_text})"
        lines = [
            f"the output differs from the uninterrupted run: {first.where(steps, parallelism)}: {step}, {first.output}",
            f"  uninterrupted: {_show(first.expected)}",
            f"  interrupted:   {_show(first.actual)}",
        ]
        if first.missing:
            lines.append(f"  missing:       {_show(first.missing)}")
        if first.unexpected:
            lines.append(f"  unexpected:    {_show(first.unexpected)}")
        if len(divergences) > 1:
            others = sorted({(d.snapshot_after, d.restored_parallelism) for d in divergences}, key=lambda kp: (kp[1] is not None, kp))
            listed = ", ".join(f"after step {k} at parallelism {p}" if p is not None else "the run that took the snapshots" for k, p in others[:SHOWN])
            more = f" and {len(others) - SHOWN} more" if len(others) > SHOWN else ""
            lines.append(f"  {len(divergences)} of {runs} interrupted runs differ: {listed}{more}")
        lines.append("  (a common cause: state kept outside managed state, in an attribute of the function, is not in snapshots)")
        super().__init__("\n".join(lines))


def assert_restore_equivalent(
    build: Callable[..., Any],
    script: Sequence[Step],
    *,
    inputs: int = 1,
    parallelism: int = 1,
    restore_parallelism: Sequence[int] | None = None,
    at: Sequence[int] | None = None,
    max_parallelism: int = 128,
    state_backend: Any = None,
    processing_time: int = 0,
) -> None:
    """Fail with :class:`RestoreDivergence` unless every snapshot-and-restore of ``script`` emits
    what the uninterrupted run emits.

    ``at``: the snapshot positions, as numbers of steps done (default: before every step).
    ``restore_parallelism``: the parallelisms to restore at (default: ``parallelism`` and one
    more, so that key groups move between subtasks; only ``parallelism`` when an input is not
    keyed, as records spread round robin meet other records at another parallelism). The other
    arguments are the harness's.

    >>> from flinkpy.testing import Element, Watermark
    >>> def build(s):
    ...     return s.key_by(lambda r: r[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
    >>> assert_restore_equivalent(build, [Element(("a", 1)), Element(("b", 2)), Element(("a", 3))])
    """
    steps = list(script)
    positions = sorted(set(range(len(steps)) if at is None else at))
    if any(not 0 <= k <= len(steps) for k in positions):
        raise UsageError(f"at={positions}: a snapshot position is a number of steps done, in 0..{len(steps)}",
                         remedy=f"pass positions between 0 and {len(steps)}")

    def harness(**kw: Any) -> OperatorHarness:
        options = dict(inputs=inputs, parallelism=parallelism, max_parallelism=max_parallelism,
                       state_backend=state_backend, processing_time=processing_time)
        options.update(kw)
        return OperatorHarness(build, **options)

    with harness() as reference:
        expected = reference.run(steps)
        keyed = reference.keyed_inputs
    targets = sorted(set(restore_parallelism or ((parallelism, parallelism + 1) if keyed else (parallelism,))))
    divergences: list[Divergence] = []
    snapshots: dict[int, Snapshot] = {}
    with harness() as snapshotting:
        outputs = []
        for i, step in enumerate(steps + [None]):
            if i in positions:
                snapshots[i] = snapshotting.snapshot()
            if step is not None:
                outputs.append(snapshotting.apply(step))
    divergences += _compare(expected, outputs, steps, positions[0] if positions else 0, None, 0)[:1]
    for k in positions:
        for q in targets:
            with harness(parallelism=q, restore_from=snapshots[k], processing_time=None) as restored:
                found = _compare([StepOutput()], [restored.restored], steps, k, q, None)
                found += _compare(expected[k:], restored.run(steps[k:]), steps, k, q, k)
            divergences += found[:1]
    if divergences:
        raise RestoreDivergence(divergences, len(steps), parallelism, 1 + len(positions) * len(targets))


def _compare(expected: list[StepOutput], actual: list[StepOutput], steps: list[Step], snapshot_after: int,
             restored_parallelism: int | None, first_step: int | None) -> list[Divergence]:
    """The differences, step by step, of two runs' outputs (``first_step``: the index of the
    first step compared; None: the outputs of a restore, before any step)."""
    found = []
    for offset, (want, got) in enumerate(zip(expected, actual)):
        step = None if first_step is None else first_step + offset
        text = "" if step is None else str(steps[step])
        pairs = [("main output", want.records, got.records)]
        pairs += [(f"side output {tag!r}", want.side.get(tag, []), got.side.get(tag, [])) for tag in sorted(set(want.side) | set(got.side))]
        for output, w, g in pairs:
            missing, unexpected = _difference(w, g)
            if missing or unexpected:
                found.append(Divergence(snapshot_after, restored_parallelism, step, text, output, tuple(w), tuple(g), missing, unexpected))
    return found


def _difference(expected: list[StreamRecord], actual: list[StreamRecord]) -> tuple[tuple[StreamRecord, ...], tuple[StreamRecord, ...]]:
    """(missing, unexpected): the multiset difference both ways, by equality (values need not
    be hashable)."""
    unexpected = list(actual)
    missing = []
    for record in expected:
        for i, other in enumerate(unexpected):
            if other == record:
                del unexpected[i]
                break
        else:
            missing.append(record)
    return tuple(missing), tuple(unexpected)


def _show(records: tuple[StreamRecord, ...]) -> str:
    shown = ", ".join(str(r) for r in records[:SHOWN])
    more = f", ... {len(records) - SHOWN} more" if len(records) > SHOWN else ""
    return f"[{shown}{more}]"
