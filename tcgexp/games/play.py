"""What playing a game means to tcgexp: a ``Player`` answers observations, an ``Arena`` plays a trained network
against opponents and counts the games (``tcgexp.winrate``'s ``Tally``, one per opponent).

An evaluation (``tcgexp.eval``) knows no game: it reads a checkpoint, finds the run's game in the registry
(``dataset.game``), asks it for its arena (``game.arena()``: None where the trained network does not play that
game) and hands the arena the checkpoint's weights and the ``eval`` settings (``EvalSettings``). Each game
keeps its own players, its match runner and its opponents' names: the built-in simulator's
(``tcgexp/games/sim/arena.py``), the real game's (``tcgexp/games/cabt/arena.py``, behind
``tcgexp/games/cabt/evaluation.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..winrate import Tally

# another run's weights, by the folder (or checkpoint) an opponent spec names: (weights, state, where they came from)
Loader = Callable[[str], tuple[dict, dict, str]]


@runtime_checkable
class Player(Protocol):
    """One side of a game: it is told when a new episode starts, then answers each observation.

    What an observation and an answer are is the game's: the real game's observation dict and its option
    indices, the simulator's ``Game`` (its legal actions read from it) and an action index."""

    def new_episode(self) -> None:
        """A new episode (a game, or a best-of-N match's round) starts: whatever the player remembers starts
        afresh."""
        ...

    def act(self, observation: Any) -> Any:
        """The player's answer to `observation`."""
        ...


class WeightsRefused(ValueError):
    """A checkpoint's weights cannot play this game (e.g. no head for its options): said in one line; the
    evaluation reports it as the checkpoint's error."""


@dataclass(frozen=True)
class EvalSettings:
    """What an evaluation hands an arena: the ``eval`` settings (``tcgexp.eval.config.EvalConfig``), where the
    weights came from (``source``: their checkpoint), and how to read another run's weights (``load``, for an
    opponent that is a run dir: ``(weights, state, source)``)."""

    opponents: list[str]
    games: int
    seed: int = 0
    deck: str | None = None
    checkpoint: str = "best"
    max_steps: int = 2000
    max_seconds: float = 120.0
    workers: int = 0
    paired: bool = True
    agent: dict | None = None  # who plays for the run: None (or kind=policy) its policy; kind=search and knobs
    source: str = ""
    load: Loader | None = field(default=None, compare=False)


@runtime_checkable
class Arena(Protocol):
    """What an evaluation asks of a game (``game.arena()``)."""

    def check(self, settings: Any, run_cfg: Mapping) -> None:
        """Refuse, in one ``ConfigError`` line and before any work (before a run trains: its preflight), what
        cannot be played: an opponent or a deck that does not exist, the game's engine not installed. `settings`:
        the ``eval`` settings (``EvalSettings``'s fields); `run_cfg`: the run's config (``dataset``, ``model``)."""
        ...

    def play(self, weights: dict, state: dict, settings: Any, *, progress=None) -> dict[str, Tally]:
        """A checkpoint's `weights` (numpy arrays by parameter name; `state`: the checkpoint's state, its run's
        config under ``config``) against each of ``settings.opponents``: ``{opponent name: Tally}``.
        ``progress(done, total)``, when given, is called as games finish."""
        ...
