"""An override tcgexp writes for Hydra to read back (``resume=<dir>``, a sweep's own folders): quoted as it must be.

Why: paths with spaces, quotes, non-ASCII letters, ``=``, ``,`` or brackets lost their meaning when re-emitted
bare (``resume=/data/my runs/été`` is a lexer error blaming the user; ``a,b`` becomes a sweep of two values).
``override`` writes the value bare when Hydra's grammar reads it back unchanged, else in double quotes (or
single ones) with the grammar's escapes (a quote, and backslashes before a quote or at the end, and ``\\${``
for a ``${`` that is part of a name, not an interpolation), and checks the round trip, through OmegaConf's
resolution too.

A command tcgexp prints for a user to paste (``resume=``, ``best_command``, ``tcgexp-report <dir>``, ``aim up
--repo <dir>``, the re-run with seeds) is a POSIX shell line: each word that needs it in single quotes
(``shell_override``, ``command_line``), so bash hands Hydra (or the program) exactly the word meant, whatever
the path holds: spaces, quotes, non-ASCII letters, ``$``, ``!``, ``*``.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from .errors import ConfigError


def quoted(value: str, mark: str = "'") -> str:
    """`value` in single (or double: `mark`) quotes as Hydra's override grammar escapes it."""
    escaped = re.sub(rf"(\\+)(?={mark}|$)", lambda m: m.group(1) * 2, value)  # backslashes before a quote or the end
    return mark + escaped.replace(mark, "\\" + mark) + mark


def _reads_back(back: Any, value: Any) -> bool:
    """Whether what Hydra parsed is `value` once OmegaConf resolves it (a ``${`` left bare would interpolate)."""
    if type(back) is not type(value):
        return False
    if not isinstance(value, str):
        return back == value
    from omegaconf import OmegaConf

    try:
        return OmegaConf.create({"v": back})["v"] == value
    except Exception:  # noqa: BLE001 - an interpolation that cannot resolve, "???": not the value
        return False


def override(key: str, value: Any) -> str:
    """``key=value`` that Hydra parses back to exactly `value` (a string stays a string, a path stays one path)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, text = OverridesParser.create(), str(value)
    literal = text.replace("${", "\\${") if isinstance(value, str) else text  # a name's ${ is no interpolation
    for line in (f"{key}={text}", f"{key}={quoted(literal, chr(34))}", f"{key}={quoted(literal)}"):
        try:
            back = parser.parse_override(line).value()
        except Exception:  # noqa: BLE001, S112 - Hydra's lexer and parser errors: try the quoted form
            continue
        if _reads_back(back, value):
            return line
    raise ConfigError(
        f"{key}={text!r} cannot be written as a Hydra override that reads back the same; use a "
        "value without a trailing backslash inside quotes"
    )


def shell_override(key: str, value: Any) -> str:
    """``key=value`` as one word of a shell line a user pastes: Hydra reads back `value` (``override``). Never
    raises (it is said in the lines that end a run): a value no override can hold is quoted for the shell alone."""
    try:
        return shlex.quote(override(key, value))
    except ConfigError:
        return shlex.quote(f"{key}={value}")


def readable(line: str) -> str:
    """An override Hydra received, written again in ``override``'s form when it sets a plain string (``x='a b'``
    becomes ``x="a b"``, which reads better inside a shell's single quotes); anything else as it is."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    key, sep, _ = line.partition("=")
    if not sep:
        return line
    try:
        parser = OverridesParser.create()
        parsed = parser.parse_override(line)
        value = parsed.value()
        if parsed.is_sweep_override() or not isinstance(value, str) or "${" in value:
            return line
        again = override(key, value)
        return again if parser.parse_override(again).value() == value else line
    except Exception:  # noqa: BLE001 - not an override this can read: as it is
        return line


def command_line(program: str, *words: str) -> str:
    """A command a user pastes into a POSIX shell: `program`, then each word (an override as Hydra received it,
    or an argument) quoted where the shell would otherwise change it."""
    return " ".join([program, *(shlex.quote(readable(w)) for w in words)])


def printable(line: str) -> str:
    """An override fit to print (a report, the console): a URL's password hidden, as SQLAlchemy shows it
    (``hydra.sweeper.storage=postgresql+psycopg://user:***@host/db``); anything else as it is."""
    key, sep, value = line.partition("=")
    if not sep or "://" not in value or "@" not in value:
        return line
    try:
        from sqlalchemy.engine import make_url

        return f"{key}={make_url(value.strip(chr(39) + chr(34))).render_as_string(hide_password=True)}"
    except Exception:  # noqa: BLE001 - not an SQLAlchemy URL: no password of a form it knows
        return line
