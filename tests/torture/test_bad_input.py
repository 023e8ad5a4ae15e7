"""Bad input: one table of kinds of bad file. For each, a running daemon records a clear error
(archive/bad/<file>.error.json naming the file, the field and the fix; for profiles, configs and
unknown agents: the status report or the CLI's refusal), disturbs nothing else, and keeps
running: a good command dropped afterwards still completes.

tests/test_daemon.py checks many of these kinds at once in one run; this table checks each
alone, with a running daemon, and that the bystanders are untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import (
    make_daemon,
    make_society,
    read_json,
    running_daemon,
    wait_until,
    write_bytes,
    write_json,
)

from agenttalk.daemon import Daemon
from agenttalk.llm.fake import FakeProvider
from agenttalk.society import CommandKey, Society
from agenttalk.status import agent_status, society_status

from .support import AGENTTALK, daemon_env

MAX_FILE_BYTES = 4096


@dataclass
class Ctx:
    society: Society
    tmp: Path
    daemon: Daemon

    @property
    def inbox(self) -> Path:
        return self.society.agent("worker").inbox


def cmd(**fields: Any) -> dict[str, Any]:
    return {"command_id": "bad", "plan_id": "p", "prompt": "p", **fields}


def on_complete(**fields: Any) -> dict[str, Any]:
    return cmd(on_complete={"send_to": ["sink"], **fields})


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def records(society: Society, agent_id: str = "worker") -> dict[str, dict[str, Any]]:
    """Error records in archive/bad by original file name; each sits beside the moved file."""
    out = {}
    for path in (society.agent(agent_id).archive / "bad").glob("*.error.json"):
        record = read_json(path)
        moved = Path(record["moved_to"])
        assert moved.exists() or moved.is_symlink(), f"{moved} is not beside its error record"
        out[record["file"]] = record
    return out


@dataclass(frozen=True)
class Case:
    kind: str
    setup: Callable[[Ctx], None]
    check: Callable[[Ctx], None]
    """Raises AssertionError until the daemon has dealt with the bad input (polled)."""
    stays: tuple[str, ...] = ()
    """Command files of the worker that must still be pending at the end."""


def rejected(
    kind: str,
    content: bytes | str | dict[str, Any] | list[Any] | None,
    field: str,
    words: str,
    name: str | None = None,
) -> Case:
    """A command file the daemon must move to archive/bad with a record naming `field`."""
    name = name or f"cmd_{kind}.json"

    def setup(ctx: Ctx) -> None:
        if isinstance(content, bytes):
            data = content
        elif isinstance(content, str):
            data = content.encode()
        else:
            data = json.dumps(content).encode()
        write_bytes(ctx.inbox / name, data)

    return Case(kind, setup, expect_record(name, field, words))


def expect_record(name: str, field: str, words: str) -> Callable[[Ctx], None]:
    def check(ctx: Ctx) -> None:
        record = records(ctx.society).get(name)
        assert record is not None, f"no error record for {name}"
        assert record["field"] == field, record
        assert words in record["error"], record
        assert record["fix"] and record["agent_id"] == "worker", record
        assert not (ctx.inbox / name).exists() and not (ctx.inbox / name).is_symlink()

    return check


# -- the kinds that are not one command file ------------------------------------------------


def sparse_huge(ctx: Ctx) -> None:
    path = ctx.inbox / "cmd_huge.json"
    with path.open("wb") as f:
        f.write(b'{"command_id": "huge", "prompt": "')
        f.truncate(20_000_000)  # 20 MB, sparse: cheap to make, must never be read


def symlink_out(ctx: Ctx) -> None:
    outside = ctx.tmp / "outside" / "cmd_evil.json"
    write_json(outside, cmd(command_id="evil"))
    os.symlink(outside, ctx.inbox / "cmd_link.json")


def fifo(ctx: Ctx) -> None:
    os.mkfifo(ctx.inbox / "cmd_fifo.json")  # reading it would block the daemon forever


def waiting(command_id: str = "dup", prompt: str = "A.") -> dict[str, Any]:
    return cmd(command_id=command_id, prompt=prompt, required_inputs=["never.txt"])


def duplicate_id(ctx: Ctx) -> None:
    write_json(ctx.inbox / "cmd_dup1.json", waiting())
    wait_until(lambda: "cmd_dup1.json" in ctx.daemon.slots["worker"].pending, timeout=30)
    write_json(ctx.inbox / "cmd_dup2.json", waiting(prompt="B, other content."))


def already_ran(ctx: Ctx) -> None:
    once = cmd(command_id="once", prompt="Once.")
    write_json(ctx.inbox / "cmd_once.json", once)
    done = ctx.society.agent("worker").finished_path("done", CommandKey("p", "once"))
    wait_until(done.exists, timeout=30, what="the first run")
    write_json(ctx.inbox / "cmd_once_again.json", once)


def symlinked_input(ctx: Ctx) -> None:
    secret = ctx.tmp / "outside" / "secret.txt"
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text("not yours")
    os.symlink(secret, ctx.inbox / "secret.txt")
    write_json(ctx.inbox / "cmd_reads.json", cmd(command_id="reads", required_inputs=["*.txt"]))


def check_symlinked_input(ctx: Ctx) -> None:
    record = records(ctx.society).get("secret.txt")
    assert record is not None and record["field"] == "required_inputs", record
    assert "symlink leads out of the agent folder" in record["error"]
    assert (ctx.tmp / "outside" / "secret.txt").read_text() == "not yours"


def unknown_target(ctx: Ctx) -> None:
    write_json(
        ctx.inbox / "cmd_ghost.json",
        cmd(command_id="ghost", on_complete={"send_to": ["ghost", "sink"]}),
    )


def check_unknown_target(ctx: Ctx) -> None:
    path = ctx.society.agent("worker").audit_dir(CommandKey("p", "ghost")) / "audit.json"
    audit = read_json(path)
    deliveries = {d["to"]: d for d in audit["routing"]["deliveries"]}
    assert deliveries["ghost"]["status"] == "failed"
    assert "unknown agent 'ghost'" in deliveries["ghost"]["error"]
    assert deliveries["sink"]["status"] == "delivered"
    assert not (ctx.society.agents_dir / "ghost").exists(), "a folder was made for the unknown"


def no_such_agent(ctx: Ctx) -> None:
    write_json(ctx.society.agents_dir / "ghost" / "inbox" / "cmd_boo.json", cmd(command_id="boo"))


def check_no_such_agent(ctx: Ctx) -> None:
    [ghost] = [s for s in society_status(ctx.society) if s.agent_id == "ghost"]
    assert ghost.profile_error is not None and "agent_profile.json" in ghost.profile_error
    assert "does not exist" in ghost.profile_error
    assert [c.command_id for c in ghost.commands] == ["boo"]
    assert (ctx.society.agents_dir / "ghost" / "inbox" / "cmd_boo.json").is_file()


def invalid_profile(ctx: Ctx) -> None:
    profile = ctx.society.agent("worker").profile_path
    write_json(profile, {"agent_id": "worker", "name": "W", "prompt": "p", "temper": "hot"})
    write_json(ctx.inbox / "cmd_held.json", cmd(command_id="held"))


def check_invalid_profile(ctx: Ctx) -> None:
    status = agent_status(ctx.society, "worker")
    assert status.profile_error is not None, status
    assert "temper" in status.profile_error and "unknown field" in status.profile_error
    assert [(c.command_id, c.state) for c in status.commands] == [("held", "pending")]
    assert ctx.daemon.slots["worker"].profile_error is not None


def profile_not_json(ctx: Ctx) -> None:
    write_bytes(ctx.society.agent("worker").profile_path, b'{"agent_id": "worker", "na')
    write_json(ctx.inbox / "cmd_held.json", cmd(command_id="held"))


def check_profile_not_json(ctx: Ctx) -> None:
    status = agent_status(ctx.society, "worker")
    assert status.profile_error is not None and "json" in status.profile_error.lower(), status
    assert [(c.command_id, c.state) for c in status.commands] == [("held", "pending")]


def bad_config(text: str, field: str) -> Case:
    """An invalid config.yaml: `agenttalk run` refuses at once, naming the field."""

    def setup(ctx: Ctx) -> None:
        other = ctx.tmp / f"config_{abs(hash(text))}"
        make_society(other, ["solo"])
        (other / "config.yaml").write_text(text, encoding="utf-8")

    def check(ctx: Ctx) -> None:
        other = ctx.tmp / f"config_{abs(hash(text))}"
        out = subprocess.run(
            [str(AGENTTALK), "run", "--root", str(other), "--until-idle"],
            capture_output=True,
            text=True,
            timeout=120,
            env=daemon_env(),
        )
        assert out.returncode == 1, out
        assert out.stderr.startswith("error: "), out.stderr
        assert "config.yaml" in out.stderr and field in out.stderr, out.stderr
        assert "Traceback" not in out.stderr

    return Case(f"config_{field}", setup, check)


def config_text(**override: Any) -> str:
    base = {"llm": {"default": "fake", "services": {"fake": {"provider": "fake"}}}}
    return yaml.safe_dump({**base, **override})


CORPUS: list[Case] = [
    # -- not JSON, or not an object
    rejected("truncated", b'{"command_id": "t", "pro', "(json)", "not valid JSON"),
    rejected("empty", b"", "(json)", "the file is empty"),
    rejected("whitespace", b"  \n\t\n", "(json)", "the file is empty"),
    rejected("binary", bytes(range(256)) * 4, "(encoding)", "not UTF-8"),
    rejected("latin1", b'{"command_id": "l", "prompt": "caf\xe9"}', "(encoding)", "not UTF-8"),
    rejected("utf16", '{"command_id": "u", "prompt": "p"}'.encode("utf-16"), "(encoding)", "UTF-8"),
    rejected("bom", b'\xef\xbb\xbf{"command_id": "b", "prompt": "p"}', "(json)", "BOM"),
    rejected(
        "nan", b'{"command_id": "n", "prompt": "p", "timeout": NaN}', "timeout", "greater than 0"
    ),
    rejected("array", [cmd()], "(json)", "list"),
    rejected("string", "just text", "(json)", "not valid JSON"),
    rejected("null", "null", "(json)", "NoneType"),
    rejected("deep_nesting", '{"c": ' + nested(1500) + "}", "(json)", "nested too deeply"),
    rejected("huge_nesting", '{"c": ' + nested(100_000) + "}", "(file)", "over the limit"),
    # -- the schema
    rejected("no_prompt", {"command_id": "np"}, "prompt", "required"),
    rejected("no_command_id", {"prompt": "p"}, "command_id", "required"),
    rejected("empty_prompt", cmd(prompt=""), "prompt", "at least 1 character"),
    rejected("prompt_as_object", cmd(prompt={"a": {"b": [1]}}), "prompt", "string"),
    rejected("types", cmd(required_inputs=5), "required_inputs", "list"),
    rejected("timeout_text", cmd(timeout="soon"), "timeout", "number"),
    rejected("negative_timeout", cmd(timeout=-1), "timeout", "greater than 0"),
    rejected("unknown_field", cmd(colour="red"), "colour", "unknown field"),
    rejected(
        "unknown_nested",
        cmd(on_complete={"sendto": ["sink"]}),
        "on_complete.sendto",
        "unknown field",
    ),
    rejected("bad_command_id", cmd(command_id="../x"), "command_id", "not a valid id"),
    rejected("bad_plan_id", cmd(plan_id="/etc"), "plan_id", "not a valid id"),
    rejected(
        "condition_no_score",
        on_complete(send_to_condition=[{"min_score": 5, "send_to": ["sink"]}]),
        "(top level)",
        "score_required",
    ),
    rejected(
        "min_score_range",
        cmd(
            score_required=True,
            on_complete={"send_to_condition": [{"min_score": 150, "send_to": ["sink"]}]},
        ),
        "on_complete.send_to_condition.0.min_score",
        "less than or equal to 100",
    ),
    # -- paths
    rejected(
        "input_absolute", cmd(required_inputs=["/etc/passwd"]), "required_inputs.0", "absolute"
    ),
    rejected("input_dotdot", cmd(required_inputs=["../sink/x"]), "required_inputs.0", ".."),
    rejected(
        "output_dotdot", on_complete(output_name="../{to}.json"), "on_complete.output_name", ".."
    ),
    rejected(
        "output_subdir", on_complete(output_name="sub/x.json"), "on_complete.output_name", "/"
    ),
    rejected(
        "output_absolute", on_complete(output_name="/tmp/x.json"), "on_complete.output_name", "/"
    ),
    rejected(
        "output_dotfile",
        on_complete(output_name=".hidden"),
        "on_complete.output_name",
        "leading dot",
    ),
    rejected(
        "send_to_path",
        cmd(on_complete={"send_to": ["../sink"]}),
        "on_complete.send_to.0",
        "not a valid id",
    ),
    rejected(
        "send_to_absolute",
        cmd(on_complete={"send_to": ["/"]}),
        "on_complete.send_to.0",
        "not a valid id",
    ),
    # -- targets
    rejected(
        "send_to_self", cmd(on_complete={"send_to": ["worker"]}), "on_complete.send_to", "worker"
    ),
    rejected(
        "condition_to_self",
        cmd(
            score_required=True,
            on_complete={"send_to_condition": [{"min_score": 0, "send_to": ["worker"]}]},
        ),
        "on_complete.send_to_condition.0.send_to",
        "worker",
    ),
    rejected(
        "failure_to_self", cmd(on_failure={"send_to": ["worker"]}), "on_failure.send_to", "worker"
    ),
    Case("unknown_target", unknown_target, check_unknown_target),
    # -- template tricks
    rejected(
        "template_attribute",
        on_complete(message_template="{result.__class__}"),
        "on_complete.message_template",
        "{result.__class__} is not allowed",
    ),
    rejected(
        "template_index",
        on_complete(message_template="{result[0]}"),
        "on_complete.message_template",
        "{result[0]} is not allowed",
    ),
    rejected(
        "template_positional",
        on_complete(message_template="{0.__globals__}"),
        "on_complete.message_template",
        "is not allowed",
    ),
    rejected(
        "template_conversion",
        on_complete(message_template="{result!r}"),
        "on_complete.message_template",
        "conversion",
    ),
    rejected(
        "template_unclosed",
        on_complete(message_template="{result"),
        "on_complete.message_template",
        "malformed",
    ),
    rejected(
        "template_failure",
        cmd(on_failure={"message_template": "{error.__init__}"}),
        "on_failure.message_template",
        "is not allowed",
    ),
    rejected(
        "output_name_result",
        on_complete(output_name="{result}.json"),
        "on_complete.output_name",
        "{result} is not allowed",
    ),
    # -- the file itself
    rejected(
        "oversized",
        cmd(prompt="x" * (MAX_FILE_BYTES + 10)),
        "(file)",
        f"over the limit of {MAX_FILE_BYTES}",
    ),
    Case("huge_sparse", sparse_huge, expect_record("cmd_huge.json", "(file)", "20000000 bytes")),
    Case("symlink_out", symlink_out, expect_record("cmd_link.json", "(file)", "symlink leads out")),
    Case("fifo", fifo, expect_record("cmd_fifo.json", "(file)", "not a regular file")),
    Case("symlinked_input", symlinked_input, check_symlinked_input, stays=("cmd_reads.json",)),
    # -- identity
    Case(
        "duplicate_id",
        duplicate_id,
        expect_record("cmd_dup2.json", "command_id", "already pending as cmd_dup1.json"),
        stays=("cmd_dup1.json",),
    ),
    Case(
        "already_ran",
        already_ran,
        expect_record("cmd_once_again.json", "command_id", "has already run (done)"),
    ),
    # -- agents and settings
    Case("no_such_agent", no_such_agent, check_no_such_agent),
    Case("invalid_profile", invalid_profile, check_invalid_profile, stays=("cmd_held.json",)),
    Case("profile_not_json", profile_not_json, check_profile_not_json, stays=("cmd_held.json",)),
    bad_config(config_text(max_concurrency="many"), "max_concurrency"),
    bad_config(config_text(heartbeat_secs=5), "heartbeat_secs"),
    bad_config(config_text(durability="sometimes"), "durability"),
    bad_config("llm: [unclosed\n", "not valid YAML"),
    bad_config(yaml.safe_dump({"llm": {"default": "nope", "services": {}}}), "llm.default"),
]


def test_the_corpus_has_at_least_thirty_distinct_kinds() -> None:
    kinds = [case.kind for case in CORPUS]
    assert len(set(kinds)) == len(kinds) >= 30


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.mark.parametrize("case", CORPUS, ids=[c.kind for c in CORPUS])
def test_bad_input_is_recorded_disturbs_nothing_and_the_daemon_keeps_working(
    case: Case, tmp_path: Path
) -> None:
    society = make_society(
        tmp_path / "society",
        agents=["worker", "sink", "bystander"],
        config={"max_file_bytes": MAX_FILE_BYTES, "heartbeat_seconds": 1},
    )
    society.agent("worker").inbox.mkdir(parents=True)
    bystander = society.agent("bystander")
    write_bytes(bystander.inbox / "notes.txt", b"keep me")
    write_json(bystander.inbox / "cmd_wait.json", waiting("wait"))
    fake = FakeProvider(lambda request: {"result": "fine"})
    daemon = make_daemon(society, fake)
    ctx = Ctx(society, tmp_path, daemon)
    with running_daemon(daemon) as thread:

        def accepted() -> bool:
            slot = daemon.slots.get("bystander")
            return slot is not None and "cmd_wait.json" in slot.pending

        wait_until(accepted, timeout=30, what="the bystander's waiting command")
        before = snapshot(bystander.path)
        case.setup(ctx)

        def dealt_with() -> bool:
            try:
                case.check(ctx)
            except (AssertionError, OSError, KeyError):
                return False
            return True

        wait_until(dealt_with, timeout=30, interval=0.05, what=f"the daemon to handle {case.kind}")
        case.check(ctx)  # once more, to show the reason if it flipped back

        good = {
            "command_id": "good",
            "plan_id": "p",
            "prompt": "Fine.",
            "on_complete": {"send_to": ["sink"]},
        }
        runner = "bystander" if case.kind in ("invalid_profile", "profile_not_json") else "worker"
        write_json(society.agent(runner).inbox / "cmd_good.json", good)
        message = society.agent("sink").plan_inbox("p") / f"good_from_{runner}.json"
        wait_until(message.exists, timeout=60, what="the good command after the bad input")
        assert thread.is_alive(), "the daemon stopped"

    assert read_json(message)["result"] == "fine"
    after = snapshot(bystander.path)
    if runner == "bystander":
        good_files = {k for k in after if "good" in k}
        after = {k: v for k, v in after.items() if k not in good_files}
    assert after == before, "the bad input disturbed another agent"
    left = sorted(p.name for p in society.agent("worker").inbox.glob("cmd_*.json"))
    assert left == sorted(case.stays), left
    assert records(society, "bystander") == {}
