"""SIGTERM during the real game's demo build (``python -m tcgexp.data dataset=cabt_demo``): one line saying where
it stopped, what is kept and the command that continues, exit 143, no traceback and no worker pool left behind
(Python's "leaked semaphore objects" warning); the same command again builds the day (extra cabt)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import CABT_DEMO, CABT_DEMO_RATINGS

pytestmark = pytest.mark.extra("cabt")
ROOT = Path(__file__).resolve().parents[2]


def data(root: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tcgexp.data", f"dataset.root={root}", *CABT_DEMO, *overrides],
        cwd=root.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_during_the_demo_self_play_says_what_is_kept_and_exits_143(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    (root / "ratings.json").write_text(json.dumps({"games_per_pair": 0, "ratings": CABT_DEMO_RATINGS}))
    proc = data(root, "dataset.demo.episodes_per_day=400")  # long enough a self-play to stop in its middle
    deadline = time.monotonic() + 60
    while not list((root / "incoming").glob("*/d*.json")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)  # the first chunk of games written: the self-play is under way
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    said = [line for line in (out + err).splitlines() if line.strip()]
    assert proc.returncode == 143, (out, err)
    assert said == [
        f"[data] stopped by SIGTERM during the demo day {day(root)}'s self-play: the days built so far are kept "
        "(0 of 1), the one in progress starts again; run the same command again to continue"
    ], said
    assert (root / "ratings.json").exists() and not list((root / "replays").glob("*/*.zip"))
    again = data(root)  # the same root continues (a smaller day, for time): the stopped day's games start again
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, (out, err)
    assert "built" in out and "stopped" not in out + err


def day(root: Path) -> str:
    return next((root / "incoming").iterdir()).name
