"""The built-in simulator as the corpus sees it (``GAME``): a game whose days it simulates from a seed.

Its days, their fingerprints and their bytes are what they were before games became plug-ins: the data
layer's simulator path (``tcgexp.data.build``) reads this module's names, nothing more.
"""

from __future__ import annotations

from .encode import FEATURE_DIM, encoder_config
from .engine import ACTION_DIM


class SimGame:
    name = "sim"
    source = "simulator"  # days simulated from dataset.seed, not imported
    option_dim = 0  # a fixed action space (ACTION_DIM slots): the model's action head

    def columns(self, max_options: int) -> tuple:
        return ()  # the common columns alone

    def dims(self, max_options: int) -> tuple[int, int]:
        return FEATURE_DIM, ACTION_DIM

    def identity(self, versions=()) -> dict:
        return encoder_config()


GAME = SimGame()
