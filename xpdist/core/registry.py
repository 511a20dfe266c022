"""A tiny name -> option registry: duplicates raise, unknown names list the known ones.

A registry is filled either by `register` (a decorator, or called on an object), or from a
package whose modules are the options (`package=`): every module of that package whose name
does not start with "_" is one option, registered under the module's name, and the loader
reads the attribute `attribute` of each (the whole module when it is None). The package is
read once, on first use, so a new option is one new module and nothing else to edit.

An option of a user's package has halves that live in different processes: a strategy's
driver half (its spec, read by both processes) and its task half (the module that builds it
with TensorFlow), an engine's schema (core) and its class (driver). xpdist.core.options
records each half where its own process finds it: `add_half(group, half, name, where)` puts
an object, or a "module" / "module:attribute" path imported on first use, into every registry
made with that `half`, so the task never imports a user's engine and the driver never imports
a user's TensorFlow code. Before its first answer, every registry loads the user's packages
(xpdist/core/user_packages.py), so each list of options includes theirs.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import sys
from typing import Any, Callable, Dict, Generic, Iterator, Optional, Tuple, TypeVar

from xpdist.core import user_packages
from xpdist.core.errors import did_you_mean

T = TypeVar("T")

# (group, half) -> option name -> the half, or a "module[:attribute]" path to import on first use.
_HALVES: Dict[Tuple[str, str], Dict[str, Any]] = {}


def add_half(group: str, half: str, name: str, where: Any) -> None:
    """Records one half of a user's option for the registries of (group, half).

    Raises:
        KeyError: that half of group=name is recorded already.
    """
    halves = _HALVES.setdefault((group, half), {})
    if name in halves:
        raise KeyError(f"{group}={name} is registered twice ({half})")
    halves[name] = where


def remove_half(group: str, half: str, name: str) -> None:
    """Forgets one half of a user's option (a test's toy option)."""
    _HALVES.get((group, half), {}).pop(name, None)


def resolve(where: Any) -> Any:
    """The object `where` names: itself, or what "module" / "module:attribute" imports to."""
    if not isinstance(where, str):
        return where
    module, _, attribute = where.partition(":")
    found: Any = importlib.import_module(module)
    for part in attribute.split(".") if attribute else ():
        found = getattr(found, part)
    return found


class Registry(Generic[T]):
    """Maps option names to builders or descriptions.

    Args:
        key: the config group, used in messages (`strategy=...`).
        package: a package whose public modules are the options (read on first use).
        attribute: what to take from each module of `package` (None: the module itself).
        half: which half of a user's option this registry holds (add_half), if any.

    Example:
        MODELS = Registry("model")

        @MODELS.register("linear")
        def linear(...): ...
    """

    def __init__(self, key: str, package: Optional[str] = None, attribute: Optional[str] = None,
                 half: Optional[str] = None):
        self.key = key
        self._package = package
        self._attribute = attribute
        self._half = half
        self._items: Dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator that registers its argument under name.

        Raises:
            KeyError: name is registered already.
        """
        def add(item: T) -> T:
            self._load_package()  # not the user's packages: a module of xpdist may be importing
            if name in self._items or name in self._elsewhere():
                raise KeyError(f"{self.key}={name} is registered twice")
            self._items[name] = item
            return item

        return add

    def register_schema(self, cls: T) -> T:
        """A class decorator: registers a schema dataclass under the default of its `name` field."""
        return self.register(getattr(cls, "name"))(cls)

    def unregister(self, name: str) -> None:
        """Removes name (a test's toy option, a plugin replaced by another)."""
        self._load()
        del self._items[name]

    def get(self, name: str) -> T:
        """The option registered under name.

        Raises:
            KeyError: no such name; the message lists the known ones and the nearest.
        """
        self._load()
        if name in self._items:
            return self._items[name]
        if name in self._elsewhere():
            return resolve(self._elsewhere()[name])  # importlib caches the module: cheap again
        known = list(self)
        hint = did_you_mean(name, known, f"{self.key}=")
        raise KeyError(f"{self.key}={name} is unknown. Known: {', '.join(known)}.{hint}") from None

    __getitem__ = get  # registry[name], as a mapping reads

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._items or name in self._elsewhere()

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(sorted(set(self._items) | set(self._elsewhere())))

    def _elsewhere(self) -> Dict[str, Any]:
        return _HALVES.get((self.key, self._half), {}) if self._half else {}

    def _load(self) -> None:
        user_packages.load()  # they register into the registries: before the first answer
        self._load_package()

    def _load_package(self) -> None:
        if self._package is None:
            return
        package, self._package = self._package, None  # once, even if a module fails below
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
            if info.name.startswith("_"):
                continue  # helpers shared by the options, not options
            module: Any = importlib.import_module(f"{package}.{info.name}")
            item = module if self._attribute is None else getattr(module, self._attribute)
            self.register(info.name)(item)


def named_config(base: type, name: str, suffix: str, module: str) -> type:
    """The schema of an option that adds no key to its base: the base with `name` fixed to name.

    Args:
        base: the dataclass the option extends (its `name` field is MISSING there).
        name: the option's name, e.g. "mirrored".
        suffix: the class name's ending, e.g. "Strategy" (MirroredStrategy).
        module: the module the class is said to live in (the option's own).
    """
    title = "".join(part.title() for part in name.split("_")) + suffix
    made = dataclasses.make_dataclass(title, [("name", str, dataclasses.field(default=name))], bases=(base,),
                                      namespace={"__module__": module})
    # Found where its module says it lives, as a class written there is: pickle (a parallel
    # sweep's job returns its config to the sweep's process) looks it up by module and name.
    setattr(sys.modules[module], title, made)
    return made
