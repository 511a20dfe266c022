"""Errors a user can act on: one line naming the config key, what was received and what to do."""

from __future__ import annotations


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
