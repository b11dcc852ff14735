"""The nonzeroness optimizer and the algebraic simplifier (installed as ``tensorad.simplify``).

``optimize_and_lift_nonzeroness(tensor)`` (``ta.OptimizeAndLiftNonzeronessConditions``)
returns an equivalent tensor in which sums over zeros are gone: reduction variables that the
nonzeroness conditions determine are solved for with isl and substituted, the others iterate
over tight ranges, the conditions left are exact affine where-conditions or guards.

Modules, one job each:

* :mod:`.rules` -- algebraic simplification as a table of rewrite rules (``simplify_expr``),
  with :mod:`.index` (integer index arithmetic on the linear forms of :mod:`tensorad.poly.linear`:
  normal forms, comparisons, ``//``, ``%``), :mod:`.ranges` (interval bounds), :mod:`.consts` (constant
  folding with the IR's exact semantics) and :mod:`.logic` (conjunct lists);
* :mod:`.nonzero` -- ``nz(e)``, the condition outside which ``e`` is zero, and ``assume``;
* :mod:`.split` -- sums split into terms with different nonzeroness;
* :mod:`.eliminate` -- the isl plan: eliminate, substitute, tighten, deskew reduction variables;
* :mod:`.lift` -- one compute body optimized;
* :mod:`.inline` (inlining, gather fusion), :mod:`.merge` (same-domain sums merged),
  :mod:`.polynomial` (sums proved zero), :mod:`.cse` (structurally equal ops merged);
* :mod:`.program` -- the pass over a tensor and the tensors it owns;
* :mod:`.context` -- the memo tables of one call (nothing is cached at module level).

isl is only reached through ``tensorad.poly`` (``IndexSpace``, ``IndexSet``, ``to_expr``).
"""

from .context import OptimizerContext
from .nonzero import assume, nonzero
from .program import Optimizer, optimize_and_lift_nonzeroness
from .rules import ALGEBRA_RULES, simplify_expr

__all__ = ["optimize_and_lift_nonzeroness", "simplify_expr", "nonzero", "assume", "ALGEBRA_RULES",
           "Optimizer", "OptimizerContext"]
