"""SIGKILL at any instant of a real-game import, then the same import: the day built, said, nothing left over.

A child process imports a folder of episodes with one function patched to SIGKILL itself at one point of the
import's transaction: while the episodes are being filed (before the ZIP is committed), with the ZIP written
but not yet renamed into place, just after the rename (before its shards are sealed), and before the day is
built. The same import again must leave the root as a clean import would: the day's rows identical, no
``.zip.tmp``, and the summary saying which day it built for the stopped import.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tcgexp.app import compose
from tcgexp.config import build

pytestmark = pytest.mark.extra("cabt")
ROOT = Path(__file__).resolve().parents[2]
DAY = "2026-08-01"
OVERRIDES = ("dataset=cabt", "dataset.episodes_per_shard=2")

# what the child patches to kill itself: (module, attribute, the call at which it dies)
POINTS = {
    "filing": ("tcgexp.data.episode_zips", "NewZip.add", 3),  # the third episode, the ZIP still a .tmp
    "before-rename": ("tcgexp.data.episode_zips", "os.replace", 1),  # the ZIP whole, not yet in place
    "after-rename": ("tcgexp.data.episode_import", "Staged.seal", 1),  # committed, its shards not yet sealed
    "before-build": ("tcgexp.data.episode_day", "EpisodeBuilder.build_day", 1),  # sealed, the day not built
}

CHILD = """
import importlib, os, signal, sys
from tcgexp.app import compose
from tcgexp.config import build

module, attr, at = sys.argv[1], sys.argv[2], int(sys.argv[3])
owner = importlib.import_module(module)
*outer, name = attr.split(".")
for part in outer:
    owner = getattr(owner, part)
real, calls = getattr(owner, name), [0]

def dies(*args, **kwargs):
    if attr == "os.replace" and not str(args[0]).endswith(".zip.tmp"):
        return real(*args, **kwargs)  # the ZIP's rename, not a JSON file's
    calls[0] += 1
    if calls[0] == at:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)

setattr(owner, name, dies)
corpus = build(compose(*sys.argv[7:], f"dataset.root={sys.argv[4]}").dataset)
corpus.import_episodes(sys.argv[5], sys.argv[6], print)
"""


def same_rows(a, b) -> bool:
    """Column for column, a missing rating (NaN) equal to a missing rating."""
    if a.schema != b.schema or a.num_rows != b.num_rows:
        return False
    for name in a.column_names:
        if name in ("rating", "opponent_rating"):
            x, y = (np.asarray(t[name].to_numpy(), np.float64) for t in (a, b))
            if not np.array_equal(x, y, equal_nan=True):
                return False
        elif not a[name].equals(b[name]):
            return False
    return True


@pytest.fixture(scope="module")
def episodes(tmp_path_factory) -> Path:
    from tcgexp.games.cabt import demo

    db, decks = demo._db()
    folder = tmp_path_factory.mktemp("episodes")
    for k in range(5):
        ep = demo.play("expert-psychic", "club-metal", 40 + k, bo=1, db=db, decks=decks)
        ep["id"] = f"kill-{k}"
        (folder / f"e{k}.json").write_text(json.dumps(ep))
    return folder


@pytest.fixture(scope="module")
def clean(episodes, tmp_path_factory):
    root = tmp_path_factory.mktemp("clean") / "data"
    corpus = build(compose(*OVERRIDES, f"dataset.root={root}").dataset)
    summary, outcome = corpus.import_episodes(str(episodes), DAY, lambda line: None)
    assert summary.imported == {DAY: 5} and outcome == {DAY: "built"}
    return pq.read_table(corpus.paths(DAY).parquet)


@pytest.mark.parametrize("point", list(POINTS))
def test_a_killed_import_then_the_same_import_builds_the_day_as_a_clean_one(point, episodes, clean, tmp_path):
    root = tmp_path / "data"
    module, attr, at = POINTS[point]
    child = subprocess.run(
        [sys.executable, "-c", CHILD, module, attr, str(at), str(root), str(episodes), DAY, *OVERRIDES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    committed = bool(list((root / "replays").glob("*/*.zip")))
    assert committed == (point in ("after-rename", "before-build")), point
    if point == "before-rename":  # the whole ZIP was written, under its temporary name
        (tmp,) = (root / "replays").glob("*/*.zip.tmp")
        with zipfile.ZipFile(tmp) as zf:
            assert len([n for n in zf.namelist() if n.startswith("e")]) == 5
    corpus = build(compose(*OVERRIDES, f"dataset.root={root}").dataset)
    said: list[str] = []
    summary, outcome = corpus.import_episodes(str(episodes), DAY, said.append)
    assert outcome == {DAY: "built"}, (point, outcome, summary)
    if committed:  # the stopped import filed every episode: this one files none, and builds the day it left
        assert summary.imported == {} and summary.duplicates == 5 and summary.resumed == [DAY]
    else:
        assert summary.imported == {DAY: 5} and summary.resumed == []
    assert not list(root.rglob("*.tmp")), "a stopped import's half-written files are gone"
    assert same_rows(pq.read_table(corpus.paths(DAY).parquet), clean), "rows identical to a clean import"
    again, outcome = corpus.import_episodes(str(episodes), DAY, said.append)
    assert again.imported == {} and again.resumed == [] and outcome == {}, "nothing left to do"
