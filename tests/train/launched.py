"""What the distributed tests share: launching ranks through ``tcgexp-launch`` or ``mlx.launch``
on loopback, reading a run's weights, finding a launch's processes (tests/train/test_distributed*.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from tests.conftest import free_port

MLX_LAUNCH = shutil.which("mlx.launch")
needs_launch = pytest.mark.skipif(MLX_LAUNCH is None, reason="mlx.launch (from the mlx package) is not on PATH")
# a slower run for the kill test: enough optimizer steps to kill one rank mid-epoch
LONGER = ["dataset.rows_per_day=3000", "tbptt.batch_size=32", "trainer.epochs=3"]


def launch_cmd(overrides: list[str], run_dir: Path, ranks: int = 2, via: str = "tcgexp-launch") -> list[str]:
    """`via`: tcgexp-launch (mlx.launch, exiting with the ranks' status), or mlx.launch itself."""
    launcher = [sys.executable, "-m", "tcgexp.lifecycle.launcher"] if via == "tcgexp-launch" else [MLX_LAUNCH]
    return [
        *launcher,
        "-n",
        str(ranks),
        "--backend",
        "ring",
        "--starting-port",
        str(free_port(ranks)),
        sys.executable,
        "-m",
        "tcgexp.train",
        *overrides,
        f"hydra.run.dir={run_dir}",
    ]


def launch(overrides: list[str], run_dir: Path, timeout: float = 300, ranks: int = 2) -> subprocess.CompletedProcess:
    return subprocess.run(launch_cmd(overrides, run_dir, ranks), capture_output=True, text=True, timeout=timeout)


def single(overrides: list[str], run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tcgexp.train", *overrides, f"hydra.run.dir={run_dir}"],
        capture_output=True,
        text=True,
        timeout=300,
    )


def weights(run_dir: Path, name: str = "latest", file: str = "model.safetensors") -> dict:
    return {k: np.array(v) for k, v in mx.load(str(run_dir / "checkpoints" / name / file)).items()}


def assert_bit_identical(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    differ = [k for k in a if not np.array_equal(a[k], b[k])]
    assert not differ, f"differ: {differ[:5]}"


def rank_failures(output: str) -> list[str]:
    """mlx.launch's own lines about ranks that ended badly (it exits 0 whatever its ranks did)."""
    return [line for line in output.splitlines() if "Node with rank" in line]


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


def start_and_wait_mid_epoch(overrides: list[str], run_dir: Path, via: str = "tcgexp-launch") -> subprocess.Popen:
    """A 2-rank launch, returned once rank 0 has written latest/ a few optimizer steps into epoch 0."""
    proc = subprocess.Popen(
        launch_cmd(overrides, run_dir, via=via), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    state = run_dir / "checkpoints" / "latest" / "state.json"
    deadline = time.monotonic() + 240  # a bound on a loaded machine (CI's took more than 120 s once), not a timing
    seen = None
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            seen = json.loads(state.read_text())["progress"]
            if seen["opt_steps"] >= 4 and seen["epoch"] == 0:
                return proc
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.01)
    proc.kill()
    _, err = proc.communicate()
    pytest.fail(
        f"the 2-rank run wrote no latest/ 4 steps into epoch 0 (last seen: {seen}; exit {proc.returncode}): "
        f"{err[-3000:]}"
    )


def resume_matches_whole(base: Path, stopped: Path, name: str) -> None:
    """resume=<stopped run> with 2 ranks ends bit-identical to the uninterrupted 2-rank run."""
    resumed = launch([f"resume={stopped}"], base / name)
    assert resumed.returncode == 0 and not rank_failures(resumed.stdout + resumed.stderr), resumed.stderr[-3000:]
    res = json.loads((base / name / "result.json").read_text())
    assert res["status"] == "completed" and res["world_size"] == 2 and res["resumed_from"]
    assert_bit_identical(weights(base / name), weights(base / "whole"))
    assert_bit_identical(
        weights(base / name, "latest", "optimizer.safetensors"),
        weights(base / "whole", "latest", "optimizer.safetensors"),
    )
