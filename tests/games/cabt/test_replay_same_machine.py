"""An evaluation replayed on the same machine plays the same games (extra cabt).

What the docs claim exactly (docs/tutorial-real-game.md): with paired deals, the same weights on the same
machine and library builds play the same games, so ``tcgexp-eval`` run twice gives identical tallies. What they
do not claim: the same tallies on another CPU (BLAS sums products in another order there, and a near-tie
between two options' scores can fall the other way: 169/200 here against 170/200 on 2026-12-05).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.games.cabt.policies import fake_run, random_weights

pytestmark = pytest.mark.extra("cabt")

SAME = ("games", "wins", "draws", "losses", "seats", "decisions_per_game", "weights_sha256", "capped", "errors")


def test_tcgexp_eval_twice_on_the_same_machine_gives_identical_tallies(tmp_path):
    run = fake_run(tmp_path / "run", seed=3, weights=random_weights(seed=3, memory_scale=16.0))
    tallies = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-m", "tcgexp.cli.evaluate", str(run), "eval.games=6", "eval.opponents=[random,first]"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        tallies.append(json.loads((run / "result.json").read_text())["eval"])
    for name in ("random", "first"):
        first, again = ({k: t[name][k] for k in SAME} for t in tallies)
        assert first == again, (name, first, again)
        assert tallies[0][name]["paired"] and first["decisions_per_game"] > 0


def test_an_evaluation_reports_its_games_as_one_count_over_every_opponent(tmp_path):
    from tcgexp.app import compose
    from tcgexp.config import build

    run = fake_run(tmp_path / "run", seed=4, weights=random_weights(seed=4, memory_scale=16.0))
    evaluation = build(compose("eval.games=4", "eval.opponents=[random,first]").eval)()
    seen: list[tuple[int, int]] = []
    found = evaluation(run, progress=lambda done, total: seen.append((done, total)))
    assert set(found) == {"random", "first"}
    assert {t for _, t in seen} == {8}, seen  # one bar: both opponents' games
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and seen[-1] == (8, 8), seen
