"""Small helpers for hand-written IR (the micro-kernel and packing loops)."""

from __future__ import annotations

from contextlib import contextmanager

import llvmlite.ir as ir

I64 = ir.IntType(64)


@contextmanager
def for_range(b: ir.IRBuilder, lo: ir.Value, hi: ir.Value, step: int = 1, name: str = "i"):
    """``for iv in range(lo, hi, step)`` (rotated; ``iv`` is i64); the body is the with-block."""
    lo = I64(lo) if isinstance(lo, int) else lo
    hi = I64(hi) if isinstance(hi, int) else hi
    pre = b.block
    body = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.exit")
    b.cbranch(b.icmp_signed("<", lo, hi), body, done)
    b.position_at_end(body)
    iv = b.phi(I64, name=name)
    iv.add_incoming(lo, pre)
    yield iv
    nxt = b.add(iv, I64(step), flags=("nsw",))
    iv.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_signed("<", nxt, hi), body, done)
    b.position_at_end(done)


def smin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn
