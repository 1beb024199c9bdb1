"""``optimized_metric``: what a run's result gives a sweeper (the task's return value, the halving
sweeper's objective), and its direction."""

from __future__ import annotations

import math
from typing import Any

from ..errors import ConfigError

SOURCES = {"val": "final", "best": "best"}  # optimized_metric's prefix -> the result dict's entry


def check_metric(name: str | None) -> None:
    """Refuse an optimized_metric that no run can produce, before any work."""
    from ..learn.step import METRICS  # MLX loads after the entry point's setup() (it binds its BLAS when it loads)

    if name is None:
        return
    prefix, _, key = str(name).partition("/")
    known = {"val": [*METRICS, "policy_early", "policy_late", "accuracy_early", "accuracy_late"], "best": ["val_loss"]}
    if key not in known.get(prefix, []):
        choices = ", ".join(f"{p}/{k}" for p, keys in known.items() for k in keys)
        raise ConfigError(f"optimized_metric={name!r} is impossible: it must be one of {choices} (or null)")


def higher_is_better(name: str) -> bool:
    """Whether `name` improves upwards (accuracy) rather than downwards (the losses)."""
    return str(name).partition("/")[2].startswith("accuracy")


def optimized(result: dict[str, Any], name: str | None) -> float | None:
    """The value of ``optimized_metric`` in ``train()``'s result: val/<metric> is the last validation's
    (``result["final"]``), best/val_loss the best epoch's. NaN when the run has none (it diverged)."""
    if name is None:
        return None
    prefix, _, key = str(name).partition("/")
    value = (result.get(SOURCES[prefix]) or {}).get(key)
    return float(value) if value is not None else math.nan
