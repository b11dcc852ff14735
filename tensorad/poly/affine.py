"""Quasi-affine index expressions and conditions as isl piecewise-affine functions and sets.

An :class:`IndexSpace` fixes an ordered list of IR variables as isl set dimensions; it turns
integer expressions built from ``+ - *`` (by constants), ``//`` and ``%`` (by positive
constants), ``max``/``min`` into ``isl.PwAff`` and boolean conditions into ``isl.Set``.
Everything else raises :class:`NotAffine` -- or, for conditions converted with
``exact=False``, becomes "unknown" and is over-approximated by the universe (sound for
questions of the form "can this read be out of bounds?").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import islpy as isl

from ..ir.expr import Expr, Op
from ..ir.printer import expr_to_str

CTX = isl.DEFAULT_CONTEXT


class NotAffine(ValueError):
    """An index expression or condition that isl cannot represent exactly."""


def _val(n: int) -> isl.Val:
    return isl.Val.int_from_si(CTX, int(n))


class IndexSpace:
    """isl conversions over a fixed, ordered set of index variables.

    ``opaque``: ``DATA_INDEX`` nodes (gather indices, read from data) to treat as variables of
    the space ranging over ``[0, extent)`` -- an over-approximation (any value in range, at any
    point), sound for "can this read be out of bounds?" and exact for everything that does not
    depend on them.  Without it such a node is :class:`NotAffine`.
    """

    def __init__(self, variables: Sequence[Expr], opaque: Sequence[Expr] = ()) -> None:
        self.vars = list(dict.fromkeys(list(variables) + list(opaque)))
        self.pos = {v: k for k, v in enumerate(self.vars)}
        names = [f"{_ident(v.name)}_{v.arg.uid}" if v.op is Op.VAR else f"gather_{k}"
                 for k, v in enumerate(self.vars)]
        self.space = isl.Space.create_from_names(CTX, set=names)
        self.local = isl.LocalSpace.from_space(self.space)
        self._aff_memo: dict[Expr, isl.PwAff] = {}
        self._cond_memo: dict[tuple[Expr, bool, bool], isl.Set] = {}

    # ---- sets -----------------------------------------------------------------------------
    def universe(self) -> isl.Set:
        return isl.Set.universe(self.space)

    def empty(self) -> isl.Set:
        return isl.Set.empty(self.space)

    def box(self, variables: Iterable[Expr] | None = None) -> isl.Set:
        """``lo <= v < hi`` for every variable (default: all of the space)."""
        s = self.universe()
        for v in (self.vars if variables is None else variables):
            pa = self.aff(v)
            lo, hi = (v.lo, v.hi) if v.op is Op.VAR else (0, v.arg.extent)
            s = s.intersect(pa.ge_set(self.constant(lo))).intersect(pa.lt_set(self.constant(hi)))
        return s

    # ---- expressions ----------------------------------------------------------------------
    def constant(self, c: int) -> isl.PwAff:
        return isl.PwAff.from_aff(isl.Aff.zero_on_domain(self.local).set_constant_val(_val(c)))

    def aff(self, e: Expr) -> isl.PwAff:
        """``e`` as a piecewise quasi-affine function of the space's variables.

        Iterative (an explicit stack, operands before users), so an index expression of any
        depth converts without reaching Python's recursion limit; results are memoized per
        space, so a shared subexpression converts once.
        """
        memo = self._aff_memo
        found = memo.get(e)
        if found is not None:
            return found
        stack: list[tuple[Expr, bool]] = [(e, False)]
        while stack:
            node, ready = stack.pop()
            if node in memo:
                continue
            if ready:
                memo[node] = self._aff_node(node)
                continue
            stack.append((node, True))
            stack.extend((x, False) for x in reversed(_aff_operands(node)) if x not in memo)
        return memo[e]

    def _aff_node(self, e: Expr) -> isl.PwAff:
        """One node, its affine operands (:func:`_aff_operands`) already in the memo."""
        if e.dtype not in _INT:  # float arithmetic rounds: 0.3 * i is not an integer function
            raise NotAffine(f"{expr_to_str(e)} is a {e.dtype} expression, not an integer index expression")
        op, get = e.op, self._aff_memo.__getitem__
        if op is Op.DATA_INDEX and e in self.pos:  # an opaque gather index (see the class)
            return isl.PwAff.from_aff(isl.Aff.var_on_domain(self.local, isl.dim_type.set, self.pos[e]))
        if op is Op.VAR:
            if e not in self.pos:
                raise NotAffine(f"variable {e.name!r} is not an index variable here")
            return isl.PwAff.from_aff(isl.Aff.var_on_domain(self.local, isl.dim_type.set, self.pos[e]))
        if op is Op.CONST:
            if not float(e.arg).is_integer():
                raise NotAffine(f"non-integer constant {e.arg}")
            return self.constant(int(e.arg))
        if op is Op.CAST and e.src[0].dtype in ("int32", "int64"):
            return get(e.src[0])
        if op is Op.ADD:
            return get(e.src[0]).add(get(e.src[1]))
        if op is Op.SUB:
            return get(e.src[0]).sub(get(e.src[1]))
        if op is Op.NEG:
            return get(e.src[0]).neg()
        if op is Op.MUL:
            a, b = e.src
            if b.op is not Op.CONST and a.op is Op.CONST:
                a, b = b, a
            if b.op is not Op.CONST:
                raise NotAffine(f"product of two index expressions {expr_to_str(e)}")
            return get(a).scale_val(_val(int(b.arg)))
        if op in (Op.FLOORDIV, Op.MOD):
            a, b = e.src
            if b.op is not Op.CONST or int(b.arg) <= 0:
                raise NotAffine(f"{expr_to_str(e)}: division and modulo need a positive constant divisor")
            if op is Op.FLOORDIV:
                return get(a).scale_down_val(_val(int(b.arg))).floor()
            return get(a).mod_val(_val(int(b.arg)))
        if op is Op.MAXIMUM:
            return get(e.src[0]).max(get(e.src[1]))
        if op is Op.MINIMUM:
            return get(e.src[0]).min(get(e.src[1]))
        if op in (Op.SELECT, Op.IF_THEN_ELSE) and e.dtype in ("int32", "int64"):
            c = self.cond(e.src[0])
            a, b = get(e.src[1]), get(e.src[2])
            return a.intersect_domain(c).union_add(b.intersect_domain(c.complement()))
        raise NotAffine(f"{expr_to_str(e)} is not a quasi-affine index expression "
                        "(use + - * by constants, // and % by positive constants)")

    # ---- conditions -----------------------------------------------------------------------
    def cond(self, c: Expr, exact: bool = True) -> isl.Set:
        """The set where boolean ``c`` holds.

        With ``exact=False`` an atom isl cannot represent (a data-dependent test) is taken as
        possibly true: the result is then a superset, valid only where a superset is safe.
        Negation of an inexact set is not a superset, so under ``NOT`` unknown atoms are
        taken as possibly false instead.  Iterative and memoized like :meth:`aff`: a
        condition of any depth converts without recursion.
        """
        memo = self._cond_memo
        root = (c, exact, True)
        stack: list[tuple[tuple[Expr, bool, bool], bool]] = [(root, False)]
        while stack:
            key, ready = stack.pop()
            if key in memo:
                continue
            node, _, positive = key
            if node.op is Op.NOT:
                operands = [(node.src[0], exact, not positive)]
            elif node.op in (Op.AND, Op.OR):
                operands = [(x, exact, positive) for x in node.src]
            else:
                memo[key] = self._atom(node, exact, positive)
                continue
            if not ready:
                stack.append((key, True))
                stack.extend((k, False) for k in reversed(operands) if k not in memo)
            elif node.op is Op.NOT:
                memo[key] = memo[operands[0]].complement()
            elif node.op is Op.AND:
                memo[key] = memo[operands[0]].intersect(memo[operands[1]])
            else:
                memo[key] = memo[operands[0]].union(memo[operands[1]])
        return memo[root]

    def _atom(self, c: Expr, exact: bool, positive: bool) -> isl.Set:
        """A condition that is not a logical connective: a constant or a comparison."""
        if c.op is Op.CONST:
            return self.universe() if c.arg else self.empty()
        try:
            if c.op in _CMP:
                a, b = self.aff(c.src[0]), self.aff(c.src[1])
                return getattr(a, _CMP[c.op])(b)
            raise NotAffine(f"condition {expr_to_str(c)} is not an affine comparison of indices")
        except NotAffine:
            if exact:
                raise
            return self.universe() if positive else self.empty()


_INT = ("int32", "int64")


def _aff_operands(e: Expr) -> tuple[Expr, ...]:
    """The operands :meth:`IndexSpace._aff_node` reads from the memo (none for a node it rejects)."""
    op = e.op
    if e.dtype not in _INT:
        return ()
    if op in (Op.ADD, Op.SUB, Op.NEG, Op.MAXIMUM, Op.MINIMUM):
        return e.src
    if op is Op.CAST:
        return e.src if e.src[0].dtype in ("int32", "int64") else ()
    if op is Op.MUL:
        a, b = e.src
        if b.op is Op.CONST:
            return (a,)
        return (b,) if a.op is Op.CONST else ()
    if op in (Op.FLOORDIV, Op.MOD):
        b = e.src[1]
        return (e.src[0],) if b.op is Op.CONST and int(b.arg) > 0 else ()
    if op in (Op.SELECT, Op.IF_THEN_ELSE) and e.dtype in ("int32", "int64"):
        return e.src[1:]
    return ()


_CMP = {Op.LT: "lt_set", Op.LE: "le_set", Op.GT: "gt_set", Op.GE: "ge_set",
        Op.EQ: "eq_set", Op.NE: "ne_set"}


def _ident(name: str) -> str:
    out = "".join(ch if ch.isalnum() else "_" for ch in name)
    return out if out and not out[0].isdigit() else "v" + out


def point_str(space: IndexSpace, s: isl.Set) -> str:
    """One point of nonempty ``s`` as ``name=value, ...`` (for error messages)."""
    p = s.sample_point()
    vals = [p.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(len(space.vars))]
    return ", ".join(f"{v.name if v.op is Op.VAR else expr_to_str(v)}={x}" for v, x in zip(space.vars, vals))


def point_values(space: IndexSpace, s: isl.Set) -> dict[Expr, int]:
    p = s.sample_point()
    return {v: p.get_coordinate_val(isl.dim_type.set, k).to_python() for k, v in enumerate(space.vars)}
