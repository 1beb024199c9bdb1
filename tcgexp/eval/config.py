"""The ``eval`` group's schema (``EvalConfig``: ``conf/eval/default.yaml``) and how a finished run's eval settings
are read back (``eval_node``: its own, then a command line's ``eval.*``).

A run recorded before the evaluation left ``tcgexp.train`` names its class by the old path (``OLD_TARGETS``):
read back, a config's ``eval._target_`` is this one (``TARGET``), here and where a resume reads a checkpoint's
config (``tcgexp.lifecycle.provenance.upgrade``).
"""

from __future__ import annotations

import re
from dataclasses import field
from pathlib import Path
from typing import ClassVar

from omegaconf import MISSING, DictConfig, OmegaConf

from ..errors import ConfigError
from ..schema import ALL, FLOAT32_MAX, INT32_MAX, check, schema, within

TARGET = "tcgexp.eval.evaluate.Evaluation"
OLD_TARGETS = ("tcgexp.train.evaluate.Evaluation",)  # where runs recorded before the move name it


def target(name):
    """The class an ``eval._target_`` names, as this version names it."""
    return TARGET if name in OLD_TARGETS else name


def _opponents(v) -> bool:
    names = [str(o).partition("=")[0] if "=" in str(o) and "/" not in str(o).partition("=")[0] else str(o) for o in v]
    return len(v) >= 1 and all(str(o).strip() for o in v) and len(set(names)) == len(names)


@schema("eval.agent")
class AgentConfig:
    """Who plays for the run: its policy alone, or the search agent with the policy as its prior
    (``tcgexp/games/cabt/pimc.py``: determinized search over the engine's forks, on Kaggle's 600 s bank)."""

    kind: str = "policy"  # policy: the network's own choices; search: PIMC with the network as prior
    worlds: int = 32  # search: worlds drawn from the belief per searched decision, at most
    top_k: int = 0  # search: candidates, the prior's likeliest (0: every offered option)
    c_prior: float = 0.0  # search: weight of the prior's probability added to an option's mean result
    decisions: str = "all"  # search: all (every single pick with a choice) or main (the main phase's)
    rollout_steps: int = 400  # search: fork steps a rollout plays before it counts as a draw
    per_decision: float = 1.0  # search: seconds one decision may think, at most
    reserve: float = 60.0  # search: seconds of the bank never spent on search (below it the policy plays)
    horizon: int = 40  # search: decisions the bank above the reserve is shared over
    belief: str = "decks"  # search: decks (the opponent's list drawn from a deck model) or uniform
    CHECKS: ClassVar[tuple] = (
        ("kind", lambda v: v in ("policy", "search"), "policy or search"),
        ("worlds", within(1, 10**6), "in [1, 1e6] worlds"),
        ("top_k", within(0, 10**6), "in [0, 1e6] (0 = every option)"),
        ("c_prior", within(0.0, FLOAT32_MAX), ">= 0"),
        ("decisions", lambda v: v in ("all", "main"), "all or main"),
        ("rollout_steps", within(1, INT32_MAX), "in [1, 2**31) fork steps"),
        ("per_decision", within(0.0, 600.0, open_lo=True), "in (0, 600] seconds"),
        ("reserve", within(0.0, 600.0), "in [0, 600] seconds"),
        ("horizon", within(1, 10**6), "in [1, 1e6] decisions"),
        ("belief", lambda v: v in ("decks", "uniform"), "decks or uniform"),
    )


@schema("eval")
class EvalConfig:
    """Play the trained policy against opponents in its game's arena (``tcgexp.eval.evaluate``): at the end of
    training when it ``plays_at_end``, and by ``tcgexp-eval <run dir>`` whenever asked."""

    _target_: str = MISSING
    _partial_: bool = True
    # play at the end of training (a run of a game with an arena: tcgexp.games.play); null: on for a run trained on
    # imported episodes of a game with one (dataset=cabt), off for any other (the built-in game, a demo corpus)
    enabled: bool | None = None
    # who the policy plays, each eval.games games: random, first (the engine's agents), flat-mc or search (searchers over
    # the engine's forks), a teacher of the demo's roster by name (expert-fighting, ...), a run dir (its trained
    # policy) or a main.py; name=spec names one
    opponents: list[str] = field(default_factory=lambda: ["random", "first"])
    games: int = 200  # games per opponent, half in each seat (best of one each)
    # the policy's deck: null = the demo's best teacher's (expert-fighting's), but for a run trained on imported
    # episodes (dataset=cabt) the deck its players used most (tcgexp/games/cabt/corpus_deck.py); a teacher's name (its deck), a
    # deck type (fighting, psychic, metal, water, grass, darkness, ...), harness (the engine agents' own deck),
    # or a JSON file of 60 card ids
    deck: str | None = None
    checkpoint: str = "best"  # which weights play: best (by validation loss), latest, or epoch_NNNN
    seed: int = 0  # the games' seeds: game g's deal (with paired deals), the random agent's and teachers' draws
    max_steps: int = 2000  # decisions in a game past which it is a draw (capped)
    max_seconds: float = 120.0  # wall seconds of a game past which it is a draw (capped)
    workers: int = 0  # processes playing at once; 0 = one per core the run may use (at most 8)
    # deal game g the same in every evaluation with this seed (the engine's shuffles from a seeded stream: needs a
    # C compiler once); false: the engine's own std::random_device, as in Kaggle's harness
    paired: bool = True
    # who plays for the run: kind=policy its network; kind=search the search agent (knobs eval.agent.*), the network its prior
    agent: AgentConfig = field(default_factory=AgentConfig)
    UNPINNED: ClassVar[tuple] = ALL  # playing never changes what was trained
    NULLABLE: ClassVar[tuple] = ("enabled", "deck")
    CHECKS: ClassVar[tuple] = (
        ("opponents", _opponents, "a list of one or more opponents, each named once"),
        ("games", within(1, 10**7), "in [1, 1e7] games per opponent"),
        ("deck", lambda v: v is None or bool(str(v).strip()), "null, a teacher, a deck type, harness or a file"),
        (
            "checkpoint",
            lambda v: v in ("best", "latest") or re.fullmatch(r"epoch_\d{4,}", str(v)) is not None,
            "best, latest or epoch_NNNN",
        ),
        ("seed", within(0, 2**63, open_hi=True), "in [0, 2**63)"),
        ("max_steps", within(1, INT32_MAX), "in [1, 2**31) decisions"),
        ("max_seconds", within(0.0, FLOAT32_MAX, open_lo=True), "> 0 seconds"),
        ("workers", within(0, 1024), "in [0, 1024] (0 = one per core)"),
    )


def plays_at_end(cfg) -> bool:
    """Whether a run plays at the end of its training: ``eval.enabled`` where set; where null (the default), on
    for a run trained on imported episodes (no ``dataset.demo``) of a game with an arena (``dataset=cabt``: the
    user's own episodes), off for any other (the built-in game has no arena; a demo corpus plays when asked)."""
    ev = cfg.get("eval") if cfg is not None else None
    if not ev:
        return False
    if ev.get("enabled") is not None:
        return bool(ev.get("enabled"))
    dataset = cfg.get("dataset") or {}
    if int((dataset.get("demo") or {}).get("episodes_per_day") or 0):
        return False
    from ..games import registry

    name = dataset.get("game")
    make = getattr(registry.game(name), "arena", None) if name and registry.known(name) else None
    return callable(make) and make() is not None


def run_config(run_dir: Path) -> dict:
    """A run dir's ``.hydra/config.yaml`` as a dict (empty when it cannot be read), its ``eval._target_`` as this
    version names it."""
    path = Path(run_dir) / ".hydra" / "config.yaml"
    try:
        cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
    except (OSError, ValueError):
        return {}
    if isinstance(cfg.get("eval"), dict) and "_target_" in cfg["eval"]:
        cfg["eval"]["_target_"] = target(cfg["eval"]["_target_"])
    return cfg


def eval_node(run_dir: Path, overrides: list[str], command: str = "tcgexp-eval") -> DictConfig:
    """The eval settings for a run: its own (``.hydra/config.yaml``'s eval, else the schema's defaults), then
    the command line's ``eval.*`` overrides (Hydra's grammar), checked."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    base = OmegaConf.structured(EvalConfig(_target_=TARGET))
    saved = run_config(run_dir).get("eval")
    if isinstance(saved, dict):
        base = OmegaConf.merge(base, {k: v for k, v in saved.items() if not k.startswith("_")})
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as exc:  # noqa: BLE001 - Hydra's parse errors have no one base class
        raise ConfigError(f"{command}: {str(exc).splitlines()[0]}") from None
    for o in parsed:
        key = o.key_or_group
        if not key.startswith("eval.") or o.is_sweep_override():
            raise ConfigError(
                f"{command} takes eval.* settings only: {o.input_line} is not one (e.g. eval.games=400, "
                "eval.opponents=[random,first])"
            )
        try:
            OmegaConf.update(base, key.removeprefix("eval."), o.value(), merge=False)
        except Exception as exc:  # noqa: BLE001 - OmegaConf's type errors: one line naming the key
            raise ConfigError(f"{o.input_line}: {str(exc).splitlines()[0]}") from None
    problem = check(EvalConfig, base, "eval.") or check(AgentConfig, base.agent, "eval.agent.")
    if problem:
        raise ConfigError(problem)
    return base
