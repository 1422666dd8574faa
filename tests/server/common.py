"""common.py: what the server tests share: starting proven-server on a free loopback port,
HTTP requests (stdlib http.client), server-sent events, and the ok/FAIL/skip lines that
tests/test_server.c counts (one line per check)."""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import ctypes

N_OK = 0
N_FAIL = 0
SERVERS = []  # every server started, for their logs when something fails


def _die_with_parent():
    """The server gets SIGKILL when this test process dies (a timeout kills the test, not a server
    it started)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def ok(cond, msg):
    """One check: prints 'ok MSG' or 'FAIL MSG' (test_server.c counts them)."""
    global N_OK, N_FAIL
    if cond:
        N_OK += 1
        print("ok " + msg, flush=True)
    else:
        N_FAIL += 1
        print("FAIL " + msg, flush=True)
    return cond


def skip(msg):
    print("skip " + msg, flush=True)


def done():
    if N_FAIL:
        for srv in SERVERS:
            print("--- proven-server log (pid %d, exit %s):" % (srv.proc.pid, srv.proc.poll()))
            for line in srv.logtext().splitlines()[-25:]:
                print("  " + line)
    print(f"checks: {N_OK} ok, {N_FAIL} failed", flush=True)
    sys.exit(1 if N_FAIL else 0)


class Server:
    """proven-server on 127.0.0.1:<free port>; stderr goes to a log file shown on failure."""

    def __init__(self, build, model, *args, wait=True, env=None):
        self.dir = tempfile.mkdtemp(prefix="pv-srv-")
        self.portfile = os.path.join(self.dir, "port")
        self.logpath = os.path.join(self.dir, "log")
        self.log = open(self.logpath, "wb")
        cmd = [os.path.join(build, "proven-server"), "--model", model, "--port", "0", "--port-file", self.portfile] + list(args)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, env=env, preexec_fn=_die_with_parent)
        SERVERS.append(self)
        self.port = None
        t0 = time.time()
        while time.time() - t0 < 120:
            if self.proc.poll() is not None:
                raise RuntimeError("proven-server exited %d:\n%s" % (self.proc.returncode, self.logtext()))
            try:
                with open(self.portfile) as f:
                    s = f.read().strip()
                if s:
                    self.port = int(s)
                    break
            except OSError:
                pass
            time.sleep(0.02)
        if self.port is None:
            raise RuntimeError("proven-server did not start:\n" + self.logtext())
        if wait:
            self.wait_ready()

    def logtext(self):
        try:
            with open(self.logpath, "rb") as f:
                return f.read().decode("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def wait_ready(self, timeout=120):
        t0 = time.time()
        while time.time() - t0 < timeout:
            try:
                st, _, _ = self.request("GET", "/health")
                if st == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("proven-server exited:\n" + self.logtext())
            time.sleep(0.05)
        raise RuntimeError("proven-server not ready after %d s" % timeout)

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, headers dict with lower-case names, body bytes)"""
        c = self.conn(timeout)
        h = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            body = body.encode()
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def post(self, path, obj, headers=None, timeout=120):
        """(status, parsed JSON or None)"""
        st, _, data = self.request("POST", path, obj, headers, timeout)
        try:
            return st, json.loads(data)
        except ValueError:
            return st, None

    def get(self, path, headers=None):
        st, hd, data = self.request("GET", path, headers=headers)
        return st, hd, data

    def stream(self, path, obj, headers=None, timeout=120):
        """(status, events): events are parsed JSON objects, then the string '[DONE]'; raw
        bytes of a non-SSE answer are returned as (status, body bytes)."""
        c = self.conn(timeout)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request("POST", path, body=json.dumps(obj).encode(), headers=h)
        r = c.getresponse()
        if r.getheader("Content-Type", "").split(";")[0] != "text/event-stream":
            data = r.read()
            c.close()
            return r.status, data
        events = read_sse(r)
        c.close()
        return r.status, events

    def rss_kb(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Sends sig and waits; returns the exit code (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        self.log.close()
        return self.proc.returncode


def read_sse(r):
    """Events of an SSE response (http.client response): JSON objects and '[DONE]'; comments skipped."""
    events = []
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                if line.startswith(b"data: "):
                    d = line[6:]
                    events.append("[DONE]" if d == b"[DONE]" else json.loads(d))
    if buf.strip():
        events.append(("trailing", buf))
    return events


def chat_text(events):
    """content, reasoning, tool_calls, finish_reason, usage of a streamed chat answer"""
    content, reasoning, calls, finish, usage = "", "", [], None, None
    for e in events:
        if not isinstance(e, dict):
            continue
        if e.get("usage"):
            usage = e["usage"]
        for ch in e.get("choices", []):
            d = ch.get("delta", {})
            content += d.get("content") or ""
            reasoning += d.get("reasoning_content") or ""
            calls += d.get("tool_calls") or []
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    return content, reasoning, calls, finish, usage


def completion_text(events):
    text, finish, usage = "", None, None
    for e in events:
        if not isinstance(e, dict):
            continue
        if e.get("usage"):
            usage = e["usage"]
        for ch in e.get("choices", []):
            text += ch.get("text") or ""
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    return text, finish, usage


def venv_python(build, pkgs):
    """A venv under the build directory with pkgs ({module: requirement}); its python, or None
    (with a skip line) when it cannot be made (no venv module, no network for pip)."""
    d = os.path.join(os.path.abspath(build), "pyvenv")
    py = os.path.join(d, "bin", "python")
    if not os.path.exists(py):
        r = subprocess.run([sys.executable, "-m", "venv", d], capture_output=True)
        if r.returncode:
            skip("cannot make a venv in %s (python3-venv missing?): %s" % (d, r.stderr.decode()[-200:]))
            return None
    missing = [req for mod, req in pkgs.items() if subprocess.run([py, "-c", "import " + mod], capture_output=True).returncode]
    if missing:
        r = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check"] + missing, capture_output=True,
                           timeout=600)
        if r.returncode:
            skip("pip cannot install %s into %s (no network?): %s" % (" ".join(missing), d, r.stderr.decode()[-300:]))
            return None
    return py


def relay(cmd, timeout):
    """Runs a checker that prints ok/FAIL/skip lines itself; its lines count here. Its exit code."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    global N_OK, N_FAIL
    for line in r.stdout.decode("utf-8", "replace").splitlines():
        print(line, flush=True)
        if line.startswith("ok "):
            N_OK += 1
        elif line.startswith("FAIL "):
            N_FAIL += 1
    return r.returncode


def raw_socket(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


def is_error_body(obj, status):
    """OpenAI's error shape with the status as code."""
    return (isinstance(obj, dict) and isinstance(obj.get("error"), dict) and isinstance(obj["error"].get("message"), str)
            and isinstance(obj["error"].get("type"), str) and obj["error"].get("code") == status)
