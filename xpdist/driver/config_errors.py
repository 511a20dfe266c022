"""Hydra's compose errors as one line each, in the shape of xpdist's own ConfigError.

Hydra prints a compose error over several lines, adds a hint about HYDRA_FULL_ERROR and
exits 1, which xpdist reserves for a failed training. The entry point asks Hydra to raise
these errors instead and prints the line made here, with exit code 2 like every bad config.
"""

from __future__ import annotations

import dataclasses
import re

from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from xpdist.core.schema import SCHEMA_PREFIX

# Hydra's own errors about a bad config: a missing option, a bad key or value, a bad override.
COMPOSE_ERRORS = (ConfigCompositionException, OverrideParseException)
DOCS = "docs/configuration.md"


def one_line(err: Exception) -> str:
    """What went wrong, on one line: `key=value: why. fix`.

    Args:
        err: an error of COMPOSE_ERRORS raised by Hydra.
    """
    cause = err.__cause__
    if isinstance(err, OverrideParseException):
        return f"{err.override}: {_first_line(err)}. See https://hydra.cc/docs/advanced/override_grammar/basic/."
    if isinstance(err, MissingConfigException) and err.options is not None:
        return _missing_option(err)
    if isinstance(cause, ValidationError) and cause.full_key:
        return f"{cause.full_key}={_override_value(err, cause)}: {_first_line(cause)}. See {cause.full_key} in {DOCS}."
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and cause.full_key:
        return _unknown_key(err, cause)
    multiple = re.match(r"Multiple values for (\S+)\. To override a value use 'override \S+: (\S+)'", str(err))
    if multiple:  # `+group=option` for a group the defaults list already has
        group, option = multiple.groups()
        return (f"+{group}={option}: {group} is a config group, which takes one option. "
                f"Drop the +: {group}={option}.")
    return " ".join(_lines(err) + (_lines(cause)[:1] if cause else []))


def _missing_option(err: MissingConfigException) -> str:
    path = err.missing_cfg_file or ""
    group, _, option = path.rpartition("/")
    options = [o for o in err.options if not o.startswith(SCHEMA_PREFIX)]
    return f"{group}={option}: there is no such {group} option. Use one of: {', '.join(options)}."


def _unknown_key(err: Exception, cause) -> str:
    override = _append_hint(err) or cause.full_key
    owner = cause.object_type
    if not dataclasses.is_dataclass(owner):  # a free-form dict such as model.kwargs takes new keys with +
        return f"{override}: '{cause.key}' is a new key there. Add it with +{override}."
    keys = ", ".join(f.name for f in dataclasses.fields(owner))
    group = cause.full_key.rpartition(".")[0]
    name = getattr(owner, "name", None)
    where = f"{group}={name}" if group and isinstance(name, str) else (group or "the config")
    return f"{override}: {where} has no key '{cause.key}'. Its keys are: {keys} (see {DOCS})."


def _append_hint(err: Exception) -> str:
    """The override itself, from Hydra's hint `To append to your config use +KEY=VALUE`."""
    found = re.search(r"use \+(\S+=.*)$", str(err), re.M)
    return found.group(1) if found else ""


def _override_value(err: Exception, cause: ValidationError) -> str:
    found = re.match(r"Error merging override \S+?=(.*)$", str(err))
    return found.group(1) if found else str(cause.value)


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0].rstrip(".")


def _lines(err: BaseException) -> list:
    """The message's lines without Hydra's search-path listing and documentation links."""
    kept = []
    for line in str(err).strip().splitlines():
        if line.startswith(("Config search path", "\tprovider=", "See https://hydra.cc")) or not line.strip():
            continue
        kept.append(line.strip())
    return kept

