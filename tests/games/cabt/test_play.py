"""The real game, out: the policy as a player, games counted, tcgexp-eval and tcgexp-export (extra cabt).

Each test plays the real engine; the submission's tests run Kaggle's own harness (``kaggle_environments``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.games.cabt.policies import fake_run, random_weights

pytestmark = pytest.mark.extra("cabt")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def kit():
    from tcgexp.games.cabt import demo

    return demo._db()


@pytest.fixture(scope="module")
def tables():
    from tcgexp.games.cabt.game import tables

    return tables(2)


def test_every_row_of_recorded_episodes_is_what_a_player_computes_from_the_raw_observation(kit, tables):
    """observe.Decision on the raw observation gives each pick's row exactly as the corpus encoder wrote it:
    the state (picks so far counted), would-KO where valid, the option vectors (earlier picks flagged), the mask."""
    from tcgexp.games.cabt import demo
    from tcgexp.games.cabt.episode import encode_episode
    from tcgexp.games.cabt.features import STATE_DIM
    from tcgexp.games.cabt.observe import Decision

    db, decks = kit
    checked = multi = 0
    # In this process the engine shuffles from its own random device (the seeded deal loads only in a dealer),
    # so a game's length varies: play pairs in turn until enough rows are checked (CI once saw 189 in two).
    pairs = [("expert-fighting", "novice-grass"), ("club-water", "expert-psychic")] * 4
    for seed, (a, b) in enumerate(pairs):
        if checked > 200 and multi > 5:
            break
        ep = demo.play(a, b, seed, bo=3, db=db, decks=decks)
        cols, _ = encode_episode(ep, match=1, tb=tables, max_options=64, players=[{}, {}], would_ko=True)
        r = 0
        steps = ep["steps"]
        for t in range(1, len(steps) - 1):
            for i in (0, 1):
                entry = steps[t][i]
                sel = entry["observation"].get("select")
                if entry["status"] != "ACTIVE" or sel is None:
                    continue
                answer = steps[t + 1][i]["action"]
                d = Decision(tables, entry["observation"], 64)
                for k in range(len(answer)):
                    x, options, mask = d.row(answer[:k])
                    valid = cols["would_ko_valid"][r]
                    assert np.array_equal(x[:STATE_DIM], cols["features"][r]), (t, k)
                    assert np.array_equal(x[STATE_DIM:-1], cols["would_ko"][r] * valid) and x[-1] == valid
                    assert np.array_equal(options.reshape(-1), cols["option_features"][r]), (t, k)
                    assert np.array_equal(mask, cols["action_mask"][r]) and cols["label"][r] == answer[k]
                    multi += k > 0
                    r += 1
                    checked += 1
        assert r == len(cols["label"])
    assert checked > 200 and multi > 5, (checked, multi)


def test_the_numpy_player_picks_by_its_scores_and_stops_by_its_stop_head(kit, tables):
    """Each pick is the masked argmax of the scores the network gives; a multi-select stops where the stop logit
    is positive once stopping is the agent's choice, and never below minCount; memory moves once a decision. A
    stop head that always says stop picks max(minCount, 1); one that never does picks all it may."""
    from tcgexp.games.cabt import demo
    from tcgexp.games.cabt.netpolicy import Net, NetPolicy

    db, decks = kit
    observations = []
    for seed in range(5, 11):
        ep = demo.play("club-water", "expert-psychic", seed, bo=3, db=db, decks=decks)
        observations += [s[i]["observation"] for s in ep["steps"][1:-1] for i in (0, 1) if s[i]["status"] == "ACTIVE"]
    observations = [o for o in observations if o.get("select") is not None]
    asked = {}
    for bias in (None, 100.0, -100.0):
        weights = random_weights(seed=3)
        if bias is not None:
            weights["stop.bias"][:] = bias
        me = NetPolicy(Net(weights), tables, decks["fighting"], max_options=64)
        asked[bias] = 0
        for obs in observations:
            sel = obs["select"]
            lo, hi = sel["minCount"], min(sel["maxCount"], len(sel["option"]))
            before, me.trace = me.h.copy(), []
            picks = me.choose(obs)
            assert len(set(picks)) == len(picks) and lo <= len(picks) <= sel["maxCount"]
            for k, (masked, stop) in enumerate(me.trace):
                assert picks[k] == int(np.argmax(masked)) and all(masked[p] == -1e9 for p in picks[:k])
                last = k == len(me.trace) - 1
                assert stop is None or (stop > 0) == last
                assert (stop is not None) == (lo <= k + 1 < hi)  # stopping is the agent's choice exactly there
                asked[bias] += stop is not None
            if bias == 100.0:
                assert len(picks) == max(lo, 1)
            if bias == -100.0:
                assert len(picks) == hi
            assert not np.array_equal(before, me.h), "a decision answered moves the memory"
    assert len(observations) > 300 and min(asked.values()) >= 5, asked


@pytest.fixture(scope="module")
def trained(cabt_demo_root, tmp_path_factory):
    """A real run: three epochs of the option head on the session's tiny demo corpus (its model and run dir)."""
    from tcgexp.train import train
    from tests.conftest import CABT_DEMO, compose_config
    from tests.train.conftest import TINY_TRAIN

    run_dir = tmp_path_factory.mktemp("trained")
    cfg = compose_config(
        f"dataset.root={cabt_demo_root}", *TINY_TRAIN, "model.hidden=32", "trainer.epochs=3", *CABT_DEMO
    )
    return train(cfg, run_dir=run_dir)["model"], run_dir


def test_the_numpy_player_is_a_trained_runs_mlx_model_within_1e_5_on_raw_observations(trained, kit, tables, tmp_path):
    """The policy file tcgexp-eval plays and tcgexp-export ships, made from a trained run's checkpoint, scores
    every pick of raw harness observations as the MLX model does (tcgexp.learn.infer's decide on
    features.decision_row, advance between decisions, memory afresh each round): logits within 1e-5 (relative
    to their scale), stop probabilities within 1e-6, the memory within 1e-5, the same picks. The run's
    parameters are the names and shapes the numpy player (and the tests' random weights) read."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    from tcgexp.games.cabt import demo
    from tcgexp.games.cabt.evaluation import write_policy
    from tcgexp.games.cabt.features import decision_row
    from tcgexp.games.cabt.policyfile import player
    from tcgexp.learn.infer import advance, decide
    from tcgexp.lifecycle.weights import checkpoint_of, read_weights

    model, run_dir = trained
    params = dict(tree_flatten(model.parameters()))
    drawn = random_weights(hidden=model.hidden)
    assert {k: tuple(v.shape) for k, v in params.items()} == {k: v.shape for k, v in drawn.items()}
    weights, state = read_weights(checkpoint_of(run_dir, "best"))
    assert set(weights) == set(params)
    model.update(tree_unflatten([(k, mx.array(v)) for k, v in weights.items()]))
    mx.eval(model.parameters())
    db, decks = kit
    path = tmp_path / "policy.npz"
    write_policy(path, weights, state, decks["fighting"], source="best")
    me = player(path)
    assert me.net.memory and me.max_options == 64

    worst = {"logits": 0.0, "stop": 0.0, "memory": 0.0}
    picks_checked = stops_checked = rounds = 0
    pairs = [("expert-fighting", "club-water"), ("expert-psychic", "novice-grass")] * 3
    for seed, (a, b) in enumerate(pairs):  # the engine draws its own games: more episodes until enough is checked
        if picks_checked > 300 and stops_checked > 5 and rounds >= 8:
            break
        ep = demo.play(a, b, seed, bo=3, db=db, decks=decks)
        for side in (0, 1):
            seen_round, h = None, None
            for step in ep["steps"][1:-1]:
                entry = step[side]
                obs = entry["observation"]
                if entry["status"] != "ACTIVE" or obs.get("select") is None:
                    continue
                rnd = obs["current"].get("round") or 1
                if rnd != seen_round:
                    seen_round, h = rnd, np.zeros(model.hidden, np.float32)
                    me.reset()
                    rounds += 1
                me.trace = []
                picks = me.choose(obs)
                enc, chosen = None, np.zeros(model.option_dim, np.float32)
                for k, (masked, stop) in enumerate(me.trace):
                    row = decision_row(tables, obs, picks[:k], max_options=64)
                    out = decide(model, row, h)
                    n = len(masked)
                    live = row["action_mask"][:n]
                    assert np.array_equal(masked == np.float32(-1e9), ~live)
                    scale = max(1.0, float(np.abs(out["logits"][:n][live]).max()))
                    worst["logits"] = max(
                        worst["logits"], float(np.abs(masked[live] - out["logits"][:n][live]).max()) / scale
                    )
                    # the same pick, up to options the model scores equally: two copies of one card offer the same
                    # vector, and the two summation orders (MLX's, numpy's) may round their equal scores apart by
                    # an ulp, so either may be the argmax; the pick must be the model's best within the tolerance
                    best = float(out["logits"][:n][live].max())
                    assert float(out["logits"][picks[k]]) >= best - 1e-5 * scale, (
                        picks[k],
                        int(np.argmax(out["logits"])),
                    )
                    if stop is not None:  # decide gives the probability, the player its logit
                        p = float(out["stop"][picks[k]])
                        worst["stop"] = max(worst["stop"], abs(1 / (1 + np.exp(-stop)) - p))
                        stops_checked += 1
                    if enc is None:
                        enc = out["enc"]
                    chosen = chosen + row["option_features"][picks[k]]
                    picks_checked += 1
                if enc is not None:
                    h = advance(model, enc, chosen, h)
                    worst["memory"] = max(worst["memory"], float(np.abs(me.h - h).max()))
    assert worst["logits"] <= 1e-5 and worst["memory"] <= 1e-5 and worst["stop"] <= 1e-6, worst
    assert picks_checked > 300 and stops_checked > 5 and rounds >= 8, (picks_checked, stops_checked, rounds)
    print(f"\n{picks_checked} picks ({stops_checked} stops asked) over {rounds} rounds: largest differences {worst}")


def test_wilson_interval_is_the_score_interval():
    from tcgexp.winrate import wilson

    lo, hi = wilson(452, 500)  # expert-fighting against random, docs/real-game.md: 87.5-92.7 %
    assert round(100 * lo, 1) == 87.5 and round(100 * hi, 1) == 92.7
    assert wilson(0, 20)[0] == 0.0 and wilson(20, 20)[1] == pytest.approx(1.0)


def test_games_are_counted_seat_by_seat_and_a_capped_game_is_a_draw(tmp_path):
    from tcgexp.games.cabt.arena import Settings, Side, play_match

    t = play_match(Side("first", "first"), Side("random", "random"), Settings(games=30, workers=2))
    assert t["games"] == 30 == t["wins"] + t["draws"] + t["losses"] and t["errors"] == []
    assert t["seats"] == {"0": {"games": 15, "wins": t["seats"]["0"]["wins"]}, "1": t["seats"]["1"]}
    assert t["seats"]["0"]["wins"] + t["seats"]["1"]["wins"] == t["wins"]
    assert t["win_rate"] == t["wins"] / 30 and t["interval"][0] <= t["win_rate"] <= t["interval"][1]
    assert t["wins"] >= 18, "the engine's first agent beats its random agent (79-84 % of 100 games, measured)"
    capped = play_match(Side("first", "first"), Side("random", "random"), Settings(games=4, max_steps=3))
    assert capped["draws"] == capped["capped"] == 4 and capped["win_rate"] == 0.0


def test_an_illegal_answer_is_a_loss_listed_among_the_errors_never_a_win(tmp_path):
    from tcgexp.games.cabt.arena import Settings, Side, play_match

    bad = tmp_path / "bad" / "main.py"
    bad.parent.mkdir()
    bad.write_text(
        "import random\n"
        "DECK = None\n"
        "def agent(obs, config):\n"
        "    if obs['select'] is None:\n"
        "        return " + json.dumps(harness()) + "\n"
        "    return [len(obs['select']['option'])]  # one past the last option\n"
    )
    t = play_match(Side("main", "bad", str(bad)), Side("random", "random"), Settings(games=4))
    assert t["losses"] == 4 and t["wins"] == 0 and len(t["errors"]) == 4
    assert all("the policy answered illegally" in e and "\n" not in e for e in t["errors"])
    t = play_match(Side("random", "random"), Side("main", "bad", str(bad)), Settings(games=2))
    assert t["wins"] == 0 and len(t["errors"]) == 2 and "the opponent (bad) answered illegally" in t["errors"][0]


def harness() -> list[int]:
    from tcgexp.games.cabt.engine import harness_deck

    return harness_deck()


def test_paired_deals_replay_a_game_and_deal_two_policies_alike(tmp_path):
    """With the seeded deal a game is a function of its seed and the choices: the same players replay it; two
    different policies see the same first observation (hands, prizes, coin) and part only when their choices do."""
    code = r"""
import json, sys
from tcgexp.games.cabt import seeding
assert seeding.install(), seeding.WHY_NOT
from tcgexp.games.cabt.engine import engine, harness_deck
from tcgexp.games.cabt.players import FirstPolicy, RandomPolicy
from tcgexp.games.cabt.arena import play_game
eng = engine()
def first_obs(seed, policy):
    seeding.seed(seed)
    b = eng.battle(harness_deck(), harness_deck())
    b.select([0])  # who goes first (before the deal): then the hands are dealt
    obs = b.obs
    b.close()
    return json.dumps(obs["current"], sort_keys=True)
def game(seed, policy):
    seeding.seed(seed)
    out = play_game(eng, [policy, RandomPolicy(harness_deck(), 7)], me=0, max_steps=3000, max_seconds=60)
    return out["outcome"], out["steps"]
print(json.dumps({
    "same": [first_obs(s, None) == first_obs(s, None) for s in range(5)],
    "other_seed": first_obs(1, None) == first_obs(2, None),
    "replayed": [game(s, FirstPolicy(harness_deck())) == game(s, FirstPolicy(harness_deck())) for s in range(5)],
    "calls": seeding.calls(),
}))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(got["same"]) and not got["other_seed"] and all(got["replayed"]) and got["calls"] > 0


def test_an_evaluation_is_a_function_of_its_seed_when_deals_are_paired():
    from tcgexp.games.cabt.arena import Settings, Side, play_match

    a = play_match(Side("first", "first"), Side("random", "random"), Settings(games=12, workers=2, seed=4))
    b = play_match(Side("first", "first"), Side("random", "random"), Settings(games=12, workers=1, seed=4))
    c = play_match(Side("first", "first"), Side("random", "random"), Settings(games=12, workers=1, seed=5))
    assert a["paired"] and b["paired"]
    assert (a["wins"], a["draws"], a["decisions_per_game"]) == (b["wins"], b["draws"], b["decisions_per_game"])
    assert c["decisions_per_game"] != a["decisions_per_game"]


def test_tcgexp_eval_writes_each_opponent_into_result_json(tmp_path):
    run = fake_run(tmp_path / "run")
    before = json.loads((run / "result.json").read_text())
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.cli.evaluate",
            str(run),
            "eval.opponents=[random,first,'teach=club-water']",
            "eval.games=6",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads((run / "result.json").read_text())
    assert {k: v for k, v in result.items() if k != "eval"} == before  # the rest is kept
    assert set(result["eval"]) == {"random", "first", "teach"}
    for name, t in result["eval"].items():
        assert {"games", "wins", "draws", "losses", "errors", "win_rate", "interval"} <= set(t)
        assert t["games"] == 6 == t["wins"] + t["draws"] + t["losses"] and t["win_rate"] == t["wins"] / 6
        assert "Wilson" in t["interval_method"] and t["deck_name"].startswith("expert-fighting")
        assert f"[eval] {name}: {t['wins']}/6 won" in done.stdout
    # a setting that is not eval's, a deck that does not exist: one line each, nothing written
    for bad, said in (("trainer.epochs=3", "eval.* settings only"), ("eval.deck=nope", "'nope' is no deck")):
        done = subprocess.run(
            [sys.executable, "-m", "tcgexp.cli.evaluate", str(run), bad], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 1 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_another_runs_weights_change_the_choices(tables, kit):
    from tcgexp.games.cabt import demo
    from tcgexp.games.cabt.netpolicy import Net, NetPolicy

    db, decks = kit
    ep = demo.play("club-water", "expert-psychic", 11, db=db, decks=decks)
    seen = [s[0]["observation"] for s in ep["steps"][1:-1] if s[0]["status"] == "ACTIVE"]
    seen = [o for o in seen if o.get("select") and len(o["select"]["option"]) > 1]
    a = NetPolicy(Net(random_weights(seed=1)), tables, decks["fighting"], max_options=64)
    b = NetPolicy(Net(random_weights(seed=2)), tables, decks["fighting"], max_options=64)
    a2 = NetPolicy(Net(random_weights(seed=1)), tables, decks["fighting"], max_options=64)
    ours, theirs, again = ([p.choose(o) for o in seen] for p in (a, b, a2))
    assert ours == again and ours != theirs


def test_the_prior_is_the_first_picks_softmax_and_advance_moves_the_memory_as_choose_does(tables, kit):
    """What a search agent reads of the network (``probabilities``) and how it keeps the network's memory along
    its own answers (``advance``): the prior's argmax is the policy's first pick, its memory left alone; after
    ``advance(obs, the policy's picks)`` the memory is the one ``choose`` left, bit for bit."""
    from tcgexp.games.cabt import demo
    from tcgexp.games.cabt.netpolicy import Net, NetPolicy

    db, decks = kit
    seen = []
    for seed in range(5, 15):  # games of a few decisions happen (the engine shuffles as it likes): enough of them
        ep = demo.play("club-water", "expert-psychic", seed, db=db, decks=decks)
        steps = ep["steps"][1:-1]
        seen += [s[0]["observation"] for s in steps if s[0]["status"] == "ACTIVE" and s[0]["observation"]]
        if sum(1 for o in seen if o.get("select") and o["select"]["maxCount"]) > 60:
            break
    seen = [o for o in seen if o.get("select")]
    a = NetPolicy(Net(random_weights(seed=3)), tables, decks["fighting"], max_options=64)
    b = NetPolicy(Net(random_weights(seed=3)), tables, decks["fighting"], max_options=64)
    checked = 0
    for obs in seen:  # (the games one after another: both policies carry the same memory through them)
        before = b.h.copy()
        probs = b.probabilities(obs)
        assert np.array_equal(b.h, before)
        picks = a.choose(obs)
        if picks:
            assert probs.sum() == pytest.approx(1.0) and int(np.argmax(probs)) == picks[0]
            checked += 1
        b.advance(obs, picks)
        assert np.array_equal(a.h, b.h)
    assert checked > 20
