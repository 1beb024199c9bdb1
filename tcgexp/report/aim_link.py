"""A link into Aim's metrics explorer that shows a sweep's comparison: its runs, coloured by the swept keys.

Aim's UI keeps an explorer's state in its URL: ``select`` (the query), ``grouping`` (which run params
colour, dash and split the lines) and ``chart``, each as ``O-`` + base64url(encodeURI(JSON)) (Aim 3's
``utils/encoder/encoder.ts``). The link selects the sweep's runs (``run.sweep.id``) on the optimized
metric, and the train cache's bytes decoded, bytes moved and hit rate when the sweep varied the cache or the loader;
one chart per metric, one colour per combination of the swept keys (``seed`` is a replicate: its runs
share their configuration's colour). A key of a config group (``cache``) is coloured by the option's
name (``run.swept.cache``), any other by its value in the run's config (``run.hparams.tbptt.chunk``).
"""

from __future__ import annotations

import base64
import json
import shlex
import urllib.parse
from pathlib import Path

from . import multirun
from .findings import touches_data

UI_PORT = 43800  # `aim up`'s default port
PALETTE = 8  # colours in Aim's first palette
CACHE_CHARTS = ("cache_train/bytes_loaded", "cache_train/bytes_moved", "cache_train/hit_rate_pct")


def aim_state(obj: dict) -> str:
    """Aim UI's URL encoding of explorer state."""
    raw = urllib.parse.quote(json.dumps(obj, separators=(",", ":")), safe="~@#$&()*!+=:;,?/'")
    return "O-" + base64.b64encode(raw.encode()).decode().replace("=", "").replace("+", "-").replace("/", "_")


def aim_metric(optimized: str) -> str:
    """The Aim metric behind ``optimized_metric`` (best/val_loss is the best of val/loss's points)."""
    return "val/loss" if optimized.startswith("best/") else optimized


def metrics_of(cfg, keys: list[str]) -> list[str]:
    return [aim_metric(multirun.optimized_metric(cfg)), *(CACHE_CHARTS if any(map(touches_data, keys)) else ())]


def colour_paths(cfg, keys: list[str]) -> list[str]:
    """Aim's grouping paths of the swept keys: a group's option by name, a value by its config path."""
    choices = multirun.get(cfg, "hydra.runtime.choices") or {}
    out = []
    for key in keys:
        if key == "seed":
            continue
        if key in choices or isinstance(multirun.get(cfg, key), dict):
            out.append(f"run.params.swept.{key}" if key.isidentifier() else f'run.params.swept["{key}"]')
        else:
            out.append(f"run.params.hparams.{key}")
    return out


def query(sweep_id: str, metrics: list[str]) -> str:
    names = " or ".join(f'metric.name == "{m}"' for m in metrics)
    return f'run.sweep.id == "{sweep_id}" and ({names})'


def explorer_path(sweep_dir: Path, keys: list[str], groups: int = 0) -> str:
    """``/metrics?grouping=...&chart=...&select=...`` for the sweep: append it to an ``aim up`` address.
    `groups`: how many colours it needs (past the 8 of Aim's first palette, its second: 24)."""
    cfg = multirun.load(sweep_dir)
    select = {
        "options": [],
        "query": "",
        "advancedMode": True,
        "advancedQuery": query(multirun.sweep_id(sweep_dir, cfg), metrics_of(cfg, keys)),
    }
    grouping = {
        "color": colour_paths(cfg, keys),
        "chart": ["name"],  # the UI merges in the rest
        "paletteIndex": 1 if groups > PALETTE else 0,
    }
    chart = {"legends": {"display": True, "mode": "pinned"}}  # each colour's option written beside the charts
    return f"/metrics?grouping={aim_state(grouping)}&chart={aim_state(chart)}&select={aim_state(select)}"


def link(sweep_dir: Path, keys: list[str], groups: int = 0) -> tuple[str, str] | None:
    """(how to start the UI, the link to open), or None when the sweep did not track (tracking=off)."""
    cfg = multirun.load(sweep_dir)
    where = multirun.tracking(cfg)
    if where is None:
        return None
    path = explorer_path(sweep_dir, keys, groups)
    if "repo" in where:
        return f"aim up --repo {shlex.quote(where['repo'])}", f"http://127.0.0.1:{UI_PORT}{path}"
    host = urllib.parse.urlparse(where["uri"].replace("aim://", "http://", 1)).hostname or "<server>"
    return ("the Aim server's host runs `aim up --repo <its repo> --host 0.0.0.0`", f"http://{host}:{UI_PORT}{path}")
