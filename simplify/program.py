"""The nonzeroness optimizer on a tensor and the tensors it owns.

``optimize_and_lift_nonzeroness(T)`` rewrites ``T``'s op and the ops ``T`` *owns* (roles ``LIFTED`` in
its provenance group, ``SPLIT`` and ``MERGED``).  Other tensors are only *read*: a cheap non-reduction is
inlined into ``T`` and a gather of an adjoint sum may be fused into it (:func:`.inlining.fuse_gather`).

Per op: inline cheap producers, optimize the body (:mod:`.sums.lift`), merge sums over one domain, fuse a
gathered adjoint sum and optimize again, replace a provably zero sum by 0 and merge structurally equal
helper ops (:mod:`.cse`).  An unchanged op is returned as is.  Results are memoized per op in the call's
:class:`.context.OptimizerContext`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tensorad.ir.expr import Expr, Op, const, var
from tensorad.ir.rewrite import reads, rebuild, replace_reads, substitute, tensor_graph, walk
from tensorad.ir.tensor import ComputeOp, Provenance, Role, Tensor
from tensorad.poly.affine import decide

from .algebra.bracket import canonical
from .algebra.logic import conjuncts
from .algebra.ranges import wraps_where_stored
from .algebra.rules import simplify_expr
from .context import OptimizerContext
from .inlining import box_points, fuse_gather, inline_read, is_cheap
from .sums.chains import contract_chain
from .sums.factor import factor_sum, fold_nested, fold_unshared, is_sum_op, nested_share
from .sums.lift import lift_body, optimize_sum, simplify_reduction, solve_sum
from .sums.masked import lift_masked
from .sums.merge import merge_sums
from .sums.tiling import tiles_box
from .zeros.nonzero import tensor_guard
from .zeros.polynomial import provably_zero

MAX_FUSE_ROUNDS = 4
MAX_INLINED_NODES = 160  # a cheap producer chain inlined into one read: at most this many nodes

MADE_HERE = (Role.SPLIT, Role.MERGED)  # ops this pass made (it owns them)


def is_adjoint(op: ComputeOp) -> bool:
    """An adjoint built by autodiff or a tensor this pass created (by provenance, not name)."""
    return op.provenance.role is Role.ADJOINT or op.provenance.role in MADE_HERE


def _inlinable(t: Tensor) -> bool:
    op = t.op
    return isinstance(op, ComputeOp) and not op.is_reduction and op.num_outputs == 1 \
        and op.provenance.role is not Role.SAVED and is_cheap(op.body[0]) \
        and not wraps_where_stored(op.body[0])


def _inlined_size_within(t: Tensor, budget: int, inlinable: Callable[[Tensor], bool]) -> bool:
    """Whether ``t``'s body, with the cheap producers it reads inlined in turn, stays within ``budget``
    nodes counted as a tree: a chain of cheap producers is not cheap (inlined transitively, a forward
    chain would enter every adjoint).  Stops once the budget is spent: O(budget) per read."""
    stack = [t]
    while stack:
        u = stack.pop()
        body = u.op.body[u.value_index]
        budget -= sum(1 for _ in walk(body))
        if budget < 0:
            return False
        stack.extend(r for r in reads(body) if inlinable(r))
    return True


class _Pass:
    """Optimization of one top-level op and the ops it owns."""

    def __init__(self, top: ComputeOp, ctx: OptimizerContext) -> None:
        self.top = top
        self.group = top.provenance.group
        self.ctx = ctx
        # the bodies inlined (rewrite's memo): a read's inlining is the same at every call of this pass
        self.inlined: tuple[dict, dict] = ({}, {})

    def remember(self, old: ComputeOp, new: ComputeOp) -> ComputeOp:
        self.ctx.ops[old] = new
        self.ctx.ops[new] = new
        return new

    def owns(self, op: ComputeOp) -> bool:
        """Made by this pass, or a reduction the language lifted out of the top op's body."""
        role = op.provenance.role
        return role in MADE_HERE or (role is Role.LIFTED and bool(self.group)
                                     and op.provenance.group == self.group)

    def mergeable(self, op: ComputeOp, axes: Sequence[Expr], scaled: bool = False) -> bool:
        """A sum :mod:`.sums.merge` may merge into a body over ``axes``: not a bracket :mod:`.sums.factor`
        made, and owned, or an adjoint sum over no fewer points read whole as :func:`.inlining.fuse_gather`
        reads one.  A sum the body scales may be a bracket, when it has no fewer points (the scale the
        factoring lifted stays out, and no merged sum runs over more points than its terms)."""
        if scaled:
            return (self.owns(op) or op.provenance.role is Role.ADJOINT) \
                and decide(box_points(axes) <= box_points(op.axes))
        return False if op in self.ctx.factored else self.owns(op) or (
            op.provenance.role is Role.ADJOINT and decide(box_points(axes) <= box_points(op.axes)))

    def _read(self, node: Expr, in_sum: bool = False) -> Expr | None:
        t: Tensor = node.arg
        op = t.op
        if not isinstance(op, ComputeOp):
            return None
        if self.owns(op):
            new = self.op(op)
            if not new.is_reduction and new.num_outputs == 1:
                return inline_read(Expr(Op.READ, node.dtype, node.src, Tensor(new, t.value_index)))
            return None if new is op else Expr(Op.READ, node.dtype, node.src, Tensor(new, t.value_index))
        if self.inlinable(t):
            if not (in_sum and self.tiles(op)):
                return inline_read(node)
            kept = self.ctx.tiled.intern(op)  # one tensor for equal bodies (dense.grad, dense#2.grad)
            return None if kept is op else Expr(Op.READ, node.dtype, node.src, Tensor(kept, 0))
        return None

    def inlinable(self, t: Tensor) -> bool:
        """:func:`_inlinable` within :data:`MAX_INLINED_NODES`: a pure function of the (immutable) tensor,
        kept for the call."""
        found = self.ctx.inlinable.get((t, True))
        if found is None:
            found = self.ctx.inlinable[(t, True)] = self.cheap(t) and \
                _inlined_size_within(t, MAX_INLINED_NODES, self.cheap)
        return found

    def cheap(self, t: Tensor) -> bool:
        """:func:`_inlinable`, once per tensor per call."""
        found = self.ctx.inlinable.get((t, False))
        if found is None:
            found = self.ctx.inlinable[(t, False)] = _inlinable(t)
        return found

    def tiles(self, op: ComputeOp) -> bool:
        """Whether ``op``'s body is pieces tiling its box (:mod:`.sums.tiling`), so that a sum reading it
        is not split into one sum per piece."""
        found = self.ctx.tiles.get(op)
        if found is None:
            found = self.ctx.tiles[op] = tiles_box(op.axes, op.body[0], self.ctx)
        return found

    def inline(self, body: Expr) -> Expr:
        """``body`` with cheap producers inlined; into a sum, pieces tiling a box are kept."""
        if body.op is Op.REDUCE and body.arg.combiner.kind == "sum":
            return replace_reads(body, lambda n: self._read(n, in_sum=True), self.inlined[1])
        return replace_reads(body, self._read, self.inlined[0])

    def make(self, name: str, axes: Sequence[Expr], body: Expr, split: bool = True,
             held: bool = True) -> Tensor:
        role = Role.SPLIT if split else Role.MERGED
        op = ComputeOp(name, "", tuple(axes), (body,),
                       provenance=Provenance(role, self.group, Tensor(self.top, 0)))
        if not held:
            self.ctx.scaled_merges.add(op)
        return Tensor(self.ctx.table.intern(self.op(op)), 0)

    def _fresh(self, axes: Sequence[Expr], body: Expr) -> tuple[list[Expr], Expr]:
        """``axes`` and ``body`` with fresh axis and reduction variables (one op's own)."""
        rvars = body.arg.axes if body.op is Op.REDUCE else ()
        m = {v: var(v.name, v.lo, v.hi, v.dtype) for v in list(axes) + list(rvars)}
        if body.op is Op.REDUCE:
            ra = body.arg
            body = Expr(Op.REDUCE, body.dtype, tuple(substitute(s, m) for s in body.src),
                        type(ra)(ra.combiner, tuple(m[r] for r in rvars), ra.value_index))
        else:
            body = substitute(body, m)
        return [m[a] for a in axes], body

    def lookup(self, free: Sequence[Expr], body: Expr) -> Expr | None:
        """A read of a tensor of the call's table equal to ``body`` over the variables
        ``free``, as written or in its canonical spelling (:mod:`.algebra.bracket`), if one is held."""
        if not self.ctx.table.may_hold((body,)):  # (canonical spellings read the same tensors)
            return None
        found = self.ctx.table.read(ComputeOp("", "", tuple(free), (body,)), free)
        if found is None:
            spelling = canonical(free, body, self.ctx)
            found = self.ctx.table.read(ComputeOp("", "", spelling.axes, (spelling.body,)), spelling.index)
        return None if found is None else simplify_expr(found, self.ctx)

    def factor(self, axes: Sequence[Expr], red: Expr, name: str, held: bool = True) -> Expr | None:
        """:func:`.sums.factor.factor_sum` with brackets made as this pass's tensors, each in its
        canonical spelling (so that other sums find it whatever their variables); without ``held``
        (a merged sum, whose held brackets would undo the merge), none read from the table."""
        made = iter(range(1 << 30))

        def make(free: Sequence[Expr], body: Expr, alone: bool, nested: bool) -> Expr:
            ax, cbody, index, _ = canonical(free, body, self.ctx)
            unoptimized = ComputeOp("", "", ax, (cbody,))
            t = self.make(f"{name}.f{next(made)}", ax, cbody)
            self.ctx.table.register(t.op, unoptimized)  # found by its spelling before optimizing
            self.ctx.factored.add(t.op)  # merge_sums must not undo it (merge and factor would loop)
            if nested:
                self.ctx.nested.add(t.op)  # folded back at the end unless shared
            elif alone and is_sum_op(t.op):
                self.ctx.brackets.add(t.op)  # folded back at the end unless shared
            return t[index]

        lookup = self.lookup if held else lambda free, body: None
        lifted = lift_masked(axes, red, make, self.ctx)
        if lifted is None:
            lifted = contract_chain(axes, red, lookup, make, self.ctx)
        return lifted if lifted is not None else factor_sum(axes, red, lookup, make, self.ctx)

    def register_reads(self, body: Expr) -> None:
        """Sums ``body`` reads join the table, so that equal brackets become reads of them."""
        seen = self.ctx.registered
        for t in reads(body):
            if is_sum_op(t.op) and t.op not in seen:
                seen.add(t.op)
                self.register_sum(t.op)

    def register_sum(self, op: ComputeOp) -> None:
        """``op`` in the table as written and, a forward sum not being rewritten, as the optimizer spells
        it: unit variables substituted, cheap producers read through, the equations of the
        where-condition solved (``q // s == g`` as ``q = s*g + r``), and in the canonical spelling
        of brackets, whose term order comes from positions, not the user's names."""
        table = self.ctx.table
        table.register(op)
        red = op.body[0]
        unit = {r: const(r.lo, r.dtype) for r in red.arg.axes if r.hi == r.lo + 1}
        spelled = Expr(Op.REDUCE, red.dtype,
                       tuple(simplify_expr(substitute(s, unit), self.ctx) for s in red.src),
                       type(red.arg)(red.arg.combiner, tuple(r for r in red.arg.axes if r not in unit),
                                     red.arg.value_index))
        if spelled is not red:
            table.register(op, ComputeOp(op.name, op.tag, op.axes, (spelled,)))
        inlined = self.inline(spelled)
        if inlined is not spelled:
            table.register(op, ComputeOp(op.name, op.tag, op.axes, (inlined,)))
        if is_adjoint(op) or self.owns(op):
            return  # (the optimizer's own sums, fused into their gathers)
        # an equation of the where-condition determines a variable: the sum is reparametrized
        solved = solve_sum(op.axes, inlined.arg.axes, inlined.src[0], inlined.src[1], inlined, self.ctx) \
            if any(c.op is Op.EQ for c in conjuncts(inlined.src[0])) else inlined
        spelling = canonical(op.axes, solved if solved.op is Op.REDUCE else inlined, self.ctx)
        table.register_view(op, ComputeOp(op.name, op.tag, spelling.axes, (spelling.body,)), spelling.back)

    def body(self, axes: Sequence[Expr], body: Expr, name: str, split: bool = True,
             held: bool = True) -> Expr:
        ctx = self.ctx
        body = self.inline(body)
        self.register_reads(body)
        factored = None
        if body.op is Op.REDUCE:
            if body.arg.combiner.kind == "sum":
                body = optimize_sum(axes, body, name, self.make, split, ctx)
                if body.op is Op.REDUCE:
                    factored = self.factor(axes, body, name, held=held)
                    if factored is not None:
                        body = factored
                if body.op is not Op.REDUCE:
                    body = self.lift(axes, self.inline(body))
            else:
                body = simplify_reduction(axes, body, ctx)
        else:
            body = self.lift(axes, body)
        if body.op is not Op.REDUCE and factored is None:  # (merging would undo the factoring)
            merged = merge_sums(axes, body, lambda op: self.mergeable(op, axes),
                                lambda n, a, b, scaled: self.make(n, a, b, split=False, held=not scaled),
                                name, ctx, lambda op: self.mergeable(op, axes, scaled=True))
            if merged is not None:
                body = self.lift(axes, self.inline(merged))
        return body

    def lift(self, axes: Sequence[Expr], body: Expr) -> Expr:
        """:func:`.sums.lift.lift_body`, renamed from an equal body's (:mod:`.sums.lift_sharing`) unless the
        call traces its rules or shares no plans."""
        ctx = self.ctx
        if ctx.trace is not None or not ctx.share_plans:
            return lift_body(axes, body, ctx)
        return ctx.lifts.lift(axes, body, self.guard, lambda: lift_body(axes, body, ctx))

    def guard(self, t: Tensor) -> Expr:
        """``t``'s guard as the nonzeroness fold reads it (the call's table)."""
        return tensor_guard(t, self.ctx.tensor_guards)

    def op(self, op: ComputeOp) -> ComputeOp:
        found = self.ctx.ops.get(op)
        if found is not None:
            return found
        if op.num_outputs > 1:
            bodies = tuple(simplify_expr(self.inline(b), self.ctx) for b in op.body)
        else:
            split = op.provenance.role is not Role.MERGED  # splitting would undo the merge
            held = op not in self.ctx.scaled_merges
            body = self.body(op.axes, op.body[0], op.name, split, held)
            for _ in range(MAX_FUSE_ROUNDS):
                fused = fuse_gather(op.axes, body, is_adjoint)
                if fused is None:
                    break
                # (a scaled merge read through stays merged)
                held = held and not any(t.op in self.ctx.scaled_merges for t in reads(body))
                body = self.body(op.axes, fused, op.name, split=False, held=held)
            if body.op is Op.REDUCE and provably_zero(body, self.ctx):
                body = const(0, body.dtype)
            bodies = (body,)
        new = op if bodies == op.body else ComputeOp(op.name, op.tag, op.axes, bodies, op.attrs,
                                                       op.provenance)
        if is_sum_op(new):
            self.ctx.table.register(new)
        return self.remember(op, new)


def optimize_and_lift_nonzeroness(tensor: Tensor, ctx: OptimizerContext | None = None) -> Tensor:
    """An equivalent tensor with reductions over zeros eliminated (see the module docstring); ``ctx``
    holds the memo tables (default: a fresh context)."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"OptimizeAndLiftNonzeronessConditions: expected a Tensor, got "
                        f"{type(tensor).__name__}")
    if ctx is not None and not isinstance(ctx, OptimizerContext):
        raise TypeError(f"OptimizeAndLiftNonzeronessConditions: ctx must be an OptimizerContext, "
                        f"got {type(ctx).__name__}")
    op = tensor.op
    if not isinstance(op, ComputeOp):
        return tensor
    ctx = OptimizerContext() if ctx is None else ctx
    return Tensor(_Pass(op, ctx).op(op), tensor.value_index)


class Optimizer:
    """The optimizer as a function of one tensor, with one context for every call (an autodiff call's
    adjoints: equal terms become one tensor); one per top-level call and thread.  ``refute``,
    ``share_plans``: :class:`.context.OptimizerContext`."""

    def __init__(self, refute: bool = True, share_plans: bool = True) -> None:
        self.context = OptimizerContext(refute=refute, share_plans=share_plans)

    def __call__(self, tensor: Tensor) -> Tensor:
        return optimize_and_lift_nonzeroness(tensor, self.context)

    def finish(self, tensors: Sequence[Tensor]) -> list[Tensor]:
        """The call's results once every tensor is optimized: brackets no other sum shared are folded back
        (:func:`.sums.factor.fold_nested`, :func:`.sums.factor.fold_unshared`)."""
        tensors = self.share_late(tensors)
        return fold_unshared(fold_nested(tensors, self.context.nested), self.context.brackets)

    def share_late(self, tensors: Sequence[Tensor]) -> list[Tensor]:
        """Adjoint sums optimized before a bracket they contain was made read it now
        (:func:`.sums.factor.nested_share`), if the result already computes it."""
        ctx = self.context
        graph = tensor_graph(tensors)
        live = {t.op for t in graph}
        bodies = {}
        for t in graph:
            op = t.op
            if not is_sum_op(op) or not is_adjoint(op) or op in ctx.factored:
                continue

            def lookup(free: Sequence[Expr], body: Expr, op=op) -> Expr | None:
                found = _Pass(op, ctx).lookup(free, body)
                return found if found is not None and found.arg.op in live \
                    and found.arg.op is not op else None

            shared = nested_share(op.axes, op.body[0], lookup, ctx)
            if shared is not None:
                bodies[op] = (shared,)
        return rebuild(tensors, bodies) if bodies else list(tensors)
