"""``tcgexp-launch``'s library (the command: ``tcgexp/cli/launch.py``): ``mlx.launch`` that exits with its ranks' status.

Why: MLX 0.32's ``mlx.launch`` exits 0 whatever its ranks did (it prints ``[WARN] Node with rank N
exited with code C``), so a script, a CI job or a scheduler running it could not tell a failed run
from a finished one. ``tcgexp-launch`` takes ``mlx.launch``'s own arguments, runs it, and exits 0
only when every rank exited 0; else with the first failing rank's code (1 for a rank that left no
status: killed), after one line naming the ranks and what ``result.json`` says.

How it knows: every rank (``tcgexp-train`` under a launcher) writes its status into the folder
``TCGEXP_RANK_STATUS`` names (``rank_status``). ``tcgexp-launch`` makes a private folder and
passes it to the ranks (``--env``; ranks on other hosts need ``TCGEXP_RANK_STATUS`` set to a folder
they share with this host). It waits for every rank it knows of to be gone: ranks outlive a killed
launcher by at most ``parent_watch.GRACE_S``. ``mlx.launch`` dies with ``tcgexp-launch``
(``PR_SET_PDEATHSIG``) and its ranks with it, and a SIGTERM or SIGHUP to ``tcgexp-launch`` is passed
to ``mlx.launch``, so killing either stops the run. A SIGINT (Ctrl-C, or sent to ``tcgexp-launch`` alone)
reaches every rank once (``Interrupts``): each stops resumably, as after its own Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from ..ownership import pid_alive
from .parent_watch import GRACE_S
from .rank_status import STATUS_VAR


def expected_ranks(argv: list[str]) -> int | None:
    """The world size mlx.launch's own arguments give (-n, --hosts), None with a hostfile."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    parser.add_argument("--hosts", default="127.0.0.1")
    parser.add_argument("--repeat-hosts", "-n", type=int, default=1)
    parser.add_argument("--hostfile")
    try:
        known, _ = parser.parse_known_args(argv)
    except (argparse.ArgumentError, SystemExit):  # mlx.launch itself says what is wrong with them
        return None
    return None if known.hostfile else len(known.hosts.split(",")) * known.repeat_hosts


def remote_hosts(argv: list[str]) -> list[str]:
    """The hosts mlx.launch reaches through ssh (``--hosts``; every one but 127.0.0.1), in order, once each."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    parser.add_argument("--hosts", default="127.0.0.1")
    try:
        known, _ = parser.parse_known_args(argv)
    except (argparse.ArgumentError, SystemExit):
        return []
    return list(dict.fromkeys(h for h in known.hosts.split(",") if h and h != "127.0.0.1"))


SSH_PROBE_S = 10  # how long each host's ssh probe may take (ConnectTimeout 5 s, then authentication)


def ssh_failures(hosts: list[str]) -> list[str]:
    """What ssh says when it tries each host as mlx.launch does (mlx.launch hides it: LogLevel=QUIET), for
    those it cannot reach: "host: ssh's last line"; in parallel, each bounded."""
    from concurrent.futures import ThreadPoolExecutor

    def probe(host: str) -> str | None:
        try:
            res = subprocess.run(
                ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", host, "true"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=SSH_PROBE_S,
            )
        except subprocess.TimeoutExpired:
            return f"{host}: no answer to ssh within {SSH_PROBE_S} s"
        except OSError as exc:
            return f"{host}: ssh could not run ({exc.strerror or exc})"
        if res.returncode == 0:
            return None
        said = [line.strip() for line in res.stderr.splitlines() if line.strip()]
        return f"{host}: {said[-1] if said else f'ssh exited with {res.returncode}'}"

    with ThreadPoolExecutor(max(1, min(8, len(hosts)))) as pool:
        return [f for f in pool.map(probe, hosts) if f]


def read_statuses(folder: Path) -> dict[int, dict]:
    out = {}
    for path in folder.glob("rank*.json"):
        try:
            status = json.loads(path.read_text())
            out[int(status["rank"])] = status
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def wait_for_ranks(folder: Path) -> dict[int, dict]:
    """Statuses once every rank that said its pid has left (bounded: a rank outlives its launcher by at
    most parent_watch.GRACE_S)."""
    deadline = time.monotonic() + GRACE_S + 10
    while True:
        statuses = read_statuses(folder)
        running = [s for s in statuses.values() if "code" not in s and pid_alive(s.get("pid"))]
        if not running or time.monotonic() > deadline:
            return statuses
        time.sleep(0.2)


def verdict(statuses: dict[int, dict], size: int | None) -> tuple[int, str | None]:
    """(exit status, the line saying why it is not 0)."""
    size = size or max([s.get("size") or 0 for s in statuses.values()] + [len(statuses)])
    if not statuses:
        return 1, (
            "no rank reported its exit status (is the command tcgexp-train? ranks on other hosts need "
            f"{STATUS_VAR} set to a folder this host shares): the run's outcome is unknown"
        )
    failed = []
    for rank in range(size):
        code = statuses.get(rank, {}).get("code")
        if code is None:
            failed.append((rank, None))
        elif code != 0:
            failed.append((rank, int(code)))
    if not failed:
        return 0, None
    said = ", ".join(
        f"rank {r} " + (f"exited with {c}" if c is not None else "left no status (killed?)") for r, c in failed
    )
    run_dir = next((s["run_dir"] for s in statuses.values() if s.get("run_dir")), None)
    if run_dir and Path(run_dir).is_dir():  # (a run refused at start leaves no folder)
        try:
            result = json.loads((Path(run_dir) / "result.json").read_text())
            said += f"; {Path(run_dir) / 'result.json'} says {result.get('status')}" + (
                f": {result['error']}" if result.get("error") else ""
            )
        except (OSError, ValueError):
            said += f"; {run_dir} holds no result.json"
    return next((c for _, c in failed if c), 1), said


class Interrupts:
    """SIGINTs to ``tcgexp-launch``, each passed to every rank once: ranks on this host by their pid (from their
    status files; a rank that starts later gets the ones it missed), ranks on other hosts through the ssh
    client that runs them (it ends, and the rank gets its hangup). The handler only counts; ``deliver`` sends."""

    def __init__(self, folder: Path, group: int) -> None:
        self.folder, self.group, self.asked = folder, group, 0
        self.sent: dict[int, int] = {}  # pid -> SIGINTs passed to it

    def note(self, signum, frame) -> None:
        self.asked += 1

    def targets(self) -> list[int]:
        host = socket.gethostname()
        pids = [
            int(s["pid"])
            for s in read_statuses(self.folder).values()
            if s.get("pid") and "code" not in s and s.get("host", host) == host
        ]
        import psutil

        for p in psutil.process_iter(["name"]):  # mlx.launch's ssh clients, for the ranks elsewhere
            try:
                if p.info["name"] == "ssh" and os.getpgid(p.pid) == self.group:
                    pids.append(p.pid)
            except OSError:  # gone while looking: nothing to pass on to it
                continue
        return pids

    def deliver(self) -> None:
        if not self.asked:
            return
        for pid in self.targets():
            while self.sent.get(pid, 0) < self.asked:
                self.sent[pid] = self.sent.get(pid, 0) + 1
                try:
                    os.kill(pid, signal.SIGINT)
                except OSError:
                    break


if __name__ == "__main__":  # the command is tcgexp/cli/launch.py; run by name, as the packages' __main__ aliases do
    import runpy

    runpy.run_module("tcgexp.cli.launch", run_name="__main__", alter_sys=True)
