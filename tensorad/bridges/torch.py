"""``ta.torch.function``: a tensorad program as a PyTorch operator with autograd.

    conv = ta.torch.function(Y, [X, W])      # Y: a tensor program over placeholders X, W
    y = conv(x, w)                           # torch tensors in, torch tensors out; y.backward() works

    @ta.torch.op                             # the same, compiled for each call's shapes (TorchOp)
    def dense_relu(X, W, B):
        return ta.topi.nn.relu(ta.topi.nn.dense(X, W, B))

Each function registers ``tensorad::forward(key, args)`` (the outputs, then one byte tensor of the saved
values that are not outputs) and ``tensorad::backward(key, args)`` with ``torch.library.custom_op``, with
fake implementations for ``torch.compile(fullgraph=True)`` and ``register_autograd`` for eager autograd,
``torch.func`` and AOTAutograd (:class:`tensorad.training.function.Function`'s forward/backward).  ``key``
names the pair in a registry that holds the function weakly.  An eager call under no ``torch.func``
transform runs the kernels on NumPy views of the tensors instead (their dispatch costs more than a small
program's kernels), saving the block for its backward without returning it.  A backward under
``create_graph=True`` runs the gradient program as a tensorad function of its own, differentiable again.
Kernels use the CPU tensors' memory (no copies).  Importing this module imports torch (not Dynamo);
``import tensorad`` does not."""

from __future__ import annotations

import itertools
import operator
import sys
import weakref
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

import numpy as np
import torch

from ..ir.dtype import ALL_DTYPES, numpy_dtype
from ..ir.rewrite import placeholders
from ..ir.tensor import Tensor
from ..symbolic import per_size
from ..training.function import Function, Residuals
from ..training.residuals import Policy
from .signatures import DEFAULT_MAX_SIGNATURES, SignatureCache, SignatureOp, static_key

BFLOAT16 = numpy_dtype("bfloat16")
_SERIAL = itertools.count()  # names in messages only: tensorad::fn0, fn1, ... (never changes a result)
_KEYS = itertools.count()  # operator pairs' keys, never reused (a compiled graph holds one)
# the live operator pairs by key, held weakly: a pair lives as long as its function or a graph using it
_LIVE: weakref.WeakValueDictionary[int, _Operator] = weakref.WeakValueDictionary()


def torch_dtype(dtype: str) -> torch.dtype:
    found = getattr(torch, dtype, None)
    if not isinstance(found, torch.dtype):
        raise TypeError(f"tensorad dtype {dtype} has no torch equivalent")
    return found


class TorchFunction:
    """A callable on torch tensors (the module docstring); ``.function`` is the tensorad :class:`Function`
    behind it.  A call computes only what its inputs' ``requires_grad`` asks for: an operator pair per set
    of inputs needing gradients, built on first use."""

    def __init__(self, outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor,
                 wrt: Sequence[Tensor] | Tensor | None = None, policy: Policy = "default",
                 function: Function | None = None, **build_options: Any) -> None:
        self.function = fn = Function(outputs, inputs, wrt, policy, **build_options) if function is None \
            else function
        self._outputs, self._wrt = outputs, wrt
        self.policy, self.build_options = policy, build_options
        self._in_specs = [(tuple(x.shape), torch_dtype(x.dtype)) for x in fn.inputs]
        self._wrt_pos = [fn.inputs.index(x) for x in fn.wrt]
        self.name = f"tensorad::fn{next(_SERIAL)}"
        self._operators: dict[tuple[bool, ...], _Operator] = {}
        # made now, not while torch.compile traces a call: all gradients, and none (inference)
        self._full = self.operator()
        self.operator([False] * len(fn.wrt))

    def __reduce__(self) -> tuple:
        """Pickled as its definition (``torch.save`` of a module holding it): loading registers
        operators of its own (the registered ones belong to this process)."""
        return _rebuild, (self._outputs, self.function.inputs, self._wrt, self.policy, self.build_options)

    def __deepcopy__(self, memo: dict) -> TorchFunction:
        """Itself: a function holds no state a copy could change (as ``torch.nn.functional``)."""
        return self

    def operator(self, needs: Sequence[bool] | None = None) -> _Operator:
        """The operator pair computing the gradients of the ``wrt`` tensors ``needs`` flags (default: all)."""
        mask = tuple(needs) if needs is not None else (True,) * len(self.function.wrt)
        op = self._operators.get(mask)
        if op is None:
            f = self.function
            wrt = [x for x, m in zip(f.wrt, mask) if m]
            fn = f if all(mask) else f.for_wrt(wrt)
            suffix = "".join("1" if m else "0" for m in mask)
            op = _Operator(fn, f"{self.name}_{suffix}", self.policy, self.build_options)
            self._operators[mask] = op
        return op

    def __call__(self, *tensors: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        self._check(tensors)
        grad = torch.is_grad_enabled()
        mask = tuple(grad and tensors[k].requires_grad for k in self._wrt_pos)
        # kernels read memory row-major: a strided or channels-last tensor is copied first
        tensors = tuple(t if t.is_contiguous() else t.contiguous() for t in tensors)
        if torch.compiler.is_compiling():  # the custom op and its registered autograd formula
            op = self._operators.get(mask, self._full)  # making a Function is not traceable
            outs = op.forward_op(list(tensors))
        elif _transforms_active is None or _transforms_active() or (arrays := _numpy_views(tensors)) is None:
            outs = _Apply.apply(self.operator(mask), *tensors)  # (the form torch.func transforms accept)
        else:
            outs = _ApplyEager.apply(self.operator(mask), arrays, *tensors)
        outs = outs[:len(self.function.outputs)]
        return outs[0] if self.function.single else tuple(outs)

    def _check(self, tensors: Sequence[Any]) -> None:
        specs = self._in_specs
        if len(tensors) == len(specs) and all(isinstance(t, torch.Tensor) and t.is_cpu and t.dtype == d
                                              and t.shape == s for t, (s, d) in zip(tensors, specs)):
            return  # (the usual case; else the first wrong tensor is named)
        names = [x.name for x in self.function.inputs]
        if len(tensors) != len(names):
            raise TypeError(f"{self.name} takes {len(names)} tensors ({', '.join(names)}), "
                            f"got {len(tensors)}")
        for t, name, (shape, dtype) in zip(tensors, names, self._in_specs):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"input {name}: expected a torch.Tensor, got {type(t).__name__}")
            if t.dtype != dtype:
                raise TypeError(f"input {name}: expected dtype {dtype}, got {t.dtype}")
            if tuple(t.shape) != shape:
                raise ValueError(f"input {name}: expected shape {list(shape)}, got {list(t.shape)}")
            if t.device.type != "cpu":
                raise ValueError(f"input {name}: tensorad kernels run on the CPU, got a tensor on {t.device}")


class _Operator:
    """One operator pair (forward, backward) for one ``Function``, reached by the generic operators by key."""

    def __init__(self, function: Function, name: str, policy: Policy, build_options: dict) -> None:
        self.function = fn = function
        self.name = name
        self.policy, self.build_options = policy, build_options
        self._wrt_pos = [fn.inputs.index(x) for x in fn.wrt]
        self.key = next(_KEYS)
        _LIVE[self.key] = self

    def forward_op(self, args: list[torch.Tensor]) -> list[torch.Tensor]:
        """The forward as the registered operator (traced as such by ``torch.compile``)."""
        return torch.ops.tensorad.forward(self.key, args)

    # ---- what the generic operators run ------------------------------------------------------
    @cached_property
    def forward_specs(self) -> list[tuple[tuple[int, ...], torch.dtype]]:
        """The outputs, then the block of the saved values that are not outputs (bytes), if any."""
        fn = self.function
        block = [((fn.layout.nbytes,), torch.uint8)] if fn.plan.extras else []
        return [(tuple(t.shape), torch_dtype(t.dtype)) for t in fn.outputs] + block

    @cached_property
    def residual_arrays(self) -> int:
        """How many residuals the backward operator takes as tensors of their own (the others are in
        the block)."""
        return sum(kind != "extra" for kind, _ in self.function.plan.sources)

    def run_forward(self, args: list[torch.Tensor]) -> list[torch.Tensor]:
        outs, block = self.function.forward_block(*[_array(a) for a in args])
        return [_tensor(a) for a in outs] + ([] if block is None else [torch.from_numpy(block)])

    def run_backward(self, args: list[torch.Tensor]) -> list[torch.Tensor]:
        f = self.function
        nres = self.residual_arrays
        has_block = bool(f.plan.extras)
        given = iter(args[nres + has_block:])  # one head per float output; an integer output has none
        heads = [None if ph is None else _array(next(given)) for ph in f.heads]
        residuals = Residuals.received(f, [_array(a) for a in args[:nres]],
                                       _array(args[nres]) if has_block else None)
        return [_tensor(g) for g in f.backward(residuals, *heads)]

    def setup_context(self, ctx: Any, args: Sequence[torch.Tensor], output: Sequence[torch.Tensor],
                      block_returned: bool = True) -> None:
        """What the backward reads: ``output``, the outputs then the block (also returned by the call,
        where ``block_returned``, as the registered operator returns it)."""
        n = len(self.function.outputs)
        ctx.operator = self  # the graph keeps the function alive until its backward is gone
        if block_returned:
            ctx.mark_non_differentiable(*output[n:])
        # The saved values get no gradient (autograd would zero-fill a head for each on every backward).
        ctx.set_materialize_grads(False)
        # Only what a backward reads: a tensor changed in place later is an error only where read.
        keep_in, keep_out = self.kept
        ctx.save_for_backward(*[a if keep else None for a, keep in zip(args, keep_in)],
                              *[o if k >= n or k in keep_out else None for k, o in enumerate(output)])

    def backward_formula(self, ctx: Any, grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
        saved = ctx.saved_tensors
        k = len(self.function.inputs)
        args, outs = saved[:k], saved[k:]
        n = len(self.function.outputs)
        return self._backward(args, outs[:n], outs[n:], list(grads[:n]))

    def direct_backward(self, saved: Sequence[torch.Tensor | None],
                        grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None] | None:
        """The gradient of every input (``None`` outside ``wrt``) by the backward kernel on NumPy views of
        what a direct forward (:class:`_ApplyEager`) saved and of the heads: its own block, read without
        the checks of a block received from elsewhere; ``None`` where a head has no NumPy view."""
        f = self.function
        k, n = len(f.inputs), len(f.outputs)
        heads = [None if g is None else g if g.is_contiguous() else g.contiguous() for g in grads[:n]]
        arrays = f.residuals_of(saved[:k], saved[k:k + n], None).arrays
        views = _numpy_views([*arrays, *saved[k + n:], *(h for h in heads if h is not None)])
        if views is None:
            return None
        m = len(arrays)
        block = views[m] if len(saved) > k + n else None
        given = iter(views[m + (block is not None):])
        heads = [None if h is None else next(given) for h in heads]
        result: list[torch.Tensor | None] = [None] * k
        for pos, g in zip(self._wrt_pos, f.backward(Residuals(f, views[:m], block), *heads)):
            result[pos] = _tensor(g)
        return result

    @cached_property
    def kept(self) -> tuple[list[bool], set[int]]:
        """Which inputs (a flag per input) and outputs (their positions) a backward reads: the
        residuals' sources, and the inputs the gradient program reads (``create_graph``)."""
        f = self.function
        if not f.wrt:
            return [False] * len(f.inputs), set()
        read = set(placeholders(f.grads))
        keep_in = [i in f.plan.inputs or x in read for i, x in enumerate(f.inputs)]
        return keep_in, {k for kind, k in f.plan.sources if kind == "output"}

    @cached_property
    def grad_specs(self) -> list[tuple[tuple[int, ...], torch.dtype]]:
        return [(tuple(x.shape), torch_dtype(x.dtype)) for x in self.function.wrt]

    def _backward(self, args, outs, extras, heads) -> list[torch.Tensor | None]:
        """Gradients for every input (``None`` for those not in ``wrt``)."""
        f = self.function
        result: list[torch.Tensor | None] = [None] * len(args)
        if not f.wrt:
            return result
        float_heads = [self._head(h, o) for h, o, ph in zip(heads, f.outputs, f.heads) if ph is not None]
        if torch.is_grad_enabled():  # create_graph: differentiable again, through tensorad
            # an input the gradient program does not read was not saved: any values do
            args = [torch.zeros(x.shape, dtype=torch_dtype(x.dtype)) if a is None else a
                    for a, x in zip(args, f.inputs)]
            grads = self.gradient_function(*args, *float_heads)
            grads = list(grads) if isinstance(grads, tuple) else [grads]
        else:
            arrays = f.residuals_of(list(args), list(outs), None).arrays
            grads = torch.ops.tensorad.backward(self.key, [*arrays, *extras, *float_heads])
        for pos, g in zip(self._wrt_pos, grads):
            result[pos] = g
        return result

    @staticmethod
    def _head(h: torch.Tensor | None, output: Tensor) -> torch.Tensor:
        if h is None:
            return torch.zeros(output.shape, dtype=torch_dtype(output.dtype))
        return h if h.is_contiguous() else h.contiguous()

    @cached_property
    def gradient_function(self) -> TorchFunction:
        """``grads(inputs, heads)`` as a torch function of its own (for higher orders)."""
        f = self.function
        heads = [h for h in f.heads if h is not None]
        return TorchFunction(list(f.grads), f.inputs + heads, policy=self.policy, **self.build_options)


def _numpy_views(tensors: Sequence[torch.Tensor]) -> list[np.ndarray] | None:
    """Each tensor's memory as a NumPy array, or ``None`` where one has no NumPy view."""
    views = []
    for t in tensors:
        try:
            views.append(t.detach().numpy() if t.requires_grad else t.numpy())
        except (TypeError, RuntimeError):
            return None
    return views


def _array(t: torch.Tensor) -> Any:
    """A tensor's memory as a NumPy array (``.numpy()``: the cheapest view of a CPU tensor), or the
    detached tensor where NumPy has no view of it (bfloat16, another device: for the kernel's DLPack path)."""
    t = t.detach()
    try:
        return t.numpy()
    except (TypeError, RuntimeError):
        return t


def _tensor(a: np.ndarray) -> torch.Tensor:
    """A kernel's new array as a tensor sharing its memory (a bfloat16 one through its bits)."""
    if a.dtype == BFLOAT16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _live(key: int) -> _Operator:
    op = _LIVE.get(key)
    if op is None:
        raise RuntimeError(f"tensorad operator pair {key} was freed: a compiled graph outlived the "
                           f"tensorad function it was traced with (torch._dynamo.reset() drops it)")
    return op


@torch.library.custom_op("tensorad::forward", mutates_args=())
def _forward(key: int, args: list[torch.Tensor]) -> list[torch.Tensor]:
    return _live(key).run_forward(args)


@_forward.register_fake
def _(key: int, args: list[torch.Tensor]) -> list[torch.Tensor]:
    specs = _live(key).forward_specs
    return [args[0].new_empty(s, dtype=d) if args else torch.empty(s, dtype=d) for s, d in specs]


@torch.library.custom_op("tensorad::backward", mutates_args=())
def _backward(key: int, args: list[torch.Tensor]) -> list[torch.Tensor]:
    return _live(key).run_backward(args)


@_backward.register_fake
def _(key: int, args: list[torch.Tensor]) -> list[torch.Tensor]:
    return [args[0].new_empty(s, dtype=d) for s, d in _live(key).grad_specs]


def _setup_context(ctx: Any, inputs: tuple, output: Sequence[torch.Tensor]) -> None:
    key, args = inputs
    _live(key).setup_context(ctx, args, output)


def _backward_formula(ctx: Any, grads: Sequence[torch.Tensor | None]) -> tuple:
    return None, ctx.operator.backward_formula(ctx, grads)


_forward.register_autograd(_backward_formula, setup_context=_setup_context)


class _Apply(torch.autograd.Function):
    """The same formula as an ``autograd.Function`` with ``setup_context``, the form ``torch.func``
    transforms accept; its first argument is the operator pair."""

    @staticmethod
    def forward(op: _Operator, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(op.forward_op(list(args)))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Sequence[torch.Tensor]) -> None:
        op, *args = inputs
        op.setup_context(ctx, args, output)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple:
        return (None, *ctx.operator.backward_formula(ctx, grads))


class _ApplyEager(torch.autograd.Function):
    """:class:`_Apply` in the ``forward(ctx, ...)`` form, for calls under no ``torch.func`` transform:
    its ``apply`` does not bind the arguments to ``forward``'s signature, as the other form's does on every
    call (``inspect.signature``: most of a small program's step), and the block of saved values is saved
    for the backward without being an output."""

    @staticmethod
    def forward(ctx: Any, op: _Operator, arrays: list[np.ndarray], *args: torch.Tensor) -> tuple:
        """``arrays``: NumPy views of ``args``."""
        outs, block = op.function.forward_block(*arrays)
        tensors = [_tensor(a) for a in outs]
        op.setup_context(ctx, args, tensors + ([] if block is None else [torch.from_numpy(block)]), False)
        return tuple(tensors)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple:
        op = ctx.operator
        direct = op.function.wrt and not torch.is_grad_enabled()
        result = op.direct_backward(ctx.saved_tensors, grads) if direct else None
        return (None, None, *(op.backward_formula(ctx, grads) if result is None else result))


# whether a ``torch.func`` transform is active (PyTorch's own test in ``autograd.Function.apply``;
# ``None`` where this PyTorch has none: every call takes the form transforms accept)
_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", None)


def _rebuild(outputs: Any, inputs: Any, wrt: Any, policy: Policy, build_options: dict) -> TorchFunction:
    return TorchFunction(outputs, inputs, wrt, policy, **build_options)


def function(outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor,
             wrt: Sequence[Tensor] | Tensor | None = None, **options: Any) -> TorchFunction:
    """``ta.torch.function`` (API.md section 6): options are ``ta.function``'s and ``ta.build``'s.  A
    symbolic program gives one function per size its arrays' shapes give, each running the kernels of
    one ``ta.function`` of the program, built once (``tensorad.symbolic``)."""
    return per_size(lambda o, i, w, **given: TorchFunction(o, i, w, **options, **given), outputs, inputs, wrt,
                    "ta.torch.function", **options)


# ---- ta.torch.op: a decorated function compiled per signature --------------------------------
class TorchOp(SignatureOp):
    """``fn`` (written with tensorad over placeholders) as a PyTorch operator on tensors of any shapes:
    one :class:`TorchFunction` per signature (shapes, dtypes and static keyword values), made on its first
    call and kept in a bounded LRU cache (``signatures``).  Under ``torch.compile(fullgraph=True)`` a new
    signature is made while the graph is traced; sizes are specialized, so each new shape is a new graph
    (as ``dynamic=False``).  A compiled graph names its operator pair by key: the signature must still be
    cached when it runs (else a clear error; ``max_signatures`` bounds how many a model alternates among)."""

    bridge = "ta.torch.op"
    signatures: SignatureCache[TorchFunction]

    def __call__(self, *tensors: torch.Tensor, **static: Any) -> torch.Tensor | tuple[torch.Tensor, ...]:
        key = (self.signature(tensors), static_key(static))
        if torch.compiler.is_compiling():
            return self._traced_call(key, static, tensors)
        out = self.call_family(key, static, *tensors)
        return out if out is not NotImplemented else self.function(key, static)(*tensors)

    def function(self, key: tuple, static: dict[str, Any]) -> TorchFunction:
        """The compiled function of a signature (made on a miss)."""
        return self.signatures.get(key, lambda: self.make(key[0], static))

    def _traced_call(self, key: tuple, static: dict[str, Any], tensors: Sequence[torch.Tensor]):
        """The call as ``torch.compile`` records it: the registered operator, named by its (constant) key."""
        grad = torch.is_grad_enabled()
        requires = tuple(grad and t.requires_grad for t in tensors)
        operator = _traced_operator(self, key, static, requires)
        count = _traced_output_count(self, key, static)
        tensors = [t if t.is_contiguous() else t.contiguous() for t in tensors]
        outs = torch.ops.tensorad.forward(operator, tensors)[:count]
        return outs[0] if count == 1 else tuple(outs)

    def signature(self, tensors: Sequence[Any]) -> tuple:
        """The shapes and dtypes of the tensors: what a compiled function is made for."""
        for k, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{self.__name__}: argument {k} must be a torch.Tensor, got "
                                f"{type(t).__name__} (a static value is passed by keyword)")
            if t.device.type != "cpu":
                raise ValueError(f"{self.__name__}: argument {k}: tensorad kernels run on the CPU, "
                                 f"got a tensor on {t.device}")
        # operator.index: under torch.compile a symbolic size becomes a guarded constant
        return tuple((tuple(operator.index(d) for d in t.shape), tensorad_dtype(t.dtype)) for t in tensors)

    def __reduce__(self) -> str | tuple:
        """Pickled by reference where it is a module's decorated function, else as its definition."""
        module = sys.modules.get(self.__module__)
        if module is not None and getattr(module, self.__qualname__, None) is self:
            return self.__qualname__
        return _rebuild_op, (self.fn, self.signatures.maxsize, self.policy, self.build_options, self.dynamic)

    def __deepcopy__(self, memo: dict) -> TorchOp:
        return self


def _traced_operator(op: TorchOp, key: tuple, static: dict[str, Any], requires: tuple[bool, ...]) -> int:
    """The key of the operator pair for a signature and the inputs needing gradients, found or made while
    ``torch.compile`` traces; it lives while the signature stays cached."""
    function = op.function(key, static)
    return function.operator([requires[k] for k in function._wrt_pos]).key


def _traced_output_count(op: TorchOp, key: tuple, static: dict[str, Any]) -> int:
    return len(op.function(key, static).function.outputs)


# Dynamo records these two calls' results as constants: the mark ``torch._dynamo.assume_constant_result``
# sets, set without importing Dynamo (some 1.5 s of CPU; torch imports it when it first needs it).
_traced_operator._dynamo_marked_constant = _traced_output_count._dynamo_marked_constant = True


def _rebuild_op(fn: Callable, max_signatures: int, policy: Policy, build_options: dict,
                dynamic: bool | None = None) -> TorchOp:
    return TorchOp(fn, max_signatures=max_signatures, dynamic=dynamic, policy=policy, **build_options)


TorchOp.build_function = staticmethod(function)


def tensorad_dtype(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in ALL_DTYPES:
        raise TypeError(f"torch dtype {dtype} has no tensorad equivalent ({', '.join(ALL_DTYPES)})")
    return name


def op(fn: Callable | None = None, *, max_signatures: int = DEFAULT_MAX_SIGNATURES,
       dynamic: bool | None = None, policy: Policy = "default",
       **build_options: Any) -> TorchOp | Callable[[Callable], TorchOp]:
    """``@ta.torch.op`` or ``@ta.torch.op(num_threads=2, ...)``: ``fn`` receives placeholders of the
    tensors' shapes and dtypes (keyword arguments as static values) and returns tensorad tensors
    (:class:`TorchOp`).  Options are ``ta.function``'s and ``ta.build``'s.

    ``dynamic`` as ``torch.compile``'s, for eager calls: ``False`` traces and compiles ``fn`` once per
    shape signature; ``None`` (default) does so for a signature's first shapes, and once a call differs
    from a cached signature only in some dimensions (not 0 or 1; same ranks, dtypes and static values), traces
    ``fn`` once more with those dimensions as size variables (equal ones share one) and serves every
    later call of that family from it; ``True`` traces over every dimension of at least 2 from the first
    call.  A family's function (``ta.torch.function`` of a symbolic program) builds its kernels once for
    every size where the program's rows allow (``tensorad.symbolic``).  Where ``fn`` cannot be traced
    over sizes (it needs Python ints), the family is built per signature, and ``op.why`` says so.  Under
    ``torch.compile`` sizes stay static."""
    def wrap(f: Callable) -> TorchOp:
        return TorchOp(f, max_signatures=max_signatures, dynamic=dynamic, policy=policy, **build_options)
    return wrap if fn is None else wrap(fn)
