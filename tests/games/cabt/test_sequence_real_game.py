"""The daily sequence on the real game's demo corpus (extra cabt): each day's canonical model plays random, first
and the day before's model (intervals in the table, errors none), and each day's exported submission plays in
Kaggle's own harness."""

from __future__ import annotations

import json

import pytest

from tcgexp.app import compose
from tcgexp.sequence.run import run_sequence
from tests.conftest import CABT_DEMO
from tests.games.cabt.test_submission import harness

pytestmark = pytest.mark.extra("cabt")
DAYS = ["2026-07-27", "2026-07-28"]


@pytest.fixture(scope="module")
def two_days(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("real_sequence")
    o = [
        f"sequence.days=[{','.join(DAYS)}]",
        f"sequence.folder={tmp / 'seq'}",
        f"dataset.root={tmp / 'data'}",
        "sequence.export=true",
        "model.hidden=16",
        "trainer.epochs=1",
        "tracking=off",
        "eval.games=20",
        *CABT_DEMO,
    ]
    lines: list[str] = []
    run_sequence(compose(*o, config_name="sequence"), o, compose, console=lines.append)
    return tmp, lines


def test_each_day_plays_random_first_and_the_day_before(two_days):
    tmp, lines = two_days
    phases = json.loads((tmp / "seq" / "sequence.json").read_text())["phases"]
    assert sorted(phases[0]["eval"]) == ["first", "random"]
    assert sorted(phases[1]["eval"]) == ["first", "previous", "random"]
    for p in phases:
        for name, t in p["eval"].items():
            assert t["games"] == 20 and not t["errors"], (p["day"], name, t["errors"][:1])
    rows = json.loads((tmp / "seq" / "days.json").read_text())["days"]
    assert rows[1]["eval"]["previous"]["verdict"] in ("better", "within noise", "worse")
    assert rows[1]["eval"]["random"]["vs_day_before"]["verdict"] in ("better", "within noise", "worse")
    assert any("vs previous" in line for line in lines), "the table names the day before's model"


def test_each_days_submission_plays_in_kaggles_harness(two_days):
    tmp, _ = two_days
    for day in DAYS:
        main = tmp / "seq" / "phases" / day / "submission" / "main.py"
        (episode,) = harness([str(main), "random"], 1, cwd=tmp)
        assert episode["statuses"] == ["DONE", "DONE"], (day, episode["statuses"])
