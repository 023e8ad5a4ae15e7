"""The heartbeat daemon: scan inboxes, accept commands, run them when ready, one per agent.

File events only wake the loop; a full rescan every `heartbeat_seconds` is the source of truth.
All scheduling state lives in the main thread; workers report back through a queue.
"""

from __future__ import annotations

import logging
import os
import queue
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agenttalk import fsio
from agenttalk.auth_blocks import AuthBlocks
from agenttalk.discussion.host import SessionHost
from agenttalk.diskspace import DiskGuard, is_disk_full
from agenttalk.errors import ConfigError, InputFileError, ServiceAuthError
from agenttalk.eventlog import EventLog
from agenttalk.executor import Executor, Job, Report
from agenttalk.inputs import check_inputs
from agenttalk.intake import Accepted, ignorable, is_candidate, quarantine, read_command
from agenttalk.llm.registry import Providers
from agenttalk.llm.selection import default_service, select_service
from agenttalk.models import AgentProfile
from agenttalk.pending import Pending
from agenttalk.recovery import clear_stale_bookkeeping
from agenttalk.slots import Slot, inbox_unchanged
from agenttalk.society import USER_AGENT, AgentDir, CommandKey, Society
from agenttalk.watcher import InboxWatcher

log = logging.getLogger(__name__)

RELOOK_SECONDS = 0.02


class _Leftover(Exception):
    """A command file that is already archived under another name (same inode)."""


def _duplicate(file: str, key: CommandKey, pending_as: str) -> InputFileError:
    return InputFileError(
        file,
        "command_id",
        f"command {key} is already pending as {pending_as}",
        "give the command a new command_id, or remove one of the two files",
    )


class Daemon:
    def __init__(
        self,
        society: Society,
        providers: Providers | None = None,
        service_override: str | None = None,
    ) -> None:
        self.society = society
        self.config = society.config
        self.providers = providers or Providers(society.config, society.root)
        self.durable = self.config.durability == "safe"
        self.eventlog = EventLog(society.root, durable=self.durable)
        self.executor = Executor(society, self.providers, service_override, eventlog=self.eventlog)
        self.slots: dict[str, Slot] = {}
        self.running = 0
        self._wake = threading.Event()
        self._dirty: set[str] = set()
        self._dirty_lock = threading.Lock()
        self._done: queue.SimpleQueue[tuple[str, str, Report | None, ServiceAuthError | None]] = (
            queue.SimpleQueue()
        )
        self._seq = 0
        self.max_running = 2 * self.config.max_concurrency
        """Commands in progress at once. LLM calls are capped at max_concurrency by the executor;
        the extra room lets one command's file work overlap the others' LLM calls."""
        self.blocked = AuthBlocks(society.root, self.config.heartbeat_seconds, durable=self.durable)
        self.disk = DiskGuard(society.root, self.config.min_free_bytes, self.config.settle_seconds)
        self._stop = threading.Event()
        self._starved: set[str] = set()
        """Agents with work that found every worker busy; looked at when one frees up."""
        self._ready: set[str] = set()
        """Agents whose next command may start (a worker finished); no rescan needed."""
        self.sessions = SessionHost(
            society,
            self.eventlog,
            self.providers,
            self.executor.ledger,
            self.notify,
            durable=self.durable,
        )
        self.pool: ThreadPoolExecutor | None = None
        self.watcher: InboxWatcher | None = None
        self._ready_logged = False
        self._preloaded: dict[str, tuple[tuple[int, int], AgentProfile]] = {}
        """Profiles `prepare` loaded, by agent, with their (size, mtime_ns) then."""

    # -- public --------------------------------------------------------------------------------

    def run(self, *, until_idle: bool = False, watch: bool = True) -> None:
        self.society.agents_dir.mkdir(parents=True, exist_ok=True)
        fsio.sweep_temporaries(self.society.agents_dir)
        self.pool = ThreadPoolExecutor(self.max_running, thread_name_prefix="agent")
        if watch:
            self.watcher = InboxWatcher(self.society.agents_dir, self.notify)
            self.watcher.start()
        try:
            self._loop(until_idle)
        finally:
            self.sessions.stop()
            if self.watcher:
                self.watcher.stop()
            self.pool.shutdown(wait=True)
            self._drain()

    def prepare(self) -> None:
        """Build the provider of every service the agents will use; raises ConfigError early."""
        names = {self.executor.service_override} if self.executor.service_override else set()
        if not names:
            names.add(default_service(self.config))
            for agent_id in self.society.agent_ids():
                try:
                    st = self.society.agent(agent_id).profile_path.stat()
                    profile = self.society.load_profile(agent_id)
                    # kept for the first scan: loading 10,000 profiles twice costs a second
                    self._preloaded[agent_id] = ((st.st_size, st.st_mtime_ns), profile)
                    names.add(select_service(self.config, profile))
                except (OSError, ConfigError):
                    continue  # reported when the agent is scanned; its commands wait
        for name in sorted(names):
            self.providers.get(name)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def notify(self, agent_id: str) -> None:
        """Something changed for `agent_id`: look at it now (thread-safe)."""
        with self._dirty_lock:
            self._dirty.add(agent_id)
        self._wake.set()

    # -- loop ----------------------------------------------------------------------------------

    def _loop(self, until_idle: bool) -> None:
        next_full = 0.0
        while not self._stop.is_set():
            now = time.time()
            self._drain()
            with self._dirty_lock:
                dirty, self._dirty = self._dirty, set()
            evented = dirty - self._ready
            full = now >= next_full
            if full:
                dirty |= set(self.society.folder_names())
                next_full = now + self.config.heartbeat_seconds
            dirty |= {
                a for a, s in self.slots.items() if s.wake_at is not None and s.wake_at <= now
            }
            for agent_id in sorted(dirty):
                try:
                    self._scan(agent_id, now)
                except OSError as exc:  # e.g. a full disk: that agent waits for the heartbeat
                    log.error("%s: cannot read or sort its inbox: %s", agent_id, exc)
                self._dispatch([agent_id], now)  # start work before reading the next inbox
            if full:
                self._log_rescan(len(dirty), time.time() - now)
            ready, self._ready = self._ready - dirty, set()
            self._dispatch(sorted(ready), now)
            for agent_id in evented & self.slots.keys():
                # The watchdog fallback may hold a rename's event back (up to 0.5 s, to pair
                # moves); the event of the temporary file before it woke us: look again shortly.
                self._wake_slot(self.slots[agent_id], now + RELOOK_SECONDS)
            waits = [s.wake_at for s in self.slots.values() if s.wake_at is not None]
            if until_idle and self.running == 0 and not self._has_work(now):
                return
            deadline = min([next_full, *waits])
            self._wake.wait(
                timeout=max(0.0, min(deadline - time.time(), 1.0 if until_idle else 3600))
            )
            self._wake.clear()

    def _log_rescan(self, agents: int, seconds: float) -> None:
        if not self._ready_logged:
            self._ready_logged = True
            log.info("ready: %d agents scanned in %.3f s", agents, seconds)
        else:
            log.debug("full rescan of %d agents took %.3f s", agents, seconds)

    def _has_work(self, now: float) -> bool:
        """Something will become runnable without new files (settling files, internal retries)."""
        with self._dirty_lock:
            if self._dirty or self._ready:
                return True
        if self.sessions.busy:
            return True
        for slot in self.slots.values():
            if slot.running is not None:
                return True
            if slot.wake_at is not None and slot.wake_at - now < self.config.settle_seconds + 0.5:
                return True
        return False

    def _drain(self) -> None:
        while True:
            try:
                agent_id, name, report, auth_error = self._done.get_nowait()
            except queue.Empty:
                return
            self.running -= 1
            self._ready |= self._starved
            self._starved.clear()
            slot = self.slots[agent_id]
            slot.running = None
            if auth_error is not None:
                self.blocked.block(auth_error, time.time())
            elif report is None:
                pending = slot.pending.get(name)
                if pending:
                    pending.not_before = time.time() + self.config.heartbeat_seconds
            else:
                if slot.service is not None and slot.service in self.blocked and report.called_llm:
                    self.blocked.unblock(slot.service)
                    for other_id, other in self.slots.items():
                        if other.service == slot.service:
                            self.notify(other_id)
                slot.pending.pop(name, None)
                for target in report.touched:
                    self.notify(target)
            self._ready.add(agent_id)  # its next command may start; no need to rescan its inbox

    # -- scanning ------------------------------------------------------------------------------

    def _slot(self, agent_id: str) -> Slot:
        slot = self.slots.get(agent_id)
        if slot is None:
            agent = self.society.agent(agent_id)
            agent.inbox.mkdir(parents=True, exist_ok=True)
            agent.outbox.mkdir(parents=True, exist_ok=True)
            slot = self.slots[agent_id] = Slot(agent)
            clear_stale_bookkeeping(agent)
            if self.watcher:
                self.watcher.watch_agent(agent_id)
        return slot

    def _scan(self, agent_id: str, now: float) -> None:
        if agent_id == USER_AGENT:
            return
        slot = self.slots.get(agent_id)
        profile = slot.profile_file if slot else str(self.society.agent(agent_id).profile_path)
        try:
            st = os.stat(profile)
        except OSError:
            return  # not an agent (yet, or any more), or a folder we may not look into
        if not stat.S_ISREG(st.st_mode):
            return
        slot = slot or self._slot(agent_id)
        self._load_profile(slot, st)
        if slot.profile is not None and slot.profile.kind == "event_log":
            slot.wake_at = None  # set again below while files are settling
            self._ingest_events(slot, now)
            return
        if slot.profile is not None and slot.profile.kind == "moderator":
            slot.wake_at = self.sessions.scan(slot.agent, now)
            return
        if inbox_unchanged(slot, now):
            return
        seen: set[str] = set()
        new: list[tuple[int, str, str]] = []
        slot.wake_at = None
        try:
            entries = list(os.scandir(slot.inbox_dir))
        except FileNotFoundError:
            return
        for entry in entries:
            name = entry.name
            if ignorable(name) or not is_candidate(name):
                continue
            if entry.is_dir(follow_symlinks=False):
                continue  # a plan's folder: plan ids may look like command file names
            seen.add(name)
            if name == slot.running:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            known = slot.pending.get(name)
            if known is not None and known.accepted.signature == (st.st_size, st.st_mtime_ns):
                continue
            new.append((st.st_ctime_ns, name, entry.path))
        for _ctime, _name, path in sorted(new):
            self._intake(slot, path, now)
        for name in list(slot.pending):
            if name not in seen and name != slot.running:
                del slot.pending[name]

    def _intake(self, slot: Slot, path_str: str, now: float) -> None:
        path = Path(path_str)
        agent = slot.agent
        slot.pending.pop(path.name, None)
        try:
            accepted = read_command(
                agent,
                path,
                max_bytes=self.config.max_file_bytes,
                settle=self.config.settle_seconds,
                now=now,
            )
            if accepted is None:
                self._wake_slot(slot, now + self.config.settle_seconds)
                return
            self._check_unique(slot, accepted)
        except InputFileError as exc:
            quarantine(agent, path, exc, durable=self.durable)
            return
        except _Leftover:
            path.unlink(missing_ok=True)  # finish the interrupted archive move
            log.info("%s: removed %s, already archived", agent.agent_id, path.name)
            return
        except FileNotFoundError:
            return
        self._seq += 1
        slot.pending[path.name] = Pending(accepted, min(accepted.arrived_at, now), self._seq)

    @staticmethod
    def _leftover(agent: AgentDir, status: str, key: CommandKey, accepted: Accepted) -> bool:
        """The command file is the archived one itself: a crash came between link and unlink."""
        try:
            return os.path.samefile(agent.finished_path(status, key), accepted.path)
        except OSError:
            return False

    def _check_unique(self, slot: Slot, accepted: Accepted) -> None:
        command = accepted.command
        key = CommandKey(command.plan_id, command.command_id)
        finished = slot.agent.finished_status(key)
        if finished is not None and self._leftover(slot.agent, finished, key, accepted):
            raise _Leftover
        if finished is not None:
            raise InputFileError(
                accepted.path.name,
                "command_id",
                f"command {key} has already run ({finished}); it is never run twice",
                "give the command a new command_id to run it again",
            )
        name = slot.pending.name_of(key)
        if name is not None and name != accepted.path.name:
            other = slot.pending[name]
            mine, theirs = (accepted.arrived_at, accepted.path.name), (other.arrived_at, name)
            if name != slot.running and mine < theirs:
                # After a restart the later copy may be scanned first: the file that arrived
                # first (by its ctime) stays pending, the copy goes.
                del slot.pending[name]
                error = _duplicate(name, key, accepted.path.name)
                quarantine(slot.agent, other.accepted.path, error, durable=self.durable)
                return
            raise _duplicate(accepted.path.name, key, name)

    def _load_profile(self, slot: Slot, st: os.stat_result) -> None:
        sig = (st.st_size, st.st_mtime_ns)
        if sig == slot.profile_sig:
            return
        slot.profile_sig = sig
        preloaded = self._preloaded.pop(slot.agent.agent_id, None)
        try:
            if preloaded is not None and preloaded[0] == sig:
                profile = preloaded[1]
            else:
                profile = self.society.load_profile(slot.agent.agent_id)
            slot.service = self.executor.service_for(profile) if profile.kind == "llm" else None
            slot.profile, slot.profile_error = profile, None
        except ConfigError as exc:
            slot.profile, slot.profile_error, slot.service = None, str(exc), None
            log.error("%s; its commands wait until the profile is fixed", exc)

    def _ingest_events(self, slot: Slot, now: float) -> None:
        """The event log agent runs no commands: files in its inbox are events to append."""
        try:
            self.eventlog.ingest(
                slot.agent.inbox,
                settle_seconds=self.config.settle_seconds,
                max_file_bytes=self.config.max_file_bytes,
            )
        except OSError as exc:
            log.error("event log: cannot ingest %s: %s", slot.agent.inbox, exc)
        if any(not ignorable(e.name) for e in os.scandir(slot.agent.inbox) if e.is_file()):
            self._wake_slot(slot, now + self.config.settle_seconds)  # files still settling

    @staticmethod
    def _wake_slot(slot: Slot, at: float) -> None:
        slot.wake_at = at if slot.wake_at is None else min(slot.wake_at, at)

    # -- dispatch ------------------------------------------------------------------------------

    def _dispatch(self, agent_ids: list[str], now: float) -> None:
        for agent_id in agent_ids:
            slot = self.slots.get(agent_id)
            if slot is None or slot.running is not None or slot.profile is None:
                continue
            if self.running >= self.max_running:
                if slot.pending:
                    self._starved.add(agent_id)
                continue
            self._start_next(slot, now)

    def _start_next(self, slot: Slot, now: float) -> None:
        if slot.pending and (look_again := self.disk.may_start(now)) is not None:
            self._wake_slot(slot, look_again)
            return
        for name, pending in slot.pending.items():  # in seq order; the loop changes nothing
            if pending.not_before > now:
                self._wake_slot(slot, pending.not_before)
                continue
            command = pending.accepted.command
            check = check_inputs(slot.agent, command, settle=self.config.settle_seconds, now=now)
            for path, problem in check.rejected:
                quarantine(slot.agent, path, problem, durable=self.durable)
            if check.complete or not command.wait_for_inputs:
                look_again = self.blocked.may_send(slot.service, now)
                if look_again is not None:
                    self._wake_slot(slot, look_again)
                    continue
                self._submit(slot, name, pending, None)
                return
            timeout = command.timeout or self.config.default_timeout
            if now - pending.arrived_at >= timeout:
                error = f"timed out after {timeout:g}s waiting for inputs: missing " + ", ".join(
                    check.missing
                )
                self._submit(slot, name, pending, error)
                return
            self._wake_slot(slot, pending.arrived_at + timeout)
            if check.recheck_at is not None:
                self._wake_slot(slot, check.recheck_at)

    def _submit(self, slot: Slot, name: str, pending: Pending, error: str | None) -> None:
        assert self.pool is not None and slot.profile is not None
        job = Job(slot.agent, pending.accepted, pending.arrived_at)
        slot.running = name
        self.running += 1
        self.pool.submit(self._work, job, slot.profile, name, error)

    def _work(self, job: Job, profile: AgentProfile, name: str, error: str | None) -> None:
        report: Report | None = None
        auth_error: ServiceAuthError | None = None
        try:
            report = self.executor.fail(job, error) if error else self.executor.run(job, profile)
        except ServiceAuthError as exc:
            auth_error = exc
        except Exception as exc:
            if is_disk_full(exc):
                self.disk.hit(exc, time.time())
            else:
                log.exception("%s %s: internal error; retrying later", job.agent.agent_id, job.key)
        finally:
            self._done.put((job.agent.agent_id, name, report, auth_error))
            self._wake.set()
