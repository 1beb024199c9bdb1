"""A toy third game, written the way a game outside tcgexp is: it imports ``tcgexp.api`` alone.

Nim of one pile: a pile of 9 to 20 tokens, the players take 1, 2 or 3 in turn, and whoever takes the last token
wins. The side to move wins exactly when the pile is not a multiple of 4 (take ``pile % 4``), so a policy that
learned the recorded expert plays perfectly, and one that did not loses to it: a game small enough to train and
evaluate in seconds, with a right answer to check the whole path by.

What tcgexp asks of it, and nothing more: its rows (``columns``, ``dims``, ``identity``), its days (a
``SimulatedGame``: ``simulate`` a seeded episode, ``encode`` it into rows), its players (``act``), and its
arena (``arena()``: the trained network against its scripted players, a tally each).
"""

from __future__ import annotations

import random

import numpy as np

from tcgexp.api import Tally, counted

NAME = "toy_nim"
MAX_PILE = 20
FEATURE_DIM = MAX_PILE + 1 + 2  # the pile one-hot, and which side moves
ACTION_DIM = 3  # take 1, 2 or 3
MAX_DECISIONS = 10_000  # decision ids pack an episode's decisions under its id, as the built-in game's do


class ReplayError(ValueError):
    """A record that does not replay."""


def features(pile: int, side: int) -> list[float]:
    x = [0.0] * FEATURE_DIM
    x[pile] = 1.0
    x[MAX_PILE + 1 + side] = 1.0
    return x


def legal(pile: int) -> list[int]:
    return [a for a in range(ACTION_DIM) if a + 1 <= pile]


class Expert:
    """Takes ``pile % 4`` when that wins, one token otherwise; errs with probability ``noise``."""

    def __init__(self, rng: random.Random, noise: float = 0.1) -> None:
        self.rng, self.noise = rng, noise

    def new_episode(self) -> None:
        pass

    def act(self, observation: dict) -> int:
        pile = observation["pile"]
        if self.rng.random() < self.noise:
            return self.rng.choice(legal(pile))
        return (pile % 4 or 1) - 1


class RandomPlayer:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def new_episode(self) -> None:
        pass

    def act(self, observation: dict) -> int:
        return self.rng.choice(legal(observation["pile"]))


class NetPlayer:
    """The trained network (memory off: its trunk reads zeros for the memory), on the numpy weights a
    checkpoint holds, names as the model's parameters are named."""

    def __init__(self, weights: dict) -> None:
        self.w = {k: np.asarray(v, np.float32) for k, v in weights.items()}

    def new_episode(self) -> None:
        pass

    def act(self, observation: dict) -> int:
        w, pile = self.w, observation["pile"]

        def lin(name, x):
            return w[f"{name}.weight"] @ x + w[f"{name}.bias"]

        # the model's input row: features, would-KO where valid (none here), the would-KO-valid flag
        x = np.concatenate([np.asarray(features(pile, observation["side"]), np.float32), np.zeros(ACTION_DIM), [0.0]])
        enc = np.maximum(lin("encoder.layers.2", np.maximum(lin("encoder.layers.0", x.astype(np.float32)), 0)), 0)
        z = np.maximum(lin("trunk.layers.0", np.concatenate([enc, np.zeros_like(enc)])), 0)
        logits = lin("policy", z)
        allowed = legal(pile)
        return max(allowed, key=lambda a: logits[a])


def play(players: list, seed: int) -> int:
    """One game between two players (seat 0 moves first): the winning seat."""
    rng = random.Random(seed)
    pile, side = rng.randint(9, MAX_PILE), 0
    for p in players:
        p.new_episode()
    while True:
        action = players[side].act({"pile": pile, "side": side})
        if action not in legal(pile):
            raise ReplayError(f"take {action + 1} from a pile of {pile}")
        pile -= action + 1
        if pile == 0:
            return side
        side = 1 - side


class ToyArena:
    """What an evaluation asks of the game: the network against each opponent, seats alternating."""

    opponents = ("expert", "random")

    def check(self, settings, run_cfg) -> None:
        unknown = [o for o in settings.opponents if o not in self.opponents]
        if unknown:
            from tcgexp.api import ConfigError

            raise ConfigError(f"eval.opponents: {unknown} are no players of {NAME} (one of {self.opponents})")

    def play(self, weights: dict, state: dict, settings, *, progress=None) -> dict[str, Tally]:
        out = {}
        for name in settings.opponents:
            outcomes = []
            for g in range(settings.games):
                rng = random.Random(settings.seed * 1_000_003 + g)
                other = Expert(rng, noise=0.0) if name == "expert" else RandomPlayer(rng)
                seat = g % 2
                players = [NetPlayer(weights), other] if seat == 0 else [other, NetPlayer(weights)]
                outcomes.append("win" if play(players, settings.seed + g) == seat else "loss")
            out[name] = counted(outcomes)
        return out


class ToyGame:
    """The ``SimulatedGame`` protocol: days simulated from ``dataset.seed``, rows of a fixed action space."""

    name = NAME
    source = "simulator"
    option_dim = 0
    version = 1
    refusal = ReplayError

    def columns(self, max_options: int) -> tuple:
        return ()

    def dims(self, max_options: int) -> tuple[int, int]:
        return FEATURE_DIM, ACTION_DIM

    def identity(self, versions=()) -> dict:
        return {"game": NAME, "version": self.version, "FEATURE_DIM": FEATURE_DIM, "ACTION_DIM": ACTION_DIM}

    def simulate(self, episode_id: int, seed: int, *, max_turns: int) -> dict:
        rng = random.Random(seed)
        start = random.Random(seed ^ 0x5EED).randint(9, MAX_PILE)
        experts = [Expert(rng, noise=0.05), Expert(rng, noise=0.05)]
        pile, side, actions = start, 0, []
        while pile:
            a = experts[side].act({"pile": pile, "side": side})
            actions.append([side, a])
            pile -= a + 1
            side = 1 - side
        return {"episode_id": episode_id, "start": start, "actions": actions, "winner": actions[-1][0]}

    def encode(self, record: dict, *, would_ko: bool):
        eid, pile = int(record["episode_id"]), int(record["start"])
        rows = []
        for d, (side, a) in enumerate(record["actions"]):
            if a not in legal(pile):
                raise ReplayError(f"episode {eid}: decision {d}: take {a + 1} from a pile of {pile}")
            rows.append((side, d, pile, a))
            pile -= a + 1
        if pile != 0 or rows[-1][0] != record["winner"]:
            raise ReplayError(f"episode {eid}: the record's winner is not who took the last token")
        n = len(rows)
        side = np.array([r[0] for r in rows], np.int8)
        step = np.array([d // 2 for _, d, _, _ in rows], np.int32)  # each side's own count of decisions
        last = np.array([step[side == s].max() for s in (0, 1)], np.int32)
        mask = np.zeros((n, ACTION_DIM), bool)
        for i, (_, _, p, _) in enumerate(rows):
            mask[i, legal(p)] = True
        terminal = step == last[side]
        won = np.where(side == record["winner"], 1.0, -1.0).astype(np.float32)
        columns = {
            "episode_id": np.full(n, eid, np.int64),
            "side": side,
            "step_id": step,
            "decision_id": np.arange(n, dtype=np.int64) + np.int64(eid) * MAX_DECISIONS,
            "substep": np.zeros(n, np.int16),
            "new_episode": step == 0,
            "terminal": terminal,
            "is_self": side == 0,
            "features": np.array([features(p, s) for s, _, p, _ in rows], np.float32),
            "action_mask": mask,
            "label": np.array([r[3] for r in rows], np.int32),
            "would_ko": np.zeros((n, ACTION_DIM), np.float32),
            "would_ko_valid": np.zeros(n, bool),
            "aux_ko": np.zeros(n, np.float32),
            "aux_prize_delta": np.zeros(n, np.float32),
            "aux_terminal": terminal.astype(np.float32),
            "aux_return": won,
            "aux_valid": np.ones(n, bool),
        }
        return columns, {"rows": n, "decisions": n}

    def arena(self) -> ToyArena:
        return ToyArena()


GAME = ToyGame()
