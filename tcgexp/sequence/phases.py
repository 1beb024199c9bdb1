"""The phases of a daily sequence: one per day, the days it trains on, and the keys the sequence sets itself."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

# what the sequence sets for each phase itself: a command line giving one is refused
PHASE_KEYS = {
    "dataset.start_date": "sequence.days",
    "dataset.days": "sequence.days and sequence.window",
    "dataset.dates": "sequence.days",
    "dataset.date_from": "sequence.days",
    "dataset.date_to": "sequence.days",
    "init_from": "sequence.init_from (the first phase's; each later one starts from the canonical model)",
    "resume": "the same tcgexp-sequence command (it resumes a stopped phase itself)",
    "trainer.max_steps": "trainer.epochs (a phase trains to its end)",
    "trainer.stop_at_epoch": "trainer.epochs (a phase trains to its end)",
}


def _key(o: str) -> str:
    return o.lstrip("+~").partition("=")[0]


def training_overrides(overrides: list[str]) -> list[str]:
    """The command line's overrides every phase's training run is composed with (the sequence's own left out)."""
    kept = [o for o in overrides if _key(o).split(".")[0] not in ("sequence", "hydra")]
    for o in kept:
        if _key(o) in PHASE_KEYS:
            raise ConfigError(
                f"{o}: the sequence sets each phase's {_key(o)} itself; drop it (it follows from {PHASE_KEYS[_key(o)]})"
            )
    return kept


@dataclass
class Phase:
    index: int
    day: str
    window: list[str]  # the days it trains on, its own last
    previous: str | None  # the day before's phase, whose canonical model it starts from


def phases(days: list[str], window: int) -> list[Phase]:
    return [Phase(i, d, days[max(0, i - window + 1) : i + 1], days[i - 1] if i else None) for i, d in enumerate(days)]
