"""The real game's arena (``tcgexp.games.play.Arena``): what an evaluation (``tcgexp.eval``) asks of this game.

The trained network plays as itself (``netpolicy.py``: the highest-scoring offered option at each pick, the stop
head where stopping is the agent's choice), from a checkpoint's weights written into a policy file
(``policyfile.py``: ``write_policy``), the very file ``tcgexp-export`` ships (``submission.py``); it plays with
``eval.deck`` (by default the demo's best teacher's: ``demo.deck_of``; for a run trained on imported episodes
the deck their players used most: ``corpus_deck``, ``policy_deck``). Its opponents are player specs
(``players.split_spec``/``kind_of``: random, first, a teacher, a run dir, a main.py), each a ``Side`` of a match
(``arena.play_match``: how the games are played and counted).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ...errors import ConfigError
from ...extras import missing
from ..play import WeightsRefused
from .corpus_deck import get, imported, trained_deck


def engine_missing() -> None:
    """ConfigError in one line when the cabt extra (the engine) is not installed here."""
    from .engine import EngineMissing, engine_dir

    try:
        engine_dir()
    except EngineMissing as exc:
        raise ConfigError(str(exc) or missing("eval (the real game's engine)", "cabt")) from None


def deck(spec: str | None) -> tuple[str, list[int]]:
    """(its label, 60 card ids) of an ``eval.deck``; a ConfigError in one line for one that does not exist."""
    from .demo import deck_of

    try:
        return deck_of(spec)
    except ValueError as exc:
        raise ConfigError(f"eval.deck={spec!r}: {exc}") from None


def policy_deck(spec: str | None, run_cfg) -> tuple[str, list[int], str | None]:
    """(its label, 60 card ids, why this deck or None) of the deck the policy plays: ``eval.deck`` when set; for a
    run trained on imported episodes, the deck their players used most (``corpus_deck``), else the best
    teacher's, saying why."""
    if spec is not None or not imported(run_cfg):
        return (*deck(spec), None)
    label, cards, why = trained_deck(run_cfg)
    if cards is None:
        label, cards = deck(None)
        return label, cards, f"eval.deck is null and {why}: the demo's best teacher's plays; set eval.deck=<deck>"
    return label, cards, why


def write_policy(path: Path, weights: dict, state: dict, deck: list[int], *, source: str) -> dict:
    """The policy file of a checkpoint's weights (its run's memory flag, option slots and would-KO), with
    `deck` and the card database of the engine the corpus was built with: its meta. Weights without an option
    head are refused (``WeightsRefused``)."""
    from .engine import engine
    from .policyfile import save, weights_sha256

    cfg = state.get("config") or {}
    if "option.weight" not in weights:
        raise WeightsRefused(
            f"{source} holds no option head (option.weight): it was not trained on the real game's options"
        )
    eng = engine()
    meta = {
        "memory": bool(get(cfg, "model.memory") if get(cfg, "model.memory") is not None else True),
        "max_options": int(get(cfg, "dataset.max_options") or 64),
        "would_ko": bool(get(cfg, "dataset.would_ko") if get(cfg, "dataset.would_ko") is not None else True),
        "deck": list(deck),
        "source": source,
    }
    save(path, weights, meta, eng._cards_json, eng._attacks_json)
    return {**meta, "weights_sha256": weights_sha256(weights)}


class CabtArena:
    """The trained policy against ``eval.opponents`` in the real game's engine."""

    def match_settings(self, settings, extra: dict):
        """The match's ``arena.Settings``: ``eval.workers`` (0: one per core the process may use, at most 8)."""
        from .arena import Settings

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        workers = settings.workers or min(cores, 8)
        return Settings(
            games=settings.games,
            seed=settings.seed,
            max_steps=settings.max_steps,
            max_seconds=settings.max_seconds,
            workers=workers,
            paired=settings.paired,
            extra=extra,
        )

    def check(self, settings, run_cfg) -> None:
        """The engine installed here, ``eval.deck`` and every opponent exist (one ConfigError line)."""
        from .bundle import EXPORTED
        from .players import kind_of, split_spec
        from .policyfile import POLICY_FILE, load

        engine_missing()
        deck(settings.deck)
        for spec in settings.opponents:
            try:
                what = split_spec(spec)[1]
                if kind_of(what) == "main":  # tcgexp-export's: its policy file checked now, as its main.py will at load
                    main = Path(what).expanduser()
                    main = main / "main.py" if main.is_dir() else main
                    if EXPORTED in main.read_text(encoding="utf-8", errors="replace")[:400]:
                        load(main.parent / POLICY_FILE)
            except ValueError as exc:
                raise ConfigError(f"eval.opponents: {exc}") from None

    def play(self, weights: dict, state: dict, settings, *, progress=None) -> dict[str, dict]:
        """Every opponent, ``settings.games`` games each: {opponent name: tally}."""
        from .arena import Side, play_match
        from .demo import deck_of
        from .players import kind_of, split_spec

        label, mine_deck, why = policy_deck(settings.deck, state.get("config") or {})
        out: dict[str, dict] = {}
        with tempfile.TemporaryDirectory(prefix="tcgexp-eval-") as tmp:
            mine = Path(tmp) / "policy.npz"
            meta = write_policy(mine, weights, state, mine_deck, source=settings.source)
            agent = settings.agent
            policy = Side("net", "policy" if agent is None else "search", str(mine), mine_deck, agent=agent)
            for spec in settings.opponents:
                name, what = split_spec(spec)
                kind = kind_of(what)
                if kind == "run":
                    theirs = Path(tmp) / f"opponent-{len(out)}.npz"
                    their_weights, their_state, their_source = settings.load(what)
                    their_deck = deck_of(get(their_state.get("config") or {}, "eval.deck"))[1]
                    write_policy(theirs, their_weights, their_state, their_deck, source=their_source)
                    opponent = Side("net", name, str(theirs), their_deck)
                elif kind == "teacher":
                    opponent = Side("teacher", name, what)
                elif kind == "main":
                    path = Path(what)
                    opponent = Side("main", name, str(path / "main.py" if path.is_dir() else path))
                else:
                    opponent = Side(kind, name)
                extra = {"checkpoint": settings.source, "weights_sha256": meta["weights_sha256"], "deck_name": label}
                if why:
                    extra["deck_why"] = why
                # one count over every opponent's games: the caller's bar runs once, from 0 to all of them
                k, n = len(out), len(settings.opponents)
                step = (lambda done, total, k=k, n=n: progress(k * total + done, n * total)) if progress else None
                out[name] = play_match(policy, opponent, self.match_settings(settings, extra), progress=step)
        return out


ARENA = CabtArena()
