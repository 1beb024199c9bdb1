"""Typed schemas: how a config group's options are typed, checked and registered.

Each class a config option builds has its schema beside it, in its own module:
a dataclass declared with ``@schema`` whose fields are the knobs, each with its
one default (option YAMLs and constructors never repeat it), and whose class
attributes say what the knobs may be:

- ``CHECKS``: ``(field, predicate, what it must be)``, applied by
  ``validate`` before any work (so a bad value is refused by name);
- ``NULLABLE``: fields whose ``None`` the checks accept;
- ``UNPINNED``: fields a resume may change (how the run is carried out, never
  what it computes; ``ALL``: the whole node); every other field is pinned.

A group's own schema (``SchedulerConfig``) types the group's node in the
composed config (the apps' root schemas name it). An option with knobs of its
own subclasses it and registers under a name its YAML starts from::

    @schema("scheduler", "step")     # conf/scheduler/step.yaml: defaults: [/schema.scheduler.step, _self_]
    class StepConfig(SchedulerConfig):
        gamma: float = 0.5

Schemas are stored at the top level of Hydra's ConfigStore, outside every
group, so shell completion, ``--help`` and ``group=option`` offer only the
YAML options. A module outside tcgexp registers its schemas the same way when
Hydra's search path names it (``hydra.searchpath=[file://my_conf,structured://my_module]``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform

from omegaconf import DictConfig, ListConfig, OmegaConf

from .errors import ConfigError

T = TypeVar("T")

ALL = ("*",)  # UNPINNED = ALL: a resume may change anything in the node
FLOAT32_MAX = 3.4028234663852886e38  # what MLX computes in: a larger number is infinity there
FLOAT32_TINY = 1.1754943508222875e-38  # float32's smallest normal number: anything smaller is (nearly) zero there
INT32_MAX = 2**31 - 1  # array shapes and plan positions (numpy and MLX index with 32-bit ints)
INT64_MAX = 2**63 - 1  # byte budgets and counters (numpy's int64)

# every schema declared with @schema, by the name it is stored under (tests walk their fields)
REGISTRY: dict[str, type] = {}


@dataclass_transform()
def schema(
    group: str | None = None, option: str | None = None, *, name: str | None = None
) -> Callable[[type[T]], type[T]]:
    """Make the class a dataclass and store it in Hydra's ConfigStore.

    ``schema("cache")``: the group's own schema, stored as ``schema.cache`` (a node inside one:
    ``schema("cache.policy")``); ``schema("cache.policy", "hot60")``: option hot60's, stored as
    ``schema.cache.policy.hot60``; ``schema(name="base_config")``: an app's root schema, under its
    own name (what ``conf/config.yaml``'s defaults list names).
    """
    if not (group or name):
        raise TypeError("schema() needs the group (or, for an app's root schema, the name) it is stored under")
    key = name or ".".join(("schema", group, option) if option else ("schema", group))

    def declare(cls: type[T]) -> type[T]:
        from hydra.core.config_store import ConfigStore

        cls = dataclasses.dataclass(cls)
        known = REGISTRY.get(key)
        if known is not None and known.__qualname__ != cls.__qualname__:  # the same class imported twice is fine
            raise ConfigError(
                f"two schemas are registered as {key}: {known.__module__}.{known.__qualname__} and "
                f"{cls.__module__}.{cls.__qualname__}; give one of the options another name"
            )
        REGISTRY[key] = cls
        ConfigStore.instance().store(name=key, node=cls)
        return cls

    return declare


def check(schema_cls: type, values, prefix: str = "") -> str | None:
    """The first of the schema's CHECKS that `values` (a node or a mapping) fails, as one line; None when all pass.

    Also what a part built outside ``train()`` (a Corpus of ``python -m tcgexp.data``) applies to its
    own arguments, so the checks stay beside the fields.
    """
    for field, ok, want in getattr(schema_cls, "CHECKS", ()):
        if field not in values:
            continue
        value = values[field]
        try:
            passed = ok(value) if value is not None or field in getattr(schema_cls, "NULLABLE", ()) else False
        except (TypeError, ValueError, OverflowError):  # a value of another type or size: not one that works
            passed = False
        if not passed:
            shown = list(value) if hasattr(value, "__len__") and not isinstance(value, str) else value
            return f"{prefix}{field}={shown!r} is impossible: it must be {want}"
    return None


def within(lo: float, hi: float, *, open_lo: bool = False, open_hi: bool = False) -> Callable[[Any], bool]:
    """A predicate: a finite number between `lo` and `hi` (bounds included unless open)."""

    def ok(v) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        return (lo < v if open_lo else lo <= v) and (v < hi if open_hi else v <= hi)

    return ok


def numeric_fields(schema_cls: type) -> list[tuple[str, Any]]:
    """(name, type) of every field a user types a number into: int, float, or a list of them."""
    out = []
    for f in dataclasses.fields(schema_cls):
        kind = f.type if not isinstance(f.type, str) else f.type.replace("Optional[", "").rstrip("]")
        if kind in (int, float, "int", "float", "list[float]", "list[int]") or kind in (list[float], list[int]):
            out.append((f.name, kind))
    return out


def field_default(schema_cls: type, field: str) -> Any:
    """The field's one default (dataclasses.MISSING when it has none)."""
    f = {f.name: f for f in dataclasses.fields(schema_cls)}[field]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _leaves(cfg, prefix: str = ""):
    """(dotted key, value) for every leaf of the composed config, list items too (the hydra node excluded)."""
    for key in cfg if isinstance(cfg, DictConfig) else range(len(cfg)):
        if key == "hydra":
            continue
        node, name = cfg[key], f"{prefix}{key}"
        if isinstance(node, (DictConfig, ListConfig)):
            yield from _leaves(node, name + ".")
        else:
            yield name, node


def validate(cfg: DictConfig) -> None:
    """Refuse impossible values before any work starts (types were checked at composition).

    The checks live beside the fields, in each schema's ``CHECKS``; this walks the composed
    config and applies the checks of whatever schema each node was composed from.
    """
    for key, value in _leaves(cfg):  # NaN or infinity in any number trains garbage: refuse it by name
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}={value} is impossible: it must be a finite number")
    problem = unknown_key(cfg)
    if problem:
        raise ConfigError(problem)
    for prefix, node in _nodes(cfg):
        problem = check(OmegaConf.get_type(node), node, prefix)
        if problem:
            raise ConfigError(problem)


def unknown_key(cfg: DictConfig) -> str | None:
    """The first key a schema-typed node holds that its schema does not declare, as one line naming the
    nearest declared key; None when there is none. Only ``+key=value`` puts one there (composition refuses a
    plain override of a missing key): Hydra's own advice for a misspelt key, ``use +<key>=<value>``, adds
    it, and the part built from the node would then fail on an argument it does not take."""
    import difflib

    for prefix, node in _nodes(cfg):
        kind = OmegaConf.get_type(node)
        if not dataclasses.is_dataclass(kind):
            continue  # a free-form node (a dict field, hydra.sweeper.params): any key may be added
        known = [f.name for f in dataclasses.fields(kind)]
        for key in node:
            if key in known or (not prefix and key == "hydra"):
                continue
            near = difflib.get_close_matches(str(key), known, n=1)
            where = prefix[:-1] or "the config's top level"
            hint = f"did you mean {prefix}{near[0]}? " if near else ""
            return (
                f"+{prefix}{key}: {where} has no key {key!r} ({kind.__name__} declares: {', '.join(known)}); "
                f"{hint}+ adds a key only where a schema leaves room, and no part takes this one"
            )
    return None


def _nodes(cfg: DictConfig, prefix: str = ""):
    """(dotted prefix, node) for every config node, the root first (the hydra node excluded)."""
    yield prefix, cfg
    for key in cfg:
        if key != "hydra" and isinstance(cfg._get_node(key), DictConfig) and not OmegaConf.is_missing(cfg, key):
            yield from _nodes(cfg[key], f"{prefix}{key}.")
