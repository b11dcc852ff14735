"""Shared fixtures for every test folder, and the order the tests run in (the ones marked slow first).

``--cpu-durations=N`` lists the N tests that took the most CPU time, with the process tree's (compile
workers, started interpreters), and each folder's sum: what to compare on a shared machine, where wall
times vary with the load.

* ``rng`` -- a seeded ``numpy.random.Generator`` (a fresh one per test: tests do not depend on
  the order they run in).
* ``numeric_grad`` -- central finite differences in float64, the gradient oracle that
  tensorad did not compute (see :func:`numeric_grad`).
* ``running`` -- whether a process id is a live process (not gone, not a zombie), for the
  tests that kill a process and check that what it forked died with it.
* ``stand_in_workers`` -- a pool of compile workers running ``tests/stand_in_compile_worker.py``, which
  aborts, loops, hangs or answers as a job's text says (the tests of LLVM's containment).
* ``python_child`` -- runs Python code in a new interpreter whose CPU seconds are bounded (``RLIMIT_CPU``),
  not its wall time: a test that a computation takes seconds fails on a hang, not on a busy machine.
* ``loop_ir`` -- a small LLVM IR module (a loop), what the tests of compiling compile.
* ``torch_libgomp`` -- the first lines of a script that runs kernels on libgomp: PyTorch's own copy
  loaded (no system one needed), without importing torch.

``tests/strategies.py`` is registered as the module ``strategies`` so that test modules can
``from strategies import random_program``, and ``tests/blocks.py`` (model blocks written with
``ta.topi`` and with torch) as ``blocks``; ``simplify/workloads.py`` as ``simplify_workloads``
and ``golden/corpus.py`` (the work gate's programs) as ``golden_corpus``, ``simplify/holdouts.py`` (what the
holdouts of operators share) as ``holdouts``.  (The tests folder is
deliberately not put on ``sys.path``: its ``tensorad/`` folder would shadow the editable-installed
package as a namespace package.)
"""

from __future__ import annotations

import atexit
import gc
import importlib.util
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence

# NumPy's BLAS computes the tests' references on one thread: OpenBLAS's idle threads spin for about
# 0.1 s after each call, on the core where pytest-xdist's other worker runs.  (Set before NumPy loads
# it; the tests of BLAS beside compiling set their own in the processes they start.)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def _register(name: str, path: str | None = None) -> None:
    """``tests/<path>`` (``<name>.py`` unless given) importable as the module ``name``."""
    if name in sys.modules:
        return
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), path or f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


_register("strategies")
_register("blocks")
_register("simplify_workloads", "simplify/workloads.py")
_register("golden_corpus", "golden/corpus.py")
_register("holdouts", "simplify/holdouts.py")

# Compiled code and differentiated programs are cached in a temporary directory of this test run,
# never in the user's home.  The process that starts the run owns it (makes it, removes it at exit);
# pytest-xdist's workers start from its environment and share it, so a kernel that tests on both
# workers build is compiled once (entries are written to a temporary file renamed into place).
_RUN_CACHE = "TENSORAD_TEST_RUN_CACHE"
if os.environ.get("PYTEST_XDIST_WORKER") and os.path.isdir(os.environ.get(_RUN_CACHE, "")):
    _CACHE_DIR = os.environ[_RUN_CACHE]
else:
    _CACHE_DIR = tempfile.mkdtemp(prefix="tensorad-test-cache-")
    os.environ[_RUN_CACHE] = _CACHE_DIR
    atexit.register(shutil.rmtree, _CACHE_DIR, True)
os.environ["TENSORAD_CACHE_DIR"] = _CACHE_DIR


def numeric_grad(fn: Callable[..., np.ndarray], arrays: Sequence[np.ndarray],
                 head: np.ndarray | None = None, eps: float = 1e-6) -> list[np.ndarray]:
    """Central finite differences of ``fn(*arrays)`` in float64.

    With ``head`` (shape ``prefix + out.shape``) the i-th result is the vector-Jacobian product
    ``sum_o head[p..., o...] * d out[o...] / d arrays[i][j...]``, of shape
    ``prefix + arrays[i].shape`` (the reverse-mode convention of ``ta.JacobianRecursive``).
    Without ``head`` it is the full Jacobian, of shape ``out.shape + arrays[i].shape``.
    ``fn`` receives float64 copies and may return any float array; it is evaluated
    ``2 * size`` times per input, so keep shapes small.
    """
    base = [np.array(a, dtype=np.float64) for a in arrays]
    out_shape = np.shape(fn(*[a.copy() for a in base]))
    grads = []
    for i, a in enumerate(base):
        jac = np.zeros(out_shape + a.shape)
        for j in np.ndindex(*a.shape):
            plus = [b.copy() for b in base]
            minus = [b.copy() for b in base]
            plus[i][j] += eps
            minus[i][j] -= eps
            diff = (np.asarray(fn(*plus), np.float64) - np.asarray(fn(*minus), np.float64))
            jac[(Ellipsis,) + j] = diff / (2 * eps)
        if head is None:
            grads.append(jac)
        else:
            h = np.asarray(head, np.float64)
            n_out = len(out_shape)
            prefix = h.shape[:h.ndim - n_out]
            if h.shape[len(prefix):] != out_shape:
                raise ValueError(f"head shape {h.shape} does not end with the output shape {out_shape}")
            flat = np.tensordot(h.reshape(prefix + (-1,)), jac.reshape((-1,) + a.shape), axes=1)
            grads.append(np.asarray(flat).reshape(prefix + a.shape))
    return grads


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked slow run first, each file's in its order, the others after them in theirs:
    pytest-xdist's workers then end the run on short tests, neither idle while the other finishes a
    long one.  (The order is the same in every worker, as pytest-xdist requires; ``make test``'s
    ``--dist worksteal`` starts the first worker on the first half, the slow ones, and lets the
    other take from its queue.)"""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection made (the test modules, torch, NumPy, the programs written at module level) lives
    to the end of the run: frozen out of the collector's generations (``gc.freeze``), the full
    collections the tests' garbage triggers do not walk it each time."""
    gc.collect()
    gc.freeze()


def process_tree_cpu(pid: int | None = None) -> float:
    """CPU seconds (user and system) of process ``pid`` (this one by default), of its live descendants
    (its compile workers, the interpreters a test starts) and of the children each has reaped, from
    ``/proc``; 0.0 where there is none."""
    todo, total = [pid or os.getpid()], 0.0
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/stat") as f:
                total += sum(map(int, f.read().rsplit(")", 1)[1].split()[11:15])) / os.sysconf("SC_CLK_TCK")
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo += map(int, f.read().split())
        except OSError:
            continue
    return total


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-durations", type=int, default=None, metavar="N",
                     help="list the N tests that took the most CPU time (setup, call and teardown; the test "
                          "process with its compile workers and the processes it starts), and the sum: "
                          "on a loaded machine --durations' wall times mislead")
    parser.addoption("--cpu-log", default=None, metavar="PATH",
                     help="with --cpu-durations, append each test's CPU seconds to PATH as it ends (an "
                          "interrupted run keeps what it measured)")


_CPU = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if item.config.getoption("cpu_durations") is not None:
        item.stash[_CPU] = process_tree_cpu()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    if call.when == "teardown" and _CPU in item.stash:  # (xdist sends user_properties to the controller)
        outcome.get_result().user_properties.append(("cpu_seconds", process_tree_cpu() - item.stash[_CPU]))


class CpuDurations:
    """The ``--cpu-durations`` table: each test's CPU seconds, from its teardown report (this process's
    or, under pytest-xdist, a worker's), printed when the run ends."""

    def __init__(self, n: int, log: str | None) -> None:
        self.n, self.spent, self.log = n, [], log

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        spent = [(value, report.nodeid) for key, value in report.user_properties
                 if key == "cpu_seconds" and report.when == "teardown"]
        self.spent += spent
        if spent and self.log:
            with open(self.log, "a") as f:
                f.writelines(f"{seconds:.2f}s {nodeid}\n" for seconds, nodeid in spent)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        spent = sorted(self.spent, reverse=True)
        terminalreporter.write_sep("=", f"CPU time: {sum(s for s, _ in spent):.1f} s over {len(spent)} tests")
        for seconds, nodeid in spent[:self.n or None]:
            terminalreporter.write_line(f"{seconds:8.2f}s {nodeid}")
        folders: dict[str, list[float]] = {}
        for seconds, nodeid in spent:
            folders.setdefault(os.path.dirname(nodeid.split("::")[0]), []).append(seconds)
        terminalreporter.write_sep("-", "CPU time by folder (seconds, tests)")
        for folder, times in sorted(folders.items(), key=lambda kv: -sum(kv[1])):
            terminalreporter.write_line(f"{sum(times):8.1f}s {len(times):5d} {folder}")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("cpu_durations") is not None and not os.environ.get("PYTEST_XDIST_WORKER"):
        plugin = CpuDurations(config.getoption("cpu_durations"), config.getoption("cpu_log"))
        config.pluginmanager.register(plugin, "cpu_durations")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20260521)


@pytest.fixture(name="numeric_grad")
def numeric_grad_fixture() -> Callable[..., list[np.ndarray]]:
    return numeric_grad


def process_running(pid: int) -> bool:
    """Whether ``pid`` is a live process: neither gone nor a zombie (from ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(name="running")
def running_fixture() -> Callable[[int], bool]:
    return process_running


#: a small LLVM IR module (a loop doubling 64 floats): what the tests of compiling compile
LOOP_IR = """
define void @f(ptr %p) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %n, %loop ]
  %a = getelementptr float, ptr %p, i64 %i
  %v = load float, ptr %a
  %w = fmul float %v, 2.0
  store float %w, ptr %a
  %n = add i64 %i, 1
  %c = icmp eq i64 %n, 64
  br i1 %c, label %out, label %loop
out:
  ret void
}
"""


def run_python_child(code: str, cpu_seconds: int, **kwargs) -> subprocess.CompletedProcess:
    """``python -c code`` with at most ``cpu_seconds`` of CPU time (past it the kernel stops the child with
    SIGXCPU/SIGKILL, a non-zero return code), and a wall limit only as a last resort."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=limit,
                          timeout=max(1800, 20 * cpu_seconds), **kwargs)


@pytest.fixture(name="python_child")
def python_child_fixture() -> Callable[..., subprocess.CompletedProcess]:
    return run_python_child


@pytest.fixture
def loop_ir() -> str:
    """:data:`LOOP_IR`."""
    return LOOP_IR


@pytest.fixture
def torch_libgomp() -> str:
    """Python lines that load the libgomp PyTorch ships (``torch/lib`` or ``torch.libs``) into the
    process, as ``import torch`` does, without the seconds of CPU that importing torch costs: the
    kernels a script then builds on ``TENSORAD_PARALLEL_RUNTIME=gomp`` run on it.  Skips the test
    where torch is not installed."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch: an optional extra; make test requires it")
    return ("import ctypes, glob, importlib.util, os\n"
            "_torch = importlib.util.find_spec('torch').submodule_search_locations[0]\n"
            "_gomp = sorted(glob.glob(os.path.join(_torch, 'lib', 'libgomp*.so*'))\n"
            "               + glob.glob(os.path.join(_torch + '.libs', 'libgomp*.so*')))\n"
            "assert _gomp, 'torch ships no libgomp'\n"
            "ctypes.CDLL(_gomp[0], mode=ctypes.RTLD_GLOBAL)\n")


@pytest.fixture
def stand_in_workers() -> Iterator:
    """A pool of compile workers (``isolate.Workers``) that run ``tests/stand_in_compile_worker.py``,
    whose jobs' texts say what the worker does (abort, loop, hang, answer); closed after the test."""
    from tensorad.codegen.jit import isolate

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_in_compile_worker.py")
    workers = isolate.Workers([sys.executable, script, os.path.dirname(os.path.abspath(isolate.__file__))])
    yield workers
    workers.close()


@pytest.fixture
def builds(monkeypatch) -> list:
    """The static kernels ``ta.build`` makes for a symbolic program, counted (not a block refused a
    runtime count of rows, :mod:`tensorad.codegen.passes.row_bound`, which compiles nothing)."""
    from tensorad.codegen.build import Prepared

    made = []
    real = Prepared.kernel

    def counting(self):
        kernel = real(self)
        made.append(self.outs)
        return kernel
    monkeypatch.setattr(Prepared, "kernel", counting)
    return made
