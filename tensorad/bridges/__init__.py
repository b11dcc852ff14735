"""The framework bridges, imported on first use (``ta.torch``, ``ta.jax``).

* ``torch``  ``ta.torch.function``: a tensorad program as a PyTorch operator with autograd
* ``jax``    ``ta.jax.function``: a tensorad program as a JAX function, to any order
"""
