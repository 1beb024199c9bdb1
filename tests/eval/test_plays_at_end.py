"""Whether a run plays at its end (``tcgexp.eval.config.plays_at_end``): ``eval.enabled`` left null is on for a run
trained on imported episodes of the real game (``dataset=cabt``), off for the built-in game and the demo corpus
(as before), and ``eval.enabled`` set either way wins; every place that asks (the end of training, the preflight
check, a win-rate optimized_metric) asks it."""

from __future__ import annotations

import pytest

from tcgexp.app import compose
from tcgexp.errors import ConfigError
from tcgexp.eval.config import plays_at_end
from tcgexp.train.metric import check_metric


@pytest.mark.parametrize(
    ("overrides", "plays"),
    [
        ((), False),  # the built-in game: no arena, as before
        (("eval.enabled=true",), True),
        (("dataset=cabt_demo",), False),  # the demo corpus plays when asked, as before
        (("+experiment=real_game",), True),  # ... and real_game asks
        (("+experiment=real_game", "eval.enabled=false"), False),
        (("dataset=cabt",), True),  # the user's imported episodes: a win rate at the end by default
        (("dataset=cabt", "eval.enabled=false"), False),
        (("dataset=cabt", "dataset.demo.episodes_per_day=16"), False),  # a demo of the real game
    ],
)
def test_who_plays_at_the_end(overrides, plays):
    cfg = compose(*overrides)
    assert cfg.eval.enabled in (None, True, False)
    assert plays_at_end(cfg) is plays


def test_the_default_is_null_in_the_composed_config():
    assert compose().eval.enabled is None and compose("dataset=cabt").eval.enabled is None


def test_a_win_rate_metric_is_accepted_where_the_run_plays_by_default():
    check_metric("eval/win_rate/random", compose("dataset=cabt"))
    for overrides in (("dataset=cabt", "eval.enabled=false"), ("dataset=cabt_demo",)):
        with pytest.raises(ConfigError, match=r"set eval.enabled=true") as refused:
            check_metric("eval/win_rate/random", compose(*overrides))
        assert "\n" not in str(refused.value)


def test_eval_enabled_takes_only_a_bool_or_null():
    with pytest.raises(Exception, match="enabled"):
        compose("eval.enabled=maybe")
