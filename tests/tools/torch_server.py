#!/usr/bin/env python3
"""One Python that has imported torch, forked for every PyTorch reference run of the tests.

`import torch` takes 2-5 s on a 2-core machine, and about twenty tests each run a reference
script (tests/tools/torch_llama.py, tests/kernels/adamw_reference.py) in a fresh interpreter.
This server imports torch once; for each request it forks, and the child runs the script as
`python3 SCRIPT ARGS...` would (`runpy`, `__name__ == "__main__"`) with the caller's stdout,
stderr and working directory, then sends back the exit code. The parent never runs a torch op,
so every child starts from the state a fresh `import torch` leaves.

    torch_server.py start SOCKET   start a server in the background (CTest fixture setup); it
                                   returns once SOCKET accepts. Without torch it starts nothing
                                   and exits 0: the tests then run the scripts themselves and
                                   report what is missing.
    torch_server.py stop SOCKET    stop it (CTest fixture cleanup); a server also stops by itself
                                   after IDLE_S seconds without a request.

Protocol (tests/tools/torch_reference.h is the client; a SOCK_SEQPACKET Unix socket, so a
message arrives whole): one message per connection, the NUL-
separated fields cwd, script, args..., with the caller's stdout and stderr descriptors attached
(SCM_RIGHTS); the answer is the exit code as ASCII digits. "stop" alone stops the server.
"""
import os
import runpy
import signal
import socket
import sys
import time

IDLE_S = 1800


def serve(path):
    import torch  # noqa: F401  (the point of the server: imported once, before any fork)

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener.bind(path)
    listener.listen(16)
    listener.settimeout(IDLE_S)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    while True:
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            break
        msg, fds, _, _ = socket.recv_fds(conn, 1 << 16, 2)
        if not msg:  # a readiness probe (start) or a client that went away
            conn.close()
            for fd in fds:
                os.close(fd)
            continue
        if msg == b"stop":
            conn.close()
            break
        if os.fork() == 0:
            listener.close()
            code = run_request(msg, fds)
            try:
                conn.sendall(str(code).encode())
            finally:
                os._exit(0)
        conn.close()
        for fd in fds:
            os.close(fd)
    listener.close()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def run_request(msg, fds):
    """In the forked child: the script as `python3 SCRIPT ARGS...`; its exit code."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    fields = msg.decode().split("\0")
    cwd, script, args = fields[0], fields[1], fields[2:]
    if len(fds) == 2:
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
    os.chdir(cwd)
    sys.argv = [script] + args
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001  (reported like an uncaught exception would be)
        import traceback
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def start(path):
    try:
        import importlib.util
        if importlib.util.find_spec("torch") is None:
            print("torch server: no torch here; the reference tests run their scripts themselves")
            return 0
    except Exception:  # noqa: BLE001
        return 0
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            try:
                serve(path)
            finally:
                os._exit(0)
        os._exit(0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
                s.connect(path)
            print(f"torch server: listening on {path}")
            return 0
        except OSError:
            time.sleep(0.05)
    print(f"torch server: did not start within 60 s; the tests run their scripts themselves")
    return 0


def stop(path):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.connect(path)
            s.sendall(b"stop")
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("start", "stop"):
        sys.exit("usage: torch_server.py start|stop SOCKET")
    sys.exit(start(sys.argv[2]) if sys.argv[1] == "start" else stop(sys.argv[2]))
