"""One pick's inputs, from a raw observation as Kaggle's harness hands it to an agent: what the model reads.

The corpus encoder (``episode.encode_episode``) turns a recorded answer of k picks into k rows; a player that
answers live needs the same numbers for the pick it is about to make, with the picks it has made so far:
``Decision(tb, obs, max_options)`` computes the decision's state, option vectors and would-KO once, and
``row(picked)`` gives each pick's row (``x``: the state, would-KO where valid and its flag, as the loader's
batch lays them out; ``options``; ``mask``: offered and not yet picked). ``tests/games/cabt/test_play.py`` holds
every row of recorded episodes to the encoder's, bit for bit. Numpy only: it ships inside a submission.
"""

from __future__ import annotations

import numpy as np

from .features import OPTION_DIM, PICKED, STATE_DIM, O, attack_damage, option_features, state_features
from .tables import Tables

PICKED_FLAG = O["picked"]  # an option vector's "already picked in this decision" flag


class Decision:
    """The inputs of one decision (one ``select``) for each of its picks."""

    def __init__(self, tb: Tables, obs: dict, max_options: int, would_ko: bool = True) -> None:
        sel = obs["select"]
        self.max_options = max_options
        self.offered = len(sel["option"])
        self.n = min(self.offered, max_options)  # options past the model's slots are never picked
        self.min_count, self.max_count = int(sel.get("minCount") or 0), int(sel.get("maxCount") or 0)
        self.state = np.zeros(STATE_DIM, np.float32)
        state_features(tb, obs, 0, self.state)
        self.options = np.zeros((max_options, OPTION_DIM), np.float32)
        option_features(tb, obs, set(), self.options)
        self.would_ko = np.zeros(max_options, np.float32)
        self.would_ko_valid = False
        if would_ko:
            self.would_ko_valid = _would_ko(tb, obs, self.would_ko)

    def row(self, picked: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x [STATE_DIM + A + 1], options [A, OPTION_DIM], mask [A] bool) of the pick after `picked`."""
        A = self.max_options
        x = np.zeros(STATE_DIM + A + 1, np.float32)
        x[:STATE_DIM] = self.state
        x[PICKED] = len(picked) / 4
        if self.would_ko_valid:
            x[STATE_DIM : STATE_DIM + A] = self.would_ko
            x[-1] = 1.0
        options = self.options.copy()
        mask = np.zeros(A, bool)
        mask[: self.n] = True
        for p in picked:
            options[p, PICKED_FLAG] = 1.0
            mask[p] = False
        return x, options, mask


def _would_ko(tb: Tables, obs: dict, out: np.ndarray) -> bool:
    """Fill `out` with 1 where an offered attack knocks out the opposing active; True when every offered attack's
    outcome is determinable (an attack with text is not) and there is one at least: the row's would-KO is valid."""
    sel, cur = obs["select"], obs["current"]
    me = int(cur["yourIndex"])
    ps = cur["players"]
    ma = (ps[me].get("active") or [None])[0]
    oa = (ps[1 - me].get("active") or [None])[0]
    attacks = [j for j, o in enumerate(sel["option"]) if o.get("attackId") is not None]
    if not attacks:
        return False
    trials = []
    for j in attacks:
        dmg, sure = attack_damage(tb, int(sel["option"][j]["attackId"]), ma, oa)
        trials.append((j, (dmg >= (oa.get("hp") or 0)) if sure and oa else None))
    if any(v is None for _, v in trials):
        return False
    for j, v in trials:
        if v and j < len(out):
            out[j] = 1.0
    return True
