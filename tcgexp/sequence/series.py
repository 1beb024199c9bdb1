"""The sequence's own Aim run: one series over days (step = the day's place in the sequence), beside its phases'
runs in the sequence's experiment; what each name means (the metrics reference reads ``SERIES``)."""

from __future__ import annotations

from ..winrate import PREFIX, metric_name

SERIES = {
    "day/val/loss": "the day's canonical model: its phase's final validation loss, on that day's held-out episodes",
    "day/val/accuracy": "the same validation's accuracy (share of rows whose best-scored legal action was played)",
    f"day/{PREFIX}<opponent>": (
        "the day's canonical model's win rate against an opponent of eval.opponents, and against the day before's "
        "canonical model (previous); a game with an arena, sequence.evaluate"
    ),
}


def series(phase: dict) -> dict[str, float]:
    """One recorded day's figures as the sequence's Aim run tracks them."""
    out = {f"day/val/{k}": float(v) for k, v in (phase.get("val") or {}).items() if k in ("loss", "accuracy")}
    for name, t in (phase.get("eval") or {}).items():
        if t.get("games"):
            out[f"day/{metric_name(name)}"] = float(t["win_rate"])
    return out
