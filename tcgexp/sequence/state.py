"""``sequence.json``: what a sequence has done, phase by phase, written whole (fsynced, renamed) after each step.

A phase is recorded once its canonical model is in place: the day, the days it trained on and their
fingerprints, the config values that shaped it (the pinned keys, ``lifecycle.provenance.pinned``), the canonical
weights' sha256, its metrics and evaluation, what was cleaned. The same command again skips every recorded
phase (and says so); one whose settings now differ is refused by key, never silently trained again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..data.manifest import write_json_atomic
from ..errors import ConfigError

NAME = "sequence.json"
FORMAT = 1


def leaves(values: dict, prefix: str = "") -> dict:
    """{dotted key: value} of nested dicts (a node compared whole is said key by key)."""
    out = {}
    for k, v in values.items():
        if isinstance(v, dict) and v:
            out.update(leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@dataclass
class State:
    folder: Path
    phases: list[dict] = field(default_factory=list)
    aim_hash: str | None = None  # the sequence's own Aim run (its series over days)

    @classmethod
    def read(cls, folder: Path) -> State:
        path = folder / NAME
        if not path.exists():
            return cls(folder)
        try:
            data = json.loads(path.read_text())
            phases = data["phases"]
            assert isinstance(phases, list) and all(isinstance(p, dict) and "day" in p for p in phases)
        except (ValueError, KeyError, AssertionError, TypeError) as exc:
            raise ConfigError(
                f"{path} cannot be read ({type(exc).__name__}: {exc}); it is no sequence's state: restore it, or "
                "start the sequence in another sequence.folder"
            ) from None
        return cls(folder, phases, data.get("aim_hash"))

    def write(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.folder / NAME, {"format": FORMAT, "phases": self.phases, "aim_hash": self.aim_hash})

    def recorded(self, day: str) -> dict | None:
        return next((p for p in self.phases if p["day"] == day), None)

    def record(self, phase: dict) -> None:
        self.phases = [p for p in self.phases if p["day"] != phase["day"]] + [phase]
        self.write()

    def check_days(self, days: list[str]) -> None:
        """The recorded days are the first of `days`, in order: days may be added, none changed or dropped."""
        done = [p["day"] for p in self.phases]
        if days[: len(done)] != done:
            raise ConfigError(
                f"{self.folder / NAME} has recorded the days {', '.join(done)}, and sequence.days="
                f"[{','.join(days)}] does not start with them: a recorded day is never trained again or dropped; "
                f"list them first (sequence.days=[{','.join(done + [d for d in days if d not in done])}]), "
                "or start another sequence.folder"
            )

    def check_settings(self, day: str, pinned: dict) -> None:
        """A recorded phase's settings are this command's for it: else refused by key."""
        was, now = leaves(self.recorded(day)["pinned"]), leaves(pinned)
        diffs = [
            f"{k}: {was.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k)
        ]
        if diffs:
            raise ConfigError(
                f"{self.folder / NAME}: day {day} was trained with other settings ({'; '.join(diffs[:5])}"
                + (f"; and {len(diffs) - 5} more" if len(diffs) > 5 else "")
                + "): a recorded day is never retrained; restore its settings, or start another sequence.folder"
            )
