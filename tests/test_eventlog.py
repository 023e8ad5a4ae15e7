"""The event log: appends, bounded reads, pruning to the archive, crashes, event files, CLI."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from agenttalk import jsonlines
from agenttalk.cli import app
from agenttalk.eventlog import (
    AgentVisibleEvent,
    Event,
    EventLog,
    EventType,
    PruneBeforeSequence,
    PruneByCount,
    PruneByType,
)
from agenttalk.models import AgentProfile

S = "s1"
T = EventType


def new_log(tmp_path: Path, **kw: Any) -> EventLog:
    return EventLog(tmp_path, durable=False, **kw)


def fill(log: EventLog, types: list[EventType], session: str = S) -> list[Event]:
    return [log.append_event(session, t, "alice", f"{t} {i}") for i, t in enumerate(types)]


def file_seqs(path: Path) -> list[int]:
    return [json.loads(line)["sequence"] for line in jsonlines.iter_forward(path)]


def log_seqs(log: EventLog, session: str = S) -> list[int]:
    return file_seqs(log.log_path(session))


def archive_seqs(log: EventLog, session: str = S) -> list[int]:
    return file_seqs(log.archive_path(session))


def assert_nothing_lost(log: EventLog, appended: list[int], session: str = S) -> None:
    """Every appended event is in the log or the archive exactly once; the log is ascending."""
    live = log_seqs(log, session)
    assert live == sorted(set(live))
    assert sorted(live + archive_seqs(log, session)) == sorted(appended)


# -- appending and reading ----------------------------------------------------------------------


def test_append_event_assigns_identity_time_and_the_next_sequence(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    a = log.append_event(S, "SPEECH", "alice", "hello", {"round": 2, "tone": "calm"})
    b = log.append_event(S, T.SYSTEM, "system", {"action": "PHASE_TRANSITION", "to": "x"})
    assert (a.sequence, b.sequence) == (1, 2)
    assert a.event_id != b.event_id and a.session_id == S and a.timestamp.endswith("Z")
    assert a.meta.round == 2 and a.meta.model_extra == {"tone": "calm"}
    lines = log.log_path(S).read_bytes().splitlines()
    assert [Event.model_validate_json(line) for line in lines] == [a, b]
    assert log.log_path(S) == tmp_path / "agents/event_log/outbox/s1.jsonl"
    assert log.sessions() == [S]


def test_the_log_agent_has_a_profile_of_kind_event_log(tmp_path: Path) -> None:
    new_log(tmp_path).append_event(S, T.SPEECH, "alice", "hi")
    folder = tmp_path / "agents" / "event_log"
    profile = AgentProfile.model_validate_json((folder / "agent_profile.json").read_text())
    assert profile.kind == "event_log" and profile.agent_id == "event_log"
    assert (folder / "inbox").is_dir()


@pytest.mark.parametrize(
    "args",
    [
        ("../x", T.SPEECH, "alice", "hi"),  # session id would escape the outbox
        ("x.archive", T.SPEECH, "alice", "hi"),  # would collide with session x's archive
        (S, "CHAT", "alice", "hi"),
        (S, T.SPEECH, "", "hi"),
        (S, T.SPEECH, "alice", 42),
    ],
)
def test_append_event_rejects_bad_fields(tmp_path: Path, args: tuple[Any, ...]) -> None:
    log = new_log(tmp_path)
    with pytest.raises(ValueError):
        log.append_event(*args)
    assert log.sessions() == []


def test_reads_return_the_right_slices_oldest_first(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    types = [T.INTENT, T.SPEECH, T.SUMMARY, T.SPEECH, T.VOTE, T.SPEECH, T.SUMMARY, T.SYSTEM]
    events = fill(log, types)
    seqs = [e.sequence for e in events]
    assert [e.sequence for e in log.get_recent_events(S, 3)] == seqs[-3:]
    assert [e.sequence for e in log.get_recent_events(S, 100)] == seqs
    assert [e.sequence for e in log.get_events_by_type(S, T.SPEECH, 2)] == [4, 6]
    assert [e.sequence for e in log.get_events_by_type(S, "SUMMARY", 10)] == [3, 7]
    assert log.get_events_by_type(S, T.VOTE, 5) == [events[4]]
    assert [e.sequence for e in log.get_events_after_sequence(S, 2, 3)] == [3, 4, 5]
    assert [e.sequence for e in log.get_events_after_sequence(S, 0, 2)] == [1, 2]
    assert log.get_events_after_sequence(S, 8, 10) == []
    assert [e.sequence for e in log.get_events_after_sequence(S, 1, 2, type=T.SPEECH)] == [2, 4]
    assert log.get_recent_events("nobody", 5) == []


def test_agent_visible_events_carry_four_fields_and_content_as_text(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.append_event(S, T.SYSTEM, "system", {"action": "PHASE_TRANSITION", "to": "讨论"})
    log.append_event(S, T.SPEECH, "agent-1", "我认为可行", {"round": 1})
    visible = log.get_agent_visible_events(S, 10)
    assert all(isinstance(v, AgentVisibleEvent) for v in visible)
    assert visible[0].content == '{"action":"PHASE_TRANSITION","to":"讨论"}'
    assert visible[1].model_dump().keys() == {"type", "speaker", "content", "timestamp"}
    assert (visible[1].speaker, visible[1].content) == ("agent-1", "我认为可行")


@pytest.mark.parametrize("limit", [0, 101, -1, True])
def test_every_read_rejects_a_limit_outside_1_to_100(tmp_path: Path, limit: int) -> None:
    log = new_log(tmp_path)
    fill(log, [T.SPEECH])
    with pytest.raises(ValueError, match="limit"):
        log.get_recent_events(S, limit)
    with pytest.raises(ValueError, match="limit"):
        log.get_events_by_type(S, T.SPEECH, limit)
    with pytest.raises(ValueError, match="limit"):
        log.get_events_after_sequence(S, 0, limit)
    with pytest.raises(ValueError, match="limit"):
        log.get_agent_visible_events(S, limit)


def test_reads_cross_block_boundaries(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    big = "x" * (jsonlines.BLOCK + 123)  # one line longer than a read block
    events = [log.append_event(S, T.SPEECH, "alice", big if i % 3 else str(i)) for i in range(9)]
    assert log.get_recent_events(S, 9) == events
    assert log.get_events_after_sequence(S, 4, 3) == events[4:7]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=0, max_size=40), st.integers(-1, 45))
def test_binary_search_after_a_sequence_matches_a_scan(lengths: list[int], after: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "f.jsonl"
        lines = [json.dumps({"sequence": i + 1, "pad": "p" * n}) for i, n in enumerate(lengths)]
        path.write_text("".join(line + "\n" for line in lines))
        found = [json.loads(x)["sequence"] for x in jsonlines.iter_after(path, seq_key, after)]
        assert found == list(range(max(after, 0) + 1, len(lengths) + 1))


def seq_key(line: bytes) -> int | None:
    return int(json.loads(line)["sequence"])


def test_reads_cost_the_same_on_a_large_log(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    first = log.append_event(S, T.SPEECH, "alice", "x")
    line = first.to_line().decode()
    body = "".join(line.replace('"sequence":1', f'"sequence":{i}') for i in range(2, 200_001))
    with log.log_path(S).open("a") as f:
        f.write(body)
    started = time.perf_counter()
    assert log.get_recent_events(S, 10)[-1].sequence == 200_000
    assert [e.sequence for e in log.get_events_after_sequence(S, 150_000, 2)] == [150_001, 150_002]
    assert log.get_events_by_type(S, T.SPEECH, 100)[0].sequence == 199_901
    assert time.perf_counter() - started < 0.5  # parsing the whole log takes several seconds


# -- pruning -----------------------------------------------------------------------------------


def test_prune_by_count_keeps_the_most_recent(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    fill(log, [T.SPEECH] * 10)
    assert log.prune_events(S, PruneByCount(keep=4)) == 6
    assert log_seqs(log) == [7, 8, 9, 10]
    assert archive_seqs(log) == [1, 2, 3, 4, 5, 6]
    assert log.prune_events(S, PruneByCount(keep=10)) == 0
    assert log.append_event(S, T.SPEECH, "bob", "next").sequence == 11
    assert log.prune_events("nobody", PruneByCount(keep=0)) == 0
    assert log.sessions() == [S]


def test_prune_by_type_drops_or_keeps_the_given_types(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    fill(log, [T.INTENT, T.SPEECH, T.SUMMARY, T.SYSTEM, T.SPEECH, T.INTENT])
    assert log.prune_events(S, PruneByType(drop_types=frozenset({T.INTENT}))) == 2
    assert log_seqs(log) == [2, 3, 4, 5]
    assert log.prune_events(S, PruneByType(keep_types=frozenset({T.SUMMARY, T.SYSTEM}))) == 2
    assert log_seqs(log) == [3, 4]
    assert sorted(archive_seqs(log)) == [1, 2, 5, 6]
    with pytest.raises(ValueError, match="exactly one"):
        PruneByType()


def test_prune_before_sequence(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    fill(log, [T.SPEECH] * 6)
    assert log.prune_events(S, PruneBeforeSequence(sequence=4)) == 3
    assert log_seqs(log) == [4, 5, 6]


@pytest.mark.parametrize(
    "strategy",
    [
        PruneByCount(keep=0),
        PruneByType(drop_types=frozenset({T.SPEECH})),
        PruneBeforeSequence(sequence=99),
    ],
    ids=["by_count", "by_type", "before_sequence"],
)
def test_sequences_are_never_reused_after_pruning_the_tail(tmp_path: Path, strategy: Any) -> None:
    log = new_log(tmp_path)
    fill(log, [T.SUMMARY, T.SPEECH, T.SPEECH])
    log.prune_events(S, strategy)
    assert 3 not in log_seqs(log)
    assert log.append_event(S, T.SPEECH, "bob", "a").sequence == 4
    # a new process learns the high-water mark from the files
    log.prune_events(S, PruneByCount(keep=0))
    assert new_log(tmp_path).append_event(S, T.SPEECH, "bob", "b").sequence == 5
    assert_nothing_lost(log, [1, 2, 3, 4, 5])


def test_auto_prune_past_500_keeps_summaries_and_the_recent_half_of_the_rest(
    tmp_path: Path,
) -> None:
    log = new_log(tmp_path)
    types = [T.SUMMARY if i % 10 == 0 else T.SPEECH for i in range(1, 502)]
    fill(log, types[:500])
    assert log_seqs(log) == list(range(1, 501))
    fill(log, types[500:])
    summaries = [i for i, t in enumerate(types, 1) if t == T.SUMMARY]
    others = [i for i, t in enumerate(types, 1) if t != T.SUMMARY]
    kept_others = others[len(others) - len(others) // 2 :]
    assert log_seqs(log) == sorted(summaries + kept_others)
    assert archive_seqs(log) == others[: len(others) - len(others) // 2]
    assert new_log(tmp_path).append_event(S, T.SPEECH, "bob", "a").sequence == 502
    assert_nothing_lost(log, list(range(1, 503)))


# -- crashes -----------------------------------------------------------------------------------


def test_a_torn_last_line_is_ignored_by_readers_and_cut_by_the_writer(tmp_path: Path) -> None:
    fill(new_log(tmp_path), [T.SPEECH] * 3)
    path = new_log(tmp_path).log_path(S)
    with path.open("ab") as f:
        f.write(b'{"event_id":"x","type":"SPE')  # the crash came mid-write
    reader = new_log(tmp_path)
    assert [e.sequence for e in reader.get_recent_events(S, 10)] == [1, 2, 3]
    assert [e.sequence for e in reader.get_events_after_sequence(S, 2, 10)] == [3]
    assert path.read_bytes().endswith(b"SPE")  # readers never write
    assert new_log(tmp_path).append_event(S, T.SPEECH, "bob", "after").sequence == 4
    assert [json.loads(line)["sequence"] for line in path.read_bytes().splitlines()] == [1, 2, 3, 4]


def test_a_log_holding_only_a_torn_line_starts_over_cleanly(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    log.log_path(S).parent.mkdir(parents=True)
    log.log_path(S).write_bytes(b'{"sequence":1,"ty')
    assert log.get_recent_events(S, 5) == []
    assert log.append_event(S, T.SPEECH, "bob", "a").sequence == 1
    assert log_seqs(log) == [1]


def _crashed_split(log: EventLog, *, replaced: bool) -> None:
    """Leave the files as a crash in the middle of a prune of events 1-3 (of 1-5) would."""
    path, archive = log.log_path(S), log.archive_path(S)
    lines = path.read_bytes().splitlines(keepends=True)
    journal = path.with_name(f".{path.name}.split.json")
    journal.write_text(json.dumps({"archive_size": 0}))
    archive.write_bytes(b"".join(lines[:3]))
    if replaced:  # crashed after the rename, before removing the journal
        path.write_bytes(b"".join(lines[3:]))
    else:  # crashed before the rename: the staging file is still there
        path.with_name(f".{path.name}.split.tmp").write_bytes(b"".join(lines[3:4]))


@pytest.mark.parametrize("replaced", [False, True], ids=["before-rename", "after-rename"])
def test_a_prune_cut_short_by_a_crash_loses_and_doubles_nothing(
    tmp_path: Path, replaced: bool
) -> None:
    fill(new_log(tmp_path), [T.SPEECH] * 5)
    log = new_log(tmp_path)
    _crashed_split(log, replaced=replaced)
    assert log.append_event(S, T.SPEECH, "bob", "after").sequence == 6
    assert_nothing_lost(log, [1, 2, 3, 4, 5, 6])
    assert log_seqs(log) == ([4, 5, 6] if replaced else [1, 2, 3, 4, 5, 6])
    assert [p.name for p in log.outbox.iterdir() if p.name.startswith(".")] == []


# -- concurrency and properties ----------------------------------------------------------------


def test_concurrent_appends_get_unique_increasing_sequences(tmp_path: Path) -> None:
    log = new_log(tmp_path, max_events=60)  # auto-prunes run between the appends too
    got: list[list[int]] = [[] for _ in range(8)]

    def work(n: int) -> None:
        for i in range(40):
            got[n].append(log.append_event(S, T.SPEECH, f"agent{n}", str(i)).sequence)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert all(seqs == sorted(seqs) for seqs in got)
    assert sorted(s for seqs in got for s in seqs) == list(range(1, 321))
    assert_nothing_lost(log, list(range(1, 321)))


operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from(list(EventType))),
        st.tuples(st.just("count"), st.integers(0, 12)),
        st.tuples(st.just("drop"), st.frozensets(st.sampled_from(list(EventType)), min_size=1)),
        st.tuples(st.just("keep"), st.frozensets(st.sampled_from(list(EventType)))),
        st.tuples(st.just("before"), st.integers(1, 60)),
        st.tuples(st.just("reopen"), st.none()),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_any_appends_and_prunes_keep_sequences_increasing_and_lose_nothing(
    ops: list[tuple[str, Any]],
) -> None:
    with tempfile.TemporaryDirectory() as d:
        log = EventLog(Path(d), durable=False, max_events=8)
        appended: list[int] = []
        for op, arg in ops:
            if op == "append":
                appended.append(log.append_event(S, arg, "alice", "x").sequence)
            elif op == "count":
                log.prune_events(S, PruneByCount(keep=arg))
            elif op == "drop":
                log.prune_events(S, PruneByType(drop_types=arg))
            elif op == "keep":
                log.prune_events(S, PruneByType(keep_types=arg))
            elif op == "before":
                log.prune_events(S, PruneBeforeSequence(sequence=arg))
            else:
                log = EventLog(Path(d), durable=False, max_events=8)
        assert appended == sorted(set(appended))
        assert_nothing_lost(log, appended)


# -- event files -------------------------------------------------------------------------------


def drop(log: EventLog, name: str, data: Any) -> Path:
    log.inbox.mkdir(parents=True, exist_ok=True)
    path = log.inbox / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def speech(text: str, **extra: Any) -> dict[str, Any]:
    return {"session_id": S, "type": "SPEECH", "speaker": "alice", "content": text, **extra}


def bad_records(log: EventLog) -> dict[str, dict[str, Any]]:
    bad = log.folder / "archive" / "bad"
    records = [json.loads(p.read_text()) for p in bad.glob("*.error.json")]
    return {r["file"]: r for r in records}


def test_ingest_appends_good_files_in_order_and_removes_them(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    drop(log, "002.json", [speech("b"), speech("c", meta={"round": 1})])
    drop(log, "001.json", speech("a", timestamp="2024-12-23T12:30:00Z"))
    drop(log, ".003.json", speech("hidden"))  # a writer's temporary file
    drop(log, "notes.txt", "not an event file")
    got = log.ingest(settle_seconds=0)
    assert [(e.sequence, e.content) for e in got] == [(1, "a"), (2, "b"), (3, "c")]
    assert got[0].timestamp == "2024-12-23T12:30:00Z" and got[2].meta.round == 1
    assert sorted(p.name for p in log.inbox.iterdir()) == [".003.json", "notes.txt"]
    assert log.get_recent_events(S, 10) == got


@pytest.mark.parametrize(
    ("data", "field", "fix"),
    [
        ("{not json", "(json)", "an event file holds"),
        ([], "(top level)", "an event file holds"),
        (speech("a", sequence=7), "sequence", "the log numbers events itself"),
        ([speech("a"), {**speech("b"), "type": "CHAT"}], "[1].type", "correct the value"),
        ({"type": "SPEECH", "speaker": "a", "content": "x"}, "session_id", "add the field"),
        (speech("a", timestamp="yesterday"), "timestamp", "correct the value"),
    ],
)
def test_ingest_moves_a_bad_file_aside_with_its_reason(
    tmp_path: Path, data: Any, field: str, fix: str
) -> None:
    log = new_log(tmp_path)
    drop(log, "bad.json", data)
    drop(log, "good.json", speech("fine"))
    assert [e.content for e in log.ingest(settle_seconds=0)] == ["fine"]
    record = bad_records(log)["bad.json"]
    assert record["field"] == field and fix in record["fix"]
    assert [e.content for e in log.get_recent_events(S, 10)] == ["fine"]  # nothing of bad.json
    assert list(log.inbox.iterdir()) == []


def test_ingest_waits_for_a_file_that_may_still_be_written(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    path = drop(log, "slow.json", '{"session_id": "s1", "ty')
    assert log.ingest(settle_seconds=60) == []
    assert path.exists() and bad_records(log) == {}


def test_ingest_skips_event_ids_already_logged(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    content = [speech("a", event_id="evt-1"), speech("b", event_id="evt-2")]
    drop(log, "e.json", content)
    assert len(log.ingest(settle_seconds=0)) == 2
    # the same file again, as if the process died after appending and before removing it
    drop(log, "e.json", content)
    assert log.ingest(settle_seconds=0) == []
    log.prune_events(S, PruneByCount(keep=0))  # the ids now live in the archive only
    drop(log, "e2.json", [speech("a", event_id="evt-1"), speech("c", event_id="evt-3")])
    fresh = new_log(tmp_path)
    assert [e.content for e in fresh.ingest(settle_seconds=0)] == ["c"]
    assert_nothing_lost(fresh, [1, 2, 3])


# -- CLI ---------------------------------------------------------------------------------------


def cli(*args: str | Path) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], env={"AGENTTALK_ROOT": None})


def test_cli_events_shows_recent_typed_and_later_events(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    fill(log, [T.SPEECH, T.SUMMARY, T.SPEECH, T.VOTE])
    result = cli("events", S, "--limit", "2", "--root", tmp_path)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("#3 ")
    assert "SPEECH alice: SPEECH 2" in result.stdout and "VOTE" in result.stdout
    result = cli("events", S, "--type", "speech", "--limit", "5", "--json", "--root", tmp_path)
    assert [e["sequence"] for e in json.loads(result.stdout)] == [1, 3]
    result = cli("events", S, "--after", "1", "--limit", "2", "--json", "--root", tmp_path)
    assert [e["sequence"] for e in json.loads(result.stdout)] == [2, 3]
    result = cli(
        "events", S, "--after", "1", "--type", "SPEECH", "--limit", "5", "--root", tmp_path
    )
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["#3"]


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["nobody", "--limit", "5"], 1, "sessions: s1"),
        ([S, "--limit", "0"], 2, "--limit"),
        ([S, "--limit", "101"], 2, "--limit"),
        ([S], 2, "--limit"),
        ([S, "--limit", "5", "--type", "CHAT"], 1, "--type CHAT"),
    ],
)
def test_cli_events_rejects_bad_requests(
    tmp_path: Path, args: list[str], code: int, text: str
) -> None:
    fill(new_log(tmp_path), [T.SPEECH])
    result = cli("events", *args, "--root", tmp_path)
    assert result.exit_code == code
    assert text in result.output


def test_durable_mode_writes_the_same_files(tmp_path: Path) -> None:
    log = EventLog(tmp_path)  # durable by default: fsync on every write
    fill(log, [T.SPEECH] * 4)
    log.prune_events(S, PruneByCount(keep=1))
    assert log_seqs(log) == [4] and archive_seqs(log) == [1, 2, 3]
    assert json.loads((log.outbox / f"{S}.seq").read_text()) == {"high_water": 4}
    shutil.rmtree(log.inbox)
    assert log.ingest() == []  # no inbox: nothing to do
    assert sorted(os.listdir(log.outbox)) == [f"{S}.archive.jsonl", f"{S}.jsonl", f"{S}.seq"]
