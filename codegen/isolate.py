"""LLVM's internal failures, contained: a compile step that may abort the process runs in a fork.

LLVM stops the whole process when one of its own assertions fails -- LLVM 22.1's VectorCombine
does on the SLP vector code of some fully unrolled reductions (fuzz ``--layers`` seed 4022: a
ReLU-masked bias gradient summed over a 3x6x2 box in float64 on an AVX2 target) -- and Python
cannot catch an ``abort()``.  :func:`in_child` runs a step in a child of this process (a fork:
the module text and every target machine are already there) and takes the step's bytes back
through a pipe.  A child killed by a signal gives ``None``, and the caller retries with a safer
pipeline (:func:`.jit.compile_object`'s ladder).  A Python exception in the child (a parse or
verification error: the caller's own error) is raised by running the step again in this
process, with its real traceback.  Without ``os.fork``, or when a fork fails (no memory for a
huge process's page tables, no process left), the step runs here.

The child runs only LLVM and this module's few lines, then leaves by ``os._exit`` (no exit
handlers, no flushing of the parent's buffers).  What it writes on stderr (LLVM's remarks) goes
to a file that the parent copies to its own file descriptor 2 -- where a capture the caller holds
reads it -- when the child succeeded; an aborted child's last words are dropped with it.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import tempfile
import warnings
from collections.abc import Callable

_RAISED = 3  # the child's exit status when the step raised a Python exception


def in_child(step: Callable[[], bytes]) -> bytes | None:
    """``step()``'s bytes, computed in a forked child; ``None`` when the child died of a
    signal (LLVM aborted); a Python error of ``step`` is raised here."""
    if not hasattr(os, "fork"):
        return step()
    errors = tempfile.TemporaryFile()
    try:
        return _fork(step, errors)
    finally:
        errors.close()


def _fork(step: Callable[[], bytes], errors) -> bytes | None:
    read_end, write_end = os.pipe()
    for stream in (sys.stdout, sys.stderr):  # (nothing buffered is written twice)
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    try:
        with warnings.catch_warnings():  # Python 3.12+ and JAX's fork hook warn about forking a
            warnings.filterwarnings("ignore", message=r".*fork")  # threaded process: the child
            pid = os.fork()                                       # runs only LLVM
    except OSError:  # (no memory or no process left for a child: compile here, unguarded)
        os.close(read_end)
        os.close(write_end)
        return step()
    if pid == 0:
        status = 0
        try:
            os.close(read_end)
            os.dup2(errors.fileno(), 2)
            faulthandler.disable()  # (an abort here is expected: no Python traceback dump)
            view = memoryview(step())
            while view:
                view = view[os.write(write_end, view):]
        except BaseException:
            status = _RAISED
        os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, wait_status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(wait_status):
        return None
    code = os.waitstatus_to_exitcode(wait_status)
    if code == _RAISED:
        return step()
    if code != 0:
        raise RuntimeError(f"LLVM compile child exited with status {code}")
    errors.seek(0)
    said = memoryview(errors.read())
    while said:
        said = said[os.write(2, said):]
    return data


def cpu_seconds() -> float:
    """CPU seconds of this process plus those of the children it has waited for -- the compile
    children included, which ``time.process_time`` misses.  (Benchmarks and statistics time
    compilation with this clock.)"""
    import resource
    import time

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime
