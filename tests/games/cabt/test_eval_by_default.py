"""A run trained on imported episodes of the real game (``dataset=cabt``) plays at its end and prints its win rates
with no eval setting given; ``eval.enabled=false`` keeps it from playing (extra cabt)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.extra("cabt")
ROOT = Path(__file__).resolve().parents[3]
QUICK = ("tracking=off", "trainer.epochs=1", "model.hidden=16", "eval.games=2", "dataset.episodes_per_shard=8")


@pytest.mark.parametrize(("extra", "plays"), [((), True), (("eval.enabled=false",), False)])
def test_a_run_on_imported_episodes_plays_at_its_end_unless_turned_off(cabt_demo_root, tmp_path, extra, plays):
    root = tmp_path / "data"
    shutil.copytree(cabt_demo_root, root)  # its ZIPs are episodes as any import files them
    res = subprocess.run(
        [sys.executable, "-m", "tcgexp.train", "dataset=cabt", f"dataset.root={root}", "dataset.row_group_rows=256"]
        + [*QUICK, *extra, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["status"] == "completed"
    if plays:
        assert set(result["eval"]) == {"random", "first"} and result["eval"]["random"]["games"] == 2, result["eval"]
        assert "[eval] random: " in res.stdout and "[eval] first: " in res.stdout
    else:
        assert "eval" not in result and "eval_error" not in result and "[eval]" not in res.stdout
