"""The sequence's schema: every training group (each phase is a training run composed from them) and ``sequence``."""

from __future__ import annotations

import datetime as dt
from dataclasses import field
from typing import ClassVar

from ..schema import ALL, schema, within
from ..train.configs import Config


def _days(v) -> bool:
    try:
        days = [dt.date.fromisoformat(str(d)) for d in v]
    except ValueError:
        return False
    return len(days) >= 1 and days == sorted(set(days))


@schema(name="sequence_settings")
class SequenceConfig:
    """The phases of a daily sequence (``tcgexp/sequence/run.py``) and what each does beside training."""

    # the sequence's folder: sequence.json (its state), canonical/ (the model), phases/<day>/ (each day's run)
    folder: str = "sequences/${dataset.name}"
    # one phase per day, in date order (ISO dates); a later command may add days, never change a recorded one
    days: list[str] = field(default_factory=list)
    window: int = 1  # the days a phase trains on: its own and the window - 1 days before it
    init_from: str | None = None  # what the first phase starts from (a run dir or checkpoint); null: from scratch
    # imported episodes (dataset=cabt): a folder holding each day's episode JSONs as <day>/ or <day>.zip, which
    # each phase imports first (tcgexp-data action=import date=<day>); null: the days are imported already
    source: str | None = None
    # each phase plays the canonical model against random, first and the day before's (a game with an arena)
    evaluate: bool = True
    # after a phase is recorded, delete the encoded days the next phase does not train on (rebuilt from their
    # source on demand); blocked, in one line, where the source is missing or no longer matches
    cleanup: bool = False
    export: bool = False  # each phase writes the canonical model's Kaggle submission (tcgexp-export) beside it
    UNPINNED: ClassVar[tuple] = ALL
    CHECKS: ClassVar[tuple] = (
        ("days", _days, "a list of one or more ISO dates (YYYY-MM-DD), each once, in order"),
        ("window", within(1, 36500), "in [1, 36500] days"),
    )


@schema(name="base_sequence")
class SequenceRun(Config):
    """``tcgexp-sequence`` (``conf/sequence.yaml``): the training run's groups and keys, and the sequence's own."""

    sequence: SequenceConfig = field(default_factory=SequenceConfig)
