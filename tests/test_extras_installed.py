"""The bridge tests skip without PyTorch or JAX (the core must work without them), so a broken
install of the ``test`` extra would hide them.  ``make test`` sets ``TENSORAD_TEST_EXTRAS=1``:
then every optional framework the extra lists must import, or this test fails."""

import importlib
import os

import pytest

EXTRAS = ("torch", "torch.distributed", "jax", "sphinx", "matplotlib")


@pytest.mark.parametrize("module", EXTRAS)
def test_the_test_extra_is_installed(module):
    if os.environ.get("TENSORAD_TEST_EXTRAS") != "1":
        return  # run outside `make test`: the optional frameworks may be absent on purpose
    importlib.import_module(module)
