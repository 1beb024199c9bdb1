"""The metrics reference page: every name a run's tracker writes, generated from ``tcgexp.train.tracked``."""

from __future__ import annotations

from ..sequence.series import SERIES
from ..train.tracked import WHEN, names
from .config_page import prose

SECTIONS = (  # (heading, the prefix its names start with, what the section adds)
    ("Training: `train/*` and `lr`", ("train/", "lr"), "Means over the rows of the optimizer step's microbatches."),
    (
        "Validation: `val/*`",
        ("val/",),
        "Means over every row of the validation split (split by episode, never by "
        "row); the task returns one of them to a sweeper (`optimized_metric`).",
    ),
    (
        "The train cache: `cache_train/*`",
        ("cache_train/",),
        "The row-group cache the training plan reads through (`cache=<option>`); the same counters as the "
        "validation cache's. Counts run from the process's start (a resumed run counts anew); `resident_*`, "
        "`ssd_resident`, `ssd_bytes` and `memory_pct` are read when they are tracked. A distributed run tracks "
        "the sums over its ranks (rates from the sums, `memory_pct` the highest), then each rank's own.",
    ),
    ("The validation cache: `cache_val/*`", ("cache_val/",), "The validation plan's own cache instance."),
)


def page() -> str:
    """The metrics reference, as Markdown."""
    tracked = names()
    out = [
        "# Metrics reference",
        "",
        "Generated from the code when this site is built (`python -m tcgexp.reference metrics` prints it): "
        "every name a run hands its tracker, what it means and when it is written. With `tracking=aim` each "
        "is an Aim metric of the job's run (`aim up` shows them; the run's `hparams` hold the resolved "
        "config); the run's `result.json` holds the final values and the cache tallies.",
        "",
        "| prefix | when |",
        "|---|---|",
        *(f"| `{p}` | {prose(w)} |" for p, w in WHEN.items()),
        "",
    ]
    out += [
        "## The daily sequence: `day/*`",
        "",
        "`tcgexp-sequence`'s own Aim run, in the sequence's experiment beside its phases' runs: one value per "
        "recorded day, at step = the day's place in the sequence, written when the command ends.",
        "",
        "| name | meaning |",
        "|---|---|",
        *(f"| `{n}` | {prose(m)} |" for n, m in SERIES.items()),
        "",
    ]
    for heading, prefixes, note in SECTIONS:
        rows = [(n, m) for n, (m, _) in tracked.items() if n.startswith(prefixes)]
        out += [
            f"## {heading}",
            "",
            note,
            "",
            "| name | meaning |",
            "|---|---|",
            *(f"| `{n}` | {prose(m)} |" for n, m in rows),
            "",
        ]
    return "\n".join(out)
