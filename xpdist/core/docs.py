"""Where the documentation is, in a checkout and in an installed package alike.

docs/ stays at the top of the repository and ships inside the package as xpdist/docs
(a link to ../docs, as xpdist/conf is to ../conf; the wheel holds the files themselves), so
an error line can name a page that exists wherever xpdist was installed from.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List

DOCS_DIR = Path(__file__).resolve().parents[1] / "docs"


def folder() -> Path:
    """The folder of the documentation pages (resolved: in a checkout, the repository's docs/)."""
    return DOCS_DIR.resolve()


def page(name: str = "configuration.md") -> str:
    """The absolute path of one page, e.g. page("configuration.md"), for an error line."""
    return str(folder() / name)


def cli(args: List[str], out=sys.stdout) -> int:
    """`python -m xpdist docs [PAGE]`: prints the docs folder, or one page's path; returns the exit code.

    For a reader or a pager: `less $(python -m xpdist docs configuration)`.
    """
    if not args:
        print(folder(), file=out)
        return 0
    name = args[0] if args[0].endswith(".md") else f"{args[0]}.md"
    pages = sorted(p.stem for p in folder().glob("*.md"))
    if len(args) > 1 or not (folder() / name).is_file():
        print(f"xpdist: error: docs {' '.join(args)}: there is no such page. Use one of: {', '.join(pages)}.",
              file=sys.stderr)
        return 2
    print(folder() / name, file=out)
    return 0
