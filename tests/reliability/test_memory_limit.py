"""Memory refusals hold: the check reads the job's own limit (cgroup v1/v2, SLURM), and at the refusal edge a run the
check accepts survives under a real cgroup limit, with the estimate above its measured peak by at least 10 %.

The slow tests make a child memory cgroup of a few GiB under this process's own (root, a writable cgroup file
system) and run training inside it: the kernel's OOM killer is the judge, not a guess. Where no cgroup can be made
they skip, and the limit reader is still tested on a made-up cgroup tree (the fast tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tcgexp import memlimit
from tcgexp.errors import ConfigError
from tcgexp.train import memneed
from tests.conftest import TINY, compose_config

ROOT = Path(__file__).resolve().parents[2]
GiB = 2**30


# -- the limit reader, on a made-up /proc and cgroup tree -------------------------------------------------------
def fake_proc(tmp_path: Path, version: int, path: str, limits: dict[str, str], usage: int = 0, stat: str = "") -> Path:
    """A /proc/self (cgroup, mountinfo, status) and a cgroup hierarchy with `limits` at each level ('' = root)."""
    mount = tmp_path / "cgroup"
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    if version == 2:
        (proc / "self" / "cgroup").write_text(f"0::{path}\n")
        line = f"30 22 0:26 / {mount} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate"
        names = ("memory.max", "memory.current")
    else:
        (proc / "self" / "cgroup").write_text(f"5:cpu,cpuacct:/other\n4:memory:{path}\n")
        line = f"35 25 0:31 / {mount} rw,nosuid - cgroup cgroup rw,memory"
        names = ("memory.limit_in_bytes", "memory.usage_in_bytes")
    (proc / "self" / "mountinfo").write_text(f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n{line}\n")
    (proc / "self" / "status").write_text("Name:\tpython\nRssAnon:\t  102400 kB\nRssShmem:\t 0 kB\n")
    for rel, limit in limits.items():
        d = mount / rel.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / names[0]).write_text(limit + "\n")
        (d / names[1]).write_text(f"{usage}\n")
        (d / "memory.stat").write_text(stat)
    return proc


@pytest.mark.parametrize("version", [1, 2])
def test_the_tightest_limit_on_the_way_up_is_the_jobs(tmp_path, version):
    unlimited = "max" if version == 2 else "9223372036854771712"
    proc = fake_proc(
        tmp_path,
        version,
        "/slurm/job_7/step_0",
        {"/": unlimited, "/slurm": unlimited, "/slurm/job_7": str(3 * GiB), "/slurm/job_7/step_0": unlimited},
    )
    room = memlimit.cgroup_room(proc)
    assert room.bytes == 3 * GiB and "job_7" in room.source and f"cgroup v{version}" in room.source, room


@pytest.mark.parametrize("version", [1, 2])
def test_what_other_processes_hold_is_taken_off_but_page_cache_is_not(tmp_path, version):
    cache = "file 1073741824\nshmem 0\n" if version == 2 else "total_cache 1073741824\ntotal_shmem 0\n"
    proc = fake_proc(tmp_path, version, "/job", {"/job": str(4 * GiB)}, usage=2 * GiB + 100 * 2**20, stat=cache)
    room = memlimit.cgroup_room(proc)
    # 2 GiB + 100 MiB used: 1 GiB page cache (reclaimable), 100 MiB this process's own: 1 GiB is the others'
    assert room.bytes == 3 * GiB and "1.0 GiB of it held by other processes" in room.source, room


def test_no_cgroup_limit_and_an_unreadable_tree_read_as_none(tmp_path):
    assert memlimit.cgroup_room(fake_proc(tmp_path / "a", 2, "/", {"/": "max"})) is None
    assert memlimit.cgroup_room(tmp_path / "nothing") is None


def test_slurms_allocation_per_task():
    assert memlimit.slurm_room({"SLURM_MEM_PER_NODE": "4096"}).bytes == 4 * GiB
    assert memlimit.slurm_room({"SLURM_MEM_PER_NODE": "4096", "SLURM_NTASKS_PER_NODE": "2"}).bytes == 2 * GiB
    assert memlimit.slurm_room({"SLURM_MEM_PER_CPU": "1024", "SLURM_CPUS_PER_TASK": "3"}).bytes == 3 * GiB
    assert memlimit.slurm_room({}) is None
    room = memlimit.room(Path("/nonexistent"), {"SLURM_MEM_PER_NODE": "512"})
    assert room.bytes == 512 * 2**20 and "SLURM_MEM_PER_NODE=512 MiB" in room.source


def test_a_subprocess_peak_is_its_own_not_its_parents():
    """peak_rss_bytes in a child of a process holding 300 MiB reads the child's few tens of MiB (VmHWM), where
    ru_maxrss reads at least the parent's (Linux keeps it across exec); a fake /proc falls back to ru_maxrss."""
    if not Path("/proc/self/status").exists():
        pytest.skip("no /proc/self/status (not Linux)")
    held = bytearray(300 << 20)
    held[:: 1 << 12] = b"x" * len(held[:: 1 << 12])  # touch every page: resident, not just mapped
    code = "import json, resource; from tcgexp.memlimit import peak_rss_bytes; " + (
        "print(json.dumps([peak_rss_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024]))"
    )
    own, inherited = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)
    assert own < 100 << 20 and inherited >= 300 << 20, (own >> 20, inherited >> 20)
    assert memlimit.peak_rss_bytes(Path("/nonexistent")) > 0
    del held


def test_the_refusal_names_the_knobs_and_the_jobs_limit(fresh_held):
    c = compose_config("model.hidden=4096")
    with pytest.raises(ConfigError) as err:
        memneed.check_memory(
            c, room=memlimit.Room(GiB, "cgroup v2 /sys/fs/cgroup/job/memory.max = 1.0 GiB"), held=fresh_held
        )
    msg = str(err.value)
    assert "model.hidden=4096" in msg and "tbptt.batch_size=" in msg and "/sys/fs/cgroup/job/memory.max" in msg
    assert "\n" not in msg
    memneed.check_memory(compose_config(), room=memlimit.Room(GiB, "x"), held=fresh_held)  # the default model fits


def test_a_row_budget_above_the_corpus_is_said_in_one_line_and_pads_to_the_corpus(tmp_path):
    """tbptt.batch_size=1000000 on a corpus of ~1,000 rows: one line says so, and microbatches are padded to the
    split's rows, not to the budget (it cost ~24 s a step)."""
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            f"dataset.root={tmp_path / 'data'}",
            *TINY,
            "tracking=off",
            "trainer.epochs=1",
            "tbptt.batch_size=1000000",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout + res.stderr
    [line] = [x for x in out.splitlines() if "tbptt.batch_size=1,000,000 is more rows" in x]
    assert "the training split holds" in line
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "completed"


# -- under a real cgroup limit -----------------------------------------------------------------------------------
@pytest.fixture
def cgroup():
    """make(limit) -> the folder of a new memory cgroup under this process's own, limited to `limit` bytes."""
    made: list[Path] = []

    def make(limit: int) -> Path:
        dirs = [(v, leaf) for v, leaf, _ in memlimit.cgroup_dirs()]
        for version, leaf in dirs:
            child = leaf / f"tcgexp-test-{os.getpid()}-{len(made)}"
            try:
                child.mkdir()
            except OSError:
                continue
            try:
                (child / ("memory.max" if version == 2 else "memory.limit_in_bytes")).write_text(str(limit))
                if version == 2:
                    (child / "memory.swap.max").write_text("0")
            except OSError:
                child.rmdir()
                continue
            made.append(child)
            return child
        pytest.skip(
            "no memory cgroup can be made here (needs root and a writable cgroup file system); the limit "
            "reader is tested on a made-up tree instead"
        )

    yield make
    for child in reversed(made):
        try:
            child.rmdir()
        except OSError:
            pass


# the child's peak measured by a small parent of its own: a process forked from the test's inherits its parent's
# resident memory into ru_maxrss (the copied page tables, kept across exec), the test's having grown over the suite
MEASURED_CHILD = textwrap.dedent("""
    import os, signal, sys
    pid = os.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
    _, status, usage = os.wait4(pid, 0)
    with open(sys.argv[1], "w") as f:
        f.write(str(usage.ru_maxrss * 1024))
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # die of the same signal (an OOM kill is SIGKILL)
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)
""")


def inside(group: Path, args: list[str], **kw) -> tuple[int, str, int]:
    """`python args` inside `group`: (exit status or -signal, output, peak resident bytes of that process)."""
    procs = group / "cgroup.procs"
    with tempfile.NamedTemporaryFile("r") as peak:
        proc = subprocess.Popen(
            [sys.executable, "-c", MEASURED_CHILD, peak.name, *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            preexec_fn=lambda: procs.write_text(str(os.getpid())),  # noqa: PLW1509 - one write, no threads
            **kw,
        )
        out = proc.stdout.read()
        proc.wait()
        return proc.returncode, out, int(peak.read() or 0)


# the largest value of `knob` this job's check accepts, found in the cgroup by the check itself
EDGE = textwrap.dedent("""
    import json, sys
    from tcgexp.api import setup; setup()  # MKL before mlx.core (imported below), as every entry point does
    from tcgexp.train import train  # noqa: F401 - as a run imports it, before measuring what it holds
    from tcgexp.app import compose
    from tcgexp.errors import ConfigError
    from tcgexp.train.run import prepare_data
    knob, lo, hi, rest = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    def fits(v):  # the run's own checks: before any work, and after planning
        try:
            prepare_data(compose(f"{knob}={v}", *rest))
            return True
        except ConfigError:
            return False
    assert fits(lo) and not fits(hi), (lo, hi)
    while hi - lo > max(1, lo // 100):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    print(json.dumps({"edge": lo, "refused": hi}))
""")
RUN = [
    "-m",
    "tcgexp.train",
    "tracking=off",
    "trainer.epochs=1",
    "dataset.episodes_per_shard=2",
    "dataset.row_group_rows=512",
    "dataset.workers=1",
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "limit, knob, lo, hi, rest",
    [
        (int(1.5 * GiB), "model.hidden", 64, 20000, ["dataset.rows_per_day=1500"]),
        (448 * 2**20, "tbptt.batch_size", 64, 10**7, ["dataset.rows_per_day=30000", "model.hidden=64"]),
    ],
    ids=["model.hidden", "tbptt.batch_size"],
)
def test_at_the_refusal_edge_an_accepted_run_survives_and_the_next_is_refused(
    tmp_path, cgroup, limit, knob, lo, hi, rest
):
    group = cgroup(limit)
    data = [f"dataset.root={tmp_path / 'data'}", *rest]
    code, out, _ = inside(
        group,
        [
            *RUN,
            *data,
            "trainer.max_steps=1",
            f"hydra.run.dir={tmp_path / 'warm'}",
            "model.hidden=8",
            "tbptt.batch_size=64",
        ],
    )  # the corpus, built once
    assert code == 0, out[-3000:]
    code, out, _ = inside(group, ["-c", EDGE, knob, str(lo), str(hi), *RUN[2:], *data])
    assert code == 0, out[-3000:]
    edge = json.loads(out.strip().splitlines()[-1])
    code, out, peak = inside(group, [*RUN, *data, f"{knob}={edge['edge']}", f"hydra.run.dir={tmp_path / 'edge'}"])
    assert code == 0, f"{knob}={edge['edge']} was accepted under {limit / GiB:.2f} GiB and ended {code}: {out[-3000:]}"
    assert json.loads((tmp_path / "edge" / "result.json").read_text())["status"] == "completed"
    estimate = memneed.total(
        json.loads(
            subprocess.run(
                [sys.executable, "-c", PARTS, f"{knob}={edge['edge']}", *RUN[2:], *data],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            .stdout.strip()
            .splitlines()[-1]
        )
    )
    assert estimate >= 1.10 * peak, (estimate, peak)
    # the probe's process holds more than a fresh run's when it checks (it has composed and planned some twenty
    # times): a fresh run may fit past the first value the probe refused (in CI's environment with the peers and
    # cabt extras tbptt.batch_size was accepted there, and 5 % past it), so the refusal is checked at 1.5 times it
    over = edge["refused"] * 3 // 2
    code, out, _ = inside(group, [*RUN, *data, f"{knob}={over}", f"hydra.run.dir={tmp_path / 'over'}"])
    line = out.strip().splitlines()[-1]
    assert code == 1 and line.startswith("error: ") and f"{knob}={over}" in line, out[-3000:]
    assert str(group) in line and "this job may use" in line, line
    assert not (tmp_path / "over").exists()


# the parts of a run's estimate after planning, as its check saw them
PARTS = textwrap.dedent("""
    import json, sys
    from tcgexp.api import setup; setup()  # MKL before mlx.core (imported below), as every entry point does
    from tcgexp.train import memneed
    import tcgexp.train.run as setup
    from tcgexp.app import compose
    seen = {}
    real = setup.check_memory
    def recording(cfg, slots=0, lanes=0, rows=0, room=None):
        seen.update(memneed.need(cfg, slots, lanes, rows))
    setup.check_memory = recording
    setup.prepare_data(compose(*sys.argv[1:]))
    print(json.dumps(seen))
""")
