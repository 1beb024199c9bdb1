"""The games a corpus can be made of: one plug-in interface, two games behind it.

``dataset.game`` names one. A game says how wide its rows are (``dims``), which columns it adds to the common
ones (``columns``), what pins a corpus built with it (``identity``) and where its days come from (``source``):

- ``"simulator"``: days simulated from ``dataset.seed`` (``tcgexp.data.build``; the built-in game, ``sim``);
- ``"episodes"``: days imported from episode files (``tcgexp.data.episodes``; the real game, ``cabt``), which
  also reads them (``read``, ``version``), names their players (``players``) and encodes them (``encode``).

Past the day Parquet nothing asks which game it is: the planner, the cache and the loader read columns by name.
Another game is one package with a ``GAME`` object of either kind and one line here (docs/extending.md).
"""

from __future__ import annotations

from .. import cabt, sim
from ..sim.game import GAME as SIM_GAME
from .errors import DataError

GAMES = {"sim": SIM_GAME, "cabt": cabt.GAME}
del sim


def game(name: str):
    try:
        return GAMES[name]
    except KeyError:
        raise DataError(f"dataset.game={name!r} is not a game tcgexp knows", fix=f"one of {', '.join(GAMES)}") from None
