"""A compile worker that stands in for LLVM in the tests of the worker pool (``jit.isolate``): it
speaks :mod:`compile_job`'s protocol (``serve``) and does what a job's text says, as an LLVM pass might.

A job's text is ``ACTION`` or ``ACTION when slp`` / ``ACTION when O3`` (only on such a pipeline; on
another it answers the pipeline's ``repr``).  ``pid``: this worker's process id; ``abort``: die of
``SIGABRT``; ``spin``: compute for ever; ``sleep``: wait for ever, using no CPU; ``raise``: a Python error;
``big``: 3 MB; ``say``: write a line on stderr.  Run as ``python stand_in_compile_worker.py JIT_FOLDER``;
``STAND_IN_START_SECONDS`` in its environment makes it wait that long before it is ready (a slow start),
``STAND_IN_LINGER_SECONDS`` that long after it has said it retires."""

import os
import sys
import time

sys.path.insert(0, sys.argv[1])
import compile_job  # noqa: E402 - (found in the folder named on the command line)


def _spin() -> bytes:
    while True:
        pass


def _raise() -> bytes:
    raise ValueError("bad IR")


def _say() -> bytes:
    sys.stderr.write("remark: a word from the worker\n")
    return b"said"


ACTIONS = {"pid": lambda: str(os.getpid()).encode(), "abort": os.abort, "spin": _spin,
           "sleep": lambda: time.sleep(3600), "raise": _raise, "big": lambda: bytes([7]) * (3 << 20),
           "say": _say}


def answer(wire: tuple) -> bytes:
    text, pipeline, _, _ = wire
    action, _, when = text.partition(" when ")
    level, slp, _ = pipeline
    if not when or (when == "slp" and slp) or (when == "O3" and level == 3):
        return ACTIONS[action]()
    return repr(compile_job.Pipeline(*pipeline)).encode()


if __name__ == "__main__":
    time.sleep(float(os.environ.get("STAND_IN_START_SECONDS", 0)))
    compile_job.serve(answer)
    time.sleep(float(os.environ.get("STAND_IN_LINGER_SECONDS", 0)))
