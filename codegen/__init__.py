"""Code generation: tensors -> loop program (isl) -> LLVM IR (llvmlite) -> JIT -> Kernel.

``lower`` gives the loop program (:class:`LoweredFunc`: printable, with exact ``.work``);
``build`` compiles it for the host CPU and returns a callable :class:`Kernel`.
"""

from .build import build
from .kernel import Kernel, KernelArgumentError
from .lower import LoweredFunc, lower

__all__ = ["lower", "build", "Kernel", "LoweredFunc", "KernelArgumentError"]
