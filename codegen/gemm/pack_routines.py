"""The library's generic packing routines: any linear read, described at run time (:mod:`.gemm.descriptor`).

``pack(side, dst, bflat, o0, olen, k0, klen, scratch)`` fills ``dst[p][k][w] = value(o0 + p*W + w, k0 +
k)`` (``W`` the panel width), zero-padding the last panel, from tables of the side's address along the
two groups (``ooff[o]``, ``koff[k]``) and ``run[i]``, the length of the unit-stride stretch at ``i``.
Modes: ``TRANSPOSE`` (contiguous along ``k``: register transposes of ``bs`` rows, an overlapping or masked
last block, each row asking for the line of the row one panel on into L2); ``COPY`` (contiguous along
the outer axes: run-wise copies; range-checked indices as lane masks of masked loads where each vector
lies in at most two runs, else ``x0 + step*i`` as zeros, a copy, zeros; checks of ``k`` alone tested once
per panel row or per ``k``); ``COPY2`` (stride 2: the even lanes of two loads); ``GATHER`` (element by
element through the tables); ``STAGED`` (a side the kernel computes: its row function's values, transposed,
:func:`_staged_mode`)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial, reduce

import llvmlite.ir as ir

from ..llvm.ir_loops import declare, for_range, smin
from . import descriptor as gd
from .packing import STAGE_RUN, advancing, c64, transpose

I1, I64 = ir.IntType(1), ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()


# ---- small IR helpers ------------------------------------------------------------------------

def ld(b: ir.IRBuilder, base: ir.Value, idx, t: ir.Type = I64) -> ir.Value:
    return b.load(b.gep(base, [c64(idx)], inbounds=True, source_etype=t), typ=t)


def st(b: ir.IRBuilder, base: ir.Value, idx, v: ir.Value, t: ir.Type = I64) -> None:
    b.store(v, b.gep(base, [c64(idx)], inbounds=True, source_etype=t))


def entry_alloca(b: ir.IRBuilder, t: ir.Type, name: str, size: int | None = None) -> ir.Value:
    """A stack slot in the function's entry block (one per call; promoted to a register by ``-O1``)."""
    with b.goto_entry_block():
        return b.alloca(t, size=None if size is None else I64(size), name=name)


def imax(b, x, y):
    return b.select(b.icmp_signed(">", x, y), x, y)


# The library's loops: only those asked to be (``vectorize=True``) are vectorized or unrolled.
loop = partial(for_range, vectorize=False)


K_BLOCK = 32  # rows of a run-wise block (windows, padding, edge panels) of the COPY path
PANEL_ROWS = 8  # rows of a block of whole panels: its lines stay in L1 across the panels, 4 KiB apart too
SLACK = 64  # elements a panel buffer has past its end: a spilling copy's last vector (any target)


def copy(b: ir.IRBuilder, t: ir.Type, dst, src, a, e, vw: int, spill: bool = False,
         limit: ir.Value | None = None, stride: int = 1) -> None:
    """``dst[i] = src[stride i]`` for ``i`` in ``[a, e)`` (``src=None``: zeros; ``stride`` 1 or 2) in
    explicit ``vw``-lane vectors (:func:`_vector_copy`).  A run's rest of at least ``vw`` is its last ``vw``
    elements copied again; a shorter run is masked loads and a masked store, or with ``spill=True`` a whole
    vector store that writes up to ``vw - 1`` elements past ``e`` (for a caller whose later stores overwrite
    them: :data:`SLACK` elements are allocated past a panel's end); with ``limit``, only a store ending by
    ``dst[limit]`` spills, another goes element by element.  Masked memory operations are slow on some CPUs
    (microcoded on AMD)."""
    n = b.sub(e, a)
    nvec = b.mul(b.sdiv(n, I64(vw)), I64(vw))
    with loop(b, 0, nvec, vw, name="cv") as i:
        _vector_copy(b, t, dst, src, b.add(a, i), vw, stride)
    rest = b.sub(n, nvec)
    with b.if_then(b.icmp_signed(">", rest, I64(0))):
        with b.if_else(b.icmp_signed(">", nvec, I64(0))) as (back, short):
            with back:  # a run of at least vw: its last vw elements again, as one plain vector
                _vector_copy(b, t, dst, src, b.sub(e, I64(vw)), vw, stride)
            with short:
                _masked_rest(b, t, dst, src, a, rest, vw, spill, limit, stride)


def _vector_copy(b: ir.IRBuilder, t: ir.Type, dst, src, at, vw: int, stride: int) -> None:
    """``dst[at + i] = src[stride (at + i)]`` (``src=None``: zeros) for ``i < vw``, one vector: at stride 2
    the even lanes of the loads at ``2 at`` and ``2 at + vw - 1`` (nothing read past
    ``src[2 (at + vw - 1)]``)."""
    es = 4 if isinstance(t, ir.FloatType) else 8
    vt = ir.VectorType(t, vw)
    if src is None:
        v = ir.Constant(vt, None)
    elif stride == 1:
        v = b.load(b.gep(src, [at], inbounds=True, source_etype=t), typ=vt, align=es)
    else:
        two = b.mul(at, I64(2))
        lo = b.load(b.gep(src, [two], source_etype=t), typ=vt, align=es)
        hi = b.load(b.gep(src, [b.add(two, I64(vw - 1))], source_etype=t), typ=vt, align=es)
        v = b.shuffle_vector(lo, hi, _even_lanes(vw))
    b.store(v, b.gep(dst, [at], inbounds=True, source_etype=t), align=es)


def _masked_load(b: ir.IRBuilder, t: ir.Type, at: ir.Value, mask: ir.Value) -> ir.Value:
    """The lanes of the vector at ``at`` where ``mask`` is set, zeros elsewhere (nothing else is read)."""
    es = 4 if isinstance(t, ir.FloatType) else 8
    vt = ir.VectorType(t, mask.type.count)
    mload = declare(b.module, f"llvm.masked.load.v{vt.count}{'f32' if es == 4 else 'f64'}.p0", vt,
                    [PTR, ir.IntType(32), mask.type, vt])
    return b.call(mload, [at, ir.IntType(32)(es), mask, ir.Constant(vt, None)])


def _even_lanes(vw: int) -> ir.Constant:
    """The shuffle of two ``vw``-lane vectors loaded ``vw - 1`` apart that picks every other element."""
    return ir.Constant(ir.VectorType(ir.IntType(32), vw), [2 * n for n in range(vw // 2)]
                       + [vw + 2 * n + 1 for n in range(vw // 2)])


def _masked_rest(b: ir.IRBuilder, t: ir.Type, dst, src, at, rest, vw: int, spill: bool,
                 limit: ir.Value | None = None, stride: int = 1) -> None:
    """``dst[at + i] = src[stride (at + i)]`` for ``i < rest < vw``: masked loads (at stride 2 two, as
    :func:`_vector_copy` reads), and a masked store or (``spill``) a whole one, whole with ``limit`` only if
    it ends by ``dst[limit]``."""
    es = 4 if isinstance(t, ir.FloatType) else 8
    vt = ir.VectorType(t, vw)
    mt = ir.VectorType(I1, vw)
    zero = ir.Constant(vt, None)
    lanes = ir.Constant(ir.VectorType(I64, vw), list(range(vw)))
    mask = b.icmp_signed("<", lanes, splat(b, rest, vw))
    suffix = f"v{vw}{'f32' if es == 4 else 'f64'}.p0"
    if src is None:
        v = zero
    else:
        def load(first, valid):  # the lanes below ``valid`` of the vector at ``src[first]``
            at_first = b.gep(src, [first], inbounds=stride == 1, source_etype=t)
            return _masked_load(b, t, at_first, b.icmp_signed("<", lanes, splat(b, valid, vw)))

        if stride == 1:
            v = load(at, rest)
        else:  # (the last element read is ``src[2 (at + rest - 1)]``)
            two, span = b.mul(at, I64(2)), b.sub(b.mul(rest, I64(2)), I64(1))
            v = b.shuffle_vector(load(two, span), load(b.add(two, I64(vw - 1)), b.sub(span, I64(vw - 1))),
                                 _even_lanes(vw))
    to = b.gep(dst, [at], inbounds=True, source_etype=t)
    if not spill:
        mstore = declare(b.module, f"llvm.masked.store.{suffix}", VOID, [vt, PTR, ir.IntType(32), mt])
        b.call(mstore, [v, to, ir.IntType(32)(es), mask])
    elif limit is None:
        b.store(v, to, align=es)
    else:
        with b.if_else(b.icmp_signed("<=", b.add(at, I64(vw)), limit)) as (whole, near_limit):
            with whole:
                b.store(v, to, align=es)
            with near_limit:  # element by element (a masked store is microcoded on AMD CPUs)
                with loop(b, 0, rest, name="mr") as i:
                    x = t(0.0) if src is None else ld(b, src, b.mul(b.add(at, i), I64(stride)), t)
                    st(b, dst, b.add(at, i), x, t)


def new_function(module: ir.Module, name: str, args: Sequence[ir.Type], internal: bool = True,
                 attrs: tuple[str, ...] = ("nounwind", "noinline"), ret: ir.Type = VOID) -> tuple:
    """A function of ``args`` (internal unless told) with ``attrs``, and a builder at its entry block."""
    fn = ir.Function(module, ir.FunctionType(ret, args), name)
    if internal:
        fn.linkage = "internal"
    for attr in attrs:
        fn.attributes.add(attr)
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


# ---- tables ----------------------------------------------------------------------------------

def emit_table(module: ir.Module, name: str) -> ir.Function:
    """``table(side, g, start, count, base_off, base_chk, off, chk)``: ``off[i]`` and
    ``chk[d*count + i]`` at the flat positions ``start + i`` of group ``g``."""
    fn, b = new_function(module, name, [PTR, I64, I64, I64, I64, PTR, PTR, PTR])
    side, g, start, count, base_off, base_chk, off, chk = fn.args
    for a in (base_chk, off, chk):
        a.add_attribute("noalias")
    gb = b.add(I64(gd.group_base(0)), b.mul(g, I64(gd.group_base(1) - gd.group_base(0))))
    n = ld(b, side, gb)
    nchk = ld(b, side, gd.S_NCHK)
    digits = entry_alloca(b, I64, "digits", 8)

    def field(ax, f):
        return ld(b, side, b.add(b.add(gb, c64(f)), b.add(I64(1), b.mul(ax, I64(gd.AX_LEN)))))

    with b.if_then(b.icmp_signed(">", count, I64(0))):
        # digits of start (the first axis keeps the quotient: start is in range)
        rem_slot = entry_alloca(b, I64, "rem")
        b.store(start, rem_slot)
        with loop(b, 0, n, name="dec") as j:
            ax = b.sub(b.sub(n, I64(1)), j)
            rem = b.load(rem_slot)
            ext = field(ax, 0)
            last = b.icmp_signed("==", ax, I64(0))
            st(b, digits, ax, b.select(last, rem, b.srem(rem, ext)))
            b.store(b.sdiv(rem, ext), rem_slot)
        lastax = b.sub(n, I64(1))
        ext_last = field(lastax, 0)
        coef_last = field(lastax, 1)
        with advancing(b, 0, count, "tab") as (i, nxt):
            # the point's offset and checked indices from its digits
            acc = entry_alloca(b, I64, "acc")
            b.store(base_off, acc)
            with loop(b, 0, n, name="ax") as ax:
                b.store(b.add(b.load(acc), b.mul(ld(b, digits, ax), field(ax, 1))), acc)
            o = b.load(acc)
            dl = ld(b, digits, lastax)
            seg = smin(b, b.sub(ext_last, dl), b.sub(count, i))
            with loop(b, 0, seg, name="ramp") as r:
                st(b, off, b.add(i, r), b.add(o, b.mul(r, coef_last)))
            with loop(b, 0, nchk, name="chk") as d:
                b.store(ld(b, base_chk, d), acc)
                with loop(b, 0, n, name="cax") as ax:
                    b.store(b.add(b.load(acc), b.mul(ld(b, digits, ax), field(ax, b.add(d, I64(2))))), acc)
                x0 = b.load(acc)
                cl = field(lastax, b.add(d, I64(2)))
                row = b.add(b.mul(d, count), i)
                with loop(b, 0, seg, name="cramp") as r:
                    st(b, chk, b.add(row, r), b.add(x0, b.mul(r, cl)))
            # advance the odometer by seg: the last digit wraps to 0, carries ripple up
            st(b, digits, lastax, b.add(dl, seg))
            with loop(b, 0, lastax, name="carry") as j:
                ax = b.sub(lastax, j)
                dv = ld(b, digits, ax)
                wrap = b.icmp_signed(">=", dv, field(ax, 0))
                with b.if_then(wrap):
                    st(b, digits, ax, I64(0))
                    up = b.sub(ax, I64(1))
                    st(b, digits, up, b.add(ld(b, digits, up), I64(1)))
            nxt[0] = b.add(i, seg)
    b.ret_void()
    return fn


def emit_runs(module: ir.Module, name: str) -> ir.Function:
    """``runs(off, chk, count, nchk, step, run, stride)``: ``run[i]`` = the length of the stretch from
    ``i`` where ``off`` grows by ``stride`` and each checked index by its ``step`` (a backward scan)."""
    fn, b = new_function(module, name, [PTR, PTR, I64, I64, PTR, PTR, I64])
    off, chk, count, nchk, step, run, stride = fn.args
    with b.if_then(b.icmp_signed(">", count, I64(0))):
        last = b.sub(count, I64(1))
        st(b, run, last, I64(1))
        with b.if_else(b.icmp_signed("==", nchk, I64(0))) as (plain, checked):
            with plain:
                start = b.sub(last, I64(1))
                pre = b.block
                body = b.append_basic_block("fast.body")
                done = b.append_basic_block("fast.done")
                b.cbranch(b.icmp_signed(">=", start, I64(0)), body, done)
                b.position_at_end(body)
                i = b.phi(I64, name="i")
                r = b.phi(I64, name="r")
                i.add_incoming(start, pre)
                r.add_incoming(I64(1), pre)
                nx = b.add(i, I64(1))
                cont = b.icmp_signed("==", ld(b, off, nx), b.add(ld(b, off, i), stride))
                rn = b.select(cont, b.add(r, I64(1)), I64(1))
                st(b, run, i, rn)
                i.add_incoming(b.sub(i, I64(1)), b.block)
                r.add_incoming(rn, b.block)
                b.cbranch(b.icmp_signed(">", i, I64(0)), body, done)
                b.position_at_end(done)
            with checked:
                with loop(b, 1, count, name="back") as j:
                    i = b.sub(last, j)
                    nx = b.add(i, I64(1))
                    ok = entry_alloca(b, I1, "ok")
                    b.store(b.icmp_signed("==", ld(b, off, nx), b.add(ld(b, off, i), stride)), ok)
                    with loop(b, 0, nchk, name="rc") as d:
                        row = b.mul(d, count)
                        delta = b.sub(ld(b, chk, b.add(row, nx)), ld(b, chk, b.add(row, i)))
                        b.store(b.and_(b.load(ok), b.icmp_signed("==", delta, ld(b, step, d))), ok)
                    st(b, run, i, b.select(b.load(ok), b.add(ld(b, run, nx), I64(1)), I64(1)))
    b.ret_void()
    return fn


# ---- the packing routines --------------------------------------------------------------------

def emit_tables(module: ir.Module, name: str, table: ir.Function, runs: ir.Function) -> ir.Function:
    """``tables(side, bflat, o0, olen, k0, klen, scratch, what)``: the side's tables in ``scratch``
    (:func:`table_pointers`); ``what`` 1 adds ``krun``, 2 ``orun``, 3 and 4 their stride-2 runs."""
    fn, b = new_function(module, name, [PTR, I64, I64, I64, I64, I64, PTR, I64], internal=False)
    side, bflat, o0, olen, k0, klen, scratch, what = fn.args
    ooff, orun, ochk, koff, krun, kchk = table_pointers(b, scratch, olen, klen)
    nchk = ld(b, side, gd.S_NCHK)
    # the batch point and the constant are folded into the outer table
    base_chk = b.alloca(I64, size=I64(gd.MAXCHK), name="base_chk")
    zero_chk = b.alloca(I64, size=I64(gd.MAXCHK), name="zero_chk")
    steps = b.alloca(I64, size=I64(gd.MAXCHK), name="steps")
    for d in range(gd.MAXCHK):
        st(b, base_chk, d, ld(b, side, gd.S_CHKCONST + d))
        st(b, zero_chk, d, I64(0))
        st(b, steps, d, ld(b, side, gd.S_CHKSTEP + d))
    base = b.alloca(I64, name="base")
    b.store(ld(b, side, gd.S_CONST), base)
    rem = b.alloca(I64, name="brem")
    b.store(bflat, rem)
    nb = ld(b, side, gd.group_base(gd.BATCH))
    with loop(b, 0, nb, name="bax") as j:
        ax = b.sub(b.sub(nb, I64(1)), j)
        fb = b.add(I64(gd.axis_field(gd.BATCH, 0, 0)), b.mul(ax, I64(gd.AX_LEN)))
        ext = ld(b, side, fb)
        r = b.load(rem)
        digit = b.select(b.icmp_signed("==", ax, I64(0)), r, b.srem(r, ext))
        b.store(b.sdiv(r, ext), rem)
        b.store(b.add(b.load(base), b.mul(digit, ld(b, side, b.add(fb, I64(1))))), base)
        with loop(b, 0, nchk, name="bchk") as d:
            cc = ld(b, side, b.add(fb, b.add(d, I64(2))))
            st(b, base_chk, d, b.add(ld(b, base_chk, d), b.mul(digit, cc)))
    b.call(table, [side, I64(gd.OUTER), o0, olen, b.load(base), base_chk, ooff, ochk])
    b.call(table, [side, I64(gd.KGROUP), k0, klen, I64(0), zero_chk, koff, kchk])
    for code, stride in ((1, 1), (3, 2)):
        with b.if_then(b.icmp_signed("==", what, I64(code))):
            # (transposes: a run of k also keeps each checked index on its step along k's last axis)
            b.call(runs, [koff, kchk, klen, nchk, _ksteps(b, side), krun, I64(stride)])
    for code, stride in ((2, 1), (4, 2)):
        with b.if_then(b.icmp_signed("==", what, I64(code))):
            b.call(runs, [ooff, ochk, olen, nchk, steps, orun, I64(stride)])
    b.ret_void()
    return fn


def table_pointers(b: ir.IRBuilder, scratch, olen, klen) -> tuple:
    """``ooff[olen] orun[olen] ochk[gd.MAXCHK][olen] koff[klen] krun[klen] kchk[gd.MAXCHK][klen]``."""
    ooff = scratch
    orun = b.gep(ooff, [olen], source_etype=I64)
    ochk = b.gep(orun, [olen], source_etype=I64)
    koff = b.gep(ochk, [b.mul(olen, I64(gd.MAXCHK))], source_etype=I64)
    krun = b.gep(koff, [klen], source_etype=I64)
    kchk = b.gep(krun, [klen], source_etype=I64)
    return ooff, orun, ochk, koff, krun, kchk


MODES = {"transpose": gd.TRANSPOSE, "copy": gd.COPY, "gather": gd.GATHER, "transpose2": gd.TRANSPOSE2,
         "copy2": gd.COPY2, "staged": gd.STAGED}
MODE_NAMES = {m: n for n, m in MODES.items()}


def emit_pack(module: ir.Module, name: str, t: ir.Type, width: int, mode: int,
              tables: ir.Function, vw: int) -> ir.Function:
    """The generic ``pack(side, dst, bflat, o0, olen, k0, klen, scratch)`` of one mode, ``vw`` lanes wide."""
    fn, b = new_function(module, name, [PTR, PTR, I64, I64, I64, I64, I64, PTR], internal=False)
    side, dst, bflat, o0, olen, k0, klen, scratch = fn.args
    dst.add_attribute("noalias")
    scratch.add_attribute("noalias")
    es = 4 if isinstance(t, ir.FloatType) else 8
    npanel = b.sdiv(b.add(olen, I64(width - 1)), I64(width))
    if mode == gd.STAGED:
        _staged_mode(b, t, es, width, gd.block_size(width, vw), side, dst, bflat, o0, olen, k0, klen, npanel)
        b.ret_void()
        return fn
    src = b.inttoptr(ld(b, side, gd.S_BASE), PTR, name="src")
    what = {gd.TRANSPOSE: 1, gd.COPY: 2, gd.GATHER: 0, gd.TRANSPOSE2: 3, gd.COPY2: 4}[mode]
    b.call(tables, [side, bflat, o0, olen, k0, klen, scratch, I64(what)])
    ooff, orun, ochk, koff, krun, kchk = table_pointers(b, scratch, olen, klen)
    zero = t(0.0)

    def slot(pdst, kk, w):
        return b.gep(pdst, [b.add(b.mul(kk, I64(width)), c64(w))], inbounds=True, source_etype=t)

    def elem(o, kk):
        return ld(b, src, b.add(ld(b, ooff, o), ld(b, koff, kk)), t)

    def gather(first, valid, pdst):
        with loop(b, 0, klen, name="gk") as kk:
            with loop(b, 0, valid, name="gw") as w:
                b.store(elem(b.add(first, w), kk), slot(pdst, kk, w))
            with loop(b, valid, width, name="gz") as w:
                b.store(zero, slot(pdst, kk, w))

    if mode in (gd.TRANSPOSE, gd.TRANSPOSE2):
        bs = gd.block_size(width, vw)
        checks = (side, ochk, kchk, ld(b, side, gd.S_NCHK))
        _transpose_mode(b, t, es, width, (bs, vw if width == bs else bs), src, dst, ooff, koff, krun, olen,
                        klen, npanel, slot, checks, 2 if mode == gd.TRANSPOSE2 else 1)
    elif mode == gd.COPY2:
        with loop(b, 0, npanel, name="sp") as p:
            first, valid, pdst = _panel(b, t, p, width, olen, klen, dst)
            _copy_runs(b, t, side, width, src, ooff, orun, ochk, koff, kchk, olen, klen,
                       ld(b, side, gd.S_NCHK), first, valid, pdst, slot, zero, vw, stride=2)
    elif mode == gd.COPY:
        _copy_mode(b, t, side, width, src, dst, ooff, orun, ochk, koff, kchk, olen, klen,
                   ld(b, side, gd.S_NCHK), npanel, slot, vw)
    else:
        with loop(b, 0, npanel, name="gp") as p:
            gather(*_panel(b, t, p, width, olen, klen, dst))
    b.ret_void()
    return fn


def _panel(b: ir.IRBuilder, t: ir.Type, p, width: int, olen, klen, dst) -> tuple:
    """Panel ``p``'s first row, its rows before ``olen`` and its place in ``dst``."""
    first = b.mul(p, I64(width))
    valid = smin(b, I64(width), b.sub(olen, first))
    return first, valid, b.gep(dst, [b.mul(first, klen)], inbounds=True, source_etype=t)


def _staged_mode(b, t, es, width: int, bs: int, side, dst, bflat, o0, olen, k0, klen, npanel) -> None:
    """A side the kernel computes (``STAGED``): per panel and :data:`.gemm.packing.STAGE_RUN` values of
    ``k``, the kernel's row function (``side[S_ROW]``: ``rows(side, bflat, o, nrows, k, count, out)`` writes
    ``out[r * STAGE_RUN + c] = value(o + r, k + c)`` for ``r < nrows``, ``c < count``) fills a stack block
    of the panel's rows, whose ``bs x bs`` blocks go to the panel through register transposes (a full
    panel), the rest element by element; rows past ``olen`` are zeros.  One routine serves every computed
    side of a dtype and register tile: the kernel compiles only its row function."""
    row_ty = ir.FunctionType(VOID, [PTR, I64, I64, I64, I64, I64, PTR])
    row = b.inttoptr(ld(b, side, gd.S_ROW), row_ty.as_pointer(), name="row")
    staged = entry_alloca(b, t, "staged", width * STAGE_RUN)
    vt = ir.VectorType(t, bs) if bs else None
    with loop(b, 0, npanel, name="sp") as p:
        first, valid, pdst = _panel(b, t, p, width, olen, klen, dst)
        o = b.add(o0, first)
        with loop(b, 0, klen, STAGE_RUN, name="sc") as kc:
            count = smin(b, I64(STAGE_RUN), b.sub(klen, kc))
            b.call(row, [side, bflat, o, valid, b.add(k0, kc), count, staged])
            at = b.gep(pdst, [b.mul(kc, I64(width))], inbounds=True, source_etype=t)
            nb = I64(0)
            if bs:
                nb = b.select(b.icmp_signed("==", valid, I64(width)), b.and_(count, I64(-bs)), I64(0))
                with loop(b, 0, nb, bs, name="st") as kb:
                    base = b.gep(staged, [kb], inbounds=True, source_etype=t)
                    to = b.gep(at, [b.mul(kb, I64(width))], inbounds=True, source_etype=t)
                    for g in range(width // bs):
                        rows = [b.load(b.gep(base, [I64((g * bs + r) * STAGE_RUN)], inbounds=True,
                                             source_etype=t), typ=vt, align=es) for r in range(bs)]
                        for c, col in enumerate(transpose(b, rows)):
                            b.store(col, b.gep(to, [I64(c * width + g * bs)], inbounds=True, source_etype=t),
                                    align=es)
            with loop(b, 0, valid, name="sw") as w:
                with loop(b, nb, count, name="sk") as i:
                    value = ld(b, staged, b.add(b.mul(w, I64(STAGE_RUN)), i), t)
                    st(b, at, b.add(b.mul(i, I64(width)), w), value, t)
        with loop(b, valid, width, name="sz") as w:
            with loop(b, 0, klen, name="szk") as kk:
                st(b, pdst, b.add(b.mul(kk, I64(width)), w), t(0.0), t)


def _ksteps(b: ir.IRBuilder, side) -> ir.Value:
    """Per checked index, its step along the last reduction axis (a stack array)."""
    ksteps = entry_alloca(b, I64, "ksteps", gd.MAXCHK)
    nk = ld(b, side, gd.group_base(gd.KGROUP))
    klast = b.add(I64(gd.axis_field(gd.KGROUP, 0, 2)), b.mul(b.sub(nk, I64(1)), I64(gd.AX_LEN)))
    for d in range(gd.MAXCHK):
        st(b, ksteps, d, ld(b, side, b.add(klast, I64(d))))
    return ksteps


def _interval(b, side, nchk, x0_of, step_of, n) -> tuple[ir.Value, ir.Value]:
    """``[a, e)``: the positions ``i`` in ``[0, n)`` where every checked index ``d``, which is
    ``x0_of(d) + step_of(d) * i`` (step -1, 0, 1 or 2), lies in ``[0, size_d)``."""
    lo_slot = entry_alloca(b, I64, "iva")
    hi_slot = entry_alloca(b, I64, "ive")
    b.store(I64(0), lo_slot)
    b.store(n, hi_slot)
    with loop(b, 0, nchk, name="iv") as d:
        a, e = _interval_of(b, b.load(lo_slot), b.load(hi_slot), x0_of(d),
                            ld(b, side, b.add(I64(gd.S_CHKSIZE), d)), step_of(d))
        b.store(a, lo_slot)
        b.store(e, hi_slot)
    e = imax(b, b.load(hi_slot), I64(0))
    return smin(b, b.load(lo_slot), e), e


def _transpose_mode(b, t, es, width, block, src, dst, ooff, koff, krun, olen, klen, npanel, slot,
                    checks, kstride: int = 1) -> None:
    """Register transposes per run of ``k`` in blocks of ``bs`` rows by ``depth`` positions (``block``; a
    panel of one block's rows: whole vectors).  A plain block's rows ask for their lines in the next
    panel's rows into L2: a panel's rows are read side by side, more streams than the hardware's
    prefetchers follow, and the next panel is read a panel later.  With range-checked indices each panel
    row is valid on an interval of the run: blocks inside every row's interval are plain loads, the others
    masked loads (zeros outside, nothing read there); without them the rows' offsets and intervals are set
    once per panel.  A run shorter than a block is one masked block whose columns past the run are not
    stored.  ``kstride`` 2: a row of a block is the even lanes of two loads, ``[0, depth)`` and ``[depth -
    1, 2 depth - 1)``.  The plain blocks of a row are unrolled once (a run's last block is one more trip of
    the block loop); the masked block is a function of its own where a panel has several, to bound size."""
    (side, ochk, kchk, nchk), (bs, depth) = checks, block
    ngroups = width // bs
    ksteps = _ksteps(b, side)
    checked = b.icmp_signed(">", nchk, I64(0))
    row_lo = entry_alloca(b, I64, "row_lo", width)
    row_hi = entry_alloca(b, I64, "row_hi", width)
    row_off = entry_alloca(b, I64, "row_off", 2 * width)  # each panel row's offset (``ooff``), the next's
    row_chk = entry_alloca(b, I64, "row_chk", gd.MAXCHK * width)  # and its checked indices (``ochk``)
    grp_lo = entry_alloca(b, I64, "grp_lo", ngroups)
    grp_hi = entry_alloca(b, I64, "grp_hi", ngroups)
    masked_fn = None
    if ngroups > 1:
        masked_fn, mb = new_function(b.module, b.function.name + "_masked", [PTR] * 5 + [I64] * 6)
        _transpose_block(mb, t, es, width, block, kstride, *masked_fn.args, checked=True)
        mb.ret_void()

    with loop(b, 0, npanel, name="tp") as p:
        first, valid, pdst = _panel(b, t, p, width, olen, klen, dst)
        # a row past the last panel's ``valid`` ones is empty: masked loads of nothing (zeros)
        with loop(b, 0, width, name="po") as w:
            o = smin(b, b.add(first, w), b.sub(olen, I64(1)))
            st(b, row_off, w, ld(b, ooff, o))
            nxt = smin(b, b.add(o, I64(width)), b.sub(olen, I64(1)))  # (the row one panel on)
            st(b, row_off, b.add(w, I64(width)), ld(b, ooff, nxt))
            with loop(b, 0, nchk, name="pc") as d:
                st(b, row_chk, b.add(b.mul(d, I64(width)), w), ld(b, ochk, b.add(b.mul(d, olen), o)))
            st(b, row_lo, w, I64(0))
            st(b, row_hi, w, b.select(b.icmp_signed("<", w, valid), klen, I64(0)))
        for g in range(ngroups):
            st(b, grp_lo, g, I64(0))
            st(b, grp_hi, g, b.select(b.icmp_signed(">=", valid, I64((g + 1) * bs)), klen, I64(0)))
        with advancing(b, 0, klen, "kr") as (kk, nxt):
            run = ld(b, krun, kk)
            nblk = b.mul(b.sdiv(run, I64(depth)), I64(depth))
            kbase = ld(b, koff, kk)
            with b.if_then(checked):
                _row_intervals(b, side, kchk, nchk, ksteps, klen, kk, run, valid, width, bs,
                               (row_chk, row_lo, row_hi, grp_lo, grp_hi))

            def blocks(kb, limit, kk=kk, kbase=kbase, pdst=pdst):
                at = b.add(kbase, b.mul(kb, I64(kstride)))
                args = (src, row_off, row_lo, row_hi, pdst, I64(0), None, at, kb, kk, limit)
                for g in range(0, width, bs):  # unrolled: independent blocks (12% on a dense layer)
                    inside = b.and_(b.icmp_signed("<=", ld(b, grp_lo, g // bs), kb),
                                    b.icmp_signed("<=", b.add(kb, I64(depth)), ld(b, grp_hi, g // bs)))
                    inside = b.and_(inside, b.icmp_signed("<=", b.add(kb, I64(depth)), limit))
                    here = args[:6] + (I64(g),) + args[7:]
                    with b.if_else(inside) as (plain, masked):
                        with plain:
                            _transpose_block(b, t, es, width, block, kstride, *here, checked=False)
                        with masked:
                            if masked_fn is None:
                                _transpose_block(b, t, es, width, block, kstride, *here, checked=True)
                            else:
                                b.call(masked_fn, list(here))

            # a run's rest of at least depth: its last depth positions again; a shorter run: a masked block
            tail = b.icmp_signed(">", run, nblk)
            with loop(b, 0, b.select(tail, b.add(nblk, I64(depth)), nblk), depth, name="tk") as kb:
                blocks(imax(b, smin(b, kb, b.sub(run, I64(depth))), I64(0)), run)
            nxt[0] = b.add(kk, run)


def _row_intervals(b, side, kchk, nchk, ksteps, klen, kk, run, valid, width, bs, tables) -> None:
    """The intervals of the run at ``kk`` where each row of the panel reads in range (``row_lo``,
    ``row_hi``), and each group of ``bs`` rows' common interval -- as vectors of a group's rows (their
    checked indices' outer parts in ``row_chk``, ``width`` per index)."""
    row_chk, row_lo, row_hi, grp_lo, grp_hi = tables
    vt = ir.VectorType(I64, bs)
    zero = ir.Constant(vt, None)
    smax = declare(b.module, f"llvm.vector.reduce.smax.v{bs}i64", I64, [vt])
    smin = declare(b.module, f"llvm.vector.reduce.smin.v{bs}i64", I64, [vt])
    lo_slot, hi_slot = entry_alloca(b, vt, "rlo"), entry_alloca(b, vt, "rhi")
    for g in range(0, width, bs):
        b.store(zero, lo_slot)
        b.store(splat(b, run, bs), hi_slot)
        with loop(b, 0, nchk, name="iv") as d:
            at = b.gep(row_chk, [b.add(b.mul(d, I64(width)), I64(g))], inbounds=True, source_etype=I64)
            x0 = b.add(b.load(b.bitcast(at, ir.PointerType(vt)), typ=vt, align=8),
                       splat(b, ld(b, kchk, b.add(b.mul(d, klen), kk)), bs))
            a, e = _interval_of(b, b.load(lo_slot), b.load(hi_slot), x0,
                                splat(b, ld(b, side, b.add(I64(gd.S_CHKSIZE), d)), bs), ld(b, ksteps, d))
            b.store(a, lo_slot)
            b.store(e, hi_slot)
        e = b.load(hi_slot)
        e = b.select(b.icmp_signed(">", e, zero), e, zero)
        a = b.load(lo_slot)
        a = b.select(b.icmp_signed("<", a, e), a, e)
        live = b.icmp_signed("<", ir.Constant(vt, list(range(g, g + bs))), splat(b, valid, bs))
        a, e = b.select(live, a, zero), b.select(live, e, zero)
        for table, v in ((row_lo, a), (row_hi, e)):
            at = b.gep(table, [I64(g)], inbounds=True, source_etype=I64)
            b.store(v, b.bitcast(at, ir.PointerType(vt)), align=8)
        st(b, grp_lo, g // bs, b.call(smax, [a]))
        st(b, grp_hi, g // bs, b.call(smin, [e]))


def splat(b: ir.IRBuilder, x: ir.Value, n: int) -> ir.Value:
    """``x`` in each of ``n`` lanes."""
    vt = ir.VectorType(x.type, n)
    undef = ir.Constant(vt, ir.Undefined)
    return b.shuffle_vector(b.insert_element(undef, x, ir.IntType(32)(0)), undef,
                            ir.Constant(ir.VectorType(ir.IntType(32), n), None))


def _interval_of(b, a, e, x0, size, step) -> tuple[ir.Value, ir.Value]:
    """``[a, e)`` narrowed to the ``i`` where ``x0 + step * i`` lies in ``[0, size)`` (``step`` -1 to 2)."""
    def const(v):
        vector = isinstance(x0.type, ir.VectorType)
        return ir.Constant(x0.type, [v] * x0.type.count if vector else v)

    inb = b.and_(b.icmp_signed(">=", x0, const(0)), b.icmp_signed("<", x0, size))
    # step 1: x0 + i in [0, size) <=> -x0 <= i < size - x0
    a1, e1 = imax(b, a, b.sub(const(0), x0)), smin(b, e, b.sub(size, x0))
    # step -1: x0 - i in [0, size) <=> x0 - size < i <= x0
    a2, e2 = imax(b, a, b.add(b.sub(x0, size), const(1))), smin(b, e, b.add(x0, const(1)))
    # step 2: x0 + 2 i in [0, size) <=> ceil(-x0 / 2) <= i < ceil((size - x0) / 2)
    a3 = imax(b, a, b.ashr(b.sub(const(1), x0), const(1)))
    e3 = smin(b, e, b.ashr(b.add(b.sub(size, x0), const(1)), const(1)))
    up, down = b.icmp_signed("==", step, I64(1)), b.icmp_signed("==", step, I64(-1))
    up2 = b.icmp_signed("==", step, I64(2))
    return (b.select(up, a1, b.select(down, a2, b.select(up2, a3, a))),
            b.select(up, e1, b.select(down, e2, b.select(up2, e3, b.select(inb, e, const(0))))))


def _transpose_block(b, t, es, width, block, kstride, src, ooff, row_lo, row_hi, pdst, first, g, at, kb, kk,
                     limit, checked: bool) -> None:
    """One ``bs x depth`` block (``block``): rows ``g .. g + bs`` of the panel starting at row ``first``, run
    positions ``kb .. kb + depth`` (``at`` the first one's offset), transposed into ``pdst`` at
    ``k = kk + kb``.  ``checked``: masked loads, lane ``l`` of row ``r`` read only where the
    run position ``kb + pos[l]`` is in the row's interval ``[row_lo[r], row_hi[r])`` and
    before ``limit`` (the run's end), and only the positions before ``limit`` stored."""
    (bs, depth), i32 = block, ir.IntType(32)
    vt, mt, v32 = (ir.VectorType(x, depth) for x in (t, I1, i32))
    zero_v = ir.Constant(vt, None)

    def lanes_of(x):
        return splat(b, b.trunc(x, i32), depth)

    def load_part(o, shift, pos, use, r):
        """``depth`` elements from ``o + at + shift``; masked: lane ``l`` only where ``use[l]`` and
        the run position ``kb + pos[l]`` is in row ``r``'s interval."""
        if not checked:
            ptr = b.gep(src, [b.add(o, b.add(at, I64(shift)))], inbounds=True, source_etype=t)
            if shift == 0:  # (the same line of the row one panel on, into L2: see _transpose_mode)
                nxt = ld(b, ooff, b.add(b.add(first, r), I64(width)))
                ahead = b.gep(src, [b.add(nxt, b.add(at, I64(shift)))], inbounds=False, source_etype=t)
                b.call(declare(b.module, "llvm.prefetch.p0", VOID, [PTR, i32, i32, i32]),
                       [ahead, i32(0), i32(2), i32(1)])
            return b.load(ptr, typ=vt, align=es)
        mload = declare(b.module, f"llvm.masked.load.v{depth}{'f32' if es == 4 else 'f64'}.p0", vt,
                        [PTR, i32, mt, vt])
        lanes = b.add(ir.Constant(v32, pos), lanes_of(kb))
        hi = smin(b, ld(b, row_hi, r), limit)
        ok = b.and_(b.icmp_signed(">=", lanes, lanes_of(ld(b, row_lo, r))),
                    b.icmp_signed("<", lanes, lanes_of(hi)))
        if not all(use):
            ok = b.and_(ok, ir.Constant(mt, use))
        ptr = b.gep(src, [b.add(o, b.add(at, I64(shift)))], source_etype=t)  # (masked lanes: not read)
        return b.call(mload, [ptr, i32(es), ok, zero_v])

    def load_row(r):
        """Row ``r`` of a block: a vector load, or a masked one (lanes in the row's interval)."""
        o = ld(b, ooff, b.add(first, r))
        if kstride == 1:
            return load_part(o, 0, list(range(depth)), [True] * depth, r)
        d = depth
        lo_half, hi_half = (load_part(o, sh, [(sh + n) // 2 for n in range(d)],
                                      [(sh + n) % 2 == 0 for n in range(d)], r) for sh in (0, d - 1))
        pick = [2 * n for n in range(d // 2)] + [d + 2 * n + 1 for n in range(d // 2)]
        return b.shuffle_vector(lo_half, hi_half, ir.Constant(v32, pick))

    rows = [load_row(b.add(g, I64(r)) if not isinstance(g, ir.Constant) else I64(g.constant + r))
            for r in range(bs)]
    spare = b.bitcast(entry_alloca(b, vt, "spare"), PTR) if checked else None  # (a position past the run)
    per = depth // bs  # (the columns a vector holds: one by one where some may lie past the run)
    for m, vec in enumerate(transpose(b, rows)):
        for j in range(0, per, 1 if checked else per):
            part = vec if per == 1 or not checked else b.shuffle_vector(
                vec, vec, ir.Constant(ir.VectorType(i32, bs), list(range(j * bs, j * bs + bs))))
            kpos = b.add(b.add(kk, kb), I64(m * per + j))
            ptr = b.gep(pdst, [b.add(b.mul(kpos, I64(width)), g)], inbounds=True, source_etype=t)
            if checked:
                ptr = b.select(b.icmp_signed("<", b.add(kb, I64(m * per + j)), limit), ptr, spare)
            b.store(part, ptr, align=es)


def _copy_mode(b, t, side, width, src, dst, ooff, orun, ochk, koff, kchk, olen, klen, nchk, npanel,
               slot, vw) -> None:
    zero = t(0.0)
    es = 4 if isinstance(t, ir.FloatType) else 8
    vl = next(n for n in (vw, 8, 4, 2, 1) if n <= vw and width % n == 0)
    vt = ir.VectorType(t, vl)
    vzero = ir.Constant(vt, None)

    def panel_row(p, kk, copy_it: bool):
        """Row ``kk`` of the whole panel ``p``: copied, or zeros."""
        first = b.mul(p, I64(width))
        pdst = b.gep(dst, [b.mul(first, klen)], inbounds=True, source_etype=t)
        at = b.gep(src, [b.add(ld(b, ooff, first), ld(b, koff, kk))], inbounds=True, source_etype=t)
        for c in range(0, width, vl):
            v = vzero
            if copy_it:
                v = b.load(b.gep(at, [I64(c)], inbounds=True, source_etype=t), typ=vt, align=es)
            b.store(v, slot(pdst, kk, I64(c)), align=es)

    # checked indices (if any) the same at every outer position and every panel whole: each ``k``'s test
    # once, a byte per ``k``; then ``PANEL_ROWS`` rows at a time panel by panel, the source lines in L1
    shared = b.and_(b.icmp_signed("==", b.srem(olen, I64(width)), I64(0)),
                    _uniform_checks(b, ochk, olen, nchk, I64(0), olen))
    contiguous = entry_alloca(b, I1, "rows")
    b.store(shared, contiguous)
    with b.if_then(shared):
        with loop(b, 0, npanel, name="rp") as p:
            whole = b.icmp_signed(">=", ld(b, orun, b.mul(p, I64(width))), I64(width))
            b.store(b.and_(b.load(contiguous), whole), contiguous)
    with b.if_else(b.load(contiguous)) as (by_k, by_panel):
        with by_k:
            I8 = ir.IntType(8)
            oks = b.alloca(I8, size=klen, name="oks")
            with loop(b, 0, klen, name="ak") as kk:
                ok = _checks_pass(b, side, ochk, kchk, olen, klen, nchk, I64(0), kk)
                st(b, oks, kk, b.zext(ok, I8), I8)
            with loop(b, 0, klen, PANEL_ROWS, name="kb") as k0:
                k1 = smin(b, b.add(k0, I64(PANEL_ROWS)), klen)
                with loop(b, 0, npanel, name="sp") as p:
                    with loop(b, k0, k1, name="sk") as kk:
                        with b.if_else(b.icmp_unsigned("!=", ld(b, oks, kk, I8), I8(0))) as (inside, outside):
                            with inside:
                                panel_row(p, kk, True)
                            with outside:
                                panel_row(p, kk, False)
        with by_panel:
            _copy_panels(b, t, side, width, src, dst, ooff, orun, ochk, koff, kchk, olen, klen, nchk, npanel,
                         slot, vl, vt, es, zero, vw)


def _copy_panels(b, t, side, width, src, dst, ooff, orun, ochk, koff, kchk, olen, klen, nchk, npanel,
                 slot, vl, vt, es, zero, vw) -> None:
    """``COPY`` panel by panel: straight rows, rows under one test per ``k``, or runs."""
    with loop(b, 0, npanel, name="cp") as p:
        first, valid, pdst = _panel(b, t, p, width, olen, klen, dst)
        # the common case: a whole, unchecked panel whose row's vectors each lie in one run (straight vector
        # copies from each one's run) or across two (a convolution's windows: runs as long as the images'
        # rows; masked loads of each run's lanes)
        pieces = _vector_pieces(b, ooff, orun, first, olen, width, vl)
        whole = b.and_(b.icmp_signed("==", valid, I64(width)), pieces[0])
        two_runs = b.and_(b.icmp_signed("==", valid, I64(width)), pieces[1])

        def row_copies(kk):
            kof = ld(b, koff, kk)
            for c, (start, _, _) in zip(range(0, width, vl), pieces[2]):
                v = b.load(b.gep(src, [b.add(start, kof)], inbounds=True, source_etype=t), typ=vt, align=es)
                b.store(v, slot(pdst, kk, I64(c)), align=es)

        def split_copies(kk, lanes_in=None):  # (``lanes_in``: per vector, its lanes in range)
            kof = ld(b, koff, kk)
            for i, (c, (start, later, head)) in enumerate(zip(range(0, width, vl), pieces[2])):
                ok = lanes_in[i] if lanes_in else ir.Constant(head.type, [1] * vl)
                a = _masked_load(b, t, b.gep(src, [b.add(start, kof)], source_etype=t), b.and_(head, ok))
                z = _masked_load(b, t, b.gep(src, [b.add(later, kof)], source_etype=t),
                                 b.and_(b.not_(head), ok))
                b.store(b.select(head, a, z), slot(pdst, kk, I64(c)), align=es)

        with b.if_else(b.and_(two_runs, b.icmp_signed("==", nchk, I64(0)))) as (fast, checked):
            with fast:
                with loop(b, 0, klen, name="fk") as kk:
                    with b.if_else(whole) as (straight, split):
                        with straight:
                            row_copies(kk)
                        with split:
                            split_copies(kk)
            with checked:
                # checked indices that read only ``k``: one test per ``k``, then the whole row or zeros
                uniform = b.and_(whole, _uniform_checks(b, ochk, olen, nchk, first, width))
                with b.if_else(uniform) as (rows, general):
                    with rows:
                        vzero = ir.Constant(vt, None)
                        with loop(b, 0, klen, name="uk") as kk:
                            ok = _checks_pass(b, side, ochk, kchk, olen, klen, nchk, first, kk)
                            with b.if_else(ok) as (inside, outside):
                                with inside:
                                    row_copies(kk)
                                with outside:
                                    for c in range(0, width, vl):
                                        b.store(vzero, slot(pdst, kk, I64(c)), align=es)
                    with general:
                        with b.if_else(two_runs) as (lanewise, runwise):
                            with lanewise:
                                _checked_rows(b, side, ochk, kchk, olen, klen, nchk, first, width, vl,
                                              split_copies)
                            with runwise:
                                _copy_runs(b, t, side, width, src, ooff, orun, ochk, koff, kchk, olen, klen,
                                           nchk, first, valid, pdst, slot, zero, vw)


def _checked_rows(b, side, ochk, kchk, olen, klen, nchk, first, width: int, vl: int, copies) -> None:
    """The rows of a whole panel whose vectors each lie in at most two runs, its checked indices in range
    on some lanes only (a convolution's windows over an unpadded image): each vector's lanes in range as a
    mask, from the indices' outer parts (loaded once per panel) and their ``k`` parts (one per row and
    index), ``copies(kk, masks)`` loading those lanes alone (the rest zeros), no branch per row.  One loop
    per count of checked indices, each unrolled over them."""
    i32 = ir.IntType(32)
    for n in range(1, gd.MAXCHK + 1):
        with b.if_then(b.icmp_signed("==", nchk, I64(n))):
            sizes = [splat(b, b.trunc(ld(b, side, gd.S_CHKSIZE + d), i32), vl) for d in range(n)]
            outer = [[b.trunc(b.load(b.gep(ochk, [b.add(b.mul(I64(d), olen), b.add(first, I64(c)))],
                                            inbounds=True, source_etype=I64), typ=ir.VectorType(I64, vl),
                                     align=8), ir.VectorType(i32, vl)) for c in range(0, width, vl)]
                     for d in range(n)]
            with loop(b, 0, klen, name=f"mk{n}") as kk:
                ks = [splat(b, b.trunc(ld(b, kchk, b.add(b.mul(I64(d), klen), kk)), i32), vl)
                      for d in range(n)]
                masks = []
                for vec in zip(*outer):  # (0 <= x < size: one unsigned comparison)
                    masks.append(reduce(b.and_, [b.icmp_unsigned("<", b.add(x, k), size)
                                                 for x, k, size in zip(vec, ks, sizes)]))
                copies(kk, masks)

def _vector_pieces(b, ooff, orun, first, olen, width: int, vl: int) -> tuple:
    """``(one run, two runs, [(start, later, head)])`` of the ``vl``-lane vectors of the panel row at
    ``first``: whether each lies in one run, whether each lies in at most two; each one's source offset
    ``start``, the lanes ``head`` from it, the others from the next run, at ``later`` (its start less
    the lanes before it).  On an edge panel the tables are read within ``olen``."""
    last = b.sub(olen, I64(1))
    lanes = ir.Constant(ir.VectorType(ir.IntType(32), vl), list(range(vl)))  # (a mask register's lanes)
    one, two, out = I1(1), I1(1), []
    for c in range(0, width, vl):
        o = smin(b, b.add(first, I64(c)), last)
        here = smin(b, ld(b, orun, o), I64(vl))
        nxt = smin(b, b.add(o, here), last)
        one = b.and_(one, b.icmp_signed("==", here, I64(vl)))
        two = b.and_(two, b.or_(b.icmp_signed("==", here, I64(vl)),
                                b.icmp_signed(">=", ld(b, orun, nxt), b.sub(I64(vl), here))))
        later = b.sub(ld(b, ooff, nxt), here)
        head = b.icmp_signed("<", lanes, splat(b, b.trunc(here, lanes.type.element), vl))
        out.append((ld(b, ooff, o), later, head))
    return one, two, out


def _uniform_checks(b, ochk, olen, nchk, first, width) -> ir.Value:
    """Whether each checked index's outer part (``ochk``) is one value on the ``width`` rows at ``first``."""
    flag = entry_alloca(b, I1, "uni")
    b.store(I1(1), flag)
    with loop(b, 0, nchk, name="ud") as d:
        base = b.mul(d, olen)
        x0 = ld(b, ochk, b.add(base, first))
        with loop(b, 1, width, name="uw") as w:
            same = b.icmp_signed("==", ld(b, ochk, b.add(base, b.add(first, w))), x0)
            b.store(b.and_(b.load(flag), same), flag)
    return b.load(flag)


def _checks_pass(b, side, ochk, kchk, olen, klen, nchk, o, kk) -> ir.Value:
    """Whether every checked index is in range at outer position ``o`` and reduction position ``kk``."""
    flag = entry_alloca(b, I1, "inr")
    b.store(I1(1), flag)
    with loop(b, 0, nchk, name="rd") as d:
        x0 = b.add(ld(b, ochk, b.add(b.mul(d, olen), o)), ld(b, kchk, b.add(b.mul(d, klen), kk)))
        size = ld(b, side, b.add(I64(gd.S_CHKSIZE), d))
        inb = b.and_(b.icmp_signed(">=", x0, I64(0)), b.icmp_signed("<", x0, size))
        b.store(b.and_(b.load(flag), inb), flag)
    return b.load(flag)


def _copy_runs(b, t, side, width, src, ooff, orun, ochk, koff, kchk, olen, klen, nchk, first, valid, pdst,
               slot, zero, vw, stride: int = 1) -> None:
    """One panel, run by run (windows, padding, edge panels), a run's elements ``stride`` (1 or 2) apart in
    the source.  A row of at least one vector goes in blocks of :data:`K_BLOCK` rows, run by run with the
    rows innermost (the branches go one way), each run's rows stored before the next, so a short piece's
    whole vector spills only within its row; a narrower row keeps the rows outermost."""
    steps = entry_alloca(b, I64, "steps1", gd.MAXCHK)
    for d in range(gd.MAXCHK):
        st(b, steps, d, ld(b, side, gd.S_CHKSTEP + d))

    def run_rows(k0, k1, bounded: bool):
        with advancing(b, 0, valid, "cw") as (w, nxt):
            o = b.add(first, w)
            seg = smin(b, ld(b, orun, o), b.sub(valid, w))
            base = b.gep(src, [ld(b, ooff, o)], inbounds=True, source_etype=t)
            lim = b.sub(I64(width), w) if bounded else None

            def row_at(kk):
                return (b.gep(pdst, [b.add(b.mul(kk, I64(width)), w)], inbounds=True, source_etype=t),
                        b.gep(base, [ld(b, koff, kk)], inbounds=True, source_etype=t))

            with b.if_else(b.icmp_signed("==", nchk, I64(0))) as (plain, checked):
                with plain:  # the whole run copied in every row
                    _copy_rows(b, t, row_at, k0, k1, seg, width, vw, lim, stride)
                with checked:
                    with loop(b, k0, k1, name="ck") as kk:
                        a, e = _interval(
                            b, side, nchk,
                            lambda d: b.add(ld(b, ochk, b.add(b.mul(d, olen), o)),
                                            ld(b, kchk, b.add(b.mul(d, klen), kk))),
                            lambda d: ld(b, steps, d), seg)
                        row, sp = row_at(kk)
                        copy(b, t, row, None, I64(0), a, vw, spill=True, limit=lim)
                        copy(b, t, row, sp, a, e, vw, spill=True, limit=lim, stride=stride)
                        copy(b, t, row, None, e, seg, vw, spill=True, limit=lim)
            nxt[0] = b.add(w, seg)
        with loop(b, k0, k1, name="cz") as kk:
            with loop(b, valid, width, name="czw") as w:
                b.store(zero, slot(pdst, kk, w))

    bounded = width >= vw
    step = K_BLOCK if bounded else 1
    with loop(b, 0, klen, step, name="cb") as k0:
        run_rows(k0, smin(b, b.add(k0, I64(step)), klen), bounded)


def _copy_rows(b, t, row_at, k0, k1, n, width: int, vw: int, limit, stride: int = 1) -> None:
    """``row[i] = src[stride i]`` for ``i < n <= width`` in the rows ``[k0, k1)`` (``row_at(kk)``: the
    pointers): the run's vectors unrolled, each under a test of ``n`` made before the rows, the rest as
    :func:`copy` does it."""
    nvec = b.sdiv(n, I64(vw))
    rest = b.sub(n, b.mul(nvec, I64(vw)))
    has = [b.icmp_signed(">", nvec, I64(c)) for c in range(width // vw)]
    back, short = b.icmp_signed(">", rest, I64(0)), b.icmp_signed("<", n, I64(vw))
    back_at = b.sub(n, I64(vw))
    with loop(b, k0, k1, name="rk") as kk:
        row, sp = row_at(kk)
        for c, h in enumerate(has):
            with b.if_then(h):
                _vector_copy(b, t, row, sp, I64(c * vw), vw, stride)
        with b.if_then(back):
            with b.if_else(short) as (few, more):
                with few:
                    _masked_rest(b, t, row, sp, I64(0), rest, vw, True, limit, stride)
                with more:
                    _vector_copy(b, t, row, sp, back_at, vw, stride)
