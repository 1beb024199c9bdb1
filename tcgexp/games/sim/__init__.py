"""A seeded, self-contained Pokémon-TCG-like simulator producing a behaviour-cloning corpus.

``simulate_episode`` plays one game between two scripted players with hidden per-episode
styles and returns a JSON-serializable replay record; ``encode_episode`` re-simulates a
record into per-row training columns (features, masks, labels, would-KO, aux targets).
"""

from .encode import FEATURE_DIM, encode_episode, encoder_config
from .engine import ACTION_DIM, HAND_SLOTS
from .game import GAME
from .record import SIM_VERSION, ReplayError, simulate_episode

__all__ = [
    "ACTION_DIM",
    "FEATURE_DIM",
    "GAME",
    "HAND_SLOTS",
    "SIM_VERSION",
    "ReplayError",
    "encode_episode",
    "encoder_config",
    "simulate_episode",
]
