"""The CPU that code is generated for: a :class:`Target` read by every code-generation decision.

A target is named TVM-style: ``"llvm"`` (the host CPU), ``"llvm -mcpu=haswell"``,
``"llvm -mattr=-avx512f"``, or both.  The assembly of a probe module compiled for it gives the widest
vector register and whether FMA is an instruction, and from them ``vector_bits`` (``lanes(dtype)``),
``vector_registers``, ``fma``, ``masked_memory`` (AVX-512's masked loads and stores,
:mod:`.llvm.masked_tails`), ``paired_permutes`` (a shuffle of two registers' lanes, :mod:`.strategies.scan`)
and ``f16c``/``bf16``; ``l1d``/``l2``/``l3``, ``line``/``page`` come from sysfs for a CPU that runs here,
else typical sizes.  x86 features end with ``+prefer-no-gather,+prefer-no-scatter`` unless the spec names
either.  ``needed_features``/``missing_features`` say what a target's code may use and the host lacks
(``ta.load`` refuses such a library); ``key`` keys the kernel caches; targets are memoized per spec.  LLVM's
native target is initialized and its target machines made (:func:`new_target_machine`) here."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import llvmlite.binding as llvm

from tensorad.ir.locks import process_lock

DEFAULT_CACHES = (32 * 1024, 1024 * 1024, 8 * 1024 * 1024)  # L1d, L2, L3 of a named CPU
DEFAULT_LINE, DEFAULT_PAGE = 64, 4096  # cache line and page bytes of a named CPU
_DTYPE_BYTES = {"float32": 4, "float64": 8, "int32": 4, "int64": 8}
_FEATURE = re.compile(r"^[+-][a-z0-9][a-z0-9.\-_]*$")

class _Process:
    """What this module keeps for the life of the process: whether LLVM's native target is initialized,
    and the targets made by spec (a memo that never changes a result)."""

    def __init__(self) -> None:
        self.llvm_lock = process_lock(reentrant=True)  # LLVM's initialization and target machines
        self.initialized = False
        self.lock = process_lock()
        self.made: dict[str, Target] = {}


_PROCESS = _Process()


def initialize() -> None:
    """LLVM's native target and assembly printer (once per process)."""
    if not _PROCESS.initialized:
        with _PROCESS.llvm_lock:
            if not _PROCESS.initialized:
                llvm.initialize_native_target()
                llvm.initialize_native_asmprinter()
                _PROCESS.initialized = True


def new_target_machine(triple: str, cpu: str, features: str) -> llvm.TargetMachine:
    """A target machine for ``cpu`` with ``features``; ``ValueError`` when LLVM does not know
    the CPU or a feature (it would warn on stderr and silently compile for a generic CPU)."""
    initialize()
    target = llvm.Target.from_triple(triple)
    with _PROCESS.llvm_lock:
        with captured_stderr() as err:
            tm = target.create_target_machine(cpu=cpu, features=features, opt=3, codemodel="jitdefault")
    text = err()
    for line in text.splitlines():
        if "not a recognized" in line:
            raise ValueError(f"target: LLVM {line.strip()} -- check -mcpu/-mattr")
    return tm


class captured_stderr:  # noqa: N801 - used as a context manager
    """Redirects file descriptor 2 to a temporary file; calling the result reads it (held while one target
    machine is made)."""

    def __enter__(self):
        self.text = ""
        try:
            sys.stderr.flush()
            self.saved = os.dup(2)
        except (OSError, ValueError):
            self.saved = None
            return lambda: self.text
        self.tmp = tempfile.TemporaryFile()
        os.dup2(self.tmp.fileno(), 2)
        return lambda: self.text

    def __exit__(self, *exc) -> None:
        if self.saved is None:
            return
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.tmp.seek(0)
        self.text = self.tmp.read().decode(errors="replace")
        self.tmp.close()


_PROBE_IR = """
define void @w512(ptr %p) {
  %a = load <16 x float>, ptr %p
  %c = fadd <16 x float> %a, %a
  store <16 x float> %c, ptr %p
  ret void
}
define void @w256(ptr %p) {
  %a = load <8 x float>, ptr %p
  %c = fadd <8 x float> %a, %a
  store <8 x float> %c, ptr %p
  ret void
}
declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)
define void @fma(ptr %p) {
  %a = load <4 x float>, ptr %p
  %c = call <4 x float> @llvm.fma.v4f32(<4 x float> %a, <4 x float> %a, <4 x float> %a)
  store <4 x float> %c, ptr %p
  ret void
}
"""
_FMA_MNEMONICS = ("vfmadd", "vfmsub", "fmla", "xvmadd")
# half conversions: a conversion instruction in the target's assembly says it has one
_HALF_PROBE_IR = """
define void @f16(ptr %p, ptr %q) {
  %a = load <8 x half>, ptr %p
  %b = fpext <8 x half> %a to <8 x float>
  %s = fadd <8 x float> %b, %b
  %c = fptrunc <8 x float> %s to <8 x half>
  store <8 x half> %c, ptr %q
  ret void
}
define void @bf16(ptr %p, ptr %q) {
  %a = load <8 x float>, ptr %p
  %c = fptrunc <8 x float> %a to <8 x bfloat>
  store <8 x bfloat> %c, ptr %q
  ret void
}
"""
_F16C_MNEMONICS = ("vcvtph2ps", "fcvtl")
_BF16_MNEMONICS = ("vcvtneps2bf16", "bfcvtn")


@dataclass(frozen=True)
class Target:
    """A CPU to compile for (see the module docstring)."""

    spec: str
    triple: str
    cpu: str
    features: str
    vector_bits: int
    vector_registers: int
    fma: bool
    l1d: int = DEFAULT_CACHES[0]
    l2: int = DEFAULT_CACHES[1]
    l3: int = DEFAULT_CACHES[2]
    is_host: bool = False
    f16c: bool = False
    bf16: bool = False
    line: int = DEFAULT_LINE
    page: int = DEFAULT_PAGE

    @property
    def key(self) -> str:
        """What determines the machine code: triple, CPU, features, and the vector width, registers, FMA."""
        return (f"{self.triple}|{self.cpu}|{self.features}|{self.vector_bits}x{self.vector_registers}"
                f"|{'fma' if self.fma else 'nofma'}|{self.l1d},{self.l2},{self.l3},{self.line},{self.page}")

    def lanes(self, dtype: str) -> int:
        """Elements of ``dtype`` in one vector register."""
        try:
            return max(1, self.vector_bits // (8 * _DTYPE_BYTES[dtype]))
        except KeyError:
            raise ValueError(f"no vector lanes for dtype {dtype!r}") from None

    @property
    def masked_memory(self) -> bool:
        """Whether the target is x86 with AVX-512 (the module docstring's ``masked_memory``,
        ``paired_permutes``)."""
        return self.triple.startswith(("x86_64", "i686", "i386")) and self.vector_bits >= 512

    paired_permutes = masked_memory

    def runs_here(self, host: Target) -> bool:
        """Whether code for this target can run on ``host`` (its vectors and FMA exist there)."""
        return self.triple == host.triple and self.vector_bits <= host.vector_bits \
            and (host.fma or not self.fma)

    def __str__(self) -> str:
        return (f"{self.spec} ({self.cpu}, {self.vector_bits}-bit vectors x {self.vector_registers}"
                f"{', FMA' if self.fma else ''})")


def parse_target(spec: str | Target | None = None) -> Target:
    """The :class:`Target` of ``spec`` (``None``, ``"llvm"``: the host); a bad spec is a ``ValueError``."""
    if isinstance(spec, Target):
        return spec
    if spec is None:
        spec = "llvm"
    if not isinstance(spec, str):
        raise ValueError(f"unsupported target {spec!r}; tensorad compiles for 'llvm' (the host CPU), "
                         f"'llvm -mcpu=NAME' or 'llvm -mattr=+feature,-feature'")
    canon = " ".join(spec.split())
    with _PROCESS.lock:
        found = _PROCESS.made.get(canon)
    if found is not None:
        return found
    cpu, mattr = _parse_options(canon)
    made = _make(canon, cpu, mattr)
    with _PROCESS.lock:
        return _PROCESS.made.setdefault(canon, made)


def host_target() -> Target:
    """The CPU this process runs on, with all its features."""
    return parse_target("llvm")


def host_features() -> dict[str, bool]:
    """Every CPU feature LLVM knows for this host's architecture and whether the host has it (or empty)."""
    initialize()
    try:
        return dict(llvm.get_host_cpu_features())
    except RuntimeError:
        return {}


def needed_features(target: Target) -> list[str]:
    """The CPU features (LLVM's names, sorted) that code for ``target`` may use: the host's for
    ``"llvm"``; else those ``-mattr`` switches on and, on x86, those the probe showed (LLVM reports
    neither what a CPU name implies nor what switching a feature off takes); no tuning preferences."""
    known = host_features()
    listed = target.features if target.is_host else ",".join(_parse_options(target.spec)[1])
    # (a later entry overrides an earlier one)
    on = {item[1:]: item[0] == "+" for item in listed.split(",") if len(item) > 1 and item[0] in "+-"}
    need = {f for f, enabled in on.items() if enabled and (not known or f in known)}
    if target.triple.startswith(("x86_64", "i686", "i386")):
        need.update(f for f, used in (("avx512f", target.vector_bits >= 512),
                                      ("avx", target.vector_bits >= 256), ("fma", target.fma),
                                      ("f16c", target.f16c), ("avx512bf16", target.bf16)) if used)
    return sorted(f for f in need if on.get(f, True))


def missing_features(needed: list[str]) -> list[str]:
    """Those of ``needed`` that this host does not have (or that its LLVM does not know)."""
    have = host_features()
    return [f for f in needed if not have.get(f, False)]


def _parse_options(spec: str) -> tuple[str | None, list[str]]:
    words = spec.split()
    if not words or words[0] != "llvm":
        raise ValueError(f"unsupported target {spec!r}; tensorad compiles for 'llvm' (the host CPU), "
                         f"'llvm -mcpu=NAME' or 'llvm -mattr=+feature,-feature'")
    cpu, mattr = None, []
    for w in words[1:]:
        name, eq, value = w.partition("=")
        if not eq or not value:
            raise ValueError(f"target {spec!r}: option {w!r} needs a value (-mcpu=NAME or -mattr=+f,-g)")
        if name == "-mcpu":
            if cpu is not None:
                raise ValueError(f"target {spec!r}: -mcpu is given twice")
            if not re.fullmatch(r"[a-z0-9][a-z0-9.\-_]*", value):
                raise ValueError(f"target {spec!r}: {value!r} is not a CPU name")
            cpu = value
        elif name == "-mattr":
            for f in value.split(","):
                if not _FEATURE.match(f):
                    raise ValueError(f"target {spec!r}: feature {f!r} must be +name or -name")
                mattr.append(f)
        else:
            raise ValueError(f"target {spec!r}: unknown option {name!r} (expected -mcpu or -mattr)")
    return cpu, mattr


def _make(spec: str, cpu: str | None, mattr: list[str]) -> Target:
    initialize()
    host = cpu is None
    if host:
        cpu = llvm.get_host_cpu_name()
        base = llvm.get_host_cpu_features().flatten()
    else:
        base = ""
    features = ",".join(x for x in [base] + mattr if x)
    triple = llvm.get_process_triple()
    x86 = triple.startswith(("x86_64", "i686", "i386"))
    if host and not mattr and x86:  # the host's full feature list answers without a probe
        have = set(base.split(","))
        bits = 512 if "+avx512f" in have else 256 if "+avx" in have else 128
        fma = "+fma" in have
        f16c, bf16 = "+f16c" in have, "+avx512bf16" in have
    else:
        tm = new_target_machine(triple, cpu, features)  # ValueError for an unknown CPU/feature
        asm = tm.emit_assembly(llvm.parse_assembly(_PROBE_IR))
        bits = 512 if "zmm" in asm else 256 if "ymm" in asm else 128
        fma = any(m in asm for m in _FMA_MNEMONICS)
        f16c, bf16 = _half_probe(tm)
    if bits == 512 and not any("prefer-256-bit" in f for f in mattr):
        # LLVM tunes some AVX-512 CPUs for 256-bit vectors; ours use 512 (``+prefer-256-bit``)
        features = f"{features},-prefer-256-bit" if features else "-prefer-256-bit"
    if x86:
        # Vectorize without gathers and scatters (as XLA does) unless ``-mattr=-prefer-no-gather``.
        for tune in ("prefer-no-gather", "prefer-no-scatter"):
            if not any(tune in f for f in mattr):
                features = f"{features},+{tune}" if features else f"+{tune}"
    regs = 32 if bits == 512 or not x86 else 16
    made = Target(spec, triple, cpu, features, bits, regs, fma, is_host=host and not mattr,
                  f16c=f16c, bf16=bf16)
    if host or made.runs_here(host_target()):
        # code that runs on this machine is blocked for the caches it will run with
        l1d, l2, l3 = host_caches()
        line, page = _host_line_and_page()
        made = replace(made, l1d=l1d, l2=l2, l3=l3, line=line, page=page)
    return made


def _half_probe(tm) -> tuple[bool, bool]:
    """Whether ``tm`` converts float16 and bfloat16 with instructions (see ``_HALF_PROBE_IR``)."""
    try:
        asm = tm.emit_assembly(llvm.parse_assembly(_HALF_PROBE_IR))
    except RuntimeError:  # a target LLVM cannot lower this for: integer code is always right
        return False, False
    f16, _, bf = asm.partition("bf16:")
    return any(m in f16 for m in _F16C_MNEMONICS), any(m in bf for m in _BF16_MNEMONICS)


def host_caches() -> tuple[int, int, int]:
    """L1 data, L2 and L3 sizes of CPU 0 (sysfs), the defaults where unknown."""
    found = {}
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for d in sorted(root.glob("index*")):
            kind = (d / "type").read_text().strip()
            level = int((d / "level").read_text())
            size = (d / "size").read_text().strip()
            if kind == "Instruction":
                continue
            mult = {"K": 1024, "M": 1024 * 1024}.get(size[-1:], 1)
            found[level] = int(size.rstrip("KM")) * mult
    except (OSError, ValueError):
        pass
    return tuple(found.get(i + 1, d) for i, d in enumerate(DEFAULT_CACHES))  # type: ignore[return-value]


def _host_line_and_page() -> tuple[int, int]:
    """The cache line (sysfs) and page (``sysconf``) sizes in bytes, the defaults where unknown."""
    line, page = DEFAULT_LINE, DEFAULT_PAGE
    try:
        got = int(Path("/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size").read_text())
        line = got if got > 0 and got & (got - 1) == 0 else line
    except (OSError, ValueError):
        pass
    try:
        got = os.sysconf("SC_PAGE_SIZE")
        page = got if got > 0 and got & (got - 1) == 0 else page
    except (OSError, ValueError, AttributeError):
        pass
    return line, page


def default_num_threads() -> int:
    """Threads a kernel uses by default: ``OMP_NUM_THREADS``'s first entry if set, else the usable CPUs."""
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n >= 1:
            return n
    return usable_cpus()


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
