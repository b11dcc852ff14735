"""Quasi-affine index expressions and conditions as isl piecewise-affine functions and sets.

An :class:`IndexSpace` fixes an ordered list of IR variables as isl set dimensions and turns integer
expressions of ``+ - *`` (by constants), ``//`` and ``%`` (by positive constants) and ``max``/``min`` into
``isl.PwAff``, and conditions into ``isl.Set``, through islpy's constructors (never text), exact past 64
bits.  Anything else raises :class:`NotAffine`, or, in a condition converted with ``exact=False``, is
over-approximated by the universe.  A size variable (``ta.size_var``) met in an expression is an isl
parameter (its ``isl.Id`` holds the size's ``Expr``), restricted to its admissible values: a set empty
over the space is empty at every size, and a static program's spaces have no parameters."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import islpy as isl

from ..ir import dtype as dt
from ..ir.expr import Expr, Op, SizeDecisionError, is_size, logical_not
from ..ir.intrange import cast_keeps_value
from ..ir.printer import expr_to_str
from ..ir.rewrite import fold_along, walk
from .linear import Linear, int_constant, to_linear

CTX = isl.DEFAULT_CONTEXT
_SET = isl.dim_type.set
_PARAM = isl.dim_type.param


class NotAffine(ValueError):
    """An index expression or condition that isl cannot represent exactly."""


_CHUNK = 62


def _val(n: int) -> isl.Val:
    """An exact isl integer (``int_from_si`` takes 64 bits: larger values are built in chunks)."""
    n = int(n)
    if -(1 << 63) <= n < (1 << 63):
        return isl.Val.int_from_si(CTX, n)
    mag, digits = abs(n), []
    while mag:
        digits.append(mag & ((1 << _CHUNK) - 1))
        mag >>= _CHUNK
    out, base = isl.Val.int_from_si(CTX, 0), isl.Val.int_from_si(CTX, 1 << _CHUNK)
    for d in reversed(digits):
        out = out.mul(base).add(isl.Val.int_from_si(CTX, d))
    return out.neg() if n < 0 else out


def _range(v: Expr) -> tuple[int | Expr, int | Expr]:
    """``(lo, hi)`` of a dimension: a variable's range (integers or expressions in sizes), a gather
    index's ``[0, extent)``."""
    return (0, v.arg.extent) if v.op is not Op.VAR else (v.lo, v.hi)


class IndexSpace:
    """isl conversions over a fixed, ordered set of index variables.  ``opaque``: ``DATA_INDEX`` nodes to
    treat as variables ranging over ``[0, extent)`` (an over-approximation, sound for "can this read be
    out of bounds?"); without it such a node is :class:`NotAffine`."""

    def __init__(self, variables: Sequence[Expr], opaque: Sequence[Expr] = ()) -> None:
        self.vars = list(dict.fromkeys(list(variables) + list(opaque)))
        self.pos = {v: k for k, v in enumerate(self.vars)}
        names = [f"{_ident(v.name)}_{v.arg.uid}" if v.op is Op.VAR else f"gather_{k}"
                 for k, v in enumerate(self.vars)]
        self.space = isl.Space.create_from_names(CTX, set=names)
        self.local = isl.LocalSpace.from_space(self.space)
        self.params: dict[Expr, int] = {}  # the size variables met: isl parameters, by position
        self._aff_memo: dict[Expr, isl.PwAff] = {}
        self._form_memo: dict[Expr, Linear] = {}
        self._cond_memo: dict[tuple[Expr, bool, bool], isl.Set] = {}
        self._box: isl.Set | None = None

    def universe(self) -> isl.Set:
        """Every point, at the admissible values of the parameters met so far."""
        return admissible(self.space)

    def empty(self) -> isl.Set:
        return isl.Set.empty(self.space)

    def box(self, variables: Iterable[Expr] | None = None) -> isl.Set:
        """``lo <= v < hi`` for every variable (default: all of the space, built once)."""
        if variables is None:
            if self._box is None:
                self._box = self._make_box(self.vars)
            return self._box
        return self._make_box(variables)

    def _make_box(self, variables: Iterable[Expr]) -> isl.Set:
        """The box as one basic set of constraints ``v - lo >= 0``, ``hi - 1 - v >= 0``: the set that
        intersecting the bounds one at a time gives, printed alike."""
        variables = list(variables)
        if not all(v in self.pos and all(type(b) is int for b in _range(v)) for v in variables):
            return self._intersected_box(variables)
        bs = isl.BasicSet.universe(self.space)
        for v in variables:
            k = self.pos[v]
            lo, hi = _range(v)
            ge = isl.Constraint.inequality_alloc(self.local).set_coefficient_val(_SET, k, _val(1))
            lt = isl.Constraint.inequality_alloc(self.local).set_coefficient_val(_SET, k, _val(-1))
            bs = bs.add_constraint(ge.set_constant_val(_val(-lo)))
            bs = bs.add_constraint(lt.set_constant_val(_val(hi - 1)))
        return isl.Set.from_basic_set(bs)

    def _intersected_box(self, variables: Iterable[Expr]) -> isl.Set:
        s = self.universe()
        for v in variables:
            pa = self.aff(v)
            lo, hi = _range(v)
            s = s.intersect(pa.ge_set(self.bound(lo))).intersect(pa.lt_set(self.bound(hi)))
        return s

    def constant(self, c: int) -> isl.PwAff:
        return _constant(self.local, c)

    def bound(self, b: int | Expr) -> isl.PwAff:
        """A bound of a range or a shape: an integer, or an expression in size variables of the space."""
        return self.aff(b) if isinstance(b, Expr) else self.constant(b)

    def aff(self, e: Expr) -> isl.PwAff:
        """``e`` as a piecewise quasi-affine function of the space's variables: its linear form's variable
        coefficients in one ``isl.Aff``, each other atom converted by :data:`_ATOMS` and added scaled.
        Iterative (:func:`fold_along`) and memoized per space."""
        found = self._aff_memo.get(e)
        if found is not None:
            return found
        if e in self.pos:  # a variable of the space
            found = self._aff_memo[e] = self._aff_node(e)
            return found
        return fold_along(e, self._needs, self._aff_node, self._aff_memo)

    def _is_var(self, atom: Expr) -> bool:
        return atom in self.pos and atom.op in (Op.VAR, Op.DATA_INDEX)

    def _needs(self, e: Expr) -> tuple[Expr, ...]:
        """What :meth:`_aff_node` reads from the memo: the atoms of ``e``'s form, or, for an
        atom, its operands (none for one isl cannot represent: that raises when it converts)."""
        form = to_linear(e, self._form_memo)
        if not _is_atom(e, form):
            return tuple(a for a, _ in form.terms if not self._is_var(a))
        rule = _ATOMS.get(e.op)
        return () if rule is None or self._is_var(e) else (rule[0](e) or ())

    def _aff_node(self, e: Expr) -> isl.PwAff:
        """One node, the affine functions of what :meth:`_needs` named already in the memo."""
        form = to_linear(e, self._form_memo)
        if _is_atom(e, form) and not self._is_var(e):
            return self._atom_aff(e)
        coefs = [(self.pos[a], k) for a, k in form.terms if self._is_var(a)]
        if len(coefs) == 1 and coefs[0][1] == 1:
            aff = isl.Aff.var_on_domain(self.local, isl.dim_type.set, coefs[0][0])
        else:
            aff = isl.Aff.zero_on_domain(self.local)
            for k, c in coefs:
                aff = aff.set_coefficient_val(isl.dim_type.in_, k, _val(c))
        if form.const:
            aff = aff.set_constant_val(_val(form.const))
        out, rest = isl.PwAff.from_aff(aff), [(a, k) for a, k in form.terms if not self._is_var(a)]
        for atom, k in rest:
            out = out.add(self._aff_memo[atom].scale_val(_val(k)))
        return out

    def _atom_aff(self, e: Expr) -> isl.PwAff:
        """An atom of a linear form that is not a variable of the space, by :data:`_ATOMS`."""
        if e.dtype not in _INT:  # float arithmetic rounds: 0.3 * i is not an integer function
            raise NotAffine(f"{expr_to_str(e)} is a {e.dtype} expression, not an integer index expression")
        if is_size(e):
            return self._param(e)
        if e.op is Op.VAR:
            raise NotAffine(f"variable {e.name!r} is not an index variable here")
        if e.op is Op.MUL:
            raise NotAffine(f"product of two index expressions {expr_to_str(e)}")
        rule = _ATOMS.get(e.op)
        if rule is None or rule[0](e) is None:
            if e.op in (Op.FLOORDIV, Op.MOD):
                raise NotAffine(f"{expr_to_str(e)}: division and modulo need a positive constant divisor")
            raise NotAffine(f"{expr_to_str(e)} is not a quasi-affine index expression "
                            "(use + - * by constants, // and % by positive constants)")
        return rule[1](self, e)

    def outside(self, s: isl.Set) -> isl.Set:
        """The complement of ``s``, at admissible sizes."""
        return s.complement().intersect(self.universe()) if self.params else s.complement()

    def _param(self, v: Expr) -> isl.PwAff:
        """Size variable ``v`` as an isl parameter (added to the space on first use), on its admissible
        values only, so that every set made from it holds at admissible sizes alone."""
        if v not in self.params:
            self.params[v] = len(self.params)
            self.space = self.space.add_dims(_PARAM, 1).set_dim_id(_PARAM, self.params[v],
                                                                    isl.Id(_ident(v.name), user=v))
            self.local = isl.LocalSpace.from_space(self.space)
            self._box = None
        return isl.PwAff.from_aff(isl.Aff.var_on_domain(self.local, _PARAM, self.params[v])).intersect_domain(
            self.universe())

    def cond(self, c: Expr, exact: bool = True) -> isl.Set:
        """The set where boolean ``c`` holds.  With ``exact=False`` an atom isl cannot represent is taken
        as possibly true (a superset), under ``NOT`` as possibly false.  Iterative, memoized (:meth:`aff`)."""
        def operands(key: tuple[Expr, bool, bool]) -> list[tuple[Expr, bool, bool]]:
            node, _, positive = key
            if node.op is Op.NOT:
                return [(node.src[0], exact, not positive)]
            return [(x, exact, positive) for x in node.src] if node.op in (Op.AND, Op.OR) else []

        def visit(key: tuple[Expr, bool, bool]) -> isl.Set:
            node, _, positive = key
            sets = [memo[k] for k in operands(key)]
            if node.op is Op.NOT:
                return self.outside(sets[0])
            if node.op is Op.AND:
                return sets[0].intersect(sets[1])
            return sets[0].union(sets[1]) if node.op is Op.OR else self._atom(node, exact, positive)

        memo = self._cond_memo
        return fold_along((c, exact, True), operands, visit, memo)

    def is_affine(self, c: Expr) -> bool:
        """Whether isl represents boolean ``c`` exactly over this space."""
        try:
            self.cond(c)
        except NotAffine:
            return False
        return True

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


def admissible(space: isl.Space) -> isl.Set:
    """The universe of ``space`` at the admissible values of its parameters, size variables (each
    ``isl.Id``'s user): ``min <= v <= max``, ``v`` a multiple of ``multiple_of``."""
    s, local = isl.Set.universe(space), isl.LocalSpace.from_space(space)
    for k in range(space.dim(_PARAM)):
        info = space.get_dim_id(_PARAM, k).user.arg
        n = isl.PwAff.from_aff(isl.Aff.var_on_domain(local, _PARAM, k))
        s = s.intersect(n.ge_set(_constant(local, info.min)))
        if info.max is not None:
            s = s.intersect(n.le_set(_constant(local, info.max)))
        if info.multiple_of > 1:
            s = s.intersect(n.mod_val(_val(info.multiple_of)).eq_set(_constant(local, 0)))
    return s


def _constant(local: isl.LocalSpace, c: int) -> isl.PwAff:
    return isl.PwAff.from_aff(isl.Aff.zero_on_domain(local).set_constant_val(_val(c)))


def decide(c: Expr | bool) -> bool:
    """Condition ``c`` on size variables, where it is the same at every admissible size; one whose truth
    depends on the size raises :class:`~tensorad.ir.expr.SizeDecisionError`, naming the sizes."""
    if not isinstance(c, Expr):
        return bool(c)
    if always(c):
        return True
    if always(logical_not(c)):
        return False
    sizes = sorted({n.name for n in walk(c) if is_size(n)})
    raise SizeDecisionError(f"a decision on the size variables {', '.join(sizes)} ({expr_to_str(c)}) that "
                            f"depends on their values: bind them first (ta.bind(tensors, {sizes[0]}=...))", c)


def size_cases(c: Expr) -> tuple[Expr, list[tuple[int, int | None]]] | None:
    """``(v, [(lo, hi), ...])``: the admissible values of the one size variable ``v`` of condition ``c``
    split into the intervals (``hi`` ``None``: unbounded) where ``c`` holds and where it does not, or
    ``None`` where they are not intervals (or ``c`` has other variables, or isl does not represent it)."""
    sizes, space = list(dict.fromkeys(n for n in walk(c) if n.op is Op.VAR)), IndexSpace([])
    try:
        holds = space.cond(c)
    except NotAffine:
        return None
    if len(sizes) != 1 or not is_size(sizes[0]):
        return None
    cases = []
    for part in (holds, space.outside(holds)):
        line = part.params().move_dims(_SET, 0, _PARAM, 0, 1) if part.dim(_PARAM) else None
        if line is None or line.is_empty():
            continue
        lo, hi = line.dim_min_val(0).to_python(), line.dim_max_val(0)
        hi = None if hi.is_infty() else hi.to_python()
        interval = space.cond(sizes[0] >= lo if hi is None else (sizes[0] >= lo) & (sizes[0] <= hi))
        if not interval.params().is_equal(part.params()):
            return None
        cases.append((lo, hi))
    return sizes[0], sorted(cases)


def always(c: Expr | bool) -> bool:
    """Whether condition ``c`` on size variables holds at every admissible size (``False`` where that is
    not decided); a Python bool is itself."""
    if not isinstance(c, Expr):
        return bool(c)
    space = IndexSpace([])
    try:
        holds = space.cond(c)
        return space.universe().is_subset(holds)
    except NotAffine:
        return _polynomial_truth(c) is True


def _polynomial(e: Expr) -> dict[tuple, int] | None:
    """Integer expression ``e`` of ``+ - *`` over size variables as a polynomial (monomial, a tuple of
    sizes by uid, to coefficient); ``None`` where it is anything else."""
    if e.op is Op.CONST and isinstance(e.arg, int) or is_size(e):
        return {(): int(e.arg)} if e.op is Op.CONST else {(e,): 1}
    parts = [_polynomial(x) for x in e.src] if e.op in (Op.ADD, Op.SUB, Op.MUL, Op.NEG) else [None]
    if any(p is None for p in parts):
        return None
    out: dict[tuple, int] = {}
    terms = [(tuple(sorted(ma + mb, key=lambda v: v.arg.uid)), ca * cb) for ma, ca in parts[0].items()
             for mb, cb in parts[1].items()] if e.op is Op.MUL else \
        [(m, -c if e.op is Op.NEG or e.op is Op.SUB and k else c) for k, p in enumerate(parts)
         for m, c in p.items()]
    for m, c in terms:
        out[m] = out.get(m, 0) + c
    return out


def _polynomial_truth(c: Expr) -> bool | None:
    """The truth at every admissible size of a comparison of polynomials in size variables (which isl
    does not represent: ``n * L``) whose difference has terms of one sign, the sizes at least their
    minimums; ``None`` where not so decided."""
    if c.op is Op.NOT:
        inner = _polynomial_truth(c.src[0])
        return None if inner is None else not inner
    sides = [_polynomial(x) for x in c.src] if c.op in (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE) else [None]
    if any(p is None for p in sides) or any(v.arg.min < 0 for p in sides for m in p for v in m):
        return None
    d = {m: sides[0].get(m, 0) - sides[1].get(m, 0) for m in {**sides[0], **sides[1]}}
    least = sum(k * math.prod(v.arg.min for v in m) for m, k in d.items())  # (the difference at the minimums)
    lo = least if all(k >= 0 for m, k in d.items() if m) else -math.inf  # (bounds of the difference)
    hi = least if all(k <= 0 for m, k in d.items() if m) else math.inf
    known = {Op.GE: (lo >= 0, hi < 0), Op.GT: (lo > 0, hi <= 0), Op.LE: (hi <= 0, lo > 0),
             Op.LT: (hi < 0, lo >= 0), Op.EQ: (lo == hi == 0, lo > 0 or hi < 0),
             Op.NE: (lo > 0 or hi < 0, lo == hi == 0)}[c.op]
    return True if known[0] else False if known[1] else None


def _is_atom(e: Expr, form: Linear) -> bool:
    """Whether ``e`` is itself an atom of its linear form (not a sum, product or constant)."""
    return form.const == 0 and len(form.terms) == 1 and form.terms[0] == (e, 1)


def _divisor(e: Expr) -> int | None:
    c = int_constant(e.src[1])
    return c if c is not None and c > 0 else None


def _div_operands(e: Expr) -> tuple[Expr, ...] | None:
    return None if _divisor(e) is None else (e.src[0],)


def _cast_operands(e: Expr) -> tuple[Expr, ...] | None:
    return (e.src[0],) if dt.is_int(e.dtype) and dt.is_int(e.src[0].dtype) else None


def _cast(space: IndexSpace, e: Expr) -> isl.PwAff:
    """An integer cast: the operand itself, or -- narrowing a value it may not hold -- the operand wrapped
    into the type, ``((a + 2**(b-1)) mod 2**b) - 2**(b-1)``: quasi-affine, so a wrapping index stays
    exact in isl (``int32(int64(i) * 100000) % 7``)."""
    a = space._aff_memo[e.src[0]]
    if cast_keeps_value(e):
        return a
    half = 1 << (dt.bits(e.dtype) - 1)
    return a.add_constant_val(_val(half)).mod_val(_val(2 * half)).add_constant_val(_val(-half))


def _floordiv(space: IndexSpace, e: Expr) -> isl.PwAff:  # floor(a / c)
    return space._aff_memo[e.src[0]].scale_down_val(_val(_divisor(e))).floor()


def _mod(space: IndexSpace, e: Expr) -> isl.PwAff:  # a - c * floor(a / c)
    return space._aff_memo[e.src[0]].mod_val(_val(_divisor(e)))


def _extreme(name: str) -> Callable[[IndexSpace, Expr], isl.PwAff]:
    """``max`` or ``min`` (``name``) of the two operands."""
    return lambda space, e: getattr(space._aff_memo[e.src[0]], name)(space._aff_memo[e.src[1]])


def _choice(space: IndexSpace, e: Expr) -> isl.PwAff:  # a where c holds, b elsewhere
    c = space.cond(e.src[0])
    a, b = space._aff_memo[e.src[1]], space._aff_memo[e.src[2]]
    return a.intersect_domain(c).union_add(b.intersect_domain(space.outside(c)))


# The atoms of a linear form that isl represents, besides the space's variables: op -> (the operands
# converted first, or ``None`` when not quasi-affine; the node's function of theirs).
_ATOMS = {
    Op.FLOORDIV: (_div_operands, _floordiv),
    Op.MOD: (_div_operands, _mod),
    Op.CAST: (_cast_operands, _cast),
    Op.MAXIMUM: (lambda e: e.src, _extreme("max")),
    Op.MINIMUM: (lambda e: e.src, _extreme("min")),
    Op.SELECT: (lambda e: e.src[1:], _choice),
    Op.IF_THEN_ELSE: (lambda e: e.src[1:], _choice),
}


_CMP = {Op.LT: "lt_set", Op.LE: "le_set", Op.GT: "gt_set", Op.GE: "ge_set",
        Op.EQ: "eq_set", Op.NE: "ne_set"}


def _ident(name: str) -> str:
    out = "".join(ch if ch.isalnum() else "_" for ch in name)
    return out if out and not out[0].isdigit() else "v" + out


def point_str(space: IndexSpace, s: isl.Set) -> str:
    """One point of nonempty ``s`` as ``name=value, ...``, sizes last (for error messages)."""
    p, dims = s.sample_point(), [(_SET, k, v) for k, v in enumerate(space.vars)]
    dims += [(_PARAM, k, s.get_dim_id(_PARAM, k).user) for k in range(s.dim(_PARAM))]

    return ", ".join(f"{v.name if v.op is Op.VAR else expr_to_str(v)}="
                     f"{p.get_coordinate_val(t, k).to_python()}" for t, k, v in dims)
