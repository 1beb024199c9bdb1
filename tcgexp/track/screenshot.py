"""Screenshots of the Aim UI over a repo: the runs explorer and the metrics explorer.

    python -m tcgexp.track.screenshot --repo . --out docs/      # needs Debian's `chromium`

Starts ``aim up`` on loopback, opens both explorers in headless Chromium and
saves PNGs. The metrics explorer is opened on a query in its URL (Aim's own
``O-`` + base64url(encodeURI(JSON)) state encoding). Chromium is driven over
the DevTools protocol, because the charts draw only after real time has
passed, which ``--screenshot`` does not wait for.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
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
from pathlib import Path

METRICS_QUERY = ('(metric.name == "val/loss") or (metric.name == "train/loss") or '
                 '(metric.name == "cache_train/hit_rate_pct") or (metric.name == "cache_train/bytes_loaded")')
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1600,1000"]


def aim_state(obj: dict) -> str:
    """Aim UI's URL encoding of explorer state."""
    raw = urllib.parse.quote(json.dumps(obj, separators=(",", ":")), safe="~@#$&()*!+=:;,?/'")
    return "O-" + base64.b64encode(raw.encode()).decode().replace("=", "").replace("+", "-").replace("/", "_")


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
                raise TimeoutError(f"{url} did not answer in {seconds:.0f} s")
            time.sleep(0.3)


async def capture(devtools_port: int, pages: dict[str, str], out: Path, settle: float) -> None:
    import websockets

    for name, url in pages.items():
        req = urllib.request.Request(f"http://127.0.0.1:{devtools_port}/json/new?{urllib.parse.quote(url, safe='')}",
                                     method="PUT")
        target = json.loads(urllib.request.urlopen(req, timeout=10).read())
        async with websockets.connect(target["webSocketDebuggerUrl"], max_size=2**26) as ws:
            await asyncio.sleep(settle)  # the explorers fetch, then draw: give them real time
            skip = ("for (const b of document.querySelectorAll('button')) "
                    "{ if (b.textContent.trim() === 'Skip') b.click(); }")
            await ws.send(json.dumps({"id": 1, "method": "Runtime.evaluate", "params": {"expression": skip}}))
            await ws.recv()
            await asyncio.sleep(1.0)
            await ws.send(json.dumps({"id": 2, "method": "Page.captureScreenshot", "params": {"format": "png"}}))
            while True:
                msg = json.loads(await ws.recv())
                if msg.get("id") == 2:
                    break
            (out / f"{name}.png").write_bytes(base64.b64decode(msg["result"]["data"]))


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tcgexp.track.screenshot")
    p.add_argument("--repo", default=".", help="the folder holding .aim/")
    p.add_argument("--out", default="docs")
    p.add_argument("--settle", type=float, default=12.0, help="seconds to let each page draw")
    p.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    port, devtools = free_port(), free_port()
    aim = subprocess.Popen(["aim", "up", "--repo", str(args.repo), "--host", "127.0.0.1", "--port", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    profile = tempfile.mkdtemp(prefix="tcgexp-chromium-")
    browser = None
    try:
        wait_http(f"http://127.0.0.1:{port}/", 90)
        browser = subprocess.Popen([args.chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                    f"--remote-debugging-port={devtools}", "about:blank"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_http(f"http://127.0.0.1:{devtools}/json/version", 60)
        select = {"options": [], "query": "", "advancedMode": True, "advancedQuery": METRICS_QUERY}
        pages = {"aim_runs": f"http://127.0.0.1:{port}/runs",
                 "aim_metrics": f"http://127.0.0.1:{port}/metrics?select={aim_state(select)}"}
        asyncio.run(capture(devtools, pages, out, args.settle))
        print("\n".join(str(out / f"{n}.png") for n in pages))
    finally:
        for proc in (browser, aim):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
