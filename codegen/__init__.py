"""Code generation: tensors -> loop program (isl) -> LLVM IR (llvmlite) -> JIT -> Kernel.

``lower`` gives the loop program (:class:`LoweredFunc`: printable, with exact ``.work``); ``build``
compiles it and returns a callable :class:`Kernel`; ``prepare`` keys a build whose estimate is asked for
before its kernel.

* ``passes/``      rewrites of the tensor program before planning (buffers, shared sums)
* ``strategies/``  how each op is computed: registered strategies, cost model, tuning
* ``gemm/``        contractions recognized as matrix products, and the packed GEMM library
* ``loops/``       polyhedral loop building: domains, schedules, isl's AST builder, work
* ``llvm/``        LLVM IR for expressions and loop programs
* ``jit/``         object code compiled through LLVM's JIT, checked, and cached on disk
* ``runtime/``     kernels called on arrays, their thread pool, export and loading
* ``options`` the options of ``lower`` and ``build``; ``target`` the CPU code is generated for;
  ``program`` the loop program; ``lower`` tensors to a loop program; ``build`` key, look up, else lower,
  emit, compile, link, wrap; ``tune`` the entry points, measuring candidates where ``tune=True``."""

from .lower import LoweredFunc
from .runtime.export import ExportError, LoadError
from .runtime.kernel import Kernel, KernelArgumentError
from .runtime.load import load_kernel
from .tune import build, lower, prepare

__all__ = ["lower", "build", "prepare", "Kernel", "LoweredFunc", "KernelArgumentError", "load_kernel",
           "ExportError", "LoadError"]
