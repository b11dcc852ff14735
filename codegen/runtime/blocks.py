"""Arrays at offsets fixed once in one aligned byte block, and kernel calls that read or write such
blocks through the kernel's address table: a forward's saved values are one allocation, and a call
costs no Python work per value kept in a block (``ta.function``'s forward and backward)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .kernel import Kernel, KernelArgumentError, Slots, data_address, new_outputs, output_plan


class Layout:
    """Where each array of ``specs`` (shape, dtype) starts in one block, each on an ``align``-byte
    boundary.  A view keeps its whole block alive."""

    def __init__(self, specs: Sequence[tuple[tuple[int, ...], Any]], align: int) -> None:
        self.specs = [(tuple(s), np.dtype(d)) for s, d in specs]
        self.align = align
        starts, total = [], 0
        for shape, dtype in self.specs:
            starts.append(total)
            total += -(-dtype.itemsize * math.prod(shape) // align) * align
        self.offsets = np.array(starts, np.uintp)
        self.nbytes = total

    def new(self) -> np.ndarray:
        """An uninitialized block (bytes whose first starts on an ``align``-byte boundary)."""
        raw = np.empty(self.nbytes + self.align, np.uint8)
        skip = -data_address(raw) % self.align
        return raw[skip:skip + self.nbytes]

    def view(self, block: np.ndarray, j: int) -> np.ndarray:
        """Array ``j`` of ``block``, sharing its memory."""
        shape, dtype = self.specs[j]
        return np.ndarray(shape, dtype, block, int(self.offsets[j]))

    def views(self, block: np.ndarray) -> list[np.ndarray]:
        """Every array of ``block``, sharing its memory."""
        return [self.view(block, j) for j in range(len(self.specs))]


class BlockCall:
    """``kernel`` called with the arguments at the positions of ``placed`` (inputs, then outputs) in one
    block, each at its offset there: a block given to the call, or a new one of ``layout``.  Every other
    argument is an array, the inputs checked as :meth:`Kernel.check_input` does unless ``known``.  The
    address table is filled in the kernel's call, whatever the number of arrays in the block
    (:class:`.kernel.Slots`: the block is one more array of the call, read at each offset)."""

    def __init__(self, kernel: Kernel, placed: Mapping[int, int], layout: Layout | None = None) -> None:
        sig = kernel.signature
        nin = len(sig.inputs)
        self.kernel = kernel
        self.layout = layout
        self.placed = bool(placed)
        self.in_specs = [spec for k, spec in enumerate(sig.inputs) if k not in placed]
        self.out_specs = [(s, d) for k, (_, s, d) in enumerate(sig.outputs, nin) if k not in placed]
        given = [k for k in range(nin + len(sig.outputs)) if k not in placed]
        self.slots = Slots([*given, *placed], [*range(len(given)), *[len(given)] * len(placed)],
                           [0] * len(given) + list(placed.values()))
        self.unknown = [False] * len(self.in_specs)
        self.out_plan = output_plan(self.out_specs, kernel.line)

    def __call__(self, arrays: Sequence, block: np.ndarray | None = None,
                 known: Sequence[bool] = ()) -> tuple[list[np.ndarray], np.ndarray | None]:
        """The outputs not in the block, and the block, from ``arrays``: the inputs not in it, in order."""
        if len(arrays) != len(self.in_specs):
            names = ", ".join(n for n, _, _ in self.in_specs)
            raise KernelArgumentError(f"kernel takes {len(self.in_specs)} input arrays ({names}), "
                                      f"got {len(arrays)}")
        kernel = self.kernel
        check = kernel.check_input
        ins = [a if k else check(a, spec) for a, spec, k in zip(arrays, self.in_specs, known or self.unknown)]
        outs = new_outputs(self.out_specs, self.out_plan, kernel.num_threads, kernel.line)
        if self.placed and block is None:
            if self.layout is None:
                raise ValueError("this call reads values from a block: give the block")
            block = self.layout.new()
        kernel.run(self.slots, [*ins, *outs, block] if self.placed else ins + outs)
        return outs, block
