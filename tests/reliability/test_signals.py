"""SIGTERM, Ctrl-C and friends: the run stops at a safe point, resumable, bit-identical after resume=.

The signal is sent by the child process to itself from inside its loader transform (called once per
microbatch), so it lands mid-window at a known point, with no timing race; the CLI path is the real
one (``tcgexp.cli.train.main``, through Hydra).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tcgexp.lifecycle import checkpoint as ckpt
from tcgexp.lifecycle.ckpt_files import find
from tcgexp.train import train
from tests.conftest import assert_continued, compose_config
from tests.reliability.test_kill import ROOT, weights
from tests.train.conftest import TINY_TRAIN

# accum_steps=3: a signal mid-window must not lose the half-accumulated gradients
OVERRIDES = [*TINY_TRAIN, "checkpoint.latest_every_steps=2", "tbptt.accum_steps=3"]

# argv: signal-at (transform call), second-signal ("save": again inside the next checkpoint write, "close": as the
# loader's pool shuts down, or "-"),
# signal name, then the CLI's arguments
CHILD = textwrap.dedent("""
    import os, signal, sys
    from tcgexp.api import setup; setup()  # MKL before mlx.core (imported below), as every entry point does
    from tcgexp.train import train
    import tcgexp.train.run as composition  # where the run's batch transform is made
    import tcgexp.lifecycle.checkpoint as ckpt
    at, second, name, *argv = sys.argv[1:]
    sig = getattr(signal, name)
    calls = {"n": 0}
    real = composition.prepare
    def prepare(*a, **k):
        calls["n"] += 1
        if calls["n"] == int(at):
            os.kill(os.getpid(), sig)
        return real(*a, **k)
    composition.prepare = prepare
    if second == "save":  # (checkpoints are written by a thread of their own: ckpt.write)
        real_write = ckpt.write
        def write(path, snap):
            if calls["n"] >= int(at):
                os.kill(os.getpid(), sig)
            return real_write(path, snap)
        ckpt.write = write
    if second == "close":  # again as the loader's worker pool shuts down (where the loop's end closes the loader)
        import concurrent.futures
        real_shutdown = concurrent.futures.ThreadPoolExecutor.shutdown
        def shutdown(self, *a, **k):
            if calls["n"] >= int(at) and not calls.get("again"):
                calls["again"] = True
                os.kill(os.getpid(), sig)
            return real_shutdown(self, *a, **k)
        concurrent.futures.ThreadPoolExecutor.shutdown = shutdown
    from tcgexp.cli.train import main
    sys.argv = ["tcgexp.train", *argv]
    main()
""")


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    root = tmp_path_factory.mktemp("signals")
    result = train(compose_config(f"dataset.root={root / 'data'}", *OVERRIDES), run_dir=root / "base")
    return root, weights(root / "base"), result


def cli(root, run_dir, *more) -> list[str]:
    return [f"dataset.root={root / 'data'}", *OVERRIDES, *more, f"hydra.run.dir={run_dir}"]


def signalled(root, run_dir, *more, at=20, second="-", name="SIGTERM"):
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(at), second, name, *cli(root, run_dir, *more)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def resume(root, run_dir, new_dir, *more):
    """resume=<run_dir> into new_dir; it must continue the checkpoint there, not start again."""
    done = ckpt.read_state(find(str(run_dir)))["progress"]["opt_steps"]
    res = subprocess.run(
        [sys.executable, "-m", "tcgexp.train", *cli(root, new_dir, *more), f"resume={run_dir}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads((new_dir / "result.json").read_text())
    assert_continued(result, done)
    return result


def strict_json(path):
    def refuse(constant):
        raise ValueError(f"{path} holds {constant}: not strict JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr and len(lines) == 1, stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("tracking", ["off", "aim"])
def test_sigterm_then_resume_is_bit_identical(baseline, tmp_path, tracking):
    root, want, full = baseline
    aim = [f"tracking={tracking}", f"tracking.repo={tmp_path / 'aim'}"] if tracking == "aim" else []
    run_dir = tmp_path / "a"
    res = signalled(root, run_dir, *aim)
    assert res.returncode == 128 + signal.SIGTERM, res.stderr[-3000:]
    line = one_line(res.stderr)
    assert line.startswith("[train] interrupted by SIGTERM") and f"resume={run_dir}" in line
    result = strict_json(run_dir / "result.json")
    assert result["status"] == "interrupted" and result["signal"] == "SIGTERM"
    steps = result["processed"]["optimizer_steps"]
    assert 0 < steps < full["processed"]["optimizer_steps"]
    state = json.loads((run_dir / "checkpoints" / "latest" / "state.json").read_text())
    assert state["progress"]["opt_steps"] == steps, "latest/ is where the run stopped, not 2 steps before"
    assert state["progress"]["microbatches"] % 3 == 0 or state["progress"]["position"] == 0, "at a window boundary"
    assert not (run_dir / ".cache_spill").exists()
    if tracking == "aim":
        from tcgexp.track.aim_repo import open_repo

        [run] = list(open_repo(tmp_path / "aim").iter_runs())
        assert run["status"] == "interrupted" and not run.active
    done = resume(root, run_dir, tmp_path / "b", *aim)
    assert done["status"] == "completed"
    assert done["processed"]["optimizer_steps"] == full["processed"]["optimizer_steps"]
    assert weights(tmp_path / "b") == want
    if tracking == "aim":
        [run] = list(open_repo(tmp_path / "aim").iter_runs())  # the same Aim run continued
        assert run["status"] == "completed" and run.hash == done["aim_hash"]


def test_signal_during_validation_stops_there_and_resumes_identically(baseline, tmp_path):
    root, want, full = baseline
    per_epoch = full["planned"]["per_epoch_microbatches"][0]
    run_dir = tmp_path / "a"
    # transform calls: 1 precision check, then epoch 0's microbatches, then validation's
    res = signalled(root, run_dir, at=1 + per_epoch + 2)
    assert res.returncode == 128 + signal.SIGTERM, res.stderr[-3000:]
    result = strict_json(run_dir / "result.json")
    assert result["status"] == "interrupted" and result["history"] == []  # validation abandoned, not recorded
    resume(root, run_dir, tmp_path / "b")
    assert weights(tmp_path / "b") == want


def test_a_second_signal_stops_at_once(baseline, tmp_path):
    root, want, _ = baseline
    run_dir = tmp_path / "a"
    res = signalled(root, run_dir, second="save")  # SIGTERM, then another inside the latest/ write it starts
    assert res.returncode == 128 + signal.SIGTERM, res.stderr[-3000:]
    assert one_line(res.stderr).startswith("[train] stopped at once by a second SIGTERM")
    record = json.loads((run_dir / "result.json").read_text())  # every ending leaves its record (none before)
    assert record["status"] == "interrupted" and record["signal"] == "SIGTERM", record
    assert record["error"].startswith("stopped at once by a second SIGTERM"), record
    assert not (run_dir / ".cache_spill").exists()
    resume(root, run_dir, tmp_path / "b")  # from the last periodic latest/
    assert weights(tmp_path / "b") == want


def test_a_second_signal_as_the_loader_closes_stops_at_once_in_one_line(baseline, tmp_path):
    """The loop closes its loader where it ends. Left to the collector, the loader's finally (shutting its
    worker down) ran inside a finalizer, where a second signal's stop is printed as "Exception ignored" with a
    traceback and lost (CI once saw it when the signal landed there by chance)."""
    root, _, _ = baseline
    run_dir = tmp_path / "a"
    res = signalled(root, run_dir, second="close")
    assert res.returncode == 128 + signal.SIGTERM, res.stderr[-3000:]
    assert one_line(res.stderr).startswith("[train] stopped at once by a second SIGTERM")
    record = json.loads((run_dir / "result.json").read_text())
    assert record["status"] == "interrupted" and record["error"].startswith("stopped at once by a second SIGTERM")
    assert not (run_dir / ".cache_spill").exists()


def test_ctrl_c_prints_one_line_and_exits_130(baseline, tmp_path):
    root, _, _ = baseline
    res = signalled(root, tmp_path / "a", name="SIGINT")
    assert res.returncode == 130, res.stderr[-3000:]
    assert one_line(res.stderr).startswith("[train] interrupted by SIGINT")


def test_handlers_are_installed_for_the_run_and_restored_after():
    from tcgexp.lifecycle.signals import StopSignals

    def theirs(signum, frame):  # e.g. submitit's requeue handler on SIGUSR2
        pass

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)}
    signal.signal(signal.SIGUSR2, theirs)
    try:
        with StopSignals() as stop:
            assert signal.getsignal(signal.SIGUSR2) is theirs, "a claimed SIGUSR2 is left to its owner"
            assert signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None)
            os.kill(os.getpid(), signal.SIGUSR1)  # a scheduler's warning signal: like SIGTERM
            assert stop.requested == "SIGUSR1"
        assert signal.getsignal(signal.SIGUSR2) is theirs
        assert {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)} == {
            s: before[s] for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
        }
    finally:
        signal.signal(signal.SIGUSR2, before[signal.SIGUSR2])
    with StopSignals() as stop:  # unclaimed SIGUSR2 (submitit's handler not installed): like SIGTERM
        os.kill(os.getpid(), signal.SIGUSR2)
        assert stop.requested == "SIGUSR2"


def test_the_sweep_report_shows_an_interrupted_job(tmp_path):
    from tcgexp.report.summary import write_summary

    job = tmp_path / "sweep" / "0"
    job.mkdir(parents=True)
    (job / "result.json").write_text(
        json.dumps({"status": "interrupted", "error": None, "final": None, "best": {"val_loss": None}, "cache": {}})
    )
    [row] = write_summary(tmp_path / "sweep")
    assert row["status"] == "INTERRUPTED"
    assert "1 interrupted" in (tmp_path / "sweep" / "summary.md").read_text()


# argv: how the rank's outcome is decided: "run" (its run is over: the run's handlers come and go) or
# "said" (an error said at once, before any run: ranks whose configs differ)
DECIDED = textwrap.dedent("""
    import os, signal, sys, time
    from tcgexp.console import say_now
    from tcgexp.lifecycle.rank_status import reports_exit
    from tcgexp.lifecycle.signals import StopSignals

    @reports_exit
    def main():
        if sys.argv[1] == "run":
            with StopSignals():
                pass  # the run: its outcome decided and written inside, as train() does
        else:
            say_now(ValueError("the ranks composed different configs"))
        print("signalled", time.time(), flush=True)
        os.kill(os.getpid(), signal.SIGTERM)  # mlx.launch's SIGTERM, landing in the rank's last milliseconds
        if sys.argv[2] == "hang":  # the last tidying hangs, and more SIGTERMs come: the first one's bound holds
            time.sleep(3)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(60)
        print("alarm", signal.alarm(0), flush=True)  # the bound on the rest of the exit, armed by the signal
        raise SystemExit(1)  # this rank's own outcome: a peer died, or its config differs

    main()
""")


@pytest.mark.parametrize("decided", ["run", "said"], ids=["after-the-run", "after-its-error-said"])
@pytest.mark.parametrize("launched", [True, False], ids=["launched-rank", "plain-run"])
def test_a_sigterm_once_the_outcome_is_decided_does_not_cut_a_launched_ranks_exit_status(tmp_path, launched, decided):
    """mlx.launch SIGTERMs every other rank the moment one exits non-zero; on a loaded machine that can land
    after a rank's outcome is decided but before it has written its exit status (CI saw tcgexp-launch report
    "rank 0 left no status (killed?)" for a rank that exited 1). A launched rank notes it and leaves with
    its own code, within a bound; a plain run keeps Python's default (the signal ends it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLX_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")}
    env["TCGEXP_RANK_STATUS"] = str(tmp_path)
    if launched:
        env["MLX_RANK"] = "0"
    res = subprocess.run(
        [sys.executable, "-c", DECIDED, decided, "-"], env=env, capture_output=True, text=True, timeout=120
    )
    if launched:
        assert res.returncode == 1, res.stderr[-3000:]
        assert json.loads((tmp_path / "rank0.json").read_text())["code"] == 1
        [left] = [int(line.split()[1]) for line in res.stdout.splitlines() if line.startswith("alarm")]
        assert 0 < left <= 20, "a hang after the signal is bounded"
    else:
        assert res.returncode == -signal.SIGTERM and not list(tmp_path.iterdir())


@pytest.mark.slow
def test_a_launched_rank_that_hangs_after_its_outcome_still_ends_within_the_bound(tmp_path):
    """The noted SIGTERM arms SIGALRM (tcgexp.launch.KEEP_EXIT_S, 20 s): a rank hung in its last tidying
    still ends, and a second SIGTERM does not postpone it."""
    from tcgexp.launch import KEEP_EXIT_S

    env = {k: v for k, v in os.environ.items() if k not in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")}
    env.update(TCGEXP_RANK_STATUS=str(tmp_path), MLX_RANK="0")
    res = subprocess.run(
        [sys.executable, "-c", DECIDED, "run", "hang"], env=env, capture_output=True, text=True, timeout=120
    )
    took = time.time() - float(res.stdout.split()[1])  # from the first SIGTERM (the second came 3 s later)
    assert res.returncode == -signal.SIGALRM, res.stderr[-3000:]
    assert KEEP_EXIT_S - 1 <= took < KEEP_EXIT_S + 2.5, took
