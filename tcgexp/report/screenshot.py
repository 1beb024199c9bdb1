"""Screenshots of the Aim UI over a repo: the runs explorer and the metrics explorer.

    python -m tcgexp.report.screenshot --repo . --out docs/      # needs Debian's `chromium`

Starts ``aim up`` on loopback, opens both explorers in headless Chromium and
saves PNGs. The metrics explorer is opened on a query in its URL (Aim's own
``O-`` + base64url(encodeURI(JSON)) state encoding): for a sweep dir, the link the sweep printed
(``aim_link``: its metrics, coloured by its swept keys); what it drew (lines, colours, the colour
legend) goes to ``aim_metrics.json`` beside the PNGs. Chromium is driven over
the DevTools protocol, because the charts draw only after real time has
passed, which ``--screenshot`` does not wait for.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from ..console import one_line_errors
from ..track.aim_repo import open_repo
from .aim_link import aim_state, explorer_path
from .multirun import sweep_id as recorded
from .report import groups_of, keys_of
from .summary import FINDINGS

METRICS_QUERY = (
    '(metric.name == "val/loss") or (metric.name == "train/loss") or '
    '(metric.name == "cache_train/hit_rate_pct") or (metric.name == "cache_train/bytes_loaded")'
)
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1600,1000",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer in {seconds:.0f} s") from None
            time.sleep(0.3)


async def _call(ws, ids: list[int], method: str, params: dict | None = None) -> dict:
    """One DevTools command; its reply (events in between are skipped)."""
    ids[0] += 1
    await ws.send(json.dumps({"id": ids[0], "method": method, "params": params or {}}))
    while True:
        msg = json.loads(await ws.recv())
        if msg.get("id") == ids[0]:
            return msg


async def _js(ws, ids: list[int], expression: str):
    reply = await _call(ws, ids, "Runtime.evaluate", {"expression": expression, "returnByValue": True})
    return reply.get("result", {}).get("result", {}).get("value")


SKIP_TOUR = "for (const b of document.querySelectorAll('button')) { if (b.textContent.trim() === 'Skip') b.click(); }"
RELOAD = "<reload>"  # a step of a page's script list: reload it and let it draw again


def arrange_runs_table(pinned: list[str]) -> str:
    """JS: pin `pinned` columns left of the runs table and unhide them (Aim keeps the table's layout in
    localStorage "runsTable", in the same O- encoding as its URL state; there is no URL for it)."""
    return (
        "(() => { const raw = localStorage.getItem('runsTable'); if (!raw) return null;"
        " const t = JSON.parse(decodeURIComponent(atob(raw.slice(2).replace(/-/g, '+').replace(/_/g, '/'))));"
        f" const pinned = {json.dumps(pinned)};"
        " t.hiddenColumns = (t.hiddenColumns || []).filter(c => !pinned.includes(c));"
        " const order = t.columnsOrder || {};"
        " t.columnsOrder = {left: pinned, middle: (order.middle || []).filter(c => !pinned.includes(c)),"
        " right: (order.right || []).filter(c => !pinned.includes(c))};"
        " localStorage.setItem('runsTable', 'O-' + btoa(encodeURI(JSON.stringify(t)))"
        ".replace(/=/g, '').replace(/[+]/g, '-').replace(/[/]/g, '_'));"
        " return t.columnsOrder; })()"
    )


TABLE_DIFF = (
    "(() => { for (const b of document.querySelectorAll('button')) "
    "{ if (b.textContent.trim() === 'Show Table Diff' && !b.disabled) { b.click(); return true; } } "
    "return false; })()"
)


async def capture(
    devtools_port: int, pages: dict[str, tuple[str, list[str]]], out: Path, settle: float
) -> dict[str, list]:
    """Each page: open its URL, let it draw, run its scripts (a second apart), save a PNG; returns each
    page's script results."""
    import websockets

    results: dict[str, list] = {}
    for name, (url, scripts) in pages.items():
        req = urllib.request.Request(
            f"http://127.0.0.1:{devtools_port}/json/new?{urllib.parse.quote(url, safe='')}", method="PUT"
        )
        # Chromium's own devtools endpoint on loopback, answered at once: one blocking call is fine here
        target = json.loads(urllib.request.urlopen(req, timeout=10).read())  # noqa: ASYNC210
        async with websockets.connect(target["webSocketDebuggerUrl"], max_size=2**26) as ws:
            ids = [0]
            await asyncio.sleep(settle)  # the explorers fetch, then draw: give them real time
            for script in [SKIP_TOUR, *scripts]:
                if script == RELOAD:
                    await _call(ws, ids, "Page.reload")
                    await asyncio.sleep(settle)
                    continue
                result = await _js(ws, ids, script)
                results.setdefault(name, []).append(result)
                if os.environ.get("TCGEXP_SCREENSHOT_DEBUG"):
                    print(name, script[:60], "->", result)
                await asyncio.sleep(1.5)
            shot = await _call(ws, ids, "Page.captureScreenshot", {"format": "png"})
            (out / f"{name}.png").write_bytes(base64.b64decode(shot["result"]["data"]))
    return results


@contextlib.contextmanager
def served(cmd: list[str], url: str, chromium: str, seconds: float = 90) -> Iterator[int]:
    """Start a web app (`cmd`, answering at `url`) and a headless Chromium; yields Chromium's DevTools
    port. Both are stopped (their process groups) on the way out, whatever happened."""
    app = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    profile, devtools, browser = tempfile.mkdtemp(prefix="tcgexp-chromium-"), free_port(), None
    try:
        wait_http(url, seconds)
        browser = subprocess.Popen(
            [
                chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--remote-debugging-port={devtools}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_http(f"http://127.0.0.1:{devtools}/json/version", 60)
        yield devtools
    finally:
        for proc in (browser, app):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)


def sweep_id(sweep: str) -> str:
    """A sweep dir (as jobs record it in run["sweep"]["dir"]) or an id, as the id jobs record."""
    path = Path(sweep).expanduser()
    if path.is_dir():
        return recorded(path)  # as context.job_context hashed it, from the folder it ran in
    return sweep


def swept_columns(repo: str, sweep: str | None) -> list[str]:
    """The runs table's columns for what the sweep varies (``run["swept"]``: ``swept.cache``, ...)."""

    wanted = sweep_id(sweep) if sweep else None
    keys: list[str] = []
    for run in open_repo(repo).iter_runs():
        try:
            if wanted and (run["sweep"] or {}).get("id") != wanted:
                continue
            swept = run["swept"] or {}
        except KeyError:  # a run from before runs recorded these
            continue
        keys += [k for k in swept if k not in keys]
    return [f"swept.{k}" for k in keys]


# what the metrics explorer drew: its lines, their colours (one per group) and the colour legend's text
RENDERED = (
    "(() => { const lines = [...document.querySelectorAll('svg path.Line')];"
    " const legend = document.querySelector('.ChartLegends');"
    " return {lines: lines.length, colours: [...new Set(lines.map(l => getComputedStyle(l).stroke))],"
    " legend: legend ? legend.innerText : null}; })()"
)


def pages(base: str, sweep: str | None, columns: list[str]) -> dict[str, tuple[str, list[str]]]:
    """The runs explorer (one sweep; the run name, what it varies and its status pinned left; only
    columns that differ between its runs, Aim's "Show Table Diff") and the metrics explorer: for a sweep
    dir, the sweep's own link (``aim_link``: its metrics, coloured by its swept keys), else four metrics."""
    where = f'run.sweep.id == "{sweep_id(sweep)}"' if sweep else ""
    runs = {"options": [], "query": where, "advancedMode": False, "advancedQuery": ""}
    if sweep and Path(sweep).expanduser().is_dir():
        where = Path(sweep).expanduser()
        try:
            found = json.loads((where / FINDINGS).read_text())
        except (OSError, ValueError):
            found = []
        metrics_url = base + explorer_path(where, keys_of(where), groups_of(where, found))
    else:
        query = f"({METRICS_QUERY}) and {where}" if where else METRICS_QUERY
        metrics_url = f"{base}/metrics?select=" + aim_state(
            {"options": [], "query": "", "advancedMode": True, "advancedQuery": query}
        )
    return {
        "aim_runs": (
            f"{base}/runs?select={aim_state(runs)}",
            [TABLE_DIFF, arrange_runs_table(["run", *columns, "status"]), RELOAD],
        ),
        "aim_metrics": (metrics_url, [RENDERED]),
    }


@one_line_errors(FileNotFoundError, TimeoutError)  # no chromium, no aim; `aim up` that never answers
def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tcgexp.report.screenshot")
    p.add_argument("--repo", default=".", help="the folder holding .aim/")
    p.add_argument("--out", required=True, help="the folder for aim_runs.png and aim_metrics.png")
    p.add_argument(
        "--sweep", default=None, help="a sweep dir (hydra.sweep.dir) or its id (run.sweep.id): show only its runs"
    )
    p.add_argument("--settle", type=float, default=12.0, help="seconds to let each page draw")
    p.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = p.parse_args(argv)
    if not (Path(args.repo) / ".aim").is_dir():  # `aim up` would exit and leave us waiting for it
        raise FileNotFoundError(f"--repo {args.repo}: no Aim repo there (no .aim folder)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    aim = ["aim", "up", "--repo", str(args.repo), "--host", "127.0.0.1", "--port", str(port)]
    with served(aim, f"http://127.0.0.1:{port}/", args.chromium) as devtools:
        shots = pages(f"http://127.0.0.1:{port}", args.sweep, swept_columns(args.repo, args.sweep))
        seen = asyncio.run(capture(devtools, shots, out, args.settle))
        # what the metrics explorer drew, for a reader (and a test) to check against the sweep
        (out / "aim_metrics.json").write_text(json.dumps(seen["aim_metrics"][-1], indent=2) + "\n")
        print("\n".join(str(out / f"{n}.png") for n in shots))


if __name__ == "__main__":
    main()
