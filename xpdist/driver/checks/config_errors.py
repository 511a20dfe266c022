"""Hydra's compose errors as one line each, in the shape of xpdist's own ConfigError.

Hydra prints a compose error over several lines, adds a hint about HYDRA_FULL_ERROR and
exits 1, which xpdist reserves for a failed training. The entry point asks Hydra to raise
these errors instead and prints the line made here, with exit code 2 like every bad config.
A misspelled option, recipe or key gets the nearest known name (difflib), and a value of the
wrong type is told what the key takes, in xpdist's words rather than OmegaConf's.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import typing
from typing import Any, Optional

from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from xpdist.core import docs
from xpdist.core.errors import did_you_mean
from xpdist.core.schema import MULTI_GROUPS, SCHEMA_PREFIX

# Hydra's own errors about a bad config: a missing option, a bad key or value, a bad override.
COMPOSE_ERRORS = (ConfigCompositionException, OverrideParseException)


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
        return _wrong_value(err, cause)
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and cause.full_key:
        return _unknown_key(err, cause)
    missing = _missing_multi_option(err)
    if missing:
        return missing
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
    return (f"{group}={option}: there is no such {group} option.{did_you_mean(option, options, f'{group}=')} "
            f"Use one of: {', '.join(options)}.")


def _unknown_key(err: Exception, cause) -> str:
    override = _append_hint(err) or cause.full_key
    owner = cause.object_type
    chosen_only = _unchosen_option(cause.full_key)
    if chosen_only:
        return f"{override.lstrip('+')}: {chosen_only}"
    if not dataclasses.is_dataclass(owner):
        # A typed mapping such as optimizer.lr_table: ++ adds its keys, or replaces the whole
        # mapping (a + would be refused there, the mapping itself being a known key).
        return f"{override.lstrip('+')}: '{cause.key}' is a new key there. Add it with ++{override.lstrip('+')}."
    keys = [f.name for f in dataclasses.fields(owner)]
    group = cause.full_key.rpartition(".")[0]
    name = getattr(owner, "name", None)
    where = f"{group}={name}" if group and isinstance(name, str) else (group or "the config")
    hint = did_you_mean(cause.key, keys, f"{group}." if group else "")
    return f"{override}: {where} has no key '{cause.key}'.{hint} Its keys are: {', '.join(keys)} (see {docs.page()})."


def _unchosen_option(full_key: str) -> str:
    """Why `callbacks.early_stopping.patience=3` fails when early_stopping was not chosen."""
    group, _, rest = full_key.partition(".")
    option = rest.partition(".")[0]
    if group not in MULTI_GROUPS or option not in MULTI_GROUPS[group]:
        return ""
    return (f"{group}.{option} exists only when {option} is chosen. "
            f"Choose it too: {group}=[{option}] (several: {group}=[{','.join(MULTI_GROUPS[group])}]).")


def _missing_multi_option(err: Exception) -> str:
    """`callbacks=[early_stoping]`: Hydra names no options for a list of a group."""
    found = re.search(r"Could not load '([\w/]+)/(\w+)'", str(err))
    if not found or found.group(1) not in MULTI_GROUPS:
        return ""
    group, option = found.groups()
    options = list(MULTI_GROUPS[group])
    return (f"{group}=[{option}]: there is no such {group} option.{did_you_mean(option, options, '')} "
            f"Use some of: {', '.join(options)}.")


def _wrong_value(err: Exception, cause: ValidationError) -> str:
    """A value the key's type refuses: what the key takes, and an example to type."""
    key, received = cause.full_key, _override_value(err, cause)
    wanted = _field_type(cause.object_type, cause.key)
    if wanted is None:  # not a field of the schema: OmegaConf's own words are all there is
        return f"{key}={received}: {_first_line(cause)}. See {key} in {docs.page()}."
    takes, example, choices = _describe(wanted, _field_default(cause.object_type, cause.key))
    hint = did_you_mean(received, choices, f"{key}=") if choices else ""
    fix = hint.strip() or f"Use e.g. {key}={example}."
    return f"{key}={received}: {key} takes {takes}, not {received!r}. {fix} See {key} in {docs.page()}."


def _field_type(owner: Any, name: str) -> Optional[Any]:
    if not (isinstance(owner, type) and dataclasses.is_dataclass(owner)):
        return None
    try:
        return typing.get_type_hints(owner).get(name)
    except (NameError, TypeError):
        return None


def _field_default(owner: type, name: str) -> Any:
    for f in dataclasses.fields(owner):
        if f.name == name and f.default is not dataclasses.MISSING:
            return f.default
    return None


# What a scalar type takes, in words, and an example used when the field has no default.
_SCALARS = {int: ("a whole number", 1), float: ("a number", 0.1), bool: ("true or false", "true"),
            str: ("a string", "name")}


def _describe(wanted: Any, default: Any) -> tuple:
    """(what the type takes in words, an example value, the allowed names of an enum or ())."""
    args = typing.get_args(wanted)
    if typing.get_origin(wanted) is typing.Union and type(None) in args:  # Optional[X]
        inner = next(a for a in args if a is not type(None))
        takes, example, choices = _describe(inner, default)
        return f"{takes} or null", example, choices
    if isinstance(wanted, type) and issubclass(wanted, enum.Enum):
        names = [m.name for m in wanted]
        example = default.name if isinstance(default, enum.Enum) else names[0]
        return f"one of {', '.join(names)}", example, names
    if typing.get_origin(wanted) in (list, typing.List):
        return "a list, e.g. [a,b]", "[]", ()
    if typing.get_origin(wanted) in (dict, typing.Dict):
        return "a mapping, e.g. {a: 1}", "{}", ()
    takes, example = _SCALARS.get(wanted, (getattr(wanted, "__name__", str(wanted)), None))
    if default is not None and not isinstance(default, (list, dict)) and default != "":
        example = str(default).lower() if isinstance(default, bool) else default
    return takes, example, ()


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

