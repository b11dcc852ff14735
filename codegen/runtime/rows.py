"""A generic kernel: a program of independent rows (:func:`tensorad.lang.sizes.row_plan`) compiled once
per part, at a few block sizes whose least divides every admissible count of rows, and run at any count
by a driver that calls each part's code, largest first, on each next block of rows that fits, on the
arrays' pointers moved to the block's first row; its last rows may run as one block of a part, padded
(a sum over the rows takes a padded row in as zeros; a padded row's term is exactly zero unless the real
row it copies has an infinite or NaN term, which makes the true sum infinite or NaN and the padded one
NaN, ``inf * 0``: where the block leaves a NaN in a sum, the rows run again unpadded).  The driver is
compiled once per process."""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorad.ir.expr import Expr
from tensorad.ir.locks import process_lock
from tensorad.lang.sizes import RowKind, check_size

from ..jit.engine import compile_object, load_object
from ..target import host_target
from .export import ExportError
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


# tensorad_rows(given, threads) (called as a kernel's main is, by :func:`.kernel.put_addresses`), the frame
# {desc, parts, n, given, moves, m, width, sums, nsums, tailp} just before given, which holds the
# arrays' data pointers; for each part of desc (main, temps, ntemps, rows,
# threads), largest blocks first,
# main(given + r * moves ++ temps, threads) on each next block of rows [r, r + rows) that fits below n, and,
# for part tailp (-1: none), on the rows left below n too, the block's count of rows written first to the
# int64 its last temporary points to (:mod:`..passes.row_bound`),
# where each sum of sums (index into given, scratch, elements, 1 for double else float) is written to its
# array by the first block, to its scratch and then added into its array by each later one
_DRIVER = """
define void @tensorad_rows(ptr %table, i32 %threads.unused) {
entry:
  %frame = getelementptr i8, ptr %table, i64 -80
""" + _loads("frame", "ptr desc, i64 parts, i64 n, ptr given, ptr moves, i64 m, i64 width, "
                   "ptr sums, i64 nsums, i64 tailp") + """\
  %bounded = icmp sge i64 %tailp, 0
  %local = alloca ptr, i64 %width
  %tail = getelementptr ptr, ptr %local, i64 %m
  br label %part
part:
  %p = phi i64 [0, %entry], [%pn, %next]
  %r0 = phi i64 [0, %entry], [%r, %next]
  %d = getelementptr [5 x i64], ptr %desc, i64 %p
""" + _loads("d", "ptr main, ptr temps, i64 ntemps, i64 rows, i64 t64") + """\
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
  br i1 %bounded, label %setcount, label %arg
setcount:
  %lastt = add i64 %ntemps, -1
  %pcell = getelementptr ptr, ptr %temps, i64 %lastt
  %cell = load ptr, ptr %pcell
  store i64 %cnt, ptr %cell
  br label %arg
arg:
  %k = phi i64 [0, %rowcount], [0, %setcount], [%kn, %arg]
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
  br label %acc_test
acc_test:
  %e = phi i64 [0, %call], [%en, %acc_next]
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
_RUN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)
# A block's cost beyond its work (``Kernel.work``, in the same units): each byte of the arrays every block
# reads again (its inputs without rows) or adds into (its sums over the rows); a padded block's copies,
# made in Python.  A block of a 256 -> 1024 -> 256 MLP, whose weights it reads again, costs 20 of its rows.
WORK_PER_BYTE = 4
PADDED_WORK = 1 << 21


class _Process:
    """The driver, compiled and linked into the resident engine on first use: its address and a callable
    (as :func:`.kernel.put_addresses` calls a kernel's main)."""

    def __init__(self) -> None:
        self.run: Any = None
        self.main_address = 0
        self.lock = process_lock()

    def main(self, table: int, threads: int) -> None:
        self.run(table, threads)


_PROCESS = _Process()


def driver() -> _Process:
    """The process's driver (``tensorad_rows``), compiled on first use."""
    if _PROCESS.run is None:
        with _PROCESS.lock:
            if _PROCESS.run is None:
                address = load_object(compile_object(_DRIVER, 2), ["tensorad_rows"])["tensorad_rows"]
                _PROCESS.main_address = address
                _PROCESS.run = _RUN(address)
    return _PROCESS


class RowsKernel:
    """``kernel(*arrays)`` at any count ``n`` of rows of size ``size``: inputs sized by it
    (``sized_inputs``) have ``n`` leading rows, the others their static shape; each output has its
    :class:`~tensorad.lang.sizes.RowKind` (``kinds``): ``n`` rows, a static shape, or a sum over the rows
    (each block's sum added).  ``generic`` is true: its compiles serve every size.  ``parts``:
    ``(rows, kernel)``, largest first, the last one's rows dividing every admissible size.  Its state is a
    finished call's workspace (the driver's frame, the parts' temporaries, each starting on a cache line,
    the sums' scratch), kept for the next call as a :class:`Kernel` keeps its own; pickled, it keeps its
    parts (each :class:`Kernel` pickled as it is)."""

    generic = True

    def __init__(self, size: Expr, parts: list[tuple[int, Kernel]], sized_inputs: Sequence[bool],
                 kinds: Sequence[RowKind], names: Sequence[str], zeroed: int | None = None,
                 why: str = "") -> None:
        self.size, self.names, self.parts, self.zeroed, self.why = size, list(names), parts, zeroed, why
        self.made = (size, parts, list(sized_inputs), list(kinds), self.names, zeroed, why)  # (pickled)
        sig = parts[-1][1].signature
        self.inputs = [(name, shape[1:] if on else None, shape, d)
                       for on, (name, shape, d) in zip(sized_inputs, sig.inputs, strict=True)]
        self.outputs = [(shape[1:] if kind is RowKind.ROWS else None, shape, d, kind is RowKind.SUM)
                        for kind, (_, shape, d) in zip(kinds, sig.outputs, strict=True)]
        self.out_names = [name for name, _, _ in sig.outputs]  # (as a static kernel's errors name them)
        rests = [(rest, d) for _, rest, _, d in self.inputs] + [(rest, d) for rest, _, d, _ in self.outputs]
        self.moves = np.array([0 if rest is None else d.itemsize * math.prod(rest) for rest, d in rests],
                              np.int64)
        self.sums = [(len(self.inputs) + k, shape, d) for k, (_, shape, d, summed) in enumerate(self.outputs)
                     if summed]
        self.line = host_target().line
        self.width = len(self.moves) + max(len(k.signature.temps) for _, k in parts)
        self.kept: list = []  # a finished call's workspace, for the next
        self.padding = not self.sums or zeroed is not None  # (else a padded row would add to a sum)
        self.bounded = not why  # (each part runs any count of rows up to its own: no padded block)
        whole = [(shape, d) for _, rest, shape, d in self.inputs if rest is None] + \
            [(shape, d) for _, shape, d in self.sums]
        self.reread = WORK_PER_BYTE * sum(math.prod(shape) * d.itemsize for shape, d in whole)
        self.check = WORK_PER_BYTE * sum(math.prod(shape) * d.itemsize for _, shape, d in self.sums)
        self.plans: dict[int, tuple[int, int | None]] = {}  # plan(n) by n's rows past the largest blocks
        self.checked = -1  # the last count of rows checked against the size's constraints
        self.last: tuple = (-1,)  # :meth:`sized`'s, for the last count of rows
        self.rowed = [(k, name) for k, (name, rest, _, _) in enumerate(self.inputs) if rest is not None]
        self.slots = Slots(range(len(self.moves)))  # (of the driver's arrays)

    def __reduce__(self):
        return RowsKernel, self.made

    def export(self, path: str) -> str:
        """Refused: a library is the code of one size (:class:`ExportError` says how to make it)."""
        raise ExportError(f"export: a generic kernel over {self.size.name} has no library of its own to "
                          f"export ({path}); export the kernel of one size: ta.build(ta.bind(outputs, "
                          f"{self.size.name}=...), inputs).export(path)")

    @property
    def num_threads(self) -> int:
        """The threads of each part's parallel loops (settable)."""
        return self.parts[0][1].num_threads

    @num_threads.setter
    def num_threads(self, n: int) -> None:
        for _, k in self.parts:
            k.num_threads = n
        self.kept.clear()

    def plan(self, n: int) -> tuple[int, int | None]:
        """How a call of ``n`` rows runs: the driver on the first ``covered`` rows (each next block of the
        largest part that fits), then, where ``padded`` is a part, the rows left as one block of that part,
        padded (:meth:`_padded`; only where no sum over the rows takes the padding's rows in).  Of the
        ways that stop the driver's parts at some part and pad what is left, the one of least cost
        (:meth:`_cost`)."""
        whole, tail = divmod(n, self.parts[0][0])
        if self.bounded:
            return n, None
        if tail not in self.plans:  # (the blocks of the largest part before the tail: every plan's)
            options = [(self._cost(tail, None), tail, None)]
            for last in range(1, len(self.parts) if self.padding else 0):
                covered = tail - self._left(tail, last)
                fits = [k for k, (rows, _) in enumerate(self.parts) if rows >= tail - covered]
                if covered < tail:
                    options.append((self._cost(covered, fits[-1]), covered, fits[-1]))
            self.plans[tail] = min(options, key=lambda o: o[0])[1:]
        covered, padded = self.plans[tail]
        return whole * self.parts[0][0] + covered, padded

    def tail_part(self, n: int) -> int:
        """The part that runs the rows the others leave of ``n`` (as one short block, or more), in a
        kernel whose parts take any count of rows: of the ways that stop at some part, the one of least
        cost, a short block's work counted in proportion to its rows, and of those the one of fewest rows
        (its code was chosen for the count nearest the short block's: a product of few rows may be a
        plain loop there); none, past the last part, where no rows are left."""
        tail = n % self.parts[0][0]
        if not tail:
            return len(self.parts)
        if tail not in self.plans:
            options = []
            for p, (rows, kernel) in enumerate(self.parts):
                left = self._left(tail, p)
                full, short = divmod(left, rows)
                cost = self._cost(tail - left, None) + full * (kernel.work + self.reread) + \
                    (short and kernel.work * short // rows + self.reread)
                options.append((cost, p))
            self.plans[tail] = (0, min(options, key=lambda o: (o[0], -o[1]))[1])
        return self.plans[tail][1]

    def _left(self, n: int, parts: int) -> int:
        """The rows the driver leaves of ``n`` with its first ``parts`` parts."""
        for rows, _ in self.parts[:parts]:
            n %= rows
        return n

    def _cost(self, covered: int, padded: int | None) -> int:
        """The work of the driver's blocks on ``covered`` rows, then a padded block of part ``padded``, each
        block's reread bytes counted (:data:`WORK_PER_BYTE`), the padded block's copies and the reading
        of its sums (their check for a NaN) too."""
        blocks = [(c, k.work + self.reread) for c, (_, k) in zip(self._counts(covered), self.parts)]
        pad = 0 if padded is None else self.parts[padded][1].work + self.reread + self.check + PADDED_WORK
        return sum(c * w for c, w in blocks) + pad

    def _counts(self, n: int) -> list[int]:
        """How many blocks of each part the driver runs on ``n`` rows."""
        counts = []
        for rows, _ in self.parts:
            counts.append(n // rows)
            n %= rows
        return counts

    def blocks(self, n: int) -> list[int]:
        """How many blocks of each part a call of ``n`` rows runs, its padded block counted."""
        covered, padded = self.plan(n)
        if self.bounded and (p := self.tail_part(n)) < len(self.parts):
            left = self._left(n, p)
            counts = self._counts(n - left)
            counts[p] += -(-left // self.parts[p][0])
            return counts
        counts = self._counts(covered)
        if padded is not None:
            counts[padded] += 1
        return counts

    def work_at(self, n: int) -> int:
        """The work of a call of ``n`` rows: each part's work for each of its blocks."""
        return sum(c * k.work for c, (_, k) in zip(self.blocks(check_size(self.size, n)), self.parts))

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
        if seen[0] != self.checked:
            self.checked = check_size(self.size, seen[0])
        return seen[0]

    def _workspace(self) -> tuple[Any, Any, list, dict]:
        """New array pointers, a driver frame, what the frame points to (the part descriptions, the
        temporaries and their pointers), and a table for the padded blocks' arrays (:meth:`_padded`)."""
        desc = (ctypes.c_int64 * (5 * len(self.parts)))()
        held: list = [desc]
        for k, (rows, kernel) in enumerate(self.parts):
            temps = [np.zeros(d.itemsize * math.prod(s) + self.line, np.uint8)  # (a count of rows 0)
                     for s, d in kernel.signature.temps]
            addrs = np.array([data_address(t) for t in temps], np.uint64)
            addrs += -addrs % np.uint64(self.line)
            held += [temps, addrs]
            desc[5 * k:5 * k + 5] = [kernel.entry(), data_address(addrs), len(temps), rows,
                                     kernel.num_threads]
        scratch = [np.empty(shape, d) for _, shape, d in self.sums]
        sums = (ctypes.c_int64 * (4 * len(self.sums) or 1))()
        for k, ((slot, _, d), a) in enumerate(zip(self.sums, scratch)):
            sums[4 * k:4 * k + 4] = [slot, data_address(a), a.size, int(d == np.float64)]
        held += [scratch, sums]
        frame = (ctypes.c_int64 * (10 + len(self.moves)))()  # (the arrays' pointers after the frame)
        frame[:10] = [ctypes.addressof(desc), len(self.parts), 0, ctypes.addressof(frame) + 80,
                      data_address(self.moves), len(self.moves), self.width, ctypes.addressof(sums),
                      len(self.sums), -1]
        return frame, frame, held, {}

    def _given(self, out: Any, n: int, ins: list[np.ndarray]) -> list[np.ndarray]:
        """The arrays of ``out=`` (one, or a tuple of one per output), checked as a kernel checks them."""
        specs = [(name, shape if rest is None else (n, *rest), d)
                 for name, (rest, shape, d, _) in zip(self.out_names, self.outputs)]
        return given_outputs(out, specs, ins, self.names)[1]

    def _padded(self, pads: dict, k: int, first: int, n: int, ins: list[np.ndarray],
                outs: list[np.ndarray], mine: bool) -> None:
        """Rows ``[first, n)`` as one block of part ``k``: its inputs' rows padded with copies of row
        ``n - 1`` (the ``zeroed`` input's with zeros), its outputs' rows past ``n`` dropped, its sums
        added; ``pads`` keeps each part's padded arrays for the next call.  Where ``outs`` are ``mine``
        (not the caller's), an output without rows the block writes whole is replaced in ``outs``."""
        rows, kernel = self.parts[k]
        if k not in pads:
            pads[k] = ([None if rest is None else np.empty((rows, *rest), d)
                        for _, rest, _, d in self.inputs],
                       [np.empty((rows, *rest), d) if rest is not None else np.empty(shape, d) if summed
                        else None for rest, shape, d, summed in self.outputs])
        pad_ins, pad_outs = pads[k]
        for j, (a, p) in enumerate(zip(ins, pad_ins)):
            if p is not None:
                p[:n - first] = a[first:n]
                p[n - first:] = 0 if j == self.zeroed else a[n - 1]
        block = [a if p is None else p for a, p in zip(ins, pad_ins)]
        if mine:  # (the kernel's own outputs: out= costs its overlap check)
            made = kernel(*block)
            made = list(made) if len(outs) > 1 else [made]
        else:  # (outputs without rows written in place, but for a later block's sums)
            made = [p if p is not None and (rest is not None or first) else a
                    for a, p, (rest, _, _, _) in zip(outs, pad_outs, self.outputs)]
            kernel(*block, out=tuple(made))
        for j, (a, b, (rest, _, _, summed)) in enumerate(zip(outs, made, self.outputs)):
            if rest is not None:
                a[first:] = b[:n - first]
            elif summed and first:
                a += b
            else:
                outs[j] = b

    def sized(self, n: int) -> tuple:
        """What a call of ``n`` rows needs of its size: the inputs' specs, the outputs' shapes (``None``
        for an output without rows that a padded block alone makes) and :meth:`plan`'s, kept for the last
        ``n`` (a training loop or a server repeats its sizes)."""
        last = self.last  # (read once: a concurrent call of another size may replace it)
        if last[0] != n:
            covered, padded = self.plan(n)
            alone = padded is not None and not covered
            ins = [(name, shape if rest is None else (n, *rest), d) for name, rest, shape, d in self.inputs]
            outs = [(shape, d) if rest is None and not alone else None if rest is None else ((n, *rest), d)
                    for rest, shape, d, _ in self.outputs]
            last = self.last = (n, ins, outs, covered, padded)
        return last

    def __call__(self, *arrays: Any, out: Any = None) -> Any:
        if len(arrays) != len(self.inputs):
            raise KernelArgumentError(f"kernel takes {len(self.inputs)} input arrays "
                                      f"({', '.join(self.names)}), got {len(arrays)}")
        n = self.rows(arrays)
        _, specs, shapes, covered, padded = self.sized(n)
        check = Kernel.check_input
        ins = [check(a, spec) for a, spec in zip(arrays, specs)]
        outs = [s and np.empty(*s) for s in shapes] if out is None else self._given(out, n, ins)
        if not n:  # (no block writes a sum over the rows)
            for a, (_, _, _, summed) in zip(outs, self.outputs):
                if summed:
                    a[...] = 0
        try:  # (a kept workspace: list.pop and append are atomic, so concurrent calls take their own)
            work = self.kept.pop()
        except IndexError:
            work = self._workspace()
        _, frame, _, pads = work
        if covered:
            self._drive(frame, ins + outs, covered)
        if padded is not None:
            given_outs = list(outs)
            self._padded(pads, padded, covered, n, ins, outs, out is None)
            if any(np.isnan(np.maximum.reduce(outs[j - len(ins)], axis=None)) for j, _, _ in self.sums):
                # (one read, no temporary: a maximum is NaN where any element is)
                outs[:] = [np.empty(shape, d) if a is None else a
                           for a, (_, shape, d, _) in zip(given_outs, self.outputs)]
                self._drive(frame, ins + outs, n)
        if not self.kept:
            self.kept.append(work)
        res = outs if out is None else out if isinstance(out, (tuple, list)) else [out]
        return res[0] if len(res) == 1 else tuple(res)

    def _drive(self, frame: Any, arrays: list[np.ndarray], n: int) -> None:
        """The driver on the first ``n`` rows of ``arrays`` (the inputs, then the outputs)."""
        frame[2] = n
        frame[9] = self.tail_part(n) if self.bounded else -1
        put_addresses(frame[3], self.slots, arrays, driver())  # (then the driver, one call)
