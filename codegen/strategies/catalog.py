"""The registered code-generation strategies (:mod:`.strategies.registry`), in order: among candidates of
equal cost the one registered first wins.  A strategy is a class in its kind's module and a place here."""

from __future__ import annotations

from . import products as pr
from .fusions import EpilogueFusion, ProductEpilogue
from .hoist import Hoist
from .plain import CollapsedLoops, Loops, Scan, Strips
from .scatter import Scatter, ScatterSum
from .stencil import TapAccumulators, TapStencil

REGISTRY = (Loops(), Strips(), CollapsedLoops(), pr.MicroKernel(), pr.PaddedMicroKernel(), pr.SplitK(),
            pr.Parity(), pr.ParityLoops(), EpilogueFusion(), ProductEpilogue(), Scatter(), ScatterSum(),
            pr.GatheredRows(), Hoist(), Scan(), TapAccumulators(), TapStencil(), pr.TermSplit(),
            pr.SharedFactor())

#: what ``microkernel=True`` forces, the first offered first: split-K (offered where threads share
#: blocks unevenly), products where the plain micro-kernel takes none, the plain micro-kernel
MICROKERNEL_FIRST = (pr.SplitK, pr.PaddedMicroKernel, pr.Parity, pr.GatheredRows, pr.MicroKernel)
