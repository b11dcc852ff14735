"""isl results back to IR: quasi-affine functions and sets as index expressions and conditions (the other
direction of :mod:`.affine`).  An ``isl.Aff`` ``(sum a_k x_k + sum b_j floor(d_j) + c) / D`` is written
``(...) // D`` (exact: isl hands out integer-valued functions here), a div recursing into ``d_j``; a
constraint keeps only its numerator; a set is the disjunction of its basic sets, each the conjunction of
its constraints (existentials made explicit divs: ``exists e: x = 2e`` is ``x - 2*(x // 2) == 0``); a
piecewise function is a ``select`` chain over its pieces' domains; a parameter is the size variable its
``isl.Id`` holds, and constraints that the sizes' admissible values imply are left out."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from math import lcm

import islpy as isl

from ..ir.expr import FALSE, TRUE, Expr, Op, choice, const, logical
from .affine import admissible

_IN = isl.dim_type.in_
_DIV = isl.dim_type.div
_PARAM = isl.dim_type.param


def val_to_fraction(v: isl.Val) -> Fraction | int:
    """An isl rational as an ``int`` or Fraction, from its text ``n`` or ``n/d`` (inf, NaN: ValueError)."""
    text = v.to_str()
    if "/" in text:
        num, den = text.split("/")
        return Fraction(int(num), int(den))
    return int(text)


def _aff_terms(aff: isl.Aff, variables: Sequence[Expr]) -> tuple[list[tuple[int, Expr]], int, int]:
    """``aff = (sum k*t + c) / D``: integer ``[(k, t)]``, ``c`` and ``D``."""
    n_in = aff.dim(_IN)
    if n_in != len(variables):
        raise ValueError(f"aff has {n_in} inputs but {len(variables)} variables were given")
    coefs: list[tuple[Fraction, Expr]] = []
    atoms = [(_IN, k, variables[k]) for k in range(n_in)] \
        + [(_PARAM, k, aff.get_space().get_dim_id(_PARAM, k).user) for k in range(aff.dim(_PARAM))] \
        + [(_DIV, j, None) for j in range(aff.dim(_DIV))]
    for kind, k, atom in atoms:  # (a division's term: the floor of its own function)
        if f := val_to_fraction(aff.get_coefficient_val(kind, k)):
            coefs.append((f, atom if atom is not None else aff_to_expr(aff.get_div(k), variables)))
    c = val_to_fraction(aff.get_constant_val())
    d = lcm(c.denominator, *(f.denominator for f, _ in coefs))
    return [(int(f * d), t) for f, t in coefs], int(c * d), d


def _sum(terms: list[tuple[int, Expr]], c: int) -> Expr:
    out: Expr | None = None
    for k, t in terms:
        term = t if k == 1 else t * k
        out = term if out is None else out + term
    if out is None:
        return const(c)
    return out + c if c else out


def aff_to_expr(aff: isl.Aff, variables: Sequence[Expr]) -> Expr:
    """``floor(aff)`` as an IR index expression (``(numerator) // D``; an integer-valued quasi-affine
    function: itself)."""
    terms, c, d = _aff_terms(aff, variables)
    num = _sum(terms, c)
    return num if d == 1 else num // d


def basic_set_to_cond(bs: isl.BasicSet, variables: Sequence[Expr]) -> Expr:
    """The conjunction of ``bs``'s constraints (``e == 0`` or ``e >= 0``) over ``variables``."""
    out = TRUE
    for c in bs.get_constraints():
        e = _sum(*_aff_terms(c.get_aff(), variables)[:2])
        cond = (e == 0) if c.is_equality() else (e >= 0)
        out = cond if out is TRUE else logical(Op.AND, out, cond)
    return out


def set_to_cond(s: isl.Set | isl.BasicSet, variables: Sequence[Expr]) -> Expr:
    """The condition that holds exactly on ``s`` (a set over ``variables``, in order)."""
    if isinstance(s, isl.BasicSet):
        s = isl.Set.from_basic_set(s)
    if s.is_empty():
        return FALSE
    if s.dim(_PARAM):
        s = s.gist_params(admissible(s.get_space()).params())
    s, out = s.coalesce().compute_divs(), FALSE
    for bs in s.get_basic_sets():
        cond = basic_set_to_cond(bs, variables)
        if cond is TRUE:
            return TRUE
        out = cond if out is FALSE else logical(Op.OR, out, cond)
    return out


def pw_aff_pieces(pa: isl.PwAff | isl.PwMultiAff, variables: Sequence[Expr]) -> list[tuple[Expr, Expr]]:
    """``[(domain condition, value)]`` of a piecewise function (first output of a multi-aff)."""
    pieces: list[tuple[isl.Set, isl.Aff]] = []
    pa.foreach_piece(lambda s, a: pieces.append((s, a if isinstance(a, isl.Aff) else a.get_at(0))))
    return [(set_to_cond(s, variables), aff_to_expr(a, variables)) for s, a in pieces]


def pieces_to_expr(pieces: list[tuple[Expr, Expr]]) -> Expr:
    """A select chain ``select(c1, e1, select(c2, e2, ... en))`` (the last piece is the default)."""
    if not pieces:
        raise ValueError("a piecewise function without pieces")
    out = pieces[-1][1]
    for cond, value in reversed(pieces[:-1]):
        out = choice(Op.SELECT, cond, value, out)
    return out
