"""browser.py: headless Chromium driven through the DevTools protocol (a minimal websocket
client on the standard library): open a page, wait for a condition, read values, screenshot."""
import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


class WebSocket:
    def __init__(self, url, timeout=60):
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        self.s = socket.create_connection((m.group(1), int(m.group(2))), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET %s HTTP/1.1\r\nHost: %s:%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (m.group(3), m.group(1), m.group(2), key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            d = self.s.recv(1)
            if not d:
                raise OSError("websocket handshake: connection closed")
            head += d
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise OSError("websocket handshake refused: %r" % head[:80])

    def send(self, text):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        hdr = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536
                               else bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _exact(self, n):
        out = b""
        while len(out) < n:
            d = self.s.recv(n - len(out))
            if not d:
                raise OSError("websocket closed")
            out += d
        return out

    def recv(self):
        msg = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            payload = self._exact(n)
            op = b0 & 0x0F
            if op == 8:
                raise OSError("websocket closed by the browser")
            if op in (9, 10):  # ping / pong
                continue
            msg += payload
            if b0 & 0x80:
                return msg.decode("utf-8", "replace")


class Browser:
    def __init__(self, exe):
        self.dir = tempfile.mkdtemp(prefix="pv-chromium-")
        self.proc = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                      "--no-first-run", "--window-size=1100,800", "--remote-debugging-port=0",
                                      "--user-data-dir=" + self.dir, "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port = None
        t0 = time.time()
        while time.time() - t0 < 60 and port is None:
            line = self.proc.stderr.readline().decode("utf-8", "replace")
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
            if not line and self.proc.poll() is not None:
                break
        if port is None:
            raise OSError("chromium did not start its DevTools endpoint")
        pages = json.load(urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=30))
        page = [p for p in pages if p.get("type") == "page"][0]
        self.ws = WebSocket(page["webSocketDebuggerUrl"])
        self.seq = 0

    def call(self, method, **params):
        self.seq += 1
        self.ws.send(json.dumps({"id": self.seq, "method": method, "params": params}))
        while True:
            r = json.loads(self.ws.recv())
            if r.get("id") == self.seq:
                if "error" in r:
                    raise OSError("%s: %s" % (method, r["error"]))
                return r.get("result", {})

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        return r.get("result", {}).get("value")

    def wait(self, expr, timeout):
        t0 = time.time()
        while time.time() - t0 < timeout:
            v = self.eval(expr)
            if v:
                return v
            time.sleep(0.1)
        return None

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
