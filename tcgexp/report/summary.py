"""The sweep report: findings.json, summary.md, summary.csv and summary.png, fitted to what the sweep varied.

Built from what every job leaves on disk (``job_status.json``, ``result.json``,
``.hydra/overrides.yaml``; a halving sweep's ``trials.json``), so it can be rebuilt
at any time and a failed or killed job still gets its row. A grid sweep has a row
per job, a halving sweep a row per configuration (its trial). The plot
(``sweep_plot.py``) draws the objective against each swept key; the cache's
columns and panels appear only when the sweep varied the cache.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..ownership import held_by_someone
from ..track.context import distinct_overrides, swept_keys
from ..track.context import short as short_override
from . import multirun
from .confounds import confounded
from .findings import NO_INTERVAL, Metric, objective
from .jobs import (  # noqa: F401 (callers read a job's row from here)
    COLUMNS,
    _read_json,
    eval_metrics,
    job_dirs,
    job_row,
    no_record,
    not_finite,
    seed_of,
    typed,
    unreadable,
    win_rate_metrics,
)
from .no_findings import why_none
from .sweep_findings import grid_findings, halving_findings, label, short, value_of
from .unread import case_lines, mark, unreadable_rows
from .unread import markdown as unread_md
from .words import markdown

SWEEP_LOCK = ".tcgexp-sweep.lock"  # held by a sweep while it runs in its folder (tcgexp.sweep.identity.LOCK is this)
FINDINGS, SUMMARY = "findings.json", "summary.md"  # the report's files (summary.csv, summary.png beside)
TRIALS = "trials.json"  # a halving sweep's configurations (tcgexp.sweep.results): the report's input there


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if v and abs(v) < 0.01:
            return f"{v:.4g}"  # a learning rate: its significant digits, not 17 of them
        return f"{v:.4f}" if abs(v) < 10 else f"{v:,.1f}"
    return str(v).replace("|", "\\|")


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # jobs of a parallel sweep may race here
    tmp.write_bytes(data)
    os.replace(tmp, path)


def swept(rows: list[dict]) -> list[str]:
    """Each job's overrides without those every job shares: what the sweep varied."""
    tokens = [r["overrides"].split() for r in rows]
    common = set.intersection(*map(set, tokens)) if len(tokens) > 1 else set()

    return [" ".join(short_override(t) for t in ts if t not in common) or "(defaults)" for ts in tokens]


def interrupted(rows: list[dict]) -> str:
    """ ", 1 interrupted (resume= continues it)" when a job was stopped by a signal, else ""."""
    n = sum(r["status"] == "INTERRUPTED" for r in rows)
    return f", {n} interrupted (resume=<job dir> continues it)" if n else ""


SAID = ("COMPLETED", "FAILED", "INTERRUPTED", "COMPLETE", "PRUNED", "RUNNING", "WAITING")  # counted on their own


def others(rows: list[dict]) -> str:
    """ ", 1 missing, 1 damaged" for the rows whose status the header does not count otherwise (missing folders,
    unreadable results, NaN, killed, not started), else ""."""
    counts: dict[str, int] = {}
    for r in rows:
        status = str(r["status"])
        if status not in SAID and not status.startswith("pruned"):
            counts[status.lower()] = counts.get(status.lower(), 0) + 1
    order = ("missing", "damaged", "nan", "killed", "running", "not started")
    ranked = sorted(counts, key=lambda k: (order.index(k) if k in order else len(order), k))
    return "".join(f", {counts[status]} {status}" for status in ranked)


def read_trials(sweep_dir: Path) -> dict:
    """A halving sweep's trials.json (tcgexp.sweep.results), or {} for any other sweep."""
    return _read_json(Path(sweep_dir) / TRIALS)


def grid_params(sweep_dir: Path, rows: list[dict]) -> dict[str, dict]:
    """Each row's swept values (row["params"]) and, per swept key, how to draw it: numbers on a log axis
    when they span a decade or more, anything else as categories."""

    keys = swept_keys(sweep_dir)
    for r in rows:
        r["params"] = {
            k.lstrip("+~"): typed(v)
            for k, _, v in (o.partition("=") for o in distinct_overrides(r["overrides"].split(), keys))
        }
    meta: dict[str, dict] = {}
    for r in rows:
        for k in r["params"]:
            meta.setdefault(k, {})
    for k, m in meta.items():
        values = [r["params"][k] for r in rows if k in r["params"]]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        m["categorical"] = not numeric
        m["log"] = numeric and min(values) > 0 and max(values) >= 10 * min(values)
    return meta


def halving_rows(sweep_dir: Path, trials: dict) -> list[dict]:
    """One row per configuration: its trial's state and value, the first seed's run for the rest."""
    rows = []
    for t in trials["trials"]:
        histories = [_read_json(Path(d) / "result.json").get("history") or [] for d in t["run_dirs"]]
        run = Path(t["run_dirs"][0])
        row = job_row(run) if run.is_dir() else {c: "" for c in COLUMNS}
        state = t["state"] if t["state"] != "pruned" else f"pruned at {t['epochs']}"
        status = state.upper() if state in ("complete", "failed", "running", "waiting") else state
        error = t["error"] or ""
        if t["state"] != "running":  # it trained: each of its folders must still say so
            gone = [d for d in t["run_dirs"] if not Path(d).is_dir()]
            damaged = [(d, why) for d in t["run_dirs"] if (why := unreadable(Path(d) / "result.json"))]
            if gone:
                status, error = "MISSING", f"its folder {gone[0]} is gone (deleted or moved), its checkpoints too"
            elif damaged:
                status, error = "DAMAGED", f"{damaged[0][0]}/result.json cannot be read ({damaged[0][1]})"
        row.update(
            job=t["number"],
            overrides=" ".join(f"{k}={short(v)}" for k, v in t["params"].items()),
            status=status,
            error=error,
            params=t["params"],
            value=t["value"],
            interval=t["interval"],
            epochs=t["epochs"],
            epochs_trained=t["epochs_trained"],
            best=t["number"] == trials["best"],
            histories=histories,
            curve=curve(histories, trials["metric"]),
        )
        rows.append(row)
    return rows


def curve(histories: list[list[dict]], metric: str) -> list[float]:
    """The objective after each epoch a configuration trained, the mean over its seeds."""
    prefix, _, key = metric.partition("/")
    per_seed = []
    for history in histories:
        values = [h["val"]["loss" if prefix == "best" else key] for h in history]
        per_seed.append([min(values[: i + 1]) for i in range(len(values))] if prefix == "best" else values)
    n = min((len(v) for v in per_seed), default=0)
    return [sum(v[i] for v in per_seed) / len(per_seed) for i in range(n)]


def cache_swept(keys) -> bool:
    return any(k == "cache" or k.startswith("cache.") for k in keys)


def running(sweep_dir: Path) -> bool:
    """Whether a sweep holds the folder now (``.tcgexp-sweep.lock``: the halving sweeper's, and the sweep
    report's for any other sweeper): a job without a folder may not have started yet."""
    return bool(held_by_someone(Path(sweep_dir) / SWEEP_LOCK))


def grid_rows(sweep_dir: Path, cfg) -> list[dict]:
    """A row per job: each job folder read as it is, and each job the sweep launches (Hydra's basic sweeper)
    whose folder is not there: MISSING (deleted or moved) once a later job has a folder or the sweep is over,
    else NOT STARTED."""
    rows = [job_row(d) for d in job_dirs(sweep_dir)]
    planned = multirun.planned_jobs(cfg)
    if planned:
        have = {r["job"] for r in rows}
        last = max((j for j in have if isinstance(j, int)), default=-1)
        live = running(sweep_dir)
        for num, overrides in enumerate(planned):
            if num in have:
                continue
            row = {c: "" for c in COLUMNS}
            gone = num < last or not live
            row.update(
                job=num,
                overrides=" ".join(overrides),
                status="MISSING" if gone else "NOT STARTED",
                error=f"its folder {Path(sweep_dir) / str(num)} is gone (deleted or moved): its result is lost"
                if gone
                else "",
                seed=seed_of(overrides),
            )
            rows.append(row)
        rows.sort(key=lambda r: r["job"] if isinstance(r["job"], int) else -1)
    return rows


def write_summary(sweep_dir: Path, ended: bool = False) -> list[dict]:
    """The report's files, written into the sweep dir (``summarize`` makes them); the rows they were drawn from.
    `ended`: the sweep's own process says it is over (no job will start)."""
    made = summarize(sweep_dir, ended)
    for name, data in made.files.items():
        write_atomic(Path(sweep_dir) / name, data)
    return made.rows


@dataclass
class Summary:
    rows: list[dict]
    found: list[dict]  # findings.json's rows
    files: dict[str, bytes]  # findings.json, summary.csv, summary.md, summary.png


def summarize(sweep_dir: Path, ended: bool = False) -> Summary:
    """The report of the sweep dir as it is now, in memory: nothing is written (a read-only sweep folder still
    gets it, on the console)."""
    sweep_dir = Path(sweep_dir)
    trials = read_trials(sweep_dir)
    cfg = multirun.load(sweep_dir)
    if trials:
        rows = halving_rows(sweep_dir, trials)
        meta = trials["space"]
    else:
        rows = grid_rows(sweep_dir, cfg)
        meta = grid_params(sweep_dir, rows)
        for r, label in zip(rows, swept(rows)):
            r["swept"] = label
    metric = (
        Metric(trials["metric"], trials["direction"] == "maximize")
        if trials
        else objective(multirun.optimized_metric(cfg))
    )
    found = findings_of(sweep_dir, cfg, rows, trials, meta, metric)
    unread = case_lines(rows, trials)  # said once each, beside the findings they are not part of as they ended
    mark(found, unread)
    none = "" if found else why_none(sweep_dir, rows, trials, meta, metric, ended)
    files = {FINDINGS: (json.dumps(found, indent=2) + "\n").encode()}
    cached = cache_swept(meta)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS + (HALVING_COLUMNS if trials else []), extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    files["summary.csv"] = buf.getvalue().encode()
    lines = halving_md(sweep_dir, rows, trials, meta) if trials else grid_md(sweep_dir, rows, cached)
    # the answer first: the title and its one paragraph, the findings, then the table they come from
    section = markdown(
        found, "halving" if trials else "grid", averaged(meta, rows, trials), none[:1].upper() + none[1:] + "."
    )
    section += unread_md(unread)
    lines = lines[:4] + section + ["## Configurations" if trials else "## Jobs", ""] + lines[4:]
    failed = [r for r in rows if r["error"] and r not in unreadable_rows(rows)]  # those have their line above
    if failed:
        lines += ["", "## Failed jobs", ""] + [
            f"- {'trial' if trials else 'job'} {r['job']} ({r['overrides'] if trials else r['swept']}): {r['error']}"
            for r in failed
        ]
    files[SUMMARY] = ("\n".join(lines) + "\n").encode()
    from .sweep_plot import plot  # here, not at the top: matplotlib costs ~0.5 s of every report's start-up

    files["summary.png"] = plot(rows, meta, trials or None, metric)
    return Summary(rows, found, files)


def findings_of(sweep_dir: Path, cfg, rows: list[dict], trials: dict, meta: dict, metric: Metric) -> list[dict]:
    """findings.json's rows (``sweep_findings``); those without an interval carry the command that re-runs
    the sweep with seeds. A grid's rows get their objective as ``value`` (the plot's)."""
    if trials:
        found = halving_findings(trials, rows, metric)
    else:
        for r in rows:
            r.update(value=value_of(r, metric.name), interval=None)
        keys = [k for k in meta if k != "seed"]
        extra = [m for m in win_rate_metrics(rows) if m.name != metric.name]
        found = grid_findings(rows, keys, multirun.defaults(cfg, keys), metric, extra)
        for f in found:  # a sweep run seed by seed: its throughput rows need no word on the order of its jobs
            f["interleaved"] = multirun.is_interleaved(cfg)
        for key in {f["key"] for f in found}:
            knobs = confounded(sweep_dir, rows, key, keys, label)
            for f in found:
                if f["key"] == key and knobs:
                    f["confounded"] = knobs
    if any(f["verdict"] == NO_INTERVAL for f in found):
        command = multirun.rerun_command(sweep_dir, cfg)
        for f in found:
            if f["verdict"] == NO_INTERVAL:
                f["rerun"] = command
    return found


def averaged(meta: dict, rows: list[dict], trials: dict) -> str:
    """What each grid key's effect is averaged over (a sentence for summary.md), or ""."""
    if trials or len(meta) < 2:
        return ""
    sizes = {k: len({str(r["params"].get(k)) for r in rows}) for k in meta}
    return (
        "Each key's effect is averaged over the other swept keys ("
        + ", ".join(f"{k}: {n} values" for k, n in sizes.items())
        + "), as a factorial ablation is read."
    )


HALVING_COLUMNS = ["value", "interval", "epochs", "epochs_trained"]
CACHE_SHOWN = [
    "cache_train_hit_pct",
    "cache_train_misses",
    "cache_train_evictions",
    "cache_train_ssd_hits",
    "cache_train_mib_decoded",
    "cache_train_mib_moved",
    "cache_val_hit_pct",
]


def grid_md(sweep_dir: Path, rows: list[dict], cached: bool) -> list[str]:
    shown = [
        "job",
        "swept",
        "status",
        "val_loss",
        "best_val_loss",
        "val_accuracy",
        *(CACHE_SHOWN if cached else []),
        "rows_per_s",
        "data_stall_pct",
        "wall_s",
    ]
    note = (
        " Cache columns are the train instance unless marked val; MiB decoded counts Parquet decodes only, MiB moved every byte the cache read (decoded and read back from its spill);"
        " the cache never changes what the trainer computes, so jobs that differ only in their cache policy"
        " have the same validation loss."
        if cached
        else ""
    )
    return [
        f"# Sweep {sweep_dir}",
        "",
        f"{len(rows)} jobs: {sum(r['status'] == 'COMPLETED' for r in rows)} completed, "
        f"{sum(r['status'] == 'FAILED' for r in rows)} failed{interrupted(rows)}{others(rows)}. `swept` lists each job's "
        f"overrides less those all jobs share (summary.csv has them all).{note}",
        "",
        "| " + " | ".join(shown) + " |",
        "|" + "---|" * len(shown),
    ] + ["| " + " | ".join(_fmt(r[c]) for c in shown) + " |" for r in rows]


def halving_md(sweep_dir: Path, rows: list[dict], trials: dict, meta: dict) -> list[str]:
    keys = list(meta)
    ci = trials["seeds"] > 1
    head = ["trial", *keys, "status", "epochs", trials["metric"] + (" (mean ± 95 %)" if ci else ""), "epochs trained"]
    states = [t["state"] if r["status"] not in ("MISSING", "DAMAGED") else "" for t, r in zip(trials["trials"], rows)]
    lines = [
        f"# Halving sweep {sweep_dir}",
        "",
        f"{len(rows)} configurations x {trials['seeds']} seed(s), rungs {', '.join(map(str, trials['rungs']))} "
        f"epochs (eta {trials['eta']}): {states.count('complete')} complete, {states.count('pruned')} pruned "
        f"(at the rung shown), {states.count('failed')} failed, "
        f"{states.count('running') + states.count('waiting')} in progress{others(rows)}. "
        f"{sum(r['epochs_trained'] for r in rows)} epochs trained, against "
        f"{len(rows) * trials['rungs'][-1] * trials['seeds']} for every configuration at full budget. "
        "The value is the one at the trial's last rung.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        value = "" if r["value"] is None else _fmt(r["value"]) + (f" ± {r['interval']:.4f}" if r["interval"] else "")
        lines.append(
            "| "
            + " | ".join(
                [
                    str(r["job"]) + (" **best**" if r["best"] else ""),
                    *(_fmt(r["params"].get(k)) for k in keys),
                    r["status"],
                    str(r["epochs"]),
                    value,
                    str(r["epochs_trained"]),
                ]
            )
            + " |"
        )
    return lines
