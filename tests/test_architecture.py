"""Project-shape checks: packaging matches the folders, and imports only point one way."""

from __future__ import annotations

import ast
import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Folder on disk -> installed package name.
FOLDERS = {"tensorad": "tensorad", "simplify": "tensorad.simplify", "codegen": "tensorad.codegen"}

# Layers from the bottom up; a module may import only from its own layer or below.
LAYERS = [
    {"tensorad.ir"},
    {"tensorad.poly", "tensorad.lang", "tensorad.evaluate", "tensorad.autodiff", "tensorad.topi"},
    {"tensorad.simplify"},
    {"tensorad.codegen"},
    {"tensorad", "tensorad.cli", "tensorad.training", "tensorad.bridges"},
]


def _layer(package: str) -> int:
    for depth, names in enumerate(LAYERS):
        if package in names:
            return depth
    raise AssertionError(f"package {package} is not placed in a layer of test_architecture.py")


def _python_packages() -> dict[str, pathlib.Path]:
    found = {}
    for folder, pkg in FOLDERS.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / folder).parts
            found[".".join((pkg,) + rel)] = init.parent
    return found


def test_pyproject_lists_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    assert listed == set(_python_packages()), "pyproject's packages list differs from the folders"


def _module_name(path: pathlib.Path) -> tuple[str, str]:
    for folder, pkg in FOLDERS.items():
        base = ROOT / folder
        if base in path.parents:
            parts = path.relative_to(base).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            return ".".join((pkg,) + parts), pkg
    raise AssertionError(path)


def _owner(module: str) -> str:
    """The layered package a module belongs to (tensorad.ir.expr -> tensorad.ir)."""
    best = ""
    for names in LAYERS:
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best = name
    return best


def _imports(path: pathlib.Path, module: str) -> list[str]:
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_pkg else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:
                    out += [f"{target}.{a.name}" for a in node.names]
                else:
                    out.append(target)
            else:
                out.append(node.module)
    return [m for m in out if m and m.split(".")[0] == "tensorad"]


def test_imports_point_one_way():
    bad = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            module, _ = _module_name(path)
            here = _owner(module)
            for target in _imports(path, module):
                there = _owner(target)
                if there and here and there != here and _layer(there) > _layer(here):
                    bad.append(f"{module} imports {target}")
                if target == "tensorad" and _layer(here) != len(LAYERS) - 1:
                    bad.append(f"{module} imports the package root")
    assert not bad, "backward imports:\n" + "\n".join(bad)


MAX_MODULES = 15  # modules (and subpackages) in one folder


def _package_members(folder: pathlib.Path) -> list[str]:
    modules = [p.stem for p in folder.glob("*.py") if p.name != "__init__.py"]
    subpackages = [p.parent.name for p in folder.glob("*/__init__.py")]
    return sorted(modules + subpackages)


def test_no_folder_holds_more_than_fifteen_modules():
    crowded = {pkg: len(_package_members(folder)) for pkg, folder in _python_packages().items()
               if len(_package_members(folder)) > MAX_MODULES}
    assert not crowded, f"folders over {MAX_MODULES} modules: {crowded}"


def test_every_module_is_named_in_its_package_docstring():
    unnamed = []
    for pkg, folder in _python_packages().items():
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        for name in _package_members(folder):
            if not re.search(rf"(``|:mod:`\.?){name}(/|``|`)", doc):
                unnamed.append(f"{pkg}.{name}")
    assert not unnamed, "modules the package docstring does not name:\n" + "\n".join(unnamed)
