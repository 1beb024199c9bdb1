"""The real game: engine, episodes in the harness's form, the import path, rows, refusals (extra cabt)."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tcgexp.app import compose
from tcgexp.config import build
from tcgexp.data import BuildRefused
from tcgexp.data.schema import to_numpy

pytestmark = pytest.mark.extra("cabt")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def kit():
    from tcgexp.games.cabt import demo

    db, decks = demo._db()
    return db, decks


def episode(kit, seed: int, a="expert-psychic", b="club-metal", bo=1):
    from tcgexp.games.cabt import demo

    db, decks = kit
    ep = demo.play(a, b, seed, bo=bo, db=db, decks=decks)
    ep["id"] = f"test-{seed}-{a}-{b}-{bo}"
    return ep


def corpus(root: Path, *overrides: str):
    return build(compose("dataset=cabt", f"dataset.root={root}", "dataset.episodes_per_shard=2", *overrides).dataset)


def write(folder: Path, name: str, ep, sidecar: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / f"{name}.json"
    p.write_text(ep if isinstance(ep, str) else json.dumps(ep))
    if sidecar is not None:
        (folder / f"{name}_info.json").write_text(json.dumps(sidecar))
    return p


def rows_of(ep, **kw):
    from tcgexp.games.cabt.game import GAME

    players, _ = GAME.players(ep, kw.pop("sidecar", None))
    cols, _ = GAME.encode(ep, match=kw.pop("match", 7), players=players, max_options=64, would_ko=True)
    return cols


def test_the_engine_loads_without_the_harness():
    code = (
        "import sys; from tcgexp.games.cabt.engine import engine; e = engine(); "
        "assert len(e.cards()) == 1431 and len(e.attacks()) == 1755, (len(e.cards()), len(e.attacks())); "
        "assert 'kaggle_environments' not in sys.modules; print(e.identity()['card_db_sha256'])"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip()) == 64


def test_every_deck_follows_the_rules_and_the_engine_accepts_it(kit):
    from tcgexp.games.cabt.cards import deck_problem
    from tcgexp.games.cabt.engine import engine

    db, decks = kit
    assert len(decks) >= 6
    for name, deck in decks.items():
        assert deck_problem(db, deck) is None, name
        assert engine().check_deck(deck) is None, name
    assert deck_problem(db, [decks["water"][0]] * 60) is not None  # five of a name: refused


def harness_episode(agents, **configuration):
    from kaggle_environments import make

    env = make("cabt", configuration=configuration)
    env.run(agents)
    return json.loads(json.dumps(env.toJSON()))


def test_our_episodes_have_the_harness_form(kit):
    """Kaggle's own harness and the self-play writer: the same keys, step entries, status pattern, actions."""
    from tcgexp.games.cabt.engine import engine, harness_deck
    from tcgexp.games.cabt.selfplay import play_episode
    from tcgexp.games.cabt.teachers import first_agent

    theirs = harness_episode(["random", "first"], bo=3)
    ours = play_episode(engine(), [first_agent(harness_deck()), first_agent(harness_deck())], bo=3)
    assert set(ours) == set(theirs)
    assert set(ours["configuration"]) == set(theirs["configuration"])
    for ep in (theirs, ours):
        steps = ep["steps"]
        assert all(s[0]["observation"]["step"] == t for t, s in enumerate(steps))
        assert [a["status"] for a in steps[0]] == ["ACTIVE", "ACTIVE"] and steps[0][0]["observation"]["select"] is None
        assert all(len(a["action"]) == 60 for a in steps[1]), "the deck answers come at step 1"
        for t in range(1, len(steps) - 1):
            active = [i for i in (0, 1) if steps[t][i]["status"] == "ACTIVE"]
            assert len(active) == 1, t
            other = 1 - active[0]
            assert steps[t + 1][other]["action"] == [], "the inactive agent's action is empty"
        assert {a["status"] for a in steps[-1]} <= {"DONE", "INVALID", "ERROR", "TIMEOUT"}
        keys = {k for s in steps for a in s for k in a if k != "visualize"}
        assert keys == {"action", "reward", "info", "observation", "status"}
    # and the reader takes the harness's own episode: one row per pick, labels among the options
    cols = rows_of(theirs)
    picks = sum(
        len(theirs["steps"][t + 1][i]["action"])
        for t in range(1, len(theirs["steps"]) - 1)
        for i in (0, 1)
        if theirs["steps"][t][i]["status"] == "ACTIVE"
        and theirs["steps"][t][i]["observation"]["select"]
        and theirs["steps"][t + 1][i]["status"] not in ("ERROR", "INVALID", "TIMEOUT")
    )
    assert len(cols["label"]) == picks > 0
    assert cols["action_mask"][np.arange(picks), cols["label"]].all()


def test_one_row_per_pick_and_decisions_share_their_id(kit):
    ep = episode(kit, 1, bo=3)
    cols = rows_of(ep)
    dec = cols["decision_id"]
    for d in np.unique(dec):
        sub = cols["substep"][dec == d]
        assert (sub == np.arange(len(sub))).all()
        assert (cols["picks"][dec == d] == len(sub)).all()
        # a later pick of one decision no longer offers what was picked before it
        labels = cols["label"][dec == d]
        m = cols["action_mask"][dec == d]
        assert all(not m[k, labels[:k]].any() for k in range(len(labels)))
    multi = [d for d in np.unique(dec) if (dec == d).sum() > 1]
    assert multi, "a multi-select decision"
    assert (cols["single_option"] == (cols["action_mask"].sum(axis=1) == 1)).all()
    # an answer written {"action": [...]} is the same answer; an empty answer makes no row
    ep2 = copy.deepcopy(ep)
    for s in ep2["steps"][2:]:
        for a in s:
            if isinstance(a["action"], list) and a["action"]:
                a["action"] = {"action": a["action"]}
    assert (rows_of(ep2)["label"] == cols["label"]).all()


def test_rounds_are_lanes_of_their_own(kit):
    for seed in range(20):
        ep = episode(kit, 100 + seed, a="club-metal", b="club-water", bo=3)
        cols = rows_of(ep)
        if len(np.unique(cols["round"])) > 1:
            break
    else:
        pytest.skip("no best-of-3 went past one round in 20 tries")
    for r in np.unique(cols["round"]):
        at = cols["round"] == r
        assert len(np.unique(cols["episode_id"][at])) == 1
        for side in (0, 1):
            lane = at & (cols["side"] == side)
            assert cols["step_id"][lane][0] == 0 and cols["new_episode"][lane][0]
            assert cols["terminal"][lane][-1]
    assert len(np.unique(cols["episode_id"])) == len(np.unique(cols["round"]))
    assert len(np.unique(cols["episode_id"] // 64)) == 1  # one match


def test_hidden_parts_never_change_a_row(kit):
    """The opponent's hand, the prizes, the deck's order, visualize, search_begin_input: changed, rows identical."""
    ep = episode(kit, 2)
    ep["steps"][0][0]["visualize"] = [{"current": {"players": [{"hand": [{"id": 3}]}]}}]
    base = rows_of(ep)
    rng = random.Random(0)
    ep2 = copy.deepcopy(ep)
    ep2["steps"][0][0]["visualize"] = [{"current": {"players": [{"hand": [{"id": 721}] * 9, "prize": [{"id": 1}]}]}}]
    searched = 0
    for s in ep2["steps"]:
        for a in s:
            o = a["observation"]
            if o.get("search_begin_input"):
                o["search_begin_input"] = "x" * 40
            cur = o.get("current")
            if not cur:
                continue
            me = cur["yourIndex"]
            opp = cur["players"][1 - me]
            opp["hand"] = [{"id": rng.choice([3, 721, 1121]), "serial": 1, "playerIndex": 1 - me}] * opp["handCount"]
            for p in cur["players"]:
                p["prize"] = [{"id": rng.choice([3, 722]), "serial": 2, "playerIndex": 0} for _ in p["prize"]]
            sel = o.get("select") or {}
            deck = sel.get("deck")
            if deck:  # a deck search: the same cards in another order, the options following them
                perm = list(range(len(deck)))
                rng.shuffle(perm)
                where = {old: new for new, old in enumerate(perm)}
                sel["deck"] = [deck[i] for i in perm]
                for opt in sel["option"]:
                    if opt.get("area") == 1:
                        opt["index"] = where[opt["index"]]
                searched += 1
    changed = rows_of(ep2)
    for k in base:
        if base[k].dtype == object:
            assert list(base[k]) == list(changed[k]), k
        else:
            assert np.array_equal(base[k], changed[k], equal_nan=True), k


def test_import_files_days_once_and_refuses_bad_episodes_by_name(kit, tmp_path):
    good = [episode(kit, 10 + k) for k in range(3)]
    src = tmp_path / "in"
    write(src, "a", good[0], {"endTime": {"seconds": 1785196800}, "agents": [{"index": 0, "initialScore": 1500.0}]})
    write(src, "b", good[1])
    write(src, "c", good[2])
    write(src, "dup", good[0])  # the same id again
    write(src, "trunc", json.dumps(good[1])[:5000])
    other = copy.deepcopy(good[1]) | {"name": "connectx", "id": "x1"}
    write(src, "other", other)
    fmt = copy.deepcopy(good[1]) | {"schema_version": 99, "id": "x2"}
    write(src, "fmt", fmt)
    bad = copy.deepcopy(good[1]) | {"id": "x3"}
    t = next(t for t in range(2, len(bad["steps"]) - 1) if bad["steps"][t][0]["status"] == "ACTIVE")
    bad["steps"][t + 1][0]["action"] = [999]
    write(src, "badaction", bad)
    card = copy.deepcopy(good[1]) | {"id": "x4"}
    card["steps"][1][0]["action"] = [99999] + card["steps"][1][0]["action"][1:]
    write(src, "badcard", card)
    c = corpus(tmp_path / "data")
    summary, outcome = c.import_episodes(str(src), "2026-08-01", lambda line: None)
    assert summary.imported == {"2026-07-28": 1, "2026-08-01": 2}, "the sidecar's date, else date="
    assert summary.duplicates == 1
    refused = "\n".join(summary.refused)
    for name, what in (
        ("trunc", "not JSON"),
        ("other", "another environment"),
        ("fmt", "format"),
        ("badaction", f"step {t + 1}: agent 0's action [999] is not among"),
        ("badcard", "unknown card id 99999"),
    ):
        assert f"{name}.json: " in refused and what in refused.split(f"{name}.json: ")[1].splitlines()[0], (
            name,
            refused,
        )
    assert outcome == {"2026-07-28": "built", "2026-08-01": "built"}
    day = to_numpy(pq.read_table(c.paths("2026-07-28").parquet))
    assert set(day["rating"][day["side"] == 0]) == {1500.0}
    assert np.isnan(day["rating"][day["side"] == 1]).all(), "no rating: null (NaN)"
    # again: nothing new, nothing rewritten
    zips = sorted((tmp_path / "data" / "replays").rglob("*.zip"))
    again, _ = c.import_episodes(str(src), "2026-08-01", lambda line: None)
    assert again.imported == {} and again.duplicates == 4
    assert sorted((tmp_path / "data" / "replays").rglob("*.zip")) == zips
    # a later import into a day that has episodes: a second ZIP, the day rebuilt from both
    before = pq.ParquetFile(c.paths("2026-08-01").parquet).metadata.num_rows
    write(tmp_path / "in2", "d", episode(kit, 20))
    later, outcome = c.import_episodes(str(tmp_path / "in2"), "2026-08-01", lambda line: None)
    assert later.imported == {"2026-08-01": 1} and outcome == {"2026-08-01": "built"}
    assert len(list((tmp_path / "data" / "replays" / "2026-08-01").glob("*.zip"))) == 2
    after = pq.ParquetFile(c.paths("2026-08-01").parquet).metadata.num_rows
    assert after > before
    # dataset=cabt trains on every day the root holds
    assert corpus(tmp_path / "data").dates == ["2026-07-28", "2026-08-01"]


def test_an_episode_that_failed_keeps_its_valid_decisions(kit, tmp_path):
    from tcgexp.games.cabt.engine import engine
    from tcgexp.games.cabt.selfplay import play_episode
    from tcgexp.games.cabt.teachers import Teacher

    db, decks = kit
    t = Teacher("t", "expert", decks["water"], db, 1)
    calls = {"n": 0}

    def breaks(obs):
        calls["n"] += 1
        if obs.get("select") is None:
            return list(decks["psychic"])
        return [len(obs["select"]["option"]) + 5] if calls["n"] > 12 else [0]

    ep = play_episode(engine(), [t, breaks], bo=1)
    assert ep["statuses"][1] == "INVALID" and ep["rewards"] == [1, -1]
    cols = rows_of(ep)
    assert (cols["end_status"][cols["side"] == 1] == 2).all()
    assert not cols["aux_valid"].any(), "no natural result: aux targets undefined"
    steps = ep["steps"]
    answered = [
        t
        for t in range(1, len(steps) - 1)
        if steps[t][1]["status"] == "ACTIVE" and steps[t][1]["observation"]["select"]
    ]
    assert steps[answered[-1] + 1][1]["status"] == "INVALID"
    valid = sum(len(steps[t + 1][1]["action"]) for t in answered[:-1])
    assert valid > 0 and (cols["side"] == 1).sum() == valid, "its valid answers are rows, the failing one is not"


def test_the_fingerprint_pins_the_engine(kit, tmp_path, monkeypatch):
    write(tmp_path / "in", "a", episode(kit, 30))
    c = corpus(tmp_path / "data")
    c.import_episodes(str(tmp_path / "in"), "2026-08-01", lambda line: None)
    assert corpus(tmp_path / "data").build() == {"2026-08-01": "validated"}
    import tcgexp.games.cabt.engine as engine_mod

    monkeypatch.setattr(engine_mod, "package_version", lambda: "9.9.9")
    with pytest.raises(BuildRefused, match="package_version"):
        corpus(tmp_path / "data").build()


def test_a_build_resumes_by_shard(kit, tmp_path):
    src = tmp_path / "in"
    for k in range(5):
        write(src, f"e{k}", episode(kit, 40 + k))
    c = corpus(tmp_path / "data")
    c.import_episodes(str(src), "2026-08-01", lambda line: None)
    p = c.paths("2026-08-01")
    first = p.parquet.read_bytes()
    with zipfile.ZipFile(next((tmp_path / "data" / "replays" / "2026-08-01").glob("*.zip"))) as zf:
        assert len([n for n in zf.namelist() if n.startswith("e0")]) == 5
    c.clean_derived("2026-08-01")
    assert not p.parquet.exists()
    assert corpus(tmp_path / "data").build() == {"2026-08-01": "built"}
    assert p.parquet.read_bytes() != b"" and pq.ParquetFile(p.parquet).metadata.num_rows == len(
        to_numpy(pq.read_table(tmp_path / "data" / "bc_data" / "2026-08-01.parquet"))["label"]
    )
    # identical content: the rebuilt day equals the first, column for column
    a = to_numpy(pq.read_table(p.parquet))
    import io

    b = to_numpy(pq.read_table(io.BytesIO(first)))
    assert all(
        np.array_equal(a[k], b[k], equal_nan=True) if a[k].dtype != object else list(a[k]) == list(b[k]) for k in a
    )


def test_the_legacy_engine_imports_too(tmp_path):
    """configuration.version 1 (the legacy engine, best of one): read with its own card database, pinned too."""
    from tcgexp.games.cabt.engine import engine, harness_deck
    from tcgexp.games.cabt.selfplay import play_episode
    from tcgexp.games.cabt.teachers import first_agent, random_agent

    ep = play_episode(engine(1), [first_agent(harness_deck()), random_agent(random.Random(1), harness_deck())], bo=3)
    assert ep["configuration"]["version"] == 1 and ep["configuration"]["bo"] == 1
    write(tmp_path / "in", "v1", ep)
    c = corpus(tmp_path / "data")
    summary, _ = c.import_episodes(str(tmp_path / "in"), "2026-08-01", lambda line: None)
    assert summary.imported == {"2026-08-01": 1} and not summary.refused
    conf = c.manifests["2026-08-01"]["config"]["game"]
    assert conf["engine_versions"] == [1] and list(conf["card_db_sha256"]) == ["1"]
    assert pq.ParquetFile(c.paths("2026-08-01").parquet).metadata.num_rows > 0
    assert corpus(tmp_path / "data", "dataset.verify=full").build() == {"2026-08-01": "validated"}


def test_a_demo_day_is_a_function_of_its_seed(tmp_path):
    """The demo plays in dealers that load the seeded deal before the engine: two builds of the same day (the
    same corpus seed) write the same rows, another seed other games; the round-robin replays too."""
    from tcgexp.data.parallel import worker_pool
    from tcgexp.games.cabt import demo
    from tests.conftest import CABT_DEMO, CABT_DEMO_RATINGS

    def day(name: str, *overrides: str):
        root = tmp_path / name
        root.mkdir()
        (root / "ratings.json").write_text(json.dumps({"games_per_pair": 0, "ratings": CABT_DEMO_RATINGS}))
        build(
            compose(f"dataset.root={root}", *CABT_DEMO, "dataset.demo.episodes_per_day=6", *overrides).dataset
        ).build()
        [parquet] = (root / "bc_data").glob("*.parquet")
        return pq.read_table(parquet)

    first, again, other = day("a"), day("b"), day("c", "dataset.seed=1")
    assert first.num_rows > 0 and first.equals(again)
    assert not first.equals(other)
    with demo.dealers(worker_pool) as pool:
        played = [demo.round_robin(1, seed=3, pool=pool) for _ in range(2)]
    assert played[0]["seeded_deals"] and played[0] == played[1]


@pytest.mark.parametrize("episodes", [1, 2, 200, 1440, 1441, 2000, 5000, 10**6])
def test_every_demo_episode_of_a_day_is_filed_into_that_day(episodes):
    """The import files an episode by its sidecar's end: a demo day of any size ends every episode inside the day
    (a minute apart, episode 1,441 and later went into the next day, and out of the corpus's days)."""
    import datetime as dt

    from tcgexp.games.cabt.demo import episode_times
    from tcgexp.games.cabt.game import _date

    day = dt.datetime.fromisoformat("2026-07-27").replace(tzinfo=dt.UTC)
    for k in {0, episodes // 2, episodes - 1}:
        start, end = episode_times(day, k, episodes)
        assert _date(start) == _date(end) == "2026-07-27" and start <= end, (k, start, end)
