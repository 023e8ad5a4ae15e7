"""The `agenttalk` command line, driven for real: CliRunner in-process, the console script as a
subprocess, a loopback OpenAI-compatible server for the LLM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from agenttalk.cli import app
from agenttalk.daemon import Daemon
from agenttalk.llm import LLMRequest
from agenttalk.llm.fake import FakeProvider
from agenttalk.llm.loopback import LoopbackLLM
from agenttalk.llm.registry import Providers
from agenttalk.scaffold import example_dir, init_society
from agenttalk.society import Society

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_PLAN = "plan_rate_limit_review"
EXAMPLE_COMMANDS = {
    "developer": "cmd_write_proposal",
    "reviewer_a": "cmd_review",
    "reviewer_b": "cmd_review",
    "manager": "cmd_review_consensus",
}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No key, no root from the environment; `run` installs a SIGTERM handler we put back."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTTALK_ROOT"):
        monkeypatch.delenv(name, raising=False)
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def cli(*args: str | Path, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def society(tmp_path: Path, name: str = "soc", *, plan: bool = False) -> Path:
    root = tmp_path / name
    init_society(root, submit=plan)
    return root


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def inbox_files(root: Path, agent: str) -> list[str]:
    inbox = root / "agents" / agent / "inbox"
    return sorted(str(p.relative_to(inbox)) for p in inbox.rglob("*") if p.is_file())


def status_json(root: Path) -> dict[str, dict[str, Any]]:
    result = cli("status", "--json", "--root", root)
    assert result.exit_code == 0, result.output
    return {s["agent_id"]: s for s in json.loads(result.stdout)}


def by_id(agent_status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["command_id"]: c for c in agent_status["commands"]}


# -- acceptance: init + run against a configured service ---------------------------------------


def test_init_then_run_until_idle_completes_the_example_society(tmp_path: Path) -> None:
    """`agenttalk init demo && agenttalk run --root demo --until-idle`: console script, HTTP."""
    script = Path(sys.executable).with_name("agenttalk")
    assert script.is_file(), "the console script is installed next to the interpreter"
    with LoopbackLLM() as llm:
        env = {k: v for k, v in os.environ.items() if k != "AGENTTALK_ROOT"}
        env.update(
            HOME=str(tmp_path), OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="sk-test-accept"
        )
        init = subprocess.run(
            [script, "init", "demo"], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert init.returncode == 0, init.stderr
        run = subprocess.run(
            [script, "run", "--root", "demo", "--until-idle"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        requests = list(llm.requests)
    assert run.returncode == 0, run.stderr
    root = tmp_path / "demo"
    agents = root / "agents"
    for agent, command_id in EXAMPLE_COMMANDS.items():
        assert (agents / agent / "archive/done" / EXAMPLE_PLAN / f"{command_id}.json").is_file()
        assert not list((agents / agent / "inbox").glob("cmd_*.json"))
    assert len(requests) == len(EXAMPLE_COMMANDS)
    assert all(r.headers.get("authorization") == "Bearer sk-test-accept" for r in requests)

    name = "consensus_cmd_review_consensus.json"
    to_user = json.loads((agents / "user/inbox" / EXAMPLE_PLAN / name).read_bytes())
    assert to_user["from"] == "manager" and to_user["score"] == 80
    assert to_user["text"].startswith("Consensus check done: done: ")
    # the loopback's score 80 reaches min_score 70 (general_manager), so not the developer branch
    to_gm = json.loads((agents / "general_manager/inbox" / EXAMPLE_PLAN / name).read_bytes())
    assert to_gm["result"] == to_user["result"]
    assert not (agents / "developer/inbox" / EXAMPLE_PLAN / name).exists()
    audit = json.loads(
        (agents / "manager/outbox" / EXAMPLE_PLAN / "cmd_review_consensus/audit.json").read_bytes()
    )
    assert audit["routing"]["matched_min_score"] == 70
    assert sorted(audit["routing"]["targets"]) == ["general_manager", "user"]
    assert {i["name"] for i in audit["inputs"]} == {
        f"{EXAMPLE_PLAN}/feedback_reviewer_a.json",
        f"{EXAMPLE_PLAN}/feedback_reviewer_b.json",
    }


def test_run_with_service_dry_run_needs_no_key(tmp_path: Path) -> None:
    root = society(tmp_path, plan=True)
    threads_before = set(threading.enumerate())

    result = cli("run", "--root", root, "--service", "dry-run", "--until-idle")

    assert result.exit_code == 0, result.output
    assert set(threading.enumerate()) <= threads_before  # workers and watcher have stopped
    statuses = status_json(root)
    for agent, command_id in EXAMPLE_COMMANDS.items():
        assert by_id(statuses[agent])[command_id]["state"] == "done"
    delivered = root / "agents/user/inbox" / EXAMPLE_PLAN / "consensus_cmd_review_consensus.json"
    assert "[dry run]" in json.loads(delivered.read_bytes())["text"]
    # the plan's commands have all run now; that is no mistake in the plan file
    assert cli("validate", "--root", root).exit_code == 0


def test_init_refuses_an_existing_society(tmp_path: Path) -> None:
    root = society(tmp_path)
    before = (root / "config.yaml").read_bytes()

    result = cli("init", root)

    assert result.exit_code == 1
    assert "already holds a society" in result.stderr
    assert (root / "config.yaml").read_bytes() == before


def test_init_no_plan_creates_an_idle_society(tmp_path: Path) -> None:
    result = cli("init", tmp_path / "walk", "--no-plan")

    assert result.exit_code == 0, result.output
    assert "0 commands dropped" in result.stdout
    statuses = status_json(tmp_path / "walk")
    debate = ["li_qiang", "wang_ming", "chen_jing", "zhao_li", "moderator"]
    assert sorted(statuses) == sorted([*EXAMPLE_COMMANDS, "general_manager", "user", *debate])
    assert all(not s["commands"] for s in statuses.values())


def test_run_without_a_key_fails_at_once_and_says_what_to_do(tmp_path: Path) -> None:
    root = society(tmp_path, plan=True)

    result = cli("run", "--root", root, "--service", "openai", "--until-idle")

    assert result.exit_code == 1
    assert "export OPENAI_API_KEY" in result.stderr
    assert not list((root / "agents").glob("*/archive"))


def test_run_with_an_unknown_service_fails(tmp_path: Path) -> None:
    root = society(tmp_path)
    result = cli("run", "--root", root, "--service", "nope", "--until-idle")
    assert result.exit_code == 1
    assert "--service nope" in result.stderr


# -- root resolution ---------------------------------------------------------------------------


def test_root_is_the_flag_else_agenttalk_root_else_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = {}
    for name in ("flag", "env", "cwd"):
        roots[name] = society(tmp_path, name)
        marker = f"marker_{name}"
        write_json(
            roots[name] / "agents" / marker / "agent_profile.json",
            {"agent_id": marker, "name": marker, "prompt": "p"},
        )
    monkeypatch.chdir(roots["cwd"])

    def agents(*args: str | Path, env: dict[str, str | None]) -> set[str]:
        result = cli("status", "--json", *args, env=env)
        assert result.exit_code == 0, result.output
        return {s["agent_id"] for s in json.loads(result.stdout) if s["agent_id"].startswith("ma")}

    from_env: dict[str, str | None] = {"AGENTTALK_ROOT": str(roots["env"])}
    assert agents("--root", roots["flag"], env=from_env) == {"manager", "marker_flag"}
    assert agents(env=from_env) == {"manager", "marker_env"}
    assert agents(env={"AGENTTALK_ROOT": None}) == {"manager", "marker_cwd"}


# -- send --------------------------------------------------------------------------------------


def test_send_drops_a_valid_command_atomically(tmp_path: Path) -> None:
    root = society(tmp_path)
    command = {
        "command_id": "cmd_hello",
        "plan_id": "plan_walk",
        "prompt": "Propose a name.",
        "on_complete": {"send_to": ["user"], "message_template": "Name idea: {result}"},
    }
    source = write_json(tmp_path / "cmd_hello.json", command)

    result = cli("send", "developer", source, "--root", root)

    assert result.exit_code == 0, result.output
    # the only file: no temporary left behind by the atomic write
    assert inbox_files(root, "developer") == ["cmd_plan_walk__cmd_hello.json"]
    dropped = json.loads(
        (root / "agents/developer/inbox/cmd_plan_walk__cmd_hello.json").read_text()
    )
    assert dropped["command_id"] == "cmd_hello"
    assert dropped["on_complete"]["message_template"] == "Name idea: {result}"
    assert "cmd_plan_walk__cmd_hello.json" in result.stdout
    assert status_json(root)["developer"]["commands"][0]["state"] == "pending"


def test_send_refuses_an_invalid_command_and_drops_nothing(tmp_path: Path) -> None:
    root = society(tmp_path)
    before = inbox_files(root, "reviewer_a")
    source = write_json(
        tmp_path / "cmd_bad.json",
        {"command_id": "cmd_bad", "prompt": "x", "required_inputs": ["../../etc/passwd"]},
    )

    result = cli("send", "reviewer_a", source, "--root", root)

    assert result.exit_code == 1
    assert "cmd_bad.json: required_inputs.0:" in result.stderr
    assert inbox_files(root, "reviewer_a") == before


@pytest.mark.parametrize(
    ("agent", "command", "field"),
    [
        ("developer", {"command_id": "c", "prompt": "x", "sned_to": []}, "sned_to"),
        ("developer", {"command_id": "c", "prompt": "x", "on_complete": {"send_to": ["developer"]}},
         "on_complete.send_to"),
        ("nobody", {"command_id": "c", "prompt": "x"}, "agent"),
        ("developer", {"command_id": "c"}, "prompt"),
    ],
)  # fmt: skip
def test_send_names_the_bad_field(
    tmp_path: Path, agent: str, command: dict[str, Any], field: str
) -> None:
    root = society(tmp_path)
    source = write_json(tmp_path / "cmd_c.json", command)

    result = cli("send", agent, source, "--root", root)

    assert result.exit_code == 1
    assert f"cmd_c.json: {field}:" in result.stderr
    assert not list((root / "agents").glob("*/inbox/cmd_*.json"))


def test_send_treats_any_json_with_a_command_id_as_a_command(tmp_path: Path) -> None:
    root = society(tmp_path)
    source = write_json(tmp_path / "task.json", {"command_id": "cmd_t", "prompt": "x"})

    result = cli("send", "manager", source, "--root", root)

    assert result.exit_code == 0, result.output
    assert inbox_files(root, "manager") == ["cmd_default__cmd_t.json"]


def test_send_refuses_a_command_file_that_is_not_json(tmp_path: Path) -> None:
    root = society(tmp_path)
    source = tmp_path / "cmd_x.json"
    source.write_text("{not json", encoding="utf-8")

    result = cli("send", "manager", source, "--root", root)

    assert result.exit_code == 1
    assert "cmd_x.json: (json): not valid JSON" in result.stderr
    assert inbox_files(root, "manager") == []


def test_send_an_input_for_one_plan_lands_in_the_plan_folder(tmp_path: Path) -> None:
    root = society(tmp_path)
    source = tmp_path / "proposal.txt"
    source.write_text("Rate-limit the public API per client.\n", encoding="utf-8")

    planned = cli("send", "reviewer_a", source, "--plan", "plan_walk", "--root", root)
    shared = cli("send", "reviewer_b", source, "--root", root)

    assert planned.exit_code == 0, planned.output
    assert shared.exit_code == 0, shared.output
    inbox = root / "agents"
    assert (inbox / "reviewer_a/inbox/plan_walk/proposal.txt").read_bytes() == source.read_bytes()
    assert not (inbox / "reviewer_a/inbox/proposal.txt").exists()
    assert (inbox / "reviewer_b/inbox/proposal.txt").read_bytes() == source.read_bytes()


@pytest.mark.parametrize("plan", ["../../../escaped", "a/b", ".hidden", ""])
def test_send_refuses_a_plan_that_is_not_an_id(tmp_path: Path, plan: str) -> None:
    root = society(tmp_path)
    source = tmp_path / "in.txt"
    source.write_text("data", encoding="utf-8")

    result = cli("send", "developer", source, "--plan", plan, "--root", root)

    assert result.exit_code == 1
    assert "in.txt: --plan:" in result.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name == "in.txt"]
    assert written == [source]


# -- status ------------------------------------------------------------------------------------


def _fail_on_marker(request: LLMRequest) -> str | dict[str, Any]:
    if any("PLEASE FAIL" in m["content"] for m in request.messages):
        return "I refuse to answer in JSON."
    return {"result": "ok", "score": 64, "score_explanation": "fine"}


def _run_daemon(root: Path) -> None:
    soc = Society(root)
    providers = Providers(soc.config, root)
    providers.install("openai", FakeProvider(_fail_on_marker))
    Daemon(soc, providers, service_override="openai").run(until_idle=True, watch=False)


def test_status_shows_pending_waiting_done_failed_and_rejected(tmp_path: Path) -> None:
    root = society(tmp_path)
    inbox = root / "agents/developer/inbox"
    write_json(inbox / "cmd_ok.json", {"command_id": "cmd_ok", "prompt": "Do it."})
    write_json(
        inbox / "cmd_bad.json",
        {"command_id": "cmd_bad", "prompt": "PLEASE FAIL", "score_required": True},
    )
    write_json(
        root / "agents/reviewer_b/inbox/cmd_junk.json",
        {"command_id": "cmd_junk", "prompt": "x", "colour": "red"},
    )
    _run_daemon(root)
    write_json(inbox / "cmd_later.json", {"command_id": "cmd_later", "prompt": "Later."})
    write_json(
        root / "agents/reviewer_a/inbox/cmd_wait.json",
        {"command_id": "cmd_wait", "prompt": "Wait.", "required_inputs": ["need.txt", "x_*.md"]},
    )

    statuses = status_json(root)

    developer = by_id(statuses["developer"])
    assert developer["cmd_ok"]["state"] == "done"
    assert developer["cmd_bad"]["state"] == "failed"
    assert "not valid after 2 repair attempts" in developer["cmd_bad"]["error"]
    assert developer["cmd_later"]["state"] == "pending"
    waiting = by_id(statuses["reviewer_a"])["cmd_wait"]
    assert waiting["state"] == "waiting"
    assert waiting["missing_inputs"] == ["need.txt", "x_*.md"]
    (rejected,) = statuses["reviewer_b"]["rejected_files"]
    assert rejected["field"] == "colour"

    text = cli("status", "--root", root)
    assert text.exit_code == 0, text.output
    out = text.stdout
    assert "developer: 1 pending, 1 done, 1 failed" in out
    assert "failed   default/cmd_bad" in out and "not valid after 2 repair attempts" in out
    assert "pending  default/cmd_later" in out
    assert "waiting  default/cmd_wait (cmd_wait.json) missing: need.txt, x_*.md" in out
    assert "rejected" in out and "colour: unknown field" in out


# -- validate ----------------------------------------------------------------------------------


def test_validate_accepts_the_example_society(tmp_path: Path) -> None:
    root = society(tmp_path, plan=True)
    result = cli("validate", "--root", root)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: config, 11 agents")


@pytest.mark.parametrize(
    ("path", "content", "expected"),
    [
        (
            "agents/developer/agent_profile.json",
            {"agent_id": "developer", "name": "D", "prompt": "p", "temprature": 1},
            ["agents/developer/agent_profile.json", "temprature"],
        ),
        (
            "agents/reviewer_a/agent_profile.json",
            {"agent_id": "someone_else", "name": "R", "prompt": "p"},
            ["agents/reviewer_a/agent_profile.json", "agent_id"],
        ),
        (
            "agents/manager/inbox/cmd_broken.json",
            {"command_id": "cmd_broken", "prompt": "p", "score_required": "maybe"},
            ["agents/manager/inbox/cmd_broken.json", "score_required"],
        ),
        (
            "config.yaml",
            "heartbeat_seconds: 5\nheartbeat_second: 5\n",
            ["config.yaml", "heartbeat_second", "unknown field"],
        ),
        (
            "plans/broken.json",
            {"plan_id": "p1", "commands": [{"agent": "nobody", "command": {"command_id": "c"}}]},
            ["plans/broken.json", "nobody"],
        ),
        (
            "plans/broken2.json",
            {"plan_id": "p2", "commands": [
                {"agent": "developer", "command": {"command_id": "c", "prompt": "x",
                                                   "required_inputs": ["/etc/passwd"]}}]},
            ["plans/broken2.json", "required_inputs"],
        ),
        (
            "plans/broken3.yaml",
            "plan_id: p3\nsteps: []\n",
            ["plans/broken3.yaml", "steps"],
        ),
    ],
    ids=["profile-field", "profile-id", "command", "config", "plan-agent", "plan-input",
         "plan-key"],
)  # fmt: skip
def test_validate_names_the_broken_file(
    tmp_path: Path, path: str, content: Any, expected: list[str]
) -> None:
    root = society(tmp_path, plan=True)
    target = root / path
    if isinstance(content, str):
        target.write_text(content, encoding="utf-8")
    else:
        write_json(target, content)

    result = cli("validate", "--root", root)

    assert result.exit_code == 1
    for text in expected:
        assert text in result.stderr


# -- schema ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "fields"),
    [
        ("command", {"command_id", "prompt", "on_complete"}),
        ("profile", {"agent_id", "name", "prompt", "llm"}),
        ("message", {"message_id", "from", "to", "result", "score", "text"}),
        ("config", {"heartbeat_seconds", "max_concurrency", "llm"}),
        ("plan", {"plan_id", "commands"}),
    ],
)
def test_schema_prints_a_json_schema(kind: str, fields: set[str]) -> None:
    result = cli("schema", kind)
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    assert schema["type"] == "object"
    assert fields <= set(schema["properties"])


def test_schema_of_an_unknown_kind_fails() -> None:
    result = cli("schema", "commands")
    assert result.exit_code == 1
    assert "unknown kind 'commands'" in result.stderr
    assert result.stdout == ""


# -- plans -------------------------------------------------------------------------------------


def _plan(second_prompt: str = "Review draft.json.") -> dict[str, Any]:
    return {
        "plan_id": "plan_p",
        "commands": [
            {
                "agent": "developer",
                "command": {
                    "command_id": "cmd_draft",
                    "prompt": "Write a draft.",
                    "on_complete": {"send_to": ["reviewer_a"], "output_name": "draft.json"},
                },
            },
            {
                "agent": "reviewer_a",
                "command": {
                    "command_id": "cmd_check",
                    "prompt": second_prompt,
                    "required_inputs": ["draft.json"],
                    "on_complete": {"send_to": ["user"]},
                },
            },
        ],
    }


def test_plan_submit_drops_every_command(tmp_path: Path) -> None:
    root = society(tmp_path)
    plan_file = write_json(tmp_path / "plan.json", _plan())

    result = cli("plan", "submit", plan_file, "--root", root)

    assert result.exit_code == 0, result.output
    assert "cmd_plan_p__cmd_draft.json" in inbox_files(root, "developer")
    assert "cmd_plan_p__cmd_check.json" in inbox_files(root, "reviewer_a")
    assert result.stdout.count("dropped ") == 2


def test_plan_submit_with_one_invalid_command_drops_none(tmp_path: Path) -> None:
    root = society(tmp_path)
    plan = _plan()
    plan["commands"][1]["command"]["on_complete"]["output_name"] = "../escape.json"
    plan_file = write_json(tmp_path / "plan.json", plan)

    result = cli("plan", "submit", plan_file, "--root", root)

    assert result.exit_code == 1
    assert "plan not submitted" in result.stderr
    assert "commands[1]" in result.stderr and "output_name" in result.stderr
    assert "commands[0]" not in result.stderr
    assert not list((root / "agents").glob("*/inbox/cmd_*.json"))


def test_plan_submit_reads_yaml_and_refuses_a_foreign_plan_id(tmp_path: Path) -> None:
    root = society(tmp_path)
    plan = _plan()
    plan["commands"][0]["command"]["plan_id"] = "plan_other"
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan), encoding="utf-8")

    result = cli("plan", "submit", plan_file, "--root", root)

    assert result.exit_code == 1
    assert "commands[0]: plan_id: 'plan_other' differs" in result.stderr
    assert not list((root / "agents").glob("*/inbox/cmd_*.json"))

    del plan["commands"][0]["command"]["plan_id"]
    plan_file.write_text(yaml.safe_dump(plan), encoding="utf-8")
    assert cli("plan", "submit", plan_file, "--root", root).exit_code == 0
    assert inbox_files(root, "developer") == ["cmd_plan_p__cmd_draft.json"]


def test_plan_submit_twice_is_refused(tmp_path: Path) -> None:
    root = society(tmp_path)
    plan_file = write_json(tmp_path / "plan.json", _plan())
    assert cli("plan", "submit", plan_file, "--root", root).exit_code == 0

    again = cli("plan", "submit", plan_file, "--root", root)

    assert again.exit_code == 1
    assert "already pending" in again.stderr


def test_plan_status_follows_each_command_through_a_run(tmp_path: Path) -> None:
    root = society(tmp_path)
    plan_file = write_json(tmp_path / "plan.json", _plan())
    assert cli("plan", "submit", plan_file, "--root", root).exit_code == 0

    def states() -> dict[str, tuple[str, list[str]]]:
        result = cli("plan", "status", "plan_p", "--json", "--root", root)
        assert result.exit_code == 0, result.output
        return {
            f"{r['agent_id']}/{r['command_id']}": (r["state"], r["missing_inputs"])
            for r in json.loads(result.stdout)
        }

    assert states() == {
        "developer/cmd_draft": ("pending", []),
        "reviewer_a/cmd_check": ("waiting", ["draft.json"]),
    }
    before = cli("plan", "status", "plan_p", "--root", root).stdout
    assert "pending  plan_p/cmd_draft" in before
    assert "waiting  plan_p/cmd_check" in before and "missing: draft.json" in before
    assert "manager" not in before  # agents without commands in the plan are left out

    run = cli("run", "--root", root, "--service", "dry-run", "--until-idle")
    assert run.exit_code == 0, run.output

    assert states() == {
        "developer/cmd_draft": ("done", []),
        "reviewer_a/cmd_check": ("done", []),
    }
    after = cli("plan", "status", "plan_p", "--root", root).stdout
    assert "done     plan_p/cmd_draft" in after and "done     plan_p/cmd_check" in after
    assert (root / "agents/user/inbox/plan_p/cmd_check_from_reviewer_a.json").is_file()


# -- the example society -----------------------------------------------------------------------


def test_repo_root_example_is_identical_to_the_packaged_copy() -> None:
    packaged = example_dir()
    assert packaged.resolve() != REPO.resolve()
    packaged_files = {
        str(p.relative_to(packaged)): p.read_bytes()
        for p in packaged.rglob("*")
        if p.is_file() and p.name != ".gitkeep" and "__pycache__" not in p.parts
    }
    repo_files = {
        str(p.relative_to(REPO)): p.read_bytes()
        for p in [
            REPO / "config.yaml",
            *(REPO / "agents").glob("*/agent_profile.json"),
            *(REPO / "plans").iterdir(),
            *(REPO / "sessions").iterdir(),
        ]
        if p.is_file()
    }
    assert "config.yaml" in packaged_files
    assert "plans/consensus_review.json" in packaged_files
    assert "sessions/session_remote_work.json" in packaged_files
    assert len([f for f in packaged_files if f.endswith("agent_profile.json")]) == 10
    assert sorted(repo_files) == sorted(packaged_files)
    for name, data in packaged_files.items():
        assert repo_files[name] == data, f"{name} differs between the repo root and {packaged}"


def test_the_example_debate_runs_to_its_end_as_a_dry_run(tmp_path: Path) -> None:
    root = society(tmp_path)
    session = root / "agents" / "moderator" / "inbox" / "session_remote_work.json"
    session.write_bytes((root / "sessions" / "session_remote_work.json").read_bytes())

    result = cli("run", "--root", root, "--service", "dry-run", "--until-idle")

    assert result.exit_code == 0, result.output
    out = root / "agents" / "moderator" / "outbox" / "remote_work_debate"
    last = json.loads((out / "decisions.jsonl").read_text().splitlines()[-1])
    assert last["decision"]["action"] == "END_DISCUSSION"
    assert last["decision"]["reason"] == "all_phases_completed"
    assert "[dry run]" in (out / "transcript.md").read_text()
    assert (root / "agents" / "moderator" / "archive" / "done" / session.name).is_file()
