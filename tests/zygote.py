"""Python children for the tests at a fork's price: a server that has imported the Agents SDK
once forks each ``python -m module ...`` / ``python script.py ...`` the tests start.

A new interpreter importing ``agents`` costs about 2 s of CPU; the suite starts ~100 of them (the
examples, the CLI in another process, MCP servers, recovery in another process). The tests start
``command(*args)`` instead of ``[sys.executable, *args]``: a small launcher (``python -I -S``,
standard library only, ~20 ms) hands its argv, environment, working directory and stdin, stdout
and stderr (the file descriptors themselves) to this test process's server, which forks a child
that runs the module or script as ``python`` would: ``__main__``, ``sys.argv``, ``sys.path[0]``,
fresh ``sys.std*`` on the received descriptors, ``atexit`` and interpreter shutdown at the end.
The launcher exits as the child did (its code, or killed by the same signal); a signal sent to the
launcher is passed to the child, and a launcher killed outright takes the child with it (SIGKILL).

What a child shares with the server is only what the server imported before forking
(:data:`PRELOAD`, third-party packages; this package and the tests' own modules are imported by
the child itself). When the child's environment differs from the server's in a variable read at
interpreter start-up or by those imports (:data:`STARTUP_VARIABLES`), or the arguments are not a
plain ``-m module`` / ``script.py``, the launcher executes the real interpreter instead.
Tests whose subject is how Python was started (``sys.modules`` of a fresh interpreter, a script
run directly, another virtual environment) use ``sys.executable`` itself.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

PRELOAD = ("agents", "agents.mcp", "mcp.server.mcpserver", "click", "rich.console")
"""Imported by the server before it forks; third-party only (nothing of this repository)."""

STARTUP_VARIABLES = ("PYTHON", "OPENAI_AGENTS_", "OPENAI_API_TYPE", "OPENAI_API_VERSION",
                     "AZURE_OPENAI", "COVERAGE_", "LANG", "LC_")
"""Prefixes of the environment variables read at start-up or when :data:`PRELOAD` is imported."""

HANDLED = ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE")
"""Start-up variables the child applies itself (stdio buffering, ``sys.dont_write_bytecode``)."""

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_VARIABLES) and k not in HANDLED}


def _send(conn: socket.socket, message: dict) -> None:
    data = json.dumps(message).encode()
    conn.sendall(struct.pack("!I", len(data)) + data)


def _receive(conn: socket.socket) -> dict | None:
    head = _exactly(conn, 4)
    if head is None:
        return None
    body = _exactly(conn, struct.unpack("!I", head)[0])
    return None if body is None else json.loads(body)


def _exactly(conn: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


# --- the test process's side ------------------------------------------------------------------
_server: object = None
_address: str | None = None


def command(*args: str) -> list[str]:
    """``[sys.executable, *args]`` for ``subprocess``, run through this test process's server
    (:func:`served`), or that list itself when ``SAGACITY_TEST_ZYGOTE=0`` (``tests/forked.py``)."""
    from tests.forked import zygote_enabled

    return served(*args) if zygote_enabled() else [sys.executable, *args]


def served(*args: str) -> list[str]:
    """The launcher's command line for ``python *args`` through this test process's server
    (started on first use, stopped when the process exits), whatever the switch says."""
    return [sys.executable, "-I", "-S", __file__, "run", _start(), *args]


def server_pid() -> int:
    """The process id of this test process's server (started if need be): the parent of each
    child it forks."""
    _start()
    return _server.pid  # type: ignore[attr-defined]


def _start() -> str:
    global _server, _address
    if _address is None:
        import atexit
        import subprocess
        import tempfile

        folder = tempfile.mkdtemp(prefix="sagacity-zygote-")
        address = os.path.join(folder, "socket")
        server = subprocess.Popen([sys.executable, __file__, "serve", address],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert server.stdout is not None and server.stdout.readline() == b"ready\n"
        atexit.register(_stop, server, folder)
        _server, _address = server, address
    return _address


def _stop(server, folder: str) -> None:  # type: ignore[no-untyped-def]
    import shutil

    server.stdin.close()  # the server's EOF: it kills what still runs and exits
    server.wait(30)
    shutil.rmtree(folder, ignore_errors=True)


# --- the launcher -----------------------------------------------------------------------------
def launch(address: str, args: list[str]) -> None:
    """Run ``python *args`` through the server at ``address``; exit as the child did."""
    real = [sys.executable, *args]
    plain = bool(args) and (args[0] == "-m" and len(args) > 1 or not args[0].startswith("-"))
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if not plain:
            raise OSError("not a plain module or script")
        conn.connect(address)
        fds = [fd if _is_open(fd) else os.open(os.devnull, os.O_RDWR) for fd in (0, 1, 2)]
        socket.send_fds(conn, [b"\0"], fds)
        _send(conn, {"args": args, "env": dict(os.environ), "cwd": os.getcwd()})
        answer = _receive(conn)
    except OSError:
        answer = None
    if answer is None or "pid" not in answer:
        conn.close()
        os.execv(sys.executable, real)  # the real interpreter (a difference, or no server)
    pid = answer["pid"]
    for signum in FORWARDED:
        signal.signal(signum, lambda s, _f: os.kill(pid, s))
    done = _receive(conn)
    status = done["status"] if done else -signal.SIGKILL
    if status >= 0:
        os._exit(status)
    if -status != signal.SIGKILL:
        signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
    os._exit(128 - status)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


# --- the server -------------------------------------------------------------------------------
def serve(address: str) -> None:
    """Preload, then fork a child per launcher connecting to ``address`` until stdin's EOF."""
    import importlib
    import selectors

    del sys.path[0]  # this file's folder: a child's first entry is the one python would set
    for name in PRELOAD:
        importlib.import_module(name)
    base_env = dict(os.environ)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
    children: dict[int, tuple[socket.socket, int]] = {}  # pid -> (launcher, pidfd)
    sys.stdout.write("ready\n")
    sys.stdout.flush()

    def owned() -> list:
        return [listener, selector, *[c for c, _ in children.values()]]

    while True:
        for key, _ in selector.select():
            if key.data == "stdin":
                if not os.read(sys.stdin.fileno(), 4096):
                    for pid in children:
                        _kill(pid)
                    return
            elif key.data == "accept":
                conn, _ = listener.accept()
                request = _request(conn)
                if request is None or _startup_env(request[1]["env"]) != _startup_env(base_env):
                    _close_all(request[0] if request else [])
                    _send(conn, {"exec": True})
                    conn.close()
                    continue
                fds, message = request
                pid = os.fork()
                if pid == 0:
                    for owned_object in owned():
                        owned_object.close()
                    for _, pidfd in children.values():
                        os.close(pidfd)
                    conn.close()
                    become(fds, message)  # never returns: SystemExit ends the interpreter
                _close_all(fds)
                pidfd = os.pidfd_open(pid)
                children[pid] = (conn, pidfd)
                selector.register(pidfd, selectors.EVENT_READ, ("exited", pid))
                selector.register(conn, selectors.EVENT_READ, ("launcher", pid))
                _send(conn, {"pid": pid})
            elif key.data[0] == "launcher":  # the launcher went away: so does its child
                selector.unregister(key.fileobj)
                _kill(key.data[1])
            else:
                pid = key.data[1]
                _, status = os.waitpid(pid, 0)
                conn, pidfd = children.pop(pid)
                selector.unregister(pidfd)
                os.close(pidfd)
                try:
                    selector.unregister(conn)
                except KeyError:
                    pass
                try:
                    _send(conn, {"status": os.waitstatus_to_exitcode(status)})
                except OSError:
                    pass
                conn.close()


def _request(conn: socket.socket) -> tuple[list[int], dict] | None:
    try:
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        message = _receive(conn)
    except OSError:
        return None
    if message is None or len(fds) != 3:
        _close_all(fds)
        return None
    return fds, message


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def become(fds: list[int], message: dict) -> None:
    """In the forked child: take the launcher's stdio, directory, environment and arguments, and
    run its module or script as ``__main__``. Ends by raising ``SystemExit`` (or the script's
    own exception), which unwinds to the top and ends the interpreter as ``python`` would."""
    import io
    import runpy

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(message["cwd"])
    env = message["env"]
    os.environ.clear()
    os.environ.update(env)
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    encoding, errors = sys.stdout.encoding, sys.stdout.errors

    def stream(fd: int, mode: str, line: bool, errors: str) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode[0], closefd=False)
        buffered = raw if unbuffered and mode == "w" else (
            io.BufferedWriter(raw) if mode == "w" else io.BufferedReader(raw))
        return io.TextIOWrapper(buffered, encoding=encoding, errors=errors, newline="\n",
                                line_buffering=line, write_through=unbuffered and mode == "w")

    sys.stdin = sys.__stdin__ = stream(0, "r", False, errors)
    sys.stdout = sys.__stdout__ = stream(1, "w", os.isatty(1), errors)
    sys.stderr = sys.__stderr__ = stream(2, "w", True, "backslashreplace")
    args = message["args"]
    if args[0] == "-m":
        sys.argv = ["-m", *args[2:]]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(args)
        sys.path.insert(0, os.path.dirname(os.path.realpath(args[0])))
        runpy.run_path(os.path.abspath(args[0]), run_name="__main__")
    raise SystemExit(0)


if __name__ == "__main__":
    if sys.argv[1] == "run":
        launch(sys.argv[2], sys.argv[3:])
    else:
        serve(sys.argv[2])
