"""The config reference page, generated from the schemas when the docs site is built.

Every app's own keys (its root schema), every config group with its options (what each builds and
the values its YAML sets) and every knob of every schema (type, default, allowed values, meaning:
``knobs.py``), the halving sweeper's ``hydra.sweeper`` knobs, and the experiment options with what
they sweep. Nothing here is written by hand: a new knob shows up with its comment, and a knob
without one stops the build (``MissingMeaning``).
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

import tcgexp.app  # every schema a training run composes, the sweeper's
import tcgexp.bench.trace  # noqa: F401  (tcgexp-replay's root)

from ..app import option
from ..config import CONF_DIR, group_options, primary_defaults
from ..schema import REGISTRY
from .knobs import Knob, knobs, missing_meanings, render_default, show

# (command, its primary config under conf/, its root schema)
APPS = (
    ("tcgexp-train", "config", "base_config"),
    ("tcgexp-data", "data", "base_data_app"),
    ("tcgexp-replay", "replay", "base_replay"),
    ("tcgexp-sequence", "sequence", "base_sequence"),
)
SWEEPERS = (("halving", "schema.hydra.sweeper.halving"),)  # hydra/sweeper=<option>: its schema's name
KNOB_HEADER = ["| knob | type | default | allowed | meaning |", "|---|---|---|---|---|"]


class MissingMeaning(Exception):
    """A knob with no comment beside it in its schema: the reference cannot say what it means."""


def registry() -> dict[str, type]:
    """tcgexp's schemas by their stored names, each module that declares one imported (the apps' roots too)."""

    # a plug-in's schemas registered in this process (a test's) are its own docs' business
    return {k: v for k, v in REGISTRY.items() if v.__module__.startswith(("tcgexp.", "hydra_plugins."))}


def check_meanings(schemas: Iterable[type]) -> None:
    missing = sorted({m for cls in schemas for m in missing_meanings(cls)})
    if missing:
        raise MissingMeaning(
            f"{len(missing)} knob(s) have no comment saying what they mean: {', '.join(missing)}; "
            "add a one-line comment beside each field (what it costs or buys)"
        )


def cell(text: Any) -> str:
    """A table cell: its pipes escaped, on one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def prose(text: Any) -> str:
    """A comment's text as Markdown shows it as written: outside its `code` spans, what Markdown would read as
    emphasis or HTML (``2**31``, ``<run dir>``) escaped."""
    parts = str(text).split("`")
    for i in range(0, len(parts), 2):  # the even parts lie outside code spans
        parts[i] = parts[i].replace("\\", "\\\\").replace("*", "\\*").replace("_", "\\_").replace("<", "&lt;")
    return cell("`".join(parts))


def code(text: Any) -> str:
    text = str(text)
    return f"`{text}`" if not text.startswith("(") else text


def anchor(key: str) -> str:
    return key.replace(".", "-").replace("_", "-")


def where(cls: type) -> str:
    """A schema's name and the file that declares it, from the repository's root."""
    path = Path(inspect.getsourcefile(cls) or "").resolve()
    root = Path(__file__).resolve().parents[2]
    return f"`{cls.__qualname__}` (`{path.relative_to(root) if path.is_relative_to(root) else path.name}`)"


def knob_rows(cls: type, prefix: str, *, own_only: bool = False, groups: dict | None = None) -> list[str]:
    """The table rows of schema `cls`'s knobs under `prefix` (`own_only`: those its own class declares;
    `groups`: {field: its default option} of an app's root, whose group fields pick an option)."""
    declared = inspect.get_annotations(cls)
    rows = []
    for k in knobs(cls):
        if own_only and k.key not in declared:
            continue
        if groups and k.key in groups:
            options = ", ".join(f"`{o}`" for o in group_options(k.key))
            rows.append(
                f"| `{k.key}` | config group | `{groups[k.key]}` | an option: {options} | "
                f"{prose(k.meaning) + ' ' if k.meaning else ''}its options and knobs: "
                f"[`{k.key}`](#{anchor(k.key)}) |"
            )
            continue
        rows.append(row(prefix + k.key, k))
    return rows


def base_app(cls: type, schemas: dict[str, type]) -> tuple[str, type] | None:
    """(command, root schema) of the app whose root `cls` extends (the sequence's: the training run's), or None."""
    for cmd, _, root in APPS:
        if schemas[root] is not cls and issubclass(cls, schemas[root]):
            return cmd, schemas[root]
    return None


def own_rows(cls: type) -> list[str]:
    """An app root's own knobs beyond the root it extends: a node of knobs (``sequence``) as its dotted keys."""
    rows = []
    for name, hint in inspect.get_annotations(cls, eval_str=True).items():
        if dataclasses.is_dataclass(hint):
            rows += knob_rows(hint, f"{name}.")
    return rows


def extends(cls: type, schemas: dict[str, type]) -> list[str]:
    found = base_app(cls, schemas)
    if found is None:
        return []
    return [f"Every key and group of [`{found[0]}`](#{anchor(found[0])}), and its own:", ""]


def row(key: str, k: Knob) -> str:
    meaning = prose(k.meaning)
    if k.node is not None:
        meaning = (meaning + "; " if meaning else "") + f"its knobs: [`{key}`](#{anchor(key)})"
    return f"| `{key}` | {prose(k.type)} | {cell(code(k.default))} | {prose(k.allowed)} | {meaning} |"


def _leaves(node: DictConfig, raw: dict, prefix: str = ""):
    """(dotted key, raw value, the schema of the node holding it) for every leaf of a composed option node."""
    kind = OmegaConf.get_type(node)
    for key, value in raw.items():
        if isinstance(value, dict) and isinstance(node.get(key), DictConfig):
            yield from _leaves(node[key], value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value, kind


def option_sets(node: DictConfig) -> tuple[str, list[str]]:
    """(the class an option builds, `key=value` for each value its YAML sets over the schemas' defaults)."""
    raw = OmegaConf.to_container(node, resolve=False)
    built, sets = str(raw.get("_target_", "")), []
    for key, value, kind in _leaves(node, raw):
        name = key.rsplit(".", 1)[-1]
        if key == "_target_" or name == "_partial_":
            continue
        field = getattr(kind, "__dataclass_fields__", {}).get(name)  # None: a key the schema lacks, always shown
        if field is not None and render_default(field) == show(value):
            continue
        sets.append(f"`{key}={show(value)}`")
    return built, sets


def node_schemas(node: DictConfig, prefix: str = "") -> dict[str, type]:
    """{dotted prefix: schema} of every node of a composed option (itself first)."""
    out = {prefix: OmegaConf.get_type(node)}
    for key in node:
        if isinstance(node._get_node(key), DictConfig) and not OmegaConf.is_missing(node, key):
            out.update(node_schemas(node[key], f"{prefix}{key}."))
    return out


def group_section(group: str, schemas: dict[str, type], defaults: dict[str, list[str]]) -> list[str]:

    base = schemas[f"schema.{group}"]
    options = group_options(group)
    chosen = "; ".join(f"{cmd}: `{opt}`" for cmd, opt in defaults.get(group, []))
    out = [
        f"## `{group}` {{#{anchor(group)}}}",
        "",
        f"Options (`{group}=<option>`, each `conf/{group}/<option>.yaml`): "
        + ", ".join(f"`{o}`" for o in options)
        + (f". Default: {chosen}." if chosen else "."),
        f"Schema: {where(base)}.",
        "",
        "| option | builds | sets |",
        "|---|---|---|",
    ]
    used: dict[str, list[tuple[type, str]]] = {}  # node prefix -> (schema, option) beyond the group's own
    expected = {"": base}
    for k in knobs(base):
        if k.node is not None:
            expected[f"{k.key}."] = k.node
    for name in options:
        node = option(group, name)
        built, sets = option_sets(node)
        out.append(f"| `{name}` | `{built}` | {cell(', '.join(sets) or '(the defaults)')} |")
        for prefix, cls in node_schemas(node).items():
            if expected.get(prefix) not in (None, cls):
                used.setdefault(prefix, []).append((cls, name))
    out += ["", *KNOB_HEADER, *knob_rows(base, f"{group}.")]
    for prefix, cls in expected.items():
        if not prefix:
            continue
        key = f"{group}.{prefix[:-1]}"
        rows = knob_rows(cls, f"{key}.")
        out += ["", f"### `{key}` {{#{anchor(key)}}}", "", f"Schema: {where(cls)}.", ""]
        out += [*KNOB_HEADER, *rows] if rows else ["No knobs of its own: an option's schema adds them (below)."]
    for prefix, pairs in used.items():
        for cls, names in itertools.groupby(sorted(pairs, key=lambda p: p[0].__qualname__), key=lambda p: p[0]):
            key = f"{group}.{prefix}".rstrip(".")
            picked = ", ".join(f"`{group}={n}`" for _, n in names)
            out += [
                "",
                f"### `{key}` with {picked} {{#{anchor(key)}-{anchor(cls.__qualname__.lower())}}}",
                "",
                f"Schema: {where(cls)}, which adds to `{expected[prefix].__qualname__}`'s knobs:",
                "",
                *KNOB_HEADER,
                *knob_rows(cls, f"{key}.", own_only=True),
            ]
    return out + [""]


def experiment_section() -> list[str]:
    out = [
        "## `experiment` {#experiment}",
        "",
        "Options (`+experiment=<option>`, each `conf/experiment/<option>.yaml`): a preset that picks options, "
        "sets knobs and, for `--multirun`, the sweep's parameters. None by default.",
        "",
        "| option | picks and sets | sweeps (`--multirun`) | jobs |",
        "|---|---|---|---|",
    ]
    for name in group_options("experiment"):
        doc = yaml.safe_load((CONF_DIR / "experiment" / f"{name}.yaml").read_text()) or {}
        picks = [
            f"`{k.removeprefix('override /')}={v}`"
            for d in doc.get("defaults", [])
            if isinstance(d, dict)
            for k, v in d.items()
        ]
        params = (doc.get("hydra") or {}).get("sweeper", {}).get("params", {}) or {}
        flat = [f"`{k}={show(v)}`" for k, v in _flat({k: v for k, v in doc.items() if k not in ("defaults", "hydra")})]
        sweeps = [f"`{k}`: {cell(v)}" for k, v in params.items()]
        jobs = 1
        for v in params.values():
            jobs *= len(str(v).split(","))
        out.append(
            f"| `{name}` | {', '.join(picks + flat) or '—'} | {'; '.join(sweeps) or '—'} | {jobs if params else '—'} |"
        )
    return out + [""]


def _flat(doc: dict, prefix: str = ""):
    for key, value in doc.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def page() -> str:
    """The config reference, as Markdown."""
    schemas = registry()
    check_meanings(schemas.values())
    defaults: dict[str, list[tuple[str, str]]] = {}
    groups: list[str] = []
    for cmd, config_name, _ in APPS:
        for group, choice in primary_defaults(config_name).items():
            defaults.setdefault(group, []).append((cmd, choice))
            if group not in groups:
                groups.append(group)
    out = [
        "# Config reference",
        "",
        "Generated from the typed schemas when this site is built (`python -m tcgexp.reference config` prints "
        "it in a terminal): every knob with its type, its one default (the schema's; an option's YAML may set "
        "its own, listed under its group), the values it allows (what the check before any work refuses "
        "outside) and what it means (the comment beside the field in the source).",
        "",
        "Set a knob with `key=value` and pick an option with `group=option` on any command line, e.g. "
        "`tcgexp-train cache=lru cache.capacity=16 trainer.epochs=5`.",
        "",
    ]
    out += ["## The groups at a glance {#groups}", "", "| group | options | default |", "|---|---|---|"]
    for group in [*groups, "experiment"]:
        chosen = ", ".join(f"`{opt}` ({cmd})" for cmd, opt in defaults.get(group, [])) or "none (`+experiment=...`)"
        out.append(
            f"| [`{group}`](#{anchor(group)}) | {', '.join(f'`{o}`' for o in group_options(group))} | {chosen} |"
        )
    sweepers = ", ".join(f"[`{name}`](#hydra-sweeper-{name})" for name, _ in SWEEPERS)
    out += [
        f"| `hydra/sweeper` | {sweepers} (tcgexp's), Hydra's own | Hydra's `basic` grid |",
        f"| `hydra/callbacks` | {', '.join(f'`{o}`' for o in group_options('hydra/callbacks'))} (tcgexp's) | "
        "all of them, in `tcgexp-train` |",
        "",
    ]
    out += ["## The commands' own keys {#commands}", ""]
    for cmd, config_name, root in APPS:
        cls = schemas[root]
        out += [
            f"### `{cmd}` {{#{anchor(cmd)}}}",
            "",
            f"`conf/{config_name}.yaml`; schema: {where(cls)}.",
            "",
            *extends(cls, schemas),
            *KNOB_HEADER,
            *(
                own_rows(cls)
                if base_app(cls, schemas) is not None
                else knob_rows(cls, "", groups=primary_defaults(config_name))
            ),
            "",
        ]
    for group in groups:
        out += group_section(group, schemas, defaults)
    out += experiment_section()
    for name, key in SWEEPERS:
        cls = schemas[key]
        out += [
            f"## `hydra.sweeper` with `hydra/sweeper={name}` {{#hydra-sweeper-{name}}}",
            "",
            f"Schema: {where(cls)}; `tcgexp-train --multirun hydra/sweeper={name} --cfg hydra -p hydra.sweeper` "
            "prints the composed values.",
            "",
            *KNOB_HEADER,
            *knob_rows(cls, "hydra.sweeper."),
            "",
        ]
    return "\n".join(out)
