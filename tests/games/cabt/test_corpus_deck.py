"""The deck a run trained on imported episodes plays by default: its players' most played deck (extra cabt).

The session's tiny demo corpus stands for imported episodes (the same replay ZIPs and day Parquet an import
writes); a run's config that names it with ``dataset.demo.episodes_per_day=0`` is a run of ``dataset=cabt``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from tests.games.cabt.policies import fake_run

pytestmark = pytest.mark.extra("cabt")


def _players(root) -> Counter:
    import pyarrow.parquet as pq

    rows: Counter = Counter()
    for day in sorted((root / "bc_data").glob("*.parquet")):
        rows.update(p for p in pq.read_table(day, columns=["player"])["player"].to_pylist() if p)
    return rows


def _imported(root, players) -> dict:
    return {
        "dataset": {
            "game": "cabt",
            "root": str(root),
            "demo": {"episodes_per_day": 0},
            "filter": {"players": players},
            "max_options": 64,
            "would_ko": True,
        },
        "model": {"memory": True},
        "eval": {"opponents": ["random"], "games": 2},
    }


@pytest.fixture(scope="module")
def other(cabt_demo_root):
    """A teacher of the corpus whose deck is not the best teacher's (the default's), and that deck."""
    from tcgexp.games.cabt.demo import BEST, deck_of

    best = deck_of(BEST)[1]
    name = next(p for p, _ in _players(cabt_demo_root).most_common() if sorted(deck_of(p)[1]) != sorted(best))
    return name, deck_of(name)[1]


def test_a_run_on_imported_episodes_plays_its_players_most_played_deck(cabt_demo_root, other):
    """policy_deck with eval.deck null: the filtered player's own deck, read back from the replay ZIPs, with why;
    eval.deck set wins; a demo run keeps the best teacher's; a corpus not here says why and plays the default."""
    from tcgexp.games.cabt.demo import BEST, deck_of
    from tcgexp.games.cabt.evaluation import policy_deck

    name, theirs = other
    label, cards, why = policy_deck(None, _imported(cabt_demo_root, [name]))
    assert sorted(cards) == sorted(theirs) and str(cabt_demo_root) in label
    assert "used most" in why and f"players=['{name}']" in why
    assert policy_deck("harness", _imported(cabt_demo_root, [name]))[2] is None
    demo_cfg = _imported(cabt_demo_root, [name])
    demo_cfg["dataset"]["demo"]["episodes_per_day"] = 16
    assert policy_deck(None, demo_cfg) == (*deck_of(None), None)
    gone = _imported(cabt_demo_root.parent / "elsewhere", [name])
    label, cards, why = policy_deck(None, gone)
    assert cards == deck_of(BEST)[1] and "is not here" in why and "eval.deck=" in why


def test_tcgexp_eval_of_such_a_run_says_which_deck_and_why(cabt_demo_root, other, tmp_path):
    """tcgexp-eval of a run trained on imported episodes: one line names the deck it played and why, and
    result.json's tally records the deck."""
    name, _ = other
    run = fake_run(tmp_path / "run")
    state_file = run / "checkpoints" / "best" / "state.json"
    state = json.loads(state_file.read_text())
    state["config"] = _imported(cabt_demo_root, [name])
    state_file.write_text(json.dumps(state))
    from tcgexp.lifecycle.checkpoint import seal

    seal(run / "checkpoints" / "best")
    done = subprocess.run(
        [sys.executable, "-m", "tcgexp.cli.evaluate", str(run), "eval.games=2", "eval.opponents=[random]"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    said = [ln for ln in done.stdout.splitlines() if ln.startswith("[eval] the policy played")]
    assert len(said) == 1 and str(cabt_demo_root) in said[0] and name in said[0], done.stdout
    tally = json.loads((run / "result.json").read_text())["eval"]["random"]
    assert str(cabt_demo_root) in tally["deck_name"] and "used most" in tally["deck_why"]
