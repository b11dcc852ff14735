"""Definition-time bounds checking: out-of-bounds reads are rejected, guarded ones accepted."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.ir import var
from tensorad.lang import make_compute


@pytest.fixture
def A():
    return ta.placeholder((4, 4), name="A")


def test_out_of_bounds_read_names_tensor_index_and_point(A):
    with pytest.raises(ta.OutOfBoundsError) as info:
        ta.compute((5,), lambda i: A[i, 0], name="T")
    msg = str(info.value)
    assert "T: read A(i, 0)" in msg and "tensor A [4, 4]" in msg
    assert "index 0 (i)" in msg and "at i=4" in msg
    assert isinstance(info.value, IndexError)


def test_negative_index_is_out_of_bounds(A):
    with pytest.raises(ta.OutOfBoundsError, match=r"index 1 \(\(j - 1\)\) leaves \[0, 4\) at i=\d, j=0"):
        ta.compute((4, 4), lambda i, j: A[i, j - 1], name="T")


def test_guarded_padding_is_accepted(A):
    P = ta.compute((6, 6), lambda i, j: ta.if_then_else(
        (i >= 1) & (i < 5) & (j >= 1) & (j < 5), A[i - 1, j - 1], 0.0), name="P")
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_array_equal(ta.evaluate(P, {A: a}), np.pad(a, 1))


def test_guard_must_cover_every_out_of_bounds_point(A):
    with pytest.raises(ta.OutOfBoundsError, match=r"at i=5"):  # i - 1 = 4 is not excluded
        ta.compute((6,), lambda i: ta.if_then_else(i >= 1, A[i - 1, 0], 0.0), name="P")


def test_nested_and_negated_guards(A):
    ta.compute((6,), lambda i: ta.if_then_else(i >= 1, ta.if_then_else(i < 5, A[i - 1, 0], 0.0), 0.0))
    ta.compute((6,), lambda i: ta.if_then_else((i < 1) | (i >= 5), 0.0, A[i - 1, 0]))
    ta.compute((6,), lambda i: ta.if_then_else(~((i >= 1) & (i < 5)), 0.0, A[i - 1, 0]))


def test_select_evaluates_both_branches_so_it_is_rejected(A):
    with pytest.raises(ta.OutOfBoundsError, match="read A"):
        ta.compute((6,), lambda i: ta.select((i >= 1) & (i < 5), A[i - 1, 0], 0.0), name="S")


def test_data_dependent_guard_does_not_excuse(A):
    with pytest.raises(ta.OutOfBoundsError, match="at i=4"):
        ta.compute((5,), lambda i: ta.if_then_else(A[0, 0] > 0.0, A[i, 0], 0.0))


def test_reduction_where_condition_guards_reads(A):
    k = ta.reduce_axis((0, 4), "k")
    ok = ta.compute((4,), lambda i: ta.sum(A[i, i + k], axis=k, where=i + k < 4), name="ok")
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_array_equal(ta.evaluate(ok, {A: a}), [a[i, i:].sum() for i in range(4)])
    k2 = ta.reduce_axis((0, 4), "k")
    with pytest.raises(ta.OutOfBoundsError, match=r"index 1 \(\(i \+ k\)\).*at i=\d, k=\d"):
        ta.compute((4,), lambda i: ta.sum(A[i, i + k2], axis=k2, where=k2 < 4), name="bad")


def test_reduction_axis_range_is_checked(A):
    k = ta.reduce_axis((1, 5), "k")
    with pytest.raises(ta.OutOfBoundsError, match="at .*k=4"):
        ta.compute((4,), lambda i: ta.sum(A[i, k], axis=k))


def test_lifted_nested_reduction_is_checked(A):
    k = ta.reduce_axis((0, 5), "k")
    with pytest.raises(ta.OutOfBoundsError, match=r"T\.red: read A"):
        ta.compute((4,), lambda i: ta.sum(A[i, k], axis=k) * 2.0, name="T")


def test_floor_division_and_modulo_indices_are_exact(A):
    F = ta.compute((16,), lambda n: A[n // 4, n % 4], name="F")
    assert F.shape == (16,)
    with pytest.raises(ta.OutOfBoundsError, match=r"index 0 \(\(n // 4\)\) leaves \[0, 4\) at n=16"):
        ta.compute((17,), lambda n: A[n // 4, n % 4], name="F")
    ta.compute((8,), lambda n: A[(n - 5) % 4, (n + 3) // 3])  # -5..2 mod 4 and 1..3


def test_transposed_and_reversed_reads(A):
    ta.compute((4, 4), lambda i, j: A[j, 3 - i])
    with pytest.raises(ta.OutOfBoundsError, match="at i=0"):
        ta.compute((4, 4), lambda i, j: A[j, 4 - i])


def test_non_affine_index_is_a_clear_error(A):
    with pytest.raises(ta.OutOfBoundsError, match=r"index 0 \(\(i \* j\)\) is not quasi-affine"):
        ta.compute((2, 2), lambda i, j: A[i * j, 0])


def test_check_bounds_false_skips_the_proof(A):
    i = var("i", 0, 5)
    (T,) = make_compute("T", (i,), (A[i, 0],), check_bounds=False)
    assert T.shape == (5,)
    with pytest.raises(ta.OutOfBoundsError):  # the evaluator still never reads out of bounds
        ta.evaluate(T, {A: np.zeros((4, 4), np.float32)})


def test_constant_indices_in_range_and_out_of_range(A):
    ta.compute((2,), lambda i: A[3, 0] + A[0, 3])
    with pytest.raises(ta.OutOfBoundsError, match="tensor A"):
        ta.compute((2,), lambda i: A[4, 0])


def test_zero_dim_reads():
    s = ta.placeholder((), name="s")
    T = ta.compute((3,), lambda i: s[()] * 2.0)
    assert T.shape == (3,)
