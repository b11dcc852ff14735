"""Whether a backward should load a value its forward stored, or compute it again.

The cost model of :mod:`tensorad.training.saved_values`, in the units of the plain-loop model
(:mod:`.strategies.catalog`): per vector of ``target.lanes(dtype)`` elements, a unit-stride load or
store costs 1, an arithmetic operation 1 and a transcendental function ``HEAVY_WEIGHT``
(:mod:`.loops.schedule`: the inline vector math of :mod:`.llvm.vector_math`).  Saving costs a store in the
forward and a load in the backward: 2; recomputing costs the value's reads and operations.
``exp(z[i, j] - m[i])`` (two reads, a subtraction, an exp: 7) is saved; ``abs(z[i])`` (a read
and a mask: 2) is recomputed.
"""

from __future__ import annotations

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import walk

from ..loops.schedule import HEAVY, HEAVY_WEIGHT
from ..target import Target

_FREE = frozenset({Op.VAR, Op.CONST, Op.DATA_INDEX, Op.CAST})
_CHEAP_MATH = frozenset({Op.ABS})  # one instruction (a mask)


def recompute_cost(value: Expr, target: Target) -> float:
    """Estimated cycles to compute ``value`` once per element, vectorized for ``target``."""
    ops = 0
    for n in walk(value):
        if n.op in _FREE:
            continue
        ops += HEAVY_WEIGHT if n.op in HEAVY and n.op not in _CHEAP_MATH else 1
    return ops / _lanes(value.dtype, target)


def save_cost(value: Expr, target: Target) -> float:
    """Estimated cycles per element to store ``value`` in the forward and load it in the backward."""
    return 2 / _lanes(value.dtype, target)


def worth_saving(value: Expr, target: Target) -> bool:
    """Whether loading ``value`` (stored by the forward) beats computing it again."""
    return recompute_cost(value, target) > save_cost(value, target)


def _lanes(dtype: str, target: Target) -> int:
    try:
        return target.lanes(dtype)
    except ValueError:
        return 1
