"""Play as a metric: the trained policy against opponents in the real game's engine, its win rate with an
interval, in ``result.json`` (``eval.<opponent>``), in Aim (``eval/win_rate/<opponent>``) and so in a sweep's
findings. ``tcgexp-eval <run dir> [eval.key=value ...]`` plays a finished run (or every finished job of a sweep
dir, whose report it then rewrites); a run with ``eval.enabled=true`` plays at its end.

The policy is the network's own choices (``tcgexp/cabt/netpolicy.py``: the highest-scoring offered option at
each pick, the stop head where stopping is the agent's choice), from the weights of ``eval.checkpoint``
written into a policy file (``tcgexp/cabt/policyfile.py``), the very file ``tcgexp-export`` ships; it plays
with ``eval.deck`` (by default the demo's best teacher's). How the games are played and counted:
``tcgexp/cabt/arena.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..console import say_now
from ..errors import ConfigError
from ..extras import missing
from ..lifecycle.ckpt_files import CheckpointError
from ..lifecycle.result_file import NAME as RESULT
from ..lifecycle.result_file import write_result
from ..lifecycle.weights import checkpoint_of, read_weights
from ..schema import check

PREFIX = "eval/win_rate/"  # Aim's name (and a sweep's metric) of a win rate: PREFIX + the opponent's name


def metric_name(opponent: str) -> str:
    return PREFIX + opponent


class Evaluation:
    """``eval`` as built from the config (``conf/eval/default.yaml``): ``evaluation(run_dir)`` plays and returns
    ``{opponent: tally}``."""

    def __init__(
        self,
        *,
        enabled: bool,
        opponents: list[str],
        games: int,
        deck: str | None,
        checkpoint: str,
        seed: int,
        max_steps: int,
        max_seconds: float,
        workers: int,
        paired: bool,
    ) -> None:
        self.enabled, self.opponents, self.games, self.deck = enabled, [str(o) for o in opponents], games, deck
        self.checkpoint, self.seed, self.max_steps, self.max_seconds = checkpoint, seed, max_steps, max_seconds
        self.workers, self.paired = workers, paired

    def settings(self, extra: dict):
        from ..cabt.arena import Settings

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        workers = self.workers or min(cores, 8)
        return Settings(
            games=self.games,
            seed=self.seed,
            max_steps=self.max_steps,
            max_seconds=self.max_seconds,
            workers=workers,
            paired=self.paired,
            extra=extra,
        )

    def check(self, run_cfg: DictConfig | dict) -> None:
        """Refuse, in one line, what cannot be played: a run of another game, the cabt extra missing, a deck or an
        opponent that does not exist (before a run trains: ``preflight``)."""
        game = _get(run_cfg, "dataset.game")
        if game != "cabt":
            raise ConfigError(
                f"eval plays the real game, but this run trained on dataset.game={game!r}: train with "
                "dataset=cabt_demo or dataset=cabt, or leave eval.enabled=false"
            )
        engine_missing()
        from ..cabt.demo import deck_of
        from ..cabt.players import kind_of, split_spec

        try:
            deck_of(self.deck)
        except ValueError as exc:
            raise ConfigError(f"eval.deck={self.deck!r}: {exc}") from None
        for spec in self.opponents:
            try:
                kind_of(split_spec(spec)[1])
            except ValueError as exc:
                raise ConfigError(f"eval.opponents: {exc}") from None

    def __call__(self, run_dir: Path, *, progress=None) -> dict[str, dict]:
        """Play every opponent: {opponent name: tally}."""
        from ..cabt.arena import Side, play_match
        from ..cabt.demo import deck_of
        from ..cabt.players import kind_of, split_spec

        ckpt = checkpoint_of(Path(run_dir), self.checkpoint)
        weights, state = read_weights(ckpt)
        run_cfg = state.get("config") or {}
        self.check(run_cfg)
        label, deck = deck_of(self.deck)
        out: dict[str, dict] = {}
        with tempfile.TemporaryDirectory(prefix="tcgexp-eval-") as tmp:
            mine = Path(tmp) / "policy.npz"
            meta = write_policy(mine, weights, state, deck, source=str(ckpt))
            policy = Side("net", "policy", str(mine), deck)
            for spec in self.opponents:
                name, what = split_spec(spec)
                kind = kind_of(what)
                if kind == "run":
                    theirs = Path(tmp) / f"opponent-{len(out)}.npz"
                    their_ckpt = checkpoint_of(Path(what), self.checkpoint)
                    their_weights, their_state = read_weights(their_ckpt)
                    their_deck = deck_of(_get(their_state.get("config") or {}, "eval.deck"))[1]
                    write_policy(theirs, their_weights, their_state, their_deck, source=str(their_ckpt))
                    opponent = Side("net", name, str(theirs), their_deck)
                elif kind == "teacher":
                    opponent = Side("teacher", name, what)
                elif kind == "main":
                    path = Path(what)
                    opponent = Side("main", name, str(path / "main.py" if path.is_dir() else path))
                else:
                    opponent = Side(kind, name)
                extra = {
                    "checkpoint": str(ckpt),
                    "weights_sha256": meta["weights_sha256"],
                    "deck_name": label,
                }
                out[name] = play_match(policy, opponent, self.settings(extra), progress=progress)
        return out


def _get(cfg, dotted: str):
    node = cfg
    for part in dotted.split("."):
        if isinstance(node, (DictConfig, dict)):
            node = node.get(part)
        else:
            return None
    return node


def engine_missing() -> None:
    """ConfigError in one line when the cabt extra (the engine) is not installed here."""
    from ..cabt.engine import EngineMissing, engine_dir

    try:
        engine_dir()
    except EngineMissing as exc:
        raise ConfigError(str(exc) or missing("eval (the real game's engine)", "cabt")) from None


def write_policy(path: Path, weights: dict, state: dict, deck: list[int], *, source: str) -> dict:
    """The policy file of a checkpoint's weights (its run's memory flag, option slots and would-KO), with
    `deck` and the card database of the engine the corpus was built with: its meta."""
    from ..cabt.engine import engine
    from ..cabt.policyfile import save, weights_sha256

    cfg = state.get("config") or {}
    if "option.weight" not in weights:
        raise CheckpointError(
            f"{source} holds no option head (option.weight): it was not trained on the real game's options"
        )
    eng = engine()
    meta = {
        "memory": bool(_get(cfg, "model.memory") if _get(cfg, "model.memory") is not None else True),
        "max_options": int(_get(cfg, "dataset.max_options") or 64),
        "would_ko": bool(_get(cfg, "dataset.would_ko") if _get(cfg, "dataset.would_ko") is not None else True),
        "deck": list(deck),
        "source": source,
    }
    save(path, weights, meta, eng._cards_json, eng._attacks_json)
    return {**meta, "weights_sha256": weights_sha256(weights)}


def line(name: str, t: dict) -> str:
    """One opponent's tally in one line."""
    lo, hi = t["interval"]
    ms = t["move_seconds"]
    moves = (
        f"; moves median {1e3 * ms['median']:.2f} ms, p99 {1e3 * ms['p99']:.2f} ms"
        if ms.get("median") is not None
        else ""
    )
    errors = f", {len(t['errors'])} errors (counted as losses: {t['errors'][0]})" if t["errors"] else ", 0 errors"
    capped = f", {t['capped']} capped at eval.max_steps/max_seconds (draws)" if t["capped"] else ""
    paired = "paired deals" if t["paired"] else f"unpaired deals ({t.get('unpaired_because')})"
    speed = f"{t['games_per_second']:.1f} games/s" if t.get("games_per_second") else ""
    return (
        f"[eval] {name}: {t['wins']}/{t['games']} won ({100 * t['win_rate']:.1f} %, 95 % Wilson "
        f"[{100 * lo:.1f}, {100 * hi:.1f}]), {t['draws']} drawn, {t['losses']} lost{errors}{capped}; {paired}; "
        f"{speed}{moves}"
    )


def record(run_dir: Path, found: dict[str, dict]) -> dict:
    """Merge `found` into the run dir's result.json (``eval``: the opponents played before are kept)."""
    path = Path(run_dir) / RESULT
    try:
        result = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{run_dir} has no {RESULT}: tcgexp-eval plays a run tcgexp-train finished") from None
    except ValueError as exc:
        raise ConfigError(f"{path} cannot be read ({exc}); it is no run's result") from None
    result["eval"] = {**(result.get("eval") or {}), **found}
    write_result(Path(run_dir), result)
    return result


def values_of(found: dict[str, dict]) -> dict[str, float]:
    return {metric_name(name): float(t["win_rate"]) for name, t in found.items()}


def track(run_dir: Path, result: dict, found: dict[str, dict]) -> None:
    """Into the run's Aim run (a local repo), after the fact: eval/win_rate/<opponent> at its last step."""
    cfg = _run_config(run_dir)
    tracking = _get(cfg, "tracking._target_") or ""
    run_hash = result.get("aim_hash")
    if not run_hash or not tracking.endswith("AimTracker"):
        if tracking.endswith("RemoteAimTracker"):
            say_now("[eval] not tracked: tcgexp-eval writes into local Aim repos (tracking=aim); result.json has it")
        return
    from ..track.aim_run import track_after

    step = int((result.get("processed") or {}).get("optimizer_steps") or 0)
    track_after(_get(cfg, "tracking.repo") or ".", run_hash, values_of(found), step=step)


def _run_config(run_dir: Path) -> dict:
    path = Path(run_dir) / ".hydra" / "config.yaml"
    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
    except (OSError, ValueError):
        return {}


# -- tcgexp-eval ----------------------------------------------------------------------------------------

USAGE = "usage: tcgexp-eval <run dir | sweep dir> [eval.key=value ...]"


def eval_node(run_dir: Path, overrides: list[str]) -> DictConfig:
    """The eval settings for a run: its own (``.hydra/config.yaml``'s eval, else the schema's defaults), then
    the command line's ``eval.*`` overrides (Hydra's grammar), checked."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from .configs import EvalConfig

    base = OmegaConf.structured(EvalConfig(_target_="tcgexp.train.evaluate.Evaluation"))
    saved = _run_config(run_dir).get("eval")
    if isinstance(saved, dict):
        base = OmegaConf.merge(base, {k: v for k, v in saved.items() if not k.startswith("_")})
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as exc:  # noqa: BLE001 - Hydra's parse errors have no one base class
        raise ConfigError(f"tcgexp-eval: {str(exc).splitlines()[0]}") from None
    for o in parsed:
        key = o.key_or_group
        if not key.startswith("eval.") or o.is_sweep_override():
            raise ConfigError(
                f"tcgexp-eval takes eval.* settings only: {o.input_line} is not one (e.g. eval.games=400, "
                "eval.opponents=[random,first])"
            )
        try:
            OmegaConf.update(base, key.removeprefix("eval."), o.value(), merge=False)
        except Exception as exc:  # noqa: BLE001 - OmegaConf's type errors: one line naming the key
            raise ConfigError(f"{o.input_line}: {str(exc).splitlines()[0]}") from None
    problem = check(EvalConfig, base, "eval.")
    if problem:
        raise ConfigError(problem)
    return base


def targets(path: Path) -> list[Path]:
    """The run dirs `path` names: itself (a run dir), or a sweep dir's completed jobs."""
    if (path / RESULT).is_file():
        return [path]
    from ..track.summary import job_dirs

    if not path.is_dir():
        raise ConfigError(f"{path} is no folder: {USAGE}")
    jobs = []
    for d in job_dirs(path):
        try:
            if json.loads((d / RESULT).read_text()).get("status") in ("completed", "stopped"):
                jobs.append(d)
        except (OSError, ValueError):
            continue
    if not jobs:
        raise ConfigError(f"{path} holds no finished run (no {RESULT}, nor job folders with one): {USAGE}")
    return jobs


def evaluate_dir(run_dir: Path, overrides: list[str], console=print) -> dict[str, dict]:
    """Play one run dir as its settings and `overrides` say; record, track and say it."""
    from ..config import build

    node = eval_node(run_dir, overrides)
    evaluation: Evaluation = build(node)()
    found = evaluation(run_dir)
    result = record(run_dir, found)
    for name, t in found.items():
        console(line(name, t))
    track(run_dir, result, found)
    return found


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    try:
        yield
    except (ConfigError, CheckpointError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def main(argv: list[str] | None = None) -> int:
    """``tcgexp-eval <run dir | sweep dir> [eval.key=value ...]``."""
    from ..learn.blas import setup

    setup()  # nothing here loads MLX; an entry point sets its BLAS up all the same
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + (__doc__ or "").strip())
        return 0 if args else 2
    with _user_errors():
        path, overrides = Path(args[0]), args[1:]
        runs = targets(path)
        for run_dir in runs:
            if len(runs) > 1:
                print(f"[eval] {run_dir}", flush=True)
            evaluate_dir(run_dir, overrides, console=lambda s: print(s, flush=True))
        if len(runs) > 1 or runs[0] != path:
            from ..track.summary import write_summary

            write_summary(path, ended=True)
            print(f"[eval] the sweep's report is rewritten with the win rates: tcgexp-report {path}", flush=True)
    return 0


def at_end(cfg: DictConfig, run_dir: Path, tracker, step: int, console) -> dict[str, Any] | None:
    """A run with eval.enabled: play its checkpoint, say it, track it; {opponent: tally}, or None when the run did
    not write the checkpoint eval.checkpoint names."""
    from ..config import build

    evaluation: Evaluation = build(cfg.eval)()
    found = evaluation(run_dir)
    for name, t in found.items():
        console.print(line(name, t), markup=False, soft_wrap=True)
    tracker.track(values_of(found), step=step)
    return found


if __name__ == "__main__":
    raise SystemExit(main())
