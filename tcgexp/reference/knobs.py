"""A schema's knobs as the config reference lists them: type, default, allowed values, meaning.

Everything comes from the schema itself (``tcgexp.schema``): the field's annotation and default, its
``CHECKS`` entry's ``want`` text (what ``validate`` says when it refuses a value) and the comment
beside the field in the source, the one place a knob's meaning is written. The comment is read with
``ast`` and ``tokenize`` from the file that defines the field (a subclass's inherited fields from
their own class): the trailing comment on the field's line, after the comment lines directly above
it when there are some (a knob whose meaning takes more than a line). A field with neither has no
meaning, and ``missing_meanings`` names it.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import inspect
import io
import tokenize
import typing
from pathlib import Path
from typing import Any

from omegaconf import MISSING

# Hydra's own keys: what an option builds (its YAML sets them), not knobs a user turns
HYDRA_KEYS = ("_target_", "_partial_")


@dataclasses.dataclass(frozen=True)
class Knob:
    key: str  # dotted from the schema's node, e.g. "policy.hot_fraction"
    type: str
    default: str
    allowed: str
    meaning: str
    node: type | None = None  # a field typed by another schema: that schema (its knobs listed with it)


@functools.cache
def _file_comments(path: str) -> tuple[dict[int, str], frozenset[int]]:
    """({line: its comment's text}, the lines that hold nothing but a comment) of a source file."""
    text = Path(path).read_text()
    comments: dict[int, str] = {}
    code_lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            code_lines.update(range(tok.start[0], tok.end[0] + 1))
    return comments, frozenset(line for line in comments if line not in code_lines)


@functools.cache
def _class_fields(path: str, qualname: str) -> dict[str, tuple[int, int]]:
    """{field: (first line, last line)} of the annotated assignments in class `qualname` of the file."""
    tree = ast.parse(Path(path).read_text())
    body: list[ast.stmt] = tree.body
    for part in qualname.split("."):
        found = [n for n in body if isinstance(n, ast.ClassDef) and n.name == part]
        if not found:
            return {}
        body = found[-1].body
    return {
        n.target.id: (n.lineno, n.end_lineno or n.lineno)
        for n in body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }


def _owner(cls: type, name: str) -> type:
    """The class in `cls`'s MRO whose body declares field `name`."""
    for klass in cls.__mro__:
        if name in inspect.get_annotations(klass):
            return klass
    return cls


def comment(cls: type, name: str) -> str:
    """The comment beside field `name` of schema `cls` (the lines above it, then its own), as one line; "" if none."""
    owner = _owner(cls, name)
    try:
        path = inspect.getsourcefile(owner)
    except TypeError:  # a class with no source file (built at run time): no comment to read
        return ""
    if path is None:
        return ""
    span = _class_fields(path, owner.__qualname__).get(name)
    if span is None:
        return ""
    comments, alone = _file_comments(path)
    first, last = span
    above: list[str] = []
    line = first - 1
    while line in alone:
        above.insert(0, comments[line])
        line -= 1
    own = [comments[n] for n in range(first, last + 1) if n in comments and n not in alone]  # beside its code
    return " ".join(part for part in (*above, *own) if part)


def fields(cls: type) -> list[dataclasses.Field]:
    """The schema's fields a user sets (Hydra's ``_target_``/``_partial_`` left out)."""
    return [f for f in dataclasses.fields(cls) if f.name not in HYDRA_KEYS]


def missing_meanings(cls: type) -> list[str]:
    """``module.Class.field`` for each field of `cls` with no comment (a field typed by a schema is that
    schema's node: its knobs carry the meanings)."""
    hints = _hints(cls)
    return [
        f"{_owner(cls, f.name).__module__}.{_owner(cls, f.name).__qualname__}.{f.name}"
        for f in fields(cls)
        if not _schema_of(hints.get(f.name)) and not comment(cls, f.name)
    ]


def knobs(cls: type) -> list[Knob]:
    """One Knob per field of schema `cls`, in declaration order."""
    hints = _hints(cls)
    checks = {field: want for field, _, want in getattr(cls, "CHECKS", ())}
    nullable = set(getattr(cls, "NULLABLE", ()))
    out = []
    for f in fields(cls):
        hint = hints.get(f.name, f.type)
        node = _schema_of(hint)
        allowed = checks.get(f.name) or _allowed_by_type(hint)
        if f.name in nullable and "null" not in allowed:
            allowed += " (or null)"
        out.append(Knob(f.name, type_name(hint), render_default(f), allowed, comment(cls, f.name), node))
    return out


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an annotation naming something the module does not import at run time: keep the text
        return {f.name: f.type for f in dataclasses.fields(cls)}


def _schema_of(hint: Any) -> type | None:
    """The schema a field is typed by (a nested node: ``policy: PolicyConfig``), else None."""
    for arg in (hint, *typing.get_args(hint)):
        if isinstance(arg, type) and dataclasses.is_dataclass(arg):
            return arg
    return None


def type_name(hint: Any) -> str:
    """A field's annotation as a reader says it: ``int``, ``str or null``, ``list of int``."""
    if isinstance(hint, str):
        return hint
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        rest = [a for a in args if a is not type(None)]
        return " or ".join(type_name(a) for a in rest) + (" or null" if len(rest) < len(args) else "")
    if origin in (list, tuple, list):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin in (dict, dict):
        return f"map of {type_name(args[0])} to {type_name(args[1])}" if args else "map"
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "")


def _allowed_by_type(hint: Any) -> str:
    """What the type alone allows (a field with no CHECKS entry)."""
    name = type_name(hint)
    if _schema_of(hint):
        return "its own knobs"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(m.name for m in hint)
    nullable = name.endswith(" or null")
    base = name.removesuffix(" or null")
    said = {"bool": "true or false", "str": "any string", "int": "any integer", "float": "any finite number"}
    return said.get(base, f"any {base}") + (" or null" if nullable else "")


def render_default(f: dataclasses.Field) -> str:
    """The field's one default as a command line would write it."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    if value == MISSING:
        return "(set by the option)"
    if dataclasses.is_dataclass(value):
        return "(its knobs' defaults)"
    return show(value)


def show(value: Any) -> str:
    """A value as a command line writes it (``true``, ``null``, ``[1, 2]``); a byte size also in GiB/MiB."""
    if value is None:
        return "null"
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) and value >= 2**20:
        for unit, size in (("GiB", 2**30), ("MiB", 2**20)):
            if value % size == 0:
                return f"{value} ({value // size} {unit})"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    return str(value)
