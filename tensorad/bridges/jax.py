"""``ta.jax.function``: a tensorad program as a JAX function, differentiable to any order.

    conv = ta.jax.function(Y, [X, W])
    y = jax.jit(conv)(x, w)          # jit, grad, jvp, vmap, hessian compose as with any JAX function

    @ta.jax.op                       # the same, compiled for each call's shapes (JaxOp)
    def dense_relu(X, W, B):
        return ta.topi.nn.relu(ta.topi.nn.dense(X, W, B))

Each call is one JAX primitive, ``tensorad_call``, whose parameter is a :class:`Program`, with tensorad's
own rules: evaluation by the program's kernel (``jax.pure_callback`` under ``jit``); JVP by forward mode
(``sum_j J_j . t_j``); transpose by reverse mode (``J^T head``); vmap as one program with a leading batch
axis (:mod:`tensorad.lang.batching`).  Every derived program is again a ``Program``, so every order
differentiates tensorad's own derivatives.  First order keeps :class:`tensorad.training.function.Function`'s
residuals (the JVP runs the forward that saves them, the transpose the backward that reads them); saved
values are operands that do not count for differentiation, so higher orders stay exact.  Importing this
module imports JAX; ``import tensorad`` does not."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from ..autodiff import jvp as _jvp
from ..codegen.runtime.kernel import as_array
from ..ir import dtype as dt
from ..ir.tensor import Tensor
from ..lang import placeholder
from ..lang.batching import batch_program
from ..simplify import Optimizer
from ..symbolic import per_size
from ..training.function import Function, Residuals, distinct_computes
from ..training.residuals import Policy
from .signatures import DEFAULT_MAX_SIGNATURES, SignatureCache, SignatureOp, static_key


class Program:
    """``outputs`` as a function of the placeholders ``free``, run by one kernel.  ``linear``: positions
    in ``free`` in which the program is linear (JAX may transpose there). ``frozen``: positions that carry
    no derivative (outside the user's ``wrt``).  Operands after ``free`` are saved forward values the kernel
    may read but the mathematics does not depend on. ``run``: the kernel on all operands (default: built
    over ``free``).  ``block``: the bytes of one more output after ``outputs``, the block of the saved values
    a forward keeps (:attr:`Function.layout`), ``0`` for none.  ``jvp_rule``/``transpose_rule`` replace the
    generic rules."""

    def __init__(self, outputs: Sequence[Tensor], free: Sequence[Tensor], build_options: dict,
                 linear: Sequence[int] = (), run: Callable | None = None, policy: Policy = "default",
                 frozen: frozenset[int] = frozenset(), block: int = 0) -> None:
        self.outputs = distinct_computes(list(outputs), "out")
        self.free = list(free)
        self.linear = frozenset(linear)
        self.frozen, self.block = frozen, block
        self.build_options, self.policy = build_options, policy
        self._run = run
        self.avals = [jax.core.ShapedArray(tuple(o.shape), np.dtype(o.dtype)) for o in self.outputs]
        self.avals += [jax.core.ShapedArray((block,), np.uint8)] * bool(block)
        self._kernel = None
        self._derived: dict[Any, Program] = {}
        self.jvp_rule: Callable | None = None
        self.transpose_rule: Callable | None = None

    def run(self, *arrays: np.ndarray) -> list[np.ndarray]:
        if self._run is not None:
            return self._run(*arrays)
        if self._kernel is None:
            from ..codegen import build

            self._kernel = build(self.outputs, self.free, name="jax_call", **self.build_options)
        return _listed(self._kernel(*arrays[:len(self.free)]))

    def _cached(self, key: Any, make: Callable[[], Program]) -> Program:
        found = self._derived.get(key)
        if found is None:
            found = self._derived[key] = make()
        return found

    def jvp_program(self, mask: tuple[bool, ...]) -> Program:
        """``sum_j J_j t_j`` over the inputs flagged in ``mask``: a program of ``free`` and one
        tangent per flagged input, linear in the tangents (one output per float output)."""
        def make() -> Program:
            xs = [x for x, m in zip(self.free, mask) if m]
            ts = [placeholder(x.shape, x.dtype, f"{x.name}.dot") for x in xs]
            optimizer = Optimizer()
            outs = optimizer.finish([_jvp(o, xs, ts, optimizer=optimizer)  # the facade's last step too
                                     for o in self.outputs if dt.is_float(o.dtype)])
            n = len(self.free)
            return Program(outs, self.free + ts, self.build_options, range(n, n + len(ts)),
                           policy=self.policy, frozen=self.frozen)
        return self._cached(("jvp", mask), make)

    def transpose_program(self, needed: tuple[bool, ...]) -> Program:
        """``J^T head`` for the inputs flagged in ``needed``: a program of ``free`` and the float heads."""
        def make() -> Program:
            wrt = [x for x, m in zip(self.free, needed) if m]
            fn = Function(self.outputs, self.free, wrt, self.policy, **self.build_options)
            heads = [h for h in fn.heads if h is not None]
            n = len(self.free)
            return Program(fn.grads, self.free + heads, self.build_options, range(n, n + len(heads)),
                           policy=self.policy, frozen=self.frozen)
        return self._cached(("transpose", needed), make)

    def batched(self, size: int, mask: tuple[bool, ...]) -> Program:
        """The program over a batch of ``size`` (leading axis) of the inputs flagged in ``mask``."""
        def make() -> Program:
            outs, free = batch_program(self.outputs, self.free, mask, size)
            return Program(outs, free, self.build_options, self.linear, policy=self.policy,
                           frozen=self.frozen)
        return self._cached(("batch", size, mask), make)


call_p = Primitive("tensorad_call")
call_p.multiple_results = True


def _bind(program: Program, *operands: Any) -> list:
    return call_p.bind(*operands, program=program)


def _lowering(*operands: Any, program: Program) -> list:
    return jax.pure_callback(program.run, program.avals, *operands, vmap_method="sequential")


def _zero_like(aval: Any) -> ad.Zero:
    return ad.Zero(aval.to_tangent_aval())


def _float_mask(program: Program, tangents: Sequence[Any]) -> tuple[bool, ...]:
    return tuple(type(t) is not ad.Zero and dt.is_float(x.dtype) and k not in program.frozen
                 for k, (x, t) in enumerate(zip(program.free, tangents)))


def _tangents_out(program: Program, float_tangents: list) -> list:
    it = iter(float_tangents)
    return [next(it) if dt.is_float(o.dtype) else _zero_like(a)
            for o, a in zip(program.outputs, program.avals)]


def _jvp_rule(primals: Sequence[Any], tangents: Sequence[Any], *, program: Program):
    if program.jvp_rule is not None:
        return program.jvp_rule(primals, tangents)
    n = len(program.free)
    mask = _float_mask(program, tangents[:n])  # saved operands: no derivative of their own
    outs = _bind(program, *primals)
    if not any(mask):
        return outs, [_zero_like(a) for a in program.avals]
    jp = program.jvp_program(mask)
    ts = [t for t, m in zip(tangents[:n], mask) if m]
    return outs, _tangents_out(program, _bind(jp, *primals[:n], *ts))


def _transpose_rule(cts: Sequence[Any], *operands: Any, program: Program):
    n = len(program.free)
    undefined = tuple(ad.is_undefined_primal(a) for a in operands)
    if any(u and k not in program.linear for k, u in enumerate(undefined)):
        raise NotImplementedError("tensorad: a program was transposed in an input it is not linear in")
    if program.transpose_rule is not None:
        return program.transpose_rule(cts, operands, undefined)
    tp = program.transpose_program(undefined[:n])
    # the transpose of a linear map does not depend on the point: zeros for the linear inputs
    values = [np.zeros(a.aval.shape, a.aval.dtype) if u else a for a, u in zip(operands[:n], undefined)]
    heads = [_instantiate(c, a) for c, o, a in zip(cts, program.outputs, program.avals)
             if dt.is_float(o.dtype)]
    grads = iter(_bind(tp, *values, *heads))
    return [next(grads) if u else None for u in undefined]


def _instantiate(ct: Any, aval: Any) -> Any:
    return np.zeros(aval.shape, aval.dtype) if type(ct) is ad.Zero else ct


def _batch_rule(operands: Sequence[Any], dims: Sequence[Any], *, program: Program):
    n = len(program.free)
    size = next(a.shape[d] for a, d in zip(operands, dims) if d is not None)
    mask = tuple(d is not None for d in dims[:n])
    # the batched program recomputes what saved operands held: only the free ones are passed
    moved = [a if d is None else jax.numpy.moveaxis(a, d, 0) for a, d in zip(operands[:n], dims[:n])]
    bp = program.batched(size, mask)
    outs = _bind(bp, *moved)
    dims = [0 if tuple(b.shape) != tuple(o.shape) else None for b, o in zip(bp.outputs, program.outputs)]
    if program.block:  # (saved values: a batched program recomputes what they hold, never reads them)
        return [*outs, jax.numpy.zeros(program.block, np.uint8)], [*dims, None]
    return outs, dims


call_p.def_impl(lambda *operands, program: [jax.numpy.asarray(r)
                                            for r in program.run(*(np.asarray(a) for a in operands))])
call_p.def_abstract_eval(lambda *operands, program: program.avals)
mlir.register_lowering(call_p, mlir.lower_fun(_lowering, multiple_results=True))
ad.primitive_jvps[call_p] = _jvp_rule
ad.primitive_transposes[call_p] = _transpose_rule
batching.primitive_batchers[call_p] = _batch_rule


# ---- the user's function: first order with residuals -----------------------------------------
class _Level:
    """The first-order forms of a function for one set of differentiated inputs: the forward that also
    computes the saved values, the tangent program, and the backward reading them."""

    def __init__(self, base: Program, fn: Function, mask: tuple[bool, ...]) -> None:
        self.fn, self.mask = fn, mask
        n_out = len(fn.outputs)
        has_block = bool(fn.plan.extras)  # (the saved values that are not outputs: one block of bytes)

        def forward(*a: Any) -> list:
            outs, block = fn.forward_block(*a)
            return outs + [block] * has_block
        self.forward = Program(fn.outputs, fn.inputs, base.build_options, run=forward, policy=base.policy,
                               block=fn.layout.nbytes if has_block else 0)
        self.forward.jvp_rule = lambda p, t: self._forward_jvp(base, n_out, p, t)
        tangent = base.jvp_program(mask)
        self.tangent = Program(tangent.outputs, tangent.free, base.build_options, tangent.linear,
                               run=tangent.run, policy=base.policy, frozen=base.frozen)
        self.tangent._derived = tangent._derived  # its derivatives are the recomputing program's
        self.tangent.transpose_rule = self._tangent_transpose
        full = base.transpose_program(mask)
        n_free = len(full.free)
        n_in = len(fn.inputs)

        def backward(*a: Any) -> list:
            given = iter(a[n_in:n_free])  # a head per float output, None for another
            # the residual arrays, then the block, as NumPy views (the backward reads unchecked those
            # its forward made)
            saved = [as_array(x, "saved value") for x in a[n_free:]]
            block = saved.pop() if has_block else None
            residuals = Residuals.received(fn, saved, block)
            return list(fn.backward(residuals, *(next(given) if ph is not None else None for ph in fn.heads)))
        self.backward = Program(full.outputs, full.free, base.build_options, full.linear,
                                policy=base.policy, run=backward, frozen=base.frozen)
        self.backward._derived = full._derived

    def _forward_jvp(self, base: Program, n_out: int, primals: Sequence[Any], tangents: Sequence[Any]):
        """Outputs: the function's tangents; saved values: none (see the module docstring)."""
        values = _bind(self.forward, *primals)
        mask = _float_mask(base, tangents)
        extras = [_zero_like(a) for a in self.forward.avals[n_out:]]
        if not any(mask):
            return values, [_zero_like(a) for a in base.avals] + extras
        ts = [t for t, m in zip(tangents, mask) if m]
        tans = _bind(base.jvp_program(mask), *primals, *ts)
        return values, _tangents_out(base, tans) + extras

    def _tangent_transpose(self, cts: Sequence[Any], operands: Sequence[Any], undefined: Sequence[bool]):
        n_in = len(self.fn.inputs)
        inputs = operands[:n_in]
        saved = operands[len(self.tangent.free):]
        heads = [_instantiate(c, a) for c, a in zip(cts, self.tangent.avals)]
        ins = [np.zeros(a.aval.shape, a.aval.dtype) if ad.is_undefined_primal(a) else a for a in inputs]
        grads = iter(_bind(self.backward, *ins, *heads, *saved))
        return [next(grads) if u else None for u in undefined]


def _listed(res: Any) -> list:
    return list(res) if isinstance(res, tuple) else [res]


class JaxFunction:
    """A callable on JAX arrays (see the module docstring); ``.function``: the :class:`Function` behind it."""

    def __init__(self, outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor,
                 wrt: Sequence[Tensor] | Tensor | None = None, policy: Policy = "default",
                 function: Function | None = None, **build_options: Any) -> None:
        self.function = f = Function(outputs, inputs, wrt, policy, **build_options) if function is None \
            else function
        wrt_set = set(f.wrt)
        frozen = frozenset(k for k, x in enumerate(f.inputs) if x not in wrt_set)
        self.base = Program(f.outputs, f.inputs, build_options, policy=policy, frozen=frozen,
                            run=lambda *a: _listed(f.forward_kernel(*a)))
        self.base.jvp_rule = self._jvp
        self._levels: dict[tuple[bool, ...], _Level] = {}

    def _jvp(self, primals: Sequence[Any], tangents: Sequence[Any]):
        f = self.function
        mask = _float_mask(self.base, tangents)
        if not any(mask):
            return _bind(self.base, *primals), [_zero_like(a) for a in self.base.avals]
        level = self._levels.get(mask)
        if level is None:
            fn = f.for_wrt([x for x, m in zip(f.inputs, mask) if m])
            level = self._levels[mask] = _Level(self.base, fn, mask)
        n = len(f.outputs)
        values = _bind(level.forward, *primals)
        outs, block = values[:n], values[n:]
        saved = level.fn.residuals_of(primals, outs, None).arrays + block
        ts = [t for t, m in zip(tangents, mask) if m]
        tans = _bind(level.tangent, *primals, *ts, *saved)
        return outs, _tangents_out(self.base, tans)

    def __call__(self, *arrays: Any) -> Any:
        f = self.function
        check_x64(f.inputs + f.outputs, "this tensorad function")
        if len(arrays) != len(f.inputs):
            names = ", ".join(x.name for x in f.inputs)
            raise TypeError(f"function takes {len(f.inputs)} arrays ({names}), got {len(arrays)}")
        for a, x in zip(arrays, f.inputs):
            if not hasattr(a, "shape") or not hasattr(a, "dtype"):
                a = np.asarray(a)
            shape, dtype = tuple(a.shape), np.dtype(a.dtype)
            if dtype != np.dtype(x.dtype):
                raise TypeError(f"input {x.name}: expected dtype {x.dtype}, got {dtype}")
            if shape != tuple(x.shape):
                raise ValueError(f"input {x.name}: expected shape {list(x.shape)}, got {list(shape)}")
        outs = _bind(self.base, *arrays)
        return outs[0] if f.single else tuple(outs)


def check_x64(tensors: Sequence[Tensor], what: str) -> None:
    """A clear error where a 64-bit dtype meets JAX without 64-bit mode (JAX would make it 32-bit)."""
    wide = sorted({t.dtype for t in tensors if np.dtype(t.dtype).itemsize == 8
                   and jax.dtypes.canonicalize_dtype(np.dtype(t.dtype)) != np.dtype(t.dtype)})
    if wide:
        raise TypeError(f"{what} computes in {', '.join(wide)}, but JAX's 64-bit mode is off (JAX "
                        f"makes 64-bit arrays 32-bit): call jax.config.update(\"jax_enable_x64\", "
                        f"True) at startup, or use float32")


def _hold_programs_weakly() -> None:
    """List :class:`Program` among JAX's weakly held key types (its internal list, as for jaxprs), so that
    a program and its kernels live as long as their function or a jitted computation, not as long as JAX's
    caches; where a release lacks the list, those caches' bounds apply."""
    from jax._src import util

    weak = getattr(util, "weakref_cache_key_types", None)
    if isinstance(weak, set):
        weak.add(Program)


_hold_programs_weakly()


def function(outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor,
             wrt: Sequence[Tensor] | Tensor | None = None, **options: Any) -> JaxFunction:
    """``ta.jax.function`` (API.md section 6): options are ``ta.function``'s and ``ta.build``'s.  A
    symbolic program gives one function per size its arrays' shapes give, each running the kernels of
    one ``ta.function`` of the program, built once (``tensorad.symbolic``)."""
    return per_size(lambda o, i, w, **given: JaxFunction(o, i, w, **options, **given), outputs, inputs, wrt,
                    "ta.jax.function", **options)


# ---- ta.jax.op: a decorated function compiled per signature ----------------------------------
class JaxOp(SignatureOp):
    """``fn`` (tensorad over placeholders) as a JAX function on arrays of any shapes: one
    :class:`JaxFunction` per signature (shapes, JAX dtypes, static keyword values), made on its first call
    (or trace), kept in a bounded LRU cache (``signatures``).  A 64-bit program needs ``jax_enable_x64``."""

    bridge = "ta.jax.op"
    signatures: SignatureCache[JaxFunction]

    def __call__(self, *arrays: Any, **static: Any) -> Any:
        arrays = tuple(a if hasattr(a, "shape") and hasattr(a, "dtype") else np.asarray(a) for a in arrays)
        signature = self.signature(arrays)
        key = (signature, static_key(static))
        arrays = tuple(jax.numpy.asarray(a, dtype) for a, (_, dtype) in zip(arrays, signature))
        out = self.call_family(key, static, *arrays)
        if out is not NotImplemented:
            return out
        return self.signatures.get(key, lambda: self.make(signature, static))(*arrays)

    def signature(self, arrays: Sequence[Any]) -> tuple:
        """The shapes and dtypes (as JAX holds them: float64 is float32 without 64-bit mode)."""
        return tuple((tuple(a.shape), str(jax.dtypes.canonicalize_dtype(a.dtype))) for a in arrays)


JaxOp.build_function = staticmethod(function)


def op(fn: Callable | None = None, *, max_signatures: int = DEFAULT_MAX_SIGNATURES,
       dynamic: bool | None = None, policy: Policy = "default",
       **build_options: Any) -> JaxOp | Callable[[Callable], JaxOp]:
    """``@ta.jax.op`` or ``@ta.jax.op(num_threads=2, ...)``: ``fn`` receives placeholders with the arrays'
    shapes and dtypes (keyword arguments as static values) and returns tensors; see :class:`JaxOp`.
    ``dynamic`` is ``ta.torch.op``'s: which signatures share one trace over size variables (``jax.jit``
    still traces each shape)."""
    def wrap(f: Callable) -> JaxOp:
        return JaxOp(f, max_signatures=max_signatures, dynamic=dynamic, policy=policy, **build_options)
    return wrap if fn is None else wrap(fn)
