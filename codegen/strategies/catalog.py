"""The registered code-generation strategies (:mod:`.strategies.registry`), in order: among candidates of
equal cost the one registered first wins.  A strategy is a class in its kind's module and a place in this
list."""

from __future__ import annotations

from .fusions import EpilogueFusion, ProductEpilogue
from .hoist import Hoist
from .plain import CollapsedLoops, Loops, Scan, Strips
from .products import GatheredRows, MicroKernel, PaddedMicroKernel, Parity, ParityLoops, SplitK, TermSplit
from .scatter import Scatter, ScatterSum
from .stencil import TapAccumulators, TapStencil

REGISTRY = (Loops(), Strips(), CollapsedLoops(), MicroKernel(), PaddedMicroKernel(), SplitK(), Parity(),
            ParityLoops(), EpilogueFusion(), ProductEpilogue(), Scatter(), ScatterSum(), GatheredRows(),
            Hoist(), Scan(), TapAccumulators(), TapStencil(), TermSplit())

#: what ``microkernel=True`` forces, the first offered first: split-K (offered where threads share
#: blocks unevenly), products where the plain micro-kernel takes none, the plain micro-kernel
MICROKERNEL_FIRST = (SplitK, PaddedMicroKernel, Parity, GatheredRows, MicroKernel)


__all__ = ["REGISTRY", "MICROKERNEL_FIRST"]
