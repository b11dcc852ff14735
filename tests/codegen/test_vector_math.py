"""The inline vector math (codegen/llvm/vector_math.py) against NumPy / Python's math, on two targets.

Each function is compiled into a small elementwise loop (vectorized by LLVM) for the AVX2
target ``llvm -mcpu=haswell`` and for the host (an AVX-512 CI machine runs that code too), and
checked at special values (0, -0, inf, nan, subnormals, the largest floats), over the whole
range (log-spaced magnitudes of both signs) and on random points: within 1e-6 relative in
float32 and 1e-15 in float64 of a float64 (or ``math``) reference, where a result is not in the
subnormal range (there, within two of the smallest subnormals).  The machine code must call no
library function -- also for a plain SSE2 CPU.
"""

from __future__ import annotations

import ctypes
import math
import re

import llvmlite.ir as ir
import numpy as np
import pytest
from tensorad.codegen.jit import engine as jit
from tensorad.codegen.llvm import vector_math as llvm_math
from tensorad.codegen.llvm.ir_loops import finish_ir, for_range
from tensorad.codegen.target import host_target, parse_target

import tensorad as ta

AVX2 = "llvm -mcpu=haswell"
CALL = re.compile(r"^\s*(callq?\s|jmpq?\s+\*)", re.M)  # a call, or a tail call through a register
TARGETS = [AVX2, "llvm"]
RTOL = {"float32": 1e-6, "float64": 1e-15}
UNARY = {
    "exp": (llvm_math.emit_exp, np.exp),
    "log": (llvm_math.emit_log, np.log),
    "tanh": (llvm_math.emit_tanh, np.tanh),
    "sigmoid": (llvm_math.emit_sigmoid,
                lambda x: np.where(x < 0, np.exp(x) / (1 + np.exp(x)), 1 / (1 + np.exp(-x)))),
    "erf": (llvm_math.emit_erf, np.vectorize(math.erf, otypes=[np.float64])),
}


def _runnable(target: str) -> bool:
    return parse_target(target).runs_here(host_target())


def _compile(name: str, emit, dtype: str, target: str, arity: int):
    """``f(x..., y, n)``: ``y[i] = emit(x[i]...)`` compiled for ``target``; the function and
    its assembly."""
    t = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    m = ir.Module(name=name)
    ptr, i64 = ir.PointerType(), ir.IntType(64)
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [ptr] * (arity + 1) + [i64]), f"math_{name}")
    for a in fn.args[:-1]:
        a.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with for_range(b, 0, fn.args[-1], name="i") as i:
        xs = [b.load(b.gep(p, [i], inbounds=True, source_etype=t), typ=t) for p in fn.args[:arity]]
        b.store(emit(b, *xs), b.gep(fn.args[arity], [i], inbounds=True, source_etype=t))
    b.ret_void()
    tgt = parse_target(target)
    text = finish_ir(str(m))
    obj = jit.compile_object(text, 3, tgt)
    asm = jit.assembly(jit.optimized_ir(text, 3, tgt), tgt)
    addr = jit.load_object(obj, [fn.name])[fn.name]
    proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (arity + 1)), ctypes.c_int64)
    return proto(addr), asm


_SEQ = iter(range(10 ** 9))


def _run(emit, dtype: str, target: str, *xs: np.ndarray) -> tuple[np.ndarray, str]:
    f, asm = _compile(f"{emit.__name__}_{dtype}_{next(_SEQ)}", emit, dtype, target, len(xs))
    y = np.empty_like(xs[0])
    if _runnable(target):
        f(*(x.ctypes.data for x in xs), y.ctypes.data, y.size)
    else:
        y = None
    return y, asm


def _points(dtype: str) -> np.ndarray:
    fi = np.finfo(dtype)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, fi.tiny, fi.tiny / 8, fi.smallest_subnormal,
               -fi.smallest_subnormal, fi.max, -fi.max, 1.0, -1.0, 0.5, 2.0, 1e-8, -1e-8, 0.625, -0.625,
               2.5, -2.5, 4.0, 6.0, 88.72, 709.78, -103.9, -745.1]
    rng = np.random.default_rng(0)
    top = 38 if dtype == "float32" else 307
    mags = np.logspace(-top - 7, top, 1500)
    return np.concatenate([special, mags, -mags, rng.uniform(-800, 800, 1000), rng.uniform(-90, 90, 1000),
                           rng.uniform(-6, 6, 1000), rng.uniform(-1, 1, 500)]).astype(dtype)


def _check(got: np.ndarray, want: np.ndarray, dtype: str, what: str, zero_sign: bool = False) -> None:
    """``got`` within ``RTOL`` of NumPy's ``want`` (NaN where it is NaN); with ``zero_sign``, a
    zero result also has NumPy's sign (``tanh(-0.0) = -0.0``)."""
    with np.errstate(over="ignore"):
        want = want.astype(dtype)
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{what}: NaN where NumPy has none (or not)"
    if zero_sign:
        zero = want == 0
        assert np.array_equal(np.signbit(got[zero]), np.signbit(want[zero])), f"{what}: sign of a zero"
    ok = ~np.isnan(want)
    g, w = got[ok].astype(np.float64), want[ok].astype(np.float64)
    with np.errstate(invalid="ignore"):
        err = np.where(g == w, 0.0, np.abs(g - w))
    tiny = 2 * float(np.finfo(dtype).smallest_subnormal)
    bad = (err > RTOL[dtype] * np.abs(w)) & (err > tiny)
    if bad.any():
        k = np.flatnonzero(bad)[0]
        raise AssertionError(f"{what}: got {g[k]!r}, want {w[k]!r} (and {bad.sum() - 1} more)")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_math_matches_numpy(name, dtype, target):
    emit, ref = UNARY[name]
    x = _points(dtype)
    got, asm = _run(emit, dtype, target, x)
    assert not CALL.search(asm), asm
    if got is None:
        pytest.skip(f"{target} code cannot run on this CPU (it compiled)")
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    _check(got, want, dtype, f"{name}({dtype}) on {target}", zero_sign=True)


def _pow_points(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    lim = 30 if dtype == "float32" else 300
    xs = np.concatenate([np.logspace(-lim, lim, 120), -np.logspace(-3, 3, 30), rng.uniform(0.5, 2, 100)])
    ys = np.concatenate([rng.uniform(-2, 2, 60), np.arange(-5, 6)])
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 0.5, 3.0, -3.0, 1e30,
                        -1e30])
    xx, yy = np.meshgrid(np.concatenate([xs, special]), np.concatenate([ys, special]))
    return xx.ravel().astype(dtype), yy.ravel().astype(dtype)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pow_matches_numpy(dtype, target):
    x, y = _pow_points(dtype)
    got, asm = _run(llvm_math.emit_pow, dtype, target, x, y)
    assert not CALL.search(asm), asm
    if got is None:
        pytest.skip(f"{target} code cannot run on this CPU (it compiled)")
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), y.astype(np.float64))
    _check(got, want, dtype, f"pow({dtype}) on {target}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("target", TARGETS)
def test_pow_is_exact_where_the_power_is_representable(dtype, target):
    """``4.0 ** 2.0`` was 15.999999999999998, so ``int32(pow(4, 2))`` was 15:
    ``exp(y log x)``'s last step rounded twice.  Every power of small integers that the dtype
    holds exactly (``x^y`` and ``x^-y`` with a power-of-two ``x^y``) now comes out exact, and
    the others within one ulp (NumPy's correctly rounded values: Python integers)."""
    bits = 24 if dtype == "float32" else 53
    pairs = [(a, k) for a in range(1, 60) for k in range(-12, 40)
             if (k >= 0 and a ** k < 2 ** bits) or (k < 0 and (a & (a - 1)) == 0 and a ** -k < 2 ** 60)]
    x = np.array([a for a, _ in pairs] + [-a for a, k in pairs if k >= 0], dtype)
    y = np.array([k for _, k in pairs] + [k for a, k in pairs if k >= 0], dtype)
    got, _ = _run(llvm_math.emit_pow, dtype, target, x, y)
    if got is None:
        pytest.skip(f"{target} code cannot run on this CPU (it compiled)")
    want = np.array([float(int(a) ** int(k)) if k >= 0 else 2.0 ** (int(k) * (int(a).bit_length() - 1))
                     for a, k in zip(x, y)], dtype)
    wrong = got != want
    assert not wrong.any(), list(zip(x[wrong][:5], y[wrong][:5], got[wrong][:5], want[wrong][:5]))
    rng = np.random.default_rng(7)
    a, k = rng.integers(1, 50, 4000).astype(dtype), rng.integers(-8, 12, 4000).astype(dtype)
    got, _ = _run(llvm_math.emit_pow, dtype, target, a, k)
    want = np.power(a.astype(np.float64), k.astype(np.float64)).astype(dtype)
    assert np.max(np.abs(got - want) / np.spacing(np.abs(want))) <= 1.0


def test_exp_underflows_through_the_subnormals_and_overflows_to_inf():
    x = np.array([-87.0, -100.0, -103.0, -103.97, -104.5, 88.7, 88.73, 89.0, 1000.0], np.float32)
    got, _ = _run(llvm_math.emit_exp, "float32", AVX2, x)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    assert np.array_equal(got, want), (got, want)  # correctly rounded at these points


def test_no_library_calls_on_a_plain_sse2_cpu():
    # no SSE4.1 (roundps) and no FMA: still inline code; compiled only (it runs on any x86-64)
    x = _points("float32")
    for emit in (llvm_math.emit_exp, llvm_math.emit_log, llvm_math.emit_tanh, llvm_math.emit_erf):
        got, asm = _run(emit, "float32", "llvm -mcpu=x86-64", x)
        assert not CALL.search(asm), asm
    x64 = x.astype(np.float64)
    got, asm = _run(llvm_math.emit_pow, "float64", "llvm -mcpu=x86-64", x64, x64)
    assert not CALL.search(asm), asm


@pytest.mark.parametrize("target", TARGETS)
def test_math_ops_in_kernels_match_evaluate(target):
    # the IR ops reach the inline code (exp, log, tanh, sigmoid, pow), also inside a reduction
    if not _runnable(target):
        pytest.skip("host cannot run this target")
    X = ta.placeholder((6, 40), "float64", "X")
    k = ta.reduce_axis((0, 40), "k")
    S = ta.compute((6,), lambda i: ta.sum(ta.exp(X[i, k]) + ta.log(ta.abs(X[i, k]) + 1.0), axis=k), name="S")
    Y = ta.compute((6, 40), lambda i, j: ta.tanh(X[i, j]) * ta.sigmoid(X[i, j])
                   + ta.power(ta.abs(X[i, j]), 1.5) + S[i], name="Y")
    x = np.random.default_rng(2).uniform(-30, 30, (6, 40))
    got = ta.build([Y], [X], target=target)(x)
    want = ta.evaluate([Y], {X: x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_pow_float64_keeps_its_bits_for_large_exponents():
    # y log x up to the overflow limit: log|x| and the product carry ~70 bits (mpmath oracle)
    mpmath = pytest.importorskip("mpmath", reason="mpmath gives the high-precision references")
    rng = np.random.default_rng(5)
    x = np.concatenate([1 + rng.uniform(-0.3, 0.4, 300), 10 ** rng.uniform(-300, 300, 300)])
    y = rng.uniform(-700, 700, x.size) / np.log(x)
    got, _ = _run(llvm_math.emit_pow, "float64", AVX2, x, y)
    if got is None:
        pytest.skip("haswell code cannot run here")
    with mpmath.workprec(200):
        want = np.array([float(mpmath.mpf(float(a)) ** mpmath.mpf(float(b))) for a, b in zip(x, y)])
    small = np.abs(np.log(x) * y) < 150
    np.testing.assert_allclose(got[small], want[small], rtol=1e-15, atol=0)
    np.testing.assert_allclose(got, want, rtol=5e-15, atol=1e-300)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_square_is_one_multiply_and_exact(dtype):
    """``x ** 2`` (a variance's ``(x - m) ** 2``, a squared error) compiles to ``x * x``, with
    no call of the general power: bit for bit NumPy's square, at the special values too (NaN,
    +-inf, -0, overflow, subnormals)."""
    X = ta.placeholder((64,), dtype, "X")
    Y = ta.compute((64,), lambda i: X[i] ** 2.0, name="Y")
    Z = ta.compute((64,), lambda i: X[i] ** 2.5, name="Z")
    square, general = ta.build([Y], [X]), ta.build([Z], [X])
    # (the general power inline is some thirty multiplies, vectorized and scalar)
    assert 0 < 3 * square.llvm_ir.count("fmul") < general.llvm_ir.count("fmul")
    info = np.finfo(dtype)
    x = np.random.default_rng(3).uniform(-3, 3, 64).astype(dtype)
    x[:10] = [np.nan, np.inf, -np.inf, -0.0, 0.0, info.max, -info.max, info.tiny, info.tiny / 4, -1.5]
    with np.errstate(over="ignore", under="ignore"):
        want = x * x
    got = square(x)
    assert np.array_equal(got.view(f"u{x.itemsize}"), want.view(f"u{x.itemsize}")), (got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [-4, -3, -2, -1, 3, 4])
def test_small_integer_powers_multiply_under_fast_math(dtype, n):
    """``x ** n`` for ``|n| <= 4`` is a product under fast math (GELU's ``x ** 3``): within two
    ulps of the power (NumPy's, in float64 -- float32 in long double), special values exact
    (NaN, +-inf, +-0, overflow to inf, sign); ``1 / x`` rounds once, so it is exact without
    fast math too.  Without fast math the others keep the general, correctly rounded power."""
    X = ta.placeholder((256,), dtype, "X")
    Y = ta.compute((256,), lambda i: X[i] ** float(n), name="Y")
    fast, strict = ta.build([Y], [X]), ta.build([Y], [X], fastmath=False)
    assert (fast.llvm_ir_unoptimized.count("fmul") < 8) and (
        (strict.llvm_ir_unoptimized.count("fmul") < 8) is (n == -1))
    info = np.finfo(dtype)
    x = np.random.default_rng(n + 10).uniform(-4, 4, 256).astype(dtype)
    x[128:] = x[128:] * np.float64(10.0) ** np.random.default_rng(n + 20).uniform(-30, 30, 128)
    x[:9] = [np.nan, np.inf, -np.inf, -0.0, 0.0, info.max, -info.max, 1.0, -1.0]
    wide = np.longdouble if dtype == "float32" else np.float64
    with np.errstate(all="ignore"):
        want = np.power(x.astype(wide), wide(n)).astype(dtype)
    for k in (fast, strict):
        got = k(x)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        assert same[:9].all(), (x[:9], got[:9], want[:9])
        assert np.array_equal(np.signbit(got[:9]), np.signbit(want[:9]))
        finite = np.isfinite(want) & (np.abs(want) >= info.tiny)
        ulps = np.abs(got[finite].astype(np.float64) - want[finite]) / np.spacing(np.abs(want[finite]))
        assert ulps.max() <= 2, (n, ulps.max())
