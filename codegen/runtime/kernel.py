"""``Kernel``: a compiled loop program called on NumPy arrays (API.md section 4), or on any object with
``__dlpack__`` viewed without a copy (:func:`as_array`), outputs included."""

from __future__ import annotations

import ctypes
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensorad.ir.dtype import numpy_dtype

from ..jit.engine import Resident
from ..options import MAX_THREADS, integer
from ..program import Buffer
from ..target import host_target
from . import pickling
from .compiled import Compiled
from .export import export_kernel
from .threads import ensure_workers


class KernelArgumentError(TypeError, ValueError):
    """A wrong argument to a kernel (count, type, shape, dtype or layout), both a ``TypeError`` and a
    ``ValueError``; the message names the tensor and what was expected."""


def _object_offsets() -> tuple[int, int] | None:
    """Where a NumPy array object keeps its data pointer (``PyArrayObject.data``) and a list its items
    (``PyListObject.ob_item``), verified on a few of each; ``None`` (the portable path) if either is not
    where we expect."""
    word = ctypes.sizeof(ctypes.c_void_p)
    arrays = [np.zeros(3), np.zeros((2, 5), np.float32)[1:], np.empty(0, np.int32)]
    if any(ctypes.c_void_p.from_address(id(a) + 2 * word).value != a.ctypes.data for a in arrays):
        return None  # (after PyObject_HEAD: refcount, type)
    for items in (arrays, arrays[1:], [arrays[0]] * 9):
        at = ctypes.c_void_p.from_address(id(items) + 3 * word).value  # (after PyObject_VAR_HEAD)
        if at is None or list((ctypes.c_void_p * len(items)).from_address(at)) != list(map(id, items)):
            return None
    return 2 * word, 3 * word


OFFSETS = _object_offsets()
ARRAY_DATA_OFFSET = None if OFFSETS is None else OFFSETS[0]
# ``tensorad_call(table, list, slots)``: for each of the ``slots[0]`` entries ``(position, item, offset)``
# after it, the data pointer of the list's item ``item`` (a NumPy array: its items at ``ITEMS_AT`` in the
# list object, its data at ``DATA_AT`` in the array object) plus ``offset`` bytes at that position of an
# address table; then ``main(table, threads)``, the two words before the table.  A call's Python work does
# not grow with its arrays, nor with the arrays at offsets in one block, and it takes three pointers (each
# argument of a ctypes call costs about a tenth of a microsecond).
ITEMS_AT, DATA_AT = (OFFSETS or (0, 0))[::-1]
_CALL_IR = f"""
define void @tensorad_call(ptr %table, ptr %list, ptr %slots) {{
entry:
  %n = load i64, ptr %slots
  %first = getelementptr i64, ptr %slots, i64 1
  %pi = getelementptr i8, ptr %list, i64 {ITEMS_AT}
  %items = load ptr, ptr %pi
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %done
loop:
  %j = phi i64 [0, %entry], [%jn, %loop]
  %jn = add i64 %j, 1
  %pe = getelementptr [3 x i64], ptr %first, i64 %j
  %s = load i64, ptr %pe
  %pk = getelementptr i64, ptr %pe, i64 1
  %item = load i64, ptr %pk
  %pf = getelementptr i64, ptr %pe, i64 2
  %off = load i64, ptr %pf
  %po = getelementptr ptr, ptr %items, i64 %item
  %o = load ptr, ptr %po
  %pd = getelementptr i8, ptr %o, i64 {DATA_AT}
  %d = load ptr, ptr %pd
  %da = getelementptr i8, ptr %d, i64 %off
  %pt = getelementptr ptr, ptr %table, i64 %s
  store ptr %da, ptr %pt
  %more = icmp slt i64 %jn, %n
  br i1 %more, label %loop, label %done
done:
  %pm = getelementptr ptr, ptr %table, i64 -2
  %main = load ptr, ptr %pm
  %pt64 = getelementptr i64, ptr %table, i64 -1
  %t64 = load i64, ptr %pt64
  %threads = trunc i64 %t64 to i32
  call void %main(ptr %table, i32 %threads)
  ret void
}}
"""
_CALL = Resident(_CALL_IR, "tensorad_call", ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p,
                                                             ctypes.c_void_p), 0, light=True)


def put_addresses(table: int, slots: Slots, arrays: list[np.ndarray]) -> None:
    """For each entry ``(position, item, offset)`` of ``slots``, the data address of ``arrays[item]`` (a
    list the caller keeps alive and no other thread changes) plus ``offset`` bytes at that position of the
    address table at ``table``; then the code whose entry and threads are the two words before the table."""
    if OFFSETS is None or type(arrays) is not list:
        at = (ctypes.c_void_p * (int(slots.entries[:, 0].max(initial=-1)) + 1)).from_address(table)
        for k, item, offset in slots.entries.tolist():
            at[k] = data_address(arrays[item]) + offset
        slots, arrays = NO_SLOTS, []  # (every address in place: the code alone to call)
    (_CALL.main or _CALL.get().main)(table, id(arrays), slots.address)


class Slots:
    """Entries of an address table (:meth:`Kernel.run`): at ``positions[j]``, the data address of the call's
    array ``items[j]`` (default ``j``) plus ``offsets[j]`` bytes (default 0) -- an array at an offset in
    a block that is another array of the call.  Kept as int64 triples after their count, at ``address``."""

    __slots__ = ("entries", "address")

    def __init__(self, positions: Sequence[int], items: Sequence[int] | None = None,
                 offsets: Sequence[int] | None = None) -> None:
        n = len(positions)
        triples = np.column_stack([positions, range(n) if items is None else items, offsets or [0] * n])
        counted = np.array([n, *triples.ravel()], np.int64)  # (its view ``entries`` keeps it)
        self.entries, self.address = counted[1:].reshape(n, 3), data_address(counted)


def data_address(a: np.ndarray) -> int:
    """The address of ``a``'s first element, read from the array object (faster than ``a.ctypes.data``)."""
    if ARRAY_DATA_OFFSET is None:
        return a.ctypes.data
    return ctypes.c_void_p.from_address(id(a) + ARRAY_DATA_OFFSET).value or 0


NO_SLOTS = Slots(())


def empty_aligned(shape: tuple[int, ...], dtype: Any, align: int) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on an ``align``-byte boundary, so that
    threads sharing a parallel loop over its columns or strips (:func:`.loops.schedule.strip_length`) own
    whole cache lines (a call on 1 thread, or of :data:`PLAIN_OUTPUT_BYTES`: few lines, takes np.empty)."""
    dt = np.dtype(dtype)
    raw = np.empty(dt.itemsize * math.prod(shape) + align, np.uint8)
    return np.ndarray(shape, dt, raw, -data_address(raw) % align)


# outputs of at most this many bytes share one allocation a call; of PLAIN_OUTPUT_BYTES in all, np.empty
SHARED_OUTPUT_BYTES, PLAIN_OUTPUT_BYTES = 1 << 16, 1 << 12


def output_offsets(specs: Sequence[tuple[tuple[int, ...], np.dtype]], align: int) -> tuple[list, int]:
    """Where each (shape, dtype) of ``specs`` starts in the block the small ones share (``None``:
    an allocation of its own), and the block's size: each on an ``align``-byte boundary."""
    offsets, total = [], 0
    for shape, dtype in specs:
        size = dtype.itemsize * math.prod(shape)
        offsets.append(total if size <= SHARED_OUTPUT_BYTES else None)
        total += -(-size // align) * align if size <= SHARED_OUTPUT_BYTES else 0
    return offsets, total


def output_plan(specs: Sequence[tuple[tuple[int, ...], np.dtype]], align: int) -> tuple[list, int] | None:
    """How a call on several threads allocates outputs of ``specs`` (:func:`new_outputs`): ``None``
    for outputs of :data:`PLAIN_OUTPUT_BYTES` in all, else their :func:`output_offsets`."""
    plain = sum(d.itemsize * math.prod(s) for s, d in specs) <= PLAIN_OUTPUT_BYTES
    return None if plain else output_offsets(specs, align)


def new_outputs(specs: Sequence[tuple[tuple[int, ...], np.dtype]], plan: tuple[list, int] | None,
                threads: int, align: int) -> list[np.ndarray]:
    """Uninitialized C-contiguous arrays of ``specs``: ``np.empty``'s on one thread or where ``plan``
    (:func:`output_plan`) is ``None``, else each starting on an ``align``-byte boundary, laid out as
    ``plan`` says."""
    if threads == 1 or plan is None:
        return [np.empty(s, d) for s, d in specs]
    offsets, total = plan
    block = np.empty(total + align, np.uint8)
    base = -data_address(block) % align
    return [empty_aligned(s, d, align) if off is None else np.ndarray(s, d, block, base + off)
            for (s, d), off in zip(specs, offsets)]


def overlapping_output(ins: list[np.ndarray], outs: list[np.ndarray]) -> tuple[int, int] | None:
    """A pair ``(k, j)`` where output ``k`` shares memory with argument ``j`` of ``ins + outs``
    (C-contiguous arrays, so each is one byte range), or ``None``.  The ranges are sorted once and
    swept: a range starting before the farthest end seen so far overlaps the range reaching it."""
    n = len(ins)
    spans = sorted((data_address(a), a.nbytes, j) for j, a in enumerate(ins + outs) if a.size)
    reach, reach_out, who, who_out = 0, 0, -1, -1  # the farthest end of any range so far, of an output's
    for start, size, j in spans:
        if j >= n and start < reach:
            return j - n, who
        if j < n and start < reach_out:
            return who_out - n, j
        if start + size > reach:
            reach, who = start + size, j
        if j >= n and start + size > reach_out:
            reach_out, who_out = start + size, j
    return None


def as_array(a: Any, role: str) -> np.ndarray:
    """``a`` as a NumPy array sharing its memory (``role`` names it in errors): NumPy arrays and scalars
    pass through, others through DLPack, or a :class:`KernelArgumentError` saying why not on the CPU."""
    if isinstance(a, np.ndarray):
        return a
    if isinstance(a, np.generic):
        return np.asarray(a)
    if not hasattr(a, "__dlpack__"):
        raise KernelArgumentError(f"{role}: expected a numpy array or an object with __dlpack__ "
                                  f"(torch, jax), got {type(a).__name__}")
    try:
        return np.from_dlpack(a)
    except (BufferError, RuntimeError, TypeError, ValueError) as e:
        view = _bfloat16_view(a)  # NumPy's DLPack import has no bfloat16
        if view is not None:
            return view
        raise KernelArgumentError(f"{role}: cannot view this {type(a).__name__} as a CPU array "
                                  f"through DLPack ({e}); kernels run on the CPU: pass a CPU, "
                                  f"detached tensor") from e


def _bfloat16_view(a: Any) -> np.ndarray | None:
    """A bfloat16 tensor of a framework as an ``ml_dtypes.bfloat16`` array without a copy (a
    torch tensor is exported as int16 bits and viewed back), or ``None``."""
    if not str(getattr(a, "dtype", "")).endswith("bfloat16"):
        return None
    torch = sys.modules.get("torch")  # loaded already if ``a`` is a torch tensor
    if torch is not None and isinstance(a, torch.Tensor):
        try:
            return np.from_dlpack(a.view(torch.int16)).view(numpy_dtype("bfloat16"))
        except (BufferError, RuntimeError, TypeError, ValueError):
            return None
    arr = np.asarray(a)  # JAX arrays convert to ml_dtypes.bfloat16 themselves
    return arr if arr.dtype == numpy_dtype("bfloat16") else None


class Workspace:
    """The temporaries of one call at a time, and the address table :meth:`Kernel.run` fills (made when
    the threads change): the code's entry and threads, then (at ``address``) room for the inputs and
    outputs, the temporaries' addresses moved up to a cache line, room for a checked kernel's record."""

    __slots__ = ("temps", "table", "address", "threads")

    def __init__(self, temps: list[np.ndarray]) -> None:
        self.temps = temps
        self.threads = 0

    def make_table(self, n_args: int, line: int, record: bool, main: int, threads: int) -> None:
        starts = np.array([data_address(t) for t in self.temps], np.uintp)
        self.table = np.empty(2 + n_args + len(self.temps) + record, np.uintp)
        self.table[:2] = main, threads
        self.table[2 + n_args:2 + n_args + len(self.temps)] = starts + (line - starts % line) % line
        self.threads = threads
        self.address = data_address(self.table) + 16


def _spec(b: Buffer) -> tuple[str, tuple[int, ...], np.dtype]:
    return b.name, tuple(b.shape), numpy_dtype(b.dtype)  # bfloat16: ml_dtypes.bfloat16


@dataclass(frozen=True)
class Signature:
    """What a call of a kernel needs besides its code: inputs and outputs (name, shape, dtype), temporaries
    (shape, dtype) in argument order, the work, and of that, a generic kernel's block's work over rows (a
    call of fewer rows runs it in proportion) and its work in a part's first block only (:mod:`.rows`)."""

    inputs: tuple
    outputs: tuple
    temps: tuple
    work: int
    row_work: int = 0
    once_work: int = 0

    @classmethod
    def of(cls, stored: dict, in_names: list[str], out_names: list[str]) -> Signature:
        """From an entry's ``signature`` (shapes and dtype strings) and the call's names."""
        def specs(names, items):
            return tuple((n, tuple(s), numpy_dtype(d)) for n, (s, d) in zip(names, items, strict=True))

        return cls(specs(in_names, stored["inputs"]), specs(out_names, stored["outputs"]),
                   tuple((tuple(s), numpy_dtype(d)) for s, d in stored["temps"]), stored["work"],
                   stored["row_work"], stored["once_work"])

    @property
    def max_ndim(self) -> int:
        """The most dimensions of any argument or temporary."""
        return max((len(s[-2]) for s in [*self.inputs, *self.outputs, *self.temps]), default=0)

    @classmethod
    def of_program(cls, lowered) -> Signature:
        prog = lowered.program
        return cls(tuple(_spec(b) for b in prog.inputs), tuple(_spec(b) for b in prog.outputs),
                   tuple(_spec(b)[1:] for b in prog.temps), lowered.work, lowered.row_work, lowered.once_work)


class Kernel:
    """A compiled kernel: ``kernel(*arrays, out=None)``.

    Arrays come in the order of the ``inputs`` given to ``build`` (inputs the outputs do not use are
    ignored), NumPy arrays or ``__dlpack__`` objects (viewed without a copy) of exactly the tensor's shape and
    dtype (no silent casts); non-contiguous inputs are copied first.  ``out=`` (an array, or a tuple of one
    per output) receives the results in place: C-contiguous, writeable, overlapping no other argument.
    Returns one array for one output, a tuple for several (the ``out=`` objects when given).

    The call releases the GIL: several threads may call one kernel at once.  Its only state is its
    *workspace*, a finished call's temporaries kept for the next (a concurrent call makes its own;
    ``keep_workspace = False`` frees them after each call, ``release_workspace()`` now).
    ``num_threads`` (settable): the threads of each parallel loop."""

    def __init__(self, lowered, compiled: Compiled, num_threads: int, refuse: str | None = None,
                 signature: Signature | None = None, origin: str | None = None) -> None:
        """``lowered``: the loop program or a function returning it (lowered on demand); ``signature``:
        the arguments (default: ``lowered``'s); ``origin``: how ``ta.build`` obtained the code."""
        # how ``ta.build`` got the code: ``"compiled"``, ``"disk"``, ``"memory"``; ``None``: loaded
        self.origin = origin
        #: the candidate strategies ``tune=True`` measured for this build (0: none, or found
        #: in the disk cache)
        self.measured = 0
        self._lowered = lowered
        self._refuse = refuse  # why this kernel cannot run here (compiled for another CPU)
        self._compiled = compiled
        self.num_threads = num_threads
        sig = self.signature = signature or Signature.of_program(lowered)
        self._inputs, self._outputs, self._temps = list(sig.inputs), list(sig.outputs), list(sig.temps)
        self._work = sig.work
        self._max_ndim = sig.max_ndim
        # a temporary is a byte array one cache line longer than its buffer, which starts on a line in it
        self._line = getattr(compiled.target, "line", None) or host_target().line
        self._temp_bytes = [d.itemsize * math.prod(s) + self._line for s, d in self._temps]
        self._out_specs = [(s, d) for _, s, d in self._outputs]
        self._out_plan = output_plan(self._out_specs, self._line)
        # a plain call's address table: every input and output an array of the call (:meth:`run`)
        self._n_args = len(self._inputs) + len(self._outputs)
        self._all_slots = Slots(range(self._n_args))
        self.keep_workspace = True
        self._workspace: list[Workspace] = []  # temporaries of finished calls, for the next

    def release_workspace(self) -> None:
        """Free the temporaries kept from earlier calls (the next call allocates them again)."""
        self._workspace.clear()

    @property
    def lowered(self):
        """The loop program this kernel runs (:class:`.lower.LoweredFunc`)."""
        if callable(self._lowered):
            self._lowered = self._lowered()
        return self._lowered

    @property
    def num_threads(self) -> int:
        return self._num_threads

    @num_threads.setter
    def num_threads(self, n: int) -> None:
        self._num_threads = integer("num_threads", n, 1, MAX_THREADS, what="a positive int",
                                    note=f" (at most {MAX_THREADS} threads)")
        if self._compiled.uses_gomp:
            ensure_workers(self._num_threads)

    @property
    def compiled(self) -> Compiled:
        """The compiled code this kernel runs: object code, IR, entry points, run-time checks."""
        return self._compiled

    @property
    def llvm_ir(self) -> str:
        """The optimized LLVM IR that runs (``llvm_ir_unoptimized``: as emitted): a module per level
        the nests are optimized at, one after another (:func:`.jit.module_split.split`)."""
        return self._compiled.llvm_ir

    @property
    def llvm_ir_unoptimized(self) -> str:
        return self._compiled.llvm_ir_unoptimized

    @property
    def asm(self) -> str:
        return self._compiled.asm

    @property
    def work(self) -> int:
        return self._work

    @property
    def line(self) -> int:
        """The alignment in bytes of the arrays a call allocates for several threads (a cache line)."""
        return self._line

    def run(self, slots: Slots, arrays: list[np.ndarray]) -> None:
        """The code run on an address table: for the inputs, then the outputs, the addresses ``slots``
        says (one entry each) of ``arrays`` -- C-contiguous, aligned arrays of the signature's shapes and
        dtypes (or blocks holding them), unchecked, outputs overlapping nothing, in a list the caller keeps
        alive and no other thread changes -- then the temporaries (and a checked kernel's record).  Every
        call of a kernel runs here."""
        if self._refuse is not None:
            raise RuntimeError(self._refuse)
        try:  # (one list operation: atomic, no lock)
            work = self._workspace.pop()
        except IndexError:
            work = Workspace([np.empty(n, np.uint8) for n in self._temp_bytes])
        checks = self._compiled.checks
        if work.threads != self._num_threads:
            work.make_table(self._n_args, self._line, checks is not None, self._compiled.main_address,
                            self._num_threads)
        record = None
        if checks is not None:
            record = checks.new_record(self._max_ndim)
            work.table[-1] = data_address(record)
        put_addresses(work.address, slots, arrays)
        if self.keep_workspace and not self._workspace:
            self._workspace.append(work)
            del self._workspace[1:]  # (one set: what a call at a time needs, whatever the threads did)
        if record is not None:
            checks.raise_for(record)

    def entry(self, shapes_checked: bool = False) -> int:
        """The address of the code's ``P_main(ptr args, i32 nthreads)``, for a driver that calls it on
        pointers of its own (:mod:`.rows`), a raising gather's or a checked kernel's record after the
        temporaries (a record of ``compiled.checks``, which the driver reads); refuses as a call does, and
        a checked kernel unless the driver checks the arrays' shapes (``shapes_checked``)."""
        if self._refuse is not None:
            raise RuntimeError(self._refuse)
        if self._compiled.checks is not None and self._compiled.checks.every_access and not shapes_checked:
            raise ValueError("a checked kernel tests its arrays' shapes: call it, not its entry")
        return self._compiled.main_address

    def export(self, path: str) -> str:
        """Write a shared library ``path`` (``name.so``), a C header ``name.h`` with one function
        taking plain pointers, and ``name.json`` (what ``ta.load`` checks); see :mod:`.runtime.export`."""
        return export_kernel(self, path)

    def __reduce__(self):
        return Kernel.restored, (pickling.kernel_state(self),)

    @classmethod
    def restored(cls, state: dict) -> Kernel:
        """The kernel a pickled one's state describes (:func:`.runtime.pickling.restore_kernel`)."""
        return pickling.restore_kernel(cls, state)

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {d}{list(s)}" for n, s, d in self._inputs)
        outs = ", ".join(f"{n}: {d}{list(s)}" for n, s, d in self._outputs)
        return f"<Kernel ({ins}) -> ({outs}), work={self.work}, threads={self.num_threads}>"

    def call(self, arrays: Sequence, out: Any = None) -> Any:
        """``kernel(*arrays, out=out)``."""
        return self(*arrays, out=out)

    def __call__(self, *arrays: Any, out: Any = None) -> Any:
        if self._refuse is not None:
            raise RuntimeError(self._refuse)
        if len(arrays) != len(self._inputs):
            names = ", ".join(n for n, _, _ in self._inputs)
            raise KernelArgumentError(f"kernel takes {len(self._inputs)} input arrays ({names}), "
                                      f"got {len(arrays)}")
        check = self.check_input
        ins = [check(a, spec) for a, spec in zip(arrays, self._inputs)]
        if out is not None:
            res, outs = given_outputs(out, self._outputs, ins, [n for n, _, _ in self._inputs])
        else:
            res = outs = new_outputs(self._out_specs, self._out_plan, self._num_threads, self._line)
        self.run(self._all_slots, ins + outs)
        return res[0] if len(res) == 1 else tuple(res)

    @staticmethod
    def check_input(a: Any, spec: tuple) -> np.ndarray:
        """``a`` as a C-contiguous array of ``spec``'s ``(name, shape, dtype)``, or a
        :class:`KernelArgumentError` naming what differs."""
        name, shape, dtype = spec
        if type(a) is np.ndarray and a.dtype == dtype and a.shape == shape:  # (the usual case, at
            flags = a.flags  # a third of the cost: this runs per input per call)
            if flags.c_contiguous and flags.aligned:
                return a
        if not isinstance(a, np.ndarray | np.generic) and not hasattr(a, "__dlpack__"):
            raise KernelArgumentError(f"input {name}: expected a numpy array of shape {list(shape)} "
                                      f"and dtype {dtype}, got {type(a).__name__} (any object with "
                                      f"__dlpack__, such as a torch tensor, is also accepted)")
        a = as_array(a, f"input {name}")
        if a.dtype != dtype:
            how = "ml_dtypes.bfloat16" if dtype == numpy_dtype("bfloat16") else f"np.{dtype}"
            raise KernelArgumentError(f"input {name}: expected dtype {dtype}, got {a.dtype} "
                                      f"(convert with .astype({how}))")
        if a.shape != shape:
            raise KernelArgumentError(f"input {name}: expected shape {list(shape)}, got {list(a.shape)}")
        if not (a.flags.c_contiguous and a.flags.aligned):
            a = np.ascontiguousarray(a)
        return a


def given_outputs(out: Any, specs: Sequence[tuple], ins: list[np.ndarray], in_names: Sequence[str],
                  ) -> tuple[list, list[np.ndarray]]:
    """The objects given as ``out=`` (an array, or a tuple or list of one per output) and the arrays a
    kernel writes, checked against ``specs`` (each output's name, shape and dtype), or a
    :class:`KernelArgumentError` naming the output and what is wrong: a mismatch, or memory shared with
    another output or an input (``ins``, named ``in_names``)."""
    if type(out) is np.ndarray and len(specs) == 1 and out.dtype == specs[0][2] and out.shape == specs[0][1] \
            and (flags := out.flags).c_contiguous and flags.aligned and flags.writeable \
            and not any(np.may_share_memory(out, a) for a in ins):  # (the usual case, in a third of the time)
        return [out], [out]
    single = isinstance(out, np.ndarray) or (hasattr(out, "__dlpack__") and not isinstance(out, tuple))
    given = [out] if single else list(out) if isinstance(out, (tuple, list)) else None
    if given is None or len(given) != len(specs):
        raise KernelArgumentError(f"out= must be {len(specs)} array(s) "
                                  f"({', '.join(n for n, _, _ in specs)}), got {out!r:.80}")
    outs = []
    for g, (name, shape, dtype) in zip(given, specs):
        if not isinstance(g, np.ndarray) and not hasattr(g, "__dlpack__"):
            raise KernelArgumentError(f"out {name}: expected a numpy array, got {type(g).__name__} "
                                      f"(any object with __dlpack__ is also accepted)")
        a = as_array(g, f"out {name}")
        if a.dtype != dtype:
            raise KernelArgumentError(f"out {name}: expected dtype {dtype}, got {a.dtype}")
        if a.shape != shape:
            raise KernelArgumentError(f"out {name}: expected shape {list(shape)}, got {list(a.shape)}")
        if not ((flags := a.flags).c_contiguous and flags.aligned and flags.writeable):
            raise KernelArgumentError(f"out {name}: must be a C-contiguous, aligned, writeable "
                                      f"array (outputs are written in place, never copied)")
        outs.append(a)
    clash = overlapping_output(ins, outs)
    if clash is not None:
        k, j = clash
        other = f"input {in_names[j]}" if j < len(ins) else f"out {specs[j - len(ins)][0]}"
        raise KernelArgumentError(f"out {specs[k][0]}: overlaps {other} (outputs are "
                                  f"written in place: each needs memory of its own)")
    return given, outs
