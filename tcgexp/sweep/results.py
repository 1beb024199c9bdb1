"""What a halving sweep leaves where users look: optimization_results.yaml, trials.json, Aim marks.

``optimization_results.yaml`` follows Hydra's Optuna sweeper (``name``, ``best_params``, ``best_value``)
and adds the best trial's interval, epochs, run dirs and the command that trains it straight (the same
computation, bit for bit). ``trials.json`` is every configuration as the sweeper sees it; the sweep
report (``tcgexp.report.summary``) is drawn from it. Each trial's Aim run gets its rung and status as
params (``run["trial"]``) and its status (promoted, pruned, complete) as a tag.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ..errors import ConfigError
from ..overrides import command_line
from ..report.summary import TRIALS, write_atomic, write_summary
from ..track.aim_run import mark_run
from . import asha, outcome
from .space import Space, overrides_of

TAGS = ("promoted", "pruned", "complete")  # the trial's status, as the one tag of these it carries (and "rung k")


def epochs_trained(run_dirs: list[str]) -> int:
    """Epochs a configuration trained, over its seeds (what its latest/ checkpoints have done)."""
    return sum(int(((outcome.latest_state(Path(d)) or {}).get("progress") or {}).get("epoch", 0)) for d in run_dirs)


class Outputs:
    def __init__(
        self,
        sweep_dir: Path,
        config: DictConfig,
        space: Space,
        budgets: list[int],
        metric: str,
        direction: str,
        seeds: int,
    ) -> None:
        self.sweep_dir, self.config, self.space, self.budgets = Path(sweep_dir), config, space, budgets
        self.metric, self.direction, self.seeds = metric, direction, seeds
        self.marked: set[str] = set()  # "[tracking] ..." said once per repo

    def row(self, r) -> dict:
        t = r.trial
        reached = t.reached
        values = r.seed_values.get(reached, [])
        mean, half = asha.mean_interval(values) if values else (None, None)
        return {
            "number": t.number,
            "params": r.params,
            "state": t.state,
            "rung": reached,
            "epochs": self.budgets[reached] if reached >= 0 else 0,
            "value": mean,
            "interval": half,
            "seed_values": {str(self.budgets[k]): v for k, v in sorted(r.seed_values.items())},
            "run_dirs": r.run_dirs,
            "epochs_trained": epochs_trained(r.run_dirs),
            "error": r.error,
        }

    def write(self, records: dict, halving: asha.Halving, budgets: list[int]) -> None:
        """trials.json, then the report drawn from it."""
        best = halving.best([r.trial for r in records.values()])
        doc = {
            "kind": "halving",
            "metric": self.metric,
            "direction": self.direction,
            "rungs": budgets,
            "eta": halving.eta,
            "seeds": self.seeds,
            "n_trials": halving.n_trials,
            "space": {
                k: {"log": p.log, "categorical": p.categorical, "typed": p.typed} for k, p in self.space.params.items()
            },
            "best": best.number if best else None,
            "trials": [self.row(r) for _, r in sorted(records.items())],
        }
        write_atomic(self.sweep_dir / TRIALS, json.dumps(doc, indent=2).encode())
        write_summary(self.sweep_dir)

    def mark(self, r, state: str) -> None:
        """The trial's rung and status on each of its Aim runs (local repos; remote runs keep the job's own)."""

        attrs = {
            "trial": {
                "number": r.trial.number,
                "rung": r.trial.rung,
                "epochs": self.budgets[r.trial.rung],
                "status": state,
            }
        }
        for run_dir in r.run_dirs:
            repo, run_hash = self.aim_run_of(Path(run_dir))
            if repo is None or run_hash is None:
                continue
            rung = f"rung {r.trial.rung}"  # rung 0 is the lowest; trial.epochs says its budget
            mark_run(
                repo,
                run_hash,
                attrs,
                tags=(rung, *([state] if state in TAGS else [])),
                untag=tuple(
                    t for t in (*TAGS, *(f"rung {k}" for k in range(len(self.budgets)))) if t not in (state, rung)
                ),
            )

    @staticmethod
    def aim_run_of(run_dir: Path) -> tuple[str | None, str | None]:
        try:
            cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
        except OSError:
            return None, None
        repo = OmegaConf.select(cfg, "tracking.repo")
        if repo is None or "AimTracker" not in str(OmegaConf.select(cfg, "tracking._target_")):
            return None, None  # tracking=off, or a remote server (its runs keep what the job recorded)
        return str(repo), outcome.aim_hash(run_dir)

    def command(self, r) -> str:
        """The command that trains `r`'s configuration straight, as a POSIX shell line (each word quoted where it must
        be: a fixed ``tracking.repo`` in a folder with spaces and accents pastes and runs)."""
        seed = [f"seed={OmegaConf.select(self.config, 'seed')}"] if self.seeds > 1 else []
        return command_line(
            "tcgexp-train", *self.space.fixed, *overrides_of(r.params), f"trainer.epochs={self.budgets[-1]}", *seed
        )

    def finish(self, records: dict, halving: asha.Halving, study) -> None:
        trials = [r.trial for r in records.values()]
        best = halving.best(trials)
        counts = {s: sum(t.state == s for t in trials) for s in (asha.COMPLETE, asha.PRUNED, asha.FAILED)}
        spent = sum(epochs_trained(r.run_dirs) for r in records.values())
        full = len(records) * self.budgets[-1] * self.seeds
        if best is None:
            first = next((r.error for r in records.values() if r.error), "no trial finished a rung")
            raise ConfigError(
                f"every one of the {len(records)} trials failed (the first: {first}); see "
                f"{self.sweep_dir / 'summary.md'}: is the search space trainable (optimizer.lr "
                "too high, a batch too small)?"
            )
        r = records[best.number]
        row = self.row(r)
        doc = {
            "name": "halving",
            "best_params": dict(r.params),
            "best_value": row["value"],
            "best_interval_95": row["interval"],
            "best_trial": best.number,
            "best_epochs": row["epochs"],
            "best_run_dirs": r.run_dirs,
            "best_command": self.command(r),
            "metric": self.metric,
            "direction": self.direction,
            "rungs": self.budgets,
            "study": study.study_name,
            "trials": {"total": len(records), **counts},
            "epochs_trained": spent,
            "epochs_at_full_budget": full,
        }
        write_atomic(self.sweep_dir / "optimization_results.yaml", OmegaConf.to_yaml(OmegaConf.create(doc)).encode())
        shown = " ".join(f"{k}={_short(v)}" for k, v in r.params.items())
        ci = f" ± {row['interval']:.4g}" if row["interval"] is not None else ""
        print(
            f"[sweep] best: trial {best.number} ({shown}): {self.metric} {row['value']:.4f}{ci} after "
            f"{row['epochs']} epochs; {counts[asha.COMPLETE]} complete, {counts[asha.PRUNED]} pruned, "
            f"{counts[asha.FAILED]} failed; {spent} of {full} epochs trained ({100 * spent / max(full, 1):.0f}% "
            f"of every configuration at full budget); {self.sweep_dir / 'optimization_results.yaml'}",
            file=sys.stderr,
            flush=True,
        )


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
