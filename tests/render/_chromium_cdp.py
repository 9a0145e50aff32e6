"""Drive headless Chromium over the DevTools protocol on a pipe (--remote-debugging-pipe): no port, no network.

Messages are NUL-terminated JSON; Chromium reads commands on fd 3 and writes replies and events on fd 4.
A shell maps those onto the child's stdin and stdout, so the pipes are plain subprocess pipes here.
"""

from __future__ import annotations

import base64
import json
import queue
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Debian names it chromium; hosted CI images ship Google Chrome, which speaks the same protocol.
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
    "--remote-debugging-pipe",
)


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


@dataclass
class PageResult:
    errors: list[str] = field(default_factory=list)  # console errors, uncaught exceptions, CSP reports
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    element_ids: list[str] = field(default_factory=list)
    screenshot: bytes = b""


class _Pipe:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._next_id = 0
        self._inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.events: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        buf = b""
        while chunk := self._proc.stdout.read1(65536):
            buf += chunk
            *messages, buf = buf.split(b"\0")
            for m in messages:
                self._inbox.put(json.loads(m))
        self._inbox.put(None)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(msg).encode() + b"\0")
        self._proc.stdin.flush()
        reply = self.wait(lambda m: m.get("id") == self._next_id)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait(self, match: Any, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("Chromium did not answer in time")
            msg = self._inbox.get(timeout=remaining)
            if msg is None:
                raise RuntimeError("Chromium closed the DevTools pipe")
            if "method" in msg:
                self.events.append(msg)
            if match(msg):
                return msg


def _errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in events:
        p = e.get("params", {})
        if e["method"] == "Runtime.exceptionThrown":
            details = p.get("exceptionDetails", {})
            out.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
        elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append(f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p.get('args', [])]}")
        elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            out.append(f"log: {p['entry'].get('text')}")
    return out


def load_page(chromium: str, page: Path, user_data_dir: Path, screenshot_scale: float = 1.0) -> PageResult:
    """Open `page`, wait for its load event, and report errors, requests, element ids and a full-page screenshot."""
    user_data_dir.mkdir(parents=True, exist_ok=True)
    argv = [chromium, *FLAGS, f"--user-data-dir={user_data_dir}", "about:blank"]
    # fd 3 <- our commands (stdin), fd 4 -> replies (stdout); Chromium's own stdout is discarded.
    shell = 'exec "$@" 3<&0 4>&1 0</dev/null 1>/dev/null'
    with open(user_data_dir.parent / "chromium-stderr.log", "wb") as log:
        proc = subprocess.Popen(
            ["sh", "-c", shell, "sh", *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
        )
    try:
        cdp = _Pipe(proc)
        target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            cdp.send(f"{domain}.enable", session=session)
        cdp.events.clear()  # about:blank's own events are not the page's
        cdp.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        cdp.wait(lambda m: m.get("method") == "Page.loadEventFired" and m.get("sessionId") == session)
        ids = cdp.send(
            "Runtime.evaluate",
            {
                "expression": "JSON.stringify([...document.querySelectorAll('[id]')].map(e => e.id))",
                "returnByValue": True,
            },
            session=session,
        )["result"]["value"]
        size = cdp.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
        shot = cdp.send(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": screenshot_scale},
            },
            session=session,
        )["data"]
        session_events = [e for e in cdp.events if e.get("sessionId") == session]
        return PageResult(
            errors=_errors(session_events),
            requests=[
                e["params"]["request"]["url"] for e in session_events if e["method"] == "Network.requestWillBeSent"
            ],
            element_ids=json.loads(ids),
            screenshot=base64.b64decode(shot),
        )
    finally:
        try:
            assert proc.stdin is not None
            proc.stdin.close()  # Chromium exits when its command pipe closes
            proc.wait(timeout=15)
        except (subprocess.TimeoutExpired, OSError):
            proc.kill()
            proc.wait()
