"""tcgexp-export's search submission (``eval.agent.kind=search``) run by Kaggle's own harness (extra cabt)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.games.cabt.policies import random_weights
from tests.games.cabt.test_submission import export

pytestmark = pytest.mark.extra("cabt")

# both seats against the engine's first; each game's last statuses and the search agent's bank left
PLAY = r"""
import json, sys
from kaggle_environments import make
out = []
for agents, me in (([sys.argv[1], "first"], 0), (["first", sys.argv[1]], 1)):
    env = make("cabt")
    env.run(agents)
    last = env.steps[-1]
    out.append({"statuses": [a["status"] for a in last], "bank": last[me]["observation"]["remainingOverageTime"]})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_search_export_searches_inside_kaggles_harness_on_its_bank(tmp_path):
    """``eval.agent.kind=search``: main.py carries the search agent (the policy its prior, the engine library the
    harness ships); Kaggle's harness plays it against first in both seats: every status DONE, the bank spent
    in part only, each of its answers legal (the harness would have said INVALID)."""
    _, sub, said = export(tmp_path, random_weights(seed=4), "eval.agent.kind=search", "eval.agent.per_decision=0.2")
    assert "the search agent answers" in said and "observations legally" in said, said
    main = sub / "main.py"
    assert "_SEARCHER = _searcher()" in main.read_text()
    played = subprocess.run(
        [sys.executable, "-c", PLAY, str(main)], cwd=tmp_path, capture_output=True, text=True, timeout=1800
    )
    assert played.returncode == 0, played.stderr[-2000:]
    games = json.loads(played.stdout.strip().splitlines()[-1])
    assert all(g["statuses"] == ["DONE", "DONE"] for g in games), games
    assert all(60 < g["bank"] < 600 for g in games), games  # it thought (the bank moved) and kept its reserve
