"""A generic kernel: a program of independent rows (:func:`tensorad.lang.sizes.row_size`) compiled once,
at a block of ``b`` rows and at its tail unit of ``u`` rows, and run at any count of rows by a driver
that calls the block's code on consecutive blocks, then the unit's on the rest, each on pointers moved
by its first row.  The driver is compiled once per process."""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorad.ir.expr import Expr
from tensorad.lang.sizes import check_size

from ..jit.engine import compile_object, load_object
from .kernel import Kernel, KernelArgumentError

# rows(main, args, row_bytes, nargs, first, stop, step, nthreads): main(args + r * row_bytes, nthreads)
# for r in first, first + step, ... below stop; run(block..., unit..., nthreads) runs both parts
_DRIVER = """
define internal void @rows(ptr %main, ptr %args, ptr %bytes, i64 %nargs, i64 %first, i64 %stop, i64 %step,
                           i32 %nthreads) {
entry:
  %local = alloca ptr, i64 %nargs
  %any = icmp slt i64 %first, %stop
  br i1 %any, label %row, label %done
row:
  %r = phi i64 [%first, %entry], [%rn, %call]
  br label %arg
arg:
  %k = phi i64 [0, %row], [%kn, %arg]
  %pa = getelementptr ptr, ptr %args, i64 %k
  %p = load ptr, ptr %pa
  %pb = getelementptr i64, ptr %bytes, i64 %k
  %b = load i64, ptr %pb
  %off = mul i64 %b, %r
  %q = getelementptr i8, ptr %p, i64 %off
  %pl = getelementptr ptr, ptr %local, i64 %k
  store ptr %q, ptr %pl
  %kn = add i64 %k, 1
  %more = icmp slt i64 %kn, %nargs
  br i1 %more, label %arg, label %call
call:
  call void %main(ptr %local, i32 %nthreads)
  %rn = add i64 %r, %step
  %go = icmp slt i64 %rn, %stop
  br i1 %go, label %row, label %done
done:
  ret void
}

define void @tensorad_rows(ptr %bmain, ptr %bargs, ptr %bbytes, i64 %bn, i64 %bstop, i64 %bstep, i32 %bt,
                           ptr %umain, ptr %uargs, ptr %ubytes, i64 %un, i64 %ustop, i64 %ustep, i32 %ut) {
entry:
  call void @rows(ptr %bmain, ptr %bargs, ptr %bbytes, i64 %bn, i64 0, i64 %bstop, i64 %bstep, i32 %bt)
  call void @rows(ptr %umain, ptr %uargs, ptr %ubytes, i64 %un, i64 %bstop, i64 %ustop, i64 %ustep, i32 %ut)
  ret void
}
"""
_PART = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
         ctypes.c_int32)
_RUN = ctypes.CFUNCTYPE(None, *_PART, *_PART)


class _Process:
    """The driver, compiled and linked into the resident engine on first use."""

    def __init__(self) -> None:
        self.run: Any = None
        self.lock = threading.Lock()


_PROCESS = _Process()


def driver() -> Any:
    """The process's driver (``tensorad_rows``), compiled on first use."""
    if _PROCESS.run is None:
        with _PROCESS.lock:
            if _PROCESS.run is None:
                address = load_object(compile_object(_DRIVER, 2), ["tensorad_rows"])["tensorad_rows"]
                _PROCESS.run = _RUN(address)
    return _PROCESS.run


class _Part:
    """One compiled block of rows: its kernel, the bytes a row moves each argument by, its temporaries."""

    def __init__(self, rows: int, kernel: Kernel, sized: Sequence[bool]) -> None:
        self.rows, self.kernel = rows, kernel
        sig = kernel.signature
        specs = [(s, d) for _, s, d in (*sig.inputs, *sig.outputs)]
        moves = [d.itemsize * math.prod(s[1:]) if on else 0 for (s, d), on in zip(specs, sized, strict=True)]
        self.bytes = np.array(moves + [0] * len(sig.temps), np.int64)
        self.temps = [(d.itemsize * math.prod(s), d) for s, d in sig.temps]

    def arguments(self, arrays: list[np.ndarray], line: int) -> tuple[np.ndarray, list[np.ndarray]]:
        """The pointer array of a call on ``arrays`` (inputs, outputs) with fresh temporaries, each starting
        on a ``line``-byte boundary, and the temporaries' storage."""
        temps = [np.empty(n + line, np.uint8) for n, _ in self.temps]
        addrs = np.array([a.ctypes.data for a in arrays] + [t.ctypes.data for t in temps], np.uintp)
        first = len(arrays)
        addrs[first:] += -addrs[first:] % line
        return addrs, temps


class RowsKernel:
    """``kernel(*arrays)`` at any count ``n`` of rows of size ``size``: arrays sized by it have ``n``
    leading rows (``sized_inputs``), the others their static shape; outputs sized by it get ``n`` rows.
    ``generic`` is true: one compile serves every size.  ``parts``: ``(rows, kernel)`` of the block, then
    of the tail unit."""

    generic = True

    def __init__(self, size: Expr, parts: list[tuple[int, Kernel]], sized_inputs: Sequence[bool],
                 sized_outputs: Sequence[bool], names: Sequence[str]) -> None:
        self.size, self.names = size, list(names)
        self.sized_inputs, self.sized_outputs = list(sized_inputs), list(sized_outputs)
        sized = self.sized_inputs + self.sized_outputs
        self.parts = [_Part(rows, k, sized) for rows, k in parts]
        self.line = 64

    def rows(self, arrays: Sequence[Any]) -> int:
        """The count of rows the arrays give, checked against the size's constraints and among them."""
        seen: tuple[int, str] | None = None
        for a, on, name in zip(arrays, self.sized_inputs, self.names):
            shape = getattr(a, "shape", ())
            if on and shape:
                if seen is not None and seen[0] != shape[0]:
                    raise ValueError(f"ta.build: arrays disagree on size {self.size.name}: {seen[1]} gives "
                                     f"{seen[0]}, {name} gives {shape[0]} (axis 0)")
                seen = seen or (shape[0], name)
        if seen is None:
            raise KernelArgumentError(f"no array gives size {self.size.name}")
        return check_size(self.size, seen[0])

    def __call__(self, *arrays: Any) -> Any:
        block, unit = self.parts[0], self.parts[-1]
        sig = unit.kernel.signature
        if len(arrays) != len(sig.inputs):
            raise KernelArgumentError(f"kernel takes {len(sig.inputs)} input arrays, got {len(arrays)}")
        n = self.rows(arrays)
        ins = [Kernel.check_input(a, (name, (n, *shape[1:]) if on else shape, d))
               for a, on, (name, shape, d) in zip(arrays, self.sized_inputs, sig.inputs)]
        outs = [np.empty((n, *shape[1:]) if on else shape, d)
                for on, (_, shape, d) in zip(self.sized_outputs, sig.outputs)]
        (b_addrs, b_temps), (u_addrs, u_temps) = (p.arguments(ins + outs, self.line) for p in (block, unit))
        stop = n - n % block.rows
        driver()(block.kernel.entry(), b_addrs.ctypes.data, block.bytes.ctypes.data, len(b_addrs), stop,
                 block.rows, block.kernel.num_threads, unit.kernel.entry(), u_addrs.ctypes.data,
                 unit.bytes.ctypes.data, len(u_addrs), n, unit.rows, unit.kernel.num_threads)
        return outs[0] if len(outs) == 1 else tuple(outs)
