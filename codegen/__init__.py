"""Code generation (being written)."""


class Kernel: ...


class LoweredFunc: ...


def lower(outputs, inputs, **options):
    raise NotImplementedError("lower: in progress")


def build(outputs, inputs, target="llvm", **options):
    raise NotImplementedError("build: in progress")
