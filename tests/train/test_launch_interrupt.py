"""A SIGINT sent to ``tcgexp-launch`` alone (not to its process group) reaches each rank once: both stop at the same
step as after their own Ctrl-C, exit 130, and the 2-rank resume ends bit-identical to an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.train.launched import needs_launch, rank_pid, resume_matches_whole, start_and_wait_mid_epoch

pytestmark = [needs_launch, pytest.mark.slow]


def test_a_sigint_to_the_launcher_alone_reaches_each_rank_once_and_resumes_exactly(longer):
    base, overrides = longer
    stopped = base / "sigint_launcher"
    proc = start_and_wait_mid_epoch(overrides, stopped)
    ranks = [rank_pid(stopped, r) for r in (0, 1)]
    assert None not in ranks and os.getpgid(proc.pid) != os.getpgid(ranks[0])  # the ranks: another group
    os.kill(proc.pid, signal.SIGINT)  # the launcher alone, as `kill -INT <pid>` does
    _out, err = proc.communicate(timeout=90)
    r = json.loads((stopped / "result.json").read_text())
    assert r["status"] == "interrupted" and r["signal"] == "SIGINT", err[-3000:]
    assert proc.returncode == 130, (proc.returncode, err[-3000:])
    assert "stopped at once" not in err, "a rank got the SIGINT twice: " + err[-3000:]
    state = json.loads((stopped / "checkpoints" / "latest" / "state.json").read_text())["progress"]
    assert state["opt_steps"] == r["processed"]["optimizer_steps"]
    resume_matches_whole(base, stopped, "resumed_after_sigint_launcher")


def test_ranks_on_hosts_ssh_cannot_reach_are_named_with_ssh_s_own_reason(tmp_path):
    """mlx.launch runs ssh with LogLevel=QUIET: a host ssh cannot reach was only "no rank reported its status"."""
    import subprocess
    import sys

    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.lifecycle.launcher",
            "--hosts",
            "127.0.0.2,127.0.0.3",
            "--backend",
            "ring",
            sys.executable,
            "-m",
            "tcgexp.train",
            "tracking=off",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("[launch] no rank started: ssh cannot reach 127.0.0.2: ") and "127.0.0.3: " in last, last
    assert "ssh <host> true" in last and not (tmp_path / "run").exists()
