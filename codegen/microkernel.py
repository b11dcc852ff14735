"""Matmul-like contractions as a packed, register-tiled vector micro-kernel.

``C[i, j] = sum_k A(i, k) * B(k, j)`` -- where ``A`` and ``B`` are buffers read at plain axis
variables in any layout (``X[i, k] * W[j, k]`` of a dense layer, ``A[k, i]`` transposed, ...) --
is emitted BLIS-style instead of as three plain loops:

    for jc in blocks of NC columns        (the parallel loop: one block range per thread)
      for kc in blocks of KC:             pack B[kc.., jc..] into NR-wide panels, k-major
        for ic in blocks of MC rows:      pack A[ic.., kc..] into MR-high panels, k-major
          for jr, ir in micro-tiles:      MR x NR tile of C in MR*NR/VW vector registers:
                                          per k: NR/VW vector loads of B, MR broadcasts of A,
                                          MR*NR/VW fused multiply-adds; then C (+)= tile

Packing makes every layout unit-stride and zero-pads the edges, so the inner loop never
branches; edge tiles are written through a small stack tile.  The first ``kc`` block stores,
later blocks add (no zero-fill of C).  Buffers for the packed panels come from
``aligned_alloc`` per call and thread (the nest may run on several threads at once).

The plain loop nest is still what ``lower`` prints and counts (the same iterations); the note
on the nest says that it is emitted as this kernel.  Strict mode (``fastmath=False``) does not
use it: blocking over ``k`` reassociates the sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from tensorad.ir.expr import Expr, Op
from tensorad.ir.tensor import ComputeOp, Tensor

from .irloops import declare, for_range, smin

I1, I64 = ir.IntType(1), ir.IntType(64)
MICROKERNEL_MIN = 64 ** 3  # smaller contractions compile faster as plain loops and lose little
PTR = ir.PointerType()


@dataclass(frozen=True)
class GemmSpec:
    c: Tensor
    a: Tensor
    b: Tensor
    M: int
    N: int
    K: int
    a_strides: tuple[int, int]  # (stride along m, stride along k) in elements
    b_strides: tuple[int, int]  # (stride along k, stride along n)
    dtype: str
    mr: int = 8
    nr: int = 32
    kc: int = 256
    mc: int = 128
    nc: int = 256

    @property
    def blocks(self) -> int:
        """Iterations of the parallel ``jc`` loop."""
        return -(-self.N // self.nc)

    def describe(self) -> str:
        return (f"emitted as the packed {self.mr}x{self.nr} vector micro-kernel "
                f"(blocks KC={self.kc} MC={self.mc} NC={self.nc})")


def _plain_read(e: Expr) -> bool:
    return e.op is Op.READ and all(i.op is Op.VAR for i in e.src) and len(set(e.src)) == len(e.src)


def match_gemm(op: ComputeOp, bodies: tuple[Expr, ...], buffers: dict, tile: tuple | None = None
               ) -> GemmSpec | None:
    """A :class:`GemmSpec` when ``op`` (with inlined ``bodies``) is a plain 2-D contraction."""
    if not op.is_reduction or len(bodies) != 1 or len(op.axes) != 2:
        return None
    red = bodies[0]
    cond, *srcs = red.src
    comb = red.arg.combiner
    if comb.kind != "sum" or len(srcs) != 1 or cond.op is not Op.CONST or not cond.arg:
        return None
    if red.dtype not in ("float32", "float64") or len(red.arg.axes) != 1:
        return None
    src = srcs[0]
    if src.op is not Op.MUL or not all(_plain_read(x) for x in src.src):
        return None
    i, j = op.axes
    (k,) = red.arg.axes
    x, y = src.src
    if j in x.src:
        x, y = y, x
    if set(x.src) != {i, k} or set(y.src) != {k, j} or k.lo != 0:
        return None
    ta, tb = x.arg, y.arg
    if ta not in buffers or tb not in buffers or ta.dtype != red.dtype or tb.dtype != red.dtype:
        return None
    M, N, K = i.hi, j.hi, k.hi
    if min(M, N, K) <= 0:
        return None
    sa, sb = buffers[ta].strides, buffers[tb].strides
    a_str = (sa[x.src.index(i)], sa[x.src.index(k)])
    b_str = (sb[y.src.index(k)], sb[y.src.index(j)])
    vw = 16 if red.dtype == "float32" else 8
    mr, nr = 8, 2 * vw
    kc, mc = 256, 128
    if tile:
        mr, nr, kc, mc = (list(tile) + [None] * 4)[:4]
        mr, kc, mc = mr or 8, kc or 256, mc or 128
        nr = nr or 2 * vw
        if nr % vw or mc % mr:
            raise ValueError(f"tile: NR must be a multiple of {vw} and MC a multiple of MR, got {tile}")
    nc = max(nr, min(1024, -(-(-(-N // 4)) // nr) * nr))
    return GemmSpec(Tensor(op, 0), ta, tb, M, N, K, a_str, b_str, red.dtype, mr, nr, kc, mc, nc)


class GemmEmitter:
    """Emits the body of a nest function (``ptrs..., lo, hi``) for one :class:`GemmSpec`."""

    def __init__(self, module: ir.Module, spec: GemmSpec, name: str) -> None:
        self.m = module
        self.s = spec
        self.name = name
        self.t = ir.FloatType() if spec.dtype == "float32" else ir.DoubleType()
        self.es = 4 if spec.dtype == "float32" else 8
        self.vw = 64 // self.es
        self.vt = ir.VectorType(self.t, self.vw)
        self.micro = self._micro()

    # ---- the micro-kernel -----------------------------------------------------------------
    def _micro(self) -> ir.Function:
        s, t, vt, vw = self.s, self.t, self.vt, self.vw
        nv = s.nr // vw
        fnty = ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR, I64, I64, I64, I64, I1])
        fn = ir.Function(self.m, fnty, f"{self.name}_micro")
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        fn.attributes.add("noinline")
        ap, bp, cp, ldc, rows, cols, kcl, first = fn.args
        for a in (ap, bp, cp):
            a.add_attribute("noalias")
        entry = fn.append_basic_block("entry")
        b = ir.IRBuilder(entry)
        tile = b.alloca(ir.ArrayType(t, s.mr * s.nr), name="tile")
        fma = declare(self.m, f"llvm.fma.v{vw}{'f32' if self.es == 4 else 'f64'}", vt, [vt, vt, vt])
        zero = ir.Constant(vt, None)
        loop = b.append_basic_block("k.body")
        done = b.append_basic_block("k.exit")
        b.cbranch(b.icmp_signed(">", kcl, I64(0)), loop, done)
        b.position_at_end(loop)
        kv = b.phi(I64, name="k")
        kv.add_incoming(I64(0), entry)
        accs = [[b.phi(vt, name=f"c{r}_{v}") for v in range(nv)] for r in range(s.mr)]
        for row in accs:
            for p in row:
                p.add_incoming(zero, entry)
        boff = b.mul(kv, I64(s.nr))
        bvec = [b.load(b.gep(bp, [b.add(boff, I64(v * vw))], inbounds=True, source_etype=t), typ=vt, align=64)
                for v in range(nv)]
        aoff = b.mul(kv, I64(s.mr))
        new = []
        for r in range(s.mr):
            a = b.load(b.gep(ap, [b.add(aoff, I64(r))], inbounds=True, source_etype=t), typ=t)
            splat = b.shuffle_vector(b.insert_element(ir.Constant(vt, ir.Undefined), a, ir.IntType(32)(0)),
                                     ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), vw), None))
            new.append([b.call(fma, [splat, bvec[v], accs[r][v]]) for v in range(nv)])
        nxt = b.add(kv, I64(1))
        kv.add_incoming(nxt, b.block)
        for r in range(s.mr):
            for v in range(nv):
                accs[r][v].add_incoming(new[r][v], b.block)
        b.cbranch(b.icmp_signed("<", nxt, kcl), loop, done)
        b.position_at_end(done)
        res = [[b.phi(vt) for v in range(nv)] for r in range(s.mr)]
        for r in range(s.mr):
            for v in range(nv):
                res[r][v].add_incoming(zero, entry)
                res[r][v].add_incoming(new[r][v], loop)
        full = b.and_(b.icmp_signed("==", rows, I64(s.mr)), b.icmp_signed("==", cols, I64(s.nr)))
        with b.if_else(full) as (then, other):
            with then:
                for r in range(s.mr):
                    rowp = b.gep(cp, [b.mul(ldc, I64(r))], inbounds=True, source_etype=t)
                    for v in range(nv):
                        p = b.gep(rowp, [I64(v * vw)], inbounds=True, source_etype=t)
                        old = b.load(p, typ=vt, align=self.es)
                        base = b.select(first, zero, old)
                        b.store(b.fadd(base, res[r][v]), p, align=self.es)
            with other:
                for r in range(s.mr):
                    for v in range(nv):
                        p = b.gep(tile, [I64(r * s.nr + v * vw)], inbounds=True, source_etype=t)
                        # llvmlite types alloca pointers: cast to a vector pointer to store a vector
                        b.store(res[r][v], b.bitcast(p, vt.as_pointer()), align=self.es)
                with for_range(b, 0, rows, name="er") as r:
                    with for_range(b, 0, cols, name="ec") as c:
                        src = b.gep(tile, [b.add(b.mul(r, I64(s.nr)), c)], inbounds=True, source_etype=t)
                        dst = b.gep(cp, [b.add(b.mul(r, ldc), c)], inbounds=True, source_etype=t)
                        old = b.load(dst, typ=t)
                        base = b.select(first, t(0.0), old)
                        b.store(b.fadd(base, b.load(src, typ=t)), dst)
        b.ret_void()
        return fn

    # ---- packing --------------------------------------------------------------------------
    def _pack(self, b, dst, src, outer0, outer_len, width, k0, klen, s_outer, s_k) -> None:
        """dst[p][k][w] = src(outer0 + p*width + w, k0 + k), zero past ``outer_len``.

        Full panels copy ``width`` elements per ``k`` with a constant trip count (straight-line
        code after unrolling: vector copies when the source is contiguous along ``w``, strided
        loads otherwise); the one partial panel at the edge copies what exists and zero-fills.
        """
        t = self.t
        nfull = b.sdiv(outer_len, I64(width))

        def addr(outer, k):
            return b.gep(src, [b.add(b.mul(outer, I64(s_outer)), b.mul(b.add(k0, k), I64(s_k)))],
                         inbounds=True, source_etype=t)

        def panel_of(p):
            return b.gep(dst, [b.mul(b.mul(p, klen), I64(width))], inbounds=True, source_etype=t)

        with for_range(b, 0, nfull, name="pp") as p:
            first = b.add(outer0, b.mul(p, I64(width)))
            panel = panel_of(p)
            with for_range(b, 0, klen, name="pk") as k:
                drow = b.gep(panel, [b.mul(k, I64(width))], inbounds=True, source_etype=t)
                for w in range(width):
                    v = b.load(addr(b.add(first, I64(w)), k), typ=t)
                    b.store(v, b.gep(drow, [I64(w)], inbounds=True, source_etype=t))
        valid = b.sub(outer_len, b.mul(nfull, I64(width)))
        with b.if_then(b.icmp_signed(">", valid, I64(0))):
            first = b.add(outer0, b.mul(nfull, I64(width)))
            panel = panel_of(nfull)
            with for_range(b, 0, klen, name="qk") as k:
                drow = b.gep(panel, [b.mul(k, I64(width))], inbounds=True, source_etype=t)
                with for_range(b, 0, width, name="qw") as w:
                    inside = b.icmp_signed("<", w, valid)
                    with b.if_else(inside) as (then, other):
                        with then:
                            v = b.load(addr(b.add(first, w), k), typ=t)
                            b.store(v, b.gep(drow, [w], inbounds=True, source_etype=t))
                        with other:
                            b.store(t(0.0), b.gep(drow, [w], inbounds=True, source_etype=t))

    # ---- the nest -------------------------------------------------------------------------
    def emit(self, b: ir.IRBuilder, ptr_of, lo: ir.Value, hi: ir.Value) -> None:
        s = self.s
        alloc = declare(self.m, "aligned_alloc", PTR, [I64, I64])
        free = declare(self.m, "free", ir.VoidType(), [PTR])
        a_bytes = -(-(s.mc * s.kc * self.es) // 64) * 64
        b_bytes = -(-(s.kc * (-(-s.nc // s.nr) * s.nr) * self.es) // 64) * 64
        ap = b.call(alloc, [I64(64), I64(a_bytes)])
        bp = b.call(alloc, [I64(64), I64(b_bytes)])
        A, B, C = ptr_of(s.a), ptr_of(s.b), ptr_of(s.c)
        (sam, sak), (sbk, sbn) = s.a_strides, s.b_strides
        with for_range(b, lo, hi, name="jb") as jb:
            jc = b.mul(jb, I64(s.nc))
            nc = smin(b, I64(s.nc), b.sub(I64(s.N), jc))
            with for_range(b, 0, s.K, s.kc, name="kc") as kc:
                kcl = smin(b, I64(s.kc), b.sub(I64(s.K), kc))
                first = b.icmp_signed("==", kc, I64(0))
                self._pack(b, bp, B, jc, nc, s.nr, kc, kcl, sbn, sbk)
                with for_range(b, 0, s.M, s.mc, name="ic") as ic:
                    mcl = smin(b, I64(s.mc), b.sub(I64(s.M), ic))
                    self._pack(b, ap, A, ic, mcl, s.mr, kc, kcl, sam, sak)
                    with for_range(b, 0, nc, s.nr, name="jr") as jr:
                        cols = smin(b, I64(s.nr), b.sub(nc, jr))
                        bpanel = b.gep(bp, [b.mul(jr, kcl)], inbounds=True, source_etype=self.t)
                        with for_range(b, 0, mcl, s.mr, name="ir") as ir_:
                            rows = smin(b, I64(s.mr), b.sub(mcl, ir_))
                            apanel = b.gep(ap, [b.mul(ir_, kcl)], inbounds=True, source_etype=self.t)
                            row = b.add(ic, ir_)
                            col = b.add(jc, jr)
                            cptr = b.gep(C, [b.add(b.mul(row, I64(s.N)), col)], inbounds=True,
                                         source_etype=self.t)
                            b.call(self.micro, [apanel, bpanel, cptr, I64(s.N), rows, cols, kcl, first])
        b.call(free, [ap])
        b.call(free, [bp])
