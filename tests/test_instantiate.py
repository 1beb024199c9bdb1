"""One way of building objects: every option of every group instantiates into the class its _target_ names,
and the layers import only downwards (options from outside conf/: tests/test_plugins.py)."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

from tcgexp import sim
from tcgexp.config import build
from tcgexp.plan import LaneIndex
from tcgexp.plan.loader import TRAIN_COLUMNS
from tests.conftest import CONF, compose_config, make_corpus

ROOT = Path(__file__).resolve().parents[1]
BUILT = ["cache", "loader", "tbptt", "scheduler", "model", "optimizer", "tracking", "dataset", "trainer", "checkpoint"]
OPTIONS = [(g, p.stem) for g in BUILT for p in sorted((CONF / g).glob("*.yaml"))]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("inst") / "data", build_now=True)


def test_every_option_of_the_built_groups_names_a_target():
    missing = [f"{g}/{o}.yaml" for g, o in OPTIONS if "_target_" not in (CONF / g / f"{o}.yaml").read_text()]
    assert not missing, f"options without a _target_: {missing}"


@pytest.mark.parametrize("group, option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_builds_a_real_object_of_its_class(group, option, corpus, tmp_path):
    """Each partial completed with what the trainer supplies; the object is of the class _target_ names."""
    cfg = compose_config(f"{group}={option}", f"dataset.root={corpus.root}", *(
        ["tracking.repo=" + str(tmp_path / "aim")] if option == "aim" else []))
    node = cfg[group]
    made = build(node)
    if isinstance(made, functools.partial):
        index = LaneIndex.of(corpus)
        schedule = build(cfg.scheduler)(run_steps=10)
        runtime = {
            "cache": lambda: made(corpus.files, TRAIN_COLUMNS, spill_dir=tmp_path / "spill", name="train"),
            "loader": lambda: made(build(cfg.cache)(corpus.files, TRAIN_COLUMNS, spill_dir=tmp_path / "s"),
                                   TRAIN_COLUMNS),
            "tbptt": lambda: made(index),
            "scheduler": lambda: made(run_steps=10),
            "model": lambda: made(feature_dim=sim.FEATURE_DIM, action_dim=sim.ACTION_DIM),
            "optimizer": lambda: made(schedule),
            "tracking": lambda: _tracker(made, cfg, tmp_path),
            "checkpoint": lambda: made(folder=tmp_path / "checkpoints"),
            "trainer": lambda: made(checkpoint=build(cfg.checkpoint), tracking=build(cfg.tracking), run=_run(cfg, tmp_path)),
        }[group]
        made = runtime()
    try:
        assert isinstance(made, get_class(node._target_)), (group, option, type(made))
        if group == "cache":
            assert type(made._policy) is get_class(node.policy._target_)
    finally:
        for close in ("close",):
            if hasattr(made, close) and group in ("cache", "tracking"):
                getattr(made, close)()


def _run(cfg, tmp_path):
    from rich.console import Console

    from tcgexp.train.distributed import World
    from tcgexp.train.trainer import RunContext

    return RunContext(cfg, tmp_path / "run", World(), Console(quiet=True), blas="reference")


def _tracker(made, cfg, tmp_path):
    from tcgexp.track import job_context

    try:  # the tracker signature of the tracking group (hparams, context, resume_hash)
        return made(hparams=OmegaConf.to_container(cfg, resolve=True), context=job_context(tmp_path),
                    resume_hash=None)
    except TypeError:
        return made(cfg, context=job_context(tmp_path), resume_hash=None)


# -- layers: data below plan and cache, those below train, train below the sweeper ------------------------
RANK = {"sim": 0, "data": 1, "plan": 2, "cache": 2, "track": 2, "train": 3, "sweep": 4, "bench": 4}
PEERS_APART = {("plan", "cache"), ("cache", "plan")}  # the planner and the cache never import each other


def imports_of(path: Path) -> set[str]:
    """tcgexp subpackages a module imports (absolute or relative), top-level and inside functions."""
    tree = ast.parse(path.read_text())
    pkg = path.relative_to(ROOT).parts[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg[:len(pkg) - node.level + 1]) + (node.module.split(".") if node.module else [])
            else:
                base = (node.module or "").split(".")
            if base[:1] == ["tcgexp"] and len(base) > 1:
                out.add(base[1])
            elif base[:1] == ["tcgexp"]:
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "tcgexp" and len(parts) > 1:
                    out.add(parts[1])
    return out


def test_no_package_imports_one_above_it():
    wrong = []
    for path in sorted((ROOT / "tcgexp").rglob("*.py")):
        parts = path.relative_to(ROOT / "tcgexp").parts
        if len(parts) < 2 or parts[0] not in RANK:
            continue
        here = parts[0]
        for other in imports_of(path) - {here}:
            if other in RANK and (RANK[other] > RANK[here] or (here, other) in PEERS_APART
                                  or (RANK[other] == RANK[here])):
                wrong.append(f"{path.relative_to(ROOT)} imports tcgexp.{other}")
    assert not wrong, "\n".join(wrong)
