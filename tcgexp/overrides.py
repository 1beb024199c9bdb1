"""An override tcgexp writes for Hydra to read back (``resume=<dir>``, a sweep's own folders): quoted as it must be.

Why: paths with spaces, quotes, non-ASCII letters, ``=``, ``,`` or brackets lost their meaning when re-emitted
bare (``resume=/data/my runs/été`` is a lexer error blaming the user; ``a,b`` becomes a sweep of two values).
``override`` writes the value bare when Hydra's grammar reads it back unchanged, else in single quotes with the
grammar's escapes (a quote, and backslashes before a quote or at the end), and checks the round trip.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import ConfigError


def quoted(value: str) -> str:
    """`value` in single quotes as Hydra's override grammar escapes it."""
    escaped = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, value)  # backslashes before a quote or at the end
    return "'" + escaped.replace("'", "\\'") + "'"


def override(key: str, value: Any) -> str:
    """``key=value`` that Hydra parses back to exactly `value` (a string stays a string, a path stays one path)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, text = OverridesParser.create(), str(value)
    for line in (f"{key}={text}", f"{key}={quoted(text)}"):
        try:
            back = parser.parse_override(line).value()
        except Exception:  # noqa: BLE001, S112 - Hydra's lexer and parser errors: try the quoted form
            continue
        if back == value and type(back) is type(value):
            return line
    raise ConfigError(
        f"{key}={text!r} cannot be written as a Hydra override that reads back the same; use a "
        "value without a trailing backslash inside quotes"
    )


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
