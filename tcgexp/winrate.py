"""The win rate's one vocabulary: its metric names, the interval every tally gives, a tally's shape.

A match between two players (any game's arena, ``tcgexp.games``) ends in a *tally*; an evaluation records
one per opponent in ``result.json`` (``eval.<opponent>``) and in Aim as ``eval/win_rate/<opponent>``, which a
sweep can optimise (``optimized_metric``) and whose report compares. Every layer that names a win rate (the
evaluation, the optimised metric, the sweep's report and findings) takes these names from here.
"""

from __future__ import annotations

import math
from typing import TypedDict

PREFIX = "eval/win_rate/"  # Aim's name (and a sweep's metric) of a win rate: PREFIX + the opponent's name
INTERVAL_METHOD = "Wilson score interval, 95 %, of wins over games (a draw is a game not won)"
Z95 = 1.959963984540054


def metric_name(opponent: str) -> str:
    """``eval/win_rate/<opponent>``: the name a win rate against `opponent` is tracked and optimised by."""
    return PREFIX + opponent


def is_win_rate(name: str) -> bool:
    return str(name).startswith(PREFIX)


def opponent_of(name: str) -> str:
    """The opponent a win-rate metric names (``eval/win_rate/first`` -> ``first``)."""
    return str(name)[len(PREFIX) :]


def wilson(wins: float, n: int, z: float = Z95) -> list[float]:
    """The Wilson score interval of a binomial proportion (95 % by default): [lo, hi], within [0, 1]."""
    if n <= 0:
        return [0.0, 1.0]
    p = wins / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [max(0.0, c - h), min(1.0, c + h)]


class Tally(TypedDict, total=False):
    """What a match returns and result.json's ``eval.<opponent>`` holds. The first keys every game's arena
    gives; the rest where the game has them (seats, the deals' pairing, move times, the decks)."""

    games: int
    wins: int
    draws: int
    losses: int
    errors: list[str]  # one line each; a game that errs counts as lost
    win_rate: float  # wins / games (a draw is a game not won)
    interval: list[float]  # wilson(wins, games)
    interval_method: str
    capped: int  # games ended as draws at a step or time cap
    seats: dict  # {"0": {"games", "wins"}, "1": ...}
    opponent: dict  # {"name", "kind", "what"}
    paired: bool
    seconds: float
    games_per_second: float | None
    move_seconds: dict  # {"moves", "median", "p99", "max"}


def counted(outcomes: list[str], *, errors: list[str] = (), capped: int = 0) -> Tally:
    """The common part of a tally from each game's outcome ("win", "draw" or "loss")."""
    n = len(outcomes)
    wins = sum(o == "win" for o in outcomes)
    draws = sum(o == "draw" for o in outcomes)
    return Tally(
        games=n,
        wins=wins,
        draws=draws,
        losses=n - wins - draws,
        errors=list(errors),
        win_rate=wins / n if n else 0.0,
        interval=wilson(wins, n),
        interval_method=INTERVAL_METHOD,
        capped=capped,
    )
