"""The trainer on the real game from the command line (the cabt extra; slow): the default command from a clean
folder, a sweep (``--multirun``) and a halving sweep on the demo corpus, whose promoted trial ends bit-identical
to training straight."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tcgexp.sweep.space import overrides_of
from tcgexp.train import train
from tests.conftest import CABT_DEMO, compose_config
from tests.reliability.test_kill import weights
from tests.sweep.conftest import ROOT, job_env, trials
from tests.train.conftest import TINY_TRAIN

pytestmark = [pytest.mark.extra("cabt"), pytest.mark.slow]
# a halving sweep sets each trial's epochs, and sweeps the width
TRIAL = [o for o in TINY_TRAIN if not o.startswith(("trainer.epochs=", "model.hidden="))]


def command(*args: str, cwd=ROOT, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tcgexp.train", *args],
        cwd=cwd,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_readme_answer_from_a_clean_folder(tmp_path):
    """`python -m tcgexp.train +experiment=real_game` (the README's command for the answer; 200 games against
    random here) from an empty folder: the demo's ratings and its day of seeded self-play, ten epochs of the option
    head on the top-rated teachers' decisions, the stop head reported, then the policy plays the engine and wins."""
    t0 = time.perf_counter()
    res = command("+experiment=real_game", "eval.games=200", "eval.opponents=[random]", cwd=tmp_path)
    seconds = time.perf_counter() - t0
    assert res.returncode == 0, res.stderr[-3000:]
    [result_file] = (tmp_path / "outputs").glob("*/*/result.json")
    result = json.loads(result_file.read_text())
    final, history = result["final"], result["history"]
    assert result["status"] == "completed" and len(history) == 10
    assert 0.0 <= final["stop_accuracy"] <= 1.0 and final["accuracy"] > 0.3
    assert history[-1]["val"]["policy"] < history[0]["val"]["policy"]
    ratings = json.loads((tmp_path / "data" / "cabt_demo" / "ratings.json").read_text())
    assert ratings["seeded_deals"] and (tmp_path / ".aim").is_dir()
    won = result["eval"]["random"]
    assert won["games"] == 200 and won["errors"] == [] and won["wins"] + won["draws"] + won["losses"] == 200
    # measured 2026-12-05 at 85.0 % (tutorial-real-game.md); a broken feature, head or player falls far below
    assert won["win_rate"] >= 0.75, won
    lines = res.stdout.strip().splitlines()
    assert any(ln.startswith("[train] val loss ") and "stop accuracy" in ln for ln in lines)
    assert lines[-1].startswith("[eval] random: ")
    print(f"\nthe README's answer from a clean folder: {seconds:.0f} s; {lines[-1]}")


def test_a_sweep_on_the_real_game(cabt_demo_root, tmp_path):
    sweep = tmp_path / "sweep"
    res = command(
        "--multirun",
        f"dataset.root={cabt_demo_root}",
        *TINY_TRAIN,
        *CABT_DEMO,
        "trainer.epochs=1",
        "model.hidden=8,16",
        f"hydra.sweep.dir={sweep}",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    results = [json.loads((sweep / str(i) / "result.json").read_text()) for i in range(2)]
    assert [r["status"] for r in results] == ["completed", "completed"]
    assert all({"stop", "stop_accuracy"} <= set(r["history"][0]["train"]) for r in results)
    assert (sweep / "summary.md").exists() and "model.hidden" in (sweep / "summary.md").read_text()


def test_a_halving_sweep_on_the_real_game(cabt_demo_root, tmp_path):
    """Three trials at a rung of one epoch, the best third promoted to three: it continues its own latest/ and
    ends bit-identical to a run trained straight to three epochs."""
    sweep = tmp_path / "sweep"
    res = command(
        "--multirun",
        "hydra/sweeper=halving",
        f"dataset.root={cabt_demo_root}",
        *TRIAL,
        *CABT_DEMO,
        f"hydra.sweep.dir={sweep}",
        "hydra.sweeper.min_epochs=1",
        "hydra.sweeper.max_epochs=3",
        "hydra.sweeper.eta=3",
        "hydra.sweeper.n_trials=3",
        "optimizer.lr=tag(log, interval(1e-3, 3e-2))",
        "model.hidden=choice(8,16)",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    doc = trials(sweep)
    assert sorted(t["state"] for t in doc["trials"]) == ["complete", "pruned", "pruned"]
    [done] = [t for t in doc["trials"] if t["state"] == "complete"]
    run_dir = sweep / str(done["number"])
    result = json.loads((run_dir / "result.json").read_text())
    assert result["resumed_from"] and "stop" in result["final"]
    straight = train(
        compose_config(
            f"dataset.root={cabt_demo_root}", *TRIAL, *overrides_of(done["params"]), "trainer.epochs=3", *CABT_DEMO
        ),
        run_dir=tmp_path / "straight",
    )
    assert weights(run_dir) == weights(tmp_path / "straight")  # bit for bit
    assert done["value"] == straight["final"]["loss"] == result["final"]["loss"]
