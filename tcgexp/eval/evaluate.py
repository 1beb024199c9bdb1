"""Play as a metric: the trained policy against opponents in its game's arena, its win rate with an interval, in
``result.json`` (``eval.<opponent>``), in Aim (``eval/win_rate/<opponent>``) and so in a sweep's findings.
``tcgexp-eval <run dir> [eval.key=value ...]`` plays a finished run (``tcgexp/cli/evaluate.py``); a run with
``eval.enabled=true`` plays at its end (``at_end``).

``Evaluation`` reads the weights of ``eval.checkpoint`` (``tcgexp.lifecycle.weights``), finds the run's game by
its ``dataset.game`` (``tcgexp.games.registry``) and asks it for its arena (``game.arena()``: the
``tcgexp.games.play.Arena`` protocol), which checks the settings and plays each opponent. A game without an arena
is refused in one line, naming those that have one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ..console import say_now
from ..errors import ConfigError
from ..games import registry
from ..games.play import EvalSettings, WeightsRefused
from ..lifecycle.ckpt_files import CheckpointError
from ..lifecycle.result_file import NAME as RESULT
from ..lifecycle.result_file import write_result
from ..lifecycle.weights import checkpoint_of, read_weights
from ..winrate import metric_name
from .config import eval_node, run_config


def get(cfg, dotted: str):
    """`cfg`'s value at a dotted key (a dict or a DictConfig), None where any part is missing."""
    node = cfg
    for part in dotted.split("."):
        if isinstance(node, (DictConfig, dict)):
            node = node.get(part)
        else:
            return None
    return node


def arena_of(g):
    """A game's arena (``game.arena()``), None where it has none."""
    make = getattr(g, "arena", None)
    return make() if callable(make) else None


def arena_for(name):
    """The arena of the game ``dataset.game`` names; a ConfigError in one line naming the games that have one."""
    found = arena_of(registry.game(name)) if registry.known(name) else None
    if found is None:
        playable = [n for n, g in registry.GAMES.items() if arena_of(g) is not None]
        which = " or ".join(f"dataset.game={n}" for n in playable) or "a game that has one"
        raise ConfigError(
            f"eval plays a game with an arena ({', '.join(playable) or 'none is registered'}), but this run trained "
            f"on dataset.game={name!r}: train with {which}, or leave eval.enabled=false"
        )
    return found


def _plain(agent) -> dict | None:
    """``eval.agent`` as a plain dict, None for the plain policy (kind=policy)."""
    if agent is None:
        return None
    from omegaconf import DictConfig, OmegaConf

    agent = OmegaConf.to_container(agent, resolve=True) if isinstance(agent, DictConfig) else dict(agent)
    return None if agent.get("kind", "policy") == "policy" else agent


class Evaluation:
    """``eval`` as built from the config (``conf/eval/default.yaml``): ``evaluation(run_dir)`` plays and returns
    ``{opponent: tally}``."""

    def __init__(
        self,
        *,
        enabled: bool | None,
        opponents: list[str],
        games: int,
        deck: str | None,
        checkpoint: str,
        seed: int,
        max_steps: int,
        max_seconds: float,
        workers: int,
        paired: bool,
        agent,
    ) -> None:
        self.enabled, self.opponents, self.games, self.deck = enabled, [str(o) for o in opponents], games, deck
        self.checkpoint, self.seed, self.max_steps, self.max_seconds = checkpoint, seed, max_steps, max_seconds
        self.workers, self.paired = workers, paired
        self.agent = _plain(agent)

    def settings(self, source: str = "") -> EvalSettings:
        """What the arena is handed: these settings, where the weights came from, how to read another run's."""
        return EvalSettings(
            opponents=list(self.opponents),
            games=self.games,
            seed=self.seed,
            deck=self.deck,
            checkpoint=self.checkpoint,
            max_steps=self.max_steps,
            max_seconds=self.max_seconds,
            workers=self.workers,
            paired=self.paired,
            agent=self.agent,
            source=source,
            load=self.load,
        )

    def load(self, what: str) -> tuple[dict, dict, str]:
        """Another run's weights (an opponent that is a run dir): (weights, state, their checkpoint)."""
        ckpt = checkpoint_of(Path(what), self.checkpoint)
        weights, state = read_weights(ckpt)
        return weights, state, str(ckpt)

    def check(self, run_cfg: DictConfig | dict) -> None:
        """Refuse, in one line, what cannot be played: a run of a game without an arena, or what its arena refuses
        (its engine missing, a deck or an opponent that does not exist) (before a run trains: ``preflight``)."""
        arena_for(get(run_cfg, "dataset.game")).check(self.settings(), run_cfg)

    def __call__(self, run_dir: Path, *, progress=None) -> dict[str, dict]:
        """Play every opponent: {opponent name: tally}."""
        ckpt = checkpoint_of(Path(run_dir), self.checkpoint)
        weights, state = read_weights(ckpt)
        run_cfg = state.get("config") or {}
        arena = arena_for(get(run_cfg, "dataset.game"))
        settings = self.settings(source=str(ckpt))
        arena.check(settings, run_cfg)
        try:
            return arena.play(weights, state, settings, progress=progress)
        except WeightsRefused as exc:
            raise CheckpointError(str(exc)) from None


def line(name: str, t: dict) -> str:
    """One opponent's tally in one line."""
    lo, hi = t["interval"]
    ms = t.get("move_seconds") or {}
    moves = (
        f"; moves median {1e3 * ms['median']:.2f} ms, p99 {1e3 * ms['p99']:.2f} ms"
        if ms.get("median") is not None
        else ""
    )
    errors = f", {len(t['errors'])} errors (counted as losses: {t['errors'][0]})" if t["errors"] else ", 0 errors"
    capped = f", {t['capped']} capped at eval.max_steps/max_seconds (draws)" if t.get("capped") else ""
    speed = f"{t['games_per_second']:.1f} games/s" if t.get("games_per_second") else ""
    head = (
        f"[eval] {name}: {t['wins']}/{t['games']} won ({100 * t['win_rate']:.1f} %, 95 % Wilson "
        f"[{100 * lo:.1f}, {100 * hi:.1f}]), {t['draws']} drawn, {t['losses']} lost{errors}{capped}"
    )
    if "paired" not in t:  # an arena that deals no paired games says nothing of it
        return head + (f"; {speed}{moves}" if speed or moves else "")
    paired = "paired deals" if t["paired"] else f"unpaired deals ({t.get('unpaired_because')})"
    return f"{head}; {paired}; {speed}{moves}"


def deck_line(found: dict[str, dict]) -> str | None:
    """Which deck the policy played and why, when its arena chose it (``deck_why`` in a tally), in one line."""
    t = next((t for t in found.values() if t.get("deck_why")), None)
    return None if t is None else f"[eval] the policy played {t.get('deck_name')}: {t['deck_why']}"


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
    cfg = run_config(run_dir)
    tracking = get(cfg, "tracking._target_") or ""
    run_hash = result.get("aim_hash")
    if not run_hash or not tracking.endswith("AimTracker"):
        if tracking.endswith("RemoteAimTracker"):
            say_now("[eval] not tracked: tcgexp-eval writes into local Aim repos (tracking=aim); result.json has it")
        return
    from ..track.aim_run import track_after

    step = int((result.get("processed") or {}).get("optimizer_steps") or 0)
    track_after(get(cfg, "tracking.repo") or ".", run_hash, values_of(found), step=step)


def played(evaluation: Evaluation, run_dir: Path) -> dict[str, dict]:
    """`evaluation(run_dir)` with a progress bar of the games played (on a terminal: rich's bars are off in a log)."""
    from ..progress import stage_progress

    bar, update = stage_progress()
    with bar:
        return evaluation(run_dir, progress=lambda done, total: update("eval: games played", done, total))


def at_end(cfg: DictConfig, run_dir: Path, tracker, step: int, console) -> dict[str, Any] | None:
    """A run with eval.enabled: play its checkpoint, say it, track it; {opponent: tally}, or None when the run did
    not write the checkpoint eval.checkpoint names."""
    from ..config import build

    evaluation: Evaluation = build(cfg.eval)()
    found = played(evaluation, run_dir)
    for said in [deck_line(found)] + [line(name, t) for name, t in found.items()]:
        if said:
            console.print(said, markup=False, soft_wrap=True)
    tracker.track(values_of(found), step=step)
    return found


def evaluate_dir(run_dir: Path, overrides: list[str], console=print) -> dict[str, dict]:
    """Play one run dir as its settings and `overrides` say; record, track and say it."""
    from ..config import build

    node = eval_node(run_dir, overrides)
    evaluation: Evaluation = build(node)()
    found = played(evaluation, run_dir)
    result = record(run_dir, found)
    for said in [deck_line(found)] + [line(name, t) for name, t in found.items()]:
        if said:
            console(said)
    track(run_dir, result, found)
    return found
