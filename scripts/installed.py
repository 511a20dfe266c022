"""Whether `pip install -e ".[EXTRAS]"` of this checkout is already in place in this interpreter.

scripts/test.sh asks before it runs pip: pip spends about 7 s (of the fast tier's minute) finding
that nothing is to be done. In place means all of:
- the xpdist installed here is this checkout, editable (pip's direct_url.json);
- what pip last installed from this checkout was built from the same pyproject.toml and the
  same package directories (a stamp this script records after pip: an editable install maps
  its top-level and namespace packages when it is made);
- every requirement of xpdist and its EXTRAS, and of theirs down to the last one, is installed
  at a version it allows (markers evaluated for this interpreter).

    python scripts/installed.py test,ray            # exit 0: in place; 1: run pip (says why)
    python scripts/installed.py --record test,ray   # after pip succeeded

Standard library only, but for `packaging`, which pip's own dependencies bring; without it the
answer is "run pip".
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# In .gitignore's build/: per checkout, and it names the interpreter it is true for.
STAMP = REPO / "build" / "install-stamp.json"


def fingerprint(extras: list[str]) -> dict:
    """What an editable install of this checkout depends on, for this interpreter."""
    packages = sorted(str(d.relative_to(REPO)) for top in ("xpdist", "hydra_plugins")
                      for d in [REPO / top, *(REPO / top).rglob("*")]
                      if d.is_dir() and "__pycache__" not in d.parts and any(d.glob("*.py")))
    return {"python": sys.executable, "prefix": sys.prefix, "extras": sorted(extras),
            "pyproject": hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest(),
            "packages": packages}


def missing(extras: list[str]) -> str:
    """Why pip must run, or '' when the install is in place."""
    try:
        from packaging.requirements import Requirement
        from packaging.utils import canonicalize_name
    except ImportError:
        return "packaging is not installed"
    try:
        dist = metadata.distribution("xpdist")
    except metadata.PackageNotFoundError:
        return "xpdist is not installed"
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if direct.get("url") != REPO.as_uri() or not direct.get("dir_info", {}).get("editable"):
        return f"the xpdist installed is {direct.get('url', 'not from a checkout')}, not {REPO.as_uri()} (editable)"
    # Breadth-first through the requirements, each distribution with the extras asked of it.
    todo = [(dist, set(extras))]
    seen: set = set()
    while todo:
        parent, wanted = todo.pop()
        for line in parent.requires or []:
            req = Requirement(line)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (wanted or {""})):
                continue
            key = (canonicalize_name(req.name), frozenset(req.extras))
            try:
                child = metadata.distribution(req.name)
            except metadata.PackageNotFoundError:
                return f"{req.name} (needed by {parent.metadata['Name']}) is not installed"
            if req.specifier and not req.specifier.contains(child.version, prereleases=True):
                return f"{req.name} {child.version} is installed; {parent.metadata['Name']} needs {req.specifier}"
            if key not in seen:
                seen.add(key)
                todo.append((child, set(req.extras)))
    if not STAMP.is_file() or json.loads(STAMP.read_text()) != fingerprint(extras):
        return "pyproject.toml, the package directories or the interpreter changed since the last install"
    return ""


def main(argv: list[str]) -> int:
    record = argv[:1] == ["--record"]
    extras = [e for e in (argv[1:] if record else argv)[0].split(",") if e] if argv[record:] else []
    if record:
        STAMP.parent.mkdir(exist_ok=True)
        STAMP.write_text(json.dumps(fingerprint(extras), indent=1) + "\n")
        return 0
    why = missing(extras)
    if why:
        print(f"scripts/installed.py: pip install needed: {why}")
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
