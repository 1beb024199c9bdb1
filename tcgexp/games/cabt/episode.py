"""An episode as Kaggle's harness writes it, read into training rows (one per pick, both seats).

The reader walks ``steps``: an agent whose status is ``ACTIVE`` at step t with a ``select`` in its observation
answered it with its action at step t+1 (a list of option indices, or ``{"action": [...]}``). The first answer
(``select`` null) is the deck: it makes no row, and its card ids must be known. An empty answer makes no row;
an answer of k indices makes k rows sharing ``decision_id`` (``substep`` 0..k-1), each seeing the picks before
it. A round (``current.round``; best-of-N episodes play several) is its own lane pair: ``episode_id`` is
``match * 64 + round - 1``, so a lane's memory starts afresh with each round. The answer an agent gave as it
went ``ERROR``, ``INVALID`` or ``TIMEOUT`` is not a row; its decisions before are, and say so
(``end_status``).

Refused, naming the step: another environment, a format the reader does not know, an answer that is not
among the offered options, a card id the database does not know, a round of more than ``MAX_ROUNDS``, a
decision offering more options than the corpus's ``max_options``. ``steps[0][0].visualize`` (every hidden
card) and ``logs`` are never read: the rows depend on each side's observations alone.
"""

from __future__ import annotations

import hashlib

import numpy as np

from .episode_shape import FAILED, episode_problem, kind, locate, observation_problem
from .features import OPTION_DIM, PICKED, STATE_DIM, attack_damage, option_features, state_features
from .tables import Tables

MAX_ROUNDS = 64  # rounds per episode (episode_id = match * 64 + round - 1)
MAX_DECISIONS = 10000  # per round and lane pair: decision_id = episode_id * 10000 + decision index
MAX_MATCH = (2**63 - 1) // (MAX_ROUNDS * MAX_DECISIONS) - 1
AUX_HORIZON_TURNS = 4
STATUSES = {"DONE": 0, "ACTIVE": 0, "INACTIVE": 0, "ERROR": 1, "INVALID": 2, "TIMEOUT": 3}
SCHEMA_VERSIONS = (1,)


class EpisodeRefused(ValueError):
    """This episode cannot be read (the message names the step); the rest of its day is kept."""


def hash_deck(deck: list[int]) -> int:
    return int.from_bytes(hashlib.sha256(",".join(map(str, sorted(deck))).encode()).digest()[:8], "little") >> 1


def _answer(action):
    if isinstance(action, dict) and "action" in action:
        action = action["action"]
    return action


def check_format(ep) -> None:
    if not isinstance(ep, dict):
        raise EpisodeRefused(f"not an episode: a JSON {type(ep).__name__}, not an object")
    name = ep.get("name")
    if name != "cabt":
        raise EpisodeRefused(f"another environment: {name!r}, not 'cabt'")
    sv = ep.get("schema_version", 1)
    if sv not in SCHEMA_VERSIONS:
        raise EpisodeRefused(f"an episode format this reader does not know (schema_version {sv!r})")
    steps = ep.get("steps")
    if not isinstance(steps, list) or len(steps) < 2:
        raise EpisodeRefused("an episode format this reader does not know (no steps list)")
    for t, s in enumerate(steps):
        if not (isinstance(s, list) and len(s) == 2 and all(isinstance(a, dict) and "observation" in a for a in s)):
            raise EpisodeRefused(f"step {t}: an episode format this reader does not know (not two agents' entries)")
    problem = episode_problem(ep)  # configuration, info, rewards: cheap, and read before any step
    if problem:
        raise EpisodeRefused(problem)
    conf = ep.get("configuration") or {}
    if conf.get("version", 2) not in (1, 2):
        raise EpisodeRefused(f"engine version {conf.get('version')!r} unknown (1 or 2)")


# what reading a malformed field raises (a null where a list goes, a string divided, a number too wide for its column)
MALFORMED = (TypeError, KeyError, AttributeError, IndexError, ValueError, OverflowError, ZeroDivisionError)


def encode_episode(ep: dict, **kw) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Rows of one episode: (columns, stats); raises EpisodeRefused naming the step (and, for a field of the wrong
    JSON type, the field). `check_only`: every check, no rows."""
    where: list = []  # the decision being read: (step, agent)
    try:
        return _encode(ep, where=where, **kw)
    except EpisodeRefused:
        raise
    except MALFORMED as exc:
        raise EpisodeRefused(locate(ep, where, exc)) from None


def _encode(
    ep: dict,
    *,
    where: list,
    match: int,
    tb: Tables,
    max_options: int,
    players: list[dict],
    would_ko: bool = True,
    check_only: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    check_format(ep)
    if not 0 <= match <= MAX_MATCH:
        raise EpisodeRefused(f"match number {match} out of range")
    steps = ep["steps"]
    n_steps = len(steps)
    final = [str(steps[-1][i].get("status")) for i in (0, 1)]
    decks: list[list[int]] = [[], []]
    if n_steps > 1:
        for i in (0, 1):
            d = _answer(steps[1][i].get("action"))
            if isinstance(d, list) and len(d) == 60:
                bad = [c for c in d if not (isinstance(c, int) and c in tb.db.card)]
                if bad:
                    raise EpisodeRefused(f"step 1: agent {i}'s deck holds unknown card id {bad[0]!r}")
                decks[i] = d
    deck_hash = [hash_deck(d) if d else 0 for d in decks]
    # -- the decisions: (step, side, obs, picks)
    decisions = []
    for t in range(1, n_steps - 1):
        for i in (0, 1):
            entry = steps[t][i]
            if entry.get("status") != "ACTIVE":
                continue
            obs = entry["observation"]
            where[:] = (t, i)
            if not isinstance(obs, dict):
                raise EpisodeRefused(f"step {t}: agent {i}'s observation is {kind(obs)}, not an object")
            sel = obs.get("select")
            if sel is None:
                continue
            nxt = steps[t + 1][i]
            if nxt.get("status") in FAILED:
                continue  # the answer that failed (its agent's status says how): no row
            problem = observation_problem(obs, t, i)  # every field it reads, of the JSON type it reads
            if problem:
                raise EpisodeRefused(problem)
            cur = obs["current"]
            if cur.get("yourIndex") != i:
                raise EpisodeRefused(
                    f"step {t}: agent {i} is ACTIVE but the observation is player {cur.get('yourIndex')}'s"
                )
            answer = _answer(nxt.get("action"))
            opts = sel["option"]
            if not isinstance(answer, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in answer):
                raise EpisodeRefused(f"step {t + 1}: agent {i}'s action {answer!r} is not a list of option indices")
            if any(not 0 <= x < len(opts) for x in answer) or len(set(answer)) != len(answer):
                raise EpisodeRefused(
                    f"step {t + 1}: agent {i}'s action {answer} is not among the {len(opts)} offered options"
                )
            if answer and not sel.get("minCount", 0) <= len(answer) <= sel.get("maxCount", len(opts)):
                raise EpisodeRefused(
                    f"step {t + 1}: agent {i} picked {len(answer)} options, outside [{sel.get('minCount')}, "
                    f"{sel.get('maxCount')}]"
                )
            if len(opts) > max_options:
                raise EpisodeRefused(
                    f"step {t}: a decision offers {len(opts)} options, more than dataset.max_options={max_options}"
                )
            for p in cur.get("players") or ():
                for zone in ("active", "bench", "hand", "discard"):
                    for card in p.get(zone) or ():
                        if card and card.get("id") not in tb.db.card:
                            raise EpisodeRefused(f"step {t}: unknown card id {card.get('id')!r} in a {zone}")
            rnd = int(cur.get("round") or 1)
            if not 1 <= rnd <= MAX_ROUNDS:
                raise EpisodeRefused(f"step {t}: round {rnd} outside 1..{MAX_ROUNDS}")
            decisions.append((t, i, obs, answer, rnd))
    if check_only:
        return {}, {"decisions": len(decisions)}
    # -- round results from what the observations show (wins and draws at each round's start) and the rewards
    rounds = sorted({d[4] for d in decisions})
    start_score: dict[int, tuple[int, int, int]] = {}
    for _, _, obs, _, rnd in decisions:
        if rnd not in start_score:
            ps = obs["current"]["players"]
            start_score[rnd] = (
                int(ps[0].get("win") or 0),
                int(ps[1].get("win") or 0),
                int(obs["current"].get("draw") or 0),
            )
    result: dict[int, int | None] = {}  # winner side, 2 draw, None unknown
    for k, rnd in enumerate(rounds):
        if k + 1 < len(rounds):
            a, b = start_score[rnd], start_score[rounds[k + 1]]
            delta = (b[0] - a[0], b[1] - a[1], b[2] - a[2])
            result[rnd] = 0 if delta == (1, 0, 0) else 1 if delta == (0, 1, 0) else 2 if delta == (0, 0, 1) else None
        elif all(s == "DONE" for s in final) and ep.get("rewards") is not None:
            rw = ep["rewards"]  # two numbers (check_format): null or absent is an unknown result, never a draw
            result[rnd] = 0 if rw[0] > rw[1] else 1 if rw[1] > rw[0] else 2
        else:
            result[rnd] = None  # an ERROR / INVALID / TIMEOUT ended it, or no rewards: no natural result
    # -- rows
    n = sum(max(len(d[3]), 0) for d in decisions)
    feats = np.zeros((n, STATE_DIM), np.float32)
    optf = np.zeros((n, max_options, OPTION_DIM), np.float32)
    mask = np.zeros((n, max_options), bool)
    label = np.zeros(n, np.int32)
    wk = np.zeros((n, max_options), np.float32)
    wk_valid = np.zeros(n, bool)
    side = np.zeros(n, np.int8)
    step_id = np.zeros(n, np.int32)
    dec_id = np.zeros(n, np.int64)
    substep = np.zeros(n, np.int16)
    rnd_col = np.zeros(n, np.int16)
    eid_col = np.zeros(n, np.int64)
    minc = np.zeros(n, np.int16)
    maxc = np.zeros(n, np.int16)
    picks = np.zeros(n, np.int16)
    offered = np.zeros(n, np.int16)
    window = np.zeros(n, np.int64)
    turn_col = np.zeros(n, np.int64)
    order_col = np.zeros(n, np.int64)
    lanes: dict[tuple[int, int], int] = {}
    dec_count: dict[int, int] = {}
    events: list[tuple[int, int, int, int, int]] = []  # (round, order, turn, side, prizes taken)
    prev_prizes: dict[int, list[int | None]] = {}
    eligible = valid_trials = failed_trials = valid_zero = failed_rows = single = 0
    r = 0
    for order, (t, i, obs, answer, rnd) in enumerate(decisions):
        where[:] = (t, i)
        cur, sel = obs["current"], obs["select"]
        turn = int(cur.get("turn") or 0)
        ps = cur["players"]
        prizes = [len(ps[0].get("prize") or ()), len(ps[1].get("prize") or ())]
        last = prev_prizes.get(rnd)
        if last is not None:
            for p in (0, 1):
                if prizes[p] < last[p]:
                    events.append((rnd, order, turn, p, last[p] - prizes[p]))
        prev_prizes[rnd] = prizes
        first = cur.get("firstPlayer")
        if turn == 0:
            win_turn = 1 if first == i else 2
        else:
            mine_now = (turn % 2 == 1) == (first == i)
            win_turn = turn if mine_now else turn + 1
        lane = lanes.get((rnd, i), 0)
        d = dec_count.get(rnd, 0)
        if d >= MAX_DECISIONS:
            raise EpisodeRefused(f"step {t}: round {rnd} has more than {MAX_DECISIONS} decisions")
        eid = match * MAX_ROUNDS + rnd - 1
        ma = (ps[i].get("active") or [None])[0]
        oa = (ps[1 - i].get("active") or [None])[0]
        n_opt = len(sel["option"])
        picked: set[int] = set()
        for k, x in enumerate(answer):
            if k == 0:
                state_features(tb, obs, 0, feats[r])
            else:  # a later pick of the same decision: the same state, one more pick
                feats[r] = feats[r - 1]
                feats[r, PICKED] = k / 4
            option_features(tb, obs, picked, optf[r])
            mask[r, :n_opt] = True
            for pk in picked:
                mask[r, pk] = False
            label[r] = x
            side[r], step_id[r], dec_id[r], substep[r] = i, lane, eid * MAX_DECISIONS + d, k
            rnd_col[r], eid_col[r] = rnd, eid
            minc[r], maxc[r], picks[r], offered[r] = sel.get("minCount", 0), sel.get("maxCount", 0), len(answer), n_opt
            window[r], turn_col[r], order_col[r] = win_turn, turn, order
            if n_opt - len(picked) == 1:
                single += 1
            attacks = [j for j, o in enumerate(sel["option"]) if o.get("attackId") is not None]
            if attacks and k == 0:
                eligible += 1
            if attacks and would_ko:
                trials = []
                for j in attacks:
                    dmg, sure = attack_damage(tb, int(sel["option"][j]["attackId"]), ma, oa)
                    trials.append((j, (dmg >= (oa.get("hp") or 0)) if sure and oa else None))
                fails = sum(v is None for _, v in trials)
                if k == 0:
                    failed_trials += fails
                    valid_trials += len(trials) - fails
                if fails:
                    failed_rows += k == 0
                else:
                    wk_valid[r] = True
                    valid_zero += k == 0 and not any(v for _, v in trials)
                for j, v in trials:
                    if v:
                        wk[r, j] = 1.0
            picked.add(x)
            r += 1
        if answer:
            lanes[(rnd, i)] = lane + 1
            dec_count[rnd] = d + 1
    # -- lane ends, aux targets
    terminal = np.zeros(n, bool)
    for (rnd, i), count in lanes.items():
        terminal[(rnd_col == rnd) & (side == i) & (step_id == count - 1)] = True
    aux_ko = np.zeros(n, np.float32)
    aux_delta = np.zeros(n, np.float32)
    if events and n:
        ev = np.asarray(events, np.int64)
        same = ev[None, :, 0] == rnd_col[:, None]
        after = same & (ev[None, :, 1] > order_col[:, None])  # seen at a later observation of that round
        own = ev[None, :, 3] == side[:, None].astype(np.int64)
        aux_ko = (after & own & (ev[None, :, 2] <= window[:, None])).any(axis=1).astype(np.float32)
        in_h = after & (ev[None, :, 2] < window[:, None] + AUX_HORIZON_TURNS)
        aux_delta = (in_h * np.where(own, 1, -1) * ev[None, :, 4]).sum(axis=1).astype(np.float32)
    res = np.array([-1 if result.get(int(x)) is None else result[int(x)] for x in rnd_col], np.int64)
    aux_valid = res >= 0
    aux_return = np.where(res == 2, 0.0, np.where(res == side, 1.0, -1.0)) * aux_valid
    status = [STATUSES.get(s, 1) for s in final]
    names = [(players[i] or {}).get("name") for i in (0, 1)]
    ratings = [(players[i] or {}).get("rating") for i in (0, 1)]
    columns = {
        "episode_id": eid_col,
        "side": side,
        "step_id": step_id,
        "decision_id": dec_id,
        "substep": substep,
        "new_episode": step_id == 0,
        "terminal": terminal,
        "is_self": np.zeros(n, bool),
        "features": feats,
        "action_mask": mask,
        "label": label,
        "would_ko": wk,
        "would_ko_valid": wk_valid,
        "aux_ko": aux_ko,
        "aux_prize_delta": aux_delta,
        "aux_terminal": terminal.astype(np.float32),
        "aux_return": aux_return.astype(np.float32),
        "aux_valid": aux_valid,
        "option_features": optf.reshape(n, max_options * OPTION_DIM),
        "single_option": offered - substep == 1,
        "min_count": minc,
        "max_count": maxc,
        "picks": picks,
        "round": rnd_col,
        "player": np.array([names[s] for s in side], dtype=object),
        "opponent": np.array([names[1 - s] for s in side], dtype=object),
        "rating": np.array([np.nan if ratings[s] is None else ratings[s] for s in side], np.float32),
        "opponent_rating": np.array([np.nan if ratings[1 - s] is None else ratings[1 - s] for s in side], np.float32),
        "deck_hash": np.array([deck_hash[s] for s in side], np.int64),
        "end_status": np.array([status[s] for s in side], np.int8),
    }
    stats = {
        "rows": n,
        "decisions": sum(dec_count.values()),
        "rounds": len(rounds),
        "single_option_rows": single,
        "eligible": eligible,
        "computed": eligible if would_ko else 0,
        "valid_trials": valid_trials,
        "failed_trials": failed_trials,
        "valid_rows": int(wk_valid.sum()),
        "valid_zero_rows": valid_zero,
        "failed_rows": failed_rows,
        "ended_" + ("ok" if all(s == "DONE" for s in final) else "failed"): 1,
    }
    return columns, stats
