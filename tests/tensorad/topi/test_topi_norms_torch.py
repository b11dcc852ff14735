"""``rms_norm``, ``instance_norm``, ``silu`` and label-smoothed ``cross_entropy`` against PyTorch
in float64 (values and gradients through autograd, a random head), at small odd shapes, built
for the host and for ``llvm -mcpu=haswell``; and their bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
F = torch.nn.functional
nn = ta.topi.nn
TARGETS = ["llvm", "llvm -mcpu=haswell"]


def _check(ta_fn, torch_fn, arrays, grads, target, rtol=1e-10):
    """Build ``ta_fn`` and its gradients of a random head; compare with torch float64 autograd."""
    ps = [ta.placeholder(a.shape, str(a.dtype), f"in{i}") for i, a in enumerate(arrays)]
    y = ta_fn(*ps)
    head = np.random.default_rng(9).normal(size=y.shape)
    h = ta.placeholder(y.shape, "float64", "H")
    gs = ta.JacobianRecursive(y, [ps[i] for i in grads], head=h)
    got = ta.build([y, *gs], ps + [h], target=target)(*arrays, head)
    ts = [torch.tensor(a, requires_grad=i in grads) if a.dtype.kind == "f" else torch.tensor(a).long()
          for i, a in enumerate(arrays)]
    ty = torch_fn(*ts)
    want = torch.autograd.grad(ty, [ts[i] for i in grads], torch.tensor(head))
    np.testing.assert_allclose(got[0], ty.detach().numpy(), rtol=rtol, atol=1e-12)
    for g, w in zip(got[1:], want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-8, atol=1e-11)


def _rand(*shape, seed=0, lo=-2.0, hi=2.0):
    return np.random.default_rng(seed + len(shape)).uniform(lo, hi, size=shape)


@pytest.mark.parametrize("target", TARGETS)
def test_rms_norm_matches_torch(target):
    x, g = _rand(3, 5, 13), _rand(13, seed=1, lo=0.5, hi=1.5)
    _check(lambda X, G: nn.rms_norm(X, G), lambda X, G: F.rms_norm(X, (13,), G), [x, g], [0, 1],
           target)
    _check(lambda X: nn.rms_norm(X, eps=1e-3, ndim=2), lambda X: F.rms_norm(X, (5, 13), eps=1e-3),
           [x], [0], target)


@pytest.mark.parametrize("target", TARGETS)
def test_instance_norm_matches_torch(target):
    x, g, b = _rand(2, 3, 5, 7), _rand(3, seed=1, lo=0.5, hi=1.5), _rand(3, seed=2)
    _check(lambda X, G, B: nn.instance_norm(X, G, B),
           lambda X, G, B: F.instance_norm(X, weight=G, bias=B), [x, g, b], [0, 1, 2], target)


@pytest.mark.parametrize("target", TARGETS)
def test_silu_matches_torch(target):
    _check(lambda X: nn.silu(X), F.silu, [_rand(7, 11) * 10], [0], target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_label_smoothing_matches_torch(target, reduction):
    x = _rand(5, 37) * 4
    labels = np.array([3, 36, -100, 0, 17], np.int32)
    _check(lambda X, L: nn.cross_entropy(X, L, reduction, label_smoothing=0.15),
           lambda X, L: F.cross_entropy(X, L, reduction=reduction, label_smoothing=0.15),
           [x, labels], [0], target)


def test_bad_inputs_say_what_and_why():
    x = ta.placeholder((4, 6), "float32", "X")
    labels = ta.placeholder((4,), "int32", "L")
    with pytest.raises(ValueError, match="label_smoothing"):
        nn.cross_entropy(x, labels, label_smoothing=1.5)
    with pytest.raises(ValueError, match="gamma must have shape"):
        nn.rms_norm(x, ta.placeholder((5,), "float32", "g"))
    with pytest.raises(ValueError, match="eps"):
        nn.rms_norm(x, eps=-1.0)
    with pytest.raises(ValueError, match="spatial"):
        nn.instance_norm(x)
    with pytest.raises(TypeError, match="float"):
        nn.silu(labels)


def test_batch_norm_stats_are_the_running_statistics_torch_leaves():
    """``batch_norm_stats`` returns what PyTorch's training-mode ``batch_norm`` writes into
    ``running_mean`` and ``running_var`` (momentum 0.1 and 0.3; the variance unbiased)."""
    rng = np.random.default_rng(5)
    X = ta.placeholder((4, 3, 5, 2), "float64", "X")
    RM = ta.placeholder((3,), "float64", "RM")
    RV = ta.placeholder((3,), "float64", "RV")
    x, rm, rv = rng.standard_normal(X.shape), rng.standard_normal(3), rng.uniform(0.5, 2.0, 3)
    for momentum in (0.1, 0.3):
        mean, var = ta.topi.nn.batch_norm_stats(X, RM, RV, momentum=momentum)
        got = ta.build([mean, var], [X, RM, RV])(x, rm, rv)
        tm, tv = torch.tensor(rm), torch.tensor(rv)
        torch.nn.functional.batch_norm(torch.tensor(x), tm, tv, training=True, momentum=momentum)
        np.testing.assert_allclose(got[0], tm.numpy(), rtol=1e-12)
        np.testing.assert_allclose(got[1], tv.numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="momentum"):
        ta.topi.nn.batch_norm_stats(X, RM, RV, momentum=2.0)
