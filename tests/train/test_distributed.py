"""Data-parallel training with ``mlx.launch -n 2 --backend ring`` on this machine (loopback), for real.

What a 2-rank run must show: one run (one result.json, one Aim run with world_size 2, per-rank cache
counters), globally exact counts, weights bit-identical to one process running both shards in turn
(``tbptt.shards=2 tbptt.accum_steps=2``), every spill gone; a rank killed mid-epoch takes the other
down within seconds naming it, and a resume with 2 ranks ends bit-identical to an uninterrupted run.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from tcgexp.train import train
from tcgexp.train.checkpoint import CheckpointError
from tcgexp.config import ConfigError
from tests.conftest import free_port
from tests.train.conftest import TINY_TRAIN

MLX_LAUNCH = shutil.which("mlx.launch")
needs_launch = pytest.mark.skipif(MLX_LAUNCH is None, reason="mlx.launch (from the mlx package) is not on PATH")
# a slower run for the kill test: enough optimizer steps to kill one rank mid-epoch
LONGER = ["dataset.rows_per_day=3000", "tbptt.batch_size=32", "trainer.epochs=3"]


def launch_cmd(overrides: list[str], run_dir: Path, ranks: int = 2, via: str = "tcgexp-launch") -> list[str]:
    """`via`: tcgexp-launch (mlx.launch, exiting with the ranks' status), or mlx.launch itself."""
    launcher = [sys.executable, "-m", "tcgexp.train.launcher"] if via == "tcgexp-launch" else [MLX_LAUNCH]
    return [*launcher, "-n", str(ranks), "--backend", "ring", "--starting-port", str(free_port(ranks)),
            sys.executable, "-m", "tcgexp.train", *overrides, f"hydra.run.dir={run_dir}"]


def launch(overrides: list[str], run_dir: Path, timeout: float = 300, ranks: int = 2) -> subprocess.CompletedProcess:
    return subprocess.run(launch_cmd(overrides, run_dir, ranks), capture_output=True, text=True, timeout=timeout)


def single(overrides: list[str], run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tcgexp.train", *overrides, f"hydra.run.dir={run_dir}"],
                          capture_output=True, text=True, timeout=300)


def weights(run_dir: Path, name: str = "latest", file: str = "model.safetensors") -> dict:
    return {k: np.array(v) for k, v in mx.load(str(run_dir / "checkpoints" / name / file)).items()}


def assert_bit_identical(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    differ = [k for k in a if not np.array_equal(a[k], b[k])]
    assert not differ, f"differ: {differ[:5]}"


def rank_failures(output: str) -> list[str]:
    """mlx.launch's own lines about ranks that ended badly (it exits 0 whatever its ranks did)."""
    return [line for line in output.splitlines() if "Node with rank" in line]


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """The tiny training config as command-line overrides, its corpus built once."""
    base = tmp_path_factory.mktemp("dist")
    overrides = [f"dataset.root={base / 'data'}", *TINY_TRAIN]  # (tracking=off)
    built = single([*overrides, "trainer.epochs=1"], base / "warm")
    assert built.returncode == 0, built.stderr[-2000:]
    return base, overrides


@pytest.fixture(scope="module")
def two_ranks(cli):
    base, overrides = cli
    run_dir = base / "two"
    res = launch([*overrides, "tracking=aim", f"tracking.repo={base / 'aim'}"], run_dir)
    return run_dir, res


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
    assert sorted(p.name for p in run_dir.glob("*.json")) == ["job_status.json", "job_status.rank1.json",
                                                              "result.json"]
    assert (run_dir / "train.log").exists() and (run_dir / "train.rank1.log").exists()
    assert not list(run_dir.glob(".cache_spill*")), "a rank's spill dir was left behind"


@pytest.mark.slow
def test_one_aim_run_with_world_size_and_rank_contexts(cli, two_ranks):
    from tcgexp.track.aim_run import open_repo

    base, _ = cli
    run_dir, res = two_ranks
    r = json.loads((run_dir / "result.json").read_text())
    repo = open_repo(base / "aim")
    runs = [run for run in repo.iter_runs() if run.hash == r["aim_hash"]]
    assert len(runs) == 1 and runs[0]["hparams"]["world_size"] == 2
    contexts = {json.dumps(m.context.to_dict(), sort_keys=True) for m in runs[0].metrics()
                if m.name == "cache_train/accesses"}
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
    assert_bit_identical(weights(run_dir, "latest", "optimizer.safetensors"),
                         weights(base / "shards", "latest", "optimizer.safetensors"))
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


def rank_pid(run_dir: Path, rank: int) -> int | None:
    """The pid of `rank` of the launch writing to `run_dir` (its environment says MLX_RANK)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(run_dir).encode() in cmd and b"tcgexp.train" in cmd and f"MLX_RANK={rank}".encode() in env:
            return int(proc.name)
    return None


@pytest.fixture(scope="module")
def longer(cli):
    """The kill and signal tests' config (its own corpus) and its uninterrupted 2-rank run."""
    base, overrides = cli
    overrides = [*overrides, *LONGER, f"dataset.root={base / 'data_long'}"]
    whole = launch(overrides, base / "whole")
    assert whole.returncode == 0 and not rank_failures(whole.stdout + whole.stderr), whole.stderr[-3000:]
    return base, overrides


def start_and_wait_mid_epoch(overrides: list[str], run_dir: Path, via: str = "tcgexp-launch") -> subprocess.Popen:
    """A 2-rank launch, returned once rank 0 has written latest/ a few optimizer steps into epoch 0."""
    proc = subprocess.Popen(launch_cmd(overrides, run_dir, via=via), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    state = run_dir / "checkpoints" / "latest" / "state.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            p = json.loads(state.read_text())["progress"]
            if p["opt_steps"] >= 4 and p["epoch"] == 0:
                return proc
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.01)
    proc.kill()
    pytest.fail("the 2-rank run wrote no latest/ checkpoint in epoch 0 within 120 s")


def resume_matches_whole(base: Path, stopped: Path, name: str) -> None:
    """resume=<stopped run> with 2 ranks ends bit-identical to the uninterrupted 2-rank run."""
    resumed = launch([f"resume={stopped}"], base / name)
    assert resumed.returncode == 0 and not rank_failures(resumed.stdout + resumed.stderr), resumed.stderr[-3000:]
    res = json.loads((base / name / "result.json").read_text())
    assert res["status"] == "completed" and res["world_size"] == 2 and res["resumed_from"]
    assert_bit_identical(weights(base / name), weights(base / "whole"))
    assert_bit_identical(weights(base / name, "latest", "optimizer.safetensors"),
                         weights(base / "whole", "latest", "optimizer.safetensors"))


@pytest.mark.slow
def test_killed_rank_stops_the_other_and_two_rank_resume_is_bit_identical(longer):
    base, overrides = longer
    killed = base / "killed"
    proc = start_and_wait_mid_epoch(overrides, killed)
    pid = rank_pid(killed, 1)
    assert pid is not None and proc.poll() is None
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - t0
    assert took < 30, f"the surviving rank took {took:.0f} s to stop"
    survivor = [line for line in rank_failures(out + err) if "rank 0" in line]
    assert survivor and "code 0" not in survivor[0], out[-2000:] + err[-2000:]
    assert "rank 1 died" in err, err[-3000:]
    r = json.loads((killed / "result.json").read_text())
    assert r["status"] == "failed" and "rank 1 died" in r["error"]
    assert proc.returncode == 1 and "[launch] rank 0 exited with 1, rank 1 left no status (killed?)" in err
    assert not (killed / ".cache_spill").exists(), "the surviving rank left its spill"
    resume_matches_whole(base, killed, "resumed")
    # the killed rank's spill: reclaimed by the next run (its owner lock died with it)
    assert not [p for p in killed.glob(".cache_spill*/**/*") if p.is_file() and p.suffix != ".lock"]


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [[1], [1, 0]], ids=["one-rank", "every-rank"])
def test_sigterm_stops_both_ranks_at_the_same_step_and_resumes_exactly(longer, ranks):
    """A scheduler's SIGTERM may reach one rank first (one-rank: the rank that writes nothing), or
    every rank (SLURM signals every task): the ranks agree through the next all-reduce, both write
    latest/ at the same step, and the run continues bit-identically. mlx.launch then SIGTERMs the
    rank still tidying up: for that rank a first or a second signal, and neither may cut it short."""
    base, overrides = longer
    name = "sigterm_" + "_".join(map(str, ranks))
    stopped = base / name
    proc = start_and_wait_mid_epoch(overrides, stopped)
    for rank in ranks:
        os.kill(rank_pid(stopped, rank), signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    r = json.loads((stopped / "result.json").read_text())
    assert r["status"] == "interrupted" and r["signal"] == "SIGTERM", err[-3000:]
    assert "interrupted by SIGTERM" in err and "code 143" in out + err and proc.returncode == 143
    assert "stopped at once" not in err, err[-3000:]
    assert not list(stopped.glob(".cache_spill*")), "a rank's spill was left behind"
    state = json.loads((stopped / "checkpoints" / "latest" / "state.json").read_text())["progress"]
    assert state["opt_steps"] == r["processed"]["optimizer_steps"]
    resume_matches_whole(base, stopped, f"resumed_after_{name}")


@pytest.mark.slow
def test_resume_with_another_world_size_is_refused_by_name(cli, two_ranks, tmp_path):
    from tests.conftest import compose_config

    base, _ = cli
    run_dir, res = two_ranks
    assert res.returncode == 0, res.stderr[-3000:]
    cfg = compose_config(f"dataset.root={base / 'data'}", *TINY_TRAIN, f"resume={run_dir}")
    with pytest.raises(CheckpointError, match=r"written by 2 rank\(s\).*this run has 1 rank\(s\).*mlx.launch -n 2"):
        train(cfg, run_dir=tmp_path / "again")


@pytest.mark.parametrize("shards,accum,match", [(2, 1, "multiple of 2"), (3, 4, "multiple of 3")],
                         ids=["accum-1", "accum-not-multiple"])
def test_shards_on_one_process_need_whole_turns_per_window(train_cfg, tmp_path, shards, accum, match):
    with pytest.raises(ConfigError, match=match):
        train(train_cfg(f"tbptt.shards={shards}", f"tbptt.accum_steps={accum}"), run_dir=tmp_path / "run")


@pytest.mark.parametrize("hosts,rank,local", [([["127.0.0.1:5000"], ["127.0.0.1:5001"]], 1, 2),
                                               ([["10.0.0.1:5000"], ["10.0.0.2:5000"]], 0, 1)],
                         ids=["two-on-one-host", "one-per-host"])
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
    from tcgexp.train.distributed import World

    rows = [World(rank=r, size=3).signal_row(name) for r, name in enumerate([None, "SIGINT", "SIGTERM"])]
    assert [list(r) for r in rows] == [[0, 0, 0], [0, int(signal.SIGINT), 0], [0, 0, int(signal.SIGTERM)]]
    assert World.first_signal(sum(rows)) == "SIGINT"
    assert World.first_signal(rows[2]) == "SIGTERM" and World.first_signal(rows[0]) is None


# -- a run lives and dies as one: the launcher killed, rank 0 killed, configs that differ, the exit status ----

def launch_pids(run_dir: Path) -> list[int]:
    """Every process of the launch writing to `run_dir` (launchers and ranks)."""
    return [pid for pid in (rank_pid(run_dir, r) for r in (0, 1)) if pid is not None]


def kill_leftovers(run_dir: Path) -> list[int]:
    """SIGKILL what of a launch is still alive (the orphans a test found), returning their pids."""
    left = launch_pids(run_dir)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def launcher_pid(proc: subprocess.Popen, via: str) -> int:
    """The mlx.launch process of a launch started by `proc` (itself, or tcgexp-launch's child)."""
    if via == "mlx.launch":
        return proc.pid
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return int(children[0])


@pytest.mark.slow
@pytest.mark.parametrize("via, target, signum", [
    ("mlx.launch", "launcher", signal.SIGKILL), ("mlx.launch", "launcher", signal.SIGTERM),
    ("tcgexp-launch", "launcher", signal.SIGKILL), ("tcgexp-launch", "tcgexp-launch", signal.SIGKILL),
], ids=["mlx.launch-SIGKILL", "mlx.launch-SIGTERM", "its-mlx.launch-SIGKILL", "tcgexp-launch-SIGKILL"])
def test_killing_the_launcher_stops_every_rank_within_seconds(longer, via, target, signum):
    """MLX's launcher neither forwards a signal nor takes its ranks with it (they trained on as orphans):
    every rank now stops within seconds at the same step, latest/ and result.json written (interrupted,
    SIGHUP: the launcher hung up), and the run resumes bit-identically."""
    base, overrides = longer
    name = f"launcher_{via}_{target}_{signum}".replace(".", "_")
    run_dir = base / name
    proc = start_and_wait_mid_epoch(overrides, run_dir, via=via)
    ranks = [rank_pid(run_dir, r) for r in (0, 1)]
    assert all(ranks), "both ranks run"
    victim = proc.pid if target == "tcgexp-launch" else launcher_pid(proc, via)
    os.kill(victim, signum)
    t0 = time.monotonic()
    try:
        while any(pid_alive(p) for p in ranks) and time.monotonic() - t0 < 60:
            time.sleep(0.2)
        took = time.monotonic() - t0
    finally:
        orphans = kill_leftovers(run_dir)
        proc.kill()
        proc.communicate(timeout=60)
    assert not orphans, f"ranks {orphans} trained on after their launcher was killed"
    assert took < 30, f"the ranks took {took:.0f} s to stop"
    r = json.loads((run_dir / "result.json").read_text())
    assert r["status"] == "interrupted" and r["signal"] == "SIGHUP", r
    said = (run_dir / "train.rank1.log").read_text()
    assert "the launcher (pid" in said and "is gone" in said and "interrupted by SIGHUP" in said
    if via == "mlx.launch" and signum == signal.SIGKILL:
        resume_matches_whole(base, run_dir, f"resumed_{name}")


def pid_alive(pid: int) -> bool:
    from tcgexp.ownership import pid_alive as alive

    if not alive(pid):
        return False
    try:  # a zombie is gone for this purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_rank_0_killed_leaves_a_failed_result_and_a_non_zero_exit(longer):
    """Rank 0 writes result.json; killed, it wrote none and mlx.launch exited 0. The survivor now writes
    a failed one naming rank 0, and tcgexp-launch exits non-zero naming both ranks."""
    base, overrides = longer
    run_dir = base / "rank0_killed"
    proc = start_and_wait_mid_epoch(overrides, run_dir)
    os.kill(rank_pid(run_dir, 0), signal.SIGKILL)
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        kill_leftovers(run_dir)
    r = json.loads((run_dir / "result.json").read_text())
    assert r["status"] == "failed" and "rank 0 died" in r["error"], r
    assert proc.returncode == 1, err[-3000:]
    assert "[launch] rank 0 left no status (killed?), rank 1 exited with 1" in err and "says failed" in err


DIFFER = {  # a value each rank resolves from its own environment (rank 1 gets TCGEXP_RANK1_VALUE)
    "model.hidden": ("model.hidden='${oc.env:TCGEXP_RANK${oc.env:MLX_RANK}_VALUE,16}'", "24"),
    "tbptt.chunk": ("tbptt.chunk='${oc.env:TCGEXP_RANK${oc.env:MLX_RANK}_VALUE,8}'", "4"),
    "seed": ("seed='${oc.env:TCGEXP_RANK${oc.env:MLX_RANK}_VALUE,0}'", "1"),
    "hydra.run.dir": (None, None),
}


@pytest.mark.slow
@pytest.mark.parametrize("key", list(DIFFER))
def test_ranks_whose_configs_differ_refuse_at_start_naming_the_keys(cli, key, tmp_path):
    """Today's failure modes were a raw traceback, a hang at the first all-reduce, or the wrong rank
    blamed; now every rank says, in one line and at once, which keys differ and each rank's value."""
    _, overrides = cli
    override, value = DIFFER[key]
    run_dir = tmp_path / "differ"
    more = [override] if override else ["hydra.run.dir='" + str(tmp_path) + "/r${oc.env:MLX_RANK}'"]
    cmd = launch_cmd([*overrides, *more], run_dir)
    if not override:
        cmd.remove(f"hydra.run.dir={run_dir}")
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=240,
                         env={**os.environ, "TCGEXP_RANK1_VALUE": value or ""})
    took = time.monotonic() - t0
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 2 and all("the ranks composed different configs" in ln for ln in lines), res.stderr[-3000:]
    shown = "run_dir" if key == "hydra.run.dir" else key
    assert all(f"{shown} (rank 0: " in ln and "rank 1: " in ln for ln in lines), lines
    assert "Traceback" not in res.stderr and res.returncode == 1 and took < 120
    assert not list(tmp_path.iterdir()), "a refused run leaves no folder"


def test_the_launchers_exit_status_is_the_ranks():
    """0 only when every rank of the world exited 0; a rank without a status (killed) fails the run."""
    from tcgexp.train.launcher import expected_ranks, verdict

    assert expected_ranks(["-n", "2", "--backend", "ring", "tcgexp-train"]) == 2
    assert expected_ranks(["--hosts", "10.0.0.1,10.0.0.2", "tcgexp-train", "dataset=5d"]) == 2
    assert expected_ranks(["--hostfile", "h.json", "tcgexp-train"]) is None
    ok = {0: {"rank": 0, "size": 2, "code": 0}, 1: {"rank": 1, "size": 2, "code": 0}}
    assert verdict(ok, 2) == (0, None)
    assert verdict({0: ok[0]}, 2)[0] == 1 and "rank 1 left no status" in verdict({0: ok[0]}, 2)[1]
    assert verdict({0: ok[0], 1: {**ok[1], "code": 143}}, None) == (143, "rank 1 exited with 143")
    assert verdict({}, 2)[0] == 1
