"""Integer index arithmetic as linear forms: ``c0 + sum(c_k * atom_k)``.

An index expression built from ``+``, ``-``, unary ``-`` and products with constants is a
linear form over *atoms* -- variables, reads, ``//``/``%`` nodes, anything that is not
linear.  Collecting coefficients normalises it: ``i + 1 - 1`` becomes ``i``,
``2 * (j + 3) - j`` becomes ``j + 6``.  Rebuilding orders the atoms by :func:`atom_key`, a
structural key (variables by name and creation number, other atoms by their structure),
never by hash or address, so the result is the same from run to run and independent of the
order the operands were written in (``i + j`` and ``j + i`` become one node).

One non-linear identity is folded here because it needs the whole form: isl writes
``x mod c`` as ``x - c * floor(x / c)``, and :func:`to_linear` turns ``m*x - m*c*(x // c)``
back into ``m * (x % c)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorad.ir import dtype as dt
from tensorad.ir.expr import Expr, Op, const


def atom_key(e: Expr) -> tuple:
    """A deterministic sort key for atoms: variables first (by name, then creation order),
    then other atoms by their structure (ops, dtypes, constants, variables -- never a
    tensor's name or an address, so renaming a tensor does not reorder a form)."""
    if e.op is Op.VAR:
        return (0, e.name, e.arg.uid)
    return (1, _structure(e, {}))


def _tensor_id(t) -> tuple:
    """A placeholder's uid or a compute op's provenance group: identity without the name."""
    op = t.op
    return ("p", op.uid) if hasattr(op, "uid") else ("c", op.provenance.group)


def _structure(e: Expr, memo: dict) -> tuple:
    found = memo.get(e)
    if found is None:
        if e.op is Op.VAR:
            found = ("var", e.name, e.arg.uid)
        elif e.op is Op.CONST:
            found = ("const", e.dtype, repr(e.arg))
        else:
            arg = e.arg
            extra = (repr(arg.shape), arg.value_index, _tensor_id(arg)) if e.op is Op.READ else ()
            found = (e.op.value, e.dtype, *extra, *(_structure(s, memo) for s in e.src))
        memo[e] = found
    return found


@dataclass(frozen=True)
class Linear:
    """``const + sum(coef * atom)``; ``terms`` is sorted by :func:`atom_key`, no zero coefficients."""

    terms: tuple[tuple[Expr, int], ...]
    const: int

    @staticmethod
    def of(terms: dict[Expr, int], c: int) -> Linear:
        items = sorted(((a, k) for a, k in terms.items() if k), key=lambda t: atom_key(t[0]))
        return Linear(tuple(items), int(c))

    def as_dict(self) -> dict[Expr, int]:
        return dict(self.terms)

    def __add__(self, other: Linear) -> Linear:
        d = self.as_dict()
        for a, k in other.terms:
            d[a] = d.get(a, 0) + k
        return Linear.of(d, self.const + other.const)

    def scale(self, s: int) -> Linear:
        return Linear.of({a: k * s for a, k in self.terms}, self.const * s)

    def __sub__(self, other: Linear) -> Linear:
        return self + other.scale(-1)

    @property
    def is_const(self) -> bool:
        return not self.terms


def is_index(e: Expr) -> bool:
    return dt.is_int(e.dtype)


def _int_const(e: Expr) -> bool:
    return e.op is Op.CONST and float(e.arg).is_integer()


def to_linear(e: Expr, memo: dict | None = None) -> Linear:
    """The linear form of integer expression ``e`` (atoms are its non-linear subterms).

    ``memo`` (node -> form) may be shared by calls that know the same nodes recur.
    """
    if memo is None:
        memo = {}
    found = memo.get(e)
    if found is not None:
        return found
    op = e.op
    if not is_index(e) or (op is Op.CONST and not float(e.arg).is_integer()):
        out = Linear(((e, 1),), 0)  # not integer arithmetic: an atom (never int() of 0.3)
    elif op is Op.CONST:
        out = Linear((), int(e.arg))
    elif op is Op.ADD:
        out = to_linear(e.src[0], memo) + to_linear(e.src[1], memo)
    elif op is Op.SUB:
        out = to_linear(e.src[0], memo) - to_linear(e.src[1], memo)
    elif op is Op.NEG:
        out = to_linear(e.src[0], memo).scale(-1)
    elif op is Op.MUL and (_int_const(e.src[0]) or _int_const(e.src[1])):
        c, x = (e.src[0], e.src[1]) if _int_const(e.src[0]) else (e.src[1], e.src[0])
        out = to_linear(x, memo).scale(int(c.arg))
    else:
        out = Linear(((e, 1),), 0)
    if op in (Op.ADD, Op.SUB):
        out = _fold_mod(out, memo)
    memo[e] = out
    return out


def _fold_mod(f: Linear, memo: dict) -> Linear:
    """``m*x - m*c*(x // c)`` -> ``m*(x % c)``, and ``m*c*(x // c) + m*(x % c)`` -> ``m*x``
    (floor semantics: x = c*(x//c) + x%c)."""
    d = f.as_dict()
    for atom, k in f.terms:
        if atom.op is not Op.FLOORDIV or atom.src[1].op is not Op.CONST:
            continue
        c = int(atom.src[1].arg)
        mod = Expr(Op.MOD, atom.dtype, atom.src)
        if c > 0 and k % c == 0 and d.get(mod, 0) * c == k:
            whole = to_linear(atom.src[0], memo).scale(k // c)
            return _fold_mod(f - Linear.of({atom: k, mod: k // c}, 0) + whole, memo)
    for atom, k in f.terms:
        if atom.op is not Op.FLOORDIV or atom.src[1].op is not Op.CONST:
            continue
        c = int(atom.src[1].arg)
        if c <= 0 or k % c:
            continue
        m = -k // c
        x = to_linear(atom.src[0], memo).scale(m)
        rest = f - x - Linear(((atom, k),), 0)
        # the fold applies when every atom of m*x is present with its coefficient
        d = f.as_dict()
        if all(d.get(a, 0) == kx for a, kx in x.terms):
            mod = Expr(Op.MOD, atom.dtype, atom.src)
            return rest + Linear(((mod, m),), 0)
    return f


def from_linear(f: Linear, dtype: str = dt.INDEX) -> Expr:
    """Rebuild ``f`` as ``t1 +/- t2 ... +/- c`` in atom-key order (a fixed point of to_linear)."""
    acc: Expr | None = None
    c = f.const
    if f.terms and f.terms[0][1] < 0 and c > 0:  # 9 - i rather than -i + 9
        acc, c = const(c, dtype), 0
    for atom, k in f.terms:
        mag = abs(k)
        term = atom if mag == 1 else Expr(Op.MUL, dtype, (const(mag, dtype), atom))
        if acc is None:
            acc = term if k > 0 else (Expr(Op.NEG, dtype, (atom,)) if mag == 1
                                      else Expr(Op.MUL, dtype, (const(k, dtype), atom)))
        else:
            acc = Expr(Op.ADD if k > 0 else Op.SUB, dtype, (acc, term))
    if acc is None:
        return const(c, dtype)
    if c:
        acc = Expr(Op.ADD if c > 0 else Op.SUB, dtype, (acc, const(abs(c), dtype)))
    return acc
