"""A training run that builds the real game's demo corpus shows it as it goes (extra cabt).

``prepare_data`` (what ``python -m tcgexp.train`` runs before the first step) hands its progress callback
(``tcgexp.progress.stage_progress``: the Rich bars the training loop also shows) to the corpus build, and the
build reports the demo's self-play, each day's encoding and the days, while they run.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.extra("cabt")


def test_training_on_an_unbuilt_demo_corpus_reports_its_build_stages(tmp_path, monkeypatch):
    from tcgexp.train import run
    from tests.conftest import CABT_DEMO, CABT_DEMO_RATINGS, compose_config

    seen: dict[str, list[tuple[int, int]]] = {}
    made = run.stage_progress

    def recording(*args, **kwargs):
        progress, update = made(*args, **kwargs)

        def both(stage, done, total):
            seen.setdefault(stage, []).append((done, total))
            update(stage, done, total)

        return progress, both

    monkeypatch.setattr(run, "stage_progress", recording)
    root = tmp_path / "data"
    root.mkdir()
    (root / "ratings.json").write_text(json.dumps({"games_per_pair": 0, "ratings": CABT_DEMO_RATINGS}))
    cfg = compose_config(f"dataset.root={root}", *CABT_DEMO, "tracking=off")
    run.prepare_data(cfg)
    play = [s for s in seen if s.endswith("self-play")]
    encode = [s for s in seen if s.endswith("encode")]
    assert play and encode and "days" in seen, sorted(seen)
    done, total = seen[play[0]][-1]
    assert done == total == 16 and len(seen[play[0]]) > 1, seen[play[0]]  # as it goes, not once at the end
    assert seen["days"][-1] == (1, 1)
