"""The engine of Kaggle's Pokémon TCG card battle (environment ``cabt`` of ``kaggle-environments``), loaded alone.

The engine is a native library (``envs/cabt/cg/libcg.so``; ``v1/`` holds the legacy engine) driven through
ctypes. It is loaded here straight from the installed package's folder, without importing
``kaggle_environments`` itself (whose ``__init__`` pulls in Kaggle's whole harness), so importing this module
needs nothing, and using it needs only the ``cabt`` extra installed (the library needs only the C++ runtime).

``Engine(version)`` exposes the card database (``cards()``, ``attacks()``, their ``digest()``) and battles
(``battle(deck0, deck1)``: ``obs``, ``select(indices)``, ``close()``). An observation is the dict the harness
gives an agent (``select``, ``logs``, ``current``, ``search_begin_input``). The engine seeds its shuffles from
``std::random_device``: a battle cannot be replayed from a seed, which is why episodes are kept as written.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
import importlib.util
import json
import platform
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Self

from ...extras import missing

PACKAGE = "kaggle-environments"
VERSIONS = (1, 2)  # configuration.version: 1 the legacy engine (always best of 1), 2 the current one
LATEST = 2
DECK_SIZE = 60


class EngineMissing(RuntimeError):
    """The cabt extra is not installed here (one line naming it and the install command)."""


class EngineError(RuntimeError):
    """The engine refused a call (a deck it does not accept, an index out of range)."""


def harness_deck() -> list[int]:
    """The deck the harness's own agents (``random``, ``first``) play: ``deck`` in ``envs/cabt/cabt.py``, read
    as a literal (that module imports the whole harness)."""
    import ast

    tree = ast.parse((engine_dir().parent / "cabt.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "deck" for t in node.targets):
            return [int(x) for x in ast.literal_eval(node.value)]
    raise EngineMissing(f"no deck in {engine_dir().parent / 'cabt.py'}")


class _StartData(ctypes.Structure):
    _fields_ = [("battlePtr", ctypes.c_void_p), ("errorPlayer", ctypes.c_int), ("errorType", ctypes.c_int)]


class _SerialData(ctypes.Structure):
    _fields_ = [
        ("json", ctypes.c_char_p),
        ("data", ctypes.POINTER(ctypes.c_ubyte)),
        ("count", ctypes.c_int),
        ("selectPlayer", ctypes.c_int),
    ]


def engine_dir() -> Path:
    """The installed engine's folder (``kaggle_environments/envs/cabt/cg``), found without importing the package."""
    try:
        spec = importlib.util.find_spec("kaggle_environments")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        raise EngineMissing(missing("the real game (cabt)", "cabt"))
    folder = Path(spec.origin).parent / "envs" / "cabt" / "cg"
    if not folder.is_dir():
        raise EngineMissing(
            f"{PACKAGE} is installed but has no cabt engine at {folder}; " + missing("the real game", "cabt")
        )
    return folder


def package_version() -> str:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _lib_file(folder: Path) -> Path:
    system, machine = platform.system(), platform.machine()
    if system == "Windows":
        return folder / "cg.dll"
    if system == "Darwin":
        return folder / "libcg.dylib"
    return folder / ("libcg-arm64.so" if machine in ("arm64", "aarch64") else "libcg.so")


def _load_private(path: Path) -> ctypes.CDLL:
    """A copy of the library of its own: ``GameInitialize`` may run once per loaded library (a second call aborts
    the process: 'buffer full'), and Kaggle's harness calls it on the package's own file when it is imported;
    a private copy (loaded, then unlinked: the mapping stays) lets both live in one process."""
    folder = Path(tempfile.mkdtemp(prefix="tcgexp-cabt-"))
    try:
        copy = folder / path.name
        shutil.copyfile(path, copy)
        return ctypes.CDLL(str(copy))
    except OSError as exc:
        raise EngineMissing(f"the cabt engine {path} cannot be loaded ({exc})") from exc
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_LOCK = threading.Lock()
_ENGINES: dict[int, Engine] = {}


def engine(version: int = LATEST) -> Engine:
    """The process's engine of `version` (loaded once)."""
    with _LOCK:
        if version not in _ENGINES:
            _ENGINES[version] = Engine(version)
        return _ENGINES[version]


class Engine:
    def __init__(self, version: int = LATEST) -> None:
        if version not in VERSIONS:
            raise EngineError(f"unknown cabt engine version {version!r}: the engine has {VERSIONS}")
        self.version = version
        folder = engine_dir() if version == LATEST else engine_dir() / "v1"
        self.path = _lib_file(folder)
        lib = _load_private(self.path)
        lib.GameInitialize()
        lib.BattleStart.restype = _StartData
        lib.BattleStart.argtypes = [ctypes.POINTER(ctypes.c_int)]
        self.reverse_start = hasattr(lib, "BattleStartReverse")  # absent in v1
        if self.reverse_start:
            lib.BattleStartReverse.restype = _StartData
            lib.BattleStartReverse.argtypes = [ctypes.POINTER(ctypes.c_int)]
        lib.BattleFinish.argtypes = [ctypes.c_void_p]
        lib.GetBattleData.restype = _SerialData
        lib.GetBattleData.argtypes = [ctypes.c_void_p]
        lib.Select.restype = ctypes.c_int
        lib.Select.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        lib.AllCard.restype = ctypes.c_char_p
        lib.AllAttack.restype = ctypes.c_char_p
        self.lib = lib
        self._cards_json: bytes = lib.AllCard()
        self._attacks_json: bytes = lib.AllAttack()

    def cards(self) -> list[dict]:
        return json.loads(self._cards_json)

    def attacks(self) -> list[dict]:
        return json.loads(self._attacks_json)

    def digest(self) -> str:
        """sha256 of the card database as the engine exports it (cards, then attacks)."""
        return hashlib.sha256(self._cards_json + b"\n" + self._attacks_json).hexdigest()

    def identity(self) -> dict:
        """What a corpus built with this engine is pinned to (enters the fingerprint)."""
        return {
            "package": PACKAGE,
            "package_version": package_version(),
            "version": self.version,
            "card_db_sha256": self.digest(),
        }

    def battle(self, deck0: list[int], deck1: list[int], *, reverse: bool = False) -> Battle:
        return Battle(self, deck0, deck1, reverse=reverse)

    def check_deck(self, deck: list[int]) -> str | None:
        """None when the engine accepts `deck` (as both players'), else why not."""
        if len(deck) != DECK_SIZE:
            return f"a deck has {DECK_SIZE} cards, this one {len(deck)}"
        try:
            self.battle(deck, deck).close()
        except EngineError as exc:
            return str(exc)
        return None


class Battle:
    """One game (one round) in the engine; ``obs`` is the deciding player's observation."""

    def __init__(self, eng: Engine, deck0: list[int], deck1: list[int], *, reverse: bool = False) -> None:
        self.engine, self.lib, self.ptr = eng, eng.lib, None
        if len(deck0) != DECK_SIZE or len(deck1) != DECK_SIZE:
            raise EngineError(f"a deck has {DECK_SIZE} cards (got {len(deck0)} and {len(deck1)})")
        cards = [int(c) for c in deck0] + [int(c) for c in deck1]
        arg = (ctypes.c_int * len(cards))(*cards)
        start = self.lib.BattleStartReverse(arg) if reverse and eng.reverse_start else self.lib.BattleStart(arg)
        if not start.battlePtr:
            raise EngineError(f"the engine refused player {start.errorPlayer}'s deck (error type {start.errorType})")
        if start.errorPlayer >= 0:
            self.lib.BattleFinish(start.battlePtr)
            raise EngineError(f"the engine refused player {start.errorPlayer}'s deck (error type {start.errorType})")
        self.ptr = start.battlePtr
        self.obs = self._read()

    def _read(self) -> dict:
        sd = self.lib.GetBattleData(self.ptr)
        obs = json.loads(sd.json.decode())
        obs["search_begin_input"] = ctypes.string_at(sd.data, sd.count).decode("ascii")
        return obs

    @property
    def result(self) -> int:
        """-1 while the game runs; then the winner (0 or 1), or 2 for a draw."""
        return int(self.obs["current"]["result"])

    def select(self, indices: list[int]) -> dict:
        arg = (ctypes.c_int * max(1, len(indices)))(*indices)
        err = self.lib.Select(self.ptr, arg, len(indices))
        if err != 0:
            raise EngineError(f"the engine refused the answer {indices} (error {err})")
        self.obs = self._read()
        return self.obs

    def close(self) -> None:
        if self.ptr:
            self.lib.BattleFinish(self.ptr)
            self.ptr = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
