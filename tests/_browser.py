"""Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON
messages separated by NUL on fds 3 and 4), so the report tests need no port and no websocket
library. Chromium comes from Debian (`scripts/browser.sh`, which `make test` runs)."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["Page", "chromium"]

_CANDIDATES = ("chromium-headless-shell", "chromium", "/usr/lib/chromium/chromium-headless-shell")


def chromium() -> str | None:
    """The Chromium binary, None when none is installed."""
    return next((found for name in _CANDIDATES if (found := shutil.which(name))), None)


class Page:
    """One page of a fresh browser, `width` x `height` CSS pixels; errors the page logs (console
    errors, exceptions, refused loads, CSP violations) gather in `errors`."""

    def __init__(self, binary: str, width: int = 1280, height: int = 800, timeout_s: float = 30.0) -> None:
        self.timeout_s, self.errors, self._id = timeout_s, [], 0
        self._profile = tempfile.TemporaryDirectory(prefix="day0-chromium-", ignore_cleanup_errors=True)
        to_browser, self._in = os.pipe()  # we write commands to fd 3 of the browser
        self._out, from_browser = os.pipe()  # it answers on its fd 4

        def fds() -> None:  # via fresh copies: a pipe may already sit on 3 or 4, and dup2 onto itself
            a, b = os.dup(to_browser), os.dup(from_browser)  # would keep its close-on-exec flag
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [binary, "--headless", "--remote-debugging-pipe", f"--user-data-dir={self._profile.name}"]
        args += ["--no-first-run", "--disable-gpu", "--disable-extensions", f"--window-size={width},{height}"]
        args += ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium refuses root with its sandbox
        self._proc = subprocess.Popen(
            [*args, "about:blank"],
            preexec_fn=fds,
            close_fds=False,  # closing runs after preexec_fn: it would close fds 3 and 4 again
            start_new_session=True,  # its own process group, ended with it
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._events = b"", []
        target = self._call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self._call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Ask the browser to quit, then end its process group (renderers, crash handler) if it lingers."""
        try:
            self._call("Browser.close")
            self._proc.wait(timeout=10)
        except (OSError, RuntimeError, TimeoutError, subprocess.TimeoutExpired):
            pass
        finally:
            if self._proc.poll() is None:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(timeout=10)
            os.close(self._in)
            os.close(self._out)
            self._profile.cleanup()

    # --- protocol ---------------------------------------------------------------------------

    def _send(self, method: str, session: str | None, params: dict[str, Any]) -> int:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self._in, json.dumps(message).encode() + b"\0")
        return self._id

    def _next(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._out], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._out, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium exited (code {self._proc.poll()})")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\0")
        message = json.loads(line)
        if "method" in message:
            self._collect(message)
        return message

    def _collect(self, event: dict[str, Any]) -> None:
        self._events.append(event["method"])
        p = event.get("params", {})
        if event["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
            self.errors.append(f"{p['entry']['source']}: {p['entry']['text']}")
        elif event["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
        elif event["method"] == "Runtime.exceptionThrown":
            self.errors.append(f"exception: {p['exceptionDetails'].get('text')}")

    def _call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        wanted, deadline = self._send(method, session, params), time.monotonic() + self.timeout_s
        while True:
            message = self._next(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        return self._call(method, self._session, **params)

    # --- what the tests use -------------------------------------------------------------------

    def open(self, path: Path) -> None:
        """Navigate to the file and wait until it has loaded (images included)."""
        self._events.clear()
        self.call("Page.navigate", url=path.resolve().as_uri())
        deadline = time.monotonic() + self.timeout_s
        while "Page.loadEventFired" not in self._events:
            self._next(deadline)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (DevTools evaluation, not page script)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluate: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self) -> bytes:
        """PNG of the viewport."""
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
