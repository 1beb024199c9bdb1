"""The deck a run's episodes' player used: what a run trained on imported episodes plays by default.

A run of ``dataset=cabt`` (imported episodes: ``dataset.demo.episodes_per_day`` 0) learned the decisions of the
players ``dataset.filter.players`` names (every player when null), with their decks; the demo's best teacher's
deck is another deck. With ``eval.deck`` null, such a run (its evaluation and its export) plays the deck those
players' rows hold most often (the rows' ``deck_hash``, counted over every built day of ``dataset.root``), read
back from the replay ZIPs (the deck is each agent's answer at step 1 of an episode). Where that cannot be done
(the root is not here, no row has a deck, no ZIP holds it) it says so and the best teacher's deck plays.
"""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from pathlib import Path

from .episode import hash_deck


def get(cfg, dotted: str):
    """`cfg`'s value at a dotted key (a dict or a DictConfig), None where any part is missing."""
    node = cfg
    for part in dotted.split("."):
        if hasattr(node, "get") and hasattr(node, "keys"):
            node = node.get(part)
        else:
            return None
    return node


def imported(run_cfg) -> bool:
    """The run trained on imported episodes of the real game: its config's ``dataset.demo`` (every run's has one)
    makes no episodes."""
    demo = get(run_cfg, "dataset.demo")
    return get(run_cfg, "dataset.game") == "cabt" and demo is not None and not (get(demo, "episodes_per_day") or 0)


def _counts(root: Path, players: list[str] | None) -> Counter:
    """Rows per deck_hash of `players`' decisions (everyone's when None) over the root's built days."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    counts: Counter = Counter()
    for day in sorted((root / "bc_data").glob("*.parquet")):
        table = pq.read_table(day, columns=["player", "deck_hash"])
        if players:
            table = table.filter(pc.is_in(table["player"], value_set=pa.array(list(players), pa.string())))
        counts.update(int(h) for h in table["deck_hash"].to_pylist() if h)
    return counts


def replay_decks(root: Path):
    """Every deck the replay ZIPs under `root` hold, as 60 card ids: each agent's answer at step 1 of an episode."""
    for archive in sorted(Path(root).rglob("*.zip")):
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                if not name.endswith(".json") or name.endswith(("_info.json", ".info.json", "index.json")):
                    continue
                steps = json.loads(z.read(name)).get("steps") or []
                for entry in steps[1] if len(steps) > 1 else []:
                    deck = entry.get("action") if isinstance(entry, dict) else None
                    deck = deck.get("action") if isinstance(deck, dict) else deck
                    if isinstance(deck, list) and len(deck) == 60:
                        yield [int(c) for c in deck]


def _find(root: Path, wanted: int) -> list[int] | None:
    """The deck of `wanted`'s hash, read from the replay ZIPs (step 1's answers), or None."""
    return next((deck for deck in replay_decks(root / "replays") if hash_deck(deck) == wanted), None)


def trained_deck(run_cfg) -> tuple[str | None, list[int] | None, str]:
    """(its label, its 60 card ids, why) of the deck the run's players used most; (None, None, why not)."""
    root = Path(str(get(run_cfg, "dataset.root") or ""))
    players = get(run_cfg, "dataset.filter.players")
    players = [str(p) for p in players] if players else None
    whose = f"dataset.filter.players={players}" if players else "every player's"
    if not (root / "bc_data").is_dir():
        return None, None, f"the run's corpus {root} is not here, so the deck its episodes' players used is unknown"
    counts = _counts(root, players)
    if not counts:
        return None, None, f"no row of {whose} decisions in {root} names a deck"
    wanted, rows = counts.most_common(1)[0]
    deck = _find(root, wanted)
    if deck is None:
        return None, None, f"no replay ZIP of {root} holds the deck {wanted} ({rows} rows)"
    total = sum(counts.values())
    label = f"{root}'s most played deck (deck_hash {wanted})"
    why = (
        f"the deck the run's episodes' players used most ({rows} of {total} rows of {whose} decisions, "
        f"{len(counts)} decks in all); eval.deck=<deck> plays another"
    )
    return label, deck, why
