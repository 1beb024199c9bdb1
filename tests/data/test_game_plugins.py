"""The data layer asks a game only its protocol: the registry finds games by name or package.module:ATTR."""

import pytest

from tcgexp.errors import ConfigError
from tcgexp.games import registry
from tcgexp.games.base import Game


def test_games_meet_the_protocol_and_load_by_path():
    for g in registry.GAMES.values():
        assert isinstance(g, Game)
    assert registry.game("tcgexp.games.sim.game:GAME") is registry.GAMES["sim"]


def test_register_refuses_a_taken_name_in_one_line():
    class Other:
        name, source = "sim", "simulator"

    with pytest.raises(ConfigError, match="taken"):
        registry.register(Other())
    assert registry.register(registry.GAMES["sim"]) is registry.GAMES["sim"]  # the same object: nothing happens


def test_unknown_game_names_the_known_ones():
    with pytest.raises(ConfigError, match="one of sim, cabt"):
        registry.game("nope")
    with pytest.raises(ConfigError, match="cannot be loaded"):
        registry.game("no_such_module_xyz:GAME")


def test_a_simulated_corpus_refuses_import_before_touching_the_root(tmp_path):
    from tcgexp.data.corpus import Corpus
    from tcgexp.data.days import SimulatedDays
    from tcgexp.data.errors import DataError

    c = Corpus(
        name="t", game="sim", root=str(tmp_path / "c"), start_date="2026-07-27", days=1, rows_per_day=100,
        row_group_rows=64, episodes_per_shard=4, val_fraction=0.1, seed=0, max_turns=60, would_ko=False,
        compression="zstd", workers=1, verify="quick", dates=None, date_from=None, date_to=None, storage=None,
        max_options=64, filter=None, demo=None,
    )  # fmt: skip
    assert isinstance(c.days, SimulatedDays)
    with pytest.raises(DataError, match="simulates its days"):
        c.import_episodes(str(tmp_path), None, print)
    assert not (tmp_path / "c").exists()
