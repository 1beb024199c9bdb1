"""``tcgexp-launch`` / ``python -m tcgexp.lifecycle.launcher [mlx.launch's arguments]``: ``mlx.launch`` that exits
with its ranks' status (why and how: ``tcgexp/lifecycle/launcher.py``, the library it drives)."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from ..data.parallel import die_with_parent
from ..lifecycle.launcher import Interrupts, expected_ranks, remote_hosts, ssh_failures, verdict, wait_for_ranks
from ..lifecycle.rank_status import STATUS_VAR


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    launcher = shutil.which("mlx.launch")
    if launcher is None:
        print("error: mlx.launch is not on PATH (it comes with the mlx package: pip install mlx)", file=sys.stderr)
        return 1
    own = STATUS_VAR not in os.environ
    folder = Path(os.environ.get(STATUS_VAR) or tempfile.mkdtemp(prefix="tcgexp-launch-"))
    env = {**os.environ, STATUS_VAR: str(folder)}
    # its own session: a terminal's Ctrl-C reaches this process alone, which passes it to every rank once (as
    # it passes a SIGINT sent to it alone); in one process group the ranks would get it twice, a forced stop
    proc = subprocess.Popen(
        [launcher, "--env", f"{STATUS_VAR}={folder}", *argv],
        env=env,
        start_new_session=True,
        # PR_SET_PDEATHSIG can only be set in the child; nothing here runs threads yet
        preexec_fn=functools.partial(die_with_parent, os.getpid()),  # noqa: PLW1509
    )
    for signum in (signal.SIGTERM, signal.SIGHUP):  # passed on: mlx.launch dies, its ranks stop (parent_watch)
        signal.signal(signum, lambda s, f: proc.send_signal(signal.SIGTERM))
    interrupts = Interrupts(folder, proc.pid)
    signal.signal(signal.SIGINT, interrupts.note)
    while proc.poll() is None:
        interrupts.deliver()
        try:
            proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
    interrupts.deliver()
    try:
        statuses = wait_for_ranks(folder)
        code, line = verdict(statuses, expected_ranks(argv))
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)
    if not statuses and remote_hosts(argv):  # no rank started: ssh, which mlx.launch keeps quiet, says why
        failed = ssh_failures(remote_hosts(argv))
        if failed:
            line = (
                f"no rank started: ssh cannot reach {'; '.join(failed)} (mlx.launch runs each rank there through "
                "ssh: check the host names, that sshd runs there, and key-based login: ssh <host> true must "
                "work without a password)"
            )
    if line:
        print(f"[launch] {line}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
