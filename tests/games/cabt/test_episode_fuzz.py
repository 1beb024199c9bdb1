"""Malformed episodes: every field the reader reads, replaced by every JSON type, is refused by step and field.

Hypothesis mutates one field of a real self-play episode (an observation's field at a decision the reader
reads, or one of the episode's own fields) to a value of another JSON type, or deletes it; the reader either
reads the episode (the field was one it tolerates) or refuses it with an ``EpisodeRefused`` naming the step and
the field. Nothing else may escape: no other exception, no refusal that cannot say where.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tcgexp.app import compose
from tcgexp.config import build
from tcgexp.data.schema import to_numpy

pytestmark = pytest.mark.extra("cabt")
VALUES = [None, True, False, 0, -1, 7, 2.5, -1e9, 2**40, "", "x", "12", [], [0], [None], {}, {"id": 1}]
DELETE = object()
MUTATIONS = 1000


@pytest.fixture(scope="module")
def episode():
    from tcgexp.games.cabt import demo

    db, decks = demo._db()
    ep = demo.play("expert-psychic", "club-metal", 3, bo=1, db=db, decks=decks)
    ep["id"] = "fuzz-3"
    return ep


def paths_in(value, prefix: tuple, out: list, depth: int = 0) -> None:
    if depth > 6:
        return
    items = value.items() if isinstance(value, dict) else list(enumerate(value))[:4] if isinstance(value, list) else ()
    for k, v in items:  # a list's first entries stand for the rest
        out.append((*prefix, k))
        paths_in(v, (*prefix, k), out, depth + 1)


@pytest.fixture(scope="module")
def paths(episode):
    from tcgexp.games.cabt.episode_shape import decisions_read

    decisions = list(decisions_read(episode["steps"]))
    out = [(k,) for k in ("configuration", "info", "rewards", "statuses", "id", "name", "schema_version")]
    paths_in({k: episode[k] for k in ("configuration", "info")}, (), out)
    for t, i, _ in decisions[:: max(1, len(decisions) // 12)][:12]:  # a dozen decisions, spread over the game
        obs = episode["steps"][t][i]["observation"]
        base = ("steps", t, i, "observation")
        out.append(base)
        paths_in({"select": obs["select"], "current": obs["current"]}, base, out)
        out.append(("steps", t + 1, i, "action"))
    return sorted(set(out), key=str)


def read(ep: dict):
    """What an import does with an episode once its bytes are JSON: check, name its players, encode."""
    from tcgexp.games.cabt.episode import check_format
    from tcgexp.games.cabt.game import GAME

    check_format(ep)
    players, _ = GAME.players(ep, None)
    return GAME.encode(ep, match=5, players=players, max_options=64, would_ko=True)


def mutate(ep: dict, path: tuple, value):
    """Set (or delete) the field at `path` in place; returns the undo."""
    parent = ep
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    had = key in parent if isinstance(parent, dict) else True
    old = parent[key] if had else None
    if value is DELETE:
        if isinstance(parent, dict):
            parent.pop(key, None)
        else:
            parent[key] = None
    else:
        parent[key] = copy.deepcopy(value)

    def undo():
        if had:
            parent[key] = old
        else:
            parent.pop(key, None)

    return undo


NAMED = re.compile(
    r"^(step \d+: agent [01]'s |step \d+: |sidecar|not an episode|another environment|an episode "
    r"format|engine version|the episode has no id|configuration|info|rewards|statuses|match number)"
)


@settings(
    max_examples=MUTATIONS,
    deadline=None,
    derandomize=True,  # the same mutations on every run: a failure here is a failure everywhere
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_every_field_of_every_type_is_read_or_refused_by_step_and_field(episode, paths, data):
    from tcgexp.games.cabt.episode import EpisodeRefused

    path = data.draw(st.sampled_from(paths), label="path")
    value = data.draw(st.sampled_from([*VALUES, DELETE]), label="value")
    undo = mutate(episode, path, value)
    try:
        read(episode)
    except EpisodeRefused as exc:
        line = str(exc)
        assert "\n" not in line and NAMED.match(line), f"{path} = {value!r}: {line}"
        assert "does not name" not in line, f"{path} = {value!r}: the reader could not say which field: {line}"
    finally:
        undo()


def test_the_fuzz_mutates_what_the_reader_reads(episode, paths):
    """The fuzz above is not vacuous: across its paths, most values of a wrong type are refused."""
    from tcgexp.games.cabt.episode import EpisodeRefused

    refused = tried = 0
    for path in paths[:: max(1, len(paths) // 60)]:
        for value in ("x", {}):
            undo = mutate(episode, path, value)
            tried += 1
            try:
                read(episode)
            except EpisodeRefused:
                refused += 1
            finally:
                undo()
    assert refused > tried // 3, (refused, tried)
    read(episode)  # and the episode, restored, reads


def corpus(root: Path):
    return build(compose("dataset=cabt", f"dataset.root={root}", "dataset.episodes_per_shard=2").dataset)


MALFORMED = {  # the cases: (what to change, what the refusal must name)
    "obs-string": (lambda ep, t: ep["steps"][t][0].__setitem__("observation", "x"), "observation is a string"),
    "players-null": (
        lambda ep, t: ep["steps"][t][0]["observation"]["current"].__setitem__("players", None),
        "observation.current.players is null",
    ),
    "option-null": (
        lambda ep, t: ep["steps"][t][0]["observation"]["select"].__setitem__("option", None),
        "observation.select.option is null",
    ),
    "configuration-string": (lambda ep, t: ep.__setitem__("configuration", "x"), "configuration is a string"),
    "info-list": (lambda ep, t: ep.__setitem__("info", []), "info is a list"),
    "hand-number": (
        lambda ep, t: ep["steps"][t][0]["observation"]["current"]["players"][0].__setitem__("hand", [5]),
        "hand[0] is a number",
    ),
}


def test_malformed_episodes_are_refused_by_name_and_the_good_ones_filed(episode, tmp_path):
    from tcgexp.games.cabt.episode_shape import decisions_read

    src = tmp_path / "in"
    src.mkdir()
    t = next(t for t, i, _ in decisions_read(episode["steps"]) if i == 0)
    good = copy.deepcopy(episode)
    (src / "good.json").write_text(json.dumps(good))
    for name, (change, _) in MALFORMED.items():
        bad = copy.deepcopy(episode) | {"id": name}
        change(bad, t)
        (src / f"{name}.json").write_text(json.dumps(bad))
    unknown = copy.deepcopy(episode) | {"id": "no-result", "rewards": None}
    (src / "no-result.json").write_text(json.dumps(unknown))
    c = corpus(tmp_path / "data")
    summary, outcome = c.import_episodes(str(src), "2026-08-01", lambda line: None)
    assert summary.imported == {"2026-08-01": 2}, summary.refused
    assert outcome == {"2026-08-01": "built"}
    lines = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in summary.refused}
    for name, (_, what) in MALFORMED.items():
        line = lines.pop(str(src / f"{name}.json"))
        assert what in line and ("step" in line or name.split("-")[0] in line), (name, line)
    assert not lines
    day = to_numpy(pq.read_table(c.paths("2026-08-01").parquet))
    match = {e["id"]: e["match"] for z in c.days.zips.day_zips("2026-08-01") for e in _index(z)["episodes"]}
    rows_unknown = day["episode_id"] // 64 == match["no-result"]
    rows_good = day["episode_id"] // 64 == match["fuzz-3"]
    assert rows_unknown.any() and rows_good.any()
    assert not day["aux_valid"][rows_unknown].any(), "an unknown result is never trained as a draw"
    assert day["aux_valid"][rows_good].all() and set(np.unique(day["aux_return"][rows_good])) == {-1.0, 1.0}


def _index(z: Path) -> dict:
    from tcgexp.data.episode_zips import read_index

    return read_index(z)


def test_an_import_that_files_nothing_leaves_nothing(episode, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "bad.json").write_text(json.dumps(copy.deepcopy(episode) | {"info": []}))
    summary, outcome = corpus(tmp_path / "data").import_episodes(str(src), None, lambda line: None)
    assert summary.imported == {} and len(summary.refused) == 1 and outcome == {}
    assert not (tmp_path / "data").exists(), "a root made by an import that filed nothing is removed"
