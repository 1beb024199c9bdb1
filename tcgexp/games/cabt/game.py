"""The real game as the corpus sees it: one object (``GAME``) behind the data layer's game interface.

What the corpus asks of a game whose days come from episode files (``tcgexp.data.episodes``): its columns
beyond the common ones, the widths of ``features`` and ``action_mask``, what pins a corpus built with it (the
engine package's version, the card database's digest per engine version, the encoder's layout), how to read
one episode file and its sidecar into (episode, players, date), how to encode an episode into rows, and how
to make demo episodes (self-play between the scripted teachers).
"""

from __future__ import annotations

import datetime as dt
import json
from functools import cache
from pathlib import Path

import pyarrow as pa

from . import features
from .episode import MAX_ROUNDS, EpisodeRefused, check_format, encode_episode
from .episode_shape import SIDECAR, said
from .tables import Tables

OPTION_DIM = features.OPTION_DIM
STATE_DIM = features.STATE_DIM


@cache
def tables(version: int) -> Tables:
    from .cards import CardDB
    from .engine import engine

    eng = engine(version)
    return Tables(CardDB(eng.cards(), eng.attacks()), eng.digest())


def _date(value) -> str | None:
    """A UTC date from Kaggle's time forms: {"seconds": N}, an epoch number, an ISO string."""
    try:
        if isinstance(value, dict) and "seconds" in value:
            value = float(value["seconds"])
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return dt.datetime.fromtimestamp(float(value), dt.UTC).date().isoformat()
        if isinstance(value, str) and value:
            return dt.datetime.fromisoformat(value).astimezone(dt.UTC).date().isoformat()
    except (ValueError, OverflowError, OSError, TypeError):
        return None
    return None


class CabtGame:
    name = "cabt"
    source = "episodes"  # days come from episode files (tcgexp-data action=import), not from a simulator
    option_dim = OPTION_DIM  # each decision offers options, each a vector of this width: the model's option head

    def arena(self):
        """What an evaluation plays the trained network in (``tcgexp.games.play.Arena``: ``evaluation.py``)."""
        from .evaluation import ARENA

        return ARENA

    def submission(self):
        """What ``tcgexp-export`` writes a run's policy as: Kaggle's submission (``submission.py``)."""
        from .submission import SUBMISSION

        return SUBMISSION

    def columns(self, max_options: int) -> tuple[pa.Field, ...]:
        f = lambda n, t: pa.field(n, t, nullable=False)
        return (
            # stored without its padding, read back as [rows, max_options * OPTION_DIM] (tcgexp.data.schema's
            # padded columns: these two metadata keys)
            pa.field(
                "option_features",
                pa.list_(pa.float32()),
                nullable=False,
                metadata={
                    b"tcgexp.width": str(max_options * OPTION_DIM).encode(),
                    b"tcgexp.unit": str(OPTION_DIM).encode(),
                },
            ),
            f("single_option", pa.bool_()),
            f("min_count", pa.int16()),
            f("max_count", pa.int16()),
            f("picks", pa.int16()),
            f("round", pa.int16()),
            pa.field("player", pa.string()),
            pa.field("opponent", pa.string()),
            f("rating", pa.float32()),
            f("opponent_rating", pa.float32()),
            f("deck_hash", pa.int64()),
            f("end_status", pa.int8()),
        )

    def dims(self, max_options: int) -> tuple[int, int]:
        return STATE_DIM, max_options

    def identity(self, versions) -> dict:
        from .engine import PACKAGE, package_version

        return {
            "game": self.name,
            "package": PACKAGE,
            "package_version": package_version(),
            "engine_versions": sorted(versions),
            "card_db_sha256": {str(v): tables(v).db_digest for v in sorted(versions)},
            "layout": features.layout(),
            "max_rounds": MAX_ROUNDS,
        }

    def layout(self) -> dict:
        """What each feature column means (a checkpoint's weights read them: ``init_from`` compares it)."""
        return {**features.layout(), "max_rounds": MAX_ROUNDS}

    # -- one episode file --------------------------------------------------------------------
    def read(self, raw: bytes, loads=json.loads) -> dict:
        try:
            ep = loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise EpisodeRefused(f"not JSON (truncated or damaged: {exc})") from None
        check_format(ep)
        if not isinstance(ep.get("id"), (str, int)) or ep.get("id") in ("", None):
            raise EpisodeRefused("the episode has no id")
        return ep

    def version(self, ep: dict) -> int:
        return int((ep.get("configuration") or {}).get("version", 2))

    def players(self, ep: dict, sidecar: dict | None) -> tuple[list[dict], str | None]:
        """([{name, rating}] per seat, the UTC date) from the episode's ``info`` and Kaggle's episode metadata.

        Names: the sidecar's agents[i].teamName / name, else ``info.TeamNames[i]``, else ``info.Agents[i].Name``;
        ratings: the sidecar's agents[i].initialScore (the rating the agent played at), else its updatedScore;
        the date: the sidecar's endTime, else createTime. Absent: None."""
        problem = said("sidecar", SIDECAR.problem(sidecar))
        if problem:
            raise EpisodeRefused(f"{problem} (fix the sidecar, or remove it to file the episode into date=)")
        info = ep.get("info") or {}  # its shape checked by check_format
        names = list(info.get("TeamNames") or [])
        agents_info = info.get("Agents") or []
        out = []
        side_agents = {}
        for k, a in enumerate((sidecar or {}).get("agents") or ()):
            if isinstance(a, dict):
                side_agents[a.get("index", k)] = a
        for i in (0, 1):
            a = side_agents.get(i, {})
            name = a.get("teamName") or a.get("name")
            if name is None and i < len(names):
                name = names[i]
            if name is None and i < len(agents_info) and isinstance(agents_info[i], dict):
                name = agents_info[i].get("Name")
            rating = a.get("initialScore", a.get("updatedScore"))
            rating = float(rating) if isinstance(rating, (int, float)) and not isinstance(rating, bool) else None
            out.append({"name": None if name is None else str(name), "rating": rating})
        date = None
        for key in ("endTime", "createTime"):  # the first one given decides; one given but unreadable refuses
            value = (sidecar or {}).get(key)
            if value is not None and date is None:
                date = _date(value)
                if date is None:
                    raise EpisodeRefused(
                        f"sidecar.{key} {value!r} is not a time this reader knows ({{'seconds': N}}, an epoch "
                        "number or an ISO string): fix the sidecar, or remove it to file the episode into date="
                    )
        return out, date

    def index_fields(self, ep: dict) -> dict:
        """What a replay ZIP's index keeps of an episode beside its id: Kaggle's own episode id (``info.EpisodeId``),
        so an episode can be found on Kaggle from its rows' match."""
        kaggle = (ep.get("info") or {}).get("EpisodeId")
        return {"kaggle_id": kaggle} if isinstance(kaggle, (str, int)) and not isinstance(kaggle, bool) else {}

    def encode(self, ep: dict, *, match: int, players: list[dict], max_options: int, would_ko: bool, check_only=False):
        return encode_episode(
            ep,
            match=match,
            tb=tables(self.version(ep)),
            max_options=max_options,
            players=players,
            would_ko=would_ko,
            check_only=check_only,
        )

    def make_demo(self, folder, *, date: str, episodes: int, seed: int, bo: int, progress=None, pools=None) -> None:
        """Self-play episodes between the scripted teachers (``demo.make_demo``), rated by the round-robin kept
        beside the corpus (``<root>/ratings.json``, measured at the first demo day); `progress(done, total)` for
        the day's self-play, ``progress(done, total, stage="ratings round-robin")`` for the round-robin."""
        from . import demo

        root = Path(folder).parents[1]
        with demo.dealers(pools) as pool:  # seeded deals: the day is a function of its seed
            rated = progress and (lambda done, total: progress(done, total, stage="ratings round-robin"))
            measured = demo.ratings(root, seed=0, progress=rated, pool=pool)["ratings"]
            demo.make_demo(
                folder,
                date=date,
                episodes=episodes,
                seed=seed,
                bo=bo,
                ratings_of=measured,
                progress=progress,
                pool=pool,
            )


GAME = CabtGame()
