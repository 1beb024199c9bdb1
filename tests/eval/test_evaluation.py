"""The evaluation names no game: it asks the run's game for its arena, refuses a game without one in one line
(naming those that have one), records what the arena counts, and reads back a run recorded before it moved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tcgexp.errors import ConfigError
from tcgexp.eval.config import OLD_TARGETS, TARGET, eval_node, run_config
from tcgexp.eval.evaluate import Evaluation, arena_of, line, record
from tcgexp.games import registry
from tcgexp.games.play import Arena, EvalSettings, Player, WeightsRefused
from tcgexp.lifecycle.ckpt_files import CheckpointError
from tcgexp.lifecycle.provenance import upgrade
from tcgexp.winrate import counted

SETTINGS = {
    "enabled": True,
    "agent": None,
    "opponents": ["a", "b"],
    "games": 4,
    "deck": None,
    "checkpoint": "best",
    "seed": 3,
    "max_steps": 10,
    "max_seconds": 1.0,
}


def evaluation(**kw) -> Evaluation:
    return Evaluation(**{**SETTINGS, "workers": 0, "paired": True, **kw})


class StubArena:
    def __init__(self, refuse=None) -> None:
        self.checked, self.played, self.refuse = [], [], refuse

    def check(self, settings, run_cfg) -> None:
        self.checked.append((settings, run_cfg))
        if "nope" in settings.opponents:
            raise ConfigError("eval.opponents: 'nope' is no player")

    def play(self, weights, state, settings, *, progress=None):
        if self.refuse:
            raise WeightsRefused(self.refuse)
        self.played.append((sorted(weights), settings))
        return {o: counted(["win", "loss", "draw", "win"][: settings.games]) for o in settings.opponents}


class StubGame:
    name, source, option_dim = "stub_arena", "simulator", 0

    def __init__(self, arena) -> None:
        self._arena = arena

    def arena(self):
        return self._arena


def a_run(tmp_path: Path, game: str, target: str = TARGET) -> Path:
    """A finished run of `game` (a checkpoint sealed as tcgexp writes it) whose saved config names `target`."""
    from tests.games.cabt.policies import fake_run

    run = fake_run(tmp_path / "run")
    state_file = run / "checkpoints" / "best" / "state.json"
    state = json.loads(state_file.read_text())
    state["config"]["dataset"]["game"] = game
    state_file.write_text(json.dumps(state))
    from tcgexp.lifecycle.checkpoint import seal

    seal(run / "checkpoints" / "best")
    saved = {"eval": {"_target_": target, "_partial_": True, "games": 4}, "tracking": {}}
    (run / ".hydra" / "config.yaml").write_text(json.dumps(saved))
    return run


def test_the_games_arenas_meet_the_protocol():
    assert isinstance(registry.GAMES["cabt"].arena(), Arena)
    assert registry.GAMES["sim"].arena() is None
    from tcgexp.games.cabt.players import FirstPolicy

    assert isinstance(FirstPolicy([1] * 60), Player)


def test_a_game_without_an_arena_is_refused_naming_those_with_one():
    with pytest.raises(ConfigError) as got:
        evaluation().check({"dataset": {"game": "sim"}})
    said = str(got.value)
    assert "dataset.game='sim'" in said and "eval.enabled=false" in said and "\n" not in said
    for name, g in registry.GAMES.items():
        assert (f"dataset.game={name}" in said) == (arena_of(g) is not None)
    with pytest.raises(ConfigError, match="dataset.game='no_such_game'"):
        evaluation().check({"dataset": {"game": "no_such_game"}})


def test_an_arena_is_asked_to_check_then_to_play(monkeypatch, tmp_path):
    arena = StubArena()
    monkeypatch.setitem(registry.GAMES, "stub_arena", StubGame(arena))
    run = a_run(tmp_path, "stub_arena")
    found = evaluation()(run)
    assert set(found) == {"a", "b"} and found["a"]["games"] == 4 and found["a"]["wins"] == 2
    settings = arena.played[0][1]
    assert isinstance(settings, EvalSettings) and settings.source.endswith("best") and settings.seed == 3
    assert arena.checked[0][0] is settings  # checked with the very settings it plays
    weights, state, source = settings.load(str(run))  # another run's weights, read by the evaluation
    assert sorted(weights) == arena.played[0][0] and state["config"]["dataset"]["game"] == "stub_arena"
    assert source == settings.source
    with pytest.raises(ConfigError, match="'nope' is no player"):
        evaluation(opponents=["nope"]).check({"dataset": {"game": "stub_arena"}})
    result = record(run, found)
    assert result["eval"]["a"] == found["a"] and result["status"] == "completed"
    # a tally of the common keys alone is said in one line too
    assert line("a", found["a"]) == ("[eval] a: 2/4 won (50.0 %, 95 % Wilson [15.0, 85.0]), 1 drawn, 1 lost, 0 errors")


def test_weights_an_arena_refuses_are_the_checkpoints_error(monkeypatch, tmp_path):
    monkeypatch.setitem(registry.GAMES, "stub_arena", StubGame(StubArena(refuse="no option head")))
    with pytest.raises(CheckpointError, match="no option head"):
        evaluation()(a_run(tmp_path, "stub_arena"))


def test_the_real_games_tally_line_is_as_it_was():
    t = {
        "games": 10, "wins": 6, "draws": 1, "losses": 3, "errors": [], "win_rate": 0.6, "interval": [0.3, 0.85],
        "capped": 1, "paired": False, "unpaired_because": "eval.paired=false", "games_per_second": 2.5,
        "move_seconds": {"median": 0.001, "p99": 0.002},
    }  # fmt: skip
    assert line("random", t) == (
        "[eval] random: 6/10 won (60.0 %, 95 % Wilson [30.0, 85.0]), 1 drawn, 3 lost, 0 errors, 1 capped at "
        "eval.max_steps/max_seconds (draws); unpaired deals (eval.paired=false); 2.5 games/s; moves median "
        "1.00 ms, p99 2.00 ms"
    )


@pytest.mark.parametrize("old", OLD_TARGETS)
def test_a_run_recorded_before_the_move_is_read_back_at_the_new_path(tmp_path, old):
    run = a_run(tmp_path, "cabt", target=old)
    assert run_config(run)["eval"]["_target_"] == TARGET
    node = eval_node(run, ["eval.games=7"])
    assert node._target_ == TARGET and node.games == 7
    from tcgexp.config import build

    assert isinstance(build(node)(), Evaluation)
    # a resume reads a checkpoint's config through upgrade: the old class is named at its new place
    saved = {"eval": {"_target_": old, "games": 4}, "trainer": {"_target_": "tcgexp.train.trainer.Trainer"}}
    up = upgrade(saved)
    assert up["eval"]["_target_"] == TARGET and up["trainer"] == saved["trainer"]
    assert OmegaConf.create(up).eval.games == 4
