"""hydra/launcher=ray (hydra-ray-launcher): a sweep on a local Ray (ray.init in the launcher), and on a Ray
cluster started with `ray start --head` whose jobs all track to one real `aim server`.

Everything stays on loopback: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is Ray's switch for a one-machine
cluster (without it Ray swaps 127.0.0.1 for the machine's outward address), and RAY_AUTH_MODE=token has
the launcher present the token (~/.ray/auth_token) that `ray start` requires.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tcgexp.track.aim_repo import open_repo
from tests.conftest import free_port
from tests.launch.conftest import SMOKE, check_sweep, job_env, multirun

pytestmark = [pytest.mark.slow, pytest.mark.extra("ray")]
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture
def loopback_ray(monkeypatch):
    for key, value in LOOPBACK.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def ray_head(loopback_ray):
    """`ray start --head --block` on 127.0.0.1 (2 CPUs); yields its address. Its workers import this
    checkout's tcgexp (job_env's PYTHONPATH, inherited from the raylet)."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    # `ray start` in token mode wants the token to exist (~/.ray/auth_token; a new machine has none)
    subprocess.run(["ray", "get-auth-token", "--generate"], env=job_env(), capture_output=True, check=True)
    head = subprocess.Popen(
        [
            "ray",
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        env=job_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # its own process group: GCS, raylet, workers, all ours
    try:
        deadline = time.monotonic() + 120
        while (
            subprocess.run(["ray", "status", f"--address={address}"], env=job_env(), capture_output=True).returncode
            != 0
        ):
            assert head.poll() is None and time.monotonic() < deadline, head.communicate()[1][-3000:]
            time.sleep(1)
        yield address
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:  # GCS and raylet may outlive --block's own shutdown: the rest of the group goes too
            os.killpg(head.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        head.wait(timeout=20)


def test_a_two_job_sweep_runs_on_a_local_ray(tmp_path, loopback_ray):
    # address=local: the launcher starts a Ray of its own (ray.init); null would join the last cluster that
    # `ray start` left on this machine (/tmp/ray/ray_current_cluster), even a stopped one
    res = multirun(
        tmp_path,
        *SMOKE,
        f"tracking.repo={tmp_path / 'aim'}",
        "hydra/launcher=ray",
        "hydra.launcher.ray.init.address=local",
        "+hydra.launcher.ray.init.num_cpus=2",
        "+hydra.launcher.ray.init.include_dashboard=false",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    check_sweep(tmp_path / "sweep", tmp_path / "aim", jobs=2)


def test_a_halving_sweep_runs_on_a_local_ray(tmp_path, loopback_ray):
    """hydra/sweeper=halving with the Ray launcher: batches of ray.init.num_cpus jobs, the promotion continues."""
    import json

    from tests.sweep.conftest import SPACE, TRIAL

    res = multirun(
        tmp_path,
        "hydra/sweeper=halving",
        *TRIAL,
        *SPACE,
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.min_epochs=1",
        "hydra.sweeper.max_epochs=3",
        "tracking=off",
        "hydra/launcher=ray",
        "hydra.launcher.ray.init.address=local",
        "+hydra.launcher.ray.init.num_cpus=2",
        "+hydra.launcher.ray.init.include_dashboard=false",
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Ray Launcher is launching 2 jobs" in res.stdout + res.stderr  # the batch: num_cpus jobs
    doc = json.loads((tmp_path / "sweep" / "trials.json").read_text())
    assert sorted(t["state"] for t in doc["trials"]) == ["complete", "pruned", "pruned"]
    [done] = [t for t in doc["trials"] if t["state"] == "complete"]
    assert json.loads((tmp_path / "sweep" / str(done["number"]) / "result.json").read_text())["resumed_from"]


def test_a_ray_cluster_sweep_tracks_to_one_aim_server(tmp_path, ray_head, aim_server):
    repo, port, _ = aim_server
    # object_store_memory=null: the plugin presets it, and Ray refuses it when joining a running cluster
    res = multirun(
        tmp_path,
        *SMOKE,
        "tracking=aim_remote",
        f"tracking.uri=aim://127.0.0.1:{port}",
        "hydra/launcher=ray",
        f"hydra.launcher.ray.init.address={ray_head}",
        "+hydra.launcher.ray.init.object_store_memory=null",
        # a task per job's 2 CPUs: one job at a time, so on 2 cores the server keeps up with the
        # job's closing flush (which tcgexp bounds at 10 s without progress)
        "+hydra.launcher.ray.remote.num_cpus=2",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "[tracking]" not in res.stderr, res.stderr[-3000:]
    check_sweep(tmp_path / "sweep", repo, jobs=2)
    assert {r["status"] for r in open_repo(repo).iter_runs()} == {"completed"}
