"""``resume=`` of a run with data of another game, or a network of another width, is refused before any data is
built, in one line naming both games (or both widths) and what to do (extra cabt: the real game's demo corpus and
the built-in game are the two games)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CABT_DEMO, TINY

pytestmark = pytest.mark.extra("cabt")
ROOT = Path(__file__).resolve().parents[3]
QUICK = ("tracking=off", "trainer.epochs=2", "trainer.max_steps=2", "model.hidden=16", "tbptt.batch_size=64")


def train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tcgexp.train", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def refusal(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 1, (res.stdout, res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: resume="), res.stderr
    return lines[0]


@pytest.fixture(scope="module")
def runs(cabt_demo_root, tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("resume_games")
    made = {
        "sim": (f"dataset.root={base / 'sim_data'}", *TINY, *QUICK),
        "cabt": (f"dataset.root={cabt_demo_root}", *QUICK, *CABT_DEMO),
    }
    for name, args in made.items():
        res = train(*args, f"hydra.run.dir={base / name}")
        assert res.returncode == 0, res.stderr
    return {name: base / name for name in made}


def test_a_built_in_games_run_resumed_on_the_real_game_names_both(runs, tmp_path):
    root = tmp_path / "cabt_data"
    said = refusal(
        train(f"resume={runs['sim']}", *CABT_DEMO, f"dataset.root={root}", f"hydra.run.dir={tmp_path / 'r'}")
    )
    assert "dataset.game=sim (dataset=demo)" in said and "dataset.game=cabt (dataset=cabt_demo)" in said
    assert "resume with dataset=demo" in said and "start a new run" in said
    assert not root.exists()  # refused before the demo corpus (minutes at its defaults) was built


def test_a_real_game_run_resumed_on_the_built_in_game_names_both(runs, tmp_path):
    root = tmp_path / "sim_data"
    said = refusal(
        train(f"resume={runs['cabt']}", "dataset=demo", f"dataset.root={root}", f"hydra.run.dir={tmp_path / 'r'}")
    )
    assert "dataset.game=cabt (dataset=cabt_demo)" in said and "dataset.game=sim (dataset=demo)" in said
    assert "resume with dataset=cabt_demo" in said and len(said) < 400
    assert not root.exists()


def test_a_real_game_run_resumed_with_another_option_width_names_both_widths(runs, tmp_path):
    said = refusal(train(f"resume={runs['cabt']}", "dataset.max_options=32", f"hydra.run.dir={tmp_path / 'r'}"))
    assert "dataset.max_options=64" in said and "dataset.max_options=32" in said
    assert "resume with dataset.max_options=64" in said
