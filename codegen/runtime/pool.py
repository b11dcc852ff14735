"""tensorad's own parallel runtime: a thread pool whose parallel regions never wait for a thread that has
not started.

``GOMP_parallel``, ``omp_get_thread_num`` and ``omp_get_num_threads`` (what kernels call) are defined in
an LLVM IR module of their own, so the same code runs here or on libgomp (:mod:`.runtime.threads`).  A
region's ``n`` thread numbers are claimed by compare-and-swap from one 64-bit ticket
``generation:32 | n:16 | next:16``: the caller publishes the ticket ``(g + 1, n, 1)``, wakes sleeping
workers (a futex on the generation) and runs number 0; each worker runs the number it claims; the caller
then runs every number not yet claimed and waits only for the claimed ones.  Every number runs exactly
once; a second caller while a region runs, or a caller before any worker has started
(:func:`ensure_workers`), runs all ``n`` numbers itself.  Idle workers and waiting callers spin (the
``*_SPIN_CYCLES`` constants; a worker's spin follows the gaps between regions), then sleep on the futex."""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading

IDLE_SPIN_CYCLES = 400_000  # ~0.15 ms at 3 GHz: back-to-back kernels find the workers awake
MIN_SPIN_CYCLES = 32_000  # ~12 us: past a Python call between back-to-back kernels; then it sleeps
WAIT_SPIN_CYCLES = 200_000  # a running worker's share is normally done within this
MAX_TEAM = 0xFFFF  # the ticket's 16-bit fields

_IR = r"""
@tensorad_pool_ticket = global i64 0, align 64
@tensorad_pool_done = global i32 0, align 64
@tensorad_pool_waiting = global i32 0, align 64
@tensorad_pool_fn = global ptr null, align 64
@tensorad_pool_data = global ptr null, align 8
@tensorad_pool_lock = global i32 0, align 64
@tensorad_pool_sleepers = global i32 0, align 64
@tensorad_pool_stop = global i32 0, align 64
@tensorad_pool_key = global i32 0, align 64

declare i64 @syscall(i64, ...)
declare i32 @pthread_key_create(ptr, ptr)
declare i32 @pthread_setspecific(i32, ptr)
declare ptr @pthread_getspecific(i32)
declare void @llvm.x86.sse2.pause()
declare i64 @llvm.readcyclecounter()

; futex(addr, FUTEX_WAIT_PRIVATE, expected) and futex(addr, FUTEX_WAKE_PRIVATE, count)
define internal void @futex_wait(ptr %addr, i32 %expected) {
  %v = zext i32 %expected to i64
  %r = call i64 (i64, ...) @syscall(i64 202, ptr %addr, i64 128, i64 %v, ptr null)
  ret void
}

define internal void @futex_wake(ptr %addr, i64 %count) {
  %r = call i64 (i64, ...) @syscall(i64 202, ptr %addr, i64 129, i64 %count)
  ret void
}

define i32 @tensorad_pool_init() {
  %r = call i32 @pthread_key_create(ptr @tensorad_pool_key, ptr null)
  ret i32 %r
}

; the team of the body this thread runs, kept per thread: (n - 1) << 16 | tid, so that a thread
; that never set one (0) reads thread 0 of 1
define internal void @set_team(i64 %tid, i64 %n) {
  %key = load i32, ptr @tensorad_pool_key
  %n1 = sub i64 %n, 1
  %hi = shl i64 %n1, 16
  %v = or i64 %hi, %tid
  %p = inttoptr i64 %v to ptr
  %r = call i32 @pthread_setspecific(i32 %key, ptr %p)
  ret void
}

define internal i64 @team() {
  %key = load i32, ptr @tensorad_pool_key
  %p = call ptr @pthread_getspecific(i32 %key)
  %v = ptrtoint ptr %p to i64
  ret i64 %v
}

define i32 @tensorad_pool_thread_num() {
  %v = call i64 @team()
  %t = and i64 %v, 65535
  %r = trunc i64 %t to i32
  ret i32 %r
}

define i32 @tensorad_pool_num_threads() {
  %v = call i64 @team()
  %hi = lshr i64 %v, 16
  %n = add i64 %hi, 1
  %r = trunc i64 %n to i32
  ret i32 %r
}

; run thread numbers [lo, n) of body(data) one after another in this thread
define internal void @run_all(ptr %fn, ptr %data, i64 %lo, i64 %n) {
entry:
  %any = icmp slt i64 %lo, %n
  br i1 %any, label %loop, label %done
loop:
  %t = phi i64 [ %lo, %entry ], [ %t1, %loop ]
  call void @set_team(i64 %t, i64 %n)
  call void %fn(ptr %data)
  %t1 = add i64 %t, 1
  %more = icmp slt i64 %t1, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}

; a ticket's next thread number and its region's count of them
define internal i64 @ticket_next(i64 %t) {
  %next = and i64 %t, 65535
  ret i64 %next
}

define internal i64 @ticket_count(i64 %t) {
  %hi = lshr i64 %t, 16
  %cnt = and i64 %hi, 65535
  ret i64 %cnt
}

; whether a ticket has a thread number left to claim
define internal i1 @ticket_free(i64 %t) {
  %next = call i64 @ticket_next(i64 %t)
  %cnt = call i64 @ticket_count(i64 %t)
  %free = icmp ult i64 %next, %cnt
  ret i1 %free
}

; claim one free thread number of the current region by compare-and-swap: the ticket it was claimed
; from (@ticket_next is the number), -1 when none is left (a claimed ticket's number is below its count)
define internal i64 @claim() {
entry:
  br label %try
try:
  %t = load atomic i64, ptr @tensorad_pool_ticket acquire, align 8
  %free = call i1 @ticket_free(i64 %t)
  br i1 %free, label %cas, label %none
cas:
  %t1 = add i64 %t, 1
  %pair = cmpxchg ptr @tensorad_pool_ticket, i64 %t, i64 %t1 acq_rel acquire, align 8
  %ok = extractvalue { i64, i1 } %pair, 1
  br i1 %ok, label %got, label %try
got:
  ret i64 %t
none:
  ret i64 -1
}

define void @tensorad_pool_parallel(ptr %fn, ptr %data, i32 %nthreads, i32 %flags) {
entry:
  %saved = call i64 @team()
  %n0 = zext i32 %nthreads to i64
  %small = icmp ult i64 %n0, 2
  br i1 %small, label %alone, label %big
alone:
  call void @run_all(ptr %fn, ptr %data, i64 0, i64 1)
  br label %exit
big:
  %over = icmp ugt i64 %n0, 65535
  %n = select i1 %over, i64 65535, i64 %n0
  %lock = cmpxchg ptr @tensorad_pool_lock, i32 0, i32 1 acquire monotonic, align 4
  %mine = extractvalue { i32, i1 } %lock, 1
  br i1 %mine, label %publish, label %serial
serial:
  call void @run_all(ptr %fn, ptr %data, i64 0, i64 %n)
  br label %exit
publish:
  store ptr %fn, ptr @tensorad_pool_fn, align 8
  store ptr %data, ptr @tensorad_pool_data, align 8
  store i32 0, ptr @tensorad_pool_done, align 4
  %old = load atomic i64, ptr @tensorad_pool_ticket monotonic, align 8
  %gen = lshr i64 %old, 32
  %gen1 = add i64 %gen, 1
  %g = shl i64 %gen1, 32
  %c = shl i64 %n, 16
  %gc = or i64 %g, %c
  %ticket = or i64 %gc, 1
  store atomic i64 %ticket, ptr @tensorad_pool_ticket seq_cst, align 8
  %sleeping = load atomic i32, ptr @tensorad_pool_sleepers seq_cst, align 4
  %wake = icmp sgt i32 %sleeping, 0
  br i1 %wake, label %wakeup, label %own
wakeup:
  %genword = getelementptr inbounds i8, ptr @tensorad_pool_ticket, i64 4
  call void @futex_wake(ptr %genword, i64 2147483647)
  br label %own
own:
  call void @set_team(i64 0, i64 %n)
  call void %fn(ptr %data)
  br label %take
take:
  %ran = phi i64 [ 1, %own ], [ %ran1, %runone ]
  %claimed = call i64 @claim()
  %left = icmp ne i64 %claimed, -1
  br i1 %left, label %runone, label %count
runone:
  %tid = call i64 @ticket_next(i64 %claimed)
  call void @set_team(i64 %tid, i64 %n)
  call void %fn(ptr %data)
  %ran1 = add i64 %ran, 1
  br label %take
count:
  %ran32 = trunc i64 %ran to i32
  %n32 = trunc i64 %n to i32
  %before = atomicrmw add ptr @tensorad_pool_done, i32 %ran32 seq_cst, align 4
  %after = add i32 %before, %ran32
  %all = icmp eq i32 %after, %n32
  br i1 %all, label %finish, label %spin0
spin0:
  %t0 = call i64 @llvm.readcyclecounter()
  br label %spin
spin:
  %d = load atomic i32, ptr @tensorad_pool_done acquire, align 4
  %alld = icmp eq i32 %d, %n32
  br i1 %alld, label %finish, label %spinmore
spinmore:
  call void @llvm.x86.sse2.pause()
  %now = call i64 @llvm.readcyclecounter()
  %el = sub i64 %now, %t0
  %short = icmp ult i64 %el, WAIT_SPIN_CYCLES
  br i1 %short, label %spin, label %sleep
sleep:
  store atomic i32 1, ptr @tensorad_pool_waiting seq_cst, align 4
  %d2 = load atomic i32, ptr @tensorad_pool_done seq_cst, align 4
  %all2 = icmp eq i32 %d2, %n32
  br i1 %all2, label %finish, label %block
block:
  call void @futex_wait(ptr @tensorad_pool_done, i32 %d2)
  br label %sleep
finish:
  store atomic i32 0, ptr @tensorad_pool_waiting monotonic, align 4
  store atomic i32 0, ptr @tensorad_pool_lock release, align 4
  br label %exit
exit:
  %key = load i32, ptr @tensorad_pool_key
  %sp = inttoptr i64 %saved to ptr
  %r = call i32 @pthread_setspecific(i32 %key, ptr %sp)
  ret void
}

; tell every worker to return (their threads end); a sleeper's futex sees a new generation
define void @tensorad_pool_stop_all() {
  store atomic i32 1, ptr @tensorad_pool_stop seq_cst, align 4
  %g = atomicrmw add ptr @tensorad_pool_ticket, i64 4294967296 seq_cst, align 8
  %genword = getelementptr inbounds i8, ptr @tensorad_pool_ticket, i64 4
  call void @futex_wake(ptr %genword, i64 2147483647)
  ret void
}

; a worker's life: claim thread numbers of published regions until told to stop.  It spins for its budget,
; then sleeps; woken, it sets the budget from the gap it slept through: twice a gap shorter than
; IDLE_SPIN_CYCLES (a spin that long would have caught the region), else half the budget (down to
; MIN_SPIN_CYCLES), so regions far apart cost it no CPU between them and close ones find it awake
define void @tensorad_pool_work() {
entry:
  br label %idle
idle:
  %budget = phi i64 [ IDLE_SPIN_CYCLES, %entry ], [ %next_budget, %woken ],
                    [ %budget, %run ], [ %budget, %tell ], [ %budget, %wakemaster ]
  %t0 = call i64 @llvm.readcyclecounter()
  br label %poll
poll:
  %t = call i64 @claim()
  %got = icmp ne i64 %t, -1
  br i1 %got, label %run, label %nothing
nothing:
  %stop = load atomic i32, ptr @tensorad_pool_stop monotonic, align 4
  %stopping = icmp ne i32 %stop, 0
  br i1 %stopping, label %quit, label %wait
wait:
  call void @llvm.x86.sse2.pause()
  %now = call i64 @llvm.readcyclecounter()
  %el = sub i64 %now, %t0
  %short = icmp ult i64 %el, %budget
  br i1 %short, label %poll, label %sleep
sleep:
  %s0 = atomicrmw add ptr @tensorad_pool_sleepers, i32 1 seq_cst, align 4
  %t2 = load atomic i64, ptr @tensorad_pool_ticket seq_cst, align 8
  %free2 = call i1 @ticket_free(i64 %t2)
  %stop2 = load atomic i32, ptr @tensorad_pool_stop seq_cst, align 4
  %stopping2 = icmp ne i32 %stop2, 0
  %awake = or i1 %free2, %stopping2
  br i1 %awake, label %woken, label %block
block:
  %genword = getelementptr inbounds i8, ptr @tensorad_pool_ticket, i64 4
  %gen64 = lshr i64 %t2, 32
  %gen = trunc i64 %gen64 to i32
  call void @futex_wait(ptr %genword, i32 %gen)
  br label %woken
woken:
  %s1 = atomicrmw sub ptr @tensorad_pool_sleepers, i32 1 seq_cst, align 4
  %woke = call i64 @llvm.readcyclecounter()
  %gap = sub i64 %woke, %t0
  %gap2 = shl i64 %gap, 1
  %close = icmp ult i64 %gap, IDLE_SPIN_CYCLES
  %half = lshr i64 %budget, 1
  %want = select i1 %close, i64 %gap2, i64 %half
  %over = icmp ugt i64 %want, IDLE_SPIN_CYCLES
  %capped = select i1 %over, i64 IDLE_SPIN_CYCLES, i64 %want
  %under = icmp ult i64 %capped, MIN_SPIN_CYCLES
  %next_budget = select i1 %under, i64 MIN_SPIN_CYCLES, i64 %capped
  br label %idle
run:
  %fn = load ptr, ptr @tensorad_pool_fn, align 8
  %data = load ptr, ptr @tensorad_pool_data, align 8
  %next = call i64 @ticket_next(i64 %t)
  %cnt = call i64 @ticket_count(i64 %t)
  call void @set_team(i64 %next, i64 %cnt)
  call void %fn(ptr %data)
  %cnt32 = trunc i64 %cnt to i32
  %before = atomicrmw add ptr @tensorad_pool_done, i32 1 seq_cst, align 4
  %after = add i32 %before, 1
  %last = icmp eq i32 %after, %cnt32
  br i1 %last, label %tell, label %idle
tell:
  %w = load atomic i32, ptr @tensorad_pool_waiting seq_cst, align 4
  %waits = icmp ne i32 %w, 0
  br i1 %waits, label %wakemaster, label %idle
wakemaster:
  call void @futex_wake(ptr @tensorad_pool_done, i64 1)
  br label %idle
quit:
  ret void
}
"""

SYMBOLS = {"GOMP_parallel": "tensorad_pool_parallel", "omp_get_thread_num": "tensorad_pool_thread_num",
           "omp_get_num_threads": "tensorad_pool_num_threads"}
_GLOBALS = ("ticket", "done", "waiting", "lock", "sleepers", "stop")


class Pool:
    """The process's pool: the linked runtime module's addresses and the worker threads."""

    def __init__(self, addresses: dict[str, int], globals_: dict[str, int]) -> None:
        self.addresses = addresses
        self.globals = globals_
        self._work = ctypes.CFUNCTYPE(None)(addresses["tensorad_pool_work"])
        self._stop_all = ctypes.CFUNCTYPE(None)(addresses["tensorad_pool_stop_all"])
        self._workers: list[threading.Thread] = []
        self._lock = threading.Lock()

    @property
    def workers(self) -> int:
        return len(self._workers)

    def ensure_workers(self, n: int) -> None:
        """At least ``n`` worker threads (``n`` is capped at the team size the ticket holds)."""
        n = min(n, MAX_TEAM - 1)
        if len(self._workers) >= n:
            return
        with self._lock:
            while len(self._workers) < n:
                t = threading.Thread(target=self._work, name=f"tensorad-worker-{len(self._workers)}",
                                   daemon=True)
                t.start()
                self._workers.append(t)

    def stop_workers(self) -> None:
        """End every worker thread (regions run on their callers until :meth:`ensure_workers`)."""
        with self._lock:
            self._stop_all()
            for t in self._workers:
                t.join()
            self._workers = []
            self.word("stop").value = 0

    def word(self, name: str, ctype=ctypes.c_int32):
        """One of the pool's shared words (for tests and the fork handler)."""
        return ctype.from_address(self.globals[name])

    def after_fork(self) -> None:
        """In a forked child: no worker exists and no region is running; as many workers as the parent had
        start (a child forked by a server or a process pool runs regions in parallel as its parent did)."""
        wanted, self._workers = len(self._workers), []
        self._lock = threading.Lock()
        ticket = self.word("ticket", ctypes.c_uint64)
        ticket.value = ticket.value & ~0xFFFF | (ticket.value >> 16) & 0xFFFF  # every number taken
        for name in ("done", "waiting", "lock", "sleepers"):
            self.word(name).value = 0
        try:
            self.ensure_workers(wanted)
        except RuntimeError:  # (no thread can start: regions run on their callers)
            pass


def ir_text() -> str:
    """The runtime module's LLVM IR, with the spin limits filled in."""
    text = _IR
    for name, cycles in (("WAIT", WAIT_SPIN_CYCLES), ("IDLE", IDLE_SPIN_CYCLES), ("MIN", MIN_SPIN_CYCLES)):
        text = text.replace(f"{name}_SPIN_CYCLES", str(cycles))
    return text


def start() -> Pool:
    """Compile and link the runtime module (once per process) and create its thread-number key; the JIT
    then resolves the kernels' ``GOMP_*``/``omp_*`` calls to it."""
    from ..jit import disk_cache as diskcache
    from ..jit import engine as jit

    text, host = ir_text(), jit.host()
    key_text = "\n".join(["pool", host.key, jit.toolchain(), text])
    key = hashlib.sha256(key_text.encode()).hexdigest()
    obj = diskcache.get_object(key, key_text)
    if obj is None:  # (about 35 ms of LLVM: once per machine, not once per process)
        obj = jit.compile_object(text, 1, host)
        diskcache.put_object(key, key_text, obj)
    names = ["tensorad_pool_init", "tensorad_pool_work", "tensorad_pool_stop_all", *SYMBOLS.values()]
    addresses = jit.load_object(obj, names)
    engine = jit.state().engine
    globals_ = {g: engine.get_global_value_address(f"tensorad_pool_{g}") for g in _GLOBALS}
    if ctypes.CFUNCTYPE(ctypes.c_int)(addresses["tensorad_pool_init"])() != 0:
        raise OSError("pthread_key_create failed")
    pool = Pool(addresses, globals_)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=pool.after_fork)
    return pool
