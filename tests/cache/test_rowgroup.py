"""RowGroupCache over a real corpus: correctness of bytes, counters, tiers, pressure, opt-step."""

from __future__ import annotations

import random
import re

import pytest

from tcgexp.app import compose
from tests.cache.conftest import COLUMNS, Probe, assert_same
from tests.cache.test_policy import belady_hits
from tests.conftest import CACHE_POLICIES, cache_of


def make(files, probe=None, **kw):
    kw.setdefault("spill", False)
    kw.setdefault("opt_step_guard", "all")  # the contract's guard, which these tests were written against
    return cache_of(files, COLUMNS, memory_probe=probe or Probe(), **kw)


def sequence(keys, n=120, seed=0):
    rng = random.Random(seed)
    hot = keys[:4]  # a skewed mix: a small working set plus a long tail
    return [rng.choice(hot) if rng.random() < 0.6 else rng.choice(keys) for _ in range(n)]


@pytest.mark.parametrize("policy", CACHE_POLICIES)
def test_every_policy_returns_direct_read_bytes_and_counts_every_access(
    policy, corpus_files, all_keys, reference, tmp_path
):
    seq = sequence(all_keys)
    with make(corpus_files, policy=policy, capacity=5, spill=True, spill_dir=tmp_path / "spill") as cache:
        if policy == "plan":
            cache.set_trace([(key,) for key in seq])
        for t, key in enumerate(seq):
            assert_same(cache.get(key, t=t), reference[key])
        c = cache.counters()
    assert c["accesses"] == len(seq)
    assert c["hits"] + c["misses"] == c["accesses"]
    assert c["hit_rate_pct"] == pytest.approx(100.0 * c["hits"] / c["accesses"])
    assert c["resident_hot"] + c["resident_transient"] <= 5
    assert c["decodes"] <= c["misses"]
    if policy != "off":
        assert c["hits"] > 0


def test_counter_names(corpus_files):
    with make(corpus_files) as cache:
        c = cache.counters()
    required = {
        "hits",
        "misses",
        "hit_rate_pct",
        "promotions",
        "evictions",
        "ssd_hits",
        "ssd_spills",
        "ssd_resident",
        "resident_hot",
        "resident_transient",
        "bytes_loaded",
        "accesses",
        "spill_errors",
    }
    assert required <= set(c)
    assert all(isinstance(v, (int, float)) for v in c.values())


def test_off_decodes_every_access(corpus_files, all_keys, reference):
    with make(corpus_files, policy="off", capacity=8, spill=True) as cache:
        assert cache.spill_dir is None, "a zero-capacity cache never spills"
        for key in all_keys[:3] * 3:
            assert_same(cache.get(key), reference[key])
        c = cache.counters()
        assert len(cache) == 0
    assert c["hits"] == 0 and c["misses"] == c["decodes"] == 9
    assert c["bytes_loaded"] == 3 * sum(v.nbytes for key in all_keys[:3] for v in reference[key].values())


@pytest.mark.parametrize("policy", ["fifo", "lru", "hot60", "plan"])
def test_capacity_zero_is_no_cache_as_documented(policy, corpus_files, all_keys, reference, tmp_path):
    """cache.capacity=0 means no cache with any policy (README): every access decoded, nothing kept or spilled,
    and no end-of-run advice to tune a cache that is not there."""
    with make(corpus_files, policy=policy, capacity=0, spill=True, spill_dir=tmp_path / "spill") as cache:
        assert cache.spill_dir is None
        for key in all_keys[:3] * 3:
            assert_same(cache.get(key), reference[key])
        c = cache.counters()
        assert len(cache) == 0 and cache.diagnose() == []
    assert c["hits"] == 0 and c["misses"] == c["decodes"] == 9 and c["ssd_spills"] == 0
    assert not (tmp_path / "spill").exists()


def test_hit_serves_the_same_read_only_arrays(corpus_files, all_keys, reference):
    key = all_keys[0]
    with make(corpus_files, policy="lru", capacity=2) as cache:
        first = cache.get(key)
        second = cache.get(key)  # the second touch packs the entry row-major, once
        assert_same(second, reference[key])
        third = cache.get(key)
        assert all(third[name] is second[name] for name in COLUMNS), "a hit costs no copy"
        for arr in first.values():
            assert not arr.flags.writeable
            with pytest.raises(ValueError):
                arr[...] = 0
        first.pop("features")  # the dict is the caller's own
        assert "features" in cache.get(key)
        assert cache.counters()["bytes_loaded"] == sum(v.nbytes for v in reference[key].values())


def test_promotion_after_exactly_promotion_hits(corpus_files, all_keys):
    key = all_keys[0]
    with make(corpus_files, policy="hot60", capacity=5, promotion_hits=3) as cache:
        cache.get(key)  # miss: enters transient
        for hit in (1, 2, 3):
            cache.get(key)
            c = cache.counters()
            assert c["promotions"] == (hit == 3)
            assert (c["resident_hot"], c["resident_transient"]) == ((1, 0) if hit == 3 else (0, 1))


def test_hot_is_never_evicted_under_pressure(corpus_files, all_keys, reference):
    probe = Probe(10)
    hot_keys = all_keys[:3]
    with make(corpus_files, probe, policy="hot60", capacity=5, hot_fraction=0.6, promotion_hits=1, spill=True) as cache:
        for key in hot_keys:
            cache.get(key)
            cache.get(key)
        assert cache.counters()["resident_hot"] == 3
        probe.pct = 99.0
        for key in all_keys[3:] * 2:
            assert_same(cache.get(key), reference[key])
            assert all(cache.is_resident(h) for h in hot_keys)
        c = cache.counters()
    assert c["resident_hot"] == 3 and c["pressure_evictions"] > 0
    assert c["evictions"] >= c["pressure_evictions"]


def test_pressure_evicts_one_transient_per_access(corpus_files, all_keys):
    probe = Probe(10)
    with make(corpus_files, probe, policy="lru", capacity=4, high_watermark_pct=85.0) as cache:
        for key in all_keys[:4]:
            cache.get(key)
        probe.pct = 85.0  # at the watermark is not above it
        cache.get(all_keys[0])
        assert len(cache) == 4
        probe.pct = 85.1
        cache.get(all_keys[0])  # a hit: the entry being read is not the one evicted
        assert len(cache) == 3 and cache.is_resident(all_keys[0])
        assert not cache.is_resident(all_keys[1]), "the LRU entry goes first"
        assert cache.counters()["pressure_evictions"] == 1


def test_no_eviction_inside_nested_in_opt_step(corpus_files, all_keys, reference):
    probe = Probe(10)
    with make(corpus_files, probe, policy="lru", capacity=3, spill=True, opt_step_guard="all") as cache:
        resident = all_keys[:3]
        for key in resident:
            cache.get(key)
        probe.pct = 99.0
        with cache.in_opt_step():
            with cache.in_opt_step():
                for key in all_keys[3:10]:  # at capacity and under pressure
                    assert_same(cache.get(key), reference[key])
                for key in resident:
                    assert_same(cache.get(key), reference[key])
            # Still inside the outer one after the inner exits.
            for key in all_keys[10:14]:
                assert_same(cache.get(key), reference[key])
            c = cache.counters()
            assert c["evictions"] == 0 and c["pressure_evictions"] == 0
            assert c["opt_step_skips"] == 11
            assert {k for k in all_keys if cache.is_resident(k)} == set(resident)
        cache.get(resident[0])  # outside again: pressure evicts
        assert cache.counters()["pressure_evictions"] == 1


def test_plan_cache_makes_belady_choices(corpus_files, all_keys):
    rng = random.Random(7)
    keys = all_keys[:7]
    trace = [tuple(rng.sample(keys, rng.randrange(1, 4))) for _ in range(30)]
    with make(corpus_files, policy="plan", capacity=3) as cache:
        cache.set_trace(trace)
        for t, keys_t in enumerate(trace):
            for key in keys_t:
                cache.get(key, t=t)
        hits = cache.counters()["hits"]
    assert hits == belady_hits(trace, 3)


def test_prefetch_warms_without_counting_accesses(corpus_files, all_keys, reference):
    with make(corpus_files, policy="lru", capacity=4) as cache:
        assert cache.prefetch(all_keys[:3]) == 3
        assert cache.prefetch(all_keys[:3]) == 0  # already resident
        c = cache.counters()
        assert c["accesses"] == 0 and c["prefetches"] == 3 and c["decodes"] == 3
        assert_same(cache.get(all_keys[1]), reference[all_keys[1]])
        assert cache.counters()["hits"] == 1
        with cache.in_opt_step():
            assert cache.prefetch(all_keys[3:6]) == 1, "no eviction inside a step: only the free slot fills"


def test_tally_and_diagnose(corpus_files, all_keys):
    with make(corpus_files, policy="hot60", capacity=5, name="val") as cache:
        for _ in range(20):
            for key in all_keys[:3]:
                cache.get(key)
        text = cache.tally()
        assert cache.diagnose() == []
    lines = text.splitlines()
    assert lines[0] == "[cache-val] hits=57 misses=3 hit_rate=95.0%"
    assert re.fullmatch(r"  resident=3 rg \(hot=3 / transient=0\) promotions=3", lines[1])
    assert re.fullmatch(r"  evictions=0 ssd_hits=0 ssd_spills=0 ssd_resident=0 decoded=\d+\.\d MiB", lines[2])

    with make(corpus_files, policy="lru", capacity=2) as churn:
        for key in all_keys[:6] * 2:  # a cycle longer than capacity: every access misses
            churn.get(key)
        assert [m for m in churn.diagnose() if "hit rate after warm-up is 0.0%" in m]
        counters = churn.counters()
    from tcgexp.cache.report import diagnose

    for policy, advice in (("lru", "or try cache=plan"), ("plan", "cache=plan already keeps those needed soonest")):
        [low] = [m for m in diagnose("train", counters, policy=policy, capacity=2) if "hit rate after warm-up" in m]
        assert advice in low and (policy == "lru" or "try cache=plan" not in low), low

    with make(corpus_files, policy="lru", capacity=2, spill=True) as dead:
        for key in all_keys[:12]:  # 10 evictions, each spilled, none ever read back
            dead.get(key)
        assert [m for m in dead.diagnose() if "ssd_hits=0" in m and "dead weight" in m]


def test_bad_keys_columns_and_use_after_close(corpus_files, all_keys):
    with pytest.raises(ValueError, match="not in"):
        cache_of(corpus_files, ["features", "nope"], spill=False)
    cache = make(corpus_files)
    with pytest.raises(KeyError):
        cache.get((len(corpus_files), 0))
    with pytest.raises(KeyError):
        cache.get((0, 10_000))
    with pytest.raises(TypeError):
        cache.get("0-1")
    cache.get([0, 1])  # any (file, row group) pair of ints is accepted
    cache.close()
    cache.close()
    with pytest.raises(RuntimeError, match="closed"):
        cache.get(all_keys[0])


def test_a_failed_decode_reaches_the_caller_and_the_cache_recovers(corpus_files, all_keys, reference, monkeypatch):
    cache = make(corpus_files, policy="lru", capacity=3)
    real = cache._decode
    calls = []

    def flaky(key):
        calls.append(key)
        if len(calls) == 1:
            raise OSError("disk hiccup")
        return real(key)

    monkeypatch.setattr(cache, "_decode", flaky)
    with pytest.raises(OSError, match="hiccup"):
        cache.get(all_keys[0])
    assert_same(cache.get(all_keys[0]), reference[all_keys[0]])
    c = cache.counters()
    assert c["hits"] + c["misses"] == c["accesses"] == 2
    cache.close()


@pytest.mark.parametrize("option", CACHE_POLICIES)
def test_every_cache_option_instantiates_as_configured(option, corpus_files, tmp_path):
    from tcgexp.config import build

    cfg = compose(f"cache={option}").cache
    cache = build(cfg)(
        corpus_files, COLUMNS, spill_dir=tmp_path / ".cache_spill" / "train", name="train", memory_probe=Probe()
    )
    try:
        assert type(cache._policy).__module__ + "." + type(cache._policy).__name__ == cfg.policy._target_
        assert cache.policy_name == option
        assert cache.capacity == (0 if option == "off" else cfg.capacity)
        assert (cache.spill_dir is not None) == (bool(cfg.spill) and option != "off")
        assert cache.high_watermark_pct == cfg.high_watermark_pct
        if option == "hot60":
            assert cache._policy.hot_capacity == int(cfg.policy.hot_fraction * cfg.capacity)
    finally:
        cache.close()
    assert not (tmp_path / ".cache_spill" / "train").exists()


def test_all_policies_hand_back_identical_bytes_for_one_sequence(corpus_files, all_keys, tmp_path):
    """Same accesses, same pressure flips: only where the bytes come from may differ."""
    seq = sequence(all_keys, n=80, seed=11)
    flips = [random.Random(2).random() < 0.25 for _ in seq]
    served = {}
    for policy in CACHE_POLICIES:
        probe = Probe()
        with make(corpus_files, probe, policy=policy, capacity=4, spill=True, spill_dir=tmp_path / policy) as cache:
            cache.set_trace([(key,) for key in seq])
            out = []
            for t, (key, flip) in enumerate(zip(seq, flips)):
                probe.pct = 99.0 if flip else 10.0
                got = cache.get(key, t=t)
                out.append([(name, arr.dtype.str, arr.shape, arr.tobytes()) for name, arr in got.items()])
            served[policy] = out
    first = served.pop("off")
    for policy, out in served.items():
        assert out == first, policy


def test_fifo_and_lru_caches_differ_where_they_must(corpus_files, all_keys):
    a, b, c, d = all_keys[:4]
    hits = {}
    for policy in ("fifo", "lru"):
        with make(corpus_files, policy=policy, capacity=3) as cache:
            for key in (a, b, c, a, d, a):
                cache.get(key)
            hits[policy] = cache.counters()["hits"]
    assert hits == {"fifo": 1, "lru": 2}


def test_opt_step_guard_pressure_still_admits_at_capacity(corpus_files, all_keys):
    probe = Probe(99.0)
    with make(corpus_files, probe, policy="lru", capacity=2, opt_step_guard="pressure") as cache, cache.in_opt_step():
        for key in all_keys[:4]:
            cache.get(key)
        c = cache.counters()
        assert c["pressure_evictions"] == 0 and c["opt_step_skips"] == 0
        assert c["evictions"] == 2 and cache.is_resident(all_keys[3])
    from tcgexp.schema import validate

    with pytest.raises(ValueError, match="cache.opt_step_guard='none'"):  # the schema's check, before any work
        validate(compose("cache.opt_step_guard=none"))


def test_pack_keeps_values_and_is_read_only(corpus_files, all_keys, reference):
    from tcgexp.data.source import pack, packed_records

    packed = pack(dict(reference[all_keys[0]]))
    assert_same(packed, reference[all_keys[0]])
    raw, dtype = packed_records(packed)
    assert raw.shape == (len(packed["label"]), dtype.itemsize) and not raw.flags.writeable
    assert all(not a.flags.writeable for a in packed.values())
    assert packed_records(reference[all_keys[0]]) is None
