"""Who plays a game of the real game: a small ``Policy`` protocol, the engine's own agents, the scripted
teachers, a trained network, and a submission's ``main.py`` loaded the way Kaggle's harness loads it.

A ``Policy`` gives its ``deck()`` (60 card ids) before the first observation, is ``reset()`` at each new
round (a best-of-N match's rounds are games of their own: a recurrent policy's memory starts afresh, as a
lane does in the corpus) and ``choose(obs)`` answers each observation with option indices. ``as_agent``
turns one into a harness agent (``agent(obs, config)``: the deck at the first observation, ``reset`` when
``current.round`` changes). A player *spec* names one: ``random``, ``first``, a teacher of the demo's
roster (``expert-fighting``, ...), a run dir (its trained network) or a ``main.py``; ``name=spec`` names it.
Each also answers to the ``Player`` protocol's names (``tcgexp.games.play``): ``new_episode`` is ``reset``,
``act`` is ``choose``.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Protocol

from .pimc import FirstAnswer

BUILTIN = ("random", "first")
SEARCHERS = ("flat-mc", "search")  # agents that search the engine's forks (flat_mc.py, pimc.py), the harness's deck


class Policy(Protocol):
    name: str

    def deck(self) -> list[int]: ...

    def reset(self) -> None: ...

    def choose(self, obs: dict) -> list[int]: ...


class RandomPolicy:
    """The engine's ``random`` agent (``maxCount`` options drawn at random), with its own seeded rng."""

    name = "random"

    def __init__(self, deck: list[int], seed: int) -> None:
        self._deck, self.rng = list(deck), random.Random(seed)

    def deck(self) -> list[int]:
        return list(self._deck)

    def reset(self) -> None:
        pass

    def choose(self, obs: dict) -> list[int]:
        sel = obs["select"]
        return self.rng.sample(range(len(sel["option"])), sel["maxCount"])

    def new_episode(self) -> None:  # the Player protocol (tcgexp.games.play): reset
        self.reset()

    def act(self, obs: dict) -> list[int]:  # the Player protocol: choose
        return self.choose(obs)


class FirstPolicy(FirstAnswer):
    """The engine's ``first`` agent: the first ``maxCount`` options (``pimc.FirstAnswer``, which a submission ships
    without this module), named and answering to the Player protocol."""

    name = "first"

    def new_episode(self) -> None:  # the Player protocol (tcgexp.games.play): reset
        self.reset()

    def act(self, obs: dict) -> list[int]:  # the Player protocol: choose
        return self.choose(obs)


class TeacherPolicy:
    """A scripted teacher of the demo's roster (``teachers.Teacher``), its hidden style drawn per game."""

    def __init__(self, teacher) -> None:
        self.teacher, self.name = teacher, teacher.name

    def deck(self) -> list[int]:
        return list(self.teacher.deck)

    def reset(self) -> None:
        pass

    def choose(self, obs: dict) -> list[int]:
        return self.teacher(obs)

    def new_episode(self) -> None:  # the Player protocol (tcgexp.games.play): reset
        self.reset()

    def act(self, obs: dict) -> list[int]:  # the Player protocol: choose
        return self.choose(obs)


class Struct(dict):
    """A dict whose keys read as attributes too, as the harness hands observations to agents (``structify``)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc


def structify(o):
    if isinstance(o, dict):
        return Struct({k: structify(v) for k, v in o.items()})
    if isinstance(o, list):
        return [structify(v) for v in o]
    return o


def load_main(path: Path) -> Callable:
    """A submission's agent, loaded as Kaggle's harness loads it (``kaggle_environments.agent.get_last_callable``):
    its source compiled under its path and ``exec``'d in an empty namespace (no ``__file__``, no ``__name__``),
    its folder on ``sys.path`` meanwhile; the agent is the namespace's last callable."""
    path = Path(path)
    code = compile(path.read_text(encoding="utf-8"), str(path), "exec")
    env: dict = {}
    sys.path.append(os.path.dirname(str(path)))
    try:
        exec(code, env)  # noqa: S102 - what the harness does with a submission
    finally:
        sys.path.pop()
    found = [v for v in env.values() if callable(v)]
    if not found:
        raise ValueError(f"{path} defines no callable: a submission's last callable is its agent(obs, config)")
    return found[-1]


class MainPolicy:
    """A ``main.py`` as the harness runs it: loaded afresh for each game (as each episode loads its agents),
    called with attribute-readable observations and the environment's configuration; it keeps track of rounds
    itself, so ``reset`` does nothing."""

    CONFIG: ClassVar[dict] = {"episodeSteps": 10000000, "actTimeout": 0, "runTimeout": 6000, "bo": 1, "version": 2}

    def __init__(self, path: Path, name: str | None = None) -> None:
        self.path, self.name = Path(path), name or str(path)
        self.agent = load_main(self.path)
        self.config = structify(dict(self.CONFIG))

    def _call(self, obs: dict):
        args = [structify(obs), self.config]
        code = getattr(self.agent, "__code__", None)
        if code is not None:
            args = args[: code.co_argcount]
        answer = self.agent(*args)
        if isinstance(answer, dict) and "action" in answer:
            answer = answer["action"]
        return answer

    def deck(self) -> list[int]:
        blank = {"remainingOverageTime": 600, "step": 0, "select": None, "logs": [], "current": None}
        return self._call({**blank, "search_begin_input": None})

    def reset(self) -> None:
        pass

    def choose(self, obs: dict) -> list[int]:
        return self._call(obs)

    def new_episode(self) -> None:  # the Player protocol (tcgexp.games.play): reset
        self.reset()

    def act(self, obs: dict) -> list[int]:  # the Player protocol: choose
        return self.choose(obs)


def as_agent(policy: Policy) -> Callable:
    """A harness agent (``agent(obs, config=None)``) of `policy`: its deck at the first observation, ``reset`` at
    each new round (``current.round``), its choices after."""
    seen: dict = {"round": None}

    def agent(obs, config=None):
        if obs["select"] is None:
            seen["round"] = None
            policy.reset()
            return policy.deck()
        rnd = obs["current"].get("round") or 1
        if rnd != seen["round"]:
            policy.reset()
            seen["round"] = rnd
        return policy.choose(obs)

    return agent


def split_spec(spec: str) -> tuple[str, str]:
    """(name, what) of a player spec: ``name=what``, or the spec itself as both."""
    spec = str(spec)
    name, eq, what = spec.partition("=")
    if eq and name and "/" not in name and what:
        return name, what
    return spec, spec


def kind_of(what: str) -> str:
    """``random``, ``first``, ``flat-mc`` or ``search`` (searchers), ``teacher``, ``main`` (a .py file) or ``run`` (a run or
    checkpoint folder); else a ValueError naming what each may be."""
    from .demo import ROSTER

    if what in BUILTIN or what in SEARCHERS:
        return what
    if what in {r[0] for r in ROSTER}:
        return "teacher"
    p = Path(what).expanduser()
    if p.suffix == ".py" and p.is_file():
        return "main"
    if p.is_dir() and p.joinpath("main.py").is_file() and not p.joinpath("checkpoints").is_dir():
        return "main"
    if p.is_dir():
        return "run"
    teachers = ", ".join(r[0] for r in ROSTER)
    raise ValueError(
        f"{what!r} is no player: one of random, first, flat-mc, search (searchers over the engine's forks), a teacher "
        f"({teachers}), a run dir or a main.py that exists"
    )
