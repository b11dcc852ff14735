"""The documentation: the API reference builds from the docstrings with warnings as errors
(`make docs`), and the files a user of the package expects are there."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_api_reference_builds_without_warnings(tmp_path):
    pytest.importorskip("sphinx", reason="an optional extra; make test requires it")
    pytest.importorskip("myst_parser", reason="an optional extra; make test requires it")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-E", "-b", "html",
                           str(ROOT / "docs"), str(tmp_path / "html")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    api = (tmp_path / "html" / "api.html").read_text()
    for name in ("JacobianRecursive", "hessian_vector_product", "tensorad.Kernel.export", "tensorad.load",
                 "tensorad.config", "conv2d"):
        assert name in api, name
    assert "subgradient PyTorch returns" in (tmp_path / "html" / "conventions.html").read_text()
    assert "public API contract" in (tmp_path / "html" / "contract.html").read_text()


def test_contract_license_and_type_marker_ship_with_the_package():
    readme = (ROOT / "README.md").read_text()
    assert "`API.md`" in readme and (ROOT / "API.md").is_file()
    assert "Permission is hereby granted" in (ROOT / "LICENSE").read_text()
    assert (ROOT / "tensorad" / "py.typed").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["tensorad"]
    test_extra = " ".join(config["project"]["optional-dependencies"]["test"])
    for tool in ("sphinx", "myst-parser", "matplotlib"):
        assert tool in test_extra


def test_readme_says_how_to_install():
    readme = (ROOT / "README.md").read_text()
    install = readme[readme.index("## Install"):]
    install = install[:install.index("\n## ", 5)]
    for text in ("pip install tensorad", "pip install .", "[torch]", "[jax]", "[bench]", "[test]"):
        assert text in install, text
