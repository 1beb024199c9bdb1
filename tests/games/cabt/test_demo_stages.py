"""The demo build's stages each under their own label (extra cabt): the ratings round-robin (its 210 games, once
per root) apart from the day's self-play, then the day's import of its episodes, then its encoding."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.extra("cabt")


def test_a_demo_day_reports_the_round_robin_self_play_and_import_apart(tmp_path):
    from tcgexp.app import compose
    from tcgexp.config import build
    from tests.conftest import CABT_DEMO

    seen: list[tuple[str, int, int]] = []
    root = tmp_path / "data"
    corpus = build(compose(f"dataset.root={root}", *CABT_DEMO).dataset)
    corpus.build(progress=lambda stage, done, total: seen.append((stage, done, total)))
    day = corpus.dates[0]
    order = list(dict.fromkeys(stage for stage, _, _ in seen))
    assert order.index(f"{day} ratings round-robin") < order.index(f"{day} self-play") < order.index(f"{day} import")
    assert order.index(f"{day} import") < order.index(f"{day} encode"), order
    rr = [(d, t) for s, d, t in seen if s.endswith("ratings round-robin")]
    assert rr[-1] == (210, 210) and len(rr) > 1, rr  # 21 pairs x 10 games, as they go
    assert [(d, t) for s, d, t in seen if s == f"{day} self-play"][-1] == (16, 16)
    imported = [(d, t) for s, d, t in seen if s == f"{day} import"]
    assert imported == [(k, 16) for k in range(17)], imported  # a file at a time, as they are read
    assert (root / "ratings.json").exists()
