"""The search space: Hydra's sweep syntax (choice, range, interval, tag(log, ...)) as Optuna
distributions, checked against the real config before any trial starts.

    optimizer.learning_rate=tag(log, interval(1e-4, 1e-1))   FloatDistribution(1e-4, 1e-1, log=True)
    dataset.per_replica_batch_size=choice(16, 32, 64)        CategoricalDistribution
    trainer.epochs=range(2, 6)                                IntDistribution(2, 5)  (stop excluded, as in Hydra)
    optimizer=sgd,adam                                        CategoricalDistribution

The same text is read from the command line and from `hydra.sweeper.params` (a recipe's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from xpdist.core.errors import ConfigError

PARAMS_KEY = "hydra.sweeper.params"
FIX = "Use interval(low, high), tag(log, interval(low, high)), range(start, stop[, step]) or choice(a, b, ...)"


@dataclass
class SearchSpace:
    """Optuna distributions by config key, and the overrides every trial shares."""

    distributions: Dict[str, Any] = field(default_factory=dict)
    # Where each dimension was written, for error messages and the parent run's params.
    sources: Dict[str, str] = field(default_factory=dict)
    fixed: List[str] = field(default_factory=list)

    def overrides(self, params: Dict[str, Any]) -> List[str]:
        """One trial's overrides: the sampled values, then the fixed ones."""
        return [f"{key}={literal(value)}" for key, value in params.items()] + list(self.fixed)

    def as_params(self) -> Dict[str, str]:
        """The search space as MLflow params of the study's parent run."""
        return {key: source.split("=", 1)[1] for key, source in self.sources.items()}

    def grid(self) -> Dict[str, List[Any]]:
        """Every value of every dimension, for sampler=grid; an interval has none to list.

        Raises:
            ConfigError: a dimension is a continuous interval.
        """
        from optuna.distributions import CategoricalDistribution

        values = {}
        for key, dist in self.distributions.items():
            if isinstance(dist, CategoricalDistribution):
                values[key] = list(dist.choices)
            elif getattr(dist, "step", None) is not None:
                count = int(round((dist.high - dist.low) / dist.step)) + 1
                values[key] = [dist.low + i * dist.step for i in range(count)]
            else:
                raise ConfigError(self.sources[key].split("=", 1)[0], self.sources[key].split("=", 1)[1],
                                  "sampler=grid needs values to list, an interval has none",
                                  "Use choice(...) or range(...), or another hydra.sweeper.sampler")
        return values


def literal(value: Any) -> str:
    """A sampled value as override text Hydra reads back as the same value."""
    if isinstance(value, float):
        return repr(value)
    if value is None:
        return "null"
    return str(value)


def quote_params_overrides(argv: Sequence[str]) -> List[str]:
    """`hydra.sweeper.params.KEY=<sweep>` on the command line, turned into what a recipe's
    `hydra.sweeper.params` holds: the text, added or replaced (`++`).

    Hydra refuses a sweep over its own config in multirun mode ("Sweeping over Hydra's
    configuration is not supported") and a new key without `+`; yet hydra.sweeper.params only
    holds text for the sweeper to read, so the command line may write it as a recipe does.
    """
    quoted = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.startswith(PARAMS_KEY + ".") and value:
            if value[0] not in "'\"":
                quote = "'" if "'" not in value else '"'
                value = value if quote in value else f"{quote}{value}{quote}"
            arg = f"++{key}={value}"
        quoted.append(arg)
    return quoted


def parse(params: Optional[Dict[str, Any]], arguments: Sequence[str]) -> SearchSpace:
    """The search space of `hydra.sweeper.params` and the command line's sweep overrides.

    A command-line override of the same key wins over the recipe's.

    Raises:
        ConfigError: an override that is not valid syntax, or an empty or invalid dimension.
    """
    lines = {}
    for key, value in (params or {}).items():
        lines[str(key)] = (f"{PARAMS_KEY}.{key}", f"{key}={value}")
    for line in arguments:
        lines[line.split("=", 1)[0]] = (line.split("=", 1)[0], line)
    parser = OverridesParser.create()
    space = SearchSpace()
    for shown_key, line in lines.values():
        try:
            override = parser.parse_override(line)
        except HydraException as err:
            raise ConfigError(shown_key, line.split("=", 1)[-1], f"not an override Hydra can read ({_first(err)})",
                              FIX) from None
        if not override.is_sweep_override():
            space.fixed.append(line)
            continue
        key = override.get_key_element()
        space.distributions[key] = _distribution(override, shown_key, line.split("=", 1)[1])
        space.sources[key] = f"{shown_key}={line.split('=', 1)[1]}"
    return space


def _first(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _distribution(override: Override, key: str, text: str):
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    value = override.value()
    if isinstance(value, ChoiceSweep):
        choices = list(value.list)
        if not choices:
            raise ConfigError(key, text, "the choice is empty", FIX)
        if not all(isinstance(c, (str, int, float, bool)) for c in choices):
            raise ConfigError(key, text, "a choice holds plain values only (numbers, strings, booleans)", FIX)
        return CategoricalDistribution(choices)
    if isinstance(value, RangeSweep):
        values = list(_range_values(value))
        if not values:
            raise ConfigError(key, text, "the range is empty (its stop is excluded)", "Give a stop above the start")
        if all(isinstance(v, int) for v in values):
            return IntDistribution(values[0], values[-1], step=int(value.step))
        return FloatDistribution(float(values[0]), float(values[-1]), step=float(value.step)) if len(values) > 1 \
            else CategoricalDistribution(values)
    if isinstance(value, IntervalSweep):
        low, high, log = float(value.start), float(value.end), "log" in value.tags
        if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
            raise ConfigError(key, text, "the interval is empty: its low end must be below its high end",
                              "Write interval(low, high) with low < high")
        if log and low <= 0:
            raise ConfigError(key, text, "a log interval needs a low end above 0", "Raise the low end or drop tag(log)")
        return FloatDistribution(low, high, log=log)
    raise ConfigError(key, text, "this kind of sweep cannot be searched by Optuna", FIX)


def _range_values(sweep: RangeSweep):
    start, stop, step = sweep.start, sweep.stop, sweep.step
    if not step or (stop - start) / step <= 0:
        return
    count = math.ceil((stop - start) / step - 1e-9)
    for i in range(count):
        yield start + i * step


def check_against_config(space: SearchSpace, compose) -> None:
    """Composes the config with each dimension's extreme values, as every trial's job will.

    Args:
        compose: overrides -> composed job config; raises what Hydra raises (an unknown key,
            a value of the wrong type for its key, an unknown option of a config group).

    Raises:
        ConfigError: naming the dimension's key and the value the config refused.
    """
    from optuna.distributions import CategoricalDistribution

    for key, dist in space.distributions.items():
        shown, text = space.sources[key].split("=", 1)
        values = list(dist.choices) if isinstance(dist, CategoricalDistribution) else [dist.low, dist.high]
        for value in values:
            try:
                compose(space.fixed + [f"{key}={literal(value)}"])
            except (HydraException, OmegaConfBaseException, ValueError) as err:
                cause = err.__cause__ or err
                raise ConfigError(shown, text, f"the config refuses {key}={literal(value)} ({_first(cause)})",
                                  "Search a key the config has, with values of its type") from None
