"""``ta.build``: lower, emit LLVM IR, JIT-compile (cached), wrap in a :class:`Kernel`.

The cache of compiled modules is keyed by a SHA-256 of the exact program text (constants are
printed with ``repr``), the compilation options and the target (triple, CPU, features): a
rebuild of the same program costs a lowering-cache lookup and a dictionary lookup.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any

from tensorad.ir.tensor import Tensor

from .irloops import finish_ir
from .jit import compile_module, target_key
from .kernel import ARRAY_DATA_OFFSET, Compiled, Kernel
from .llvm_emit import ModuleEmitter
from .lower import lower
from .runtime import default_threads, parallel_runtime
from .schedule import Options

_COMPILED: dict[str, Compiled] = {}
_LOCK = threading.Lock()
TARGETS = ("llvm",)


def build(outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor = (),
          target: str = "llvm", name: str = "kernel", **options: Any) -> Kernel:
    """Compile ``outputs`` as functions of ``inputs`` for the host CPU.

    Options (:class:`.schedule.Options`): ``num_threads`` (default: all cores), ``fastmath``
    (default True: reductions may be reassociated -- vectorized sums round differently from a
    sequential loop -- and multiply-adds fused; ``False`` keeps IEEE order), ``opt_level``
    (0-3), ``vector_width``, ``tile`` and ``microkernel`` (the contraction kernel),
    ``parallel``, ``parallel_min_work``, ``inline``, ``materialize``, ``fuse``.
    """
    if not isinstance(target, str) or target.split()[0] not in TARGETS:
        raise ValueError(f"unsupported target {target!r}; tensorad compiles for 'llvm' (the host CPU)")
    opts = Options.make(options)
    lowered = lower(outputs, inputs, name=name, **options)
    gomp = parallel_runtime() is not None and opts.parallel
    key_text = "\n".join([lowered.text, repr((opts.fastmath, opts.opt_level, opts.vector_width, gomp,
                                               ARRAY_DATA_OFFSET)), target_key()])
    key = hashlib.sha256(key_text.encode()).hexdigest()
    compiled = _COMPILED.get(key)
    if compiled is None:
        with _LOCK:
            compiled = _COMPILED.get(key)
            if compiled is None:
                compiled = _compile(lowered, key, opts, gomp)
                _COMPILED[key] = compiled
    threads = opts.num_threads or default_threads()
    return Kernel(lowered, compiled, threads if gomp else 1)


def _compile(lowered, key: str, opts: Options, gomp: bool) -> Compiled:
    emitter = ModuleEmitter(lowered.program, f"k{key[:16]}", fastmath=opts.fastmath, use_gomp=gomp,
                            vector_width=opts.vector_width, data_offset=ARRAY_DATA_OFFSET)
    module = emitter.emit()
    text = finish_ir(str(module))
    names = [emitter.main_name] + ([emitter.call_name] if ARRAY_DATA_OFFSET is not None else [])
    addrs, optimized = compile_module(text, names, opts.opt_level)
    return Compiled(key, addrs[emitter.main_name], optimized, text, gomp, len(lowered.program.arguments),
                    addrs.get(emitter.call_name))


def cache_size() -> int:
    """Number of compiled modules held by this process."""
    return len(_COMPILED)
