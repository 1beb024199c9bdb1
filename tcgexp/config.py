"""Where tcgexp's configs are and how a composed node becomes an object.

``CONF_DIR`` is conf/ (every Hydra config: one folder per group, one YAML per
option); ``group_options`` and ``primary_defaults`` read what it offers and
what a command picks by default; ``build`` is ``hydra.utils.instantiate``
with our own errors passed through whole. Composing (``compose``, ``option``)
needs every schema registered first, so it lives with the registration in
the entry layer (``tcgexp.app``); checking a composed config is
``tcgexp.schema.validate``.
"""

from __future__ import annotations

from pathlib import Path

import yaml

# Hydra's configs: an installed tcgexp carries conf/ as the package tcgexp.conf, next to this file (setup.py);
# a source checkout (editable installs too) has it at the repository's top level.
CONF_DIR = Path(__file__).resolve().parent / "conf"
if not (CONF_DIR / "config.yaml").is_file():
    CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def group_options(group: str, conf_dir: Path = CONF_DIR) -> list[str]:
    """The options of a config group: its YAML files."""
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))


def primary_defaults(config_name: str, conf_dir: Path = CONF_DIR) -> dict[str, str]:
    """{group: default option} from a primary config's defaults list (hydra/ overrides left out)."""
    doc = yaml.safe_load((conf_dir / f"{config_name}.yaml").read_text()) or {}
    out: dict[str, str] = {}
    for entry in doc.get("defaults", []):
        if isinstance(entry, str) and entry != config_name and (conf_dir / f"{entry}.yaml").is_file():
            out.update(primary_defaults(entry, conf_dir))  # a primary config that includes another (sequence: config)
        if isinstance(entry, dict):
            for key, value in entry.items():
                if not key.startswith(("override ", "hydra/", "optional ")) and (conf_dir / key).is_dir():
                    out[key] = str(value)
    return out


def build(node, *args, **kwargs):
    """``hydra.utils.instantiate``, re-raising our own errors unwrapped.

    Hydra wraps whatever a ``_target_`` raises in InstantiationException; a
    DataError (or any ValueError of ours) already names the key and the fix, so
    the user gets it as it is.
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(node, *args, **kwargs)
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, ValueError) and type(cause).__module__.startswith("tcgexp."):
            raise cause from None
        raise
