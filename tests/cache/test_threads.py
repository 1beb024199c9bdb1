"""Many threads on one cache: right bytes, no deadlock, one decode per key at a time."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest

from tests.cache.conftest import COLUMNS, assert_same, spill_dir_bytes
from tests.conftest import cache_of

THREADS = 8
GETS = 150


class FlakyPressure:
    """Memory pressure that flips at random on each probe (thread-safe enough: one RNG call)."""

    def __init__(self, seed: int, share: float = 0.3) -> None:
        self._rng = random.Random(seed)
        self._share = share

    def __call__(self) -> float:
        return 99.0 if self._rng.random() < self._share else 10.0


def instrument(cache, delay: float = 0.0):
    """Wrap the cache's Parquet decode: count decodes and catch two of one key at once."""
    real = cache._decode
    lock = threading.Lock()
    active: Counter = Counter()
    stats = {"decodes": Counter(), "overlaps": 0}

    def decode(key):
        with lock:
            active[key] += 1
            stats["decodes"][key] += 1
            if active[key] > 1:
                stats["overlaps"] += 1
        try:
            if delay:
                time.sleep(delay)
            return real(key)
        finally:
            with lock:
                active[key] -= 1

    cache._decode = decode
    return stats


@pytest.mark.parametrize("policy", ["hot60", "lru", "fifo", "plan"])
def test_hammer(policy, corpus_files, all_keys, reference, tmp_path):
    keys = all_keys[:12]  # overlapping, and more than capacity
    budget = 700_000  # about four files: drops happen while other threads read
    spill_dir = tmp_path / "spill"
    cache = cache_of(
        corpus_files,
        COLUMNS,
        opt_step_guard="all",
        policy=policy,
        capacity=5,
        promotion_hits=2,
        spill=True,
        spill_dir=spill_dir,
        spill_budget_bytes=budget,
        memory_probe=FlakyPressure(seed=1),
    )
    stats = instrument(cache, delay=0.0005)
    if policy == "plan":
        rng = random.Random(5)
        cache.set_trace([tuple(rng.sample(keys, 3)) for _ in range(GETS)])
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            start.wait()
            for i in range(GETS):
                key = rng.choice(keys)
                if rng.random() < 0.2:
                    with cache.in_opt_step():
                        got = cache.get(key, t=i)
                else:
                    got = cache.get(key, t=i)
                assert_same(got, reference[key])
                assert len(cache) <= 5
                # Files come and go under a directory scan here; the store's own
                # account is exact. The directory is scanned once all is quiet.
                assert cache.counters()["ssd_bytes"] <= budget
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,), daemon=True) for seed in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not any(th.is_alive() for th in threads), "deadlock: a worker never finished"
    assert not errors, errors[0]
    assert spill_dir_bytes(spill_dir) <= budget
    assert set(cache._ram) == set(cache._policy.keys()), "RAM and the policy agree on what is resident"
    c = cache.counters()
    cache.close()
    assert not spill_dir.exists()
    assert cache.counters()["resident_hot"] + cache.counters()["resident_transient"] == 0
    assert c["accesses"] == THREADS * GETS
    assert c["hits"] + c["misses"] == c["accesses"]
    assert c["max_key_decode_concurrency"] == 1 and stats["overlaps"] == 0
    assert c["decodes"] == sum(stats["decodes"].values())
    assert c["misses"] == c["decodes"] + c["ssd_hits"] + c["shared_misses"] + c["rescues"]
    assert c["bytes_loaded"] == sum(
        n * sum(a.nbytes for a in reference[k].values()) for k, n in stats["decodes"].items()
    )
    assert c["spill_errors"] == 0
    assert c["pressure_evictions"] > 0 and c["hits"] > 0 and c["ssd_spills"] > 0


def test_concurrent_misses_of_one_key_decode_once(corpus_files, all_keys, reference):
    cache = cache_of(
        corpus_files, COLUMNS, opt_step_guard="all", policy="lru", capacity=4, spill=False, memory_probe=lambda: 10.0
    )
    stats = instrument(cache, delay=0.05)  # a slow decode: every thread arrives while it runs
    key = all_keys[3]
    results: list = [None] * THREADS
    start = threading.Barrier(THREADS)

    def worker(i: int) -> None:
        start.wait()
        results[i] = cache.get(key)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
    assert not any(th.is_alive() for th in threads)
    c = cache.counters()
    cache.close()
    assert stats["decodes"][key] == 1 and c["decodes"] == 1
    assert c["misses"] + c["hits"] == THREADS
    assert c["shared_misses"] + c["hits"] == THREADS - 1
    for got in results:
        assert_same(got, reference[key])
        assert got["features"] is results[0]["features"], "waiters get the decoder's arrays"


def test_waiters_see_the_decoders_error(corpus_files, all_keys):
    cache = cache_of(
        corpus_files, COLUMNS, opt_step_guard="all", policy="lru", capacity=4, spill=False, memory_probe=lambda: 10.0
    )
    entered = threading.Event()
    release = threading.Event()

    def failing(key):
        entered.set()
        release.wait(10)
        raise OSError("bad sector")

    cache._decode = failing
    outcomes: list = []

    def worker() -> None:
        try:
            cache.get(all_keys[0])
            outcomes.append("ok")
        except OSError as exc:
            outcomes.append(str(exc))

    owner = threading.Thread(target=worker, daemon=True)
    owner.start()
    assert entered.wait(10)
    waiter = threading.Thread(target=worker, daemon=True)
    waiter.start()
    deadline = time.monotonic() + 10
    while cache.counters()["shared_misses"] == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    release.set()
    owner.join(10)
    waiter.join(10)
    cache.close()
    assert outcomes == ["bad sector", "bad sector"]
