"""Headless Chromium for the page tests (Debian package `chromium`): the DOM after the page's
scripts ran, and screenshots saved as test artefacts under build/test-artifacts/ (or
$FABRICMON_ARTIFACTS)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

from helpers import REPO, wait_until

ARTIFACTS = Path(os.environ.get("FABRICMON_ARTIFACTS", REPO / "build" / "test-artifacts"))


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(url: str, *flags: str, budget_ms: int, size: tuple[int, int], timeout: float = 90.0) -> str:
    exe = chromium()
    assert exe, "chromium is not installed (apt-get install chromium)"
    with tempfile.TemporaryDirectory(prefix="fabricmon-chromium-") as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
               "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}",
               f"--virtual-time-budget={budget_ms}", *flags, url]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return out


def dump_dom(url: str, budget_ms: int = 3000, size: tuple[int, int] = (1600, 1000)) -> str:
    """The serialized DOM once the page's scripts ran for `budget_ms` of virtual time."""
    return _run(url, "--dump-dom", budget_ms=budget_ms, size=size)


def screenshot(url: str, name: str, budget_ms: int = 3000, size: tuple[int, int] = (1600, 1000)) -> Path:
    """A PNG of the page, saved as ARTIFACTS/<name>; returns its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    path.unlink(missing_ok=True)
    _run(url, f"--screenshot={path}", budget_ms=budget_ms, size=size)
    assert path.exists() and path.stat().st_size > 1000, f"chromium wrote no screenshot of {url}"
    return path


class Dom(HTMLParser):
    """A page's elements (tag, attributes; a bare attribute reads "") and its text, parsed once."""

    def __init__(self, text: str):
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.text.append(data)

    def by(self, name: str, value: str) -> dict[str, str] | None:
        """The first element whose attribute `name` is `value`."""
        return next((a for _, a in self.elements if a.get(name) == value), None)

    def with_attr(self, name: str) -> dict[str, dict[str, str]]:
        """Elements carrying `name`, by its value."""
        return {a[name]: a for _, a in self.elements if name in a}


def elements(dom: str, attr: str) -> list[dict[str, str]]:
    """The attributes of every element of a dumped DOM that carries `attr` (with `_tag`)."""
    return [{"_tag": t, **a} for t, a in Dom(dom).elements if attr in a]


class Session:
    """A live headless Chromium driven over the DevTools protocol on a pipe
    (`--remote-debugging-pipe`: fd 3 in, fd 4 out, NUL-separated JSON), so a test can click,
    wait and read the page as an operator's browser has it. One page (tab) per session."""

    def __init__(self, size: tuple[int, int] = (1400, 900)):
        import json
        self._json = json
        exe = chromium()
        assert exe, "chromium is not installed (apt-get install chromium)"
        self._profile = tempfile.TemporaryDirectory(prefix="fabricmon-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:              # the child's fd 3 reads our commands, fd 4 writes replies
            r, w = os.dup(to_child_r), os.dup(from_child_w)     # (either end may already be 3 or 4)
            os.dup2(r, 3)
            os.dup2(w, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--hide-scrollbars", "--remote-debugging-pipe", f"--user-data-dir={self._profile.name}",
             f"--window-size={size[0]},{size[1]}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=fds,
            close_fds=False,            # fds 3 and 4 are made in preexec_fn; every other fd is close-on-exec
            start_new_session=True)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.session: str | None = None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")

    def call(self, method: str, timeout: float = 30.0, **params) -> dict:
        import select
        import time
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if self.session is not None and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._to_child, self._json.dumps(msg).encode() + b"\0")
        end = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = self._json.loads(raw)
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply.get("result", {})
            left = end - time.monotonic()
            assert left > 0, f"chromium did not answer {method} within {timeout}s"
            if select.select([self._from_child], [], [], left)[0]:
                chunk = os.read(self._from_child, 1 << 20)
                assert chunk, "chromium closed the DevTools pipe"
                self._buf += chunk

    def js(self, expression: str):
        """The value of a JavaScript expression in the page (promises awaited)."""
        r = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails'].get('text')} "
                               f"{r['exceptionDetails'].get('exception', {}).get('description', '')}")
        return r["result"].get("value")

    def wait(self, expression: str, timeout: float = 15.0):
        """Polls an expression until it is truthy; returns its value."""
        return wait_until(lambda: self.js(expression), timeout, f"true: {expression}", interval=0.1)

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait("document.readyState === 'complete' && !!document.getElementById('live')")

    def click(self, selector: str) -> None:
        """A real mouse click (pressed and released) at the centre of the element."""
        box = self.js(f"(() => {{ const e = document.querySelector({self._json.dumps(selector)}); if (!e) return null;"
                      " e.scrollIntoView({block: 'center', inline: 'center'});"
                      " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        assert box, f"nothing matches {selector}"
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def screenshot(self, name: str) -> Path:
        import base64
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / name
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)
        self._profile.cleanup()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
