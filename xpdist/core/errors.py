"""Errors a user can act on: one line naming the config key, what was received and what to do."""

from __future__ import annotations

import difflib
from typing import Iterable


class ConfigError(ValueError):
    """A config that cannot run, caught before any training starts.

    Args:
        key: the config key at fault, as typed on the command line (e.g. `cross_ops`).
        received: the value received.
        why: what is wrong with it.
        fix: what to do instead.
    """

    def __init__(self, key: str, received: object, why: str, fix: str):
        self.key = key
        self.received = received
        super().__init__(f"{key}={received}: {why}. {fix}")


class TaskError(RuntimeError):
    """A task process failed; the message is the task's own one-line account."""


def did_you_mean(word: str, known: Iterable[str], prefix: str = "") -> str:
    """The hint ' Did you mean <prefix><nearest>?' for the known name nearest to word (difflib), or ''.

    Args:
        word: what was typed, e.g. "mirrord".
        known: the names it could have been.
        prefix: put before the suggestion, so that it reads as something to type (strategy=).
    """
    nearest = difflib.get_close_matches(str(word), list(known), n=1)
    return f" Did you mean {prefix}{nearest[0]}?" if nearest else ""
