"""Packing the two sides of a contraction into the micro-kernel's panels.

``pack(dst, expr, outer, o0, olen, W, k0, klen)`` fills ``dst[p][k][w] = expr(o0 + p*W + w, k0 + k)``
(``p`` a panel of ``W`` rows, MR for A and NR for B) and zero-pads past ``olen``.  The general path
evaluates ``expr`` with the expression emitter, in runs along the group it reads contiguously.  A side
contiguous along ``k`` but strided along the panel rows is transposed in registers, a VW x VW block at a
time (VW loads, Eklundh's log2(VW) shuffle stages, VW stores).  An expression contiguous along ``k`` is
staged by the library (``STAGED``) from the panel rows :meth:`Packer.rows` computes."""

from __future__ import annotations

from contextlib import contextmanager

import llvmlite.ir as ir

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import walk
from tensorad.poly.linear import var_coefficients

from ..llvm.expr import ExprEmitter
from ..llvm.ir_loops import for_range, smin
from .descriptor import block_size

I32, I64 = ir.IntType(32), ir.IntType(64)
ROWS_BLOCK = 16  # values of k packed per pass over the panels of a row-contiguous side
LINE_BYTES = 64  # a cache line: narrow panels of a row-contiguous side are packed a line of rows at a time
STAGE_RUN = 64  # values of k per panel row the library's staging packer (``STAGED``) asks for at a time


def linear_stride(expr: Expr, v: Expr, strides_of) -> int | None:
    """The element stride of the first read in ``expr`` along ``v`` (None: not linear); the
    digits of one value read as adjacent dimensions are that value (a flattened tensor)."""
    from ..llvm.expr import recombine_digits

    for n in walk(expr):
        if n.op is Op.READ:
            total = 0
            for idx, st in recombine_digits(n.src, strides_of(n.arg)):
                co = var_coefficients(idx)
                if co is None:
                    return None
                total += co.get(v, 0) * st
            return total
    return None


def along_k(expr: Expr, kaxes, outer, strides_of) -> tuple[bool, int | None]:
    """Whether a side's panels are packed along ``k`` (the group whose last axis ``expr`` reads
    contiguously, the longer run if both), and its element stride along ``k``."""
    sk = linear_stride(expr, kaxes[-1], strides_of)
    so = linear_stride(expr, outer[-1], strides_of)
    run_k = kaxes[-1].extent if sk in (1, -1) else 0
    run_o = outer[-1].extent if so in (1, -1) else 0
    return run_k > run_o, sk


def staged(expr: Expr, kaxes, outer, width: int, vw: int, strides_of) -> bool:
    """Whether the library packs a side (``STAGED``, :mod:`.gemm.pack_routines`) from the rows
    :meth:`Packer.rows` computes: a side that computes its values, read contiguously along ``k``, in
    panels a register transpose serves."""
    k_inner, sk = along_k(expr, kaxes, outer, strides_of)
    return expr.op is not Op.READ and k_inner and sk == 1 and bool(block_size(width, vw))


def c64(x) -> ir.Value:
    return I64(x) if isinstance(x, int) else x


@contextmanager
def advancing(b: ir.IRBuilder, start, stop, name: str = "pos"):
    """``pos = start; while pos < stop: <body>; pos = next`` -- the body sets ``nxt[0]``."""
    pre = b.block
    head = b.append_basic_block(f"{name}.head")
    body = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    pos = b.phi(I64, name=name)
    pos.add_incoming(c64(start), pre)
    b.cbranch(b.icmp_signed("<", pos, c64(stop)), body, done)
    b.position_at_end(body)
    nxt: list = [None]
    yield pos, nxt
    pos.add_incoming(nxt[0], b.block)
    b.branch(head)
    b.position_at_end(done)


@contextmanager
def pushed(em: ExprEmitter):
    """A scope of ``em``'s bindings: pushed on entry, popped on exit."""
    em.push()
    yield em
    em.pop()


def transpose(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The columns of the block whose ``bs`` rows are ``rows`` of ``n >= bs`` elements, as ``bs`` vectors of
    ``n`` that hold them one after another (a square block: its columns).  For blocks of ``s`` = 1, 2, 4
    ... elements, pairs of vectors (rows ``s`` apart, then whole columns ``s / bs`` apart) give the lower
    and upper halves of each group of ``2 s`` elements, or of a 16-byte lane where that is longer (a lane
    of at most ``bs`` elements: two rows of floats interleave pairs), interleaved block by block: shuffles
    within x86's lanes while they can be (unpack, shufps, then vperm2f128: 24 for 8 x 8 floats, 12 for
    4 x 8).  What each vector holds is followed in ``cells``."""
    (bs, n), rows = (len(rows), rows[0].type.count), list(rows)
    lane, cells = min(bs, 16 // (8 if isinstance(rows[0].type.element, ir.DoubleType) else 4)), [
        [(r, c) for c in range(n)] for r in range(bs)]
    s = 1
    while s < n:
        g = min(n, max(lane, 2 * s))
        masks = [[q // s % 2 * n + q // g * g + q % g // (2 * s) * s + q % s + half for q in range(n)]
                 for half in (0, g // 2)]
        first = {cells[i][0][1]: i for i in range(bs)}
        for i, j in ([(i, i + s) for i in range(bs) if not i & s] if s < bs else
                     [(first[c], first[c + s // bs]) for c in sorted(first) if not c & s // bs]):
            both = cells[i] + cells[j]
            rows[i], rows[j] = (b.shuffle_vector(rows[i], rows[j], ir.Constant(ir.VectorType(I32, n), m))
                                for m in masks)
            cells[i], cells[j] = ([both[x] for x in m] for m in masks)
        s *= 2
    return [rows[i] for i in sorted(range(bs), key=lambda i: cells[i][0][1])]


class Packer:
    """Packs panels for one contraction (``kaxes``: its reduction axes) in one function."""

    def __init__(self, b: ir.IRBuilder, em: ExprEmitter, kaxes: tuple[Expr, ...], t: ir.Type,
                 vw: int, masked: bool = False) -> None:
        self.b, self.em, self.kaxes, self.t = b, em, kaxes, t
        self.vw = vw  # the target's vector lanes for t
        self.masked = masked  # (the target's masked vector memory operations are cheap)

    def bind(self, axes: tuple[Expr, ...], flat: ir.Value, read: set[Expr] | None = None) -> None:
        """Bind ``axes`` (row-major) to the digits of the flat index ``flat``; with ``read``, only the
        axes in it (no code for a digit nothing reads: two functions differing only in such a digit's
        offset are one text, merged as twins)."""
        b, inner = self.b, 1
        for ax in reversed(axes):
            if read is not None and ax not in read:
                inner *= ax.extent
                continue
            q = b.udiv(flat, I64(inner)) if inner != 1 else flat
            digit = b.urem(q, I64(ax.extent)) if ax is not axes[0] else q
            self.em.env[ax] = b.add(digit, I64(ax.lo)) if ax.lo else digit
            inner *= ax.extent

    def runs(self, axes, start: ir.Value, count: ir.Value, body) -> None:
        """``body(pos, seglen, first)`` once per run of ``[start, start + count)`` along the last of
        ``axes``, the other digits bound once per run, the last from ``first`` for ``seglen`` steps at
        offset ``pos``."""
        b, em = self.b, self.em
        last = axes[-1]
        with advancing(b, 0, count, "run") as (pos, nxt), pushed(em):
            self.bind(axes, b.add(start, pos))
            first = em.env[last]
            seglen = smin(b, b.sub(I64(last.hi), first), b.sub(count, pos))
            body(pos, seglen, first)
            nxt[0] = b.add(pos, seglen)

    def segments(self, axes, start: ir.Value, count: ir.Value, body, vectorize: bool = True) -> None:
        """``body(i)`` for ``i`` in ``[0, count)`` with ``axes`` bound to the digits of ``start + i``, in runs
        along the last axis.  ``vectorize=False``: kept from the vectorizer (``count`` at most a panel's)."""
        b, em, last = self.b, self.em, axes[-1]

        def run(pos, seglen, first):
            with for_range(b, 0, seglen, name="seg", vectorize=vectorize) as i, pushed(em):
                em.env[last] = b.add(first, i)
                body(b.add(pos, i))

        self.runs(axes, start, count, run)

    def rows(self, expr, outer, o: ir.Value, nrows: ir.Value, k: ir.Value, count: ir.Value,
             out: ir.Value) -> None:
        """``out[r * STAGE_RUN + c] = expr(o + r, k + c)`` for ``r < nrows``, ``c < count`` (flat positions of
        the outer axes and of ``k``): per run along the last ``k`` axis, one rolled loop over the rows around
        a unit-stride loop the vectorizer widens (never unrolled; masked vectors where the target has them),
        the expression emitted once."""
        b, em = self.b, self.em
        klast = self.kaxes[-1]

        def run(pos, seglen, first):
            with for_range(b, 0, nrows, name="sr", vectorize=False, unroll=False) as r, pushed(em):
                self.bind(outer, b.add(o, r))
                row = b.gep(out, [b.add(b.mul(r, I64(STAGE_RUN)), pos)], inbounds=True, source_etype=self.t)
                with for_range(b, 0, seglen, name="sk", unroll=False, masked_tail=self.masked) as c, \
                        pushed(em):
                    em.env[klast] = b.add(first, c)
                    b.store(em.value(expr), b.gep(row, [c], inbounds=True, source_etype=self.t))

        self.runs(self.kaxes, k, count, run)

    def pack(self, dst, expr, outer, o0, olen, width, k0, klen) -> None:
        b, em, t = self.b, self.em, self.t
        k_inner, sk = along_k(expr, self.kaxes, outer, em.strides)
        bs = block_size(width, self.vw)
        transposing = k_inner and sk == 1 and bs
        npanel = b.sdiv(b.add(olen, I64(width - 1)), I64(width))

        def slot(p, kk, w):
            return b.gep(dst, [b.add(b.mul(b.add(b.mul(p, klen), kk), I64(width)), w)], inbounds=True,
                         source_etype=t)

        if not k_inner:
            self._pack_rows(expr, outer, o0, olen, width, k0, klen, npanel, slot)
        # (kept rolled: a panel's body is no work to unroll)
        with for_range(b, 0, npanel, name="pp", unroll=False) as p, pushed(em):
            first = b.add(o0, b.mul(p, I64(width)))
            valid = smin(b, I64(width), b.sub(olen, b.mul(p, I64(width))))
            if transposing:
                self.runs(self.kaxes, k0, klen, lambda pos, seglen, kfirst, p=p, first=first, valid=valid:
                          self._run(dst, expr, outer, first, valid, width, p, pos, seglen, kfirst, bs, slot))
            elif k_inner:
                with for_range(b, 0, valid, name="pw") as w, pushed(em):
                    self.bind(outer, b.add(first, w))
                    self.segments(self.kaxes, k0, klen,
                                  lambda i, w=w, p=p: b.store(em.value(expr), slot(p, i, w)))
            with for_range(b, valid, width, name="zw", vectorize=False) as w:
                with for_range(b, 0, klen, name="zk", vectorize=False) as kk:
                    b.store(t(0.0), slot(p, kk, w))

    def _pack_rows(self, expr, outer, o0, olen, width, k0, klen, npanel, slot) -> None:
        """The panels of a side read contiguously along the panel rows, :data:`ROWS_BLOCK` values of ``k``
        at a time, a group of panels at a time (the source rows stay in L1, each panel written in order).
        Panels narrower than a cache line (or a vector) go side by side, a line of rows for each ``k``: a
        group inside one run of the last outer axis is constant-trip loops, a vector per panel; another
        group goes run by run.  (Binding ``k`` and the checks cost about as much as a narrow panel's few
        values: done once per line, not per panel.)"""
        b, em = self.b, self.em
        last = outer[-1]
        line = max(self.vw, LINE_BYTES // (4 if isinstance(self.t, ir.FloatType) else 8))
        group = line // width if width < line and line % width == 0 else 1
        rows = group * width
        with for_range(b, 0, klen, ROWS_BLOCK, name="pkb") as kb:
            kend = smin(b, b.add(kb, I64(ROWS_BLOCK)), klen)
            with for_range(b, 0, npanel, group, name="pp") as p, pushed(em):
                first = b.add(o0, b.mul(p, I64(width)))
                valid = smin(b, I64(rows), b.sub(olen, b.mul(p, I64(width))))
                self.bind(outer, first)
                start = em.env[last]
                fits = b.and_(b.icmp_signed("==", valid, I64(rows)),
                              b.icmp_signed("<=", b.add(start, I64(rows)), I64(last.hi)))

                def put(w, kk, p=p):
                    return slot(b.add(p, b.udiv(w, I64(width))), kk, b.urem(w, I64(width)))

                # (one panel narrower than a vector: LLVM may vectorize across k)
                across_k = width < self.vw and group == 1
                with for_range(b, kb, kend, name="pk", vectorize=across_k, unroll=False) as kk, pushed(em):
                    self.bind(self.kaxes, b.add(k0, kk))
                    with b.if_else(fits) as (whole, part):
                        with whole:
                            with for_range(b, 0, group, name="pq") as q:  # a panel's part a vector
                                row = b.add(start, b.mul(q, I64(width)))
                                with for_range(b, 0, width, name="pf") as w, pushed(em):
                                    em.env[last] = b.add(row, w)
                                    b.store(em.value(expr), slot(b.add(p, q), kk, w))
                        with part:
                            self.segments(outer, first, valid,
                                          lambda w, kk=kk: b.store(em.value(expr), put(w, kk)),
                                          vectorize=False)

    def _run(self, dst, expr, outer, first, valid, width, p, pos, seglen, kfirst, bs, slot) -> None:
        """One contiguous run of ``k`` for panel ``p`` of a read (a side that computes its values is the
        library's to stage, :func:`staged`): in a full panel, whole ``bs``-blocks through ``bs`` x ``bs``
        register transposes; the rest element by element."""
        b, em, t = self.b, self.em, self.t
        klast = self.kaxes[-1]
        vt = ir.VectorType(t, bs)
        es = 4 if isinstance(t, ir.FloatType) else 8
        full = b.icmp_signed("==", valid, I64(width))
        nb = b.select(full, b.mul(b.sdiv(seglen, I64(bs)), I64(bs)), I64(0))

        def address(row: int) -> ir.Value:
            with pushed(em):
                self.bind(outer, b.add(first, I64(row)))
                return em.address(expr.arg, expr.src)

        with for_range(b, 0, nb, bs, name="tk") as kb, pushed(em):  # the bs x bs blocks at k offset kb
            em.env[klast] = b.add(kfirst, kb)
            for g in range(width // bs):
                rows = [b.load(b.bitcast(address(g * bs + r), vt.as_pointer()), typ=vt, align=es)
                        for r in range(bs)]
                for c, col in enumerate(transpose(b, rows)):
                    base = slot(p, b.add(pos, b.add(kb, I64(c))), I64(g * bs))
                    b.store(col, b.bitcast(base, vt.as_pointer()), align=es)
        with for_range(b, 0, valid, name="rw", vectorize=False) as w, pushed(em):
            self.bind(outer, b.add(first, w))
            with for_range(b, nb, seglen, name="rk", vectorize=False) as i, pushed(em):
                em.env[klast] = b.add(kfirst, i)
                b.store(em.value(expr), slot(p, b.add(pos, i), w))
