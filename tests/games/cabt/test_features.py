"""The state vector's counted slots (hand and discard piles by card type) equal, bit for bit, the in-place float32
additions they replace (``f[x] += step`` per card, as the corpus has always been encoded), for the piles a game
holds and for longer ones, with card ids the database lacks among them."""

from __future__ import annotations

import numpy as np
import pytest

from tests.games.cabt.test_infer import decisions_of, kit, played  # noqa: F401 - fixtures

pytestmark = pytest.mark.extra("cabt")


@pytest.fixture(scope="module")
def tb():
    from tcgexp.games.cabt.game import tables

    return tables(2)


def reference(tb, obs: dict, out: np.ndarray) -> None:
    """The hand and discard slots as they were computed before counting: one float32 addition per card."""
    from tcgexp.games.cabt.cards import CARD_TYPES, N_TYPES
    from tcgexp.games.cabt.features import S

    cur = obs["current"]
    me = int(cur["yourIndex"])
    mine, opp = cur["players"][me], cur["players"][1 - me]
    ma = (mine.get("active") or [None])[0]
    f, o, nt = out, S["my_hand"], len(CARD_TYPES)
    on_board = {tb.name.get(tb.cid(m)) for m in [ma, *(mine.get("bench") or ())] if tb.cid(m)}
    for h in mine.get("hand") or ():
        cid = tb.cid(h)
        if not cid:
            continue
        ct = tb.card_type[cid]
        f[o + ct] += 0.1
        if ct in (5,):
            f[o + nt + tb.energy_type[cid] % N_TYPES] += 0.1
        f[o + nt + N_TYPES] += 0.1 * tb.basic[cid]
        f[o + nt + N_TYPES + 1] += 0.2 * (tb.evolves_from.get(cid) in on_board)
    f[o + nt + N_TYPES + 2] = len(mine.get("hand") or ()) / 20
    o = S["discards"]
    for p in (mine, opp):
        for card in p.get("discard") or ():
            cid = tb.cid(card)
            if cid:
                f[o + tb.card_type[cid]] += 0.05
        o += nt


@pytest.mark.parametrize("scale", [1, 3, 25], ids=["as-played", "piles-x3", "piles-x25"])
def test_counted_slots_equal_the_additions_they_replace(played, tb, scale):  # noqa: F811
    import copy

    from tcgexp.games.cabt.features import STATE_DIM, S, state_features

    ep, _ = played
    # an id in range whose type is unknown (-1), as one the database lacks would be (none does today)
    tb, gap = copy.copy(tb), max(tb.db.card)
    tb.card_type = tb.card_type.copy()
    tb.card_type[gap] = -1
    tb.card_type_of = tb.card_type.tolist()
    seen = 0
    for obs, _ in decisions_of(ep):
        obs = copy.deepcopy(obs)
        cur = obs["current"]
        for p in cur["players"]:
            for key in ("hand", "discard"):
                pile = p.get(key) or []
                if pile or scale > 1:
                    p[key] = pile * scale + [{"id": gap}, {"id": None}, None]
        got = np.zeros(STATE_DIM, np.float32)
        state_features(tb, obs, 0, got)
        bare = copy.deepcopy(obs)  # every other slot as the encoder fills it, the counted ones zero
        for p in bare["current"]["players"]:
            p["hand"], p["discard"] = [], []
        want = np.zeros(STATE_DIM, np.float32)
        state_features(tb, bare, 0, want)
        players = slice(S["players"], S["my_active"])  # the piles' sizes: not counted slots, read from `got`
        want[players] = got[players]
        reference(tb, obs, want)
        assert got.tobytes() == want.tobytes(), np.flatnonzero(got != want)
        seen += 1
    assert seen > 50
