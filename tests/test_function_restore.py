"""A user function restored in its task (unpickled) keeps CPython's compact attribute layout
(``Function.__setstate__``), and restores the same attributes pickle's default would."""

from __future__ import annotations

import gc
import pickle
import sys

import pytest

from flinkpy.common.functions import MapFunction, SinkFunction


class Counting(SinkFunction):
    def __init__(self) -> None:
        self.count = 0
        self.label = "sink"

    def invoke(self, value, context) -> None:
        self.count += 1


class Slotted(MapFunction):
    __slots__ = ("factor",)

    def __init__(self) -> None:
        self.factor = 3
        self.offset = 1

    def map(self, value):
        return value * self.factor + self.offset


class Guarded(MapFunction):
    """A class whose __setattr__ refuses changes after construction, as frozen classes do."""

    def __init__(self) -> None:
        object.__setattr__(self, "n", 5)

    def __setattr__(self, name, value):
        raise AttributeError(f"{name} is read-only")

    def map(self, value):
        return value + self.n


@pytest.mark.skipif(sys.implementation.name != "cpython" or not (3, 11) <= sys.version_info[:2] < (3, 13),
                    reason="the compact layout's visible trace (no dict among the referents) is CPython 3.11/3.12's")
def test_a_restored_function_keeps_its_attributes_out_of_a_dict():
    # pickle's default restore writes into __dict__, which makes every self.x of a per-record
    # method a dictionary lookup from then on; the traverse of an object whose attributes stay
    # inline shows no dict
    f = Counting()
    f.count = 41
    restored = pickle.loads(pickle.dumps(f))
    assert not any(type(r) is dict for r in gc.get_referents(restored))
    restored.invoke("x", None)
    assert (restored.count, restored.label) == (42, "sink")


def test_slots_and_dict_state_are_both_restored():
    f = Slotted()
    f.factor, f.offset = 4, 2
    restored = pickle.loads(pickle.dumps(f))
    assert (restored.factor, restored.offset, restored.map(10)) == (4, 2, 42)


def test_restoring_bypasses_the_class_setattr_as_pickle_does():
    restored = pickle.loads(pickle.dumps(Guarded()))
    assert restored.map(1) == 6


def test_a_state_that_is_not_a_dict_is_refused():
    f = Counting.__new__(Counting)
    with pytest.raises(TypeError, match="Counting.*not a dict"):
        f.__setstate__(["count", 1])
