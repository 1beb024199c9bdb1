"""Knobs a swept key's options differ in that the sweep did not sweep: what else changed with the option.

A config group's options are whole nodes: ``cache=mru`` may bring ``capacity: 4`` where ``cache=plan`` has
the schema's 8, or ``spill: false`` where another spills. A finding that credits a difference to the policy
would then be crediting the capacity too, without a word. Each job's composed config (Hydra's
``.hydra/config.yaml`` in its folder) says what its option's node held; every knob of the node (classes
aside: they are what the option is) whose values differ between options, and which is not itself swept,
is named with each option's value (``findings.json``'s ``confounded``; a line per key in words).
"""

from __future__ import annotations

from pathlib import Path

from ..track.context import load_yaml

CLASS_KEYS = ("_target_", "_partial_", "_args_", "_convert_", "_recursive_")  # what the option is, not a knob


def shown(value) -> str:
    """A knob's value as the config spells it (``false``, ``null``, ``8``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def leaves(node, prefix: str) -> dict[str, str]:
    """{dotted knob: its value shown} of a plain container, lists as one value."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if str(k) not in CLASS_KEYS:
                out.update(leaves(v, f"{prefix}.{k}"))
        return out
    return {prefix: shown(node)}


def node_of(job_dir: Path, key: str):
    """The job's composed node of `key` (a plain dict), or None: no record, or `key` is a value, not a node."""
    from omegaconf import OmegaConf

    try:
        cfg = load_yaml(job_dir / ".hydra" / "config.yaml")
        node = OmegaConf.select(cfg, key, throw_on_resolution_failure=False)
    except Exception:  # noqa: BLE001 - a job without a readable record says nothing of its option
        return None
    return OmegaConf.to_container(node, resolve=False) if OmegaConf.is_dict(node) else None


def confounded(sweep_dir: Path, rows: list[dict], key: str, swept: list[str], label) -> dict[str, dict[str, str]]:
    """{knob: {option: value}} for each knob of `key`'s node that differs between its options and was not
    swept (`swept`: the sweep's keys); {} when the options differ in nothing else, or `key` is not a node.
    `label` names an option as the findings do."""
    seen: dict[str, dict[str, set[str]]] = {}  # knob -> option -> the values its jobs had
    for r in rows:
        if key not in r.get("params", {}):
            continue
        node = node_of(Path(sweep_dir) / str(r["job"]), key)
        if node is None:
            continue
        option = label(r["params"][key])
        for knob, value in leaves(node, key).items():
            seen.setdefault(knob, {}).setdefault(option, set()).add(value)
    out = {}
    for knob, by_option in sorted(seen.items()):
        if any(knob == s or knob.startswith(f"{s}.") for s in swept if s != key) or len(by_option) < 2:
            continue  # swept itself (its effect is a finding of its own), or only one option has it
        values = {o: "/".join(sorted(v)) for o, v in sorted(by_option.items())}
        if len(set(values.values())) > 1:
            out[knob] = values
    return out
