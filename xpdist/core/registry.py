"""A tiny name -> builder registry: duplicates raise, unknown names list the known ones."""

from __future__ import annotations

from typing import Callable, Dict, Generic, Iterator, TypeVar

T = TypeVar("T", bound=Callable)


class Registry(Generic[T]):
    """Maps option names to builders.

    Example:
        MODELS = Registry("model")

        @MODELS.register("linear")
        def linear(...): ...
    """

    def __init__(self, key: str):
        self.key = key
        self._builders: Dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(builder: T) -> T:
            if name in self._builders:
                raise KeyError(f"{self.key}={name} is registered twice")
            self._builders[name] = builder
            return builder

        return add

    def get(self, name: str) -> T:
        try:
            return self._builders[name]
        except KeyError:
            known = ", ".join(sorted(self._builders))
            raise KeyError(f"{self.key}={name} is unknown. Known: {known}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._builders

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._builders))
