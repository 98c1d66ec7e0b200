#!/usr/bin/env python3
"""Start, check and stop meshtest's shared remote cache: a BuildGrid server speaking the Remote
Execution API (CAS, ByteStream, ActionCache, Capabilities), which Pants reads and writes with
``remote_cache_read`` / ``remote_cache_write`` (``pants.remote-cache.toml``).

    python3 tools/remote_cache.py start [--dir DIR] [--port PORT] [--host ADDR]   # prints the address
    python3 tools/remote_cache.py status [--dir DIR]                 # exit 0 when it answers
    python3 tools/remote_cache.py stop [--dir DIR]
    python3 tools/remote_cache.py address [--dir DIR] [--host NAME]  # grpc://NAME:PORT (default 127.0.0.1)

Then: ``MESHTEST_REMOTE_CACHE=$(python3 tools/remote_cache.py address)
PANTS_CONFIG_FILES=pants.remote-cache.toml ./pants --tag=cpu_level0 test cases::``.

BuildGrid 0.8 needs CPython >= 3.12: the first ``start`` makes a venv (:func:`venv_dir`) with the
first of ``--python``, ``$MESHTEST_BUILDGRID_PYTHON``, ``python3.12``/``python3.13`` on PATH or
pyenv's 3.12/3.13, and installs ``3rdparty/buildgrid/requirements.txt`` (pinned) into it (about
1.5 min once); a changed requirements file gets a new venv. The server's files live in DIR (default
``~/.cache/meshtest/remote-cache``): ``bgd.yml`` (from ``3rdparty/buildgrid/bgd.yml.in``), ``cas/``
(the blobs; the ActionCache index is BuildGrid's in-memory LRU, empty after a restart), ``bgd.log``,
``server.json`` (pid, port; removed by ``stop``). ``--host`` is the address the server binds
(default ``127.0.0.1``; ``0.0.0.0`` for a fleet). ``start``
returns once a Capabilities request is answered (timeout: ``--wait`` seconds); ``stop`` sends
SIGTERM, then SIGKILL after 10 s, to the server's whole process group.
Only the standard library: it runs with the system ``python3``, like the other tools.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIREMENTS = os.path.join(ROOT, "3rdparty", "buildgrid", "requirements.txt")
CONFIG_TEMPLATE = os.path.join(ROOT, "3rdparty", "buildgrid", "bgd.yml.in")
INSTANCE = "meshtest"
DEFAULT_DIR = os.path.join(os.path.expanduser("~"), ".cache", "meshtest", "remote-cache")


def find_python(explicit: str = "") -> str:
    """A CPython >= 3.12 for BuildGrid (see module doc).

    :raises SystemExit: none found (the message lists where it looked)."""
    candidates = [explicit, os.environ.get("MESHTEST_BUILDGRID_PYTHON", "")]
    candidates += [shutil.which(n) or "" for n in ("python3.12", "python3.13")]
    pyenv = os.environ.get("PYENV_ROOT", os.path.join(os.path.expanduser("~"), ".pyenv"))
    candidates += sorted(glob.glob(os.path.join(pyenv, "versions", "3.1[23]*", "bin", "python3")))
    for c in candidates:
        if not c or not os.path.exists(c):
            continue
        out = subprocess.run([c, "-c", "import sys; print(sys.version_info >= (3, 12))"], capture_output=True,
                             text=True)
        if out.stdout.strip() == "True":
            return c
    raise SystemExit("remote_cache: BuildGrid needs CPython >= 3.12; none found (tried --python, "
                     "$MESHTEST_BUILDGRID_PYTHON, python3.12/python3.13 on PATH, pyenv 3.12/3.13)")


def venv_dir() -> str:
    """Where BuildGrid's venv lives: ``$MESHTEST_BUILDGRID_VENV``, else
    ``~/.cache/meshtest/buildgrid/venv-<first 12 hex of the requirements' sha256>`` (shared by every
    server directory; a changed requirements file gets a new venv)."""
    if os.environ.get("MESHTEST_BUILDGRID_VENV"):
        return os.environ["MESHTEST_BUILDGRID_VENV"]
    with open(REQUIREMENTS, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return os.path.join(os.path.expanduser("~"), ".cache", "meshtest", "buildgrid", f"venv-{digest[:12]}")


def ensure_venv(python: str) -> str:
    """The venv's ``bgd``, installing the pinned requirements first when the venv is incomplete."""
    venv = venv_dir()
    stamp = os.path.join(venv, "meshtest-requirements.sha256")
    with open(REQUIREMENTS, "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    bgd = os.path.join(venv, "bin", "bgd")
    if os.path.exists(bgd) and os.path.exists(stamp) and open(stamp).read().strip() == want:
        return bgd
    print(f"remote_cache: installing BuildGrid into {venv} (python {python})", file=sys.stderr, flush=True)
    subprocess.run([python, "-m", "venv", "--clear", venv], check=True)
    subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "--disable-pip-version-check",
                    "-r", REQUIREMENTS], check=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    with open(stamp, "w") as f:
        f.write(want + "\n")
    return bgd


def free_port() -> int:
    """A TCP port free on this machine now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _state(directory: str) -> dict:
    try:
        with open(os.path.join(directory, "server.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live BuildGrid server (a reused pid of another program is not)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().replace(b"\0", b" ").decode(errors="replace")
        with open(f"/proc/{pid}/stat") as f:
            zombie = f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return False
    return "bgd" in args and "server" in args and not zombie


def answers(directory: str, timeout_s: float = 10.0) -> bool:
    """Whether the server of ``directory`` answers a REAPI GetCapabilities request (on its
    recorded port, through loopback when it binds every interface)."""
    st = _state(directory)
    bgd = os.path.join(venv_dir(), "bin", "bgd")
    if not st or not os.path.exists(bgd):
        return False
    try:
        host = st.get("host", "127.0.0.1")
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "[::]") else host
        out = subprocess.run([bgd, "capabilities", "--remote", f"http://{host}:{st['port']}",
                              "--instance-name", INSTANCE], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    return out.returncode == 0 and "highApiVersion" in out.stdout


def start(directory: str, port: int, python: str, wait_s: float, host: str = "127.0.0.1") -> int:
    """Start the server of ``directory`` (see module doc); prints its address. Returns the exit
    code: 0 serving (or already serving), 1 it exited or did not answer within ``wait_s``.

    :raises subprocess.CalledProcessError: installing BuildGrid's venv failed.
    :raises SystemExit: no CPython >= 3.12 found."""
    directory = os.path.abspath(directory)
    os.makedirs(directory, exist_ok=True)
    st = _state(directory)
    if st and _alive(st["pid"]):
        if answers(directory):
            print(f"grpc://{st.get('host', '127.0.0.1')}:{st['port']}")
            print(f"remote_cache: already running, pid {st['pid']}", file=sys.stderr)
            return 0
        stop(directory)  # alive but not answering: never leave a second server beside it
    bgd = ensure_venv(find_python(python))
    port = port or free_port()
    with open(CONFIG_TEMPLATE) as f:
        config = f.read().replace("@DIR@", directory).replace("@PORT@", str(port)).replace("@HOST@", host)
    with open(os.path.join(directory, "bgd.yml"), "w") as f:
        f.write(config)
    log = open(os.path.join(directory, "bgd.log"), "a")
    log.write(f"\n== {time.strftime('%Y-%m-%d %H:%M:%S')} start on port {port}\n")
    log.flush()
    proc = subprocess.Popen([bgd, "server", "start", os.path.join(directory, "bgd.yml")], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                            cwd=directory)
    with open(os.path.join(directory, "server.json"), "w") as f:
        json.dump({"pid": proc.pid, "port": port, "host": host, "instance": INSTANCE}, f)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            print(f"remote_cache: the server exited with {proc.returncode}; see {directory}/bgd.log",
                  file=sys.stderr)
            return 1
        if answers(directory, timeout_s=5):
            print(f"grpc://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}")
            print(f"remote_cache: BuildGrid pid {proc.pid} serving instance {INSTANCE!r}; log {directory}/bgd.log",
                  file=sys.stderr)
            return 0
        time.sleep(0.5)
    print(f"remote_cache: no answer within {wait_s:g}s; stopping it (see {directory}/bgd.log)", file=sys.stderr)
    stop(directory)
    return 1


def stop(directory: str) -> int:
    """Stop the server of ``directory`` (SIGTERM, then SIGKILL after 10 s, to its process
    group) and remove ``server.json``. Returns 0 (also when nothing was running)."""
    directory = os.path.abspath(directory)
    st = _state(directory)
    if not st or not _alive(st["pid"]):
        if os.path.exists(os.path.join(directory, "server.json")):
            os.remove(os.path.join(directory, "server.json"))
        print("remote_cache: not running")
        return 0
    pgid = st["pid"]  # started with start_new_session: its own process group
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _alive(st["pid"]):
            time.sleep(0.2)
        if not _alive(st["pid"]):
            break
    try:
        os.killpg(pgid, signal.SIGKILL)  # anything of the group still there (workers)
    except ProcessLookupError:
        pass
    os.remove(os.path.join(directory, "server.json"))
    print(f"remote_cache: stopped pid {st['pid']}")
    return 0


def main(argv=None) -> int:
    """The command line (module doc); returns the exit code."""
    ap = argparse.ArgumentParser(prog="tools/remote_cache.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=("start", "stop", "status", "address"))
    ap.add_argument("--dir", default=os.environ.get("MESHTEST_REMOTE_CACHE_DIR", DEFAULT_DIR))
    ap.add_argument("--port", type=int, default=0, help="TCP port (default: a free one)")
    ap.add_argument("--host", default="",
                    help="start: the address to bind (default 127.0.0.1; 0.0.0.0 for a fleet); address: the host "
                         "name other machines reach it by")
    ap.add_argument("--python", default="", help="CPython >= 3.12 for BuildGrid's venv")
    ap.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the server to answer")
    args = ap.parse_args(argv)
    if args.command == "start":
        return start(args.dir, args.port, args.python, args.wait, args.host or "127.0.0.1")
    if args.command == "stop":
        return stop(args.dir)
    st = _state(os.path.abspath(args.dir))
    if args.command == "address":
        if not st or not _alive(st["pid"]):
            print("remote_cache: not running", file=sys.stderr)
            return 1
        host = args.host or st.get("host", "127.0.0.1")
        print(f"grpc://{'127.0.0.1' if host == '0.0.0.0' else host}:{st['port']}")
        return 0
    ok = bool(st) and _alive(st["pid"]) and answers(os.path.abspath(args.dir))
    print(f"remote_cache: {'serving' if ok else 'not serving'}" + (f" on port {st['port']}" if st else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
