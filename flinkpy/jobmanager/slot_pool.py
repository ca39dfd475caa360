"""SlotPool: which TaskManager slots are free, and which job holds which (pure).

Slot sharing as in Flink's default group: a job needs as many slots as its highest parallelism,
and slot i holds subtask i of every vertex. Slots are spread across TaskManagers (the one with the
most free slots first), so a job of parallelism 2 on two TaskManagers uses both machines.

>>> pool = SlotPool(); pool.add_taskmanager("tm-1", 2); pool.add_taskmanager("tm-2", 2)
>>> pool.allocate("job", 2)
{0: 'tm-1', 1: 'tm-2'}
"""

from __future__ import annotations


class NotEnoughSlots(Exception):
    pass


class SlotPool:
    def __init__(self) -> None:
        self.capacity: dict[str, int] = {}
        self.used: dict[str, dict[str, int]] = {}  # tm -> job -> slots

    def add_taskmanager(self, tm_id: str, slots: int) -> None:
        self.capacity[tm_id] = slots
        self.used.setdefault(tm_id, {})

    def remove_taskmanager(self, tm_id: str) -> None:
        self.capacity.pop(tm_id, None)
        self.used.pop(tm_id, None)

    def free(self, tm_id: str) -> int:
        return self.capacity.get(tm_id, 0) - sum(self.used.get(tm_id, {}).values())

    @property
    def total(self) -> int:
        return sum(self.capacity.values())

    @property
    def available(self) -> int:
        return sum(self.free(tm) for tm in self.capacity)

    def allocate(self, job_id: str, n: int) -> dict[int, str]:
        if n > self.available:
            raise NotEnoughSlots(
                f"the job needs {n} slot(s) but the cluster has {self.available} free "
                f"({len(self.capacity)} TaskManager(s), {self.total} slot(s) in total)"
            )
        free = {tm: self.free(tm) for tm in self.capacity}
        assignment: dict[int, str] = {}
        for i in range(n):
            tm = max(sorted(free), key=lambda t: free[t])
            assignment[i] = tm
            free[tm] -= 1
            self.used[tm][job_id] = self.used[tm].get(job_id, 0) + 1
        return assignment

    def allocate_one(self, job_id: str) -> str:
        """One more slot for ``job_id`` (a restarted subtask whose TaskManager is gone)."""
        if self.available < 1:
            raise NotEnoughSlots("no free slot")
        tm = max(sorted(self.capacity), key=self.free)
        self.used[tm][job_id] = self.used[tm].get(job_id, 0) + 1
        return tm

    def release_one(self, job_id: str, tm_id: str) -> None:
        """Give back one of ``job_id``'s slots on ``tm_id`` (a subtask a rescale removed)."""
        jobs = self.used.get(tm_id, {})
        if jobs.get(job_id, 0) > 1:
            jobs[job_id] -= 1
        else:
            jobs.pop(job_id, None)

    def release(self, job_id: str) -> None:
        for jobs in self.used.values():
            jobs.pop(job_id, None)
