"""The games a corpus can be made of: one plug-in interface, two games behind it.

``dataset.game`` names one. A game says how wide its rows are (``dims``), which columns it adds to the common
ones (``columns``), what pins a corpus built with it (``identity``) and where its days come from (``source``):

- ``"simulator"``: days simulated from ``dataset.seed`` (``tcgexp.data.build``; the built-in game, ``sim``);
- ``"episodes"``: days imported from episode files (``tcgexp.data.episodes``; the real game, ``cabt``), which
  also reads them (``read``, ``version``), names their players (``players``) and encodes them (``encode``).

Past the day Parquet nothing asks which game it is: the planner, the cache and the loader read columns by name.
The model's input and head are sized by the game (``model_dims``: the widths of ``features`` and of the action
slots, and ``option_dim``, the width of an offered option's vector: 0 for a fixed action space, the action head;
more for offered options, the option head). Another game is one package with a ``GAME`` object of either kind and
one line here (docs/extending.md).
"""

from __future__ import annotations

from .. import cabt, sim
from ..sim.game import GAME as SIM_GAME
from .errors import DataError

GAMES = {"sim": SIM_GAME, "cabt": cabt.GAME}
del sim


def model_dims(game, max_options: int) -> dict[str, int]:
    """What the model's input and head are sized by, as its constructor takes them: ``feature_dim`` and
    ``action_dim`` (``game.dims``), and ``option_dim`` where the game's decisions offer options with a vector
    each (``game.option_dim``; the option head). A game of a fixed action space passes no ``option_dim``."""
    feature_dim, action_dim = game.dims(max_options)
    option_dim = int(getattr(game, "option_dim", 0) or 0)
    return {"feature_dim": feature_dim, "action_dim": action_dim, **({"option_dim": option_dim} if option_dim else {})}


def game(name: str):
    try:
        return GAMES[name]
    except KeyError:
        raise DataError(f"dataset.game={name!r} is not a game tcgexp knows", fix=f"one of {', '.join(GAMES)}") from None
