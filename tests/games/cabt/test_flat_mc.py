"""The uniform belief and the flat Monte Carlo floor over the engine's forks (extra cabt): every world fills the
decision's hidden zones with cards consistent with what the agent saw; the agent plays whole games in the arena."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tcgexp.games.cabt.arena import play_game
from tcgexp.games.cabt.belief import UniformBelief, basic_ids, seen
from tcgexp.games.cabt.engine import engine, harness_deck
from tcgexp.games.cabt.flat_mc import FlatMonteCarlo
from tcgexp.games.cabt.players import FirstPolicy
from tcgexp.games.cabt.search import Search, needed

pytestmark = pytest.mark.extra("cabt")


def test_every_world_fills_the_hidden_zones_consistently_and_forks():
    eng, deck, rng = engine(), harness_deck(), random.Random(5)
    belief = UniformBelief(deck, basics=basic_ids(eng.cards()), seed=1)
    forks = 0
    with eng.battle(deck, deck) as battle, Search(eng) as search:
        while battle.result < 0 and forks < 150:
            obs = battle.obs
            world = belief.sample(obs)
            need = needed(obs)
            for zone, n in need.items():
                assert len(getattr(world, zone)) >= n, zone
            me = obs["current"]["players"][obs["current"]["yourIndex"]]
            if need["your_deck"]:  # (while the deck itself is searched, the decision shows it instead)
                own = Counter(world.your_deck[: need["your_deck"]] + world.your_prize[: need["your_prize"]])
                unseen = Counter(deck) - Counter(seen(me))
                assert not own - unseen, f"cards beyond the agent's list: {own - unseen}"
            search.release(search.begin(obs, world))
            forks += 1
            sel = obs["select"]
            k = max(1, sel["minCount"]) if sel["maxCount"] else 0
            battle.select(sorted(rng.sample(range(len(sel["option"])), k)) if k else [])


def test_flat_monte_carlo_plays_whole_games_against_first():
    eng, deck = engine(), harness_deck()
    agent = FlatMonteCarlo(eng, deck, belief=UniformBelief(deck, basics=basic_ids(eng.cards()), seed=0), worlds=1)
    for me in (0, 1):
        sides = [agent, FirstPolicy(deck)] if me == 0 else [FirstPolicy(deck), agent]
        out = play_game(eng, sides, me=me, max_steps=2000, max_seconds=600.0)
        assert out["error"] is None and out["outcome"] in ("win", "draw", "loss"), out
    assert agent.searched and agent.refused == 0


def test_flat_monte_carlo_is_an_opponent_wherever_the_arena_plays():
    """``flat-mc`` names the searcher as any opponent is named (``tcgexp-eval``, a run's evaluation, a sweep)."""
    from tcgexp.games.cabt.arena import Settings, Side, play_match

    tally = play_match(Side("first", "first"), Side("flat-mc", "flat-mc"), Settings(games=2, workers=1, seed=3))
    assert tally["games"] == 2 and not tally["errors"], tally["errors"][:1]
