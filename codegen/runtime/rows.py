"""A generic kernel: a program of independent rows (:func:`tensorad.lang.sizes.row_plan`) compiled once
per part, at a few block sizes whose least divides every admissible count of rows, and run at any count
by a driver (compiled once per process) that calls each part's code, largest first, on each next block
of rows that fits: the arrays' pointers moved to the block's first row, its count of rows and whether it
is the part's first block of the call (work that reads no row runs then only) written first to the input
every part reads last (:mod:`..passes.row_bound`).  A part whose loops take that count runs the last rows
as one short block; one built without it runs whole blocks only, the unit's block, last, running what
they leave.  A part with a record (raising gathers, ``checked=True``) stops the driver after the block
that fills it, and the call raises naming the call's row."""

from __future__ import annotations

import ctypes
import hashlib
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from tensorad.ir.expr import Expr
from tensorad.lang.sizes import RowKind, check_size

from ..jit.engine import Resident
from ..target import host_target
from .export import ExportError, export_kernel
from .kernel import Kernel, KernelArgumentError, Slots, data_address, given_outputs, put_addresses


def _loads(record: str, fields: str) -> str:
    """Loads of the 8-byte fields of ``%record``, ``fields`` as ``"type name, ..."``: each into ``%name``."""
    pairs = enumerate(field.split() for field in fields.split(", "))
    return "".join(f"  %{record}.{k} = getelementptr i64, ptr %{record}, i64 {k}\n"
                   f"  %{name} = load {ty}, ptr %{record}.{k}\n" for k, (ty, name) in pairs)


def _add_loop(bits: int, ty: str) -> str:
    """The block that adds ``count`` elements of ``ty`` of a sum's scratch into its array."""
    return f"""add{bits}:
  %i{bits} = phi i64 [0, %pick], [%in{bits}, %add{bits}]
  %ps{bits} = getelementptr {ty}, ptr %scratch2, i64 %i{bits}
  %vs{bits} = load {ty}, ptr %ps{bits}
  %pd{bits} = getelementptr {ty}, ptr %dst, i64 %i{bits}
  %vd{bits} = load {ty}, ptr %pd{bits}
  %sum{bits} = fadd {ty} %vd{bits}, %vs{bits}
  store {ty} %sum{bits}, ptr %pd{bits}
  %in{bits} = add i64 %i{bits}, 1
  %more{bits} = icmp slt i64 %in{bits}, %count
  br i1 %more{bits}, label %add{bits}, label %acc_next
"""


# tensorad_rows(given, threads) (a kernel's main: itself the frame's main), the frame {desc, parts, n,
# given, moves, m, width, sums, nsums, tailp, cslot, failed, main, threads} just before given, which
# holds the arrays' data pointers (the inputs, the count of rows at cslot, the outputs); for each part of
# desc (main, temps, ntemps, rows, threads, record), largest blocks first,
# main(given + r * moves ++ temps, threads) on each next block of rows [r, r + rows) that fits below n, and,
# for part tailp (none where past the last), on the rows left below n too, the block's count of rows and
# whether it is the part's first block (r = r0) written first to the int64[2] at given[cslot]; where the
# part's record (a raising gather's, the last of its temps; null: none) holds a violation after a block,
# that block's first row r is written to failed and the driver returns,
# where each sum of sums (index into given, scratch, elements, 1 for double else float) is written to its
# array by the first block, to its scratch and then added into its array by each later one
_DRIVER = """
define void @tensorad_rows(ptr %table, i32 %threads.unused) {
entry:
  %frame = getelementptr i8, ptr %table, i64 -112
""" + _loads("frame", "ptr desc, i64 parts, i64 n, ptr given, ptr moves, i64 m, i64 width, "
                   "ptr sums, i64 nsums, i64 tailp, i64 cslot, i64 failed") + """\
  %local = alloca ptr, i64 %width
  %tail = getelementptr ptr, ptr %local, i64 %m
  %pcnt = getelementptr ptr, ptr %given, i64 %cslot
  %cell = load ptr, ptr %pcnt
  br label %part
part:
  %p = phi i64 [0, %entry], [%pn, %next]
  %r0 = phi i64 [0, %entry], [%r, %next]
  %d = getelementptr [6 x i64], ptr %desc, i64 %p
""" + _loads("d", "ptr main, ptr temps, i64 ntemps, i64 rows, i64 t64, ptr record") + """\
  %threads = trunc i64 %t64 to i32
  %bytes = shl i64 %ntemps, 3
  call void @llvm.memcpy.p0.p0.i64(ptr %tail, ptr %temps, i64 %bytes, i1 false)
  br label %test
test:
  %r = phi i64 [%r0, %part], [%end, %acc_test]
  %end = add i64 %r, %rows
  %later = icmp sgt i64 %r, 0
  %fits = icmp sle i64 %end, %n
  %istail = icmp eq i64 %p, %tailp
  %left = icmp slt i64 %r, %n
  %tailrun = and i1 %istail, %left
  %go = or i1 %fits, %tailrun
  br i1 %go, label %rowcount, label %next
rowcount:
  %short = sub i64 %n, %r
  %cnt = select i1 %fits, i64 %rows, i64 %short
  store i64 %cnt, ptr %cell
  %first = icmp eq i64 %r, %r0
  %first64 = zext i1 %first to i64
  %pfirst = getelementptr i64, ptr %cell, i64 1
  store i64 %first64, ptr %pfirst
  br label %arg
arg:
  %k = phi i64 [0, %rowcount], [%kn, %arg]
  %pa = getelementptr ptr, ptr %given, i64 %k
  %a = load ptr, ptr %pa
  %pm = getelementptr i64, ptr %moves, i64 %k
  %mv = load i64, ptr %pm
  %off = mul i64 %mv, %r
  %q = getelementptr i8, ptr %a, i64 %off
  %pl = getelementptr ptr, ptr %local, i64 %k
  store ptr %q, ptr %pl
  %kn = add i64 %k, 1
  %more = icmp slt i64 %kn, %m
  br i1 %more, label %arg, label %set_test
set_test:
  %s = phi i64 [0, %arg], [%sn, %set]
  %sin = icmp slt i64 %s, %nsums
  %sany = and i1 %sin, %later
  br i1 %sany, label %set, label %call
set:
  %se = getelementptr [4 x i64], ptr %sums, i64 %s
""" + _loads("se", "i64 sidx, ptr scratch") + """\
  %sl = getelementptr ptr, ptr %local, i64 %sidx
  store ptr %scratch, ptr %sl
  %sn = add i64 %s, 1
  br label %set_test
call:
  call void %main(ptr %local, i32 %threads)
  %checks = icmp ne ptr %record, null
  br i1 %checks, label %check, label %acc_test
check:
  %code = load i64, ptr %record
  %bad = icmp ne i64 %code, 0
  br i1 %bad, label %fail, label %acc_test
fail:
  store i64 %r, ptr %frame.11
  ret void
acc_test:
  %e = phi i64 [0, %call], [0, %check], [%en, %acc_next]
  %ein = icmp slt i64 %e, %nsums
  %eany = and i1 %ein, %later
  br i1 %eany, label %acc_one, label %test
acc_one:
  %ae = getelementptr [4 x i64], ptr %sums, i64 %e
""" + _loads("ae", "i64 aidx, ptr scratch2, i64 count, i64 kind") + """\
  %pdst = getelementptr ptr, ptr %given, i64 %aidx
  %dst = load ptr, ptr %pdst
  %cany = icmp sgt i64 %count, 0
  %wide = icmp eq i64 %kind, 1
  br i1 %cany, label %pick, label %acc_next
pick:
  br i1 %wide, label %add64, label %add32
""" + _add_loop(64, "double") + _add_loop(32, "float") + """acc_next:
  %en = add i64 %e, 1
  br label %acc_test
next:
  %pn = add i64 %p, 1
  %again = icmp slt i64 %pn, %parts
  br i1 %again, label %part, label %done
done:
  ret void
}

declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
"""
FRAME = 14  # the driver's frame: its fields before the arrays' pointers
SIZES_KEPT = 64  # the counts of rows a kernel keeps what a call needs of (:meth:`RowsCall.sized`)


# the driver, compiled on first use
_ROWS = Resident(_DRIVER, "tensorad_rows", ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32), 2)


def refuse_export(size: Expr, path: str) -> NoReturn:
    """Raise the :class:`ExportError` of a kernel generic in ``size``: a library is the code of one size."""
    raise ExportError(f"export: a generic kernel over {size.name} has no library of its own to export "
                      f"({path}); export the kernel of one size: ta.build(ta.bind(outputs, "
                      f"{size.name}=...), inputs).export(path)")


class RowsCall:
    """What the calls of a generic kernel over ``size`` share: the count of rows its arrays give (those at
    the positions of ``rowed``, with their names), checked (:meth:`rows`), and by count of rows, what a
    call of that count needs (its ``make(n)``), kept for up to :data:`SIZES_KEPT` counts in ``by_size``
    (a training loop repeats its own), so that a repeated call reads one array's rows and builds nothing."""

    size: Expr
    rowed: list[tuple[int, str]]
    first: int  # (the input whose rows a call tries first)
    by_size: dict[int, Any]
    make: Callable[[int], Any]  # (each kind's: what a call of ``n`` rows needs)

    def rows(self, arrays: Sequence[Any]) -> int:
        """The count of rows the arrays give, checked against the size's constraints and among them."""
        seen: tuple[int, str] | None = None
        for k, name in self.rowed:
            shape = getattr(arrays[k], "shape", ())
            if shape:
                if seen is not None and seen[0] != shape[0]:
                    raise ValueError(f"ta.build: arrays disagree on size {self.size.name}: {seen[1]} gives "
                                     f"{seen[0]}, {name} gives {shape[0]} (axis 0)")
                seen = seen or (shape[0], name)
        if seen is None:
            raise KernelArgumentError(f"no array gives size {self.size.name}")
        return check_size(self.size, seen[0])

    def sized(self, arrays: Sequence[Any]) -> Any:
        """What a call on ``arrays`` needs (``make`` of their count of rows): at a count seen before, read
        from the first array of rows alone (the kernel checks every array's shape against it)."""
        try:
            return self.by_size[arrays[self.first].shape[0]]
        except (AttributeError, IndexError, KeyError, TypeError):
            n = self.rows(arrays)
        if len(self.by_size) >= SIZES_KEPT:
            self.by_size.clear()  # (atomic: concurrent calls of other sizes may read it)
        return self.by_size.setdefault(n, self.make(n))


class RowsKernel(RowsCall):
    """``kernel(*arrays)`` at any count ``n`` of rows of size ``size``: inputs sized by it
    (``sized_inputs``) have ``n`` leading rows, the others their static shape; each output has its
    :class:`~tensorad.lang.sizes.RowKind` (``kinds``): ``n`` rows, a static shape, or a sum over the rows
    (each block's sum added).  ``generic`` is true: its compiles serve every size.  ``parts``:
    ``(rows, kernel)``, largest first, each taking the count of rows and a first block's flag last; those of
    ``bounded`` run any count up to their rows, the others whole blocks only, and where some part is not
    bounded the last one's rows divide every admissible size.  ``why`` says why a part is not bounded
    (``""``: none).  ``counted``: its last input is the call's count of rows (an ``int64[1]``, a staged
    program's), which it passes itself, a call giving the others; a call returns the first ``shown``
    outputs (default all), the others (sums over the rows: static shapes) its workspace's.  Its state is
    a finished call's workspace (the driver's frame, the count, the parts' temporaries, each starting on a
    cache line, the sums' scratch, the outputs not shown), kept for the next call as a :class:`Kernel`
    keeps its own; pickled, it keeps its parts (each :class:`Kernel` pickled as it is)."""

    generic = True

    def __init__(self, size: Expr, parts: list[tuple[int, Kernel]], sized_inputs: Sequence[bool],
                 kinds: Sequence[RowKind], names: Sequence[str], bounded: Sequence[bool],
                 why: str = "", counted: bool = False, shown: int | None = None) -> None:
        self.size, self.names, self.parts, self.why = size, list(names), parts, why
        self.bounded, self.counted = list(bounded), counted
        self.made = (size, parts, list(sized_inputs), list(kinds), self.names, self.bounded, why, counted,
                     shown)  # (pickled)
        sig = parts[-1][1].signature
        self.inputs = [(name, shape[1:] if on else None, shape, d)
                       for on, (name, shape, d) in zip(sized_inputs, sig.inputs[:-1], strict=True)]
        self.outputs = [(shape[1:] if kind is RowKind.ROWS else None, shape, d, kind is RowKind.SUM)
                        for kind, (_, shape, d) in zip(kinds, sig.outputs, strict=True)]
        self.out_names = [name for name, _, _ in sig.outputs]  # (as a static kernel's errors name them)
        self.taken, self.shown = len(self.inputs) - counted, len(self.outputs) if shown is None else shown
        rests = [(rest, d) for _, rest, _, d in self.inputs] + [(None, None)] + \
            [(rest, d) for rest, _, d, _ in self.outputs]  # (the count: no rows)
        self.moves = np.array([0 if rest is None else d.itemsize * math.prod(rest) for rest, d in rests],
                              np.int64)
        self.sums = [(len(self.inputs) + 1 + k, shape, d)
                     for k, (_, shape, d, summed) in enumerate(self.outputs) if summed]
        self.line = host_target().line
        self.width = len(self.moves) + max(len(k.signature.temps) + 1 for _, k in parts)  # (and a record)
        self.kept: list = []  # a finished call's workspace, for the next
        self.plans: dict[int, int] = {}  # tail_part(n) by n, up to the largest block's rows and one
        self.by_size: dict[int, tuple] = {}  # (:meth:`make`'s, by count of rows)
        self.rowed = [(k, name) for k, (name, rest, _, _) in enumerate(self.inputs) if rest is not None]
        self.first = self.rowed[0][0] if self.rowed else 0  # (the input whose rows a call tries first)
        self.rowed_names = {name for _, name in self.rowed}
        self.row_names = self.rowed_names | {name for name, (rest, *_) in zip(self.out_names, self.outputs)
                                             if rest is not None}
        self.slots = Slots(range(len(self.moves)))  # (of the driver's arrays)

    def __reduce__(self):
        return RowsKernel, self.made

    def export(self, path: str) -> str:
        """Write each part as a library (:func:`~.export.export_kernel`): the first at ``path``
        (``name.so``), each other beside it as ``name.rows<rows>.so``, each ``.json`` holding the
        kernel's :meth:`description`, which its library's digest covers: ``ta.load(path)`` loads the
        generic kernel (:func:`~.load.load_kernel`).  Refused for a staged program's block (its count
        of rows its own, or outputs hidden)."""
        if self.counted or self.shown != len(self.outputs):
            refuse_export(self.size, path)
        path = Path(path)
        description = self.description(path.stem)
        for (_, part), (_, name, *_) in zip(self.parts, description["parts"]):
            export_kernel(part, path if name == path.stem else path.with_name(f"{name}.so"), description)
        return str(path)

    def description(self, stem: str) -> dict[str, Any]:
        """What makes the kernel again from its parts' libraries (``stem``: the first's name): its size,
        each part's rows, library name, whether it takes a short block and its work per row and once,
        which inputs have rows, each output's kind, the inputs' names, ``why``, and a digest of the parts'
        build keys (so that a part of another kernel of the same arrays is not taken for one of its own)."""
        info = self.size.arg
        parts = [[rows, stem if k == 0 else f"{stem}.rows{rows}", bounded, kernel.signature.row_work,
                  kernel.signature.once_work] for k, ((rows, kernel), bounded) in enumerate(zip(self.parts,
                                                                                                 self.bounded))]
        key = hashlib.sha256(" ".join(str(kernel.compiled.key) for _, kernel in self.parts).encode())
        return {"size": [info.name, info.min, info.max, info.multiple_of], "parts": parts,
                "key": key.hexdigest(), "sized": self.made[2], "kinds": [k.value for k in self.made[3]],
                "names": self.names, "why": self.why}

    @property
    def num_threads(self) -> int:
        """The threads of each part's parallel loops (settable)."""
        return self.parts[0][1].num_threads

    @num_threads.setter
    def num_threads(self, n: int) -> None:
        for _, k in self.parts:
            k.num_threads = n
        self.kept.clear()

    def tail_part(self, n: int) -> int:
        """The part that runs a call of ``n`` rows: its whole blocks, then the rows they leave as one short
        block.  The static program of ``n`` rows has the code of the largest block at most ``n`` (the
        unit's, which may be one row's code, at its own rows only): a convolution of few rows loops over
        them, of many runs a product.  Of the bounded parts of that block's work per row (the same
        loops), the one of fewest rows at least ``n`` (else of most rows) runs the call in fewest blocks,
        each reading the arrays without rows once more; none, past the last part, where that block's
        part is not bounded: whole blocks run every row."""
        key = min(n, self.parts[0][0] + 1)  # (every count past the largest block runs alike)
        if key not in self.plans:
            last = len(self.parts) - 1
            at = next((p for p, (rows, _) in enumerate(self.parts) if rows <= n and (p < last or rows == n)),
                      max(last - 1, 0))
            same = [p for p in range(last + 1) if self.bounded[p] and self._per_row(p) == self._per_row(at)]
            fits = [p for p in same if self.parts[p][0] >= n]
            self.plans[key] = fits[-1] if fits else same[0] if self.bounded[at] else len(self.parts)
        return self.plans[key]

    def _per_row(self, p: int) -> Fraction:
        """Part ``p``'s work per row of its block (:meth:`work_at`)."""
        rows, kernel = self.parts[p]
        return Fraction(kernel.signature.row_work, rows)

    def blocks(self, n: int) -> list[int]:
        """How many blocks of each part a call of ``n`` rows runs: whole ones, largest first, and the tail
        part's (:meth:`tail_part`) on all it is left, its short block counted."""
        p, counts = self.tail_part(n), []
        for k, (rows, _) in enumerate(self.parts):
            counts.append(-(-n // rows) if k == p else n // rows)
            n = 0 if k == p else n % rows
        return counts

    def work_at(self, n: int) -> int:
        """The work of a call of ``n`` rows: each part's work for each of its blocks, but for its work of a
        first block only (once), a short block's work over rows in proportion to its rows."""
        counts = self.blocks(check_size(self.size, n))
        work = sum(c * k.work - (c - 1) * k.signature.once_work for c, (_, k) in zip(counts, self.parts) if c)
        lacks = sum(c * rows for c, (rows, _) in zip(counts, self.parts)) - n  # (rows a short block runs not)
        block, kernel = self.parts[min(self.tail_part(n), len(self.parts) - 1)]  # (the short block's part)
        return work + -kernel.signature.row_work * lacks // block  # (a short block's: its rows' share)

    def _workspace(self) -> list:
        """A driver frame, what it points to (the part descriptions, the temporaries and their pointers,
        the sums' scratch), the count of rows it writes, its arrays' pointers' address, its count of rows."""
        desc = (ctypes.c_int64 * (6 * len(self.parts)))()
        records = []  # (checks, record) of each part whose gathers raise
        held: list = [desc, records]
        for k, (rows, kernel) in enumerate(self.parts):
            temps = [np.zeros(d.itemsize * math.prod(s) + self.line, np.uint8)
                     for s, d in kernel.signature.temps]
            addrs = np.array([data_address(t) for t in temps], np.uint64)
            addrs += -addrs % np.uint64(self.line)
            checks = kernel.compiled.checks
            record = None if checks is None else checks.new_record(kernel.signature.max_ndim)
            if record is not None:
                addrs = np.append(addrs, np.uint64(data_address(record)))
                records.append((checks, record))
            held += [temps, addrs, record]
            desc[6 * k:6 * k + 6] = [kernel.entry(shapes_checked=True), data_address(addrs), len(addrs), rows,
                                     kernel.num_threads, 0 if record is None else data_address(record)]
        scratch = [np.empty(shape, d) for _, shape, d in self.sums]
        sums = (ctypes.c_int64 * (4 * len(self.sums) or 1))()
        for k, ((slot, _, d), a) in enumerate(zip(self.sums, scratch)):
            sums[4 * k:4 * k + 4] = [slot, data_address(a), a.size, int(d == np.float64)]
        held += [scratch, sums]
        frame = (ctypes.c_int64 * (FRAME + len(self.moves)))()  # (the arrays' pointers after the frame)
        given = ctypes.addressof(frame) + 8 * FRAME
        frame[:FRAME] = [ctypes.addressof(desc), len(self.parts), 0, given, data_address(self.moves),
                         len(self.moves), self.width, ctypes.addressof(sums), len(self.sums), len(self.parts),
                         len(self.inputs), 0, _ROWS.get().main_address, 0]
        hidden = [np.empty(shape, d) for _, shape, d, _ in self.outputs[self.shown:]]
        return [frame, held, np.zeros(2, np.int64), given, 0, hidden]

    def _raise(self, checks: Any, record: np.ndarray, first: int) -> NoReturn:
        """Raise the ``IndexError`` of a gather's record, the block's rows made the call's (its first row
        ``first`` added to a row of an input it names), the record cleared for the next call."""
        site, values = checks.sites[int(record[0]) - 1], record.copy()
        record[:] = 0
        if site.kind == "gather" and int(site.index[3]) and site.index[2] in self.rowed_names:
            values[2] += first
        elif site.kind != "gather" and site.tensor in self.row_names:  # (a checked access of a row)
            values[1] += first
        checks.raise_for(values)

    def make(self, n: int) -> tuple:
        """What a call of ``n`` (admissible) rows needs: ``n``, the inputs' specs, the outputs' specs, the
        short block's part."""
        ins = [(name, shape if rest is None else (n, *rest), d) for name, rest, shape, d in self.inputs]
        outs = [(name, shape if rest is None else (n, *rest), d)
                for name, (rest, shape, d, _) in zip(self.out_names, self.outputs[:self.shown])]
        count = [np.array([n], np.int64)][:self.counted]
        return n, ins[:self.taken], outs, self.tail_part(n) if n else 0, count

    def __call__(self, *arrays: Any, out: Any = None, fresh: bool = False) -> Any:
        """The outputs of a call on ``arrays``, new or written into ``out=``; ``fresh``: ``out`` is a list
        of arrays the caller made for this call (of the outputs' shapes at the call's count of rows and
        dtypes, C-contiguous, sharing no memory), taken unchecked."""
        if len(arrays) != self.taken:
            raise KernelArgumentError(f"kernel takes {self.taken} input arrays "
                                      f"({', '.join(self.names[:self.taken])}), got {len(arrays)}")
        try:  # (:meth:`sized`, its usual case inline)
            n, specs, given, tail, count = self.by_size[arrays[self.first].shape[0]]
        except (AttributeError, IndexError, KeyError, TypeError):
            n, specs, given, tail, count = self.sized(arrays)
        check = Kernel.check_input
        try:
            ins = [check(a, spec) for a, spec in zip(arrays, specs)]
        except KernelArgumentError:
            self.rows(arrays)  # (arrays that disagree on the size say so first)
            raise
        outs = [np.empty(s, d) for _, s, d in given] if out is None else out if fresh else \
            given_outputs(out, given, ins, self.names)[1]
        if not n:  # (no block writes a sum over the rows)
            for a, (_, _, _, summed) in zip(outs, self.outputs):
                if summed:
                    a[...] = 0
        try:  # (a kept workspace: list.pop and append are atomic, so concurrent calls take their own)
            work = self.kept.pop()
        except IndexError:
            work = self._workspace()
        if n:
            if work[4] != n:
                work[0][2], work[0][9], work[4] = n, tail, n
            put_addresses(work[3], self.slots, [*ins, *count, work[2], *outs, *work[5]])  # (then the driver)
        if not self.kept:
            self.kept.append(work)
        for checks, record in work[1][1] if n else ():
            if record[0]:
                self._raise(checks, record, work[0][11])
        res = outs if out is None else out if isinstance(out, (tuple, list)) else [out]
        return res[0] if len(res) == 1 else tuple(res)
