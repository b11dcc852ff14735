"""The nonzeroness optimizer and the algebraic simplifier (installed as ``tensorad.simplify``).

``optimize_and_lift_nonzeroness(tensor)`` (``ta.OptimizeAndLiftNonzeronessConditions``)
returns an equivalent tensor in which sums over zeros are gone: reduction variables that the
nonzeroness conditions determine are solved for with isl and substituted, the others iterate
over tight ranges, the conditions left are exact affine where-conditions or guards.

Rooms:

* ``algebra/`` -- algebraic simplification (``simplify_expr``) and the index arithmetic,
  interval bounds, constant folding and condition lists it rests on;
* ``zeros/`` -- nonzeroness conditions (``nonzero``, ``assume``) and proofs that a sum is zero;
* ``sums/`` -- sums split by nonzeroness, reduction variables eliminated with isl, factors
  lifted (out of a mask too, where the sum becomes a scan or loses an axis), same-domain sums
  merged.

Modules at the top:

* ``program`` -- the pass over a tensor and the tensors it owns;
* ``inlining`` -- inlining cheap producers and fusing gathers of reductions;
* ``cse`` -- structurally equal ops merged;
* ``context`` -- the memo tables of one call (nothing is cached at module level).

isl is only reached through ``tensorad.poly`` (``IndexSpace``, ``IndexSet``, ``to_expr``).
"""

from .algebra.rules import ALGEBRA_RULES, simplify_expr
from .context import OptimizerContext
from .program import Optimizer, optimize_and_lift_nonzeroness
from .zeros.nonzero import assume, nonzero

__all__ = ["optimize_and_lift_nonzeroness", "simplify_expr", "nonzero", "assume", "ALGEBRA_RULES",
           "Optimizer", "OptimizerContext"]
