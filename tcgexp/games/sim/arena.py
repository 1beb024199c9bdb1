"""The built-in game's match runner: two ``Player``s (``tcgexp.games.play``) over seeded games of the simulator,
counted (``tcgexp.winrate.counted``).

Game g is dealt from ``seed + g`` as an episode of that seed is (the same two decks, the same game rng stream:
``record.game_seed``), the first player in seat 0 in even games and seat 1 in odd ones; each player is told
of each new game (``new_episode``) and ``act``s on the simulator's ``Game`` itself (its legal actions read from
it). An illegal action ends the game as a loss for whoever made it (listed under ``errors``); a game that
reaches ``MAX_DECISIONS`` decisions is a draw (``capped``). The tally is the first player's.
"""

from __future__ import annotations

import random

from ...winrate import Tally, counted
from .cards import ARCHETYPES
from .engine import Game
from .record import DEFAULT_MAX_TURNS, MAX_DECISIONS, game_seed, meta_seed


def deal(seed: int, max_turns: int = DEFAULT_MAX_TURNS) -> Game:
    """The game of `seed`: its two decks drawn as an episode of that seed draws them, its own game stream."""
    meta = random.Random(meta_seed(seed))
    meta.randrange(2)  # the recorded side an episode draws first
    decks = [ARCHETYPES[meta.randrange(len(ARCHETYPES))] for _ in range(2)]
    return Game(decks, game_seed(seed), max_turns)


def play_game(players: list, seed: int, *, me: int, max_turns: int = DEFAULT_MAX_TURNS) -> dict:
    """One game, `players[i]` in seat i: its outcome from seat `me`'s side (win, draw, loss), its error, if capped."""
    game = deal(seed, max_turns)
    for p in players:
        p.new_episode()
    out = {"seat": me, "outcome": "loss", "error": None, "capped": False, "steps": 0}
    while not game.over:
        if out["steps"] >= MAX_DECISIONS:
            out.update(outcome="draw", capped=True)
            return out
        who = game.side
        action = players[who].act(game)
        if action not in game.legal_actions():
            out["error"] = f"seat {who} answered illegally at step {out['steps']}: {action!r} is no legal action"
            out["outcome"] = "loss" if who == me else "win"
            return out
        game.step(action)
        out["steps"] += 1
    out["outcome"] = "draw" if game.winner is None else ("win" if game.winner == me else "loss")
    return out


def play_match(player, opponent, *, games: int, seed: int = 0, max_turns: int = DEFAULT_MAX_TURNS) -> Tally:
    """`games` games of `player` against `opponent`, seats alternating (game g: `player` in seat g % 2), counted
    from `player`'s side, its seats too."""
    results = []
    for g in range(games):
        me = g % 2
        seats = [player, opponent] if me == 0 else [opponent, player]
        results.append(play_game(seats, seed + g, me=me, max_turns=max_turns))
    tally = counted(
        [r["outcome"] for r in results],
        errors=[f"game {g} (seat {r['seat']}): {r['error']}" for g, r in enumerate(results) if r["error"]],
        capped=sum(r["capped"] for r in results),
    )
    tally["seats"] = {
        str(s): {
            "games": sum(r["seat"] == s for r in results),
            "wins": sum(r["seat"] == s and r["outcome"] == "win" for r in results),
        }
        for s in (0, 1)
    }
    return tally
