"""Data-parallel training with ``mlx.launch -n 2 --backend ring`` on this machine (loopback), for real.

What a 2-rank run must show: one run (one result.json, one Aim run with world_size 2, per-rank cache
counters), globally exact counts, weights bit-identical to one process running both shards in turn
(``tbptt.shards=2 tbptt.accum_steps=2``), every spill gone. How a launched run stops, resumes and dies
as one: test_distributed_lifetime.py.
"""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest

from tcgexp.errors import ConfigError
from tcgexp.lifecycle.checkpoint import CheckpointError
from tcgexp.train import train
from tests.train.conftest import TINY_TRAIN
from tests.train.launched import (
    assert_bit_identical,
    launch,
    needs_launch,
    rank_failures,
    single,
    weights,
)


@pytest.fixture(scope="module")
def two_ranks(cli):
    base, overrides = cli
    run_dir = base / "two"
    res = launch([*overrides, "tracking=aim", f"tracking.repo={base / 'aim'}"], run_dir)
    return run_dir, res


pytestmark = needs_launch

pytestmark = needs_launch


@pytest.mark.slow
def test_two_ranks_are_one_run_with_exact_global_counts(cli, two_ranks):
    base, _ = cli
    run_dir, res = two_ranks
    assert res.returncode == 0 and not rank_failures(res.stdout + res.stderr), res.stderr[-3000:]
    r = json.loads((run_dir / "result.json").read_text())
    assert r["status"] == "completed" and r["world_size"] == 2 and r["shards"] == 2
    assert r["planned"]["microbatches"] == r["processed"]["microbatches"] > 0
    assert r["planned"]["optimizer_steps"] == r["processed"]["optimizer_steps"]
    assert r["processed"]["positions"] == r["planned"]["positions"] == r["processed"]["optimizer_steps"]
    # every training row once per epoch, over both ranks; every validation row once
    one = json.loads((base / "warm" / "result.json").read_text())
    assert r["processed"]["rows"] == 2 * one["processed"]["rows"]
    assert all(h["val"]["rows"] == one["final"]["rows"] for h in r["history"])
    # per-rank cache counters, summed into the run's
    per_rank = r["cache_per_rank"]["train"]
    assert len(per_rank) == 2 and all(c["accesses"] > 0 for c in per_rank)
    assert r["cache"]["train"]["accesses"] == sum(c["accesses"] for c in per_rank)
    assert r["cache"]["train"]["misses"] == sum(c["misses"] for c in per_rank)
    # one result.json and one job log per rank; both ranks' spill removed
    assert sorted(p.name for p in run_dir.glob("*.json") if not p.name.startswith(".")) == [
        "job_status.json",
        "job_status.rank1.json",
        "result.json",
    ]  # (beside tcgexp's own dotfiles: the Aim run's)
    assert (run_dir / "train.log").exists() and (run_dir / "train.rank1.log").exists()
    assert not list(run_dir.glob(".cache_spill*")), "a rank's spill dir was left behind"


@pytest.mark.slow
def test_one_aim_run_with_world_size_and_rank_contexts(cli, two_ranks):
    from tcgexp.track.aim_repo import open_repo

    base, _ = cli
    run_dir, _res = two_ranks
    r = json.loads((run_dir / "result.json").read_text())
    repo = open_repo(base / "aim")
    runs = [run for run in repo.iter_runs() if run.hash == r["aim_hash"]]
    assert len(runs) == 1 and runs[0]["hparams"]["world_size"] == 2
    contexts = {
        json.dumps(m.context.to_dict(), sort_keys=True) for m in runs[0].metrics() if m.name == "cache_train/accesses"
    }
    assert {'{"rank": 0, "subset": "train"}', '{"rank": 1, "subset": "train"}', '{"subset": "train"}'} <= contexts
    all_runs = list(repo.iter_runs())
    assert sum(1 for run in all_runs if run.get("hparams", {}).get("world_size") == 2) == 1  # rank 1 tracks nothing


@pytest.mark.slow
def test_two_ranks_equal_one_process_running_both_shards_in_turn(cli, two_ranks):
    """World size 2, accum_steps=1 is world size 1, accum_steps=2 over the interleaved plan: bit for bit."""
    base, overrides = cli
    run_dir, res = two_ranks
    assert res.returncode == 0, res.stderr[-3000:]
    one = single([*overrides, "tbptt.shards=2", "tbptt.accum_steps=2"], base / "shards")
    assert one.returncode == 0, one.stderr[-3000:]
    for name in ("latest", "epoch_0001", "epoch_0002"):
        assert_bit_identical(weights(run_dir, name), weights(base / "shards", name))
    assert_bit_identical(
        weights(run_dir, "latest", "optimizer.safetensors"), weights(base / "shards", "latest", "optimizer.safetensors")
    )
    a, b = (json.loads((d / "result.json").read_text()) for d in (run_dir, base / "shards"))
    assert a["processed"]["optimizer_steps"] == b["processed"]["optimizer_steps"]
    assert a["processed"]["microbatches"] == b["processed"]["microbatches"]
    # validation sums add in another order over two ranks: equal to float64 rounding, not bit for bit
    assert a["final"]["loss"] == pytest.approx(b["final"]["loss"], rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("ranks,accum,exact", [(2, 2, True), (3, 1, False)], ids=["2-ranks-accum-2", "3-ranks"])
def test_ranks_equal_one_process_running_their_shards(cli, tmp_path, ranks, accum, exact):
    """Two ranks add their window sums as one process adds its per-shard sums: bit for bit, whatever
    accum_steps; a ring of three adds in another order, so equal to float32 rounding."""
    _, overrides = cli
    res = launch([*overrides, f"tbptt.accum_steps={accum}"], tmp_path / "ranks", ranks=ranks)
    assert res.returncode == 0 and not rank_failures(res.stdout + res.stderr), res.stderr[-3000:]
    one = single([*overrides, f"tbptt.shards={ranks}", f"tbptt.accum_steps={ranks * accum}"], tmp_path / "one")
    assert one.returncode == 0, one.stderr[-3000:]
    a, b = weights(tmp_path / "ranks"), weights(tmp_path / "one")
    if exact:
        assert_bit_identical(a, b)
    else:
        assert max(float(np.abs(a[k] - b[k]).max()) for k in a) < 1e-5
    assert json.loads((tmp_path / "ranks" / "result.json").read_text())["world_size"] == ranks


@pytest.mark.slow
def test_resume_with_another_world_size_is_refused_by_name(cli, two_ranks, tmp_path):
    from tests.conftest import compose_config

    base, _ = cli
    run_dir, res = two_ranks
    assert res.returncode == 0, res.stderr[-3000:]
    cfg = compose_config(f"dataset.root={base / 'data'}", *TINY_TRAIN, f"resume={run_dir}")
    with pytest.raises(CheckpointError, match=r"written by 2 rank\(s\).*this run has 1 rank\(s\).*mlx.launch -n 2"):
        train(cfg, run_dir=tmp_path / "again")


@pytest.mark.parametrize(
    "shards,accum,match", [(2, 1, "multiple of 2"), (3, 4, "multiple of 3")], ids=["accum-1", "accum-not-multiple"]
)
def test_shards_on_one_process_need_whole_turns_per_window(train_cfg, tmp_path, shards, accum, match):
    with pytest.raises(ConfigError, match=match):
        train(train_cfg(f"tbptt.shards={shards}", f"tbptt.accum_steps={accum}"), run_dir=tmp_path / "run")


@pytest.mark.parametrize(
    "hosts,rank,local",
    [([["127.0.0.1:5000"], ["127.0.0.1:5001"]], 1, 2), ([["10.0.0.1:5000"], ["10.0.0.2:5000"]], 0, 1)],
    ids=["two-on-one-host", "one-per-host"],
)
def test_ranks_on_one_host_split_its_cores_between_their_blas_threads(tmp_path, monkeypatch, hosts, rank, local):
    from tcgexp.launch import local_ranks, share_cores

    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(json.dumps(hosts))
    monkeypatch.setenv("MLX_HOSTFILE", str(hostfile))
    monkeypatch.setenv("MLX_RANK", str(rank))
    for var in ("MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    assert local_ranks() == local
    share_cores()
    want = str(max(1, (os.cpu_count() or 1) // 2)) if local == 2 else None
    assert os.environ.get("MKL_NUM_THREADS") == want and os.environ.get("OMP_NUM_THREADS") == want
    monkeypatch.setenv("MKL_NUM_THREADS", "7")  # the user's own setting wins
    share_cores()
    assert os.environ["MKL_NUM_THREADS"] == "7"


def test_every_rank_names_the_lowest_signalled_ranks_signal():
    """The stop signal travels as one slot per rank inside an all-reduce: summed, every rank reads the
    same row and names the same signal, the lowest signalled rank's (not a blend of numbers)."""
    from tcgexp.lifecycle.distributed import World

    rows = [World(rank=r, size=3).signal_row(name) for r, name in enumerate([None, "SIGINT", "SIGTERM"])]
    assert [list(r) for r in rows] == [[0, 0, 0], [0, int(signal.SIGINT), 0], [0, 0, int(signal.SIGTERM)]]
    assert World.first_signal(sum(rows)) == "SIGINT"
    assert World.first_signal(rows[2]) == "SIGTERM" and World.first_signal(rows[0]) is None


HOLD_LOCK = """
import sys, time
from tcgexp.ownership import HeldLock
lock = HeldLock(sys.argv[1], "run")
assert lock.acquire() is None
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


@pytest.mark.parametrize(
    "holds, grace, dead", [(0.4, 3.0, [1]), (30.0, 0.3, [])], ids=["lock-freed-after-the-socket", "peer-alive"]
)
def test_a_lost_peer_is_named_once_its_lock_is_free(tmp_path, holds, grace, dead):
    """A killed rank's sockets close before its lock does (its files are closed one by one as it
    exits): the survivor waits a moment for the lock before saying it cannot tell who died (CI saw
    'a peer rank died or became unreachable' for a rank SIGKILLed on the same host). A peer whose
    lock stays held is not called dead."""
    import subprocess
    import sys

    from tcgexp.lifecycle.distributed import World
    from tcgexp.lifecycle.rundir import lock_name

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path / lock_name(1)), str(holds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert World(rank=0, size=2, run_dir=tmp_path).dead_ranks(grace=grace) == dead
    finally:
        holder.kill()
        holder.wait()
    assert World(rank=0, size=2, run_dir=tmp_path).dead_ranks(grace=0) == [1]
