"""The real game: Kaggle's Pokémon TCG card battle (``kaggle-environments``' environment ``cabt``).

``engine`` loads the native engine alone (extra ``cabt``); ``cards`` turns its card database into arrays;
``decks`` and ``teachers`` make decks and scripted players; ``selfplay`` writes episodes in the harness's own
form; ``episode`` reads such episodes into rows, with ``features``' state and option vectors; ``game`` is the
plug-in the corpus sees (``GAME``). Importing any of it loads nothing: the engine is found at first use.
"""

from .game import GAME, CabtGame

__all__ = ["GAME", "CabtGame"]
