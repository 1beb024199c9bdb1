"""The import's keys checked before anything is written, a root an earlier version left stuck named, and the
import's own lines: what it filed (episodes and rounds), where undated episodes went, which ended in failure."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.extra("cabt")
ROOT = Path(__file__).resolve().parents[3]


def data(*args: str):
    return subprocess.run(
        [sys.executable, "-m", "tcgexp.data", "dataset=cabt", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Three episodes: one best-of-three (three rounds), one that ended INVALID, one with a dated sidecar."""
    from tcgexp.games.cabt import demo
    from tcgexp.games.cabt.engine import engine
    from tcgexp.games.cabt.selfplay import play_episode
    from tcgexp.games.cabt.teachers import Teacher

    db, decks = demo._db()
    out = tmp_path_factory.mktemp("in")
    bo3 = demo.play("expert-psychic", "club-metal", 5, bo=3, db=db, decks=decks) | {"id": "bo3"}
    (out / "bo3.json").write_text(json.dumps(bo3))
    teacher, calls = Teacher("t", "expert", decks["water"], db, 1), [0]

    def breaks(obs):
        calls[0] += 1
        if obs.get("select") is None:
            return list(decks["psychic"])
        return [len(obs["select"]["option"]) + 5] if calls[0] > 12 else [0]

    failed = play_episode(engine(), [teacher, breaks], bo=1) | {"id": "failed"}
    (out / "failed.json").write_text(json.dumps(failed))
    dated = demo.play("expert-psychic", "club-metal", 6, bo=1, db=db, decks=decks) | {"id": "dated"}
    (out / "dated.json").write_text(json.dumps(dated))
    (out / "dated_info.json").write_text(json.dumps({"endTime": {"seconds": 1785196800}}))
    return out


@pytest.mark.parametrize("value", ["yesterday", "20260728", "2026-13-01", "2026-7-1"])
def test_a_date_that_is_not_a_day_is_refused_before_anything_is_written(folder, tmp_path, value):
    res = data(f"dataset.root={tmp_path / 'data'}", "action=import", f"source={folder}", f"date={value}")
    assert res.returncode != 0
    assert f"date={value!r} is not a day: give it as YYYY-MM-DD" in res.stderr + res.stdout
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "data").exists(), "nothing written"


def test_a_source_that_does_not_exist_is_refused_before_anything_is_written(tmp_path):
    res = data(f"dataset.root={tmp_path / 'data'}", "action=import", f"source={tmp_path / 'nowhere'}")
    assert res.returncode != 0 and "import source does not exist" in res.stderr + res.stdout
    assert not (tmp_path / "data").exists()


def test_a_root_left_with_a_folder_that_is_not_a_day_is_named_with_what_to_do(folder, tmp_path):
    root = tmp_path / "data"
    first = data(f"dataset.root={root}", "action=import", f"source={folder}", "date=2026-08-01")
    assert first.returncode == 0, first.stderr
    # as an earlier version left it: date=yesterday filed as given
    (zipfile,) = (root / "replays" / "2026-08-01").glob("*.zip")
    stuck = root / "replays" / "yesterday"
    stuck.mkdir()
    shutil.move(zipfile, stuck / zipfile.name)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    for args in (("action=import", f"source={folder}", "date=2026-08-02"), ()):  # an import, a build
        res = data(f"dataset.root={root}", *args)
        said = res.stderr + res.stdout
        assert res.returncode != 0 and "Traceback" not in said
        assert "replays/yesterday/ holds replay ZIPs but is not a day (YYYY-MM-DD)" in said, said
        assert "rename it to the day its episodes were played" in said
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before, "nothing written"
    shutil.move(stuck / zipfile.name, root / "replays" / "2026-08-01" / zipfile.name)
    stuck.rmdir()
    assert data(f"dataset.root={root}").returncode == 0, "renamed back: the root builds again"


def test_the_import_says_episodes_and_rounds_where_undated_ones_went_and_which_failed(folder, tmp_path):
    res = data(f"dataset.root={tmp_path / 'data'}", "action=import", f"source={folder}", "date=2026-08-01")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    (rounds,) = re.findall(r"import: 3 episodes \((\d+) rounds\) filed into 2 days", out)
    assert "2 of them carry no date of their own (no sidecar with an endTime): filed into 2026-08-01" in out
    assert "1 of them ended in ERROR, INVALID or TIMEOUT" in out
    days = dict(re.findall(r"built  rows=\d+ episodes=(\d+) rounds=(\d+) ", out))
    assert sorted(days) == ["1", "2"], out  # one day of two episodes (date=), one of one (its sidecar's day)
    assert int(days["1"]) == 1 and int(days["2"]) >= 2 and int(days["1"]) + int(days["2"]) == int(rounds) > 3, out


def test_an_unreadable_sidecar_time_refuses_the_episode_naming_the_field(folder, tmp_path):
    src = tmp_path / "in"
    shutil.copytree(folder, src)
    (src / "dated_info.json").write_text(json.dumps({"endTime": "the day before"}))
    (src / "bo3_info.json").write_text(json.dumps([1, 2]))
    res = data(f"dataset.root={tmp_path / 'data'}", "action=import", f"source={src}", "date=2026-08-01")
    assert res.returncode == 0, res.stderr
    refused = [line for line in res.stdout.splitlines() if line.startswith("[data] refused:")]
    assert len(refused) == 2, res.stdout
    assert any("dated.json: sidecar.endTime 'the day before' is not a time this reader knows" in r for r in refused)
    assert any("bo3.json: its sidecar is a JSON list, not an object" in r for r in refused)


def test_the_replay_index_keeps_kaggles_episode_id(tmp_path):
    from tcgexp.app import compose
    from tcgexp.config import build
    from tcgexp.data.episode_zips import read_index
    from tcgexp.games.cabt import demo

    db, decks = demo._db()
    ep = demo.play("expert-psychic", "club-metal", 7, bo=1, db=db, decks=decks) | {"id": "k"}
    ep["info"] = {**ep.get("info", {}), "EpisodeId": 71234567}
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "k.json").write_text(json.dumps(ep))
    corpus = build(compose("dataset=cabt", f"dataset.root={tmp_path / 'data'}").dataset)
    corpus.import_episodes(str(tmp_path / "in"), "2026-08-01", lambda line: None)
    (z,) = corpus.days.zips.day_zips("2026-08-01")
    assert read_index(z)["episodes"][0]["kaggle_id"] == 71234567
