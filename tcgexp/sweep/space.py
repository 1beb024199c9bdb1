"""The search space, in Hydra's own sweep grammar, as Optuna distributions.

``'optimizer.lr=tag(log, interval(1e-4, 1e-2))'`` is a log-uniform float, ``'model.hidden=choice(64,
128, 256)'`` (or ``64,128,256``) a categorical, ``range(16, 65, 16)`` an integer (or float) grid with
its step, ``int(interval(16, 256))`` a uniform integer;
``tag(log, ...)`` makes any interval log-sampled. Entries come from ``hydra.sweeper.params``, then the
command line; a plain ``key=value`` on the command line fixes that key for every trial (taking it out
of a preset space, as Hydra's Optuna sweeper does). Every contradiction is refused in one line before
any trial runs.

A range's stop is exclusive, as in Python and Hydra's basic sweeper (Hydra's Optuna sweeper includes it:
tcgexp follows the grammar's own meaning). Float steps are counted in decimal, as typed: ``range(0.001,
0.002, 0.001)`` is 0.001 alone (Hydra's float range, adding binary fractions, also yields 0.002), and every
value a trial gets is one of the range's exactly (0.3, never 0.30000000000000004). A range or choice of
one value is refused: sampling it would run the same configuration again and again (fix the key instead).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ..errors import ConfigError
from ..overrides import override

# keys the sweeper sets on every job itself: a user's value would be overwritten or contradict the budget
OWNED = {
    "trainer.epochs": "hydra.sweeper.max_epochs (the schedule's horizon)",
    "trainer.stop_at_epoch": "the rung budgets (hydra.sweeper.min_epochs, max_epochs, eta)",
    "resume": "the sweeper (a promoted trial resumes from its own checkpoint)",
}
WHERE = "hydra/sweeper=halving"


@dataclass(frozen=True)
class Param:
    key: str  # as the override names it (``model.hidden``, ``cache``, ``+experiment``)
    distribution: Any  # an optuna.distributions.BaseDistribution
    log: bool
    typed: str  # the entry as given, for messages and the study's settings
    steps: tuple | None = None  # a range's values, exactly (a sampler's draw is snapped to the nearest)

    @property
    def categorical(self) -> bool:
        from optuna.distributions import CategoricalDistribution

        return isinstance(self.distribution, CategoricalDistribution)

    def corners(self) -> list[Any]:
        """The values that must compose: every choice, both ends of a numeric range."""
        if self.categorical:
            return list(self.distribution.choices)
        return [self.distribution.low, self.distribution.high]

    def grid(self) -> list[Any] | None:
        """Every value a grid visits, or None for a continuous range."""
        if self.categorical:
            return list(self.distribution.choices)
        if self.steps is not None:
            return list(self.steps)
        step = getattr(self.distribution, "step", None)
        if step is None:
            return None
        low, n = self.distribution.low, int(round((self.distribution.high - self.distribution.low) / step))  # noqa: RUF046
        return [type(low)(low + i * step) for i in range(n + 1)]

    def exact(self, value: Any) -> Any:
        """A sampler's draw as the space means it: a range's nearest value (a float step drawn as low + k x step
        in binary floats is off in its last digits), anything else as drawn."""
        if self.steps is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return value
        return min(self.steps, key=lambda v: abs(v - value))

    def describe(self) -> str:
        """What the sweeper samples for this key, in words (said as the sweep starts)."""
        d = self.distribution
        if self.steps is not None:
            shown = ", ".join(map(str, self.steps[:8])) + (
                f", ... ({len(self.steps)} values)" if len(self.steps) > 8 else ""
            )
            return f"{self.key}: {shown} (from {self.typed.partition('=')[2]}: stop exclusive)"
        if self.categorical:
            return f"{self.key}: one of {', '.join(map(str, d.choices))}"
        kind = "integers" if isinstance(d.low, int) else "floats"
        return f"{self.key}: {'log-uniform' if self.log else 'uniform'} {kind} in [{d.low}, {d.high}]"


@dataclass
class Space:
    params: dict[str, Param] = field(default_factory=dict)
    fixed: list[str] = field(default_factory=list)  # plain overrides every trial gets, as typed

    def distributions(self) -> dict:
        return {k: p.distribution for k, p in self.params.items()}

    def exact(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A trial's parameters as the space means them (``Param.exact``: a range's own values)."""
        return {k: self.params[k].exact(v) if k in self.params else v for k, v in params.items()}

    def describe(self) -> str:
        """The space the sweeper samples, in one line (said as the sweep starts)."""
        return "; ".join(p.describe() for p in self.params.values())

    def settings(self) -> dict[str, str]:
        """What identifies the space (a continued study must have the same)."""
        return {k: p.typed for k, p in sorted(self.params.items())}


def value_text(value: Any) -> str:
    """A sampled value as an override's value: floats in full (repr), booleans as Hydra spells them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def overrides_of(params: Mapping[str, Any]) -> list[str]:
    """A trial's parameters as overrides that read back the same (a string is quoted when it must be)."""
    return [
        override(key, value) if isinstance(value, str) else f"{key}={value_text(value)}"
        for key, value in params.items()
    ]


def parse(entries: Iterable[str], *, command_line: Iterable[str] = ()) -> Space:
    """The space from ``hydra.sweeper.params`` entries (``key=sweep``) and the command line's overrides."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    space, typed = Space(), {}
    for origin, lines in (("hydra.sweeper.params", list(entries)), ("the command line", list(command_line))):
        for line in lines:
            try:
                o = parser.parse_override(line)
            except Exception as exc:  # noqa: BLE001 - Hydra's grammar error, said in one line
                raise ConfigError(f"{WHERE}: {origin} entry {line!r} is not Hydra's override grammar ({exc})") from None
            key = o.get_key_element()
            bare = key.lstrip("+~")
            if bare in OWNED:
                raise ConfigError(
                    f"{WHERE}: {line!r}: the sweeper sets {bare} on every trial itself, from "
                    f"{OWNED[bare]}; drop it from {origin}"
                )
            if bare.startswith("hydra."):
                if o.is_sweep_override():
                    raise ConfigError(f"{WHERE}: {line!r} sweeps {bare}, Hydra's own setting, not a trial's")
                continue
            if origin == "the command line":  # a fixed value given twice: the last wins, as in Hydra
                if key in typed and (typed[key] or o.is_sweep_override()):
                    raise ConfigError(
                        f"{WHERE}: {key} is given twice on the command line, swept at least once "
                        f"({line!r} is the second); give it once: a fixed value, or a sweep"
                    )
                typed[key] = o.is_sweep_override()
            if not o.is_sweep_override():
                space.params.pop(key, None)  # a fixed value takes the key out of a preset space
                space.fixed = [f for f in space.fixed if parser.parse_override(f).get_key_element() != key]
                space.fixed.append(line)
                continue
            distribution, steps = _distribution(o, line)
            space.params[key] = Param(key, distribution, "log" in getattr(o.value(), "tags", ()), line, steps)
            space.fixed = [f for f in space.fixed if parser.parse_override(f).get_key_element() != key]
    if not space.params:
        raise ConfigError(
            f"{WHERE}: the search space is empty: sweep at least one key, e.g. "
            "'optimizer.lr=tag(log, interval(1e-4, 1e-2))' 'model.hidden=choice(64,128,256)', "
            "or set hydra.sweeper.params"
        )
    return space


def _distribution(o, line: str):
    from hydra.core.override_parser.types import Glob, Transformer
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    value, key = o.value(), o.get_key_element()
    if isinstance(value, Glob):
        raise ConfigError(f"{WHERE}: {line!r}: a glob cannot be sampled; list the options with choice(...)")
    log = "log" in getattr(value, "tags", ())
    if o.is_interval_sweep():
        low, high = value.start, value.end
        if not low < high:
            raise ConfigError(f"{WHERE}: {line!r} is empty: interval(low, high) needs low < high")
        if log and low <= 0:
            raise ConfigError(f"{WHERE}: {line!r}: a log-sampled interval needs low > 0")
        if isinstance(low, int) and isinstance(high, int):
            return IntDistribution(low, high, log=log), None
        return FloatDistribution(float(low), float(high), log=log), None
    if o.is_range_sweep() and not value.shuffle:
        values = stepped(value)
        if not values:
            raise ConfigError(
                f"{WHERE}: {line!r} is empty (range's stop is exclusive): it must give at least one value"
            )
        if log:
            raise ConfigError(
                f"{WHERE}: {line!r}: a range has a step, so it cannot be log-sampled; "
                "use tag(log, interval(low, high)) or choice(...)"
            )
        if len(values) == 1:
            raise ConfigError(one_value(line, key, values[0], "range's stop is exclusive"))
        step = values[1] - values[0]
        if all(isinstance(v, int) for v in values):
            return IntDistribution(min(values), max(values), step=abs(step)), tuple(values)
        step = float(Decimal(repr(float(value.step))).copy_abs())
        return FloatDistribution(min(values), max(values), step=step), tuple(values)
    if o.is_choice_sweep() or o.is_range_sweep():  # choice(...), a,b,c, shuffle(range(...))
        choices = list(o.sweep_iterator(transformer=Transformer.encode))
        if not choices:
            raise ConfigError(f"{WHERE}: {line!r} is empty: give at least one choice")
        if len(set(map(str, choices))) != len(choices):
            raise ConfigError(f"{WHERE}: {line!r} lists a value twice")
        if len(choices) == 1:
            raise ConfigError(one_value(line, key, choices[0], "one choice"))
        if log:
            raise ConfigError(
                f"{WHERE}: {line!r}: choices are categories, not log-sampled numbers; use tag(log, interval(low, high))"
            )
        return CategoricalDistribution(choices), None
    raise ConfigError(
        f"{WHERE}: {line!r}: {type(value).__name__} cannot be sampled; use choice(...), "
        f"range(...) or interval(...) for {key}"
    )


def stepped(sweep) -> list:
    """A range's values, its stop exclusive: integers as Python's range; floats counted in decimal as typed
    (start + k x step while short of the stop), so float rounding neither adds the stop nor drifts a value."""
    start, stop, step = sweep.start, sweep.stop, sweep.step
    if all(isinstance(v, int) for v in (start, stop, step)):
        return list(range(start, stop, step))
    a, b, d = (Decimal(repr(float(v))) for v in (start, stop, step))
    if d == 0:
        return []
    count = max(0, math.ceil((b - a) / d))
    return [float(a + k * d) for k in range(count)]


def one_value(line: str, key: str, value: Any, why: str) -> str:
    return (
        f"{WHERE}: {line!r} gives one value ({value}; {why}): sampling it would run the same trial again and "
        f"again; fix it for every trial with {key.lstrip('+~')}={value_text(value)}, or give it two values or more"
    )


def check_sampler(space: Space, sampler: str) -> None:
    """Grid needs every key discrete; CMA-ES only samples numbers."""
    if sampler == "grid":
        continuous = [p.typed for p in space.params.values() if p.grid() is None]
        if continuous:
            raise ConfigError(
                f"{WHERE}: hydra.sweeper.sampler=grid needs every key discrete, but "
                f"{', '.join(repr(c) for c in continuous)} is continuous: use choice(...) or "
                "range(...), or another sampler (tpe, random, cmaes)"
            )
    if sampler == "cmaes":
        categorical = [p.typed for p in space.params.values() if p.categorical]
        if categorical:
            raise ConfigError(
                f"{WHERE}: hydra.sweeper.sampler=cmaes samples numbers only, but "
                f"{', '.join(repr(c) for c in categorical)} is categorical: use "
                "interval(...) or range(...) for it, or sampler=tpe (or random)"
            )


def grid_size(space: Space) -> int:
    size = 1
    for p in space.params.values():
        size *= len(p.grid() or [])
    return size
