"""Every tcgexp command in the README composes as written (a renamed key or group fails here, not for a user).

Hydra apps run with ``--cfg job`` (compose and print, nothing trained; a sweep's first value of
each comma list, since ``--cfg`` cannot be combined with ``--multirun``); the benchmark CLI's
arguments go through its own parser.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APPS = {"tcgexp-train": "tcgexp.train", "tcgexp-data": "tcgexp.data", "tcgexp-replay": "tcgexp.bench.trace",
        "tcgexp-bench": "tcgexp.bench"}


def readme_commands() -> list[list[str]]:
    """Commands in bash blocks, and inline `python -m tcgexp...` / `tcgexp-...` spans of the prose.

    Placeholders (`<run dir>`, `a|b`, `...`) mark a span as a pattern, not a command: skipped.
    """
    text = (ROOT / "README.md").read_text()
    lines = [ln for block in re.findall(r"```bash\n(.*?)```", text, re.S)
             for ln in block.replace("\\\n", " ").splitlines()]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    lines += re.findall(r"`((?:python -m tcgexp|tcgexp-)[^`]*)`", prose)
    out = []
    for line in lines:
        for part in line.split("&&"):
            if any(mark in part for mark in ("<", "|", "...", "$")):
                continue
            words = shlex.split(part, comments=True)
            if words[:1] in (["mlx.launch"], ["tcgexp-launch"]):  # <launcher> [its options] <app> ...: the app composes the same
                apps = [i for i, w in enumerate(words) if w in APPS]
                words = words[apps[0]:] if apps else []
            if words[:2] == ["python", "-m"] and words[2:3] and words[2].startswith("tcgexp"):
                out.append([words[2], *words[3:]])
            elif words and words[0] in APPS:
                out.append([APPS[words[0]], *words[1:]])
    return out


COMMANDS = readme_commands()


def first_of_each_sweep(args: list[str]) -> list[str]:
    """Each sweep override at its first value: a comma list's first, choice()'s first, an interval's start."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, out = OverridesParser.create(), []
    for a in args:
        key, eq, value = a.partition("=")
        if eq and "(" in value and not key.startswith("hydra"):
            o = parser.parse_override(a)
            if o.is_sweep_override():
                first = o.value().start if o.is_interval_sweep() else next(iter(o.sweep_iterator()))
                out.append(f"{key}={first}")
                continue
        if eq and "," in value and not value.startswith(("[", "{", "'", '"')):
            value = value.split(",")[0]
        out.append(f"{key}{eq}{value}" if eq else a)
    return out


def test_the_readme_has_commands():
    assert len(COMMANDS) >= 20


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c)[:80] for c in COMMANDS])
def test_readme_command_composes(command, tmp_path):
    module, args = command[0], command[1:]
    if module not in APPS.values():
        pytest.skip(f"{module} is not a Hydra app or the benchmark CLI")
    if module == "tcgexp.bench" and not args:
        pytest.skip("the benchmark CLI named, not run (it needs a benchmark name)")
    if module == "tcgexp.bench":
        from tcgexp.bench.__main__ import parser

        parser().parse_args(args)  # exits (SystemExit) on an argument the benchmark does not take
        return
    args = [a for a in first_of_each_sweep(args) if a not in ("--multirun", "-m")]
    res = subprocess.run([sys.executable, "-m", module, *args, "--cfg", "job"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, f"{' '.join(command)}:\n{res.stderr[-2000:]}"


# -- figures in the README that the code decides: checked here, so they cannot drift --------------------------
def readme_table(after: str) -> list[list[str]]:
    """The rows (cells stripped) of the first Markdown table from the line starting with `after` on."""
    text = (ROOT / "README.md").read_text()
    rows, seen = [], False
    for line in text[text.index(after):].splitlines():
        if line.startswith("|"):
            seen = True
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif seen:
            break
    return rows[1:]  # the header row left out


def test_the_config_group_table_lists_every_option_and_default_and_only_real_knobs():
    from omegaconf import OmegaConf

    from tcgexp.cli import group_options, primary_defaults
    from tcgexp.config import compose

    defaults = primary_defaults("config")
    rows = {re.sub(r"[`+]", "", r[0]): r for r in readme_table("## Config groups")}
    groups = [g for g in defaults if not g.startswith("hydra")] + ["experiment"]
    assert set(groups) <= set(rows), f"groups missing from the table: {set(groups) - set(rows)}"
    for group in groups:
        _, options, knobs = rows[group]
        listed = re.findall(r"`([a-z0-9_]+)`", options)
        assert sorted(listed) == group_options(group), f"{group}: the README lists {listed}"
        if group in defaults:
            assert f"`{defaults[group]}` (default)" in options or len(listed) == 1, \
                f"{group}: default is {defaults[group]}"
        if group == "experiment":
            continue
        configs = [OmegaConf.to_container(compose(f"{group}={o}")[group]) for o in group_options(group)]
        for knob in re.findall(r"`([a-z_.]+)(?:\.\*)?`", knobs):
            node_ok = any(_has(c, knob.split(".")) for c in configs)
            assert node_ok, f"{group}.{knob} is in the README's table but in no option of {group}"


def _has(node, path: list[str]) -> bool:
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_the_storage_table_gives_the_schemas_defaults():
    from tcgexp.data.store import StorageConfig

    rows = {r[0].strip("`"): r[1] for r in readme_table("| knob (`dataset.storage.`)")}
    assert set(rows) == {f for f in StorageConfig.__dataclass_fields__ if f != "CHECKS"}
    for knob in ("retries", "connect_timeout_s", "request_timeout_s"):
        assert float(rows[knob]) == getattr(StorageConfig, knob), knob
    assert rows["tier_budget_bytes"] == f"{StorageConfig.tier_budget_bytes // 2**30} GiB"


def test_the_readme_does_not_count_the_tests():
    """A test count goes stale with the next test: the README says how to count them instead."""
    text = (ROOT / "README.md").read_text()
    assert not re.search(r"\b\d{2,} tests\b", text)
