"""The built-in simulator as the corpus sees it (``GAME``): a game whose days it simulates from a seed.

Its days, their fingerprints and their bytes are what they were before games became plug-ins: the data
layer's simulator path (``tcgexp.data.build``) asks ``GAME`` alone, through the ``SimulatedGame`` protocol.
"""

from __future__ import annotations

from .encode import FEATURE_DIM, encode_episode, encoder_config
from .engine import ACTION_DIM
from .record import SIM_VERSION, ReplayError, simulate_episode


class SimGame:
    """The ``SimulatedGame`` protocol (``tcgexp.games.base``) over this package's functions."""

    name = "sim"
    source = "simulator"  # days simulated from dataset.seed, not imported
    option_dim = 0  # a fixed action space (ACTION_DIM slots): the model's action head
    version = SIM_VERSION  # recorded in each replay ZIP's meta.json (as sim_version)
    refusal = ReplayError  # a record that cannot be replayed

    def arena(self):
        """None: the trained network does not play the simulator (its match runner, ``arena.py``, plays Players)."""
        return

    def submission(self):
        """None: the simulator has no submission to write."""
        return

    def columns(self, max_options: int) -> tuple:
        return ()  # the common columns alone

    def dims(self, max_options: int) -> tuple[int, int]:
        return FEATURE_DIM, ACTION_DIM

    def identity(self, versions=()) -> dict:
        return encoder_config()

    def layout(self) -> dict:
        """What each feature column means (a checkpoint's weights read them: ``init_from`` compares it)."""
        return encoder_config()

    def simulate(self, episode_id: int, seed: int, *, max_turns: int) -> dict:
        return simulate_episode(episode_id, seed, max_turns=max_turns)

    def encode(self, record: dict, *, would_ko: bool):
        return encode_episode(record, would_ko=would_ko)


GAME = SimGame()
