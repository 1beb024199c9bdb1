"""A third game through ``tcgexp.api`` alone: registered, its days simulated and built, a run trained on them,
and the trained network evaluated in its own arena, with no edit of tcgexp (this folder holds all of it)."""

from __future__ import annotations

import json

import pytest

from tcgexp.api import Arena, Game, Player, SimulatedGame, compose, register, train

from .game import GAME, NAME, Expert, NetPlayer, RandomPlayer, play

TOY = [
    f"dataset.game={NAME}",
    "dataset.rows_per_day=3000",
    "dataset.episodes_per_shard=20",
    "dataset.row_group_rows=256",
    "dataset.workers=1",
    "tracking=off",
    "trainer.epochs=8",
    "model.memory=false",
    "model.hidden=32",
    "optimizer.lr=1e-2",
    "eval.enabled=true",
    "eval.opponents=[expert,random]",
    "eval.games=60",
]


def test_the_toy_game_is_a_game_and_its_players_and_arena_are_what_tcgexp_asks_for():
    assert isinstance(GAME, Game) and isinstance(GAME, SimulatedGame)
    assert isinstance(GAME.arena(), Arena)
    for player in (Expert(__import__("random").Random(0)), RandomPlayer(__import__("random").Random(0))):
        assert isinstance(player, Player)


def test_a_third_game_trains_and_evaluates_through_the_api_alone(tmp_path):
    import random

    register(GAME)
    register(GAME)  # the same object again: nothing changes
    cfg = compose(*TOY, f"dataset.root={tmp_path / 'data'}")
    result = train(cfg, run_dir=tmp_path / "run")
    assert result["status"] == "completed"
    # the rows the game encoded are the ones trained on: a policy that learned the experts' play
    assert result["final"]["accuracy"] > 0.9, result["final"]
    found = json.loads((tmp_path / "run" / "result.json").read_text())["eval"]
    assert set(found) == {"expert", "random"}
    for tally in found.values():
        assert tally["games"] == 60 and tally["wins"] + tally["draws"] + tally["losses"] == 60
        lo, hi = tally["interval"]
        assert 0.0 <= lo <= tally["win_rate"] <= hi + 1e-12 and hi <= 1.0
    # the toy's answer is known: a network that plays pile % 4 beats a random player nearly always
    assert found["random"]["win_rate"] > 0.9, found["random"]
    # and the arena's net player is the trained network: a perfect expert against it wins when it moves first
    # on a winning pile, whatever the network does; the network is no random player there
    from tcgexp.lifecycle.weights import checkpoint_of, read_weights

    weights, _ = read_weights(checkpoint_of(tmp_path / "run", "best"))
    net_wins = sum(play([NetPlayer(weights), RandomPlayer(random.Random(g))], g) == 0 for g in range(100))
    assert net_wins > 80


def test_a_game_named_by_its_module_path_is_found_without_registering(tmp_path):
    cfg = compose(
        "dataset.game=tests.games.toy.game:GAME",
        "dataset.rows_per_day=300",
        "dataset.episodes_per_shard=20",
        "dataset.row_group_rows=128",
        "dataset.workers=1",
        f"dataset.root={tmp_path / 'data'}",
    )
    from tcgexp.config import build

    corpus = build(cfg.dataset)
    corpus.build()
    assert corpus.manifests and all(m["rows"] > 0 for m in corpus.manifests.values())


@pytest.mark.parametrize("bad", ["no_such_game", "tests.games.toy.game:NOTHING"])
def test_an_unknown_game_is_refused_in_one_line_before_anything_is_written(bad, tmp_path):
    from tcgexp.api import ConfigError

    with pytest.raises(ConfigError) as exc:
        train(compose(f"dataset.game={bad}", f"dataset.root={tmp_path / 'data'}"), run_dir=tmp_path / "run")
    assert "\n" not in str(exc.value) and "dataset.game" in str(exc.value), exc.value
    assert not (tmp_path / "data").exists()
