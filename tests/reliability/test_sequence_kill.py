"""SIGKILL at any step of the daily sequence, then the same command: the same canonical model, bit for bit.

A child process runs ``tcgexp-sequence`` (its real entry point, with the command line a user types) with one
function patched to SIGKILL itself at one point of the second day's phase: while the day is built, while it
trains, while its rolling checkpoint is written, during the copy to the canonical model, while the sequence's
state is written, and during cleanup. The same command again, unpatched, must end with the canonical weights an
unkilled sequence ends with, say which days it skipped, and leave no half-copied canonical model. One point runs
in the default tier; all six in the slow tier.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sequence.test_sequence import TRAIN as SEQUENCE_TRAIN

DAYS = "sequence.days=[2026-07-27,2026-07-28,2026-07-29]"
TRAIN = [*SEQUENCE_TRAIN, "sequence.cleanup=true"]

# what the child patches to kill itself: (module, attribute, the call at which it dies), each in day 2's phase
POINTS = {
    "build": ("tcgexp.data.build", "finish_day", 2),  # day 2's Parquet written, its manifest not yet
    "training": ("tcgexp.train.trainer.Trainer", "on_step", 30),  # day 2's training (day 1 has 24 steps)
    # day 2's latest/ half-written (day 1 writes 8 checkpoints of 3 tensor files: call 29 is inside day 2's)
    "rolling-checkpoint": ("mlx.core", "save_safetensors", 29),
    "canonical-copy": ("tcgexp.sequence.canonical", "replace", 2),  # day 2's copy whole, not yet renamed in
    "state": ("tcgexp.sequence.state", "write_json_atomic", 3),  # day 2's record being written
    "cleanup": ("tcgexp.data.corpus.Corpus", "clean_derived", 2),  # day 2 recorded, its encoded day deleting
}
DEFAULT_TIER = "canonical-copy"

CHILD = """
import importlib, os, signal, sys
from tcgexp.learn.blas import setup
setup()  # MKL before the patched module loads MLX, as the entry point does
module, attr, at = sys.argv[1], sys.argv[2], int(sys.argv[3])
sig = getattr(signal, os.environ.get("KILL_WITH", "SIGKILL"))
*path, name = (module + "." + attr).split(".")
owner = None
for i in range(len(path), 0, -1):  # the longest importable prefix, then attributes (a class's method)
    try:
        owner = importlib.import_module(".".join(path[:i]))
    except ModuleNotFoundError:
        continue
    for part in path[i:]:
        owner = getattr(owner, part)
    break
real, calls = getattr(owner, name), [0]

def dies(*args, **kwargs):
    calls[0] += 1
    if calls[0] == at:
        os.kill(os.getpid(), sig)
    return real(*args, **kwargs)

setattr(owner, name, dies)
sys.argv = ["tcgexp-sequence", *sys.argv[4:]]
from tcgexp.cli.sequence import main
main()
"""


def command(tmp: Path) -> list[str]:
    return [DAYS, f"sequence.folder={tmp / 'seq'}", f"dataset.root={tmp / 'data'}", *TRAIN]


def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``tcgexp-sequence`` as a user runs it, in `cwd`."""
    return subprocess.run([sys.executable, "-m", "tcgexp.cli.sequence", *args], cwd=cwd, capture_output=True, text=True)


def sequence(tmp: Path) -> subprocess.CompletedProcess:
    return cli(command(tmp), tmp)


def canonical_sha(tmp: Path) -> str:
    return hashlib.sha256((tmp / "seq" / "canonical" / "model.safetensors").read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def unkilled(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("unkilled")
    done = sequence(tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    return canonical_sha(tmp)


def killed_then_again(point: str, tmp: Path, unkilled: str) -> None:
    module, attr, at = POINTS[point]
    child = subprocess.run(
        [sys.executable, "-c", CHILD, module, attr, str(at), *command(tmp)], cwd=tmp, capture_output=True, text=True
    )
    assert child.returncode == -signal.SIGKILL, f"the child was not killed at {point}: {child.stderr[-3000:]}"
    again = sequence(tmp)
    assert again.returncode == 0, again.stderr[-3000:]
    said = again.stdout
    assert "[sequence] 2026-07-27: recorded already" in said, said[-3000:]
    if point in ("state", "canonical-copy", "rolling-checkpoint", "training", "build"):
        assert "[sequence] 2026-07-28 (phase 2 of 3)" in said, "day 2 was not recorded: it is done again"
    else:
        assert "[sequence] 2026-07-28: recorded already" in said
    assert canonical_sha(tmp) == unkilled, f"killed at {point}: the canonical model differs from an unkilled run's"
    assert not (tmp / "seq" / ".canonical.tmp").exists() and not (tmp / "seq" / ".canonical.old").exists()
    phases = json.loads((tmp / "seq" / "sequence.json").read_text())["phases"]
    assert [p["day"] for p in phases] == ["2026-07-27", "2026-07-28", "2026-07-29"]
    assert all(p.get("cleanup_done") for p in phases), "every recorded day's cleanup finished"


def test_killed_during_the_canonical_copy_ends_the_same(tmp_path, unkilled):
    killed_then_again(DEFAULT_TIER, tmp_path, unkilled)


@pytest.mark.slow
@pytest.mark.parametrize("point", [p for p in POINTS if p != DEFAULT_TIER])
def test_killed_at_any_step_ends_the_same(point, tmp_path, unkilled):
    killed_then_again(point, tmp_path, unkilled)


def test_sigterm_stops_it_in_one_line_and_the_same_command_goes_on(tmp_path, unkilled):
    import os

    module, attr, at = POINTS["training"]
    child = subprocess.run(
        [sys.executable, "-c", CHILD, module, attr, str(at), *command(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "KILL_WITH": "SIGTERM"},
    )
    assert child.returncode == 128 + signal.SIGTERM, child.stderr[-3000:]
    lines = [line for line in child.stderr.splitlines() if "interrupted by SIGTERM" in line]
    assert len(lines) == 1 and "Traceback" not in child.stderr, child.stderr[-3000:]
    again = sequence(tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "[sequence] 2026-07-28: continuing its stopped training" in again.stdout
    assert canonical_sha(tmp_path) == unkilled


# -- the real game's imported days: the phase imports its day first (sequence.source) ------------------------------
REAL_DAYS = "sequence.days=[2026-08-01,2026-08-02]"


@pytest.fixture(scope="module")
def day_folders(tmp_path_factory) -> Path:
    """Two days of the real game's episodes, as Kaggle's harness writes them (the demo's teachers playing)."""
    pytest.importorskip("kaggle_environments", reason="the real game's engine: the cabt extra")
    from tcgexp.games.cabt import demo

    db, decks = demo._db()
    root = tmp_path_factory.mktemp("episodes")
    for d, day in enumerate(("2026-08-01", "2026-08-02")):
        (root / day).mkdir()
        for k in range(5):
            ep = demo.play("expert-psychic", "club-metal", 100 * d + k, bo=1, db=db, decks=decks)
            ep["id"] = f"{day}-{k}"
            (root / day / f"e{k}.json").write_text(json.dumps(ep))
    return root


def real_command(tmp: Path, episodes: Path) -> list[str]:
    return [
        REAL_DAYS,
        "dataset=cabt",
        f"sequence.source={episodes}",
        f"sequence.folder={tmp / 'seq'}",
        f"dataset.root={tmp / 'data'}",
        "dataset.episodes_per_shard=2",
        "model.hidden=16",
        "trainer.epochs=1",
        "tracking=off",
        "eval.games=10",
    ]


@pytest.mark.extra("cabt")
def test_killed_during_a_days_import_ends_the_same(day_folders, tmp_path):
    whole = tmp_path / "whole"
    whole.mkdir()
    done = cli(real_command(whole, day_folders), whole)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[sequence] 2026-08-02: imported" in done.stdout and "5 episodes filed" in done.stdout
    killed = tmp_path / "killed"
    killed.mkdir()
    # day 1 files 5 episodes; the 8th is day 2's third, its ZIP still a .tmp
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            "tcgexp.data.episode_zips",
            "NewZip.add",
            "8",
            *real_command(killed, day_folders),
        ],
        cwd=killed,
        capture_output=True,
        text=True,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
    again = cli(real_command(killed, day_folders), killed)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "[sequence] 2026-08-01: recorded already" in again.stdout
    assert canonical_sha(killed) == canonical_sha(whole)
    phases = json.loads((killed / "seq" / "sequence.json").read_text())["phases"]
    assert all(not t["errors"] for p in phases for t in p["eval"].values())
