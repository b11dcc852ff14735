"""A kernel keeps the temporaries of a finished call for the next one (its workspace): results
stay those of fresh buffers -- every temporary is written before it is read in every call --
concurrent calls each get their own, and the workspace can be turned off or released.  A generic
kernel's calls share one workspace across sizes and keep what a size needs for a bounded set of sizes.
Oracle: NumPy formulas written here."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tensorad as ta


def _two_step(n: int = 300):
    # a temporary T (exp of X, read twice: materialized) feeding a sum and a product
    X = ta.placeholder((n, 64), "float32", "X")
    T = ta.compute((n, 64), lambda i, j: ta.exp(X[i, j] * 0.5), name="T")
    k = ta.reduce_axis((0, 64), "k")
    S = ta.compute((n,), lambda i: ta.sum(T[i, k], axis=k), name="S")
    P = ta.compute((n, 64), lambda i, j: T[i, j] * T[i, (j + 1) % 64] - S[i], name="P")
    return X, P


def _want(x: np.ndarray) -> np.ndarray:
    t = np.exp(x.astype(np.float64) * 0.5)
    return t * np.roll(t, -1, axis=1) - t.sum(1, keepdims=True)


def test_temporaries_are_reused_and_results_stay_right(rng):
    X, P = _two_step()
    kern = ta.build([P], [X])
    assert kern.signature.temps  # (the program has temporaries)
    first = None
    for _ in range(4):
        x = rng.uniform(-1, 1, X.shape).astype(np.float32)
        np.testing.assert_allclose(kern(x), _want(x), rtol=1e-5, atol=1e-4)
        kept = kern._workspace[0].temps[0]
        first = kept if first is None else first
        assert kept is first  # (the same buffer, call after call)


def test_concurrent_calls_each_get_a_workspace(rng):
    X, P = _two_step(2000)
    kern = ta.build([P], [X], num_threads=1)
    xs = [rng.uniform(-1, 1, X.shape).astype(np.float32) for _ in range(6)]
    got = [None] * len(xs)

    def run(i):
        for _ in range(5):
            got[i] = kern(xs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, g in zip(xs, got):
        np.testing.assert_allclose(g, _want(x), rtol=1e-5, atol=1e-4)
    assert len(kern._workspace) <= 1  # (one set kept)


def test_workspace_off_and_released(rng):
    X, P = _two_step()
    kern = ta.build([P], [X])
    x = rng.uniform(-1, 1, X.shape).astype(np.float32)
    kern(x)
    assert kern._workspace
    kern.release_workspace()
    assert not kern._workspace
    kern.keep_workspace = False
    np.testing.assert_allclose(kern(x), _want(x), rtol=1e-5, atol=1e-4)
    assert not kern._workspace


def test_a_checked_kernel_with_a_workspace_still_reports_a_violation():
    # the violation record is per call (not kept): a bad gather index raises every time
    E = ta.placeholder((5, 8), "float32", "E")
    idx = ta.placeholder((4,), "int32", "idx")
    T = ta.compute((4, 8), lambda i, j: E[idx[i], j] * 2.0, name="T")
    Y = ta.compute((4, 8), lambda i, j: T[i, j] + T[i, (j + 1) % 8], name="Y")
    kern = ta.build([Y], [E, idx], checked=True)
    e = np.ones((5, 8), np.float32)
    good = np.array([0, 1, 2, 4], np.int32)
    np.testing.assert_allclose(kern(e, good), np.full((4, 8), 4.0))
    for _ in range(2):
        try:
            kern(e, np.array([0, 1, 7, 4], np.int32))
        except (IndexError, ValueError, RuntimeError) as err:
            assert "7" in str(err) or "idx" in str(err)
        else:
            raise AssertionError("an out-of-range index was not reported")
    np.testing.assert_allclose(kern(e, good), np.full((4, 8), 4.0))


def test_repeated_calls_keep_one_address_table_until_the_threads_change(rng):
    X, P = _two_step()
    kern = ta.build([P], [X], num_threads=1)
    x = rng.uniform(-1, 1, X.shape).astype(np.float32)
    kern(x)
    table = kern._workspace[0].table
    for _ in range(3):
        np.testing.assert_allclose(kern(x), _want(x), rtol=1e-5, atol=1e-4)
        assert kern._workspace[0].table is table  # (filled in place: no new table, no new temporaries)
    kern.num_threads = 2
    np.testing.assert_allclose(kern(x), _want(x), rtol=1e-5, atol=1e-4)
    assert int(kern._workspace[0].table[1]) == 2  # (the threads the code is called with)


def test_a_generic_kernel_makes_one_workspace_and_keeps_a_bounded_set_of_sizes(rng, monkeypatch):
    from tensorad.codegen.runtime import rows

    X, P = _two_step(ta.size_var("n"))
    kern = ta.build([P], [X])
    assert kern.generic
    made = []
    workspace = kern._workspace
    monkeypatch.setattr(kern, "_workspace", lambda: made.append(1) or workspace())
    x = rng.uniform(-1, 1, (300, 64)).astype(np.float32)
    for size in (1, 7, 300, 7, 1, 64, 7):
        np.testing.assert_allclose(kern(x[:size]), _want(x[:size]), rtol=1e-5, atol=1e-4)
    assert len(made) == 1  # (sizes share the one workspace of calls one at a time)
    for size in range(1, rows.SIZES_KEPT + 20):
        kern(x[:size])
    assert 0 < len(kern.by_size) <= rows.SIZES_KEPT
    np.testing.assert_allclose(kern(x[:1]), _want(x[:1]), rtol=1e-5, atol=1e-4)  # (dropped, made again)
    assert len(made) == 1


def test_a_size_seen_before_still_checks_the_arrays_against_each_other(rng):
    n = ta.size_var("n")
    X, V = ta.placeholder((n, 4), name="X"), ta.placeholder((n,), name="V")
    kern = ta.build(ta.compute((n, 4), lambda i, j: X[i, j] * V[i], name="Y"), [X, V])
    x, v = rng.uniform(-1, 1, (3, 4)).astype(np.float32), rng.uniform(-1, 1, 3).astype(np.float32)
    np.testing.assert_allclose(kern(x, v), x * v[:, None], rtol=1e-6)
    with pytest.raises(ValueError, match=r"disagree on size n: X gives 3, V gives 2"):
        kern(x, v[:2])
    with pytest.raises(ta.codegen.KernelArgumentError, match=r"X: expected shape \[3, 4\], got \[3, 3\]"):
        kern(x[:, :3], v)
    with pytest.raises(ta.codegen.KernelArgumentError, match="expected dtype float32"):
        kern(x, v.astype(np.float64))
    np.testing.assert_allclose(kern(x.T.copy().T, v), x * v[:, None], rtol=1e-6)  # (any layout, copied)


def _centered(n):
    """``Y = (X - mean over the rows) / n``: a sum over the rows read by every row, the count a value."""
    X = ta.placeholder((n, 5), name="X")
    k = ta.reduce_axis((0, n), "k")
    S = ta.compute((5,), lambda j: ta.sum(X[k, j], axis=k), name="S")
    inv = ta.cast("float32", ta.const(1.0, "float64") / ta.cast("float64", n))
    return X, ta.compute((n, 5), lambda i, j: (X[i, j] - S[j] * inv) * inv, name="Y")


def test_a_staged_kernel_makes_what_a_size_needs_once_and_keeps_a_bounded_set(rng, monkeypatch):
    """A staged kernel's call of a count of rows seen before plans nothing: its stages, its count as
    an array and its one kernel are kept by count (up to SIZES_KEPT); a one-block kernel passes the
    count itself and keeps the sums its call does not return in its workspace."""
    from tensorad.codegen.runtime import rows

    X, Y = _centered(ta.size_var("n"))
    kern = ta.build(Y, [X])
    made, make = [], kern.make
    monkeypatch.setattr(kern, "make", lambda n: made.append(n) or make(n))
    x = rng.uniform(-1, 1, (300, 5)).astype(np.float32)
    for size in (7, 7, 1, 7, 200, 7, 200, 1):
        want = (x[:size] - x[:size].astype(np.float64).mean(0)) / size
        np.testing.assert_allclose(kern(x[:size]), want, rtol=1e-5, atol=1e-6)
    assert made == [7, 1, 200]
    block = kern.by_size[7][2]  # (the one kernel of a call of 7 rows)
    assert isinstance(block, rows.RowsKernel) and block.counted and block.shown == 1
    workspace = block._workspace
    monkeypatch.setattr(block, "_workspace", lambda: made.append("workspace") or workspace())
    for _ in range(3):
        assert kern(x[:7]).shape == (7, 5)
    assert made == [7, 1, 200]  # (no plan, no workspace: the last call's kept)
    for size in range(1, rows.SIZES_KEPT + 20):
        kern(x[:size])
    assert 0 < len(kern.by_size) <= rows.SIZES_KEPT
