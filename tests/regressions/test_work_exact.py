"""``lower(...).work`` is an exact int for any size.

A ``2**40 x 2**40`` elementwise op reported 0 work (int64 overflow of ``2**80``); a triangle
of ``2**40`` rows asked NumPy for an 8 TiB array (the counter expanded every row).  The oracles
are Python integer formulas and brute-force counts."""

from __future__ import annotations

import pytest
from tensorad.codegen.loops import work

import tensorad as ta


def test_work_of_a_huge_elementwise_op_is_exact():
    n = 2**40
    A = ta.placeholder((n, n), name="A")
    Y = ta.compute((n, n), lambda i, j: A[i, j] * 2.0, name="Y")
    w = ta.lower([Y], [A]).work
    assert isinstance(w, int) and w == 2**80


@pytest.mark.parametrize("n", [2**40, 2**31 + 5])
def test_work_of_a_huge_triangle_is_exact(n):
    A = ta.placeholder((n, n), name="A")
    k = ta.reduce_axis((0, n), "k")
    S = ta.compute((n,), lambda i: ta.sum(A[i, k], axis=k, where=k <= i), name="S")
    T = ta.compute((n,), lambda i: ta.sum(A[i, k], axis=k, where=(k > i) & (k < 2 * i)), name="T")
    assert ta.lower([S], [A]).work == n * (n + 1) // 2
    assert ta.lower([T], [A]).work == sum_closed(n)


def sum_closed(n: int) -> int:
    """``sum over i < n of max(0, min(2i, n) - i - 1)`` (the ``k`` with ``i < k < 2i``, ``k < n``):
    rows ``2 <= i <= n // 2`` have ``i - 1`` terms, rows ``i > n // 2`` have ``n - i - 1``."""
    half = n // 2
    return (half - 1) * half // 2 + (n - half - 2) * (n - half - 1) // 2


@pytest.mark.parametrize("n", [7, 50, 1001])
def test_closed_form_matches_enumeration(n):
    A = ta.placeholder((n, n), name="A")
    k = ta.reduce_axis((0, n), "k")
    T = ta.compute((n,), lambda i: ta.sum(A[i, k], axis=k, where=(k > i) & (k < 2 * i)), name="T")
    assert sum_closed(n) == sum(max(0, min(2 * i, n) - i - 1) for i in range(n))
    assert ta.lower([T], [A]).work == sum_closed(n)


@pytest.mark.parametrize("rows", [1, 6, 40])
def test_expansion_in_chunks_is_exact(monkeypatch, rows):
    """A bound that is not affine (``k < i % 3 + i // 4``) is counted by expansion; with a
    chunk of 7 points, frontier points and a single point's iterations are split across
    chunks."""
    monkeypatch.setattr(work, "CHUNK", 7)
    A = ta.placeholder((rows, rows + 20), name=f"A{rows}")
    k = ta.reduce_axis((0, rows + 20), "k")
    S = ta.compute((rows, 3), lambda i, j: ta.sum(A[i, k], axis=k, where=k < i % 3 + i // 4 + j),
                   name=f"S{rows}")
    want = sum(min(rows + 20, i % 3 + i // 4 + j) for i in range(rows) for j in range(3))
    assert ta.lower([S], [A], choices={S.name + "#0": "loops"}).work == want  # (plain loops: not a scan)
