"""Sphinx configuration: the guides are Markdown pages (MyST), the API reference is generated
from the docstrings (autodoc + napoleon), and the contract includes API.md.  The developer logs
in dev/ are not part of the site.  ``make docs`` builds into the untracked docs/_build/html with
warnings as errors."""

project = "tensorad"
author = "the tensorad authors"
copyright = "2026, the tensorad authors"  # noqa: A001

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
napoleon_google_docstring = True
napoleon_numpy_docstring = True
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]
html_theme = "alabaster"
html_static_path: list[str] = []
nitpicky = False
