"""summary.png: each metric that matters against each key the sweep varied, fitted to what was swept.

A grid: a panel per swept key and metric (the objective for every key; decoded MiB, hit rate, data
stall and rows/s for a cache or loader key), but never one of a metric the key cannot change (its
values bit-identical across the options: val/loss across cache policies; a note says so). Each job is a
faint point; each option's mean over its seeds (of its mean over the other swept keys) carries its
95 % interval (Student's t) when two or more seeds completed it, else the range of its jobs; the
legend states the true counts. Numbers sit on their own axis (log when they span a decade), categories
side by side; axes fitted to the data, never from 0.

A halving sweep: configurations compared at equal budget, one colour per rung (each configuration drawn
at every rung it reached, with its seeds' interval), the best starred; a last panel draws every
configuration's objective epoch by epoch. A job that did not finish has no point; its status is written.
"""

from __future__ import annotations

import io
import math

from .findings import Metric, metrics_for, touches_data
from .stats import mean_interval
from .sweep_findings import cells_of, label, layout, unchanged, value_of

CACHE_NOTE = (
    "The cache never changes what the trainer computes: jobs that differ only in their cache "
    "policy have the same validation loss. Hit rate, MiB decoded and moved, rows/s and data stall are "
    "where policies differ."
)
TITLES = {
    "cache_train_mib_decoded": "MiB decoded (train cache)",
    "cache_train_mib_moved": "MiB moved (train cache: decoded + spill reads)",
    "cache_train_hit_pct": "train cache hit rate %",
    "data_stall_pct": "data stall % (train)",
    "rows_per_s": "rows/s (train)",
}


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def counts(ns: list[int]) -> str:
    """ "3", or "2-3" when options differ (a failed job)."""
    return str(min(ns)) if min(ns) == max(ns) else f"{min(ns)}-{max(ns)}"


def plot(rows: list[dict], meta: dict[str, dict], trials: dict | None, optimized: Metric) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in meta if k != "seed"]
    notes: list[str] = []
    if trials:
        panels = [(k, optimized) for k in keys or [None]]
    else:
        # a key whose every job has one value (fixed on the command line over a preset's sweep) varies nothing
        varied = [k for k in keys if len({label(r["params"][k]) for r in rows if k in r["params"]}) > 1]
        panels = []
        for k in varied or [None]:
            for m in metrics_for(k, optimized) if k else [optimized]:
                if k and unchanged(rows, keys, k, m.name):
                    notes.append(f"No panel of {m.name} against {k}: it is bit-identical across {k}'s options.")
                else:
                    panels.append((k, m))
    n = len(panels) + (1 if trials else 0)
    if n == 0:  # every metric the same for every option: the picture is the notes (the findings say it too)
        return text_only(["Nothing to draw: every metric is the same for every option.", *notes])
    cols = min(3, n)
    fig, grid = plt.subplots(
        math.ceil(n / cols), cols, figsize=(5.2 * cols, 3.9 * math.ceil(n / cols) + 0.5), squeeze=False
    )
    axes = list(grid.flat)
    for ax, (key, metric) in zip(axes, panels):
        if trials:
            rung_panel(ax, rows, trials, key, meta.get(key, {}))
        else:
            grid_panel(ax, rows, keys, key, meta.get(key, {}) if key else {"categorical": True}, metric)
    if trials:
        curves_panel(axes[len(panels)], rows, trials["metric"], trials["rungs"])
    for ax in axes[n:]:
        ax.axis("off")
    if any(map(touches_data, keys)):
        notes.insert(0, CACHE_NOTE)
    unfinished = [r for r in rows if r.get("value") is None]
    if unfinished:
        notes.append(
            "no point: "
            + ", ".join(f"{'trial' if trials else 'job'} {r['job']} {r['status']}" for r in unfinished[:8])
            + (" ..." if len(unfinished) > 8 else "")
        )
    if notes:
        fig.text(0.01, 0.005, "\n".join(notes), fontsize=8, color="dimgray", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.035 * len(notes), 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def text_only(notes: list[str]) -> bytes:
    """summary.png when there is no panel to draw: what the sweep found instead, in words (never a stale
    picture of an earlier state, never an empty figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(8, 0.6 + 0.3 * len(notes)))
    fig.text(0.02, 0.5, "\n".join(notes), fontsize=10, va="center", wrap=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def fit_y(ax, values: list[float], bars: list[tuple[float, float]]) -> None:
    """The y axis fitted to the points (never from 0); an interval from few seeds can be far wider (t is 12.7
    for two): its bar then runs past the panel, and the panel says so."""
    lo, hi = min(values), max(values)
    pad = 0.15 * (hi - lo) or 0.05 * abs(hi) or 1.0
    reach = 2 * (hi - lo + 2 * pad)  # bars are shown whole up to twice the points' own span either side
    bottom = max(min([lo - pad, *(b for b, _ in bars)]), lo - reach)
    top = min(max([hi + pad, *(t for _, t in bars)]), hi + reach)
    ax.set_ylim(bottom, top)
    if any(b < bottom or t > top for b, t in bars):
        ax.text(
            0.99,
            0.01,
            "a 95 % bar runs past the panel (few seeds: wide)",
            ha="right",
            va="bottom",
            transform=ax.transAxes,
            fontsize=7,
            color="dimgray",
        )


def _axis(ax, key: str | None, meta: dict, options: list[str], values: dict[str, float]) -> dict[str, float]:
    """Each option's x: its index (categories), or its value on a linear or log axis."""
    if key is None or meta.get("categorical", True):
        ax.set_xticks(range(len(options)), options, fontsize=8, rotation=30 if max(map(len, options)) > 6 else 0)
        ax.set_xlim(-0.6, len(options) - 0.4)
        return {o: float(i) for i, o in enumerate(options)}
    xs = [float(values[o]) for o in options]
    if meta.get("log"):
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        ax.set_xscale("log")
        decades = math.log10(max(xs) / min(xs))  # 1, 2, 5 per decade on a short axis, decades on a long one
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0) if decades <= 2 else (1.0,), numticks=8))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # on any range
        ax.xaxis.set_minor_formatter(NullFormatter())
    lo, hi = min(xs), max(xs)
    if meta.get("log"):  # a decade's margin each side: the points never sit on the frame
        ax.set_xlim(lo / 10 ** (0.15 * (math.log10(hi / lo) or 2)), hi * 10 ** (0.15 * (math.log10(hi / lo) or 2)))
    else:  # one value alone would give matplotlib an empty range (and a warning): a margin of its own size
        pad = 0.1 * (hi - lo) or 0.1 * abs(lo) or 1.0
        ax.set_xlim(lo - pad, hi + pad)
    ax.set_xlabel(key + (" (log)" if meta.get("log") else ""), fontsize=9)
    return {o: float(values[o]) for o in options}


def grid_panel(ax, rows: list[dict], keys: list[str], key: str | None, meta: dict, metric: Metric) -> None:
    """`metric` against `key`'s options: the jobs, and each option's mean over seeds with its interval."""
    name = metric.name
    ax.set_title(f"{TITLES.get(name, name)} vs {key or 'job'}", fontsize=10)
    ax.set_ylabel(f"{TITLES.get(name, name)} ({'higher' if metric.higher else 'lower'} is better)", fontsize=8)
    ax.tick_params(labelsize=8)
    shown = [r for r in rows if value_of(r, name) is not None and (key is None or key in r["params"])]
    if not shown:
        ax.text(0.5, 0.5, "no finished job", ha="center", va="center", transform=ax.transAxes, color="tab:red")
        ax.set_xticks([])
        ax.set_yticks([])
        return
    if key is None:  # a sweep of one job, or of seeds only
        x = {str(r["job"]): float(i) for i, r in enumerate(shown)}
        _axis(ax, None, meta, list(x), {})
        ax.plot(
            list(x.values()), [value_of(r, name) for r in shown], "o", color="tab:blue", label=f"jobs ({len(shown)})"
        )
        ax.legend(fontsize=7, loc="best")
        return
    others, combos, seeds, options = layout(shown, keys, key)
    every = layout([r for r in rows if key in r["params"]], keys, key)[3]  # a failed option keeps its place
    raw = {label(r["params"][key]): r["params"][key] for r in rows if key in r["params"]}
    x = _axis(ax, key, meta, every, raw)
    jobs = {o: [value_of(r, name) for r in shown if label(r["params"][key]) == o] for o in options}
    spread = 0.18 if meta.get("categorical", True) else 0.0
    for o in options:
        ax.plot(
            [x[o] + spread * (((i * 0.618) % 1.0) - 0.5) for i in range(len(jobs[o]))],
            jobs[o],
            "o",
            color="tab:blue",
            alpha=0.35,
            ms=4,
        )
    ax.plot(
        [],
        [],
        "o",
        color="tab:blue",
        alpha=0.35,
        ms=4,
        label=f"jobs ({counts([len(v) for v in jobs.values()])} per option)",
    )
    seeds_done = {
        o: [math.fsum(v) / len(v) for v in cells_of(shown, key, o, others, combos, name, seeds).values()]
        for o in options
    }
    with_ci = [o for o in options if len(seeds_done[o]) >= 2]
    bars = []
    for o in with_ci:
        mean, half = mean_interval(seeds_done[o])
        ax.errorbar(x[o], mean, yerr=half, fmt="_", color="black", ms=14, capsize=4, zorder=4)
        bars.append((mean - half, mean + half))
    if with_ci:
        over = f" of {counts([len(combos)])} {', '.join(others)} values," if others else ""
        ax.plot(
            [],
            [],
            "_",
            color="black",
            ms=14,
            label=f"mean{over} ± 95 % over {counts([len(seeds_done[o]) for o in with_ci])} seeds",
        )
    ranged = [o for o in options if o not in with_ci and len(jobs[o]) >= 2]
    for o in ranged:  # one seed: no interval; the bar is the jobs' range (over the other keys)
        vals = jobs[o]
        mean = math.fsum(vals) / len(vals)
        ax.errorbar(
            x[o],
            mean,
            yerr=[[mean - min(vals)], [max(vals) - mean]],
            fmt="_",
            color="tab:orange",
            ms=14,
            capsize=4,
            zorder=4,
        )
    if ranged:
        ax.plot(
            [],
            [],
            "_",
            color="tab:orange",
            ms=14,
            label=f"mean, bar: range of {counts([len(jobs[o]) for o in ranged])} jobs (one seed: no interval)",
        )
    fit_y(ax, [v for vals in jobs.values() for v in vals], bars)
    lost = [o for o in every if o not in options]  # no finished job: marked where its point would be, at the foot
    for o in lost:
        mine = [r for r in rows if key in r["params"] and label(r["params"][key]) == o]
        ended = [r for r in mine if r.get("status") in ("FAILED", "KILLED")]
        why = "diverged" if ended and all(r.get("diverged") for r in ended) else ("failed" if ended else "no result")
        ax.plot(x[o], 0.04, "x", color="tab:red", ms=9, mew=2, transform=ax.get_xaxis_transform(), clip_on=False)
        ax.annotate(
            f"{why} ({len(ended)}/{len(mine)})",
            (x[o], 0.09),
            xycoords=ax.get_xaxis_transform(),
            ha="center",
            fontsize=7,
            color="tab:red",
        )
    ax.legend(fontsize=7, loc="best")


def rung_panel(ax, rows: list[dict], trials: dict, key: str | None, meta: dict) -> None:
    """A halving sweep's objective against `key`, each configuration at every rung it reached: compare
    within a colour (equal budget). The interval is its seeds' (two or more)."""
    import matplotlib

    metric, rungs = trials["metric"], trials["rungs"]
    ax.set_title(f"{metric} vs {key} at each rung", fontsize=10)
    ax.set_ylabel(metric, fontsize=9)
    ax.tick_params(labelsize=8)
    points = [
        (r, t) for r, t in zip(rows, trials["trials"]) if t["seed_values"] and (key is None or key in r["params"])
    ]
    if not points:
        ax.text(0.5, 0.5, "no finished rung", ha="center", va="center", transform=ax.transAxes, color="tab:red")
        return
    options = sorted({label(r["params"][key]) for r, _ in points}, key=lambda o: (_num(o) is None, _num(o) or 0, o))
    x = _axis(ax, key, meta, options, {label(r["params"][key]): r["params"][key] for r, _ in points})
    categorical = meta.get("categorical", True)
    means, bars = [], []
    for k, budget in enumerate(rungs):
        colour = matplotlib.colormaps["viridis"](0.85 * k / max(len(rungs) - 1, 1))
        here = [(r, t["seed_values"][str(budget)]) for r, t in points if str(budget) in t["seed_values"]]
        for r, values in here:
            mean, half = mean_interval(values)
            pos = x[label(r["params"][key])] + (0.15 * (k - (len(rungs) - 1) / 2) if categorical else 0.0)
            ax.errorbar(pos, mean, yerr=half, fmt="o", color=colour, ms=5, capsize=3)
            means.append(mean)
            if half is not None:
                bars.append((mean - half, mean + half))
            if r.get("best") and budget == rungs[-1]:
                ax.plot(pos, mean, marker="*", ms=16, color="gold", mec="black", zorder=5)
        if here:
            ci = f", ± 95 % over {trials['seeds']} seeds" if trials["seeds"] > 1 else ""
            ax.plot(
                [],
                [],
                "o",
                color=colour,
                label=f"{budget} epoch{'s' if budget != 1 else ''}: {len(here)} "
                f"configuration{'s' if len(here) != 1 else ''}{ci}",
            )
    ax.plot([], [], "*", ms=12, color="gold", mec="black", label="best (full budget)")
    fit_y(ax, means, bars)
    ax.legend(fontsize=7, loc="best")


def _num(option: str) -> float | None:
    try:
        return float(option)
    except ValueError:
        return None


def curves_panel(ax, rows: list[dict], metric: str, rungs: list[int]) -> None:
    """Each configuration's objective after every epoch it trained: pruned lines end at their rung."""
    import matplotlib

    ax.set_title(f"{metric} by epoch (rungs at {', '.join(map(str, rungs))})", fontsize=10)
    for r in rows:
        c = r.get("curve") or []
        if not c:
            continue
        rung = rungs.index(len(c)) if len(c) in rungs else 0
        colour = matplotlib.colormaps["viridis"](0.85 * rung / max(len(rungs) - 1, 1))
        ax.plot(
            range(1, len(c) + 1),
            c,
            color=colour,
            lw=2.2 if r.get("best") else 0.9,
            alpha=1.0 if r.get("best") else 0.7,
            marker=".",
            ms=3,
        )
        ax.plot(len(c), c[-1], marker="o" if r["status"] == "COMPLETE" else "x", color=colour, ms=6)
    for e in rungs:
        ax.axvline(e, color="lightgray", lw=0.8, zorder=0)
    ax.set_xlabel("epochs", fontsize=9)
    ax.set_ylabel(metric, fontsize=9)
    ax.tick_params(labelsize=8)
    ax.margins(y=0.08)
