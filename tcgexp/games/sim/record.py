"""Episode records: playing a seeded episode and validating a stored record.

A record is the durable replay source. The seed fixes two independent rng
streams: the *game* stream (shuffles, mulligans, coin flips, first player),
which a replay re-creates, and the *meta* stream (recorded side, decks,
player names and styles, the players' sampling), which is consumed only while
playing. Since the players never touch the game stream, replaying needs just
the seed, the two deck names and the action list.
"""

from __future__ import annotations

import random

from .cards import ARCHETYPES
from .engine import END_REASONS, Game
from .players import ScriptedPlayer, make_players

SIM_VERSION = "tcgsim-2"
DEFAULT_MAX_TURNS = 60
MAX_DECISIONS = 10000  # decision_id = episode_id * 10000 + decision index
MAX_EPISODE_ID = (2**63 - 1) // MAX_DECISIONS - 1
RECORD_KEYS = ("episode_id", "seed", "self_side", "players", "actions", "winner", "end_reason", "turns")


class ReplayError(ValueError):
    """A record that cannot be replayed: malformed, or an action the rules reject."""


def game_seed(seed: int) -> int:
    # Disjoint streams per seed: seed*4+1 (game) and seed*4+2 (meta) never collide across seeds.
    return (seed << 2) | 1


def meta_seed(seed: int) -> int:
    return (seed << 2) | 2


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def simulate_episode(episode_id: int, seed: int, *, max_turns: int = DEFAULT_MAX_TURNS) -> dict:
    """Play one full game between two scripted players; return its JSON-serializable record."""
    if not _is_int(episode_id) or not 0 <= episode_id <= MAX_EPISODE_ID:
        raise ValueError(f"episode_id must be an int in [0, {MAX_EPISODE_ID}], got {episode_id!r}")
    if not _is_int(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if not _is_int(max_turns) or max_turns < 1:
        raise ValueError(f"max_turns must be a positive int, got {max_turns!r}")
    meta = random.Random(meta_seed(seed))
    self_side = meta.randrange(2)
    decks = [ARCHETYPES[meta.randrange(len(ARCHETYPES))] for _ in range(2)]
    names, styles = make_players(meta)
    players = [ScriptedPlayer(names[i], styles[i], meta) for i in range(2)]
    game = Game(decks, game_seed(seed), max_turns)
    actions: list[list[int]] = []
    while not game.over:
        if len(actions) >= MAX_DECISIONS:  # unreachable with sane max_turns; guards the id scheme
            raise RuntimeError(f"episode {episode_id}: more than {MAX_DECISIONS} actions")
        side = game.side
        a = players[side].choose(game, game.legal_actions())
        actions.append([side, a])
        game.step(a)
    return {
        "episode_id": episode_id,
        "seed": seed,
        "sim_version": SIM_VERSION,
        "max_turns": max_turns,
        "self_side": self_side,
        "players": [{"name": names[i], "deck": decks[i], "style": styles[i]} for i in range(2)],
        "actions": actions,
        "winner": game.winner,
        "end_reason": game.end_reason,
        "turns": game.turn,
    }


def validate_record(record) -> dict:
    """Check a record's structure; return its replay inputs or raise ReplayError.

    The players' ``style`` and ``name`` are informational only: replay never reads them.
    """
    if not isinstance(record, dict):
        raise ReplayError(f"record must be a dict, got {type(record).__name__}")
    eid = record.get("episode_id", "?")
    where = f"episode {eid}"
    missing = [k for k in RECORD_KEYS if k not in record]
    if missing:
        raise ReplayError(f"{where}: record is missing keys {missing}")
    if not _is_int(eid) or not 0 <= eid <= MAX_EPISODE_ID:
        raise ReplayError(f"{where}: episode_id must be an int in [0, {MAX_EPISODE_ID}]")
    seed = record["seed"]
    if not _is_int(seed) or seed < 0:
        raise ReplayError(f"{where}: seed must be a non-negative int, got {seed!r}")
    version = record.get("sim_version", SIM_VERSION)
    if version != SIM_VERSION:
        raise ReplayError(f"{where}: record sim_version {version!r} != {SIM_VERSION!r}")
    max_turns = record.get("max_turns", DEFAULT_MAX_TURNS)
    if not _is_int(max_turns) or max_turns < 1:
        raise ReplayError(f"{where}: max_turns must be a positive int, got {max_turns!r}")
    self_side = record["self_side"]
    if not _is_int(self_side) or self_side not in (0, 1):
        raise ReplayError(f"{where}: self_side must be 0 or 1, got {self_side!r}")
    players = record["players"]
    if not isinstance(players, (list, tuple)) or len(players) != 2:
        raise ReplayError(f"{where}: players must be a list of 2 entries")
    decks = []
    for i, p in enumerate(players):
        if not isinstance(p, dict) or p.get("deck") not in ARCHETYPES:
            raise ReplayError(f"{where}: players[{i}] must be a dict with a deck in {ARCHETYPES}")
        decks.append(p["deck"])
    actions = record["actions"]
    if not isinstance(actions, (list, tuple)):
        raise ReplayError(f"{where}: actions must be a list")
    if len(actions) > MAX_DECISIONS * 8:
        raise ReplayError(f"{where}: {len(actions)} actions is implausibly many")
    for d, item in enumerate(actions):
        if not isinstance(item, (list, tuple)) or len(item) != 2 or not _is_int(item[0]) or not _is_int(item[1]):
            raise ReplayError(f"{where}: action entry {d} must be a [side, action] pair of ints, got {item!r}")
    winner = record["winner"]
    if winner is not None and (not _is_int(winner) or winner not in (0, 1)):
        raise ReplayError(f"{where}: winner must be 0, 1 or None, got {winner!r}")
    if record["end_reason"] not in END_REASONS:
        raise ReplayError(f"{where}: end_reason must be one of {END_REASONS}, got {record['end_reason']!r}")
    if not _is_int(record["turns"]):
        raise ReplayError(f"{where}: turns must be an int")
    return {
        "episode_id": eid,
        "seed": seed,
        "max_turns": max_turns,
        "self_side": self_side,
        "decks": decks,
        "actions": actions,
        "winner": winner,
        "end_reason": record["end_reason"],
        "turns": record["turns"],
    }


def new_game(rec: dict) -> Game:
    """The game a validated record replays (same decks, same game rng stream)."""
    return Game(rec["decks"], game_seed(rec["seed"]), rec["max_turns"])
