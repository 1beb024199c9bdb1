"""The docs' Extending page runs as written: its package of four options (a cache policy, a model, a schedule,
a tracker), taken from the page's code blocks into a folder outside the repository, composes, refuses bad
values by name, trains, resumes bit-exactly, and trains from the page's command line.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mlx.utils import tree_flatten
from omegaconf import OmegaConf

from tcgexp.api import ConfigError, compose, train
from tests.train.conftest import TINY_TRAIN

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "extending.md"
CHOICES = ["cache=mru", "model=deep", "scheduler=step", "tracking=jsonl"]
SMALL = [o for o in TINY_TRAIN if not o.startswith("tracking=")]


def page_files() -> dict[str, str]:
    """{path under the user's folder: text} of every code block whose first line names its file."""
    blocks = re.findall(r"```(?:python|yaml)\n# (my_options/\S+)[^\n]*\n(.*?)```", PAGE.read_text(), re.DOTALL)
    return {path: text for path, text in blocks}


def page_command() -> list[str]:
    """The page's command line's arguments after `tcgexp-train`."""
    line = re.search(r"```bash\nPYTHONPATH=<folder> tcgexp-train (.*?)\n```", PAGE.read_text(), re.DOTALL).group(1)
    return shlex.split(line)


def drop_package() -> None:
    for name in [n for n in sys.modules if n == "my_options" or n.startswith("my_options.")]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    home = tmp_path_factory.mktemp("user")
    for path, text in page_files().items():
        (home / path).parent.mkdir(parents=True, exist_ok=True)
        (home / path).write_text(text)
    drop_package()  # another test's my_options must not answer for this one
    sys.path.insert(0, str(home))
    yield home
    sys.path.remove(str(home))
    drop_package()


def cfg_of(data: Path, *more: str):
    return compose(
        "hydra.searchpath=[pkg://my_options]",
        *CHOICES,
        f"dataset.root={data}",
        *SMALL,
        f"tracking.path={data.parent / 'metrics.jsonl'}",
        *more,
    )


def test_the_page_has_a_package_with_each_kind_of_option():
    files = page_files()
    assert {
        "my_options/__init__.py",
        "my_options/mru.py",
        "my_options/deep.py",
        "my_options/step.py",
        "my_options/jsonl.py",
        "my_options/cache/mru.yaml",
        "my_options/model/deep.yaml",
        "my_options/scheduler/step.yaml",
        "my_options/tracking/jsonl.yaml",
    } <= set(files)


def test_the_pages_code_imports_tcgexp_only_through_its_api():
    for path, text in page_files().items():
        if path.endswith(".py"):
            for node in ast.walk(ast.parse(text)):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom) and not node.level
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                assert all(n == "tcgexp.api" or not n.startswith("tcgexp") for n in names), (path, names)


def test_each_option_composes_typed_by_its_own_schema(folder, tmp_path):
    cfg = cfg_of(tmp_path / "data")
    kinds = {g: OmegaConf.get_type(cfg[g]).__name__ for g in ("model", "scheduler", "tracking")}
    assert kinds == {"model": "DeepConfig", "scheduler": "StepConfig", "tracking": "JsonlConfig"}
    assert OmegaConf.get_type(cfg.cache.policy).__name__ == "MruConfig"
    assert (cfg.cache.policy.spare, cfg.model.depth, cfg.scheduler.gamma, cfg.tracking.every) == (0, 2, 0.5, 1)


@pytest.mark.parametrize(
    "override", ["cache.policy.spare=-1", "model.depth=0", "scheduler.gamma=2", "tracking.every=0"]
)
def test_each_refuses_an_impossible_value_by_name(folder, tmp_path, override):
    with pytest.raises(ConfigError, match=re.escape(override.split("=")[0] + "=")) as err:
        train(cfg_of(tmp_path / "data", override), run_dir=tmp_path / "run")
    assert "\n" not in str(err.value) and not (tmp_path / "run").exists()


def weights(result) -> dict[str, bytes]:
    return {k: np.array(v).tobytes() for k, v in tree_flatten(result["model"].parameters())}


def test_they_train_together_and_resume_bit_exactly(folder, tmp_path):
    data, more = (
        tmp_path / "data",
        ["cache.policy.spare=1", "cache.capacity=2", "model.depth=1", "scheduler.gamma=0.3", "trainer.track_every=1"],
    )
    whole = train(cfg_of(data, *more), run_dir=tmp_path / "whole")
    assert whole["status"] == "completed" and whole["cache"]["train"]["evictions"] > 0  # the policy chose victims
    assert len(whole["model"].trunk.layers) == 4  # Linear, ReLU and one more layer pair: depth 1
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert sum("train/loss" in ln for ln in lines) == whole["processed"]["optimizer_steps"]
    first = train(cfg_of(data, *more, "trainer.max_steps=5"), run_dir=tmp_path / "a")
    assert first["status"] == "stopped"
    done = train(cfg_of(data, *more, f"resume={tmp_path / 'a'}"), run_dir=tmp_path / "b")
    assert weights(done) == weights(whole), "the resumed run ends bit-identical to the uninterrupted one"


@pytest.mark.slow
def test_the_pages_command_line_trains(folder, tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{ROOT}"}
    small = [f"dataset.root={tmp_path / 'data'}", *SMALL, "trainer.epochs=1", f"tracking.path={tmp_path / 'm.jsonl'}"]

    def cli(*more):
        return subprocess.run(
            [sys.executable, "-m", "tcgexp.train", *page_command(), *small, *more],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    bad = cli("scheduler.gamma=2", f"hydra.run.dir={tmp_path / 'bad'}")
    assert (
        bad.returncode != 0
        and bad.stderr.strip().splitlines()[-1] == "error: scheduler.gamma=2.0 is impossible: it must be in (0, 1]"
    )
    res = cli(f"hydra.run.dir={tmp_path / 'run'}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "completed"
    ran = OmegaConf.load(tmp_path / "run" / ".hydra" / "config.yaml")
    assert (ran.scheduler._target_, ran.scheduler.gamma, ran.cache.policy.spare) == (
        "my_options.step.StepDecay",
        0.3,
        1,
    )
    shown = cli("--help").stdout
    assert "cache: fifo, hot60, lru, mru, off, plan" in shown and "tracking: aim, aim_remote, jsonl, off" in shown
