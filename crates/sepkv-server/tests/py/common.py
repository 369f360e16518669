"""Starting and stopping servers for the sepkv-server Python suites.

Every server listens on 127.0.0.1 on a free port and is stopped by its
pid when the suite ends, failed or not.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PRESETS = ["leveldb", "wisckey", "hashkv", "ktstore", "flashkey", "lwc"]


def ci():
    return os.environ.get("CI") == "true"


def need(tool):
    """The path of `tool`, or fail (CI) / skip (otherwise) without it."""
    path = shutil.which(tool)
    if path is None:
        msg = f"{tool} not found"
        if ci():
            sys.exit(f"FAIL: {msg} (CI=true)")
        print(f"SKIP: {msg}")
        sys.exit(0)
    return path


_handed_out = set()


def free_port():
    """A loopback port free now and not handed out before in this process
    (the kernel may offer a port again once its probe socket is closed,
    and a test that draws several before starting its servers would then
    give two of them the same port)."""
    for _ in range(1000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no free loopback port not handed out already")


def wait_port(port, proc, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open")


def sepkv_binary():
    b = os.environ.get("SEPKV_BIN")
    if b:
        return b
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../../.."))
    for profile in ("release", "debug"):
        p = os.path.join(root, "target", profile, "sepkv")
        if os.path.exists(p):
            return p
    sys.exit("FAIL: no sepkv binary: build it (cargo build --release -p sepkv-cli) or set SEPKV_BIN")


def stop_process(proc, sig=signal.SIGTERM, grace=30.0):
    """Sends `sig` to a running process and waits `grace` seconds for it,
    then kills it; returns its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def stop_processes(procs):
    """`stop_process` for each of `procs` that is not None."""
    for p in procs:
        if p is not None:
            stop_process(p)


def start_cluster_node(db, port, conf, node_id, log_path):
    """Starts `sepkv serve` for one node of a cluster topology file on
    127.0.0.1:`port`, output appended to `log_path`; returns the process
    once the port accepts connections."""
    argv = [sepkv_binary(), "--db", db, "serve", "--port", str(port),
            "--cluster-config", conf, "--cluster-node-id", node_id]
    with open(log_path, "a") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    wait_port(port, proc)
    return proc


class Server:
    """A server process: `sepkv serve` or `redis-server`."""

    def __init__(self, argv, port, workdir=None):
        self.port = port
        self.workdir = workdir
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            wait_port(port, self.proc)
        except Exception:
            self.stop()
            raise

    def stop(self, sig=signal.SIGTERM):
        return stop_process(self.proc, sig)

    def kill9(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start_sepkv(preset, db_dir=None, extra=()):
    db_dir = db_dir or tempfile.mkdtemp(prefix="sepkv-serve-")
    port = free_port()
    argv = [sepkv_binary(), "--db", db_dir, "--preset", preset, "serve", "--port", str(port), *extra]
    s = Server(argv, port, workdir=db_dir)
    return s


def start_redis():
    exe = need("redis-server")
    port = free_port()
    d = tempfile.mkdtemp(prefix="redis-ref-")
    argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", d, "--daemonize", "no", "--protected-mode", "yes"]
    return Server(argv, port, workdir=d)


def wait_until(what, cond, timeout=30.0):
    """Polls `cond` every 100 ms until it returns a true value, which is
    returned; fails after `timeout` seconds naming `what`."""
    end = time.time() + timeout
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
