"""The memo tables of one optimizer call.

An :class:`OptimizerContext`, owned by the caller and passed down, holds every table the optimizer keeps:
simplified expressions, elimination plans, optimized ops, structurally equal ops.  Nothing is kept at
module level.  ``ta.JacobianRecursive`` uses one context for all the adjoints of one call (equal split
terms become one tensor); ``OptimizeAndLiftNonzeronessConditions`` a fresh one per call."""

from __future__ import annotations

from collections import Counter

from tensorad.ir.expr import Expr
from tensorad.poly.affine import IndexSpace

from .algebra.index import IndexMemo
from .cse import OpTable
from .sums.lift_sharing import LiftMemo
from .zeros.polynomial import ProofMemo
from .zeros.refute import Refuter


class OptimizerContext:
    """Memo tables of one optimizer call; ``trace`` (a Counter) records the rules that fire.
    ``refute=False`` (no :class:`.zeros.refute.Refuter`) and ``share_plans=False`` (no renamed plans:
    :mod:`.sums.plan_key`, :mod:`.sums.lift_sharing`) give the same results, slower."""

    def __init__(self, trace: Counter | None = None, refute: bool = True, share_plans: bool = True) -> None:
        self.simplified: dict[Expr, Expr] = {}  # expression -> its simplified form
        self.plans: dict[tuple, object] = {}  # (variables, conditions) or their shape -> elimination plan
        self.share_plans = share_plans
        self.guards: dict[tuple, tuple] = {}  # shape of (axes, conditions) -> (.lift's box guard, axes)
        self.affine: dict[tuple, bool] = {}  # shape of (variables, condition) -> isl takes it (.eliminate)
        self.body_reads: dict = {}  # body -> the computed tensors it reads (.polynomial.sum_depths)
        self.ops: dict = {}  # op -> optimized op
        self.table = OpTable()  # structurally equal ops merged
        self.registered: set = set()  # sums read by the ops optimized, held in ``table``
        self.factored: set = set()  # every sum .factor made
        self.scaled_merges: set = set()  # sums .merge made of scaled reads: factored without held brackets
        self.brackets: set = set()  # sums factored out alone (.factor), folded back if unshared
        self.nested: set = set()  # inner brackets of nested sums (.factor), folded back if unshared
        self.nonempty: dict[tuple, Expr | None] = {}  # (axes, variables, condition) -> where a point is
        self.counts: Counter = Counter()  # isl questions, plans, zero-proofs computed (not memoized), by kind
        self.index = IndexMemo()  # linear forms, interval bounds, negations of index nodes
        self.keys: dict = {}  # node -> structural sort key (polynomial atoms: linear.atom_key)
        self.zero: dict[Expr, bool] = {}  # expression -> provably zero (polynomial.provably_zero)
        self.nz: dict[Expr, Expr] = {}  # node -> its nonzeroness, unsimplified (nonzero.nonzero's fold)
        self.nz_rules: dict | None = None  # nonzero.NZ_RULES, reads' guards kept per tensor
        self.tensor_guards: dict = {}  # tensor -> its guard (nonzero.tensor_guard)
        self.lifts = LiftMemo()  # lifted bodies by name-free key (.liftshare), when share_plans
        self.proofs = ProofMemo()  # conversions the zero-proofs share (replayed, same budget)
        self.layers: dict[frozenset, ProofMemo] = {}  # the same for layered proofs, per sums expanded
        self.refuter = Refuter() if refute else None  # a seeded model: "not zero" before a proof
        self.spaces: dict[tuple[Expr, ...], IndexSpace] = {}  # variables -> their isl space
        self.tiles: dict = {}  # op -> whether its body is pieces tiling its box (.pieces)
        self.inlinable: dict = {}  # (tensor, within the size) -> inlined (program._Pass.inlinable)
        self.tiled = OpTable()  # the ops kept for that, structurally equal ones merged
        self.trace = trace

    def space(self, variables) -> IndexSpace:
        """The call's one :class:`IndexSpace` over ``variables`` (in order): a condition converted once."""
        key = tuple(variables)
        found = self.spaces.get(key)
        if found is None:
            found = self.spaces[key] = IndexSpace(key)
        return found
