"""The games a corpus can be made of: one plug-in interface, two games behind it.

``dataset.game`` names one. A game says how wide its rows are (``dims``), which columns it adds to the common
ones (``columns``), what pins a corpus built with it (``identity``) and where its days come from (``source``):

- ``"simulator"``: days simulated from ``dataset.seed`` (``tcgexp.data.build``; the built-in game, ``sim``);
- ``"episodes"``: days imported from episode files (``tcgexp.data.episodes``; the real game, ``cabt``), which
  also reads them (``read``, ``version``), names their players (``players``) and encodes them (``encode``).

Past the day Parquet nothing asks which game it is: the planner, the cache and the loader read columns by name.
The model's input and head are sized by the game (``model_dims``: the widths of ``features`` and of the action
slots, and ``option_dim``, the width of an offered option's vector: 0 for a fixed action space, the action head;
more for offered options, the option head). Another game is one package with a ``GAME`` object of either kind
(``tcgexp.games.base``'s protocols): one line here, or ``register(GAME)`` before composing, or
``dataset.game=package.module:ATTR`` (imported and registered at first use, in every process that asks:
docs/extending.md).
"""

from __future__ import annotations

import importlib

from ..errors import ConfigError
from .cabt.game import GAME as CABT_GAME
from .sim.game import GAME as SIM_GAME

GAMES = {"sim": SIM_GAME, "cabt": CABT_GAME}


def model_dims(game, max_options: int) -> dict[str, int]:
    """What the model's input and head are sized by, as its constructor takes them: ``feature_dim`` and
    ``action_dim`` (``game.dims``), and ``option_dim`` where the game's decisions offer options with a vector
    each (``game.option_dim``; the option head). A game of a fixed action space passes no ``option_dim``."""
    feature_dim, action_dim = game.dims(max_options)
    option_dim = int(getattr(game, "option_dim", 0) or 0)
    return {"feature_dim": feature_dim, "action_dim": action_dim, **({"option_dim": option_dim} if option_dim else {})}


class _Names:
    """The known games' names as one text, read when a message is written (a game registered later shows)."""

    def __str__(self) -> str:
        return f"one of {', '.join(GAMES)}"


NAMES = _Names()  # "one of sim, cabt": what a wrong dataset.game is told


def register(g):
    """Make `g` (a game object: ``tcgexp.games.base.Game``) what ``dataset.game=<g.name>`` names; returns it.
    Registering the same object again does nothing; a name another game holds is refused."""
    name = getattr(g, "name", None)
    if not isinstance(name, str) or not name or ":" in name:
        raise ConfigError(f"cannot register {g!r}: a game needs a name (a non-empty str without ':')")
    held = GAMES.get(name)
    if held is not None and held is not g:
        raise ConfigError(
            f"cannot register game {name!r}: that name is taken by {held!r} -- give the game another name"
        )
    GAMES[name] = g
    return g


def known(name) -> bool:
    """Whether `name` can name a game: a registered one, or the ``package.module:ATTR`` of one (imported at use)."""
    return isinstance(name, str) and (name in GAMES or _spec(name) is not None)


def _spec(name: str) -> tuple[str, str] | None:
    module, sep, attr = name.partition(":")
    return (module, attr) if sep and module and attr and ":" not in attr else None


def game(name: str):
    """The game `name` names: a registered game's name, or ``package.module:ATTR`` (imported, then registered)."""
    if name in GAMES:
        return GAMES[name]
    spec = _spec(name) if isinstance(name, str) else None
    if spec is None:
        raise ConfigError(f"dataset.game={name!r} is not a game tcgexp knows -- {NAMES}") from None
    try:
        found = getattr(importlib.import_module(spec[0]), spec[1])
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"dataset.game={name!r} cannot be loaded ({exc}) -- {NAMES}, or package.module:ATTR"
        ) from None
    return register(found)
