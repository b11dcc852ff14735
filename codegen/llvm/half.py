"""Conversions between the half storage types (float16, bfloat16) and float32, in LLVM IR.

A half value travels as its ``i16`` bits and is converted only at a ``cast``; arithmetic never runs in a
half type.  The float16 conversions are an instruction where the target has F16C, else integer code; all
are branch-free, so they vectorize.

* **float16 -> float32**: ``o = (h & 0x7fff) << 13`` re-biased by ``+ (127 - 15) << 23``, an Inf/NaN
  exponent by another ``(128 - 16) << 23``, a zero/subnormal one fixed by one exact float subtraction
  (``o + 2^23 as float - 2^-14``), then the sign ``(h & 0x8000) << 16``.  Exact for every input.
* **float32 -> float16**, ties to even: F16C ``fptrunc``, except of a float32 that a ``fptrunc double``
  just made (LLVM would fold the two roundings into one); else, on ``f = |x|`` bits: ``f >= 65536.0``
  gives Inf or a quiet NaN; ``f < 2^-14`` adds ``0.5f`` as a float and subtracts its bits; otherwise
  ``(f + 0xc8000fff + ((f >> 13) & 1)) >> 13`` re-biases and rounds.
* **bfloat16 -> float32**: ``(h as i32) << 16``.
* **float32 -> bfloat16**, ties to even: ``(x + 0x7fff + ((x >> 16) & 1)) >> 16``; a NaN keeps its sign
  and top payload, quieted.  AVX512-BF16's ``vcvtneps2bf16`` flushes subnormal inputs: not used."""

from __future__ import annotations

import llvmlite.ir as ir

I16, I32 = ir.IntType(16), ir.IntType(32)
F32 = ir.FloatType()


def _c(v: int) -> ir.Constant:
    return I32(v & 0xFFFFFFFF)


def to_float32(b: ir.IRBuilder, bits: ir.Value, dtype: str, f16c: bool) -> ir.Value:
    """The float32 value of half ``bits`` (an ``i16``) of ``dtype``."""
    if dtype == "bfloat16":
        return b.bitcast(b.shl(b.zext(bits, I32), _c(16)), F32)
    if f16c:
        return b.fpext(b.bitcast(bits, ir.HalfType()), F32)
    h = b.zext(bits, I32)
    o = b.shl(b.and_(h, _c(0x7FFF)), _c(13))
    exp = b.and_(o, _c(0x0F800000))
    o = b.add(o, _c(0x38000000))
    special = b.add(o, _c(0x38000000))  # Inf/NaN: exponent all ones
    tiny = b.fsub(b.bitcast(b.add(o, _c(1 << 23)), F32), F32(2.0 ** -14))  # zero/subnormal
    o = b.select(b.icmp_unsigned("==", exp, _c(0x0F800000)), special,
                 b.select(b.icmp_unsigned("==", exp, _c(0)), b.bitcast(tiny, I32), o))
    o = b.or_(o, b.shl(b.and_(h, _c(0x8000)), _c(16)))
    return b.bitcast(o, F32)


def from_float32(b: ir.IRBuilder, x: ir.Value, dtype: str, f16c: bool) -> ir.Value:
    """``x`` (float32) rounded to nearest-even ``dtype``, as ``i16`` bits."""
    if dtype == "bfloat16":
        u = b.bitcast(x, I32)
        rounded = b.lshr(b.add(b.add(u, _c(0x7FFF)), b.and_(b.lshr(u, _c(16)), _c(1))), _c(16))
        nan = b.fcmp_unordered("uno", x, x)
        return b.trunc(b.select(nan, b.or_(b.lshr(u, _c(16)), _c(0x40)), rounded), I16)
    if f16c and not (isinstance(x, ir.CastInstr) and x.opname == "fptrunc"):  # (see the docstring)
        return b.bitcast(b.fptrunc(x, ir.HalfType()), I16)
    u = b.bitcast(x, I32)
    sign = b.and_(u, _c(0x80000000))
    f = b.xor(u, sign)
    big = b.select(b.icmp_unsigned(">", f, _c(0x7F800000)), _c(0x7E00), _c(0x7C00))
    magic = b.bitcast(_c(0x3F000000), F32)  # 0.5f = ((127 - 15) + (23 - 10) + 1) << 23
    small = b.sub(b.bitcast(b.fadd(b.bitcast(f, F32), magic), I32), _c(0x3F000000))
    odd = b.and_(b.lshr(f, _c(13)), _c(1))
    normal = b.lshr(b.add(b.add(f, _c(0xC8000FFF)), odd), _c(13))
    o = b.select(b.icmp_unsigned(">=", f, _c(0x47800000)), big,
                 b.select(b.icmp_unsigned("<", f, _c(0x38800000)), small, normal))
    return b.trunc(b.or_(o, b.lshr(sign, _c(16))), I16)
