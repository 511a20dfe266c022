"""A tiny name -> option registry: duplicates raise, unknown names list the known ones.

A registry is filled either by `register` (a decorator, or called on an object), or from a
package whose modules are the options (`package=`): every module of that package whose name
does not start with "_" is one option, registered under the module's name, and the loader
reads the attribute `attribute` of each (the whole module when it is None). The package is
read once, on first use, so a new option is one new module and nothing else to edit.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable, Dict, Generic, Iterator, Optional, TypeVar

from xpdist.core.errors import did_you_mean

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps option names to builders or descriptions.

    Args:
        key: the config group, used in messages (`strategy=...`).
        package: a package whose public modules are the options (read on first use).
        attribute: what to take from each module of `package` (None: the module itself).

    Example:
        MODELS = Registry("model")

        @MODELS.register("linear")
        def linear(...): ...
    """

    def __init__(self, key: str, package: Optional[str] = None, attribute: Optional[str] = None):
        self.key = key
        self._package = package
        self._attribute = attribute
        self._items: Dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator that registers its argument under name.

        Raises:
            KeyError: name is registered already.
        """
        def add(item: T) -> T:
            self._load()
            if name in self._items:
                raise KeyError(f"{self.key}={name} is registered twice")
            self._items[name] = item
            return item

        return add

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
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items))
            hint = did_you_mean(name, self._items, f"{self.key}=")
            raise KeyError(f"{self.key}={name} is unknown. Known: {known}.{hint}") from None

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(sorted(self._items))

    def _load(self) -> None:
        if self._package is None:
            return
        package, self._package = self._package, None  # once, even if a module fails below
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
            if info.name.startswith("_"):
                continue  # helpers shared by the options, not options
            module: Any = importlib.import_module(f"{package}.{info.name}")
            item = module if self._attribute is None else getattr(module, self._attribute)
            self.register(info.name)(item)
