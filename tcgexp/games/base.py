"""What a game is to the rest of tcgexp: the ``Game`` protocol (structural: a game need not inherit from it).

Every game says what its rows are (``Game``). Where its days come from (``Game.source``) says which of the two
kinds it also is: a ``SimulatedGame`` plays its days from a seed, an ``EpisodeGame`` reads them from episode
files. The data layer (``tcgexp.data``) asks a game only what these protocols list, and names no game.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import pyarrow as pa

Columns = dict[str, Any]  # column name -> numpy array, one row per decision
Stats = dict[str, int]  # counters summed into the day's manifest (decisions, would_ko.*, ...)


@runtime_checkable
class Game(Protocol):
    """What every game offers the corpus and the model."""

    name: str  # what dataset.game names it by (the registry's key)
    source: Literal["simulator", "episodes"]  # where its days come from: simulated from a seed, or episode files
    option_dim: int  # the width of an offered option's vector (0: a fixed action space, the model's action head)

    def columns(self, max_options: int) -> tuple[pa.Field, ...]:
        """The columns a day of this game has beyond the common ones (``tcgexp.data.schema``)."""
        ...

    def dims(self, max_options: int) -> tuple[int, int]:
        """(the width of ``features``, the width of ``action_mask``): what the rows and the model are sized by."""
        ...

    def identity(self, versions=()) -> dict:
        """What pins a day built with this game (its encoder, engine, card data): part of each day's fingerprint."""
        ...

    # optional: ``layout() -> dict``, what each feature column means; a run started from another's weights
    # (``init_from``) is refused where the two differ (a game without it: only the widths are compared)

    def arena(self):
        """What ``eval`` plays a trained network in (``tcgexp.games.play.Arena``), or None where it plays no game
        of this one. (A game may also offer ``submission()``: what ``tcgexp-export`` writes, or None.)"""
        ...


class SimulatedGame(Game, Protocol):
    """A game whose days are simulated from ``dataset.seed`` (``source == "simulator"``)."""

    version: int  # the simulator's version, recorded in each replay ZIP (a ZIP of another version is refused)
    refusal: type[Exception]  # what ``encode`` raises for a record it cannot replay

    def simulate(self, episode_id: int, seed: int, *, max_turns: int) -> dict:
        """One seeded episode as a JSON-serializable record (a line of the day's replay ZIP)."""
        ...

    def encode(self, record: dict, *, would_ko: bool) -> tuple[Columns, Stats]:
        """One record replayed into its rows (the common columns and the game's own)."""
        ...


class EpisodeGame(Game, Protocol):
    """A game whose days are imported from episode files (``source == "episodes"``).

    Optional: ``index_fields(episode) -> dict``, what the replay ZIP's index keeps of an episode beside its id
    (the real game keeps Kaggle's episode id). Any exception but a ValueError from ``read``, ``players`` or
    ``encode`` is taken as the reader's fault: the episode is refused, saying so, and the rest are filed."""

    def read(self, raw: bytes, loads: Callable[[bytes], Any] = ...) -> dict:
        """One episode file's bytes as an episode (a ValueError names what is wrong with it)."""
        ...

    def version(self, episode: dict) -> int:
        """The engine version an episode was played with (its identity: ``identity(versions)``)."""
        ...

    def players(self, episode: dict, sidecar: dict | None) -> tuple[list[dict], str | None]:
        """([{name, rating}] per seat, the UTC date (YYYY-MM-DD) or None) from an episode and its metadata sidecar
        (a ValueError refuses the episode: a sidecar this game cannot read)."""
        ...

    def encode(
        self, episode: dict, *, match: int, players: list[dict], max_options: int, would_ko: bool
    ) -> tuple[Columns, Stats]:
        """One episode into its rows (a ValueError refuses it, naming the step)."""
        ...


class DemoGame(EpisodeGame, Protocol):
    """An episode game that can play itself: its demo days (``dataset.demo``) are episodes of its own players."""

    def make_demo(self, folder: Path, *, date: str, episodes: int, seed: int, bo: int, progress=None, pools=None):
        """Write `episodes` seeded episode files (with sidecars) for `date` into `folder`."""
        ...
