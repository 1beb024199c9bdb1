"""A 2-rank run stops, resumes and dies as one: a rank killed mid-epoch takes the other down within
seconds naming it, SIGTERM stops both at the same step, and a 2-rank resume ends bit-identical to an
uninterrupted run; the launcher killed stops every rank, rank 0 killed leaves a failed result, ranks
whose configs differ refuse at start, and the launcher exits with the ranks' status.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.train.launched import (
    launch_cmd,
    needs_launch,
    rank_failures,
    rank_pid,
    resume_matches_whole,
    start_and_wait_mid_epoch,
)

pytestmark = needs_launch


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
@pytest.mark.parametrize(
    "via, target, signum",
    [
        ("mlx.launch", "launcher", signal.SIGKILL),
        ("mlx.launch", "launcher", signal.SIGTERM),
        ("tcgexp-launch", "launcher", signal.SIGKILL),
        ("tcgexp-launch", "tcgexp-launch", signal.SIGKILL),
    ],
    ids=["mlx.launch-SIGKILL", "mlx.launch-SIGTERM", "its-mlx.launch-SIGKILL", "tcgexp-launch-SIGKILL"],
)
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
        _out, err = proc.communicate(timeout=90)
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
    res = subprocess.run(
        cmd, capture_output=True, text=True, timeout=240, env={**os.environ, "TCGEXP_RANK1_VALUE": value or ""}
    )
    took = time.monotonic() - t0
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 2 and all("the ranks composed different configs" in ln for ln in lines), res.stderr[-3000:]
    shown = "run_dir" if key == "hydra.run.dir" else key
    assert all(f"{shown} (rank 0: " in ln and "rank 1: " in ln for ln in lines), lines
    assert "Traceback" not in res.stderr and res.returncode == 1 and took < 120
    # the rank that refused second is SIGTERMed by mlx.launch as it leaves: still its own status
    assert "[launch] rank 0 exited with 1, rank 1 exited with 1" in res.stderr, res.stderr[-3000:]
    assert not list(tmp_path.iterdir()), "a refused run leaves no folder"


def test_the_launchers_exit_status_is_the_ranks():
    """0 only when every rank of the world exited 0; a rank without a status (killed) fails the run."""
    from tcgexp.lifecycle.launcher import expected_ranks, verdict

    assert expected_ranks(["-n", "2", "--backend", "ring", "tcgexp-train"]) == 2
    assert expected_ranks(["--hosts", "10.0.0.1,10.0.0.2", "tcgexp-train", "dataset=5d"]) == 2
    assert expected_ranks(["--hostfile", "h.json", "tcgexp-train"]) is None
    ok = {0: {"rank": 0, "size": 2, "code": 0}, 1: {"rank": 1, "size": 2, "code": 0}}
    assert verdict(ok, 2) == (0, None)
    assert verdict({0: ok[0]}, 2)[0] == 1 and "rank 1 left no status" in verdict({0: ok[0]}, 2)[1]
    assert verdict({0: ok[0], 1: {**ok[1], "code": 143}}, None) == (143, "rank 1 exited with 143")
    assert verdict({}, 2)[0] == 1
