"""The framework bridges, imported on first use (``ta.torch``, ``ta.jax``).

* ``torch``       ``ta.torch.function``: a tensorad program as a PyTorch operator with autograd;
                  ``@ta.torch.op``: a layer written with tensorad, compiled per signature
* ``jax``         ``ta.jax.function``: a tensorad program as a JAX function, to any order;
                  ``@ta.jax.op``: the same decorator for JAX
* ``signatures``  what the two decorators share: signatures, tracing, the bounded cache"""
