"""A compile job as data, and the one copy of the LLVM pipeline that runs it, here or in a worker.

A :class:`Job` is a module's IR text, a :class:`Pipeline`, a :class:`Machine` and what to return (object
code, or the optimized IR's text); :func:`run` computes its bytes.  The compile workers of
:mod:`.jit.isolate` run this file as a script (``python compile_job.py LLVMLITE_PARENT``): it imports
only the standard library and llvmlite (never tensorad, which takes seconds), and :func:`serve` answers
the jobs that arrive on stdin, framed by :func:`send`/:func:`receive`, each under a CPU-time limit."""

from __future__ import annotations

import math
import os
import pickle
import select
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

try:
    import resource
except ImportError:  # (not POSIX: no CPU limit)
    resource = None

if __name__ == "__main__":  # (a worker: the parent's llvmlite, whatever this process's path says)
    sys.path.insert(0, sys.argv[1])

import llvmlite.binding as llvm


class Pipeline(NamedTuple):
    """One way to optimize a module: ``-O<level>`` (SLP vectorization on or off) or :func:`promote`'s."""

    level: int
    slp: bool = True
    light: bool = False

    def run(self, mod: llvm.ModuleRef, tm: llvm.TargetMachine) -> None:
        if self.light:
            promote(mod, tm)
        elif self.level > 0:
            optimize(mod, self.level, tm, slp=self.slp)


class Machine(NamedTuple):
    """What a target machine is made of; ``pic``: position-independent code for a shared library."""

    triple: str
    cpu: str
    features: str
    pic: bool = False

    def make(self) -> llvm.TargetMachine:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        return llvm.Target.from_triple(self.triple).create_target_machine(
            cpu=self.cpu, features=self.features, opt=3, reloc="pic" if self.pic else "default",
            codemodel="default" if self.pic else "jitdefault")


class Job(NamedTuple):
    """A module to compile: its IR text, pipeline and machine; ``ir``: return the optimized IR's text."""

    text: str
    pipeline: Pipeline
    machine: Machine
    ir: bool = False

    def wire(self) -> tuple:
        """The job as plain tuples (a worker unpickles no class of tensorad's)."""
        return self.text, tuple(self.pipeline), tuple(self.machine), self.ir

    @staticmethod
    def of(wire: tuple) -> Job:
        text, pipeline, machine, ir = wire
        return Job(text, Pipeline(*pipeline), Machine(*machine), ir)


def parse(text: str, machine: Machine, tm: llvm.TargetMachine) -> llvm.ModuleRef:
    """``text`` parsed into an LLVM context of its own (freed with the module), for ``tm``."""
    mod = llvm.parse_assembly(text, context=llvm.create_context())
    mod.triple = machine.triple
    mod.data_layout = str(tm.target_data)
    return mod


def promote(mod: llvm.ModuleRef, tm: llvm.TargetMachine) -> None:
    """The light pipeline of hand-written vector code: SROA, instruction combining, CFG simplification."""
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=0))
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_sroa_pass()
    mpm.add_instruction_combine_pass()
    mpm.add_simplify_cfg_pass()
    mpm.run(mod, pb)


def optimize(mod: llvm.ModuleRef, opt_level: int, tm: llvm.TargetMachine, slp: bool = True) -> None:
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = slp and opt_level >= 2
    pto.loop_unrolling = opt_level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def run(job: Job, machine_of: Callable[[Machine], llvm.TargetMachine]) -> bytes:
    """``job``'s bytes: its module parsed, verified, optimized (by the machine's JIT twin: a shared
    library's code is optimized as a kernel's) and compiled, or its optimized IR's text."""
    tm = machine_of(job.machine)
    mod = parse(job.text, job.machine, tm)
    mod.verify()
    job.pipeline.run(mod, machine_of(job.machine._replace(pic=False)))
    return str(mod).encode() if job.ir else tm.emit_object(mod)


_HEADER = struct.Struct("<Q")


def send(fd: int, message: object, deadline: float | None = None) -> None:
    """``message`` framed on ``fd``; on a non-blocking ``fd``, a ``TimeoutError`` where its reader has not
    taken it by ``deadline`` (``time.monotonic``)."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            if not select.select([], [fd], [], max(0.0, deadline - time.monotonic()))[1]:
                raise TimeoutError("the reader took no more of the message") from None


def receive(fd: int) -> object | None:
    """The next message on ``fd``; ``None`` at its end (the writer gone, mid-message too)."""
    header = _read(fd, _HEADER.size)
    data = header and _read(fd, _HEADER.unpack(header)[0])
    return None if data is None else pickle.loads(data)


def _read(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def serve(answer: Callable[[tuple], bytes]) -> None:
    """A worker's loop: each message on stdin, ``(job as plain tuples, CPU seconds, idle seconds)``, answered
    on stdout by ``("ok", bytes, its CPU seconds, what it wrote on stderr, the worker's CPU seconds)`` or
    ``("raised", message, ...)``; a job past its CPU seconds ends the worker (``SIGXCPU``).  The first
    message out says the worker is ready; ``("retired", ...)`` says it leaves, no job having come in the
    idle seconds after its last answer (a job sent meanwhile is not read).  The worker leaves when stdin
    ends, and at once when its parent closes stdin or dies mid-job."""
    if resource is not None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    jobs, out, errors = 0, os.dup(1), tempfile.TemporaryFile()
    os.dup2(errors.fileno(), 1)  # (stdout is the parent's messages only; what LLVM writes goes back)
    os.dup2(errors.fileno(), 2)
    threading.Thread(target=_leave_with_parent, args=(jobs,), daemon=True).start()
    send(out, ("ready", b"", 0.0, b"", time.process_time()))
    idle = None
    while True:
        if idle is not None and not select.select([jobs], [], [], idle)[0]:
            send(out, ("retired", b"", 0.0, b"", time.process_time()))
            return
        if (message := receive(jobs)) is None:
            return
        wire, cpu_limit, idle = message
        _limit_cpu(cpu_limit)
        os.ftruncate(2, 0)
        os.lseek(2, 0, os.SEEK_SET)
        begin = time.process_time()
        try:
            status, data = "ok", answer(wire)
        except Exception as e:  # (a Python error: the parent runs the job again to raise it)
            status, data = "raised", repr(e).encode()
        sys.stderr.flush()
        said = os.pread(2, os.fstat(2).st_size, 0)
        send(out, (status, data, time.process_time() - begin, said, time.process_time()))


def _leave_with_parent(jobs: int) -> None:
    """End this worker once nothing can write to its stdin (its parent closed it, or died)."""
    poller = select.poll()
    poller.register(jobs, 0)  # (only its hang-up)
    while not poller.poll():
        pass
    os._exit(0)


def _limit_cpu(seconds: float) -> None:
    if resource is None:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(time.process_time()) + max(1, math.ceil(seconds))
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _made(machines: dict[Machine, llvm.TargetMachine], m: Machine) -> llvm.TargetMachine:
    """``m``'s target machine, kept in ``machines`` (a worker's: at most 8, a process compiles for a few)."""
    if m not in machines:
        if len(machines) >= 8:
            machines.clear()
        machines[m] = m.make()
    return machines[m]


if __name__ == "__main__":
    import faulthandler

    faulthandler.disable()  # (an abort here is expected: no Python traceback dump)
    made: dict[Machine, llvm.TargetMachine] = {}
    serve(lambda wire: run(Job.of(wire), lambda m: _made(made, m)))
