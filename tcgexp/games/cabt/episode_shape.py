"""What the reader reads of an episode, as JSON types: a malformed episode is refused by step and field.

Every decision the reader reads is checked here first (``observation_problem``): each field it reads must have
the JSON type it reads it as, and a value it uses as an index or a count its range, else the episode is refused
with one line such as ``step 12: agent 0's observation.select.option[3].type is a string, not an integer``. A
field it reads through ``or`` may be absent or null; a flag it reads as truthy may be anything. The cards of
hands and discard piles are checked by the reader itself as it reads them (their ids), and walked here only
when it fails on one (``full``), to say which: the commonest objects, walked once.
"""

from __future__ import annotations

FAILED = ("ERROR", "INVALID", "TIMEOUT")  # an agent's status after an answer that failed: that answer is no row
INT_RANGE = (-(2**31), 2**31 - 1)  # every integer the rows keep fits an int32 column (counts: int16)
COUNT_RANGE = (0, 2**15 - 1)


def kind(value) -> str:
    """A value's JSON type, as a person reads it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class Shape:
    """One field's expected JSON type. ``problem(value)`` is None, or (the path below this field, reversed; what is
    wrong): the path is made only for a field that is wrong, as the walk unwinds (most fields are right)."""

    def __init__(self, what: str, nullable: bool) -> None:
        self.what, self.nullable = what, nullable

    def problem(self, value):
        if value is None:
            return None if self.nullable else ([], f"is null, not {self.what}")
        return self.check(value)

    def check(self, value):
        raise NotImplementedError

    def wrong(self, value):
        return [], f"is {kind(value)}, not {self.what}{' or null' if self.nullable else ''}"


class Any(Shape):
    def __init__(self) -> None:
        super().__init__("anything", True)

    def check(self, value):
        return None


class Int(Shape):
    def __init__(self, nullable: bool = True, lo: int = INT_RANGE[0], hi: int = INT_RANGE[1], num: bool = False):
        super().__init__("a number" if num else "an integer", nullable)
        self.lo, self.hi = lo, hi
        self.types = (int, float) if num else (int,)

    def check(self, value):
        if value.__class__ not in self.types:  # bool is not int here, nor a subclass of either
            return self.wrong(value)
        if not self.lo <= value <= self.hi:
            return [], f"is {value!r}, outside [{self.lo}, {self.hi}]"
        return None


class List(Shape):
    def __init__(self, item: Shape, nullable: bool = True, length: int | None = None) -> None:
        super().__init__("a list", nullable)
        self.item, self.length = item, length

    def check(self, value):
        if value.__class__ is not list:
            return self.wrong(value)
        if self.length is not None and len(value) != self.length:
            return [], f"has {len(value)} entries, not {self.length}"
        if self.item.__class__ is Any:
            return None
        problem = self.item.problem
        for k, v in enumerate(value):
            p = problem(v)
            if p:
                p[0].append(f"[{k}]")
                return p
        return None


class Obj(Shape):
    def __init__(self, fields: dict[str, Shape], required: tuple[str, ...] = (), nullable: bool = True) -> None:
        super().__init__("an object", nullable)
        self.fields, self.required = fields, required

    def check(self, value):
        if value.__class__ is not dict:
            return self.wrong(value)
        for name in self.required:
            if name not in value:
                return [f".{name}"], "is missing"
        get = self.fields.get
        for name, v in value.items():
            shape = get(name)
            if shape is None or (v is None and shape.nullable):
                continue
            if shape.__class__ is Int and v.__class__ in shape.types and shape.lo <= v <= shape.hi:
                continue  # the commonest field, checked without a call: this walk runs on every decision
            p = shape.problem(v)
            if p:
                p[0].append(f".{name}")
                return p
        return None


def said(root: str, problem) -> str | None:
    """`problem` as a line: the field's path from `root`, then what is wrong."""
    if not problem:
        return None
    path = root + "".join(reversed(problem[0]))
    return f"{path.lstrip('.')} {problem[1]}"


SIDE = Int(lo=0, hi=1)
CARD = Obj(
    {
        "id": Int(),
        "hp": Int(num=True),
        "maxHp": Int(num=True),
        "energies": List(Int(nullable=False)),
        "tools": List(Any()),
        "preEvolution": List(Any()),
        "playerIndex": Any(),  # compared, never used as an index
    }
)
ZONE = List(CARD)
PILE = List(Any())  # a hand or a discard pile: each card's id checked by the reader itself, where it reads them
PLAYER_FIELDS = {
    "active": ZONE,
    "bench": ZONE,
    "hand": PILE,
    "discard": PILE,
    "prize": List(Any()),
    "deckCount": Int(num=True),
    "handCount": Int(num=True),
    "benchMax": Int(num=True),
    "win": Int(num=True),
}
PLAYER = Obj(PLAYER_FIELDS, nullable=False)
PLAYER_FULL = Obj({**PLAYER_FIELDS, "hand": ZONE, "discard": ZONE}, nullable=False)
CURRENT = Obj(
    {
        "yourIndex": SIDE,
        "players": List(PLAYER, nullable=False, length=2),
        "turn": Int(),
        "turnActionCount": Int(num=True),
        "round": Int(),
        "draw": Int(),
        "win": Int(),
        "stadium": ZONE,
    },
    required=("yourIndex", "players"),
    nullable=False,
)
OPTION = Obj(
    {
        "type": Int(nullable=False, lo=0),  # may be absent (0), not null
        "area": Int(lo=0),
        "playerIndex": SIDE,
        "inPlayArea": Int(lo=0),
        "inPlayIndex": Int(),
        "index": Int(),
        "number": Int(num=True),
        "count": Int(num=True),
        "cardId": Int(),
        "attackId": Int(),
    },
    nullable=False,
)
SELECT = Obj(
    {
        "option": List(OPTION, nullable=False),
        "type": Int(nullable=False, lo=0),
        "context": Int(nullable=False, lo=0),
        "minCount": Int(nullable=False, lo=COUNT_RANGE[0], hi=COUNT_RANGE[1]),
        "maxCount": Int(nullable=False, lo=COUNT_RANGE[0], hi=COUNT_RANGE[1]),
        "remainDamageCounter": Int(num=True),
        "remainEnergyCost": Int(num=True),
        "effect": CARD,
        "contextCard": CARD,
        "deck": ZONE,
    },
    required=("option", "type", "context", "minCount", "maxCount"),
    nullable=False,
)
OBSERVATION = Obj({"select": SELECT, "current": CURRENT}, required=("select", "current"), nullable=False)
# the same, every card of a hand and a discard pile too: where the reader failed, to say which field
CURRENT_FULL = Obj({**CURRENT.fields, "players": List(PLAYER_FULL, nullable=False, length=2)}, CURRENT.required, False)
OBSERVATION_FULL = Obj({"select": SELECT, "current": CURRENT_FULL}, OBSERVATION.required, nullable=False)
EPISODE = Obj(
    {
        "configuration": Obj({"version": Int(), "bo": Int()}),
        "info": Obj({"TeamNames": List(Any()), "Agents": List(Any())}),
        "rewards": List(Int(num=True), length=2),
        "statuses": List(Any()),
    }
)

# Kaggle's episode metadata (``<stem>_info.json``): the agents' names and ratings, the episode's times
SIDECAR = Obj({"agents": List(Obj({"index": Int(lo=0)}))})


def episode_problem(ep: dict) -> str | None:
    """The first malformed field of the episode's own fields (configuration, info, rewards), or None."""
    return said("", EPISODE.problem(ep))


def observation_problem(obs, t: int, i: int, full: bool = False) -> str | None:
    """What is wrong with agent `i`'s observation at step `t`, as the reader reads a decision, or None (`full`:
    every card of hands and discard piles too, which the reader checks itself as it reads them)."""
    p = said("observation", (OBSERVATION_FULL if full else OBSERVATION).problem(obs))
    return f"step {t}: agent {i}'s {p}" if p else None


def decisions_read(steps: list):
    """(step, agent, observation) of every decision the reader reads: an ACTIVE agent with a ``select``, whose
    answer (at the next step) did not fail."""
    for t in range(1, len(steps) - 1):
        for i in (0, 1):
            entry = steps[t][i]
            if entry.get("status") != "ACTIVE":
                continue
            obs = entry["observation"]
            if isinstance(obs, dict) and obs.get("select") is None:
                continue
            if steps[t + 1][i].get("status") in FAILED:
                continue
            yield t, i, obs


def locate(ep: dict, where: list, exc: BaseException) -> str:
    """Which field made the reader fail: the first malformed one, by step and path (``episode_shape``)."""
    for t, i, obs in decisions_read(ep["steps"]):
        problem = observation_problem(obs, t, i, full=True)
        if problem:
            return problem
    at = f"step {where[0]}: agent {where[1]}'s observation" if where else "the episode"
    return f"{at} is malformed in a way the reader does not name ({type(exc).__name__}: {exc})"
