"""The search agent (pimc.py), its clock and its deck belief (extra cabt for what plays): the clock never spends
the bank below its reserve over the bank's whole range; the deck belief deals the opponent only what its list
still holds; the agent plays legal whole games against the engine's first, as the evaluated agent and as an
opponent in the arena, with a trained network as its prior."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tcgexp.errors import ConfigError
from tcgexp.games.cabt.belief import DeckModel, seen
from tcgexp.games.cabt.pimc import Clock


@pytest.mark.parametrize("bank", [600.0, 120.0, 61.0, 60.0, 5.0, 0.0, -3.0], ids=lambda b: f"bank{b:g}")
@pytest.mark.parametrize("per", [0.05, 1.0, 30.0], ids=lambda p: f"per{p:g}")
def test_the_clock_never_spends_below_its_reserve(bank, per):
    clock = Clock(per_decision=per, reserve=60.0, horizon=40)
    budget = clock.budget({"remainingOverageTime": bank})
    assert 0.0 <= budget <= per
    assert budget <= max(0.0, bank - 60.0) / 40 + 1e-12
    if bank <= 60.0:
        assert budget == 0.0


def test_the_clock_counts_its_own_spending_where_the_harness_says_more():
    clock = Clock(per_decision=1.0, reserve=60.0, horizon=10)
    clock.spent = 535.0  # this game's own tally: 65 s left, though the observation says 600
    assert clock.budget({"remainingOverageTime": 600}) == pytest.approx(0.5)
    clock.reset()
    assert clock.budget({"remainingOverageTime": 600}) == 1.0


@pytest.mark.parametrize(
    "kw", [{"per_decision": 0}, {"bank": 0}, {"reserve": -1}, {"horizon": 0}], ids=lambda k: next(iter(k))
)
def test_an_impossible_clock_is_refused(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        Clock(**kw)


def test_the_deck_model_draws_only_decks_holding_what_was_shown():
    a, b, c = [1] * 30 + [2] * 30, [1] * 20 + [3] * 40, [4] * 60
    model = DeckModel([(5, a), (1, b), (9, c)])
    rng = random.Random(0)
    assert {tuple(model.draw(Counter({1: 2}), rng)) for _ in range(200)} == {tuple(a), tuple(b)}
    assert {tuple(model.draw(Counter({1: 25}), rng)) for _ in range(50)} == {tuple(a)}  # b holds only 20
    drawn = Counter(tuple(model.draw(Counter(), rng)) for _ in range(3000))
    assert drawn[tuple(c)] / 3000 == pytest.approx(9 / 15, abs=0.04)  # by weight where nothing is shown
    assert model.draw(Counter({5: 1, 1: 3}), rng) == a  # none holds card 5: the one holding most of the rest
    with pytest.raises(ValueError, match="one deck"):
        DeckModel([])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("eval.agent.kind=mcts", "eval.agent.kind"),
        ("eval.agent.worlds=0", "eval.agent.worlds"),
        ("eval.agent.per_decision=0", "eval.agent.per_decision"),
        ("eval.agent.belief=oracle", "eval.agent.belief"),
        ("eval.agent.decisions=some", "eval.agent.decisions"),
    ],
    ids=lambda v: v.split("=")[0] if "=" in v else None,
)
def test_an_impossible_agent_setting_is_one_line_naming_it(tmp_path, override, key):
    from tcgexp.eval.config import eval_node

    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        eval_node(tmp_path, [override])


def test_eval_agent_search_composes(cfg_factory):
    cfg = cfg_factory("eval.agent.kind=search", "eval.agent.worlds=4")
    assert cfg.eval.agent.kind == "search" and cfg.eval.agent.worlds == 4
    assert cfg_factory().eval.agent.kind == "policy"


# -- in the engine ---------------------------------------------------------------------------------


@pytest.fixture
def eng():
    from tcgexp.games.cabt.engine import engine

    return engine()


cabt = pytest.mark.extra("cabt")


@cabt
def test_the_deck_belief_deals_the_opponent_only_what_its_list_still_holds(eng):
    from tcgexp.games.cabt.belief import DeckBelief, basic_ids
    from tcgexp.games.cabt.engine import harness_deck
    from tcgexp.games.cabt.search import Search, needed

    deck, rng = harness_deck(), random.Random(2)
    belief = DeckBelief(
        deck, basics=basic_ids(eng.cards()), model=DeckModel([(1, deck)]), seed=3
    )  # the opponent's true list
    checked = 0
    with eng.battle(deck, deck) as battle, Search(eng) as search:
        while battle.result < 0 and checked < 120:
            obs = battle.obs
            world = belief.sample(obs)
            need = needed(obs)
            theirs = obs["current"]["players"][1 - obs["current"]["yourIndex"]]
            dealt = Counter(world.opponent_deck + world.opponent_prize + world.opponent_hand + world.opponent_active)
            assert sum(dealt.values()) == sum(need[z] for z in need if z.startswith("opponent"))
            assert not dealt - (Counter(deck) - Counter(seen(theirs))), "cards its list no longer holds"
            search.release(search.begin(obs, world))
            checked += 1
            sel = obs["select"]
            k = max(1, sel["minCount"]) if sel["maxCount"] else 0
            battle.select(sorted(rng.sample(range(len(sel["option"])), k)) if k else [])
    assert checked == 120 or battle.result >= 0


@cabt
@pytest.mark.parametrize("belief", ["decks", "uniform"])
def test_the_search_agent_plays_legal_whole_games_on_its_clock(eng, belief):
    from tcgexp.games.cabt.arena import play_game
    from tcgexp.games.cabt.engine import harness_deck
    from tcgexp.games.cabt.pimc import build
    from tcgexp.games.cabt.players import FirstPolicy

    deck = harness_deck()
    agent = build(eng, deck, {"worlds": 2, "per_decision": 0.05, "belief": belief}, seed=1)
    for me in (0, 1):
        sides = [agent, FirstPolicy(deck)] if me == 0 else [FirstPolicy(deck), agent]
        out = play_game(eng, sides, me=me, max_steps=2000, max_seconds=600.0)
        assert out["error"] is None and out["outcome"] in ("win", "draw", "loss"), out
    assert agent.searched and agent.refused == 0
    assert all(1 <= worlds <= 2 for _, worlds in agent.searched)


@cabt
def test_the_search_agent_refuses_a_setting_it_does_not_have(eng):
    from tcgexp.games.cabt.engine import harness_deck
    from tcgexp.games.cabt.pimc import build

    with pytest.raises(ValueError, match="no setting wrolds"):
        build(eng, harness_deck(), {"wrolds": 4})


@cabt
def test_search_is_an_opponent_and_the_evaluated_agent_wherever_the_arena_plays(eng):
    from tcgexp.games.cabt.arena import Settings, Side, play_match

    knobs = {"kind": "search", "worlds": 1, "per_decision": 0.02}
    tally = play_match(Side("first", "first"), Side("search", "search", agent=knobs), Settings(games=2, workers=1))
    assert tally["games"] == 2 and not tally["errors"], tally["errors"][:1]
    tally = play_match(Side("first", "search", agent=knobs), Side("random", "random"), Settings(games=2, workers=1))
    assert tally["games"] == 2 and not tally["errors"], tally["errors"][:1]


def test_a_search_main_py_is_one_file_with_the_search_agent_and_the_policy_its_prior():
    from tcgexp.games.cabt import bundle
    from tcgexp.games.cabt.pimc import KNOBS

    plain = bundle.main_source()
    search = bundle.main_source({"kind": "search", **KNOBS}, [[1, list(range(60))]])
    compile(search, "main.py", "exec")
    assert "_SEARCHER" not in plain and "SearchAgent" not in plain
    assert "_SEARCHER = _searcher()" in search and "SEARCH_DECKS = [[1, [0, 1," in search
    assert search.rstrip().splitlines()[-1].strip() == "return _AGENT.choose(obs)"  # the agent is the last callable
