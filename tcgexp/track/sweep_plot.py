"""summary.png: the objective against each key the sweep varied, fitted to what was swept.

One panel per swept key: numbers on their own axis (log for log-sampled keys, and for a grid's numbers
that span a decade), categories side by side with the mean of their full-budget results (and its 95 %
interval from three results on); every axis fitted to the data, never from 0. In a halving sweep each configuration is drawn at
its last rung (pruned ones marked there, by rung), the best is starred, and a last panel shows every
configuration's objective epoch by epoch. The cache's panels (hit rate, MiB decoded, rows/s, data stall)
and the sentence on reading them come only when the sweep varied the cache. A job that did not finish
has no point; its status is written instead.
"""
from __future__ import annotations

import io
import math
from typing import Optional

from .summary import mean_interval

CACHE_PANELS = (("cache_train_hit_pct", "train cache hit rate %", "{:.1f}"),
                ("cache_train_mib_decoded", "MiB decoded (train cache)", "{:,.1f}"),
                ("rows_per_s", "rows/s (train)", "{:,.0f}"),
                ("data_stall_pct", "data stall % (train)", "{:.1f}"))
CACHE_NOTE = ("The cache never changes what the trainer computes: jobs that differ only in their cache "
              "policy have the same validation loss. Hit rate, MiB decoded, rows/s and data stall are where "
              "policies differ.")


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def label(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def plot(rows: list[dict], meta: dict[str, dict], trials: Optional[dict], cached: bool) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(meta) or [None]
    panels = len(keys) + (1 if trials else 0) + (len(CACHE_PANELS) if cached else 0)
    cols = min(3, panels)
    nrows = math.ceil(panels / cols)
    fig, grid = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.9 * nrows + (0.5 if cached else 0)), squeeze=False)
    axes = list(grid.flat)
    metric = trials["metric"] if trials else "val/loss (final)"
    rungs = trials["rungs"] if trials else None
    for ax, key in zip(axes, keys):
        objective_panel(ax, rows, key, meta.get(key, {}), metric, rungs)
    at = len(keys)
    if trials:
        curves_panel(axes[at], rows, metric, rungs)
        at += 1
    if cached:
        for ax, panel in zip(axes[at:], CACHE_PANELS):
            bars_panel(ax, rows, *panel)
        at += len(CACHE_PANELS)
    for ax in axes[at:]:
        ax.axis("off")
    unfinished = [r for r in rows if r.get("value") is None]
    notes = ([CACHE_NOTE] if cached else []) + ([
        "no point: " + ", ".join(f"{'trial' if trials else 'job'} {r['job']} {r['status']}" for r in unfinished[:8])
        + (" ..." if len(unfinished) > 8 else "")] if unfinished else [])
    if notes:
        fig.text(0.01, 0.005, "\n".join(notes), fontsize=8, color="dimgray", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.04 * len(notes), 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _style(r: dict, rungs: Optional[list[int]]):
    """(marker, colour, legend label) of a point: by rung in a halving sweep."""
    import matplotlib

    if rungs is None:
        return "o", "tab:blue", None
    top = len(rungs) - 1
    rung = rungs.index(r["epochs"]) if r["epochs"] in rungs else 0
    colour = matplotlib.colormaps["viridis"](0.85 * rung / max(top, 1))
    if r["status"] == "COMPLETE":
        return "o", colour, f"complete ({r['epochs']} epochs)"
    return "x", colour, f"pruned at {r['epochs']} epoch{'s' if r['epochs'] != 1 else ''}"


def objective_panel(ax, rows: list[dict], key: Optional[str], meta: dict, metric: str,
                    rungs: Optional[list[int]]) -> None:
    shown = [r for r in rows if _finite(r.get("value")) and (key is None or key in r["params"])]
    ax.set_title(f"{metric} vs {key}" if key else f"{metric} per job", fontsize=10)
    ax.set_ylabel(metric, fontsize=9)
    ax.tick_params(labelsize=8)
    if not shown:
        ax.text(0.5, 0.5, "no finished job", ha="center", va="center", transform=ax.transAxes, color="tab:red")
        return
    categorical = key is None or meta.get("categorical", False)
    if categorical:
        cats = sorted({label(r["params"][key]) if key else str(r["job"]) for r in shown},
                      key=lambda c: (not c.replace(".", "", 1).isdigit(), float(c) if c.replace(".", "", 1).isdigit()
                                     else 0, c))
        pos = {c: i for i, c in enumerate(cats)}
    seen = set()
    for i, r in enumerate(shown):
        marker, colour, name = _style(r, rungs)
        if categorical:
            c = label(r["params"][key]) if key else str(r["job"])
            x = pos[c] + 0.18 * (((i * 0.618) % 1.0) - 0.5)  # spread, the same every time
        else:
            x = r["params"][key]
        ax.errorbar(x, r["value"], yerr=r.get("interval") or None, fmt=marker, color=colour, ms=6, capsize=3,
                    label=name if name not in seen else None)
        seen.add(name)
        if r.get("best"):
            ax.plot(x, r["value"], marker="*", ms=16, color="gold", mec="black", zorder=5,
                    label="best" if "best" not in seen else None)
            seen.add("best")
    if categorical:
        full = max(r.get("epochs") or 0 for r in shown) if rungs else None
        for c, p in pos.items():  # each category's full-budget results: mean and 95 % interval
            vals = [r["value"] for r in shown if (label(r["params"][key]) if key else str(r["job"])) == c
                    and (full is None or r.get("epochs") == full)]
            if len(vals) >= 2:  # two values give an interval (t = 12.7) wider than it says: the mean alone
                mean, half = mean_interval(vals)
                ax.errorbar(p + 0.3, mean, yerr=half if len(vals) >= 3 else None, fmt="_", color="black", ms=14,
                            capsize=4, label="category mean (± 95 % from 3 results)" if "cat" not in seen else None)
                seen.add("cat")
        ax.set_xticks(range(len(cats)), cats, fontsize=8, rotation=30 if max(map(len, cats)) > 6 else 0)
        ax.set_xlim(-0.6, len(cats) - 0.4)
    else:
        if meta.get("log"):
            from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # 1, 2, 5 per decade: a tick or more
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # on any range
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(key + (" (log)" if meta.get("log") else ""), fontsize=9)
    ax.margins(y=0.12)
    if seen - {None}:
        ax.legend(fontsize=7, loc="best")


def curves_panel(ax, rows: list[dict], metric: str, rungs: list[int]) -> None:
    """Each configuration's objective after every epoch it trained: pruned lines end at their rung."""
    ax.set_title(f"{metric} by epoch (rungs at {', '.join(map(str, rungs))})", fontsize=10)
    for r in rows:
        c = r.get("curve") or []
        if not c:
            continue
        marker, colour, _ = _style(r, rungs)
        ax.plot(range(1, len(c) + 1), c, color=colour, lw=2.2 if r.get("best") else 0.9,
                alpha=1.0 if r.get("best") else 0.7, marker=".", ms=3)
        ax.plot(len(c), c[-1], marker=marker, color=colour, ms=6)
    for e in rungs:
        ax.axvline(e, color="lightgray", lw=0.8, zorder=0)
    ax.set_xlabel("epochs", fontsize=9)
    ax.set_ylabel(metric, fontsize=9)
    ax.tick_params(labelsize=8)
    ax.margins(y=0.08)


def bars_panel(ax, rows: list[dict], key: str, title: str, fmt: str) -> None:
    """A bar per job (counters start at 0); a job that did not complete: its status, in red."""
    names = [f"{r['job']}: {r.get('swept') or r.get('overrides', '')}"[:40] for r in rows]
    top = max([float(r[key]) for r in rows if _finite(r.get(key))] or [1.0]) or 1.0
    for i, r in enumerate(rows):
        if _finite(r.get(key)) and r.get("value") is not None:
            ax.barh(i, float(r[key]), color="tab:blue")
            ax.text(float(r[key]), i, " " + fmt.format(float(r[key])), va="center", fontsize=7)
        else:
            ax.text(0, i, f" {r['status']}", va="center", fontsize=7, color="tab:red", fontweight="bold")
    ax.set_xlim(0, top * 1.35)
    ax.set_yticks(range(len(rows)), names, fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_title(title, fontsize=10)
    ax.tick_params(axis="x", labelsize=8)
