"""The generic matrix-product library: driver, packers and micro-kernel, compiled once per process.

Specialized only on the target, dtype, MR and NR; sizes, strides, layouts and cache blocks are read at run
time from a descriptor (:mod:`.gemm.descriptor`).  Kernels call ``tensorad_gemm_<v>_driver(desc, lo, hi)``.
The pieces (the core: ``driver``, ``micro``, ``tables``, ``nanscan``; one packing routine per side and mode,
its address stored in the descriptor) are built on first use or linked from the disk cache, keyed by the
piece, the target, LLVM and :mod:`.gemm.version`; their vector code is SSA already (only :func:`light`'s
optimizer).  The driver is BLIS-style (:mod:`.gemm.microkernel`): per batch point, block of columns
and part of the rows (the parallel loop, ``gemmdesc.H_PARTS``), per KC block B packed into NR-wide panels,
per MC block A into MR-high panels, a micro-kernel per tile, then the kernel's fixer (``gemmdesc.H_FIX``).
A side B contiguous along its columns is read in place, the row tiles asking for the next panel's rows into
L2; a side B that several products read alike is packed once into a buffer the kernel keeps
(``gemmdesc.H_BSHARED``).  The micro-kernel keeps an ``MR x NR`` tile of C in registers, stored by the
first ``kc`` block (unless C holds a partial sum, ``gemmdesc.H_ACC``) and added to by later ones; shorter
row tiles run shorter micro-kernels (:func:`heights`); edge tiles go through a stack tile."""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Callable, Iterable

import llvmlite.ir as ir

from tensorad.ir.locks import process_lock

from ..jit import disk_cache as diskcache
from ..jit import engine as jit
from ..llvm.ir_loops import declare, finish_ir, for_range
from ..target import Target
from . import descriptor as gd
from . import pack_routines as pl
from . import version as libversion
from .pack_routines import I1, I64, PTR, VOID, entry_alloca, imax, ld, loop, smin
from .packing import advancing


class _Resident:
    """The pieces (:func:`piece_name`) linked into the JIT's resident engine, one per piece and target."""

    def __init__(self) -> None:
        self.lock = process_lock()
        self.linked: set[str] = set()


_RESIDENT = _Resident()


def target_tag(target: Target) -> str:
    """A short name of the target in library symbols, so that libraries for several targets never clash."""
    return "t" + hashlib.sha256(target.key.encode()).hexdigest()[:10]


def prefix(dtype: str, mr: int, nr: int, target: Target) -> str:
    return f"tensorad_gemm_{'f32' if dtype == 'float32' else 'f64'}_{mr}x{nr}_{target_tag(target)}"


def driver_symbol(dtype: str, mr: int, nr: int, target: Target) -> str:
    return prefix(dtype, mr, nr, target) + "_driver"


def pack_symbol(dtype: str, mr: int, nr: int, side: str, mode: int, target: Target) -> str:
    return f"{prefix(dtype, mr, nr, target)}_pack{side}_{pl.MODE_NAMES[mode]}"


def parse_symbol(symbol: str) -> tuple | None:
    """The piece that defines a library symbol: ``(dtype, mr, nr, tag, part)`` with ``part``
    ``"core"`` (micro-kernel, tables, driver, NaN scan) or ``("A"|"B", mode)``; ``None`` if foreign."""
    parts = symbol.split("_")
    if len(parts) < 6 or parts[:2] != ["tensorad", "gemm"] or parts[2] not in ("f32", "f64"):
        return None
    try:
        mr, nr = (int(x) for x in parts[3].split("x"))
    except ValueError:
        return None
    dtype = "float32" if parts[2] == "f32" else "float64"
    tag = parts[4]
    if parts[5:] in (["driver"], ["tables"], ["nanscan"]):
        return dtype, mr, nr, tag, "core"
    if len(parts) == 7 and parts[5] in ("packA", "packB") and parts[6] in pl.MODES:
        return dtype, mr, nr, tag, (parts[5][-1], pl.MODES[parts[6]])
    return None


class LinkPlan:
    """What linking the library pieces that define ``symbols`` (and the cores they call) takes:
    :meth:`modules` are the pieces to compile, which a build compiles beside its kernel
    (:func:`.jit.engine.compile_kernel`), and :meth:`link` stores and links their code."""

    def __init__(self, symbols: Iterable[str], target: Target):
        self.target = target
        self.wanted: dict[str, tuple[str, tuple]] = {}  # piece name -> (a symbol it defines, piece)
        for symbol in symbols:
            piece = parse_symbol(symbol)
            if piece is None or piece[3] != target_tag(target):
                raise RuntimeError(
                    f"not a matrix-product library function of target {target.spec!r}: {symbol}")
            dtype, mr, nr, tag, part = piece
            if part != "core":  # (the core first: the packers call its tables)
                self.wanted.setdefault(piece_name(dtype, mr, nr, tag, "core"),
                                       (driver_symbol(dtype, mr, nr, target), (dtype, mr, nr, tag, "core")))
            self.wanted.setdefault(piece_name(dtype, mr, nr, tag, part), (symbol, piece))
        self.on_disk: dict[str, bytes] = {}
        self.todo: list[tuple[str, str, str, tuple]] = []  # (name, key, key text, piece)
        for name, (symbol, piece) in self.wanted.items():
            if name in _RESIDENT.linked:
                continue
            key, key_text = entry_key(symbol, target)
            obj = diskcache.get_object(key, key_text)
            if obj is None:
                self.todo.append((name, key, key_text, piece))
            else:
                self.on_disk[name] = obj

    def modules(self) -> list[tuple[Callable[[], str], int, bool]]:
        """The pieces to compile, as :func:`.jit.engine.compile_objects` takes them (``todo``'s order)."""
        # (-O1 for the stride-2 copying packer, which :func:`light` leaves out, else no optimizer)
        return [(lambda p=piece: piece_ir(p[0], p[1], p[2], p[4], self.target),
                 int(piece[4] != "core" and piece[4][1] == gd.COPY2), light(piece[4]))
                for *_, piece in self.todo]

    def link(self, compiled: list[tuple[bytes, float]], linked: dict[str, str] | None = None) -> None:
        """Store the pieces compiled (object code and CPU seconds, in ``todo``'s order), link every piece
        not linked yet, and record in ``linked`` how each came (``"process"``, ``"disk"``, ``"compiled"``)."""
        origins = {name: "process" for name in self.wanted}
        objects = {name: (obj, "disk") for name, obj in self.on_disk.items()}
        for (name, key, key_text, _), (obj, _) in zip(self.todo, compiled):
            diskcache.put_object(key, key_text, obj)
            objects[name] = obj, "compiled"
        with _RESIDENT.lock:
            for name in self.wanted:  # (in order: a core before the packers that call it)
                if name in objects and name not in _RESIDENT.linked:
                    jit.load_object(objects[name][0], [])
                    _RESIDENT.linked.add(name)
                    origins[name] = objects[name][1]
        if linked is not None:
            for name in self.wanted:
                linked.setdefault(name, origins[name])


def link_symbols(symbols: Iterable[str], target: Target, linked: dict[str, str] | None = None) -> None:
    """Link the library pieces defining ``symbols`` (and the cores they call), compiled for ``target``,
    into the JIT, each once: from the disk cache, else compiled and stored (``linked``: see ``link``)."""
    plan = LinkPlan(symbols, target)
    plan.link(jit.compile_objects(plan.modules(), target), linked)


def light(part) -> bool:
    """Whether a piece is compiled with :func:`.jit.compile_job.promote`'s light pipeline: the transposing
    and staging packers and the copying one (their loops keep values in stack slots).  The stride-2 copy keeps
    ``-O1``; the core and the gathering packer get no IR optimization."""
    return part != "core" and part[1] in (gd.TRANSPOSE, gd.TRANSPOSE2, gd.COPY, gd.STAGED)


def entry_key(symbol: str, target: Target) -> tuple[str, str]:
    """The disk-cache key of the piece defining ``symbol`` for ``target``, and its text: the piece (dtype,
    MR, NR, target tag, part), the target, LLVM and :func:`.gemm.version.version`."""
    piece = parse_symbol(symbol)
    if piece is None:
        raise ValueError(f"not a matrix-product library function: {symbol}")
    key_text = "\n".join(["gemmlib", repr(piece), target.key, jit.toolchain(), libversion.version()])
    return hashlib.sha256(key_text.encode()).hexdigest(), key_text


def piece_name(dtype: str, mr: int, nr: int, tag: str, part) -> str:
    """A readable name of one piece of the target tagged ``tag`` (:func:`target_tag`):
    ``f32_4x24_t0123456789_core``, ``f32_4x24_t0123456789_packB_transpose``."""
    head = f"{'f32' if dtype == 'float32' else 'f64'}_{mr}x{nr}_{tag}"
    if part == "core":
        return head + "_core"
    return f"{head}_pack{part[0]}_{pl.MODE_NAMES[part[1]]}"


def piece_ir(dtype: str, mr: int, nr: int, part, target: Target) -> str:
    """LLVM IR of one library piece: the core, or the packing routine of one side and mode."""
    p = prefix(dtype, mr, nr, target)
    m = ir.Module(name=p)
    t = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    vw = gd.panel_lanes(target.lanes(dtype), nr)
    if part == "core":
        micros = [[emit_micro(m, f"{p}_micro{'_strided' * strided}{'_packing' * packs}{f'_h{h}' * (h < mr)}",
                              t, mr, nr, vw, target.fma, strided, packs, h) for h in heights(mr, packs)]
                  for strided, packs in ((False, False), (True, False), (True, True))]
        pl.emit_tables(m, p + "_tables", pl.emit_table(m, p + "_table"), pl.emit_runs(m, p + "_runs"))
        unroll = k_unroll(mr, 4 if dtype == "float32" else 8, target.fma)
        emit_driver(m, p + "_driver", t, mr, nr, unroll, *micros)
        emit_nan_scan(m, p + "_nanscan", t, target.lanes(dtype), target.masked_memory)
    else:
        side, mode = part
        tables = declare(m, p + "_tables", VOID, [PTR, I64, I64, I64, I64, I64, PTR, I64])
        pl.emit_pack(m, pack_symbol(dtype, mr, nr, side, mode, target), t, mr if side == "A" else nr, mode,
                     tables, vw)
    return finish_ir(str(m))


SCAN_VECTORS = 4  # the vectors the NaN scan tests a step (one branch for them all)


def emit_nan_scan(m: ir.Module, name: str, t: ir.Type, vw: int, masked: bool) -> ir.Function:
    """``scan(block, ldc, rows, cols) -> i1``: whether ``rows`` rows of ``cols`` elements, ``ldc`` apart,
    hold a NaN (unordered tests, no fast-math flags): per row :data:`SCAN_VECTORS` ``vw``-lane vectors a
    step, then single vectors, then the rest in one masked vector (``masked``: cheap masked loads) or one
    by one, returning at the first NaN.  In the core, compiled once per machine for every product's fixer."""
    es = 4 if isinstance(t, ir.FloatType) else 8
    vt, bits = ir.VectorType(t, vw), ir.IntType(vw)
    fn, b = pl.new_function(m, name, [PTR, I64, I64, I64], internal=False, attrs=("nounwind",), ret=I1)
    block, ldc, rows, cols = fn.args
    mload = declare(m, f"llvm.masked.load.v{vw}{'f32' if es == 4 else 'f64'}.p0", vt,
                    [PTR, ir.IntType(32), ir.VectorType(I1, vw), vt])

    def nan_lanes(at: ir.Value, mask: ir.Value | None = None) -> ir.Value:  # (masked: nothing else read)
        v = (b.load(at, typ=vt, align=es) if mask is None
             else b.call(mload, [at, ir.IntType(32)(es), mask, ir.Constant(vt, None)]))
        return b.fcmp_unordered("uno", v, v)

    def found_if(lanes: ir.Value) -> None:
        with b.if_then(b.icmp_unsigned("!=", b.bitcast(lanes, bits), bits(0)), likely=False):
            b.ret(I1(1))

    step = SCAN_VECTORS * vw
    many = b.mul(b.sdiv(cols, I64(step)), I64(step))
    whole = b.mul(b.sdiv(cols, I64(vw)), I64(vw))
    with loop(b, 0, rows, name="sm") as r:
        row = b.gep(block, [b.mul(r, ldc)], inbounds=True, source_etype=t)
        with loop(b, 0, many, step, name="sq") as j:
            lanes = [nan_lanes(b.gep(row, [b.add(j, I64(q * vw))], inbounds=True, source_etype=t))
                     for q in range(SCAN_VECTORS)]
            while len(lanes) > 1:  # (a tree of ORs; an odd one out waits a level)
                lanes = [b.or_(x, y) for x, y in zip(lanes[::2], lanes[1::2])] + lanes[len(lanes) & ~1:]
            found_if(lanes[0])
        with loop(b, many, whole, vw, name="sv") as j:
            found_if(nan_lanes(b.gep(row, [j], inbounds=True, source_etype=t)))
        if masked:
            with b.if_then(b.icmp_signed("<", whole, cols)):
                lane = ir.Constant(ir.VectorType(I64, vw), list(range(vw)))
                mask = b.icmp_signed("<", lane, pl.splat(b, b.sub(cols, whole), vw))
                found_if(nan_lanes(b.gep(row, [whole], inbounds=True, source_etype=t), mask))
        else:
            with loop(b, whole, cols, name="se") as j:
                x = ld(b, row, j, t)
                with b.if_then(b.fcmp_unordered("uno", x, x), likely=False):
                    b.ret(I1(1))
    b.ret(I1(0))
    return fn


# ---- the micro-kernel ------------------------------------------------------------------------

# how far ahead the micro-kernel's k loop prefetches its panels, in bytes
PREFETCH_A, PREFETCH_B = 2048, 1536
# how many of B's rows ahead the micro-kernel prefetches B read in place (its rows far apart)
PREFETCH_ROWS = 8
# the fixed-point fraction bits of the rate at which a micro-kernel asks for the next panel's rows, and
# the consecutive rows it asks for per iteration of its k loop (the most it advances by)
RATE_BITS, AHEAD_ROWS = 16, 1


def k_unroll(mr: int, es: int, fma: bool) -> int:
    """The ``k`` steps of one iteration of the micro-kernel's loop (the rest run one by one): as many as
    make a line of A's panel, one prefetch and loop test each; one without FMA (registers would spill)."""
    return max(1, 64 // (mr * es)) if fma else 1


def heights(mr: int, packs: bool = False) -> list[int]:
    """The rows of C's tile the micro-kernels of an ``MR``-row register tile compute, tallest first: ``MR``
    and its halvings (an edge tile of ``rows`` runs the shortest that covers them); the first row tile's
    kernel that packs B (``packs``) only ``MR``."""
    return [mr] if packs else [h for h in (mr >> i for i in range(mr.bit_length())) if h]


def emit_micro(m: ir.Module, name: str, t: ir.Type, mr: int, nr: int, vw: int, fma: bool,
               strided: bool = False, packs: bool = False, height: int | None = None) -> ir.Function:
    """``micro(a, b, c, ldc, rows, cols, kc, first, pf, pfld, rate)``: ``C[:rows, :cols] (+)= A_panel @
    B_panel`` in ``vw``-lane vectors, asking on the way for the rows ``pf + i pfld`` of another panel of B
    into L2, row ``i = k rate >> RATE_BITS`` at each iteration of the ``k`` loop.  ``strided``: ``micro(...,
    rate, ldb)`` reads B's columns in place, rows ``ldb`` apart; ``packs``: ``micro(..., rate, ldb, dst)``
    also packs them at ``dst``.  ``height``: the tile's rows (``MR``, A's panel height, if ``None``)."""
    es = 4 if isinstance(t, ir.FloatType) else 8
    height = height or mr
    params = [PTR, PTR, PTR, I64, I64, I64, I64, I1, PTR, I64, I64] + [I64] * strided + [PTR] * packs
    fn, b = pl.new_function(m, name, params)
    ap, bp, cp, ldc, rows, cols, kcl, first = fn.args[:8]
    for a in fn.args[:3] + fn.args[12:]:
        a.add_attribute("noalias")
    # C's tile is used only after the k loop: ask for its lines now (a prefetch never faults).
    steps = MicroSteps(b, t, mr, nr, vw, fma, ap, bp, *(list(fn.args[11:]) + [None, None])[:2], fn.args[8:11],
                       height)
    for r in range(height):
        rowp = b.gep(cp, [b.mul(ldc, I64(r))], inbounds=False, source_etype=t)
        for off in sorted(set(range(0, nr * es, 64)) | {nr * es - es}):
            steps.fetch(b.gep(rowp, [I64(off // es)], inbounds=False, source_etype=t), write=True)
    # the steps in iterations of ``steps.unroll``, then the rest one by one
    whole_steps = b.mul(b.sdiv(kcl, I64(steps.unroll)), I64(steps.unroll))
    tiles = steps.loop(I64(0), whole_steps, steps.zeros(), steps.unroll, "k", True)
    res = steps.loop(whole_steps, kcl, tiles, 1, "kr", steps.unroll == 1)
    update_c(b, t, vw, res, cp, ldc, rows, cols, first)
    b.ret_void()
    return fn


class MicroSteps:
    """The ``k`` loops of a micro-kernel (:func:`emit_micro`) over its ``height x NR`` accumulators (A's
    panel ``MR`` rows high): B's panel
    at ``bp`` (rows ``ldb`` apart if given, else packed), packed on into ``dst`` if given; A's at ``ap``;
    ``later``: ``(pf, pfld, rate)``, the rows of B asked for into L2 on the way (:func:`emit_micro`)."""

    def __init__(self, b: ir.IRBuilder, t: ir.Type, mr: int, nr: int, vw: int, fma: bool, ap: ir.Value,
                 bp: ir.Value, ldb: ir.Value | None, dst: ir.Value | None, later: tuple, height: int) -> None:
        self.b, self.t, self.mr, self.nr, self.vw, self.fma, self.height = b, t, mr, nr, vw, fma, height
        self.ap, self.bp, self.dst, self.strided, self.later = ap, bp, dst, ldb is not None, later
        self.ldb = I64(nr) if ldb is None else ldb
        self.es = 4 if isinstance(t, ir.FloatType) else 8
        self.vt = ir.VectorType(t, vw)
        self.nv = nr // vw
        self.unroll = k_unroll(mr, self.es, fma)
        # panels are 64-byte aligned, rows nr apart; B read in place, anywhere
        self.panel_align = min(64, vw * self.es, (nr * self.es) & -(nr * self.es))
        m = b.module
        self.fused = declare(m, f"llvm.fma.v{vw}{'f32' if self.es == 4 else 'f64'}", self.vt, [self.vt] * 3)
        self.prefetch = declare(m, "llvm.prefetch.p0", VOID, [PTR] + [ir.IntType(32)] * 3)

    def fetch(self, at: ir.Value, write: bool = False, locality: int = 3) -> None:
        """A prefetch of the line at ``at`` into L1 (``locality`` 2: into L2)."""
        self.b.call(self.prefetch, [at] + [ir.IntType(32)(v) for v in (int(write), locality, 1)])

    def zeros(self) -> list:
        return [[ir.Constant(self.vt, None)] * self.nv for _ in range(self.height)]

    def step(self, kv: ir.Value, accs: list) -> list:
        """One ``k``: B's row (packed on, with ``dst``), A's column broadcast, the tile's FMAs."""
        b, t, vt, vw, nv = self.b, self.t, self.vt, self.vw, self.nv
        boff = b.mul(kv, self.ldb)
        bvec = [b.load(b.gep(self.bp, [b.add(boff, I64(v * vw))], inbounds=True, source_etype=t), typ=vt,
                       align=self.es if self.strided else self.panel_align) for v in range(nv)]
        if self.dst is not None:
            drow = b.mul(kv, I64(self.nr))
            for v in range(nv):  # (the panel is 64-byte aligned, as the driver's are)
                b.store(bvec[v], b.gep(self.dst, [b.add(drow, I64(v * vw))], inbounds=True, source_etype=t),
                        align=self.panel_align)
        aoff = b.mul(kv, I64(self.mr))
        new = []
        for r in range(self.height):
            a = b.load(b.gep(self.ap, [b.add(aoff, I64(r))], inbounds=True, source_etype=t), typ=t)
            splat = pl.splat(b, a, vw)
            new.append([b.call(self.fused, [splat, bvec[v], accs[r][v]]) if self.fma
                        else b.fadd(b.fmul(splat, bvec[v]), accs[r][v]) for v in range(nv)])
        return new

    def ahead(self, kv: ir.Value) -> None:
        """Ask for the panels' lines a little ahead, once per ``unroll`` steps: the ``unroll`` rows of B
        ``PREFETCH_B`` bytes ahead (``PREFETCH_ROWS`` rows of B read in place), of A ``PREFETCH_A`` bytes,
        and a row of another panel into L2 (:func:`emit_micro`'s ``pf``)."""
        b, t, es, nr, mr, u = self.b, self.t, self.es, self.nr, self.mr, self.unroll
        boff = b.mul(kv, self.ldb)
        if self.strided:  # (a row's lines: it may start anywhere in one)
            for i in range(u):
                row = b.gep(self.bp, [b.add(boff, b.mul(I64(PREFETCH_ROWS + i), self.ldb))], inbounds=False,
                            source_etype=t)
                for off in range(0, nr * es + 63, 64):
                    at = b.gep(row, [I64(min(off, nr * es - es) // es)], inbounds=False, source_etype=t)
                    self.fetch(at)
        else:
            at = b.add(boff, I64(max(1, PREFETCH_B // (nr * es)) * nr))
            for off in range(0, u * nr * es, 64):
                self.fetch(b.gep(self.bp, [b.add(at, I64(off // es))], inbounds=False, source_etype=t))
        at = b.add(b.mul(kv, I64(mr)), I64(max(1, PREFETCH_A // (mr * es)) * mr))
        for off in range(0, u * mr * es, 64):
            self.fetch(b.gep(self.ap, [b.add(at, I64(off // es))], inbounds=False, source_etype=t))
        pf, pfld, rate = self.later
        with b.if_then(b.icmp_signed("!=", pfld, I64(0)), likely=True):  # (0: no rows to ask for)
            first = b.lshr(b.mul(kv, rate), I64(RATE_BITS))
            row = b.gep(pf, [b.mul(first, pfld)], inbounds=False, source_etype=t)
            for i in range(AHEAD_ROWS):
                at = b.gep(row, [b.mul(I64(i), pfld)], inbounds=False, source_etype=t) if i else row
                for off in range(0, nr * es + 63, 64):
                    self.fetch(b.gep(at, [I64(min(off, nr * es - es) // es)], inbounds=False,
                                     source_etype=t), locality=2)

    def loop(self, lo: ir.Value, hi: ir.Value, accs0: list, by: int, name: str, fetching: bool) -> list:
        """The steps ``[lo, hi)`` (``hi - lo`` a multiple of ``by``), ``by`` per iteration,
        from the tiles ``accs0``: the tiles after them."""
        b, mr, nv = self.b, self.height, self.nv
        pre = b.block
        body = b.append_basic_block(f"{name}.body")
        exit_ = b.append_basic_block(f"{name}.exit")
        b.cbranch(b.icmp_signed("<", lo, hi), body, exit_)
        b.position_at_end(body)
        kv = b.phi(I64, name=name)
        kv.add_incoming(lo, pre)
        accs = [[b.phi(self.vt, name=f"c{r}_{v}") for v in range(nv)] for r in range(mr)]
        for phi, value in zip(sum(accs, []), sum(accs0, [])):
            phi.add_incoming(value, pre)
        if fetching:
            self.ahead(kv)
        new = accs
        for u in range(by):
            new = self.step(b.add(kv, I64(u)) if u else kv, new)
        nxt = b.add(kv, I64(by))
        latch = b.block  # (the body's last block)
        kv.add_incoming(nxt, latch)
        for phi, value in zip(sum(accs, []), sum(new, [])):
            phi.add_incoming(value, latch)
        b.cbranch(b.icmp_signed("<", nxt, hi), body, exit_)
        b.position_at_end(exit_)
        out = [[b.phi(self.vt) for _ in range(nv)] for _ in range(mr)]
        for phi, first, last in zip(sum(out, []), sum(accs0, []), sum(new, [])):
            phi.add_incoming(first, pre)
            phi.add_incoming(last, latch)
        return out


def update_c(b: ir.IRBuilder, t: ir.Type, vw: int, res: list, cp: ir.Value, ldc: ir.Value, rows: ir.Value,
             cols: ir.Value, first: ir.Value) -> None:
    """``C[:rows, :cols] (+)= res``, the micro-kernel's tile of ``len(res)`` rows of vectors:
    the first k block stores, later ones accumulate (C is never read before)."""
    es = 4 if isinstance(t, ir.FloatType) else 8
    mr, nv = len(res), len(res[0])
    nr, vt = nv * vw, ir.VectorType(t, vw)
    tile = entry_alloca(b, ir.ArrayType(t, mr * nr), "tile")
    full = b.and_(b.icmp_signed("==", rows, I64(mr)), b.icmp_signed("==", cols, I64(nr)))
    with b.if_else(full) as (then, other):
        with then:
            with b.if_else(first) as (store, accumulate):
                for branch, add in ((store, False), (accumulate, True)):
                    with branch:
                        for r in range(mr):
                            rowp = b.gep(cp, [b.mul(ldc, I64(r))], inbounds=True, source_etype=t)
                            for v in range(nv):
                                ptr = b.gep(rowp, [I64(v * vw)], inbounds=True, source_etype=t)
                                val = res[r][v]
                                if add:
                                    val = b.fadd(b.load(ptr, typ=vt, align=es), val)
                                b.store(val, ptr, align=es)
        with other:
            # an edge tile: its rows' whole vectors go straight to C, the rest through the stack tile
            whole = b.mul(b.sdiv(cols, I64(vw)), I64(vw))
            for r in range(mr):
                for v in range(nv):
                    ptr = b.gep(tile, [I64(r * nr + v * vw)], inbounds=True, source_etype=t)
                    # llvmlite types alloca pointers: cast to a vector pointer to store a vector
                    b.store(res[r][v], b.bitcast(ptr, vt.as_pointer()), align=es)
                with b.if_then(b.icmp_signed("<", I64(r), rows)):
                    rowp = b.gep(cp, [b.mul(ldc, I64(r))], inbounds=True, source_etype=t)
                    for v in range(nv):
                        with b.if_then(b.icmp_signed("<=", I64((v + 1) * vw), cols)):
                            ptr = b.gep(rowp, [I64(v * vw)], inbounds=True, source_etype=t)
                            old = b.load(ptr, typ=vt, align=es)
                            b.store(b.select(first, res[r][v], b.fadd(old, res[r][v])), ptr, align=es)
            with for_range(b, 0, rows, name="er", vectorize=False) as r:
                with for_range(b, whole, cols, name="ec", vectorize=False) as c:
                    src = b.gep(tile, [b.add(b.mul(r, I64(nr)), c)], inbounds=True, source_etype=t)
                    at = b.gep(cp, [b.add(b.mul(r, ldc), c)], inbounds=True, source_etype=t)
                    base = b.select(first, t(0.0), b.load(at, typ=t))
                    b.store(b.fadd(base, b.load(src, typ=t)), at)


# ---- the driver ------------------------------------------------------------------------------

def column_span(jb, blocks, n, nr, ar: tuple | None = None) -> tuple:
    """``(first column, columns)`` of column block ``jb`` of ``blocks`` over ``n`` columns: its share of the
    ``ceil(n / nr)`` panels of B, shared out as evenly as whole panels go (the blocks differ by a panel at
    most, none wider than :func:`.gemm.contraction.column_block`'s ``NC``), so that the parallel loop's
    blocks take as long.  In Python's integers, or ``ar``'s ``(add, sub, mul, div, min)`` (the driver's)."""
    add, sub, mul, div, least = ar or (operator.add, operator.sub, operator.mul, operator.floordiv, min)
    panels = div(add(n, nr - 1), nr)
    first = mul(div(mul(jb, panels), blocks), nr)
    return first, sub(least(n, mul(div(mul(add(jb, 1), panels), blocks), nr)), first)


def emit_driver(m: ir.Module, name: str, t: ir.Type, mr: int, nr: int, unroll: int, micro: list,
                micro_strided: list, micro_packing: list) -> ir.Function:
    """``driver(desc, lo, hi)``: the blocked product for parallel-loop iterations ``[lo, hi)``.  With B read
    in place (:data:`.gemm.descriptor.H_BDIRECT`) whole panels go to ``micro_strided``, or (``H_BKEEP``) the
    first row tile's ``micro_packing``; a last, narrower panel is packed first.  Each kind of micro-kernel
    comes in the :func:`heights` (tallest first): a row tile runs the shortest that covers its rows.  The row
    tiles of the first row block share out asking for the next panel read in place (that of the next ``k``
    block after the last), at most ``AHEAD_ROWS`` rows per iteration of their ``k`` loops (``unroll`` steps):
    the tiles after the first, which reads its own panel in place, or all where they alone cannot; a tile
    alone asks for none."""
    es = 4 if isinstance(t, ir.FloatType) else 8
    fn, b = pl.new_function(m, name, [PTR, I64, I64], internal=False, attrs=("nounwind",))
    desc, lo, hi = fn.args
    M, N, K = ld(b, desc, gd.H_M), ld(b, desc, gd.H_N), ld(b, desc, gd.H_K)
    kc, mc, nc = ld(b, desc, gd.H_KC), ld(b, desc, gd.H_MC), ld(b, desc, gd.H_NC)
    ldc, njc = ld(b, desc, gd.H_LDC), ld(b, desc, gd.H_NJC)
    parts, part_rows = ld(b, desc, gd.H_PARTS), ld(b, desc, gd.H_PART_ROWS)
    C = b.inttoptr(ld(b, desc, gd.H_C), PTR, name="C")
    band_lo_on = b.icmp_unsigned("!=", ld(b, desc, gd.H_BAND_LO_ON), I64(0))
    band_hi_on = b.icmp_unsigned("!=", ld(b, desc, gd.H_BAND_HI_ON), I64(0))
    band_lo, band_hi = ld(b, desc, gd.H_BAND_LO), ld(b, desc, gd.H_BAND_HI)
    band_inner = ld(b, desc, gd.H_BAND_INNER)
    side_a = b.gep(desc, [I64(gd.SIDE_A)], inbounds=True, source_etype=I64)
    side_b = b.gep(desc, [I64(gd.SIDE_B)], inbounds=True, source_etype=I64)
    ldb = ld(b, desc, gd.H_BDIRECT)
    acc = b.icmp_unsigned("!=", ld(b, desc, gd.H_ACC), I64(0))
    direct = b.icmp_unsigned("!=", ldb, I64(0))
    bdirect = b.gep(b.inttoptr(ld(b, desc, gd.SIDE_B + gd.S_BASE), PTR),
                    [ld(b, desc, gd.SIDE_B + gd.S_CONST)], inbounds=False, source_etype=t, name="Bdirect")

    pack_ty = ir.FunctionType(VOID, [PTR, PTR, I64, I64, I64, I64, I64, PTR])
    fa = b.inttoptr(ld(b, desc, gd.SIDE_A + gd.S_FN), pack_ty.as_pointer(), name="packA")
    fb = b.inttoptr(ld(b, desc, gd.SIDE_B + gd.S_FN), pack_ty.as_pointer(), name="packB")
    fix_ty = ir.FunctionType(VOID, [PTR, PTR, I64, I64, I64, I64, I64])
    alloc = declare(m, "aligned_alloc", PTR, [I64, I64])
    free = declare(m, "free", VOID, [PTR])

    def round64(x):  # whole cache lines, and pl.SLACK elements past the end for spilling copies
        return b.and_(b.add(b.add(x, I64(pl.SLACK * es)), I64(63)), I64(-64))

    npan = b.sdiv(b.add(nc, I64(nr - 1)), I64(nr))
    ap = b.call(alloc, [I64(64), round64(b.mul(b.mul(b.add(mc, I64(mr)), kc), I64(es)))])
    bp = b.call(alloc, [I64(64), round64(b.mul(b.mul(b.mul(npan, I64(nr)), kc), I64(es)))])
    tab = b.mul(b.add(b.add(mc, nc), kc), I64(2 + gd.MAXCHK))
    scratch = b.call(alloc, [I64(64), round64(b.mul(tab, I64(8)))])
    nb = ld(b, desc, gd.H_NB)
    # a shared schedule ``{next, team, chunk}``: this thread's first blocks are its next chunk
    dynamic = b.icmp_unsigned("!=", ld(b, desc, gd.H_SHARED), I64(0))
    shared = b.select(dynamic, b.inttoptr(ld(b, desc, gd.H_SHARED), PTR), desc, name="shared")
    team_size = b.select(dynamic, ld(b, shared, 1), I64(1))
    chunk = b.select(dynamic, ld(b, shared, 2), b.sub(hi, lo))

    def next_chunk(done: bool) -> ir.Value:
        """The first block of this thread's next chunk (``hi`` or past it: none left)."""
        with b.if_else(dynamic) as (team, alone):
            with team:
                ticket = b.add(lo, b.mul(b.atomic_rmw("add", shared, I64(1), "monotonic"), chunk))
                team_bb = b.block
            with alone:
                alone_bb = b.block
        block = b.phi(I64, name="block")
        block.add_incoming(ticket, team_bb)
        block.add_incoming(hi if done else lo, alone_bb)
        return block

    first_chunk = next_chunk(False)
    share = b.select(b.icmp_signed("<", first_chunk, hi),
                     b.sdiv(b.add(b.sub(hi, lo), b.sub(team_size, I64(1))), team_size), I64(0))
    def packed_once(field, more_than, outer, block, tile, pack, side, empty, names) -> tuple:
        """``(padded rows, flag, buffer)``: a side packed once for the call, where ``field`` says it reads
        no batch axis and the call runs more than ``more_than`` blocks."""
        pad = b.mul(b.sdiv(b.add(outer, I64(tile - 1)), I64(tile)), I64(tile))
        on = b.and_(b.icmp_signed("!=", ld(b, desc, field), I64(0)), b.icmp_signed(">", share, more_than))
        buf = b.call(alloc, [I64(64), round64(b.mul(b.mul(b.select(on, pad, I64(empty)), K), I64(es)))])
        with b.if_then(on):
            with loop(b, 0, K, kc, name=names[0], vectorize=False) as k0:
                kcl = smin(b, kc, b.sub(K, k0))
                with loop(b, 0, outer, block, name=names[1], vectorize=False) as o0:
                    olen = smin(b, block, b.sub(outer, o0))
                    at = b.gep(buf, [b.add(b.mul(k0, pad), b.mul(o0, kcl))], inbounds=True, source_etype=t)
                    b.call(pack, [side, at, b.sdiv(lo, njc), o0, olen, k0, kcl, scratch])
        return pad, on, buf

    def by_rows(kernels: list, rows: ir.Value, args: list, tall: int = mr) -> None:
        """Call the shortest of ``kernels`` (the :func:`heights` from ``tall`` down) that covers ``rows``."""
        if len(kernels) == 1:
            b.call(kernels[0], args)
            return
        with b.if_else(b.icmp_signed(">", rows, I64(tall // 2))) as (taller, shorter):
            with taller:
                b.call(kernels[0], args)
            with shorter:
                by_rows(kernels[1:], rows, args, tall // 2)

    def next_panel(jc, jr, k0, kcl, whole, first_block) -> tuple:
        """``(first row, rows)`` of the panel of B read in place after column ``jr`` of the ``k`` block at
        ``k0``: the next whole one, else the next ``k`` block's first (none past the first row block)."""
        more_k = b.icmp_signed("<", b.add(k0, kcl), K)
        nxt = b.icmp_signed("<", b.add(jr, I64(nr)), whole)
        k1 = b.select(nxt, k0, b.add(k0, kcl))
        col = b.select(nxt, b.add(jr, I64(nr)), I64(0))
        at = b.gep(bdirect, [b.add(b.mul(k1, ldb), b.add(jc, col))], inbounds=False, source_etype=t)
        rows = b.select(nxt, kcl, b.select(b.and_(more_k, b.icmp_signed(">", whole, I64(0))),
                                           smin(b, kc, b.sub(K, k1)), I64(0)))
        return at, b.select(first_block, rows, I64(0))

    def ahead_shares(mcl, kcl) -> tuple:
        """``(several, share, rate, first helper)`` of a row block: the row tiles from the first helper on
        ask for ``share`` rows each of a next panel (:func:`next_panel`, at most ``kcl`` rows), at ``rate``
        rows a step; the first helper is the second tile where the others cover ``kcl`` rows, at most
        ``AHEAD_ROWS`` an iteration, else the first.  Unless ``several`` tiles, none asks: a tile's own
        stream of B is all there is to overlap."""
        tiles = b.sdiv(b.add(mcl, I64(mr - 1)), I64(mr))
        several = b.icmp_signed(">", tiles, I64(1))
        iters = b.sdiv(kcl, I64(unroll))  # (the iterations that ask)
        covered = b.icmp_signed(">=", b.mul(b.sub(tiles, I64(1)), b.mul(iters, I64(AHEAD_ROWS))), kcl)
        helper0 = b.select(b.and_(covered, several), I64(1), I64(0))
        helpers = b.sub(tiles, helper0)
        share = b.sdiv(b.add(kcl, b.sub(helpers, I64(1))), helpers)
        steps = imax(b, b.mul(iters, I64(unroll)), I64(1))
        rate = b.sdiv(b.add(b.shl(share, I64(RATE_BITS)), b.sub(steps, I64(1))), steps)
        return several, share, smin(b, rate, I64((AHEAD_ROWS << RATE_BITS) // unroll)), helper0

    mpad, pre, apre = packed_once(gd.H_APRE, I64(1), M, mc, mr, fa, side_a, 1, ("pkc", "pic"))
    npad, preb, bonce = packed_once(gd.H_BPRE, njc, N, nc, nr, fb, side_b, 0, ("pkcb", "pjc"))
    # (B packed in the kernel's buffer, shared with other products: packed here only if this call fills it)
    kept = b.icmp_unsigned("!=", ld(b, desc, gd.H_BSHARED), I64(0))
    fills = b.icmp_unsigned("!=", ld(b, desc, gd.H_BFILL), I64(0))
    bpre = b.select(kept, b.inttoptr(ld(b, desc, gd.H_BSHARED), PTR), bonce, name="Bpacked")
    packs_b = b.and_(b.not_(preb), b.or_(b.not_(kept), fills))
    preb = b.or_(preb, kept)
    with advancing(b, first_chunk, hi, name="chunk") as (start, after):
        with loop(b, start, smin(b, b.add(start, chunk), hi), name="pb", vectorize=False) as pb:
            bflat = b.sdiv(pb, njc)
            jb = b.sdiv(b.srem(pb, njc), parts)
            # the rows of the block's part, [r0, r1)
            r0 = b.mul(b.srem(pb, parts), part_rows)
            r1 = b.select(b.icmp_signed(">", parts, I64(1)), smin(b, M, b.add(r0, part_rows)), M)
            # C's offset at the batch point (row-major digits of bflat)
            coff = entry_alloca(b, I64, "coff")
            rem = entry_alloca(b, I64, "crem")
            b.store(I64(0), coff)
            b.store(bflat, rem)
            with loop(b, 0, nb, name="cb", vectorize=False) as j:
                ax = b.sub(b.sub(nb, I64(1)), j)
                ext = ld(b, desc, b.add(I64(gd.H_BEXT), ax))
                r = b.load(rem)
                digit = b.select(b.icmp_signed("==", ax, I64(0)), r, b.srem(r, ext))
                b.store(b.sdiv(r, ext), rem)
                b.store(b.add(b.load(coff), b.mul(digit, ld(b, desc, b.add(I64(gd.H_CCOEF), ax)))), coff)
            cbase = b.gep(C, [b.load(coff)], inbounds=True, source_etype=t)
            jc, ncl = column_span(jb, b.sdiv(njc, parts), N, nr, tuple(
                lambda x, y, f=f: f(*(v if isinstance(v, ir.Value) else I64(v) for v in (x, y)))
                for f in (b.add, b.sub, b.mul, b.sdiv, lambda x, y: smin(b, x, y))))
            with loop(b, 0, K, kc, name="kc", vectorize=False) as k0:
                kcl = smin(b, kc, b.sub(K, k0))
                first = b.and_(b.icmp_signed("==", k0, I64(0)), b.not_(acc))
                # (B read in place: only the block's last panel, if narrower, is packed)
                whole = b.select(direct, b.mul(b.sdiv(ncl, I64(nr)), I64(nr)), I64(0))
                bblock = b.select(preb, b.gep(bpre, [b.add(b.mul(k0, npad), b.mul(jc, kcl))], inbounds=True,
                                              source_etype=t), bp)
                with b.if_then(b.and_(packs_b, b.icmp_signed("<", whole, ncl))):
                    b.call(fb, [side_b, b.gep(bblock, [b.mul(whole, kcl)], inbounds=True, source_etype=t),
                                bflat, b.add(jc, whole), b.sub(ncl, whole), k0, kcl, scratch])
                brow = b.gep(bdirect, [b.add(b.mul(k0, ldb), jc)], inbounds=False, source_etype=t)
                keep = b.icmp_unsigned("!=", ld(b, desc, gd.H_BKEEP), I64(0))
                with loop(b, r0, r1, mc, name="ic", vectorize=False) as ic:
                    mcl = smin(b, mc, b.sub(r1, ic))
                    with b.if_then(b.not_(pre)):
                        b.call(fa, [side_a, ap, bflat, ic, mcl, k0, kcl, scratch])
                    at = b.gep(apre, [b.add(b.mul(k0, mpad), b.mul(ic, kcl))], inbounds=True, source_etype=t)
                    ablock = b.select(pre, at, ap)
                    several, share, rate, helper0 = ahead_shares(mcl, kcl)
                    with loop(b, 0, ncl, nr, name="jr", vectorize=False) as jr:
                        cols = smin(b, I64(nr), b.sub(ncl, jr))
                        bpanel = b.gep(bblock, [b.mul(jr, kcl)], inbounds=True, source_etype=t)
                        pf_at, pf_rows = next_panel(jc, jr, k0, kcl, whole, b.icmp_signed("==", ic, r0))
                        pf_rows = b.select(several, pf_rows, I64(0))
                        with loop(b, 0, mcl, mr, name="ir", vectorize=False) as ir_:
                            rows = smin(b, I64(mr), b.sub(mcl, ir_))
                            # the k this block's band reaches, [klo, khi) (none: zeros on the first block)
                            row = b.add(ic, ir_)
                            kend = b.add(k0, kcl)
                            start = b.select(band_lo_on, b.mul(b.add(row, band_lo), band_inner), k0)
                            klo = smin(b, imax(b, start, k0), kend)
                            end = b.select(band_hi_on, b.mul(b.add(b.add(row, rows), band_hi), band_inner),
                                           kend)
                            khi = smin(b, imax(b, end, klo), kend)
                            skip = b.sub(klo, k0)
                            apanel = b.gep(ablock, [b.add(b.mul(ir_, kcl), b.mul(skip, I64(mr)))],
                                           inbounds=True, source_etype=t)
                            bskip = b.gep(bpanel, [b.mul(skip, I64(nr))], inbounds=True, source_etype=t)
                            off = b.add(b.mul(b.add(ic, ir_), ldc), b.add(jc, jr))
                            cptr = b.gep(cbase, [off], inbounds=True, source_etype=t)
                            klen = b.sub(khi, klo)
                            first_tile = b.icmp_signed("==", b.add(ic, ir_), r0)
                            in_place = b.and_(b.icmp_signed("<", jr, whole), b.or_(b.not_(keep), first_tile))
                            # (the rows the tiles before ask for)
                            done = b.mul(b.sub(b.sdiv(ir_, I64(mr)), helper0), share)
                            # (the tiles past the panel ask for none)
                            helps = b.and_(b.icmp_signed(">=", done, I64(0)),
                                           b.icmp_signed("<", done, pf_rows))
                            later = [b.gep(pf_at, [b.mul(done, ldb)], inbounds=False, source_etype=t),
                                     b.select(helps, ldb, I64(0)), rate]
                            head = [apanel, None, cptr, ldc, rows, cols, klen, first] + later
                            with b.if_else(in_place) as (unpacked, packed):
                                with unpacked:  # (no band then: every row tile reads all of k)
                                    head[1] = b.gep(brow, [jr], inbounds=False, source_etype=t)
                                    with b.if_else(keep) as (packing, reading):
                                        with packing:
                                            b.call(micro_packing[0], head + [ldb, bskip])
                                        with reading:
                                            by_rows(micro_strided, rows, head + [ldb])
                                with packed:
                                    head[1] = bskip
                                    by_rows(micro, rows, head)
            with b.if_then(b.icmp_unsigned("!=", ld(b, desc, gd.H_FIX), I64(0))):  # the block is complete
                b.call(b.inttoptr(ld(b, desc, gd.H_FIX), fix_ty.as_pointer()),
                       [b.inttoptr(ld(b, desc, gd.H_FIXCTX), PTR), cbase, bflat, jc, ncl, r0, r1])
        after[0] = next_chunk(True)
    for x in (ap, bp, scratch, apre, bonce):
        b.call(free, [x])
    b.ret_void()
    return fn
