"""What a schema field may declare: its value rule, or an open mapping (`open_mapping`).

Value rules are declared on a schema field, so that the check, its error line and the
configuration reference's wording come from one declaration.

    # Where the loss turns from quadratic to linear (keras.losses.Huber's delta).
    delta: float = field(default=1.0, metadata=rules.above(0))

`check` (called by schema.check_keys for every chosen option) refuses a value the rule does
not take with a one-line ConfigError naming the key; scripts/config_docs.py appends the rule's
words to the key's meaning. A null value (an Optional key's "none") is never checked.
Rules across keys (the warmup shorter than training, say) stay with the checks that know the
plan (xpdist/driver/checks/).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional

from omegaconf import DictConfig, OmegaConf

from xpdist.core.errors import ConfigError

# The field metadata key a rule is stored under.
KEY = "xpdist.rule"


@dataclass(frozen=True)
class Rule:
    """A test of one value, and what to say when it fails.

    Attributes:
        test: True where the value is allowed.
        says: what the value must be ("must be above 0"): the error's reason and the docs' wording.
        fix: the error's suggestion ("Use e.g. 1.0."); None: one made from the field's default.
    """

    test: Callable[[Any], bool]
    says: str
    fix: Optional[str] = None


def rule(test: Callable[[Any], bool], says: str, fix: Optional[str] = None) -> Dict[str, Rule]:
    """Field metadata holding one rule: `field(default=..., metadata=rule(...))`."""
    return {KEY: Rule(test, says, fix)}


def above(bound: float, fix: Optional[str] = None) -> Dict[str, Rule]:
    """The value must be strictly above bound."""
    return rule(lambda value: value > bound, f"must be above {bound}", fix)


def at_least(bound: float, fix: Optional[str] = None) -> Dict[str, Rule]:
    """The value must be bound or more."""
    return rule(lambda value: value >= bound, f"must be {bound} or more", fix)


def fraction(fix: Optional[str] = None, top: bool = True) -> Dict[str, Rule]:
    """The value must lie in [0, 1] ([0, 1) with top=False)."""
    if top:
        return rule(lambda value: 0 <= value <= 1, "must be between 0 and 1", fix)
    return rule(lambda value: 0 <= value < 1, "must be 0 or more and below 1", fix)


def open_mapping() -> DictConfig:
    """An empty mapping whose keys are the user's own: `model.kwargs.units=32` adds one, no `+`.

    Hydra closes every node of the composed config (struct mode), typed `Dict[K, V]` mappings
    included, so a new key would need `+`. A node that sets its own struct flag to False keeps
    it through composition: the keys of a user's function or feature spec cannot be known here.
    """
    return OmegaConf.create({}, flags={"struct": False})


def of(field: dataclasses.Field) -> Optional[Rule]:
    """The rule declared on a field, if any."""
    return field.metadata.get(KEY)


def check(node: Mapping[str, Any], cls: type, prefix: str) -> None:
    """Refuses the first value of node that the rules of cls's fields do not take.

    Args:
        node: one option's keys and values (a composed group, as plain data or a DictConfig).
        cls: the option's dataclass.
        prefix: the keys' prefix in messages ("loss.").

    Raises:
        ConfigError: naming prefix + the key.
    """
    for field in dataclasses.fields(cls):
        found = of(field)
        value = _numbers(node.get(field.name)) if found else None
        if value is None:
            continue  # null, or not numbers: Hydra refused a wrong type when composing
        if not found.test(value):
            fix = found.fix or _default_fix(field)
            raise ConfigError(f"{prefix}{field.name}", value, found.says, fix)


def _numbers(value: Any) -> Any:
    """value if it is a number or a list of numbers (as a list), else None."""
    if isinstance(value, bool) or isinstance(value, str) or value is None:
        return None
    if isinstance(value, (int, float)):
        return value
    try:
        items = list(value)
    except TypeError:
        return None
    return items if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items) else None


def _default_fix(field: dataclasses.Field) -> str:
    if field.default is None:
        return "Use null for none."
    if field.default is not dataclasses.MISSING:
        return f"Use e.g. {field.default} (its default)."
    return "See docs/configuration.md."
