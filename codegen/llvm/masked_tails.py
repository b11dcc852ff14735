"""Short innermost loops on a target with masked vector memory operations: one masked tail.

LLVM runs a vectorized loop of ``T`` trips as ``T // VF`` vector iterations and a remainder of
``T % VF`` scalar ones; a constant ``T`` of a few vectors it may instead unroll fully and pack
with SLP into vectors of every width it can, the rest scalar.  On a 16-lane AVX-512 target a
row of a 28 x 28 feature map has a 26-wide interior: 16 lanes of vector code and 10 scalar
trips, each as long as a vector one.  A grouped 3x3 convolution's 36-term stencil over such
rows spent more time in those scalar trips than in its vectors (on an AMD EPYC with AVX-512:
99 vector and 151 scalar fused multiply-adds per row, 2.9 ms against PyTorch's 1.5).

AVX-512's mask registers make a masked load or store about as cheap as a plain one (AVX2's
``vmaskmov`` store is microcoded on AMD; it never gets this), and a masked-off lane never
faults.  So such a loop is asked to fold its tail into masked vector iterations
(``llvm.loop.vectorize.predicate.enable``, with the target's lanes as its width): the
26-wide row is two masked vectors (2.0 ms against 2.9 with a scalar tail).

The rule, decided on the loop as lowered (no names or shapes):

* the target has masked vector memory operations (:attr:`.target.Target.masked_memory`);
* the loop is innermost, of constant trips ``T`` with ``L < T < SHORT_VECTORS * L`` and
  ``T % L != 0`` (``L``: the lanes of its narrowest-laned dtype) -- below ``L`` it has no vector
  iteration to share the tail with, and past a few vectors the scalar rest is a small part;
* its statements are stores (no accumulator: a reduction's masked lanes need selects of
  their own), each to an address moving by one element a trip, and every read moves by one
  element or not at all: a strided read (a max pool's stride-2 window) would become a masked
  gather or interleave, measured 4.6x slower;
* LLVM can take a width hint there at all (:func:`.llvm.vectorizable.vectorizable`, checked by
  the emitter on the loop's IR).

Such a loop is also kept from LLVM's unroller when it is :func:`pointwise` -- a padding copy,
a ReLU mask applied to a row, that nothing else in its nest reads: -O3 unrolls a row of 28
fully before the loop vectorizer sees it, and SLP then spends 13-24 ms per nest packing the
copies (a quarter of a stride-2 convolution backward's LLVM time) into the code the masked
loop gives at once.  On a target without masked memory such a row (:func:`short_row_width`)
is asked for the target's lanes with its plain remainder, and kept rolled too (the same
backward's LLVM time on AVX2: 0.16 CPU-s against 0.22 unrolled, the same run time).  A stencil (one
tensor read at several offsets: a depthwise convolution's taps, a max pool's window) stays
unrollable: its unrolled rows share loads, and ran 1.1-1.4x faster than the masked loop.
"""

from __future__ import annotations

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import free_vars, walk
from tensorad.poly.linear import var_coefficients

from ..program import Loop, Store
from ..target import Target
from .expr import recombine_digits

SHORT_VECTORS = 4  # a loop of at least this many vectors keeps LLVM's scalar remainder
_LANED = ("float32", "float64", "int32", "int64")


def masked_tail_width(loop: Loop, target: Target, strides_of) -> int | None:
    """The width to ask of LLVM's vectorizer, with its tail folded into masked iterations, for
    the innermost ``loop`` on ``target`` (``strides_of(tensor)``: a tensor's element strides),
    or ``None`` where the rule in the module docstring does not hold."""
    return short_row_width(loop, target, strides_of) if target.masked_memory else None


def short_row_width(loop: Loop, target: Target, strides_of) -> int | None:
    """:func:`masked_tail_width` on any target: the lanes of a short innermost row of stores."""
    if loop.step != 1 or loop.lo.op is not Op.CONST or loop.hi.op is not Op.CONST:
        return None
    if not loop.body or not all(isinstance(s, Store) for s in loop.body):
        return None
    dtypes = set()
    for s in loop.body:
        if _stride(s.index, s.buffer.strides, loop.var) != 1:
            return None
        dtypes.add(s.buffer.dtype)
        for n in walk(s.value):
            if n.op is Op.READ:
                if _stride(n.src, strides_of(n.arg), loop.var) not in (0, 1):
                    return None
                dtypes.add(n.dtype)
    if not dtypes <= set(_LANED):
        return None
    lanes = min(target.lanes(d) for d in dtypes)
    trips = int(loop.hi.arg) - int(loop.lo.arg)
    if not lanes < trips < SHORT_VECTORS * lanes or trips % lanes == 0:
        return None
    return lanes


def _stride(index: tuple[Expr, ...], strides, v: Expr) -> int | None:
    """The element stride along ``v`` of the address ``index`` into an array of ``strides``
    (``None``: not linear in ``v``); an index that does not read ``v`` -- an outer digit
    ``n // G`` -- adds nothing, and digits of one value are that value (a flattened read)."""
    total = 0
    for idx, st in recombine_digits(index, strides):
        if v not in free_vars(idx):
            continue
        co = var_coefficients(idx)
        if co is None:
            return None
        total += co.get(v, 0) * st
    return total


def pointwise(loop: Loop, read_in_nest) -> bool:
    """Whether each tensor ``loop``'s statements read is read at one index only (a map of its
    rows: a copy, a mask, an elementwise function), not at several offsets (a stencil), and
    nothing in its nest reads what it stores (``read_in_nest(tensor)``): a max pool's row of
    -inf, unrolled, is forwarded into the window loops after it (kept rolled: 1.3x slower)."""
    if any(read_in_nest(s.buffer.tensor) for s in loop.body):
        return False
    reads: dict = {}
    for s in loop.body:
        for n in walk(s.value):
            if n.op is Op.READ:
                first = reads.setdefault(n.arg, n.src)
                if len(first) != len(n.src) or any(a is not b for a, b in zip(first, n.src)):
                    return False
    return True
