"""Local server processes of the dev stack: start detached, wait until ready, stop for sure."""

from __future__ import annotations

import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

# Listening ports come from below Linux's ephemeral range (32768-60999). A port the kernel picks
# from that range can be taken, before our server binds it, as the local end of some client's
# outgoing connection (a CI run lost the operator's metrics port that way).
_LISTEN_PORTS = range(20000, 32768)
_handed_out: set[int] = set()


def _listen_ports() -> range:
    """This process's share of the range: each of the test suite's parallel workers (pytest-xdist
    names them gw0, gw1, ...) takes its own slice, so two of them never probe the same port."""
    worker, count = (
        os.environ.get("PYTEST_XDIST_WORKER"),
        os.environ.get("PYTEST_XDIST_WORKER_COUNT"),
    )
    if not worker or not count:
        return _LISTEN_PORTS
    size = len(_LISTEN_PORTS) // int(count)
    start = _LISTEN_PORTS.start + int(worker.removeprefix("gw")) * size
    return range(start, start + size)


def free_port() -> int:
    """A loopback port that is free now, never handed out before by this process."""
    ports = _listen_ports()
    while True:
        port = random.choice(ports)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


def answers(url: str) -> bool:
    """Whether an HTTP endpoint (a health or readiness check) answers with success now."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def metric_samples(url: str, name: str, **labels: str) -> list[float] | None:
    """The values of the samples of metric `name` whose labels include `labels`, scraped from a
    Prometheus endpoint; None when it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    return [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    ]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_pid(pid: int, timeout: float = 20.0) -> None:
    """SIGTERM the process group led by `pid`, then SIGKILL it if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                # Reap it if it is our child, so it does not linger as a zombie.
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            except ChildProcessError:
                if not pid_alive(pid):
                    return
            time.sleep(0.1)


@dataclass
class ServerProcess:
    """One detached server process with its log file."""

    name: str
    command: list[str]
    log: Path
    env: dict[str, str] | None = None
    pid: int | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            # A new session, so `dev down` can stop it (and its children) after we exit.
            process = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        self.pid = process.pid

    def wait_until(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.pid is not None and not pid_alive(self.pid):
                raise RuntimeError(f"{self.name} exited during start-up:\n{self.log_tail()}")
            if ready():
                return
            time.sleep(0.25)
        raise TimeoutError(f"{self.name} not {what} after {timeout:.0f}s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.pid is not None:
            stop_pid(self.pid)
            self.pid = None

    def log_tail(self, lines: int = 30) -> str:
        if not self.log.exists():
            return "(no log)"
        return "".join(self.log.read_text(errors="replace").splitlines(keepends=True)[-lines:])


class ChildProcess:
    """A child process of ours (the operator, a worker) with its output in a log file."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def spawn(
        self, command: list[str], env: dict[str, str] | None = None, cores: bool = False
    ) -> None:
        """Start `command`; with `cores`, in the log's directory, where a native crash then
        leaves its core dump (`native_stacks`): `faulthandler` printed nothing for an operator's
        segfault (a thread whose stack ran out has no alternate signal stack for its handler)."""
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.log_path.parent if cores else None,
            )
        if cores:
            _, hard = resource.getrlimit(resource.RLIMIT_CORE)
            resource.prlimit(self.process.pid, resource.RLIMIT_CORE, (hard, hard))

    def native_stacks(self, limit: int = 12_000) -> str:
        """After a death by a signal, every thread's native stack from the core it left in its
        directory (with the kernel's `core_pattern` of `core`), read by gdb; else ""."""
        code = None if self.process is None else self.process.poll()
        core = self.log_path.parent / "core"
        if code is None or code >= 0 or not core.exists() or shutil.which("gdb") is None:
            return ""
        # The crashed thread's whole stack first, then a dozen frames of every thread's.
        commands = ["-ex", "bt", "-ex", "thread apply all bt 12"]
        batch = ["gdb", "-batch", *commands, sys.executable, str(core)]
        try:
            done = subprocess.run(batch, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return f"(gdb took over 120 s on {core})"
        lines = [line for line in done.stdout.splitlines() if not line.startswith("[New LWP")]
        return f"native stacks ({core}):\n" + "\n".join(lines)[:limit]

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, and the exit code once it has finished."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
