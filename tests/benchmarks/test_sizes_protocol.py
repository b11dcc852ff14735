"""``benchmarks.sizes`` times the generic and static kernels alike: each is called once untimed, then
in turns of the same count of calls (at least two, and enough for the static kernel to take the floor
of CPU time), the two taking turns to run first; both write into one set of preallocated ``out=``
arrays, the same each call.  The clock here is a virtual one that each call advances, so the ratios are
exact."""

import numpy as np
import pytest

import tensorad as ta
from benchmarks.sizes import LEAST_CALLS, compare, into


class Clock:
    """A clock that advances only when a call costs something."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def kernel(clock: Clock, cost: float, first: float, log: list, name: str):
    """A call that costs ``first`` the first time and ``cost`` after, logged by ``name``."""
    def call():
        clock.now += first if not any(n == name for n in log) else cost
        log.append(name)
    return call


@pytest.mark.parametrize("cost, calls", [(2.0 ** -10, 64), (0.25, LEAST_CALLS)])
def test_turns_run_equal_counts_of_calls_after_an_untimed_call_each(cost, calls):
    clock, log = Clock(), []
    generic = kernel(clock, 1.25 * cost, 50.0, log, "generic")  # (a first call paying pages and caches)
    static = kernel(clock, cost, 80.0, log, "static")
    rounds = 5
    assert compare(generic, static, rounds, clock, floor_s=2.0 ** -4) == 1.25
    assert log.count("generic") == 1 + rounds * calls
    assert log.count("static") == 2 + rounds * calls  # (one more: the estimate of a call)
    turns = [log[k] for k in range(3, len(log), calls)]  # (each turn's first call)
    assert turns == ["static", "generic", "generic", "static"] * 2 + ["static", "generic"]


def test_the_ratio_is_the_median_of_the_rounds():
    """A round disturbed by another process (here the generic kernel's third turn, three times slower)
    does not move the median of five rounds."""
    clock, log = Clock(), []
    static = kernel(clock, 1.0, 1.0, log, "static")
    turns = iter([1.0] + [1.5] * 4 + [4.5] * 2 + [1.5] * 4)  # (an untimed call, then two a turn)

    def generic():
        clock.now += next(turns, 1.5)
    assert compare(generic, static, 5, clock, floor_s=0.0) == 1.5


def test_calls_write_into_the_same_preallocated_outputs():
    """The same arrays serve the generic kernel and the static kernel of each size, and each call
    writes them in place: one output, and a tuple of two."""
    n = ta.size_var("n")
    X = ta.placeholder((n, 8), name="X")
    Y = ta.compute((n, 8), lambda i, j: X[i, j] * 2.0, name="Y")
    Z = ta.compute((n, 8), lambda i, j: X[i, j] + 1.0, name="Z")
    for outputs in ([Y], [Y, Z]):
        generic = ta.build(outputs, [X])
        assert generic.generic
        for size in (1, 7, 300):
            x = np.random.default_rng(size).standard_normal((size, 8)).astype(np.float32)
            *bound, x_at = ta.bind([*outputs, X], n=size)
            static = ta.build(bound, [x_at])
            outs = [np.full((size, 8), np.nan, np.float32) for _ in outputs]
            for k in (generic, static):
                call = into(k, [x], outs)
                got = ta.symbolic.listed(call())
                assert len(got) == len(outs) and all(g is o for g, o in zip(got, outs))
                np.testing.assert_array_equal(outs[0], x * 2.0)
                if len(outs) > 1:
                    np.testing.assert_array_equal(outs[1], x + 1.0)
                for o in outs:
                    o[...] = np.nan
