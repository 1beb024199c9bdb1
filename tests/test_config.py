"""Every option of every group composes (and instantiates where it builds something)."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from tcgexp.config import build as instantiate
from tcgexp.config import primary_defaults
from tcgexp.data import Corpus, DataError
from tests.conftest import CONF, compose_config

GROUPS = list(primary_defaults("config"))  # the train config's groups
OPTIONS = [(g, p.stem) for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))]


@pytest.mark.parametrize("group, option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes(group, option, tmp_path):
    cfg = compose_config(f"{group}={option}", f"dataset.root={tmp_path}")
    assert OmegaConf.is_missing(cfg, group) is False
    OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)  # nothing left MISSING
    if "_target_" in cfg[group]:
        assert instantiate(cfg[group]) is not None


def test_every_group_has_options():
    for group in GROUPS:
        assert list((CONF / group).glob("*.yaml")), group


@pytest.mark.parametrize("option", ["demo", "1d", "5d"])
def test_dataset_options_instantiate_to_a_corpus(option, tmp_path):
    corpus = instantiate(compose_config(f"dataset={option}", f"dataset.root={tmp_path}").dataset)
    assert isinstance(corpus, Corpus) and corpus.root == tmp_path
    if option == "5d":
        assert len(corpus.dates) == 5 and corpus.specs[0].rows_per_day == 30000


@pytest.mark.parametrize(
    "override, exc",
    [
        ("dataset.rows_per_dya=5", ConfigCompositionException),
        ("dataset.days=two", ConfigCompositionException),
        ("cache.capacity=lots", ConfigCompositionException),
        ("dataset=7d", ConfigCompositionException),
    ],
    ids=["unknown-key", "wrong-type", "wrong-type-cache", "unknown-option"],
)
def test_bad_overrides_fail_at_composition(override, exc):
    with pytest.raises(exc) as err:
        compose_config(override)
    key = override.split("=")[0]
    assert key in str(err.value) or key in str(err.value.__cause__)


def test_data_app_rejects_unknown_action():
    with pytest.raises(ConfigCompositionException) as err:
        compose_config("action=explode", config_name="data")
    assert "action" in str(err.value) or "action" in str(err.value.__cause__)


@pytest.mark.parametrize(
    "override", ["dataset.val_fraction=1.5", "dataset.days=0", "dataset.verify=deep", "dataset.start_date=yesterday"]
)
def test_impossible_dataset_values_refused_naming_the_key(override, tmp_path):
    cfg = compose_config(override, f"dataset.root={tmp_path}")
    with pytest.raises(DataError) as err:
        instantiate(cfg.dataset)
    assert override.split("=")[0] in str(err.value)


@pytest.mark.parametrize(
    "override, key",
    [
        ("cache.policy.hot_fraction=1.5", "cache.policy.hot_fraction"),
        ("cache.policy.hot_fraction=-0.1", "cache.policy.hot_fraction"),
        ("cache.opt_step_guard=never", "cache.opt_step_guard"),
        ("tbptt.accum_steps=0", "tbptt.accum_steps"),
        ("tbptt.chunk=0", "tbptt.chunk"),
        ("scheduler.min_lr_ratio=2", "scheduler.min_lr_ratio"),
        ("optimizer.lr=0", "optimizer.lr"),
        ("loader.workers=-1", "loader.workers"),
        ("optimizer=sgd optimizer.momentum=1.5", "optimizer.momentum"),
        ("trainer.grad_clip=-1", "trainer.grad_clip"),
        ("cache.high_watermark_pct=150", "cache.high_watermark_pct"),
        ("trainer.epochs=0", "trainer.epochs"),
        ("tracking=aim_remote tracking.uri=http://x", "tracking.uri"),
    ],
    ids=lambda v: v if "=" in v else None,
)
def test_impossible_values_are_refused_before_any_work(override, key, tmp_path):
    from tcgexp.errors import ConfigError
    from tcgexp.train import train

    cfg = compose_config(
        *override.split(),
        f"dataset.root={tmp_path / 'data'}",
        "tracking=off" if "tracking" not in override else "seed=0",
    )
    with pytest.raises(ConfigError) as err:
        train(cfg, run_dir=tmp_path / "run")
    line = str(err.value)  # the key, the value given and the range it must be in, in one line
    assert line.startswith(f"{key}=") and " is impossible: it must be " in line and "\n" not in line, line
    assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists(), "refused before any work"


@pytest.mark.parametrize(
    "choice, cls",
    [
        ("aim", "tcgexp.track.aim_run.AimTracker"),
        ("aim_remote", "tcgexp.track.remote.RemoteAimTracker"),
        ("off", "tcgexp.track.NullTracker"),
    ],
)
def test_each_tracking_choice_is_a_partial_of_its_tracker(choice, cls):
    from tcgexp.config import build

    factory = build(compose_config(f"tracking={choice}").tracking)
    assert f"{factory.func.__module__}.{factory.func.__qualname__}" == cls
    assert "backend" not in compose_config(f"tracking={choice}").tracking


def test_a_remote_tracker_refuses_a_uri_that_is_not_aim():
    from tcgexp.errors import ConfigError
    from tcgexp.schema import validate

    with pytest.raises(ConfigError, match=r"tracking\.uri='http://x' is impossible: it must be aim://host:port"):
        validate(compose_config("tracking=aim_remote", "tracking.uri=http://x"))
