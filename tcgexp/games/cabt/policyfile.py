"""A trained policy as one numpy file: the network's weights, how it plays, and the card database it reads.

``tcgexp_policy.npz`` (``numpy.savez``, no pickle) holds each weight as ``w/<name>`` (the names MLX gives
them), ``meta`` (JSON: format, the memory flag, option slots, would-KO, the deck it plays, where the weights
came from and their sha256) and the engine's card database as it exports it (``cards``, ``attacks``: JSON),
so a player needs neither the engine nor tcgexp to see what the corpus encoder saw. ``tcgexp-eval`` plays
from this file and ``tcgexp-export`` ships it beside ``main.py``. Numpy only: it ships inside a submission.

``load`` refuses, in one line naming the file (``PolicyFileError``), a file it cannot read (missing, not a
ZIP, a member whose CRC fails: bytes flipped), another format, weights whose sha256 is not the one recorded
(altered in a well-formed file), and a deck that breaks the deck rules (``cards.deck_problem``: 60 cards, at
most 4 of a name but basic energy, a Basic Pokémon, one ACE SPEC): the exported ``main.py`` loads its
weights with it at import, so Kaggle's harness sees the refusal when it loads the agent.
"""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np

from .cards import CardDB, deck_problem
from .netpolicy import Net, NetPolicy
from .tables import Tables

POLICY_FILE = "tcgexp_policy.npz"
FORMAT = 1


class PolicyFileError(ValueError):
    """A policy file that cannot be played: its message is one line naming the file and what to do."""


REDO = "export it again (tcgexp-export <run dir> <folder>)"


def _text(data: bytes) -> np.ndarray:
    return np.frombuffer(data, np.uint8)


def weights_sha256(weights: dict[str, np.ndarray]) -> str:
    """A digest of the weights' names, shapes and bytes (float32, C order): two policies with the same digest
    play the same moves."""
    h = hashlib.sha256()
    for name in sorted(weights):
        v = np.ascontiguousarray(weights[name], dtype=np.float32)
        h.update(f"{name}:{v.shape};".encode())
        h.update(v.tobytes())
    return h.hexdigest()


def save(path, weights: dict[str, np.ndarray], meta: dict, cards_json: bytes, attacks_json: bytes) -> None:
    """Write the policy file (`meta` gains ``format`` and ``weights_sha256``)."""
    meta = {**meta, "format": FORMAT, "weights_sha256": weights_sha256(weights)}
    arrays = {f"w/{k}": np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()}
    arrays["meta"] = _text(json.dumps(meta, sort_keys=True).encode())
    arrays["cards"] = _text(cards_json)
    arrays["attacks"] = _text(attacks_json)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    with open(path, "wb") as fh:
        fh.write(buf.getvalue())


def load(path) -> tuple[dict[str, np.ndarray], dict, list, list]:
    """(weights, meta, cards, attacks) of a policy file, checked: ``PolicyFileError`` in one line otherwise."""
    try:
        with np.load(path, allow_pickle=False) as z:
            weights = {k[2:]: z[k] for k in z.files if k.startswith("w/")}
            meta = json.loads(z["meta"].tobytes())
            cards = json.loads(z["cards"].tobytes())
            attacks = json.loads(z["attacks"].tobytes())
    except FileNotFoundError:
        raise PolicyFileError(f"{path}: no such policy file; {REDO}") from None
    except Exception as exc:  # noqa: BLE001 - zipfile, numpy and json each raise their own on damaged bytes
        why = (str(exc).strip().splitlines() or [""])[0][:160]
        raise PolicyFileError(f"{path}: not a readable policy file ({type(exc).__name__}: {why}); {REDO}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise PolicyFileError(f"{path}: policy file format {found!r}, this reader knows {FORMAT}; {REDO}")
    recorded, actual = meta.get("weights_sha256"), weights_sha256(weights)
    if recorded != actual:
        raise PolicyFileError(
            f"{path}: its weights' sha256 is {actual[:12]}, the file records {str(recorded)[:12]}: the weights were "
            f"altered or damaged; {REDO}"
        )
    why = deck_problem(CardDB(cards, attacks), list(meta.get("deck") or []))
    if why:
        raise PolicyFileError(f"{path}: its deck breaks the deck rules ({why}); {REDO} with a legal eval.deck")
    return weights, meta, cards, attacks


def player(path, deck: list[int] | None = None) -> NetPolicy:
    """The policy file's network as a player (its own deck unless `deck`)."""
    weights, meta, cards, attacks = load(path)
    net = Net(weights, memory=meta["memory"])
    tb = Tables(CardDB(cards, attacks))
    return NetPolicy(
        net, tb, meta["deck"] if deck is None else deck, max_options=meta["max_options"], would_ko=meta["would_ko"]
    )
