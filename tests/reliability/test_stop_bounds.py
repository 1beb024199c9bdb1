"""Every signal honoured within its bound, whatever the run waits on: a store frozen mid-run (moto's own server,
SIGSTOPped once training reads from it) holds the loader's threads, and still the first SIGTERM ends the run
within 10 s (its latest/ kept: the run resumes from it once the store answers again) and a second within 2 s;
either way result.json says the run was interrupted, by which signal, with the line it said."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tcgexp.app import compose
from tcgexp.config import build

pytest.importorskip("moto.server", reason="moto[server] (the test extra) is not installed")

from tcgexp.bench.loopback_s3 import moto_process
from tcgexp.data.publish import publish

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
DAYS = [
    "dataset.rows_per_day=3000",
    "dataset.row_group_rows=128",
    "dataset.days=2",
    "dataset.episodes_per_shard=2",
    "dataset.workers=1",
]
RUN = [
    *DAYS,
    "tracking=off",
    "tbptt.batch_size=64",
    "model.hidden=16",
    "trainer.epochs=2",
    "checkpoint.latest_every_steps=2",
]


def train_cmd(tmp_path: Path, *more: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tcgexp.train",
        "dataset.root=s3://tcgexp/frozen",
        *RUN,
        f"dataset.storage.tier_dir={tmp_path / 'tier'}",
        *more,
    ]


@pytest.mark.parametrize("second", [False, True], ids=["one-sigterm", "two-sigterms"])
def test_signals_end_a_run_waiting_on_a_frozen_store_within_their_bounds(tmp_path, second):
    local = build(compose(f"dataset.root={tmp_path / 'local'}", *DAYS).dataset)
    local.build()
    run_dir = tmp_path / "run"
    with moto_process() as (_endpoint, server):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the AWS_* variables pointing at moto, set by moto_process
        publish(local, "s3://tcgexp/frozen", None)
        proc = subprocess.Popen(
            train_cmd(tmp_path, f"hydra.run.dir={run_dir}"),
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        latest = run_dir / "checkpoints" / "latest" / "state.json"
        deadline = time.monotonic() + 180
        while not latest.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
            time.sleep(0.05)
        os.kill(server.pid, signal.SIGSTOP)  # mid-run: the loader's threads wait on it from here
        time.sleep(2)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        if second:
            time.sleep(0.5)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=120)[0]
        took = time.monotonic() - t0
        assert proc.returncode == 143, out[-3000:]
        assert took < (2 if second else 10 + 2), f"{took:.1f} s after the {'second' if second else 'first'} SIGTERM"
        last = out.strip().splitlines()[-1]
        assert "SIGTERM" in last and f"resume={run_dir}" in last and "Traceback" not in out, out[-3000:]
        # the ending is on disk too (it left none: the trainer writes result.json only after a finished step)
        record = json.loads((run_dir / "result.json").read_text())
        assert record["status"] == "interrupted" and record["signal"] == "SIGTERM", record
        assert record["error"] in last, (record, last)
        os.kill(server.pid, signal.SIGCONT)  # the store answers again: the kept latest/ resumes
        resumed = subprocess.run(
            train_cmd(tmp_path, f"resume={run_dir}", f"hydra.run.dir={tmp_path / 'resumed'}"),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((tmp_path / "resumed" / "result.json").read_text())["status"] == "completed"
