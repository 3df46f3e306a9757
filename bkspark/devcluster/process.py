"""Child processes for local clusters and the test harness: own process group, logs on disk, never leaked."""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from bkspark.devcluster.ports import port_is_open

from bkspark.errors import LocalClusterError

__all__ = ["LocalClusterError", "ManagedProcess", "kill_all", "live_processes", "tail"]


_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    """libc's prctl(2), or None where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl: Callable[..., int] = libc.prctl
        return prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl() if os.uname().sysname == "Linux" else None


def _die_with_parent() -> None:
    """In the child, before exec: get SIGKILL when the parent dies, even by SIGKILL (Linux)."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


_registry_lock = threading.Lock()
_registry: dict[int, "ManagedProcess"] = {}


def tail(path: Path, lines: int = 60, since: int = 0) -> str:
    """Last `lines` lines of a text file, from byte `since` on ('' when it does not exist)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(since, size - 64 * 1024))
            data = fh.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


class ManagedProcess:
    """One command run in its own process group, with stdout/stderr in files under `log_dir`.

    Every started process is tracked until it has exited; `kill_all()` (run at interpreter
    exit and at the end of the pytest session) SIGKILLs whatever is still alive. On Linux a process started from
    the main thread also gets SIGKILL when its parent dies however it dies (PR_SET_PDEATHSIG; not from other
    threads, whose exit would trigger it).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        extra_logs: Sequence[str | os.PathLike[str]] = (),
        die_with_parent: bool = True,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.cwd = None if cwd is None else str(cwd)
        self.env = dict(env) if env is not None else None
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix=f"bkspark-{name}-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.stdout_path = self.log_dir / f"{name}.stdout.log"
        self.stderr_path = self.log_dir / f"{name}.stderr.log"
        self.extra_logs = [Path(p) for p in extra_logs]
        self.die_with_parent = die_with_parent
        self._popen: subprocess.Popen[bytes] | None = None
        self._log_offsets: dict[Path, int] = {}  # where the last start's output begins in each (appended) log

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> "ManagedProcess":
        """Start the command (appending to its log files); error if it already runs."""
        if self.is_alive:
            raise LocalClusterError(f"{self.name} is already running (pid {self.pid})")
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            self._log_offsets = {self.stdout_path: out.tell(), self.stderr_path: err.tell()}
            try:
                popen = subprocess.Popen(
                    self.argv,
                    cwd=self.cwd,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    preexec_fn=(
                        _die_with_parent
                        if self.die_with_parent and threading.current_thread() is threading.main_thread()
                        else None
                    ),
                )
            except OSError as exc:
                raise LocalClusterError(f"cannot start {self.name}: {exc} (command: {' '.join(self.argv)})") from exc
        self._popen = popen
        with _registry_lock:
            _registry[popen.pid] = self
        return self

    @property
    def pid(self) -> int | None:
        """Process id of the last start (None before the first)."""
        return None if self._popen is None else self._popen.pid

    @property
    def returncode(self) -> int | None:
        """Exit status once the process has exited, else None."""
        return None if self._popen is None else self._popen.poll()

    @property
    def is_alive(self) -> bool:
        """True while the process runs."""
        if self._popen is None:
            return False
        alive = self._popen.poll() is None
        if not alive:
            self._forget()
        return alive

    def terminate(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after `timeout` seconds; return the exit status."""
        if self._popen is None:
            return None
        if self._popen.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self._popen.wait(10)
        self._signal_group(signal.SIGKILL)  # stray children left in the group
        self._forget()
        return self._popen.returncode

    def kill(self) -> int | None:
        """SIGKILL the process group at once (a crash); return the exit status."""
        if self._popen is None:
            return None
        self._signal_group(signal.SIGKILL)
        self._popen.wait(10)
        self._forget()
        return self._popen.returncode

    def release(self) -> None:
        """Let the process outlive this one (``bkspark cluster start``): stop tracking it for kill_all."""
        self._forget()

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self._popen is not None
        try:
            os.killpg(self._popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _forget(self) -> None:
        if self._popen is not None:
            with _registry_lock:
                if _registry.get(self._popen.pid) is self:
                    del _registry[self._popen.pid]

    # -- waiting ----------------------------------------------------------------------------
    def wait_until(
        self, predicate: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.1
    ) -> None:
        """Poll `predicate` until true; raise LocalClusterError with the log tail on timeout or exit."""
        deadline = time.monotonic() + timeout
        while True:
            if predicate():
                return
            if not self.is_alive:
                raise self.failure(f"{self.name} exited with status {self.returncode} before {what}")
            if time.monotonic() >= deadline:
                raise self.failure(f"{self.name}: timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(interval)

    def wait_for_port(self, port: int, host: str = "127.0.0.1", timeout: float = 60.0) -> None:
        """Wait until host:port accepts TCP connections."""
        self.wait_until(lambda: port_is_open(port, host), timeout=timeout, what=f"{host}:{port} to accept connections")

    def wait_exit(self, timeout: float) -> int:
        """Wait for the process to exit by itself; return its status."""
        if self._popen is None:
            raise LocalClusterError(f"{self.name} was never started")
        try:
            code = self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise self.failure(f"{self.name} did not exit within {timeout:.0f}s") from None
        self._forget()
        return code

    # -- diagnostics ------------------------------------------------------------------------
    def log_tail(self, lines: int = 60) -> str:
        """The ends of stdout, stderr and the extra log files, labelled."""
        parts = []
        for path in (self.stdout_path, self.stderr_path, *self.extra_logs):
            text = tail(path, lines)
            if text:
                parts.append(f"--- {path} (last {lines} lines) ---\n{text}")
        return "\n".join(parts) if parts else f"(no output in {self.log_dir})"

    def last_words(self, limit: int = 400) -> str:
        """The line of its output that best says why it stopped: the last one naming an error, else the last one."""
        for path in (self.stderr_path, self.stdout_path):
            lines = [line.strip() for line in tail(path, 200, since=self._log_offsets.get(path, 0)).splitlines()]
            lines = [line for line in lines if line]
            if lines:
                named = [line for line in lines if "error" in line.lower() or "exception" in line.lower()]
                line = (named or lines)[-1]
                return line if len(line) <= limit else line[: limit - 3] + "..."
        return ""

    def brief_failure(self, message: str) -> LocalClusterError:
        """A one-line LocalClusterError: `message`, the process's last words and the path of its log."""
        words = self.last_words()
        return LocalClusterError(f"{message}{': ' + words if words else ''} (log: {self.stderr_path})")

    def failure(self, message: str) -> LocalClusterError:
        """A LocalClusterError carrying `message`, the command and the log tails."""
        return LocalClusterError(f"{message}\ncommand: {' '.join(self.argv)}\nlogs: {self.log_dir}\n{self.log_tail()}")

    def __repr__(self) -> str:
        state = "alive" if self.is_alive else f"exited={self.returncode}"
        return f"<ManagedProcess {self.name} pid={self.pid} {state}>"


def live_processes() -> list[ManagedProcess]:
    """Every started ManagedProcess that has not been seen to exit."""
    with _registry_lock:
        procs = list(_registry.values())
    return [p for p in procs if p.is_alive]


def kill_all() -> list[ManagedProcess]:
    """SIGKILL every process still running; return the ones that were."""
    killed = live_processes()
    for proc in killed:
        proc.kill()
    return killed


atexit.register(kill_all)
