"""The nonzeroness optimizer and the algebraic simplifier (installed as ``tensorad.simplify``).

``optimize_and_lift_nonzeroness(tensor)`` (``ta.OptimizeAndLiftNonzeronessConditions``) returns an
equivalent tensor without sums over zeros: reduction variables the nonzeroness conditions determine are
solved with isl and substituted, the others iterate over tight ranges.

* ``algebra/`` -- algebraic simplification (``simplify_expr``) and the index arithmetic, bounds, constant
  folding and condition lists it rests on;
* ``zeros/`` -- nonzeroness conditions (``nonzero``, ``assume``) and proofs that a sum is zero;
* ``sums/`` -- sums split by nonzeroness, reduction variables eliminated, factors lifted, sums merged;
* ``program`` the pass over a tensor and the tensors it owns; ``inlining`` cheap producers inlined,
  gathers of reductions fused; ``cse`` structurally equal ops merged; ``context`` the memo tables of one
  call.  isl is only reached through ``tensorad.poly``."""

from .algebra.rules import ALGEBRA_RULES, simplify_expr
from .context import OptimizerContext
from .program import Optimizer, optimize_and_lift_nonzeroness
from .zeros.nonzero import assume, nonzero

__all__ = ["optimize_and_lift_nonzeroness", "simplify_expr", "nonzero", "assume", "ALGEBRA_RULES",
           "Optimizer", "OptimizerContext"]
