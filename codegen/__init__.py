"""Code generation: tensors -> loop program (isl) -> LLVM IR (llvmlite) -> JIT -> Kernel.

``lower`` gives the loop program (:class:`LoweredFunc`: printable, with exact ``.work``);
``build`` compiles it for the host CPU and returns a callable :class:`Kernel`.

Modules, in pipeline order:

* ``strategy``, ``strategies``  how each op is computed: registered strategies (match, cost,
  lower) and the driver keeping the cheapest; ``tune`` measures them instead (``tune=True``)
* ``inline``      which tensors get buffers, and inlining of the others into their readers
* ``speculate``   ``if_then_else`` on data tests made ``select`` (no branch, vectorizable)
* ``fuse``        an elementwise consumer stored by its reduction (``sum(..) * 0.25``)
* ``stripmine``   axes read through ``//`` and ``%`` scanned as their digits
* ``domain``      iteration domains as isl sets: ``select(c, e, 0)`` and ``where`` conditions
* ``schedule``    options; loop order (scalar accumulator or accumulate-in-output), parallel loop
* ``group``, ``nestfuse``  consecutive ops sharing their outer loops in one nest (softmax rows,
  pooling windows), reductions read from their accumulators
* ``islast``      isl's AST builder: schedules to exact loops (``program`` statements)
* ``work``        exact counting of innermost-body executions
* ``contraction`` reductions that are (batched) matrix products, for ``microkernel``/``packing``;
  ``splitk`` halves long sums whose few column blocks threads would share unevenly; ``padding``
  replaces a range-guarded side (a convolution's input gradient) by a zero-padded copy
* ``llvm_expr``, ``llvm_math``, ``llvm_emit``  LLVM IR for expressions and programs
* ``jit``, ``runtime``, ``kernel``, ``build``  the engine, libgomp, calling convention, cache
* ``export``      kernels as shared libraries with a C header (``kernel.export``, ``load``), pickling
"""

from .build import build
from .export import ExportError, load_kernel
from .kernel import Kernel, KernelArgumentError
from .lower import LoweredFunc, lower

__all__ = ["lower", "build", "Kernel", "LoweredFunc", "KernelArgumentError", "load_kernel", "ExportError"]
