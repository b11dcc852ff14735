"""Small helpers for hand-written IR (the micro-kernel and packing loops), and function attributes."""

from __future__ import annotations

import itertools
import re
from contextlib import contextmanager

import llvmlite.ir as ir

I32, I64 = ir.IntType(32), ir.IntType(64)
LOOP_ID = "tensorad.loop."
#: the string attribute of a function that asks for no more than ``-O<N>`` (:func:`at_most_level`)
OPT_LEVEL_ATTRIBUTE = "tensorad-opt-level"
PREDICATE_HINT = "llvm.loop.vectorize.predicate.enable"
_ids = itertools.count(1)


class Attributes(ir.values.FunctionAttributes):
    """Function attributes with the string and memory attributes llvmlite does not list."""

    _known = ir.values.FunctionAttributes._known | {"memory(none)", "willreturn"}

    def add_string(self, key: str, value: str) -> None:
        set.add(self, f'"{key}"="{value}"')


def at_most_level(fn: ir.Function, level: int) -> None:
    """Mark ``fn`` to be optimized at ``-O<level>`` at most (the lowest level asked for): compiling a
    kernel, its part of the module goes through that pipeline (:func:`.jit.module_split.split`)."""
    attributes = fn.attributes if isinstance(fn.attributes, Attributes) else Attributes(fn.attributes)
    for asked in [a for a in attributes if a.startswith(f'"{OPT_LEVEL_ATTRIBUTE}"=')]:
        level = min(level, int(asked.split("=")[1].strip('"')))
        attributes.discard(asked)
    attributes.add_string(OPT_LEVEL_ATTRIBUTE, str(level))
    fn.attributes = attributes


def loop_metadata(module: ir.Module, width: int | None = None, vectorize: bool = True, unroll: bool = True,
                  masked_tail: bool = False, forced: bool = False, interleave: int | None = None):
    """An ``llvm.loop`` node: ``width`` lanes for the vectorizer (``masked_tail``: the remainder masked,
    at the width the vectorizer picks where ``width`` is ``None``; ``forced``: past its cost model and its
    threshold of tiny trip counts; ``interleave``: vectors an iteration),
    or ``vectorize=False`` (rolled too), or ``unroll=False`` alone.  Its self-reference, which llvmlite
    cannot build, is a unique placeholder that :func:`finish_ir` replaces."""
    def hint(*ops):
        return module.add_metadata([ir.MetaDataString(module, ops[0]), *ops[1:]])

    hints = []
    if width:
        hints.append(hint("llvm.loop.vectorize.width", I32(width)))
    if forced:
        hints.append(hint("llvm.loop.vectorize.enable", ir.IntType(1)(1)))
    if interleave:
        hints.append(hint("llvm.loop.interleave.count", I32(interleave)))
    if masked_tail:
        hints.append(hint(PREDICATE_HINT, ir.IntType(1)(1)))
    if not vectorize:  # short loops: neither vectorized nor unrolled (compile time, code size)
        hints += [hint("llvm.loop.vectorize.enable", ir.IntType(1)(0)), hint("llvm.loop.unroll.disable")]
    elif not unroll:
        hints.append(hint("llvm.loop.unroll.disable"))
    return module.add_metadata([ir.MetaDataString(module, f"{LOOP_ID}{next(_ids)}"), *hints])


def finish_ir(text: str) -> str:
    """Module text with loop-ID placeholders made self-referential (see :func:`loop_metadata`)."""
    return re.sub(r'^(!\d+) = !\{\s*!"' + re.escape(LOOP_ID) + r'\d+"',
                  lambda m: f"{m.group(1)} = distinct !{{ {m.group(1)}", text, flags=re.M)


@contextmanager
def for_range(b: ir.IRBuilder, lo: ir.Value | int, hi: ir.Value | int, step: ir.Value | int = 1,
              name: str = "i", vectorize: bool = True, unroll: bool = True, masked_tail: bool = False):
    """``for iv in range(lo, hi, step)`` (rotated; ``iv`` is i64; ``step`` an int or a positive i64
    value); the body is the with-block.  ``vectorize=False`` keeps LLVM's vectorizer and unroller off it,
    ``unroll=False`` the unroller alone; ``masked_tail``: where LLVM vectorizes it, the remainder folded
    into masked iterations (one loop, where LLVM otherwise emits a vector loop, a vector epilogue and a
    scalar remainder)."""
    lo = I64(lo) if isinstance(lo, int) else lo
    hi = I64(hi) if isinstance(hi, int) else hi
    step = I64(step) if isinstance(step, int) else step
    pre = b.block
    body = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.exit")
    b.cbranch(b.icmp_signed("<", lo, hi), body, done)
    b.position_at_end(body)
    iv = b.phi(I64, name=name)
    iv.add_incoming(lo, pre)
    yield iv
    nxt = b.add(iv, step, flags=("nsw",))
    iv.add_incoming(nxt, b.block)
    br = b.cbranch(b.icmp_signed("<", nxt, hi), body, done)
    if not vectorize or not unroll or masked_tail:
        br.set_metadata("llvm.loop", loop_metadata(b.module, None, vectorize, unroll, masked_tail))
    b.position_at_end(done)


def smin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn
