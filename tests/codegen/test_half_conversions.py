"""float16 / bfloat16 conversions in generated code, bit for bit against NumPy and ml_dtypes.

Each conversion is compiled three ways: the host ("llvm": F16C here), a named CPU
("llvm -mcpu=haswell") and the integer code path ("llvm -mattr=-f16c" for float16; bfloat16
uses integer code on every CPU: AVX512-BF16's instruction flushes subnormal inputs to zero, which
an Emerald Rapids host showed as 184 wrong roundings in ``test_rounding_from_float32``).  The
inputs are every half bit pattern (widening) and float32 patterns chosen to hit each branch of
the rounding: ties to even at every exponent, the largest finite values and the overflow edge,
subnormal results, zeros, infinities and NaNs, plus random bits.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from tensorad.codegen.target import parse_target

import tensorad as ta

TARGETS = ["llvm", "llvm -mcpu=haswell", "llvm -mattr=-f16c"]
NP = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def _float32_cases(rng: np.random.Generator) -> np.ndarray:
    bits = [rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)]
    # ties and neighbours of ties for both formats (10 and 7 mantissa bits) at every exponent
    exps = np.arange(0, 256, dtype=np.uint32) << 23
    for keep in (10, 7):
        half = np.uint32(1) << np.uint32(22 - keep)  # half an ulp of the narrow format
        for mant in (0, 1 << (23 - keep), 3 << (23 - keep), 0x7FFFFF & ~((1 << (23 - keep)) - 1)):
            for d in (0, 1, 2**32 - 1):
                bits.append((exps | np.uint32(mant)) + half + np.uint32(d))
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504.0, 65519.99, 65520.0,
                         65536.0, 1e-8, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-14, 6e-5, 1e-45,
                         3.4028235e38, -3.4028235e38, 1.00390625, 1.01171875], np.float32)
    out = np.concatenate([b.astype(np.uint32) for b in bits]).view(np.float32)
    out = np.concatenate([out, specials, -out])
    return out


def _same(got: np.ndarray, want: np.ndarray) -> None:
    g, w = got.astype(np.float32), want.astype(np.float32)
    nan = np.isnan(w)
    assert np.array_equal(np.isnan(g), nan)
    bits = got.view(np.uint16)[~nan], want.view(np.uint16)[~nan]
    bad = np.flatnonzero(bits[0] != bits[1])
    assert bad.size == 0, f"{bad.size} mismatches, e.g. {w[~nan][bad[:5]]} -> {g[~nan][bad[:5]]}"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rounding_from_float32(dtype: str, target: str, rng) -> None:
    x = _float32_cases(rng)
    X = ta.placeholder(x.shape, "float32", "X")
    Y = ta.compute(x.shape, lambda i: X[i], "Y", dtype=dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(NP[dtype])
    got = ta.build([Y], [X], target=target)(x)
    assert got.dtype == NP[dtype]
    _same(got, want)
    _same(ta.evaluate(Y, {X: x}), want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_widening_every_pattern(dtype: str, target: str) -> None:
    h = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(NP[dtype])
    X = ta.placeholder(h.shape, dtype, "X")
    Y = ta.compute(h.shape, lambda i: X[i] * 1.0, "Y")
    assert Y.dtype == "float32"
    got = ta.build([Y], [X], target=target)(h)
    want = h.astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def test_targets_say_which_conversions_are_instructions() -> None:
    assert not parse_target("llvm -mattr=-f16c").f16c
    assert parse_target("llvm -mcpu=haswell").f16c and not parse_target("llvm -mcpu=haswell").bf16
    assert parse_target("llvm -mcpu=cooperlake").bf16  # AVX512-BF16
    assert not parse_target("llvm -mcpu=x86-64").f16c


@pytest.mark.parametrize("dtype,target,mnemonic,present", [
    ("float16", "llvm -mcpu=haswell", "vcvtps2ph", True),
    ("float16", "llvm -mattr=-f16c", "vcvtps2ph", False),
    ("bfloat16", "llvm -mcpu=cooperlake", "vcvtneps2bf16", False),  # flushes subnormals
    ("bfloat16", "llvm -mcpu=haswell", "vcvtneps2bf16", False),
])
def test_conversions_are_vector_code_without_calls(dtype, target, mnemonic, present) -> None:
    X = ta.placeholder((4096,), dtype, "X")
    Y = ta.compute((4096,), lambda i: X[i] * 2.0 + 1.0, "Y", dtype=dtype)
    asm = ta.build([Y], [X], target=target).asm
    assert (mnemonic in asm) is present
    assert "__truncsfbf2" not in asm and "__extendhfsf2" not in asm and "__truncsfhf2" not in asm
    assert "ymm" in asm or "zmm" in asm  # vectorized
