"""redis-cli and redis-benchmark against `sepkv serve`, for every preset:
a scripted redis-cli session (replies compared with the expected text),
a `redis-cli --pipe` mass insertion, a short redis-benchmark run of
PING_INLINE, PING_MBULK, SET, GET, INCR and MSET, and an inline PING on a
raw socket.

Environment: SEPKV_TOOLS_REQUESTS (redis-benchmark -n, default 5000),
SEPKV_BIN.
"""

import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402

SCRIPT = b"""PING
SET greeting "hello world"
GET greeting
APPEND greeting "!"
STRLEN greeting
INCR counter
INCRBY counter 41
SET temp x EX 100
TTL temp
EXISTS greeting counter nosuch
DEL temp
TYPE greeting
GET nosuch
DBSIZE
"""

EXPECTED = """PONG
OK
hello world
12
12
1
42
OK
100
2
1
string

2
"""


def cli(cli_path, port, *args, stdin=None):
    return subprocess.run([cli_path, "-h", "127.0.0.1", "-p", str(port), *args], input=stdin,
                          capture_output=True, timeout=120)


def main():
    cli_path = common.need("redis-cli")
    bench = common.need("redis-benchmark")
    n = os.environ.get("SEPKV_TOOLS_REQUESTS", "5000")
    failures = 0
    for preset in common.PRESETS:
        srv = common.start_sepkv(preset)
        try:
            out = cli(cli_path, srv.port, stdin=SCRIPT)
            if out.returncode != 0 or out.stdout.decode() != EXPECTED:
                failures += 1
                print(f"{preset}: redis-cli script: rc {out.returncode}\n{out.stdout.decode()}{out.stderr.decode()}")
            mass = b"".join(b"SET mass:%d %d\r\n" % (i, i * i) for i in range(2000))
            out = cli(cli_path, srv.port, "--pipe", stdin=mass)
            if out.returncode != 0 or b"errors: 0, replies: 2000" not in out.stdout:
                failures += 1
                print(f"{preset}: redis-cli --pipe: {out.stdout.decode()} {out.stderr.decode()}")
            out = cli(cli_path, srv.port, "GET", "mass:1999")
            if out.stdout.strip() != str(1999 * 1999).encode():
                failures += 1
                print(f"{preset}: after --pipe GET mass:1999 = {out.stdout!r}")
            out = subprocess.run([bench, "-h", "127.0.0.1", "-p", str(srv.port), "-t",
                                  "ping_inline,ping_mbulk,set,get,incr,mset", "-n", n, "-c", "10",
                                  "-d", "1000", "-q"], capture_output=True, timeout=300)
            lines = [x for x in out.stdout.decode().replace("\r", "\n").split("\n") if "requests per second" in x]
            if out.returncode != 0 or len(lines) != 6:
                failures += 1
                print(f"{preset}: redis-benchmark rc {out.returncode}: {out.stdout.decode()} {out.stderr.decode()}")
            else:
                print(f"  {preset}: " + "; ".join(x.strip() for x in lines))
            with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64) != b"+PONG\r\n":
                    failures += 1
                    print(f"{preset}: inline PING")
        finally:
            rc = srv.stop()
            if rc != 0:
                failures += 1
                print(f"{preset}: exit {rc} on SIGTERM")
    if failures:
        sys.exit(f"FAIL: {failures} tool checks")
    print("tools: OK")


if __name__ == "__main__":
    main()
