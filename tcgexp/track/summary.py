"""The sweep report: summary.md, summary.csv and summary.png from the job dirs of a sweep.

Built from what every job leaves on disk (``job_status.json``, ``result.json``,
``.hydra/overrides.yaml``), so it can be rebuilt at any time and a failed or
killed job still gets its row.
"""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

TRIALS = "trials.json"  # a halving sweep's configurations (tcgexp.sweep.results): the report's input there
COLUMNS = ["job", "overrides", "status", "error", "val_loss", "best_val_loss", "val_accuracy",
           "cache_train_hit_pct", "cache_train_misses", "cache_train_evictions", "cache_train_ssd_hits",
           "cache_train_mib_decoded", "cache_val_hit_pct", "cache_val_misses", "cache_val_evictions",
           "cache_val_ssd_hits", "cache_val_mib_decoded", "rows_per_s", "data_stall_pct", "wall_s"]


def job_dirs(sweep_dir: Path) -> list[Path]:
    return sorted((p for p in Path(sweep_dir).iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def job_row(job_dir: Path) -> dict:
    status = _read_json(job_dir / "job_status.json")
    result = _read_json(job_dir / "result.json")
    overrides = status.get("overrides")
    if overrides is None:
        try:
            import yaml

            overrides = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text()) or []
        except (OSError, ValueError):
            overrides = []
    row = {c: "" for c in COLUMNS}
    # job_status.json (the Hydra callback) has the last word; a result.json alone says how its run ended
    ended = {"completed": "COMPLETED", "stopped": "STOPPED", "interrupted": "INTERRUPTED",
             "diverged": "FAILED"}.get(result.get("status"))
    row.update(job=int(job_dir.name), overrides=" ".join(overrides),
               status=status.get("status") or ended or ("COMPLETED" if result else "UNKNOWN"),
               error=status.get("error") or result.get("error") or "")
    if result:
        final = result.get("final") or {}
        row.update(val_loss=final.get("loss", ""), best_val_loss=result.get("best", {}).get("val_loss", ""),
                   val_accuracy=final.get("accuracy", ""), rows_per_s=result.get("rows_per_second", ""),
                   data_stall_pct=100 * result.get("data_stall_share", 0.0), wall_s=result.get("wall_seconds", ""))
        for name in ("train", "val"):
            c = result.get("cache", {}).get(name, {})
            row.update({f"cache_{name}_hit_pct": c.get("hit_rate_pct", ""), f"cache_{name}_misses": c.get("misses", ""),
                        f"cache_{name}_evictions": c.get("evictions", ""),
                        f"cache_{name}_ssd_hits": c.get("ssd_hits", ""),
                        f"cache_{name}_mib_decoded": c.get("bytes_loaded", 0) / 2**20 if c else ""})
    return row


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 10 else f"{v:,.1f}"
    return str(v).replace("|", "\\|")


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # jobs of a parallel sweep may race here
    tmp.write_bytes(data)
    os.replace(tmp, path)


def swept(rows: list[dict]) -> list[str]:
    """Each job's overrides without those every job shares: what the sweep varied."""
    tokens = [r["overrides"].split() for r in rows]
    common = set.intersection(*map(set, tokens)) if len(tokens) > 1 else set()
    return [" ".join(t for t in ts if t not in common) or "(defaults)" for ts in tokens]


def interrupted(rows: list[dict]) -> str:
    """", 1 interrupted (resume= continues it)" when a job was stopped by a signal, else ""."""
    n = sum(r["status"] == "INTERRUPTED" for r in rows)
    return f", {n} interrupted (resume=<job dir> continues it)" if n else ""


def write_summary(sweep_dir: Path) -> list[dict]:
    sweep_dir = Path(sweep_dir)
    rows = [job_row(d) for d in job_dirs(sweep_dir)]
    for r, label in zip(rows, swept(rows)):
        r["swept"] = label
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    _write_atomic(sweep_dir / "summary.csv", buf.getvalue().encode())
    shown = ["job", "swept", "status", "val_loss", "best_val_loss", "val_accuracy", "cache_train_hit_pct",
             "cache_train_misses", "cache_train_evictions", "cache_train_ssd_hits", "cache_train_mib_decoded",
             "cache_val_hit_pct", "rows_per_s", "data_stall_pct", "wall_s"]
    lines = [f"# Sweep {sweep_dir}", "", f"{len(rows)} jobs: "
             f"{sum(r['status'] == 'COMPLETED' for r in rows)} completed, {sum(r['status'] == 'FAILED' for r in rows)} "
             f"failed{interrupted(rows)}. Cache columns are the train instance unless marked val; MiB decoded counts Parquet decodes "
             "only; `swept` lists each job's overrides less those all jobs share (summary.csv has them all).",
             "", "| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(_fmt(r[c]) for c in shown) + " |" for r in rows]
    failed = [r for r in rows if r["error"]]
    if failed:
        lines += ["", "## Failed jobs", ""] + [f"- job {r['job']} ({r['swept']}): {r['error']}" for r in failed]
    _write_atomic(sweep_dir / "summary.md", ("\n".join(lines) + "\n").encode())
    _write_atomic(sweep_dir / "summary.png", plot(rows))
    return rows


PANELS = (("val_loss", "validation loss (final)", "{:.3f}"),
          ("cache_train_hit_pct", "train cache hit rate %", "{:.1f}"),
          ("rows_per_s", "rows/s (train)", "{:,.0f}"),
          ("data_stall_pct", "data stall % (train)", "{:.1f}"),
          ("cache_train_mib_decoded", "MiB decoded (train cache)", "{:,.1f}"))


def plot(rows: list[dict]) -> bytes:
    """One bar chart per panel, a bar per job. Validation loss is identical across cache policies by
    design; rows/s, data stall and MiB decoded are where they differ. A job that did not complete has
    no bar: its status, in red, instead (never a bar of 0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['job']}: {r['swept']}" for r in rows]
    fig, grid = plt.subplots(2, 3, figsize=(15, 2 * (0.4 * max(len(rows), 4) + 1.2)), sharey=True)
    axes = list(grid.flat)
    note = axes.pop()  # the sixth cell: how to read the panels
    note.axis("off")
    note.text(0.02, 0.5, "Validation loss is the same for every cache\npolicy by design: the cache never changes\n"
              "what the trainer computes. Rows/s, data stall\nand MiB decoded are where policies differ.\n\n"
              "A job that did not complete has no bar:\nits status, in red.", transform=note.transAxes,
              va="center", fontsize=9)
    for ax, (key, title, fmt) in zip(axes, PANELS):
        ok = [r["status"] == "COMPLETED" and isinstance(r[key], (int, float)) for r in rows]
        values = [float(r[key]) if good else 0.0 for r, good in zip(rows, ok)]
        top = max([v for v, good in zip(values, ok) if good] or [1.0]) or 1.0
        for i, (r, v, good) in enumerate(zip(rows, values, ok)):
            if good:
                ax.barh(i, v, color="tab:blue")
                ax.text(v, i, " " + fmt.format(v), va="center", fontsize=8)
            else:
                label = r["status"] if r["status"] != "COMPLETED" else "n/a"
                ax.text(0, i, f" {label}", va="center", fontsize=8, color="tab:red", fontweight="bold")
        ax.set_xlim(0, top * 1.3)
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
    for ax in (axes[0], axes[3]):  # the first column of each row
        ax.set_yticks(range(len(rows)), labels, fontsize=8)
        ax.tick_params(axis="y", labelleft=True)
        for tick, r in zip(ax.get_yticklabels(), rows):
            if r["status"] != "COMPLETED":
                tick.set_color("tab:red")
    axes[0].set_ylim(len(rows) - 0.5, -0.5)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
