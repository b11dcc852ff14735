"""Code generation: tensors -> loop program (isl) -> LLVM IR (llvmlite) -> JIT -> Kernel.

``lower`` gives the loop program (:class:`LoweredFunc`: printable, with exact ``.work``);
``build`` compiles it for the host CPU and returns a callable :class:`Kernel`.

Modules, in pipeline order:

* ``inline``      which tensors get buffers, and inlining of the others into their readers
* ``fuse``        an elementwise consumer stored by its reduction (``sum(..) * 0.25``)
* ``domain``      iteration domains as isl sets: ``select(c, e, 0)`` and ``where`` conditions
* ``schedule``    options; loop order (scalar accumulator or accumulate-in-output), parallel loop
* ``islast``      isl's AST builder: schedules to exact loops (``program`` statements)
* ``work``        exact counting of innermost-body executions
* ``contraction`` reductions that are (batched) matrix products, for ``microkernel``/``packing``
* ``llvm_expr``, ``llvm_math``, ``llvm_emit``  LLVM IR for expressions and programs
* ``jit``, ``runtime``, ``kernel``, ``build``  the engine, libgomp, calling convention, cache
"""

from .build import build
from .kernel import Kernel, KernelArgumentError
from .lower import LoweredFunc, lower

__all__ = ["lower", "build", "Kernel", "LoweredFunc", "KernelArgumentError"]
