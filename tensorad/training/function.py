"""``ta.function``: a compiled forward that keeps its residuals and a backward that reads them.

    f = ta.function(Y, [X, W], wrt=[W])         # any tensor program; wrt: default every float input
    y = f(x, w)                                 # the forward alone
    y, res = f.forward(x, w)                    # the forward and what the backward needs
    (gw,) = f.backward(res, h)                  # one head per output (None: zero) -> one gradient per wrt

The shape of ``torch.autograd.Function`` and ``jax.custom_vjp``, so the bridges are thin.  The gradient
program is ``sum_k J_k^T head_k``; a checkpoint policy chooses what the forward saves
(:mod:`.training.residuals`).  Arrays are NumPy arrays or ``__dlpack__`` objects; ``out=`` receives the
results in place."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from typing import Any

import numpy as np

from ..autodiff import jacobian_recursive
from ..codegen import Kernel, LoweredFunc, build, lower
from ..codegen.lower import as_tensor_list
from ..codegen.options import Options
from ..codegen.runtime.blocks import BlockCall, Layout
from ..codegen.runtime.kernel import data_address
from ..codegen.strategies.cost import worth_saving
from ..codegen.target import parse_target
from ..diffcache import cached
from ..ir import dtype as dt
from ..ir.dtype import numpy_dtype
from ..ir.rewrite import placeholders
from ..ir.tensor import Tensor
from ..lang import compute, const, placeholder
from ..simplify import Optimizer
from ..topi import add
from .residuals import Policy, ResidualPlan, check_policy, plan_residuals, same_values

# ``build``'s own parameters besides the lowering options: passed to ``build`` only
_BUILD_ONLY = frozenset(inspect.signature(build).parameters) - {"outputs", "inputs", "name", "options",
                                                                "target"}


def _tensor_list(x: Any, what: str) -> list[Tensor]:
    return as_tensor_list(x, f"ta.function: {what}")


def distinct_computes(ts: Sequence[Tensor], suffix: str) -> list[Tensor]:
    """``ts`` with each placeholder or repeated tensor copied by a compute (a kernel's outputs are
    distinct computed tensors)."""
    out: list[Tensor] = []
    for t in ts:
        out.append(compute(t.shape, lambda *i, t=t: t[i] if i else t[()], name=f"{t.name}.{suffix}")
                   if t.is_placeholder or t in out else t)
    return out


def gradients(outputs: Sequence[Tensor], heads: Sequence[Tensor | None], wrt: Sequence[Tensor],
              optimize: bool = True) -> list[Tensor]:
    """``sum_k J_k^T heads[k]`` for each tensor of ``wrt`` (an output whose head is ``None`` adds nothing;
    zeros where none does), each a distinct computed tensor; ``optimize``: by one optimizer, whose terms
    equal across the outputs' adjoints are shared."""
    total: list[Tensor | None] = [None] * len(wrt)
    optimizer = Optimizer() if optimize else None
    for o, h in zip(outputs, heads):
        if h is None or not wrt:
            continue
        parts = jacobian_recursive(o, wrt, h, optimizer=optimizer)
        total = [g if t is None else add(t, g) for t, g in zip(total, parts)]
    if optimizer is not None:
        finished = iter(optimizer.finish([t for t in total if t is not None]))  # (brackets shared late)
        total = [None if t is None else next(finished) for t in total]
    # (zeros for an input that no floating-point output depends on)
    grads = [compute(x.shape, lambda *i, x=x: const(0.0, x.dtype), name=f"{x.name}.grad") if t is None
             else t for x, t in zip(wrt, total)]
    return distinct_computes(grads, "grad")


class Function:
    """A forward/backward pair compiled from ``outputs`` as functions of ``inputs``."""

    def __init__(self, outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor,
                 wrt: Sequence[Tensor] | Tensor | None = None, policy: Policy = "default",
                 **build_options: Any) -> None:
        outs = _tensor_list(outputs, "outputs")
        self.inputs = _tensor_list(inputs, "inputs")
        if not outs:
            raise ValueError("ta.function: no outputs given")
        for x in self.inputs:
            if not x.is_placeholder:
                raise TypeError(f"ta.function: input {x.name!r} is a computed tensor; inputs must be "
                                f"placeholders")
        if len(set(self.inputs)) != len(self.inputs):
            raise ValueError("ta.function: an input is listed twice")
        missing = [p.name for p in placeholders(outs) if p not in set(self.inputs)]
        if missing:
            raise ValueError(f"ta.function: the outputs read placeholder(s) {', '.join(missing)} that "
                             f"are not among the inputs")
        self.outputs = distinct_computes(outs, "out")
        # one output gives one value, whether given as ``Y`` or ``[Y]`` (as a kernel's call)
        self.single = len(self.outputs) == 1
        if wrt is None:
            self.wrt = [x for x in self.inputs if dt.is_float(x.dtype)]
        else:
            self.wrt = _tensor_list(wrt, "wrt")
            for x in self.wrt:
                if x not in set(self.inputs):
                    raise ValueError(f"ta.function: wrt tensor {x.name!r} is not among the inputs")
                if not dt.is_float(x.dtype):
                    raise TypeError(f"ta.function: wrt tensor {x.name!r} has dtype {x.dtype}; only "
                                    f"floating-point inputs have gradients")
        check_policy(policy)
        if "name" in build_options:
            raise TypeError("ta.function: option 'name' is not accepted (the kernels are named "
                            "forward, forward_res and backward)")
        self.build_options = build_options
        self.lower_options = {k: v for k, v in build_options.items() if k not in _BUILD_ONLY}
        Options.make(self.lower_options)  # unknown or bad options fail here, not at the first call
        self.policy = policy

    # ---- the gradient program and the plan (built on first use) ---------------------------
    @cached_property
    def heads(self) -> list[Tensor | None]:
        """One head placeholder per floating-point output (``None`` for an integer output)."""
        return [placeholder(o.shape, o.dtype, f"{o.name}.head") if dt.is_float(o.dtype) else None
                for o in self.outputs]

    @cached_property
    def grads(self) -> list[Tensor]:
        """``sum_k J_k^T head_k`` for each tensor of ``wrt`` (kept in the differentiation
        cache: a new process reads it instead of differentiating again)."""
        heads = [h for h in self.heads if h is not None]
        return cached("function", [self.outputs, self.wrt, heads],
                      tuple(h is not None for h in self.heads), self._differentiate)

    def _differentiate(self) -> list[Tensor]:
        return gradients(self.outputs, self.heads, self.wrt)

    def for_wrt(self, wrt: Sequence[Tensor]) -> Function:
        """The function of the same program and options whose gradients are those of ``wrt`` (inputs)."""
        return Function(self.outputs, self.inputs, wrt, self.policy, **self.build_options)

    @cached_property
    def plan(self) -> ResidualPlan:
        heads = [h for h in self.heads if h is not None]
        target = parse_target(self.build_options.get("target", "llvm"))
        return plan_residuals(self.outputs, self.inputs, heads, self.grads, self.policy,
                              worth=lambda value: worth_saving(value, target))

    @property
    def saved(self) -> tuple[Tensor, ...]:
        """The forward tensors the backward reads instead of recomputing (those of the given
        program, and the values of :mod:`.training.saved_values` that the forward stores for it)."""
        return tuple(self.plan.original.get(t, t) for t in self.plan.saved)

    @property
    def backward_inputs(self) -> list[Tensor]:
        """The backward kernel's inputs, in order: the inputs it reads, the saved values, the heads."""
        return ([self.inputs[i] for i in self.plan.inputs] + list(self.plan.saved)
                + [h for h in self.heads if h is not None])

    @property
    def backward_grads(self) -> list[Tensor]:
        """The gradients as the backward kernel computes them (reading the saved values)."""
        return list(self.plan.grads)

    @cached_property
    def forward_kernel(self) -> Kernel:
        return build(self.outputs, self.inputs, name="forward", **self.build_options)

    @cached_property
    def _copied(self) -> dict[int, int]:
        """``{output k: extra j}`` for outputs whose values a saved extra holds (a max pool
        and its winner's maximum): the forward with residuals computes them once and copies."""
        holder = {k: next((j for j, e in enumerate(self.plan.extras) if same_values(o, e)), None)
                  for k, o in enumerate(self.plan.outputs)}
        return {k: j for k, j in holder.items() if j is not None}

    @cached_property
    def _copied_in_order(self) -> list[tuple[int, int]]:
        return sorted(self._copied.items())

    def _residual_outputs(self) -> list[Tensor]:
        return ([o for k, o in enumerate(self.plan.outputs) if k not in self._copied]
                + list(self.plan.extras))

    @cached_property
    def residual_kernel(self) -> Kernel:
        """The forward that also computes the saved tensors that are not outputs (an output
        that one of them holds is copied from it, not computed again: see ``forward_block``)."""
        if not self.plan.extras:
            return self.forward_kernel
        return build(self._residual_outputs(), self.inputs, name="forward_res", **self.build_options)

    @cached_property
    def backward_kernel(self) -> Kernel:
        return build(self.backward_grads, self.backward_inputs, name="backward", **self.build_options)

    def lower_forward(self) -> LoweredFunc:
        """The forward-with-residuals loop program (``.work``: its work)."""
        return lower(self._residual_outputs(), self.inputs, **self.lower_options)

    def lower_backward(self) -> LoweredFunc:
        """The backward's loop program (``.work``: its work, without the saved reductions)."""
        return lower(self.backward_grads, self.backward_inputs, **self.lower_options)

    @cached_property
    def layout(self) -> Layout:
        """Where a forward keeps the saved values that are not outputs: one block per call."""
        kernel = self.residual_kernel
        outs = kernel.signature.outputs
        return Layout([(s, d) for _, s, d in outs[len(outs) - len(self.plan.extras):]], kernel.line)

    @cached_property
    def _forward_call(self) -> BlockCall:
        """The forward with residuals writing the saved values that are not outputs into a block."""
        sig = self.residual_kernel.signature
        first = len(sig.inputs) + len(sig.outputs) - len(self.plan.extras)
        offsets = self.layout.offsets.tolist()
        return BlockCall(self.residual_kernel, {first + j: off for j, off in enumerate(offsets)},
                         self.layout if offsets else None)

    @cached_property
    def _picks(self) -> list[int]:
        """The positions in ``(*outputs, *inputs)`` of the residuals that are not in the block."""
        n = len(self.outputs)
        return [j if kind == "output" else n + j for kind, j in self.plan.sources if kind != "extra"]

    @cached_property
    def _head_specs(self) -> list[tuple | None]:
        """Per output, its head's shape, NumPy dtype and whether a number may stand for it (``None``:
        an integer output, which has no head)."""
        return [None if ph is None else
                (tuple(ph.shape), numpy_dtype(ph.dtype), ph.shape == () and not dt.is_half(ph.dtype))
                for ph in self.heads]

    @cached_property
    def _backward_call(self) -> tuple[BlockCall, list[bool]]:
        """The backward reading the saved values that are not outputs from the forward's block, and
        which of its arrays need no check (the outputs its forward made)."""
        sources = self.plan.sources
        offsets = self.layout.offsets.tolist()
        reads = {k: offsets[j] for k, (kind, j) in enumerate(sources) if kind == "extra"}
        known = [kind == "output" for kind, _ in sources if kind != "extra"]
        known += [False] * sum(h is not None for h in self.heads)
        return BlockCall(self.backward_kernel, reads), known

    def __call__(self, *arrays: Any, out: Any = None) -> Any:
        return self.forward_kernel(*arrays, out=out)

    def forward(self, *arrays: Any) -> tuple[Any, Residuals]:
        """``(outputs, residuals)``: outputs as ``f(*arrays)`` returns them."""
        outs, block = self.forward_block(*arrays)
        return (outs[0] if self.single else tuple(outs)), self.residuals_of(arrays, outs, block)

    def forward_block(self, *arrays: Any) -> tuple[list, np.ndarray | None]:
        """New outputs (a list), and the block of the saved values that are not outputs (``None``
        where there are none): bytes laid out as :attr:`layout` says."""
        outs, block = self._forward_call(arrays)
        for k, j in self._copied_in_order:
            outs.insert(k, np.array(self.layout.view(block, j), copy=True))
        return outs, block

    def residuals_of(self, arrays: Sequence, outs: Sequence, block: np.ndarray | None) -> Residuals:
        """The residuals of a forward on ``arrays`` that returned ``outs`` and ``block``
        (:meth:`forward_block`); an entry of ``arrays`` or ``outs`` the backward does not read may be
        ``None``."""
        pool = (*outs, *arrays)
        return Residuals(self, list(map(pool.__getitem__, self._picks)), block)

    def backward(self, residuals: Sequence, *heads: Any, out: Sequence | None = None) -> tuple:
        """One gradient per ``wrt`` tensor (a tuple), from ``forward``'s residuals and one head per output."""
        specs = self._head_specs
        if len(heads) != len(specs):
            raise ValueError(f"backward takes one head per output ({len(specs)}), got {len(heads)}")
        ours = type(residuals) is Residuals and residuals.maker is self
        if not ours and (not isinstance(residuals, (tuple, list, Residuals))
                         or len(residuals) != len(self.plan.sources)):
            raise ValueError(f"backward: residuals must be the {len(self.plan.sources)} values that "
                             f"forward returned")
        if not self.wrt:
            return ()
        given = [head_array(h, spec) for h, spec in zip(heads, specs) if spec is not None]
        if out is None and ours:
            call, known = self._backward_call
            res, _ = call([*residuals.arrays, *given], residuals.block, known)
            return tuple(res)
        res = self.backward_kernel.call((*residuals, *given), out=out)
        return res if isinstance(res, tuple) else (res,)


class Residuals(Sequence):
    """What ``forward`` returns for ``backward``: the saved values, a sequence of arrays.  Those the
    forward computed besides its outputs live in one block (``block``: views of it are made on first
    access, and keep it whole), the others are ``arrays``, in order; the backward of the function that
    made them (``maker``) reads the block itself and checks only the inputs among them.  A copy or a
    pickle is a plain tuple."""

    def __init__(self, maker: Function, arrays: list, block: np.ndarray | None) -> None:
        self.maker, self.arrays, self.block = maker, arrays, block
        self._values: tuple | None = None

    @classmethod
    def received(cls, maker: Function, arrays: list, block: np.ndarray | None) -> Residuals:
        """Residuals passed through a framework: ``block`` (bytes of the size of ``maker``'s layout) moved
        to a new block when its start is not on the layout's boundary."""
        layout = maker.layout
        if block is not None:
            if not (isinstance(block, np.ndarray) and block.dtype == np.uint8
                    and block.shape == (layout.nbytes,)):
                raise ValueError(f"backward: the saved values' block must be {layout.nbytes} bytes")
            if data_address(block) % layout.align or not block.flags.c_contiguous:
                moved = layout.new()
                moved[...] = block
                block = moved
        return cls(maker, arrays, block)

    @property
    def values(self) -> tuple:
        """The residuals as a tuple of arrays, those in the block viewed."""
        if self._values is None:
            f = self.maker
            views = f.layout.views(self.block) if self.block is not None else []
            arrays = iter(self.arrays)
            self._values = tuple(views[j] if kind == "extra" else next(arrays) for kind, j in f.plan.sources)
        return self._values

    def __len__(self) -> int:
        return len(self.maker.plan.sources)

    def __getitem__(self, k: Any) -> Any:
        return self.values[k]

    def __iter__(self) -> Iterator:
        return iter(self.values)

    def __reduce__(self) -> tuple:
        return tuple, (self.values,)


def head_array(h: Any, spec: tuple) -> Any:
    """The head ``h`` of an output whose head is ``spec`` (:attr:`Function._head_specs`): zeros for
    ``None``; a 0-d head given as a Python or NumPy number or a 0-d array of another dtype, as the head's
    array (a scalar loss's ``1.0``); any other head as given (the kernel checks it)."""
    shape, dtype, scalar = spec
    if h is None:
        return np.zeros(shape, dtype)
    if scalar and ((isinstance(h, (int, float, np.integer, np.floating)) and not isinstance(h, bool))
                   or (isinstance(h, np.ndarray) and h.ndim == 0)):
        return np.asarray(h, dtype=dtype)
    return h


class ValueAndGrad:
    """``ta.value_and_grad(loss, params)``: a callable returning a scalar loss and its gradients by
    ``params`` (a function made by ``make``, :attr:`function`, with the head 1), taking arrays for
    :attr:`inputs` (default: the placeholders the loss reads, in :func:`tensorad.ir.placeholders`' order).
    ``make`` is :class:`Function`, or the facade's ``ta.function``, which binds a symbolic loss's sizes
    at each call's arrays."""

    def __init__(self, loss: Tensor, params: Sequence[Tensor] | Tensor,
                 inputs: Sequence[Tensor] | Tensor | None = None, policy: Policy = "default",
                 make: Callable[..., Any] = Function, **build_options: Any) -> None:
        if not isinstance(loss, Tensor) or loss.shape != ():
            shape = getattr(loss, "shape", None)
            raise ValueError(f"ta.value_and_grad: the loss must be a 0-d tensor (a scalar), got shape "
                             f"{shape}; reduce it first (ta.topi.sum or ta.topi.mean)")
        self.inputs = _tensor_list(placeholders([loss]) if inputs is None else inputs, "inputs")
        self.function = make(loss, self.inputs, params, policy, **build_options)

    def __call__(self, *arrays: Any) -> tuple[Any, tuple]:
        """``(loss, gradients)``: the loss's value and one gradient per parameter."""
        value, residuals = self.function.forward(*arrays)
        return value, self.function.backward(residuals, 1.0)
