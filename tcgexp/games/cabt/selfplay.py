"""Episodes played in the engine, written as Kaggle's harness writes them (``env.toJSON()``).

``play_episode`` drives two agents through a best-of-``bo`` match the way ``kaggle_environments``' cabt
interpreter does (the deck answer first; one ``ACTIVE`` agent per step; the inactive agent keeps its last
observation and an empty action; rounds restarted with the second player choosing who starts; an answer the
engine refuses ends the match with that agent ``INVALID``, an agent that raises with ``ERROR``), and returns
the episode dict: ``steps`` (per step, both agents' action, reward, info, observation, status),
``configuration``, ``rewards``, ``statuses``, ``info``. The harness's ``steps[0][0].visualize`` (the full
hidden state per step, for Kaggle's viewer) is not written.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable

from .engine import LATEST, Engine, EngineError, package_version

OVERAGE = 600  # the harness's remainingOverageTime (seconds); self-play spends none of it

Agent = Callable[[dict], list]


def _blank() -> dict:
    return {"remainingOverageTime": OVERAGE, "select": None, "logs": [], "current": None, "search_begin_input": None}


def _entry(action, obs: dict, status: str, reward=0) -> dict:
    return {"action": action, "reward": reward, "info": {}, "observation": obs, "status": status}


def specification() -> dict:
    """The environment's specification as its package ships it (``envs/cabt/cabt.json``)."""
    from .engine import engine_dir

    return json.loads((engine_dir().parent / "cabt.json").read_text())


def play_episode(
    eng: Engine, agents: list[Agent], *, bo: int = 3, episode_id: str | None = None, info: dict | None = None
) -> dict:
    """One match between `agents` (each ``agent(obs) -> list``) in harness form."""
    bo = 1 if eng.version == 1 else bo
    steps: list[list[dict]] = []
    obs_of = [_blank(), _blank()]
    obs_of[0]["step"] = 0
    steps.append([_entry([], copy.deepcopy(obs_of[0]), "ACTIVE"), _entry([], copy.deepcopy(obs_of[1]), "ACTIVE")])
    statuses, rewards = ["ACTIVE", "ACTIVE"], [0, 0]
    decks = []
    for i in (0, 1):
        try:
            decks.append(list(agents[i](copy.deepcopy(obs_of[i]))))
        except Exception:  # noqa: BLE001 - an agent's own failure is its ERROR status, as in the harness
            decks.append([])
            statuses[i] = "ERROR"
    wins = [0, 0, 0]
    battle = None
    last = [list(d) for d in decks]  # each agent's action recorded at the next step

    def record(active: int | None, done: bool = False) -> None:
        t = len(steps)
        row = []
        for i in (0, 1):
            o = copy.deepcopy(obs_of[i])
            if i == 0:
                o["step"] = t
            st = statuses[i] if done else ("ACTIVE" if i == active else "INACTIVE")
            row.append(_entry(last[i], o, st, rewards[i] if done else 0))
        steps.append(row)

    def finish(loser: int | None, why: dict[int, str] | None = None) -> None:
        for i in (0, 1):
            if why and i in why:
                statuses[i] = why[i]
            elif statuses[i] in ("ACTIVE", "INACTIVE"):
                statuses[i] = "DONE"
        if loser is None:
            rewards[:] = [0, 0]
        else:
            rewards[loser], rewards[1 - loser] = -1, 1

    errored = [i for i in (0, 1) if statuses[i] == "ERROR"]
    if errored:
        finish(errored[0], {errored[0]: "ERROR"})
        record(None, done=True)
        return _episode(eng, steps, bo, rewards, statuses, episode_id, info)
    try:
        battle = eng.battle(decks[0], decks[1])
    except EngineError:
        bad = 0 if any(eng.check_deck(decks[0]) for _ in (0,)) else 1
        finish(bad, {bad: "INVALID"})
        record(None, done=True)
        return _episode(eng, steps, bo, rewards, statuses, episode_id, info)
    try:
        while True:
            obs = battle.obs
            cur = obs["current"]
            if cur["result"] >= 0:
                wins[cur["result"] if cur["result"] in (0, 1) else 2] += 1
                played = sum(wins)
                remain = bo - played
                if wins[0] > wins[1] + remain or wins[1] > wins[0] + remain or remain <= 0:
                    finish(None if wins[0] == wins[1] else (1 if wins[0] > wins[1] else 0))
                    last = [last[0], last[1]]
                    record(None, done=True)
                    return _episode(eng, steps, bo, rewards, statuses, episode_id, info)
                battle.close()
                battle = eng.battle(decks[0], decks[1], reverse=played % 2 != 0)
                continue
            cur["players"][0]["win"], cur["players"][1]["win"] = wins[0], wins[1]
            cur["draw"], cur["round"] = wins[2], sum(wins) + 1
            who = int(cur["yourIndex"])
            obs_of[who] = {"remainingOverageTime": OVERAGE, **obs}
            record(who)
            last = [[], []]
            try:
                answer = agents[who](copy.deepcopy(obs_of[who]))
            except Exception:  # noqa: BLE001 - the agent's failure ends the match with its ERROR
                finish(who, {who: "ERROR"})
                last[who] = None
                record(None, done=True)
                return _episode(eng, steps, bo, rewards, statuses, episode_id, info)
            last[who] = answer
            if isinstance(answer, dict) and "action" in answer:
                answer = answer["action"]
            try:
                if not isinstance(answer, list) or not all(isinstance(x, int) for x in answer):
                    raise EngineError(f"not a list of ints: {answer!r}")
                battle.select(answer)
            except EngineError:
                finish(who, {who: "INVALID"})
                record(None, done=True)
                return _episode(eng, steps, bo, rewards, statuses, episode_id, info)
    finally:
        if battle is not None:
            battle.close()


def _episode(eng: Engine, steps, bo, rewards, statuses, episode_id, info) -> dict:
    spec = specification()
    return {
        "id": episode_id or str(uuid.uuid4()),
        "name": spec.get("name", "cabt"),
        "title": spec.get("title", ""),
        "description": spec.get("description", ""),
        "version": spec.get("version", ""),
        "module_version": package_version(),
        "configuration": {
            "episodeSteps": 10000000,
            "actTimeout": 0,
            "runTimeout": 6000,
            "bo": bo,
            "version": eng.version if eng.version else LATEST,
        },
        "specification": spec,
        "steps": steps,
        "rewards": list(rewards),
        "statuses": list(statuses),
        "schema_version": 1,
        "info": info or {},
    }
