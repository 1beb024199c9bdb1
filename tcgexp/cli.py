"""What the Hydra entry points share (``tcgexp-train``, ``tcgexp-data``, ``tcgexp-replay``).

Each entry point imports this module before its ``@hydra.main`` composes; it
registers the ``tcgexp.groups`` resolver the ``--help`` templates
(``conf/hydra/help/``) use. Hydra's own ``$APP_CONFIG_GROUPS`` lists the
ConfigStore schemas too (``base_cache``, ...), which no user picks; this listing
reads the YAML options under ``conf/`` only.
"""
from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import OmegaConf

from .config import CONF_DIR

CONFIG_PATH = str(CONF_DIR)  # absolute, so console scripts and `python -m` find the same folder


def group_options(group: str, conf_dir: Path = CONF_DIR) -> list[str]:
    """The options of a config group: its YAML files, schema entries (base_*) left out."""
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml") if not p.stem.startswith("base_"))


def primary_defaults(config_name: str, conf_dir: Path = CONF_DIR) -> dict[str, str]:
    """{group: default option} from a primary config's defaults list (hydra/ overrides left out)."""
    doc = yaml.safe_load((conf_dir / f"{config_name}.yaml").read_text()) or {}
    out: dict[str, str] = {}
    for entry in doc.get("defaults", []):
        if isinstance(entry, dict):
            for key, value in entry.items():
                if not key.startswith(("override ", "hydra/", "optional ")) and (conf_dir / key).is_dir():
                    out[key] = str(value)
    return out


def groups_help(config_name: str, *extra: str) -> str:
    """``group: option, option  (default: x)`` for each group of a primary config, then the ``extra`` groups
    (added with ``+group=option``)."""
    defaults = primary_defaults(config_name)
    lines = [f"{g}: {', '.join(group_options(g))}  (default: {d})" for g, d in defaults.items()]
    lines += [f"+{g}: {', '.join(group_options(g))}  (none by default)" for g in extra]
    return "\n".join(lines)


OmegaConf.register_new_resolver("tcgexp.groups", groups_help, replace=True)
