"""Residency policies alone (no data): the rules the real cache and a trace replay share."""

from __future__ import annotations

import math
import random
from functools import cache

import pytest

from tcgexp.bench.trace import replay
from tcgexp.cache import admit
from tcgexp.cache.policy import Hot60Policy, PlanPolicy
from tests.conftest import CACHE_POLICIES, policy_of


def k(i: int) -> tuple[int, int]:
    return (0, i)


def flat(trace):
    return [key for keys in trace for key in dict.fromkeys(keys)]


def belady_hits(trace, capacity: int) -> int:
    """Textbook Belady with bypass over the flattened trace, written independently."""
    seq = flat(trace)
    resident: set = set()
    hits = 0
    for i, key in enumerate(seq):
        if key in resident:
            hits += 1
            continue
        if capacity == 0:
            continue
        if len(resident) < capacity:
            resident.add(key)
            continue

        def next_use(x, i=i):
            for j in range(i + 1, len(seq)):
                if seq[j] == x:
                    return j
            return math.inf

        furthest = max(resident | {key}, key=next_use)
        if next_use(furthest) == next_use(key):  # the newcomer is (one of) the furthest: bypass
            continue
        resident.remove(furthest)
        resident.add(key)
    return hits


def optimal_hits(trace, capacity: int) -> int:
    """Exhaustive search over every admission/eviction choice: the true optimum."""
    seq = tuple(flat(trace))

    @cache
    def best(i: int, resident: frozenset) -> int:
        if i == len(seq):
            return 0
        key = seq[i]
        if key in resident:
            return 1 + best(i + 1, resident)
        options = [best(i + 1, resident)]  # bypass
        if len(resident) < capacity:
            options.append(best(i + 1, resident | {key}))
        else:
            options += [best(i + 1, (resident - {v}) | {key}) for v in resident]
        return max(options)

    return best(0, frozenset())


HAND_TRACE = [
    (k(0), k(1)),
    (k(2),),
    (k(0), k(3)),
    (k(1),),
    (k(2), k(0)),
    (k(4),),
    (k(1), k(3)),
    (k(0),),
    (k(4), k(2)),
    (k(3),),
    (k(0), k(1), k(2)),
    (k(4),),
]


def test_every_cache_option_builds_its_policy_and_an_unknown_one_is_refused():
    from hydra.errors import MissingConfigException

    assert set(CACHE_POLICIES) >= {"off", "fifo", "lru", "hot60", "plan"}
    for name in CACHE_POLICIES:
        assert policy_of(name, 4).name == name
    with pytest.raises(MissingConfigException, match="mru"):
        policy_of("mru", 4)


@pytest.mark.parametrize("name", CACHE_POLICIES)
def test_replay_counts_every_access(name):
    rng = random.Random(1)
    trace = [tuple(k(rng.randrange(9)) for _ in range(rng.randrange(1, 4))) for _ in range(60)]
    stats = replay(policy_of(name, 4), trace)
    accesses = sum(len(keys) for keys in trace)
    assert stats["hits"] + stats["misses"] == accesses


def test_off_keeps_nothing():
    policy = policy_of("off", 8)
    assert policy.capacity == 0
    stats = replay(policy, [(k(0),), (k(0),), (k(0),)])
    assert stats == {"hits": 0, "misses": 3, "evictions": 0, "bypasses": 3, "promotions": 0}
    assert len(policy) == 0


def test_fifo_and_lru_differ_where_they_must():
    # A B C A D A, capacity 3: FIFO evicts A (oldest insert) for D, so the last A
    # misses; LRU refreshed A on its hit and evicts B instead, so the last A hits.
    trace = [(k(0),), (k(1),), (k(2),), (k(0),), (k(3),), (k(0),)]
    fifo, lru = policy_of("fifo", 3), policy_of("lru", 3)
    assert replay(fifo, trace)["hits"] == 1
    assert replay(lru, trace)["hits"] == 2
    assert fifo.keys() == [k(2), k(3), k(0)]  # the last A pushed out B
    assert set(lru.keys()) == {k(2), k(3), k(0)}


@pytest.mark.parametrize("promotion_hits", [1, 2, 3])
def test_hot60_promotes_after_exactly_promotion_hits(promotion_hits):
    policy = Hot60Policy(5, hot_fraction=0.6, promotion_hits=promotion_hits)
    assert policy.hot_capacity == 3
    admit(policy, k(0))
    for hit in range(1, promotion_hits + 1):
        promoted = policy.on_hit(k(0))
        assert promoted == (hit == promotion_hits)
        assert policy.is_hot(k(0)) == (hit == promotion_hits)
    assert policy.promotions == 1
    assert (policy.hot_count, policy.transient_count) == (1, 0)


def test_hot60_hot_is_bounded_and_never_a_victim():
    policy = Hot60Policy(5, hot_fraction=0.6, promotion_hits=1)  # hot holds floor(3.0) = 3
    for i in range(5):
        admit(policy, k(i))
        policy.on_hit(k(i))
    assert policy.hot_count == 3 and policy.transient_count == 2
    assert policy.promotions == 3
    victim = policy.victim(k(9))
    assert victim is not None and not policy.is_hot(victim)
    # Transient is LRU: touching k(3) leaves k(4) as the victim.
    policy.on_hit(k(3))
    assert policy.victim() == k(4)
    # With every slot hot there is no victim: the newcomer is simply not cached.
    only_hot = Hot60Policy(2, hot_fraction=1.0, promotion_hits=1)
    for i in range(2):
        admit(only_hot, k(i))
        only_hot.on_hit(k(i))
    assert only_hot.victim(k(5)) is None
    assert admit(only_hot, k(5)) == (False, [])
    assert set(only_hot.keys()) == {k(0), k(1)}


def test_hot60_counter_resets_when_evicted():
    policy = Hot60Policy(2, hot_fraction=0.5, promotion_hits=2)  # hot holds 1
    admit(policy, k(0))
    policy.on_hit(k(0))  # one hit so far
    policy.on_remove(k(0))
    admit(policy, k(0))
    assert not policy.on_hit(k(0)), "a re-admitted entry starts its count over"
    assert policy.on_hit(k(0))


@pytest.mark.parametrize("capacity", [1, 2, 3])
def test_plan_makes_belady_choices_on_a_hand_made_trace(capacity):
    stats = replay(PlanPolicy(capacity), HAND_TRACE)
    assert stats["hits"] == belady_hits(HAND_TRACE, capacity) == optimal_hits(HAND_TRACE, capacity)
    assert stats["hits"] + stats["misses"] == len(flat(HAND_TRACE))


@pytest.mark.parametrize("seed", range(12))
def test_plan_matches_belady_on_random_traces(seed):
    rng = random.Random(seed)
    distinct, capacity = rng.randrange(3, 8), rng.randrange(1, 4)
    trace = [tuple(k(i) for i in rng.sample(range(distinct), rng.randrange(1, 4))) for _ in range(rng.randrange(5, 14))]
    plan_hits = replay(PlanPolicy(capacity), trace)["hits"]
    assert plan_hits == belady_hits(trace, capacity)
    if len(flat(trace)) <= 22:
        assert plan_hits == optimal_hits(trace, capacity)
    # And it never does worse than the trace-blind policies.
    for name in ("fifo", "lru", "hot60"):
        assert plan_hits >= replay(policy_of(name, capacity), trace)["hits"]


def test_plan_next_use_skips_what_this_position_already_read():
    policy = PlanPolicy(2)
    policy.set_trace([(k(0), k(1)), (k(2),), (k(0),)])
    assert policy.next_use(k(1)) == 1  # still to be read at position 0
    policy.on_access(k(0), 0)
    assert policy.next_use(k(0)) == 3  # read at 0: its next use is position 2
    assert policy.next_use(k(9)) == math.inf
    policy.on_access(k(1), 0)
    assert not policy.worth_spilling(k(1)) and policy.worth_spilling(k(0))


def test_plan_tolerates_workers_reading_out_of_order():
    # Position 1 is read before position 0 finishes (two loader workers):
    # k(0) is still needed at 0, so it must not look like a far-future key.
    policy = PlanPolicy(2)
    policy.set_trace([(k(0), k(1)), (k(2), k(1)), (k(3),), (k(0),)])
    policy.on_access(k(1), 0)
    policy.on_access(k(2), 1)
    policy.on_access(k(1), 1)
    assert policy.next_use(k(0)) == 0 and policy.next_use(k(1)) == math.inf
    assert policy.next_use(k(3)) == 4
    policy.on_access(k(0), 0)
    assert policy.next_use(k(0)) == 5


def test_plan_resumed_mid_plan_ignores_the_skipped_positions():
    policy = PlanPolicy(2)
    policy.set_trace([(k(0),), (k(1),), (k(2),), (k(0),)])
    policy.on_access(k(2), 2)  # a resumed epoch starts at position 2
    assert policy.next_use(k(0)) == 3 and policy.next_use(k(1)) == math.inf


def test_plan_without_trace_degrades_to_lru():
    trace = [(k(i % 5),) for i in range(40)] + [(k(0),), (k(1),), (k(0),), (k(2),), (k(0),)]
    plan = PlanPolicy(3)
    plan_stats = replay(plan, trace, set_trace=False)
    assert plan_stats == replay(policy_of("lru", 3), trace) | {"promotions": 0}
