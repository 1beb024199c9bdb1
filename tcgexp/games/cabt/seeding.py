"""Seeded deals: the engine's shuffles from a seed tcgexp chooses, so two policies can play the same games.

The engine seeds its shuffles (and coin flips) from ``std::random_device`` (its library imports
``std::random_device::_M_init``, ``_M_getval`` and ``_M_fini`` from libstdc++), so no game can be replayed
from a seed of the caller's. A process that loads, before the engine, a small library of its own defining
those three symbols (``RTLD_GLOBAL``: the engine's library, loaded after it, binds them there rather than in
libstdc++) draws every one of the engine's random numbers from a stream it seeds (splitmix64) before each
game. Then a game is a function of the seed and the two players' choices: the same policy against the same
opponent plays the same game again, and two policies meet the same deal (deck order, prizes, opening hands,
the coin) until their choices part.

The library is compiled at first use with the C compiler at hand (``$CC``, else ``cc``/``gcc``/``clang``)
into ``$XDG_CACHE_HOME/tcgexp/games/cabt/`` (``TCGEXP_CABT_CACHE`` moves it); without a compiler, or where the
engine binds the symbols elsewhere (libstdc++ loaded globally before), the games are not paired and
``install``/``active`` say why. Only a process that plays (an evaluation's worker) loads it.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = r"""
#include <stdint.h>
/* std::random_device, as the engine's library imports it, drawn from a seeded splitmix64 stream */
static uint64_t state = 0x9E3779B97F4A7C15ull;
static uint64_t calls = 0;
void tcgexp_seed(uint64_t s) { state = s; }
uint64_t tcgexp_calls(void) { return calls; }
static uint32_t next32(void) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  calls++;
  return (uint32_t)z;
}
/* std::random_device::_M_init(const std::string&), _M_fini(), _M_getval() */
void _ZNSt13random_device7_M_initERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE(void *self, const void *t) {}
void _ZNSt13random_device7_M_finiEv(void *self) {}
unsigned int _ZNSt13random_device9_M_getvalEv(void *self) { return next32(); }
"""
LIB = None  # the loaded library, once installed
WHY_NOT: str | None = None  # why the games are not paired, once tried


def cache_root() -> Path:
    if os.environ.get("TCGEXP_CABT_CACHE"):
        return Path(os.environ["TCGEXP_CABT_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tcgexp" / "cabt"


def compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def built() -> Path:
    """The shim library, compiled once per source (raises OSError naming why it cannot be)."""
    key = hashlib.sha256(SOURCE.encode()).hexdigest()[:16]
    lib = cache_root() / f"seed-{key}.so"
    if lib.exists():
        return lib
    cc = compiler()
    if cc is None:
        raise OSError("no C compiler (cc, gcc or clang on PATH, or CC)")
    lib.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
        src, out = Path(tmp) / "seed.c", Path(tmp) / "seed.so"
        src.write_text(SOURCE)
        done = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(src)], capture_output=True, text=True)
        if done.returncode != 0:
            raise OSError(f"{cc} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
        os.replace(out, lib)  # whole, or not at all (two processes may build at once)
    return lib


def install() -> bool:
    """Load the shim globally, before the engine (call first thing in a process that plays). True if loaded."""
    global LIB, WHY_NOT
    if LIB is not None:
        return True
    try:
        lib = ctypes.CDLL(str(built()), mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        WHY_NOT = f"the seeded deal could not be built ({exc})"
        return False
    lib.tcgexp_seed.argtypes = [ctypes.c_uint64]
    lib.tcgexp_calls.restype = ctypes.c_uint64
    LIB = lib
    return True


def seed(value: int) -> None:
    """The stream the engine's next random numbers come from."""
    if LIB is not None:
        LIB.tcgexp_seed(ctypes.c_uint64(value % 2**64))


def calls() -> int:
    return int(LIB.tcgexp_calls()) if LIB is not None else 0


def game_seed(seed_: int, game: int) -> int:
    """A game's seed from the evaluation's seed and the game's number (splitmix64 of both)."""
    z = (seed_ * 0x9E3779B97F4A7C15 + game * 0xBF58476D1CE4E5B9 + 0x632BE59BD9B4E019) % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    return z ^ (z >> 31)
