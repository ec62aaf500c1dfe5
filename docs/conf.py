"""Sphinx configuration of eapo's documentation site (`make docs`: warnings are errors).

Pages are MyST Markdown; the API reference is autodoc over the installed package's docstrings; the
configuration reference is generated from the typed config's help strings (``_ext/eapo_docs.py``).

Why Sphinx + MyST (as verl and torchtune) rather than MkDocs + mkdocstrings: eapo's docstrings are
written with Sphinx roles (``:func:``, ``:class:``, ``:mod:``) and double-backtick literals, which autodoc
renders and mkdocstrings would print raw; autodoc imports the real objects, so TRL-derived classes show
their actual fields; a directive can generate tables from the code (the configuration reference); and
``-W`` turns every warning (a broken link or heading anchor in a page, a docstring autodoc cannot parse,
an undocumented config section) into a failed build. The pages stay Markdown, readable on GitHub.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent / "src"))  # document this checkout, whichever eapo is installed

from eapo import __version__  # noqa: E402

project = "eapo"
author = "the eapo authors"
copyright = "2026, the eapo authors"
release = version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "eapo_docs",
]
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links are checked like page links
# A study's per-run outputs (eval results.md, logs) are data, not pages: only its README, claims,
# comparison and sensitivity tables are part of the site.
exclude_patterns = ["_build", "results/*/runs/**", "results/*/base/**", "results/*/logs/**"]
nitpicky = False

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"eapo {release}"
