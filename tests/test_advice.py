"""Every setting a message or a document names exists: advice a user follows must match a key they can type.

The walk reads every string in the package (errors, fixes, diagnoses, hints) and the user-facing documents,
finds each ``group.key`` and ``group=option`` they name, and checks it against the real config: the key in
the composed config of some option of that group, the option a YAML file of the group. "reduce the column
projection", which names no setting at all, was the advice that started this.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tcgexp.app import compose
from tcgexp.config import CONF_DIR, group_options

ROOT = Path(__file__).resolve().parents[1]
GROUPS = ("dataset", "cache", "loader", "tbptt", "scheduler", "model", "optimizer", "trainer", "checkpoint", "tracking")
KEY = re.compile(rf"(?<![\w./$-])({'|'.join(GROUPS)})\.([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)")
OPTION = re.compile(rf"(?<![\w./+$-])({'|'.join(GROUPS)})=([a-z0-9_]+(?:,[a-z0-9_]+)*)(?![\w.(<])")
# dotted names that are not settings: checkpoint files, modules and their functions, MLX attributes,
# result.json paths; an older checkpoint's key (read at its new place); the README's schedule from outside conf/
NOT_SETTINGS = {
    "model.safetensors",
    "optimizer.safetensors",
    "lanes.safetensors",
    "model.state",
    "optimizer.state",
    "cache.train",
    "cache.val",
    "trainer.py",
    "checkpoint.save",
    "checkpoint.snapshot",
    "checkpoint.write",
    "optimizer.grad_clip",
    "scheduler.gamma",
    # the model's module, its MLX method and an attribute the game sizes (data.games.model_dims), not a setting
    "model.py",
    "model.parameters",
    "model.option_dim",
    # the docs' Extending page: its own options' settings, and a misspelt one it shows refused
    "cache.policy.spare",
    "model.depth",
    "tracking.every",
    "tracking.path",
    "scheduler.gama",
    "trainer.md",
}  # the docs' page on the trainer
# options that are not tcgexp's on purpose: the README's policy and schedule from outside conf/, a schema
# picked by mistake
NOT_OPTIONS = {
    ("cache", "mru"),
    ("scheduler", "step"),
    ("cache", "base_cache"),
    ("cache", "base_flat"),
    ("model", "deep"),
    ("tracking", "jsonl"),
}
DOCS = [
    "README.md",
    "CONTRIBUTING.md",
    "RELIABILITY.md",
    *(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")),
    *(str(p.relative_to(ROOT)) for p in CONF_DIR.rglob("*.yaml")),
]


def package_strings() -> dict[str, set[str]]:
    """Every string constant of the package (f-strings' literal parts too), by the file it is in."""
    out: dict[str, set[str]] = {}
    for f in sorted((ROOT / "tcgexp").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.setdefault(str(f.relative_to(ROOT)), set()).add(node.value)
    return out


def sources() -> list[tuple[str, str]]:
    texts = [(where, text) for where, strings in package_strings().items() for text in strings]
    return texts + [(doc, (ROOT / doc).read_text()) for doc in DOCS]


def keys_of(group: str) -> set[str]:
    """Every dotted key under `group` in the composed config of any of its options."""
    out: set[str] = set()

    def walk(node, prefix: str) -> None:
        out.add(prefix)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}.{k}")

    for option in group_options(group):
        cfg = compose(f"{group}={option}")
        walk(OmegaConf.to_container(cfg[group], resolve=False), group)
    return out


def test_every_setting_a_message_or_a_document_names_exists():
    known = {g: keys_of(g) for g in GROUPS}
    named: dict[str, set[str]] = {}
    for where, text in sources():
        for m in KEY.finditer(text):
            named.setdefault(f"{m[1]}.{m[2]}", set()).add(where)
    assert len(named) > 30, "the walk finds the settings messages name"
    unknown = {k: sorted(w) for k, w in named.items() if k not in NOT_SETTINGS and k not in known[k.split(".", 1)[0]]}
    assert not unknown, f"named but not a setting: {unknown}"


def test_every_option_a_message_or_a_document_names_exists():
    named: dict[tuple[str, str], set[str]] = {}
    for where, text in sources():
        for m in OPTION.finditer(text):
            for option in m[2].split(","):
                named.setdefault((m[1], option), set()).add(where)
    assert ("cache", "plan") in named
    unknown = {
        f"{g}={o}": sorted(w) for (g, o), w in named.items() if o not in group_options(g) and (g, o) not in NOT_OPTIONS
    }
    assert not unknown, f"named but not an option: {unknown}"


@pytest.mark.parametrize(
    "text, found",
    [
        ("raise cache.capacity or reduce the column projection", {"cache.capacity"}),
        ("set dataset.storage.tier_budget_bytes=0 to", {"dataset.storage.tier_budget_bytes"}),
        ("resume from epoch_0003/model.safetensors", set()),
    ],
)
def test_the_walk_sees_what_a_user_would_type(text, found):
    assert {f"{m[1]}.{m[2]}" for m in KEY.finditer(text)} - NOT_SETTINGS == found


def test_every_cache_diagnosis_names_a_setting_to_change():
    """The end-of-run advice (each rule of report.diagnose fired) says which setting to turn, by its key."""
    from tcgexp.cache import report

    bad = {
        "accesses": 1000,
        "distinct_keys": 40,
        "warm_hit_rate_pct": 50.0,
        "opt_step_skips": 12,
        "evictions": 500,
        "ssd_hits": 0,
        "spill_errors": 0,
        "spill_disabled": 0,
    }
    lines = report.diagnose("train", bad, policy="lru", capacity=8, spill_dir="/tmp/spill")
    assert len(lines) == 2
    known = {g: keys_of(g) for g in ("cache", "tbptt")}
    for line in lines:
        named = {f"{m[1]}.{m[2]}" for m in KEY.finditer(line)}
        assert named and all(k in known[k.split(".", 1)[0]] for k in named), line
    assert not report.diagnose("train", bad, policy="lru", capacity=0, spill_dir=None), (
        "capacity 0 is no cache (as cache=off): nothing to diagnose"
    )
