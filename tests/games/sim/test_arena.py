"""The built-in game's match runner: Players over seeded games of the simulator, seats alternating, counted."""

from __future__ import annotations

import random

from tcgexp.games.play import Player
from tcgexp.games.sim.arena import deal, play_match
from tcgexp.games.sim.players import ScriptedPlayer, draw_style
from tcgexp.games.sim.record import simulate_episode
from tcgexp.winrate import INTERVAL_METHOD, wilson


def scripted(seed: int) -> ScriptedPlayer:
    rng = random.Random(seed)
    return ScriptedPlayer(f"p{seed}", draw_style(rng), rng)


class FirstLegal:
    def new_episode(self) -> None:
        self.episodes = getattr(self, "episodes", 0) + 1

    def act(self, game) -> int:
        return game.legal_actions()[0]


class Illegal(FirstLegal):
    def act(self, game) -> int:
        return -1


def test_players_meet_the_protocol():
    assert isinstance(scripted(0), Player) and isinstance(FirstLegal(), Player)


def test_a_game_is_dealt_as_the_episode_of_its_seed():
    for seed in (0, 7, 123):
        record = simulate_episode(0, seed)
        game = deal(seed, record["max_turns"])
        assert [s.archetype for s in game.sides] == [p["deck"] for p in record["players"]]


def test_match_alternates_seats_and_counts_the_first_players_side():
    first = FirstLegal()
    t = play_match(scripted(1), first, games=10, seed=3)
    assert t["games"] == 10 and t["wins"] + t["draws"] + t["losses"] == 10
    assert t["seats"] == {
        "0": {"games": 5, "wins": t["seats"]["0"]["wins"]},
        "1": {"games": 5, "wins": t["seats"]["1"]["wins"]},
    }
    assert t["seats"]["0"]["wins"] + t["seats"]["1"]["wins"] == t["wins"]
    assert t["win_rate"] == t["wins"] / 10 and t["interval"] == wilson(t["wins"], 10)
    assert t["interval_method"] == INTERVAL_METHOD and t["errors"] == []
    assert first.episodes == 10  # told of each new game
    again = play_match(scripted(1), FirstLegal(), games=10, seed=3)
    assert again == t  # seeded: the same games, the same tally


def test_an_illegal_answer_loses_the_game_and_is_listed():
    t = play_match(Illegal(), scripted(2), games=4, seed=0)
    assert t["losses"] == 4 and t["wins"] == 0 and len(t["errors"]) == 4
    assert "answered illegally" in t["errors"][0]
    t = play_match(scripted(2), Illegal(), games=4, seed=0)
    assert t["wins"] == 4 and len(t["errors"]) == 4
