"""The schemas: each knob's default written once, every number a user types checked, a resume's pins derived.

- No YAML under ``conf/`` repeats a default its schema already holds, and no constructor copies one.
- Every numeric field of every schema (every option of every group, the apps' roots) refuses, by
  name and before any work, what MLX or numpy would choke on: negative, huge, NaN, infinite, a list
  of the wrong length; zero only where its check says what zero means.
- What a resume pins comes from the schemas (``UNPINNED``), not from a list.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import typing
from pathlib import Path

import pytest
from hydra.utils import get_class
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import tcgexp.bench.trace  # noqa: F401  (registers the replay tool's root schema, base_replay)
from tcgexp.app import compose
from tcgexp.config import primary_defaults
from tcgexp.errors import ConfigError
from tcgexp.schema import field_default, validate
from tests.conftest import CONF

GROUPS = list(primary_defaults("config"))
OPTIONS = [(g, p.stem) for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))]
YAMLS = [p for p in sorted(CONF.rglob("*.yaml")) if p.relative_to(CONF).parts[0] != "hydra"]


def composed_for(path: Path) -> tuple[DictConfig, str]:
    """The config a YAML file is part of, and the package its keys sit at."""
    rel = path.relative_to(CONF)
    if len(rel.parts) == 1:
        return compose(config_name=rel.stem), ""
    group, option = rel.parts[0], rel.stem
    if group == "experiment":
        return compose(f"+experiment={option}"), ""
    return compose(f"{group}={option}"), group


def repeats(raw, cfg: DictConfig, prefix: str) -> list[str]:
    """Keys of the YAML node `raw` whose value equals the default of the schema `cfg` is typed by."""
    out = []
    node = OmegaConf.select(cfg, prefix) if prefix else cfg
    schema = OmegaConf.get_type(node)
    for key in raw:
        if key in ("defaults", "hydra"):
            continue
        value = raw._get_node(key)._value() if not isinstance(raw[key], (DictConfig, ListConfig)) else raw[key]
        where = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, DictConfig):
            out += repeats(value, cfg, where)
        elif dataclasses.is_dataclass(schema) and key in {f.name for f in dataclasses.fields(schema)}:
            default = field_default(schema, key)
            plain = OmegaConf.to_container(value) if isinstance(value, ListConfig) else value
            if default is not dataclasses.MISSING and plain == default:
                out.append(f"{where}: {plain!r}")
    return out


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: str(p.relative_to(CONF)))
def test_no_yaml_repeats_a_default_of_its_schema(path):
    cfg, package = composed_for(path)
    raw = OmegaConf.load(path)
    assert not repeats(raw, cfg, package), f"{path.relative_to(CONF)} repeats its schema's defaults"


@pytest.mark.parametrize("group, option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_no_constructor_copies_a_schema_default(group, option):
    """The class an option builds takes every knob of its schema without a default of its own."""
    cfg = compose(f"{group}={option}")
    for node in (cfg[group], *([cfg[group].policy] if "policy" in cfg[group] else [])):
        schema, cls = OmegaConf.get_type(node), get_class(node._target_)
        fields = {f.name for f in dataclasses.fields(schema)} - {"_target_", "_partial_"}
        params = inspect.signature(cls.__init__).parameters
        copied = [n for n in fields if n in params and params[n].default is not inspect.Parameter.empty]
        assert not copied, f"{cls.__qualname__}.__init__ repeats defaults of {schema.__qualname__}: {copied}"


# -- every number a user types ------------------------------------------------------------------------
def numeric_knobs() -> list[tuple[str, str, str, object]]:
    """(config name, group option override or "", dotted key, type) of every numeric field of every schema."""
    out, seen = [], set()

    def walk(config: str, choice: str, node: DictConfig, prefix: str) -> None:
        schema = OmegaConf.get_type(node)
        if not dataclasses.is_dataclass(schema):
            return
        hints = typing.get_type_hints(schema)
        for f in dataclasses.fields(schema):
            kind = hints[f.name]
            kind = (
                next((a for a in typing.get_args(kind) if a is not type(None)), kind)
                if typing.get_origin(kind) is typing.Union
                else kind
            )
            key = f"{prefix}{f.name}"
            if kind in (int, float) or typing.get_origin(kind) is list and typing.get_args(kind)[0] in (int, float):
                if (schema, f.name) not in seen:
                    seen.add((schema, f.name))
                    out.append((config, choice, key, kind))
            elif isinstance(node._get_node(f.name), DictConfig) and not OmegaConf.is_missing(node, f.name):
                walk(config, choice, node[f.name], key + ".")

    for group, option in OPTIONS:
        walk("config", f"{group}={option}", compose(f"{group}={option}")[group], f"{group}.")
    walk("config", "", compose(), "")
    walk("replay", "", compose(config_name="replay"), "")
    return out


KNOBS = numeric_knobs()


def probes(kind) -> list:
    if typing.get_origin(kind) is list:
        return (
            [[], [0.5], [0.5, 0.5, 0.5], [math.nan, 0.5], [-0.5, 0.5], [0.5, 1e39]]
            if typing.get_args(kind)[0] is float
            else [[-1], [10**30]]
        )
    return [-1, 10**30] if kind is int else [-1.0, 1e39, math.nan, math.inf, -math.inf]


def refused(config: str, choice: str, key: str, value) -> str | None:
    """The one line a value is refused with (None: accepted), set as a user's override would set it."""
    cfg = compose(*([choice] if choice else []), config_name=config)
    try:
        OmegaConf.update(cfg, key, value, merge=False)
        validate(cfg)
    except ConfigError as exc:
        return str(exc)
    except OmegaConfBaseException as exc:  # a value of the wrong type: refused at composition, named there
        return str(exc).replace("\n", " ")
    return None


def test_every_numeric_knob_is_probed():
    keys = {k for _, _, k, _ in KNOBS}
    assert {
        "optimizer.betas",
        "optimizer.eps",
        "optimizer.lr",
        "tbptt.chunk",
        "trainer.grad_clip",
        "seed",
        "cache.policy.hot_fraction",
        "dataset.storage.retries",
        "capacities",
    } <= keys


@pytest.mark.parametrize("config, choice, key, kind", KNOBS, ids=[f"{c}:{k}" for c, _, k, _ in KNOBS])
def test_every_numeric_knob_refuses_what_cannot_work_by_name(config, choice, key, kind):
    for value in probes(kind):
        line = refused(config, choice, key, value)
        assert line is not None, f"{key}={value!r} was accepted"
        assert key.split(".")[-1] in line, (value, line)


SCALARS = [k for k in KNOBS if typing.get_origin(k[3]) is not list]


@pytest.mark.parametrize("config, choice, key, kind", SCALARS, ids=[f"{c}:{k}" for c, _, k, _ in SCALARS])
def test_zero_is_refused_or_its_check_says_what_zero_means(config, choice, key, kind):
    line = refused(config, choice, key, kind(0))
    if line is None:  # accepted: the check (what users read when refused) says zero is in the range
        wants = refused(config, choice, key, -1)
        assert "[0" in wants or ">= 0" in wants or "0 =" in wants, wants


def test_optimizer_betas_and_eps():
    assert "two values, each in [0, 1)" in refused("config", "", "optimizer.betas", [0.9])
    assert refused("config", "", "optimizer.betas", [0.0, 0.999]) is None
    assert "optimizer.eps=0.0 is impossible" in refused("config", "", "optimizer.eps", 0.0)
    assert refused("config", "", "optimizer.eps", 1e-12) is None


# -- what a resume pins -------------------------------------------------------------------------------
def test_what_a_resume_pins_is_derived_from_the_schemas():
    from tcgexp.lifecycle.provenance import is_pinned, pinned

    keys = set(pinned(compose()))
    assert {
        "seed",
        "model",
        "optimizer",
        "trainer.aux_weight",
        "trainer.grad_clip",
        "tbptt.chunk",
        "tbptt.batch_size",
        "tbptt.accum_steps",
        "tbptt.lane_order",
        "tbptt.enabled",
        "scheduler._target_",
        "scheduler.warmup_steps",
        "scheduler.total_steps",
        "scheduler.min_lr_ratio",
    } <= keys
    free = ("trainer.epochs", "trainer.max_steps", "scheduler.reset", "tbptt.shards", "resume", "optimized_metric")
    assert not keys & set(free)
    assert not any(k.split(".")[0] in ("cache", "loader", "checkpoint", "tracking", "dataset") for k in keys)
    assert not any(k.startswith("scheduler") for k in pinned(compose("scheduler.reset=true")))
    assert is_pinned(compose(), "model.hidden") and is_pinned(compose(), "scheduler")
    assert not is_pinned(compose(), "cache") and not is_pinned(compose(), "hydra.run.dir")


def test_a_schema_is_no_option():
    from hydra.errors import ConfigCompositionException

    for choice in ("cache=base_flat", "cache=base_cache", "optimizer=schema.optimizer.adamw"):
        with pytest.raises(ConfigCompositionException, match="Could not find"):
            compose(choice)
