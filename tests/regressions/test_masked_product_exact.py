"""A masked product is exact at inf and NaN in the packed micro-kernel.

The micro-kernel (codegen/gemm/contraction.py) packs a side's ``where`` condition as a zero of that
side; the product ``0 * other`` is NaN where the other factor is inf or NaN at an excluded
point, but the language excludes the term (``ta.evaluate``; docs/conventions.md, "one program
has one meaning").  A factor ``select(c, 1, 0)`` is the opposite: a literal zero times the
other factors, NaN at an inf.  The oracles are NumPy formulas written here.
"""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

import tensorad as ta

N = 64  # 64^3 multiply-adds: the micro-kernel's default threshold (contraction.MICROKERNEL_MIN)


def _triangle(side: str, dtype: str, mask_factor: bool = False):
    """``c[i, j] = sum_r a[r, i] b[r, j]`` over ``r >= j`` (side B's condition) or ``r >= i``
    (side A's); ``mask_factor``: the condition is a factor ``select(cond, 1, 0)`` instead."""
    a = ta.placeholder((N, N), dtype, name="a")
    b = ta.placeholder((N, N), dtype, name="b")
    r = ta.reduce_axis((0, N), name="r")

    def body(i, j):
        cond = r >= (j if side == "b" else i)
        if mask_factor:
            return ta.sum(ta.select(cond, ta.const(1.0, dtype), ta.const(0.0, dtype)) * a[r, i] * b[r, j],
                          axis=[r])
        return ta.sum(a[r, i] * b[r, j], axis=[r], where=cond)

    return a, b, ta.compute((N, N), body, name="c")


def _want(av, bv, side, mask_factor=False):
    """The sum over the included ``r`` only (a ``where``), or the IEEE product with the
    literal mask (``0 * inf = NaN``), in float64."""
    a64, b64 = av.astype("float64"), bv.astype("float64")
    r = np.arange(N)
    keep = (r[:, None] >= r[None, :]).astype("float64")  # keep[r, x]: r >= x
    with np.errstate(invalid="ignore", over="ignore"):
        if mask_factor:  # sum_r (mask * a[r, i]) * b[r, j]: NaN where a 0 meets an inf
            if side == "b":
                terms = (keep[:, None, :] * a64[:, :, None]) * b64[:, None, :]
            else:
                terms = (keep[:, :, None] * a64[:, :, None]) * b64[:, None, :]
            return terms.sum(axis=0)
        want = np.zeros((N, N))
        for i in range(N):
            for j in range(N):
                ks = r[r >= (j if side == "b" else i)]
                want[i, j] = np.sum(a64[ks, i] * b64[ks, j])
        return want


def _data(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, N)).astype(dtype), rng.standard_normal((N, N)).astype(dtype)


def _check(got, want, dtype):
    rtol = 1e-4 if dtype == "float32" else 1e-12
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=rtol, atol=rtol * 10)


CASES = [  # (dtype, threads, microkernel, checked)
    ("float64", 1, None, False),
    ("float32", 2, None, False),
    ("float64", 2, True, True),
]


@pytest.mark.parametrize("dtype,threads,microkernel,checked", CASES)
@pytest.mark.parametrize("side", ["a", "b"])
def test_inf_and_nan_at_excluded_points_are_excluded(side, dtype, threads, microkernel, checked):
    """The lead's program: an inf in ``a`` at row ``r = 0``, which only ``j = 0``
    includes (``r >= j``), gave NaN at ``c[5, 1:]``.  Also a NaN, on the other side, and
    non-finite values at included points (which stay NaN or inf)."""
    a, b, c = _triangle(side, dtype)
    f = ta.build([c], [a, b], num_threads=threads, microkernel=microkernel, checked=checked)
    av, bv = _data(dtype)
    # excluded: r = 0 < x for every other column; included: r = N - 1 >= x always
    one, other = (av, bv) if side == "b" else (bv, av)  # ``other`` carries the condition
    one[0, 5], one[0, 9], other[1, 3] = np.inf, np.nan, -np.inf  # excluded but where x <= r
    one[N - 1, 7], one[N - 1, 2] = np.nan, np.inf  # included everywhere
    got = f(av, bv)
    want = _want(av, bv, side)
    assert np.isnan(want).any() and np.isinf(want).any()
    assert np.isfinite(want[5, 1:] if side == "b" else want[1:, 5]).all()
    _check(got, want, dtype)


@pytest.mark.parametrize("side", ["a", "b"])
def test_mask_factor_is_an_ieee_zero(side):
    """``select(r >= j, 1, 0) * a * b`` means ``0 * inf = NaN`` at an excluded inf on either
    side (the literal zero is a value, docs/conventions.md): the kernel computed the mask as a
    condition of its side and skipped an inf of that side."""
    dtype = "float64"
    a, b, c = _triangle(side, dtype, mask_factor=True)
    f = ta.build([c], [a, b])
    av, bv = _data(dtype, 1)
    if side == "b":
        av[0, 5], bv[0, 9] = np.inf, np.inf
    else:
        bv[0, 5], av[0, 9] = np.inf, np.inf
    got = f(av, bv)
    want = _want(av, bv, side, mask_factor=True)
    _check(got, want, dtype)
    np.testing.assert_array_equal(np.isnan(ta.evaluate([c], {a: av, b: bv})[0]), np.isnan(want))


def test_padded_window_gradient_excludes_its_padding():
    """The input gradient of a padded 1-d convolution, written as a sum over ``(f, rx)`` under
    the window's ``where``: an inf weight tap is excluded where its window leaves the input."""
    n_, f_, c_, length, taps = 2, 32, 64, 64, 3
    h = ta.placeholder((n_, f_, length), "float64", name="h")
    w = ta.placeholder((f_, c_, taps), "float64", name="w")
    f = ta.reduce_axis((0, f_), name="f")
    rx = ta.reduce_axis((0, taps), name="rx")
    dx = ta.compute((n_, c_, length), lambda n, ch, x: ta.sum(
        ta.if_then_else((x - rx + 1 >= 0) & (x - rx + 1 < length), h[n, f, x - rx + 1], 0.0) * w[f, ch, rx],
        axis=[f, rx], where=(x - rx + 1 >= 0) & (x - rx + 1 < length)), name="dx")
    fn = ta.build([dx], [h, w])
    rng = np.random.default_rng(2)
    hv, wv = rng.standard_normal((n_, f_, length)), rng.standard_normal((f_, c_, taps))
    wv[3, 7, 0] = np.inf  # tap 0 reads h[x + 1]: excluded at x = length - 1 only
    want = np.zeros((n_, c_, length))
    for t in range(taps):
        for x in range(length):
            y = x - t + 1
            if 0 <= y < length:
                with np.errstate(invalid="ignore"):
                    want[:, :, x] += hv[:, :, y] @ wv[:, :, t]
    assert np.isfinite(want[:, 7, length - 1]).all() and not np.isfinite(want[:, 7, 0]).all()
    _check(fn(hv, wv), want, "float64")


def test_only_guarded_products_scan_and_the_scan_is_vector_code():
    """The cost: a product with no condition gets no fixer; a guarded one calls the library's NaN scan
    (compiled once per machine with the library's core, not once per product: vector NaN tests, ``fcmp
    uno``), its scalar sums only behind it, in a repair function compiled ``optnone`` (cold code: LLVM's
    time goes to the hot loops)."""
    from tensorad.codegen.gemm import library
    from tensorad.codegen.target import host_target

    a, b, c = _triangle("b", "float64")
    r = ta.reduce_axis((0, N), name="r")
    plain = ta.compute((N, N), lambda i, j: ta.sum(a[r, i] * b[r, j], axis=[r]), name="plain")
    guarded = ta.build([c], [a, b])
    assert "_fix" in guarded.llvm_ir_unoptimized
    called = re.findall(r"^declare i1 @\"?(tensorad_gemm_\w+_nanscan)", guarded.llvm_ir_unoptimized, re.M)
    assert len(called) == 1 and "_nanscan" not in "".join(
        re.findall(r"^define [^\n]*", guarded.llvm_ir_unoptimized, re.M))
    dtype, mr, nr, _, part = library.parse_symbol(called[0])
    assert part == "core"
    core = library.piece_ir(dtype, mr, nr, part, host_target())
    scan = re.search(r"define [^\n]*@\"?" + called[0] + r"\"?\((.*?)\n}\n", core, re.S).group(1)
    assert "fcmp uno <" in scan
    assert re.search(r"define [^\n]*_repair\"\([^\n]*\boptnone\b", guarded.llvm_ir_unoptimized)
    assert "_fix" not in ta.build([plain], [a, b]).llvm_ir_unoptimized


@pytest.mark.parametrize("target", ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("dtype,n", [("float32", 37), ("float64", 64)])
def test_a_nan_in_the_last_columns_alone_is_repaired(dtype, n, target):
    """The scan reads a block's columns in vectors, then the rest in one masked vector (AVX-512) or one by
    one (AVX2): an excluded inf whose NaN reaches only the last column, of an odd width (past the last whole
    vector) or of one of whole steps of vectors, is found and repaired.  The oracle is the sum over the
    included terms in NumPy float64."""
    from tensorad.codegen.target import host_target, parse_target

    if not parse_target(target).runs_here(host_target()):
        target = "llvm"  # (a CPU without AVX-512: its own scan, checked the same way)
    a = ta.placeholder((n, n), dtype, name="a")
    b = ta.placeholder((n, n), dtype, name="b")
    r = ta.reduce_axis((0, n), name="r")
    c = ta.compute((n, n), lambda i, j: ta.sum(a[r, i] * b[r, j], axis=[r], where=r >= j), name="c")
    f = ta.build([c], [a, b], target=target, microkernel=True)
    assert "_fix" in f.llvm_ir_unoptimized
    rng = np.random.default_rng(3)
    av, bv = rng.standard_normal((n, n)).astype(dtype), rng.standard_normal((n, n)).astype(dtype)
    av[n - 2, 4] = np.inf  # excluded at j = n - 1 only (r = n - 2 < j): c's one NaN before its repair
    keep = np.arange(n)[:, None] >= np.arange(n)[None, :]  # keep[r, j]
    with np.errstate(invalid="ignore"):
        want = np.array([[np.sum(av[keep[:, j], i].astype("float64") * bv[keep[:, j], j]) for j in range(n)]
                         for i in range(n)])
    assert np.isfinite(want[4, n - 1]) and np.isinf(want[4, :n - 1]).all() and not np.isnan(want).any()
    _check(f(av, bv), want, dtype)


def test_an_exported_guarded_product_carries_the_library_scan(tmp_path):
    """A shared library (``kernel.export``) and a pickled kernel link the library's core, its NaN scan
    with it: loaded back, the guarded product repairs its excluded inf's NaN as the built kernel does
    (the oracle: NumPy's sum over the included terms)."""
    n = 37
    a = ta.placeholder((n, n), "float32", name="a")
    b = ta.placeholder((n, n), "float32", name="b")
    r = ta.reduce_axis((0, n), name="r")
    c = ta.compute((n, n), lambda i, j: ta.sum(a[r, i] * b[r, j], axis=[r], where=r >= j), name="c")
    f = ta.build([c], [a, b], microkernel=True)
    rng = np.random.default_rng(4)
    av, bv = rng.standard_normal((n, n)).astype("float32"), rng.standard_normal((n, n)).astype("float32")
    av[n - 2, 4] = np.inf
    keep = np.arange(n)[:, None] >= np.arange(n)[None, :]
    with np.errstate(invalid="ignore"):
        want = np.array([[np.sum(av[keep[:, j], i].astype("float64") * bv[keep[:, j], j]) for j in range(n)]
                         for i in range(n)])
    for kernel in (ta.load(f.export(tmp_path / "guarded.so")), pickle.loads(pickle.dumps(f))):
        _check(kernel(av, bv), want, "float32")
