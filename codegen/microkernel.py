"""Contractions (:mod:`.contraction`) as a packed, register-tiled vector micro-kernel.

For each batch point, ``C[m, n] = sum_k A(m, k) * B(k, n)`` is emitted BLIS-style instead of as
plain loops:

    for (batch, jc) in batch points x blocks of NC columns     (the parallel loop)
      for kc in blocks of KC:             pack B(kc.., jc..) into NR-wide panels, k-major
        for ic in blocks of MC rows:      pack A(ic.., kc..) into MR-high panels, k-major
          for jr, ir in micro-tiles:      MR x NR tile of C in MR*NR/VW vector registers:
                                          per k: NR/VW vector loads of B, MR broadcasts of A,
                                          MR*NR/VW fused multiply-adds; then C (+)= tile

Packing evaluates the expressions ``A`` and ``B`` (any reads, guards and arithmetic, through the
ordinary expression emitter) at flattened indices -- so every layout becomes unit-stride and the
edges are zero-padded, and the inner loop never branches; edge tiles are written through a small
stack tile.  The first ``kc`` block stores, later blocks add (C is never zero-filled).  Buffers
for the packed panels come from ``aligned_alloc`` per call and thread.

The plain loop nest is still what ``lower`` prints and counts (the same iterations); the note
on the nest says that it is emitted as this kernel.  Strict mode (``fastmath=False``) does not
use it: blocking over ``k`` reassociates the sums.
"""

from __future__ import annotations

import llvmlite.ir as ir

from .contraction import Contraction
from .irloops import declare, for_range, smin
from .llvm_expr import ExprEmitter
from .packing import Packer

I1, I64 = ir.IntType(1), ir.IntType(64)
PTR = ir.PointerType()


class GemmEmitter:
    """Emits the body of a nest function (``ptrs..., lo, hi``) for one :class:`Contraction`."""

    def __init__(self, module: ir.Module, spec: Contraction, name: str) -> None:
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
            undef = ir.Constant(vt, ir.Undefined)
            lanes0 = ir.Constant(ir.VectorType(ir.IntType(32), vw), None)
            splat = b.shuffle_vector(b.insert_element(undef, a, ir.IntType(32)(0)), undef, lanes0)
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
                # the first k block stores, later ones accumulate (C is never read before)
                with b.if_else(first) as (store, accumulate):
                    for branch, add in ((store, False), (accumulate, True)):
                        with branch:
                            for r in range(s.mr):
                                rowp = b.gep(cp, [b.mul(ldc, I64(r))], inbounds=True, source_etype=t)
                                for v in range(nv):
                                    p = b.gep(rowp, [I64(v * vw)], inbounds=True, source_etype=t)
                                    val = res[r][v]
                                    if add:
                                        val = b.fadd(b.load(p, typ=vt, align=self.es), val)
                                    b.store(val, p, align=self.es)
            with other:
                for r in range(s.mr):
                    for v in range(nv):
                        p = b.gep(tile, [I64(r * s.nr + v * vw)], inbounds=True, source_etype=t)
                        # llvmlite types alloca pointers: cast to a vector pointer to store a vector
                        b.store(res[r][v], b.bitcast(p, vt.as_pointer()), align=self.es)
                with for_range(b, 0, rows, name="er", vectorize=False) as r:
                    with for_range(b, 0, cols, name="ec", vectorize=False) as c:
                        src = b.gep(tile, [b.add(b.mul(r, I64(s.nr)), c)], inbounds=True, source_etype=t)
                        dst = b.gep(cp, [b.add(b.mul(r, ldc), c)], inbounds=True, source_etype=t)
                        old = b.load(dst, typ=t)
                        base = b.select(first, t(0.0), old)
                        b.store(b.fadd(base, b.load(src, typ=t)), dst)
        b.ret_void()
        return fn

    # ---- the nest -------------------------------------------------------------------------
    def emit(self, b: ir.IRBuilder, ptr_of, strides_of, lo: ir.Value, hi: ir.Value, fastmath=()) -> None:
        s = self.s
        em = ExprEmitter(b, ptr_of, strides_of, fastmath)
        packer = Packer(b, em, s.k, self.t)
        alloc = declare(self.m, "aligned_alloc", PTR, [I64, I64])
        free = declare(self.m, "free", ir.VoidType(), [PTR])
        a_bytes = -(-(s.mc * s.kc * self.es) // 64) * 64
        b_bytes = -(-(s.kc * (-(-s.nc // s.nr) * s.nr) * self.es) // 64) * 64
        ap = b.call(alloc, [I64(64), I64(a_bytes)])
        bp = b.call(alloc, [I64(64), I64(b_bytes)])
        C = ptr_of(s.c)
        cstrides = strides_of(s.c)
        axes = list(s.c.op.axes)
        ldc = cstrides[axes.index(s.m)]
        njc = -(-s.N // s.nc)
        with for_range(b, lo, hi, name="pb") as pb:
            em.push()
            jb = b.urem(pb, I64(njc))
            cbase = C
            if s.batch:
                packer.bind(s.batch, b.udiv(pb, I64(njc)))
                off = None
                for ax in s.batch:
                    term = b.mul(em.env[ax], I64(cstrides[axes.index(ax)]))
                    off = term if off is None else b.add(off, term)
                cbase = b.gep(C, [off], inbounds=True, source_etype=self.t)
            jc = b.mul(jb, I64(s.nc))
            nc = smin(b, I64(s.nc), b.sub(I64(s.N), jc))
            with for_range(b, 0, s.K, s.kc, name="kc") as kc:
                em.push()
                kcl = smin(b, I64(s.kc), b.sub(I64(s.K), kc))
                first = b.icmp_signed("==", kc, I64(0))
                packer.pack(bp, s.b, s.n, jc, nc, s.nr, kc, kcl)
                with for_range(b, 0, s.M, s.mc, name="ic") as ic:
                    em.push()
                    mcl = smin(b, I64(s.mc), b.sub(I64(s.M), ic))
                    packer.pack(ap, s.a, (s.m,), ic, mcl, s.mr, kc, kcl)
                    with for_range(b, 0, nc, s.nr, name="jr") as jr:
                        cols = smin(b, I64(s.nr), b.sub(nc, jr))
                        bpanel = b.gep(bp, [b.mul(jr, kcl)], inbounds=True, source_etype=self.t)
                        with for_range(b, 0, mcl, s.mr, name="ir") as ir_:
                            rows = smin(b, I64(s.mr), b.sub(mcl, ir_))
                            apanel = b.gep(ap, [b.mul(ir_, kcl)], inbounds=True, source_etype=self.t)
                            off = b.add(b.mul(b.add(ic, ir_), I64(ldc)), b.add(jc, jr))
                            cptr = b.gep(cbase, [off], inbounds=True, source_etype=self.t)
                            b.call(self.micro, [apanel, bpanel, cptr, I64(ldc), rows, cols, kcl, first])
                    em.pop()
                em.pop()
            em.pop()
        b.call(free, [ap])
        b.call(free, [bp])

