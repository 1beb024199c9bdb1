"""``optimized_metric``: what a run's result gives a sweeper (the task's return value, the halving
sweeper's objective), and its direction."""

from __future__ import annotations

import math
from typing import Any

from ..errors import ConfigError
from ..eval.config import plays_at_end
from ..winrate import PREFIX as WIN_RATE  # eval/win_rate/<opponent>, higher is better
from ..winrate import is_win_rate, opponent_of

SOURCES = {"val": "final", "best": "best"}  # optimized_metric's prefix -> the result dict's entry


def check_metric(name: str | None, cfg=None) -> None:
    """Refuse an optimized_metric that no run can produce, before any work; with the run's config `cfg`, one this
    run cannot produce: a win rate needs that opponent played at its end, and the stop head's metrics a game with
    offered options (its `dataset`)."""
    # MLX loads after the entry point's setup() (it binds its BLAS when it loads)
    from ..learn.step import METRICS, STOP_METRICS

    if name is None:
        return
    if is_win_rate(name):
        opponent = opponent_of(name)
        if cfg is not None:
            ev = cfg.get("eval")
            names = [str(o).partition("=")[0] if "=" in str(o) else str(o) for o in (ev.opponents if ev else [])]
            if not (plays_at_end(cfg) and opponent in names):
                raise ConfigError(
                    f"optimized_metric={name} is played at the run's end: set eval.enabled=true with {opponent!r} "
                    f"among eval.opponents (now {names})"
                )
        return
    prefix, _, key = str(name).partition("/")
    val = [*METRICS, "policy_early", "policy_late", "accuracy_early", "accuracy_late", *STOP_METRICS]
    known = {"val": val, "best": ["val_loss"]}
    if key not in known.get(prefix, []):
        choices = ", ".join(f"{p}/{k}" for p, keys in known.items() for k in keys)
        raise ConfigError(
            f"optimized_metric={name!r} is impossible: it must be one of {choices}, {WIN_RATE}<opponent> (or null)"
        )
    dataset = cfg.get("dataset") if cfg is not None else None
    if key in STOP_METRICS and dataset is not None:
        from ..games.registry import GAMES, game, model_dims

        chosen = str(dataset.get("game", "sim"))
        if not model_dims(game(chosen), int(dataset.get("max_options", 64))).get("option_dim"):
            offering = [n for n, g in GAMES.items() if int(getattr(g, "option_dim", 0) or 0) > 0]
            raise ConfigError(
                f"optimized_metric={name} is the option head's stop head, but dataset.game={chosen} offers no "
                "options: choose val/loss, val/accuracy, ... (or a game with offered options, "
                f"{' or '.join(f'dataset.game={n}' for n in offering) or 'none is registered'})"
            )


def higher_is_better(name: str) -> bool:
    """Whether `name` improves upwards (accuracy, a win rate) rather than downwards (the losses)."""
    key = str(name).partition("/")[2]
    return key.startswith("accuracy") or key.endswith("_accuracy") or is_win_rate(name)


def optimized(result: dict[str, Any], name: str | None) -> float | None:
    """The value of ``optimized_metric`` in ``train()``'s result: val/<metric> is the last validation's
    (``result["final"]``), best/val_loss the best epoch's. NaN when the run has none (it diverged)."""
    if name is None:
        return None
    if is_win_rate(name):
        value = ((result.get("eval") or {}).get(opponent_of(name)) or {}).get("win_rate")
        return float(value) if value is not None else math.nan
    prefix, _, key = str(name).partition("/")
    value = (result.get(SOURCES[prefix]) or {}).get(key)
    return float(value) if value is not None else math.nan
