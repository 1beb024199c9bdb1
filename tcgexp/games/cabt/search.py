"""The engine's search API: forks of a decision, stepped as the game would be, for an agent that searches.

The engine's library exports ``AgentStart``, ``SearchBegin``, ``SearchStep``, ``SearchRelease`` and ``SearchEnd``
(Kaggle's competition SDK wraps them in its ``cg/api.py``; these are tcgexp's own bindings, loaded with the
engine: ``engine.Engine``). ``Search(engine).begin(obs, world)`` forks the game at the decision `obs` (an
observation the engine gave the acting player: its ``search_begin_input`` is that player's information state)
with every zone the player cannot see filled in by the caller (``World``: its own deck order and prizes, the
opponent's deck, prizes, hand, and a face-down active): a determinized forward model, not an oracle. A fork's
observation is the omniscient one of its world (prizes and the opponent's hand shown), and carries no
``search_begin_input``: forks do not nest. ``step(fork, select)`` answers the fork's decision like
``Battle.select`` and returns the next fork; ``release`` frees one, ``end`` all of them (the engine reuses the
memory). Every engine error is one line naming what was wrong (``SearchError``).

``truth(battle)`` reads a live battle's own hidden zones (the engine's ``VisualizeData``): what a test checks a
fork against, never what an agent may play with. With the true zones, a fork stepped with the game's own answer
reproduces the game's next observation, as the acting player sees it (``seen_by``), at about 95 % of decisions
(``tcgexp-bench search``; ``tests/games/cabt/test_search.py`` holds it above 90 %); where the rest differ is not
traced yet.
"""

from __future__ import annotations

import ctypes
import dataclasses  # as a module: main.py binds each import once, and cards.py imports dataclass itself
import json
from typing import Self

BEGIN_ERRORS = {
    1: "a card id the engine does not know",
    2: "the opponent's face-down active given is not a Pokémon",
    30: "the search handle is broken",
}
STEP_ERRORS = {
    1: "no fork has that id",
    2: "that fork was released",
    3: "the battle in that fork is over",
    4: "the number of indices is outside [minCount, maxCount]",
    5: "an index outside the offered options",
    6: "an index given twice",
    30: "the search handle is broken",
}
_INTS = ctypes.POINTER(ctypes.c_int)
_BOUND: set[int] = set()  # the libraries whose search functions are typed (id of the CDLL)


class SearchError(RuntimeError):
    """The engine (or these bindings, before calling it) refused a search call: one line saying what."""


@dataclasses.dataclass
class World:
    """Every zone the acting player cannot see, as card ids: one determinization of its information state."""

    your_deck: list[int]  # in draw order; ignored (and may be empty) when the decision is a search of the deck
    your_prize: list[int]
    opponent_deck: list[int]
    opponent_prize: list[int]
    opponent_hand: list[int]
    opponent_active: list[int] = dataclasses.field(default_factory=list)  # one Pokémon id, only while it is face down


@dataclasses.dataclass(frozen=True)
class Fork:
    id: int
    obs: dict  # the fork's observation at its decision (omniscient in its world; no search_begin_input)

    @property
    def result(self) -> int:
        """-1 while the fork's battle runs; then its winner (0 or 1), or 2 for a draw."""
        return int(self.obs["current"]["result"])


def _ints(values) -> ctypes.Array:
    values = [int(v) for v in values]
    return (ctypes.c_int * max(1, len(values)))(*values)


def _bind(lib) -> None:
    if id(lib) in _BOUND:
        return
    lib.AgentStart.restype = ctypes.c_void_p
    lib.SearchBegin.restype = ctypes.c_char_p
    lib.SearchBegin.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, *[_INTS] * 6, ctypes.c_int]
    lib.SearchStep.restype = ctypes.c_char_p
    lib.SearchStep.argtypes = [ctypes.c_void_p, ctypes.c_int64, _INTS, ctypes.c_int]
    lib.SearchRelease.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    lib.SearchEnd.argtypes = [ctypes.c_void_p]
    _BOUND.add(id(lib))


def needed(obs: dict) -> dict[str, int]:
    """How many cards each hidden zone of `obs` holds (what a ``World`` must give at least)."""
    cur = obs["current"]
    me = int(cur["yourIndex"])
    mine, theirs = cur["players"][me], cur["players"][1 - me]
    searching_deck = (obs.get("select") or {}).get("deck") is not None
    face_down = bool(theirs["active"]) and theirs["active"][0] is None
    return {
        "your_deck": 0 if searching_deck else int(mine["deckCount"]),
        "your_prize": len(mine["prize"]),
        "opponent_deck": int(theirs["deckCount"]),
        "opponent_prize": len(theirs["prize"]),
        "opponent_hand": int(theirs["handCount"]),
        "opponent_active": 1 if face_down else 0,
    }


class Search:
    """The engine's forks of one process's decisions (one search handle: ``AgentStart``)."""

    def __init__(self, eng) -> None:
        self.lib = eng.lib
        _bind(self.lib)
        self.handle = self.lib.AgentStart()
        self.live: set[int] = set()  # forks begun or stepped to, not released

    def begin(self, obs: dict, world: World, *, manual_coin: bool = False) -> Fork:
        """A fork of the game at the decision `obs`, its hidden zones `world`'s."""
        sbi = obs.get("search_begin_input")
        if not sbi or obs.get("current") is None:
            raise SearchError("search begins at an agent's decision: this observation has no search_begin_input")
        need = needed(obs)
        zones = {name: list(getattr(world, name)) for name in need}
        short = [f"{name} has {len(zones[name])} of {n}" for name, n in need.items() if len(zones[name]) < n]
        if short:
            raise SearchError(f"the world does not fill the hidden zones: {'; '.join(short)} cards")
        if not need["your_deck"]:
            zones["your_deck"] = []
        if not need["opponent_active"]:
            zones["opponent_active"] = []
        raw = sbi.encode("ascii")
        reply = self.lib.SearchBegin(
            self.handle, raw, len(raw), *(_ints(zones[name]) for name in need), int(bool(manual_coin))
        )
        return self._fork(reply, BEGIN_ERRORS, "begin")

    def step(self, fork: Fork, select: list[int]) -> Fork:
        """The fork after answering its decision with `select` (option indices), as ``Battle.select`` would."""
        reply = self.lib.SearchStep(self.handle, int(fork.id), _ints(select), len(select))
        return self._fork(reply, STEP_ERRORS, f"step of fork {fork.id} with {list(select)}")

    def release(self, fork: Fork) -> None:
        self.lib.SearchRelease(self.handle, int(fork.id))
        self.live.discard(fork.id)

    def end(self) -> None:
        """Every fork released; the engine reuses their memory for the next search."""
        self.lib.SearchEnd(self.handle)
        self.live.clear()

    def _fork(self, reply: bytes, errors: dict[int, str], what: str) -> Fork:
        try:
            result = json.loads(reply)
        except (TypeError, ValueError) as exc:
            raise SearchError(f"search {what}: the engine's reply is not JSON ({exc})") from None
        code = int(result.get("error") or 0)
        if code:
            raise SearchError(f"search {what}: the engine refused it (error {code}: {errors.get(code, 'unknown')})")
        state = result["state"]
        fork = Fork(int(state["searchId"]), state["observation"])
        self.live.add(fork.id)
        return fork

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.end()


def truth(battle) -> World:
    """A live battle's own hidden zones, from the acting player's side (the engine's ``VisualizeData``: the full
    state). For tests and measurements of the forward model; an agent never sees this."""
    lib = battle.lib
    lib.VisualizeData.restype = ctypes.c_char_p
    lib.VisualizeData.argtypes = [ctypes.c_void_p]
    full = json.loads(lib.VisualizeData(battle.ptr))[-1]["current"]
    me = int(battle.obs["current"]["yourIndex"])
    mine, theirs = full["players"][me], full["players"][1 - me]
    ids = lambda cards: [int(c["id"]) for c in cards]
    face_down = needed(battle.obs)["opponent_active"]
    return World(
        your_deck=ids(mine["deck"]),
        your_prize=ids(mine["prize"]),
        opponent_deck=ids(theirs["deck"]),
        opponent_prize=ids(theirs["prize"]),
        opponent_hand=ids(theirs["hand"]),
        opponent_active=ids(theirs["active"][:1]) if face_down else [],
    )


def _strip(o):
    """Without serials: a fork numbers the cards of its world anew."""
    if isinstance(o, dict):
        return {k: _strip(v) for k, v in o.items() if k != "serial"}
    if isinstance(o, list):
        return [_strip(v) for v in o]
    return o


def seen_by(obs: dict, real: dict) -> dict:
    """What the acting player of `real` sees of `obs`: a fork's observation shows its whole world (prizes, the
    opponent's hand), which the game's own observation hides."""
    cur, seen = obs["current"], real["current"]
    me = int(seen["yourIndex"])
    players = []
    for i, (p, q) in enumerate(zip(cur["players"], seen["players"])):
        players.append(
            {
                "active": _strip(p["active"]) if q["active"] and q["active"][0] is not None else len(p["active"]),
                "bench": _strip(p["bench"]),
                "discard": _strip(p["discard"]),
                "counts": (p["deckCount"], p["handCount"], len(p["prize"])),
                "hand": (sorted(c["id"] for c in p["hand"]) if p.get("hand") is not None else "hidden")
                if i == me and q.get("hand") is not None
                else None,
            }
        )
    sel = obs["select"]
    return {
        "turn": cur["turn"],
        "you": cur["yourIndex"],
        "result": cur["result"],
        "players": players,
        "select": None
        if sel is None
        else _strip({k: sel[k] for k in ("type", "context", "minCount", "maxCount", "option")}),
    }
