"""Where the documentation is, in a checkout and in an installed package alike.

docs/ stays at the top of the repository and ships inside the package as xpdist/docs
(a link to ../docs, as xpdist/conf is to ../conf; the wheel holds the files themselves), so
an error line can name a page that exists wherever xpdist was installed from.
"""

from __future__ import annotations

from pathlib import Path

DOCS_DIR = Path(__file__).resolve().parents[1] / "docs"


def folder() -> Path:
    """The folder of the documentation pages (resolved: in a checkout, the repository's docs/)."""
    return DOCS_DIR.resolve()


def page(name: str = "configuration.md") -> str:
    """The absolute path of one page, e.g. page("configuration.md"), for an error line."""
    return str(folder() / name)
