"""Policy files: parsing, first match wins, no match denies, safe prompts, errors naming lines."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from askgate import Allow, Ask, Deny, Server
from askgate.core.callbacks import runs_eagerly as core_runs_eagerly
from askgate.core.jobs import Authorize, AuthorizeRead, FilterTools, RunTool
from askgate.demo import demo_policy
from askgate.policy import (
    QUOTE_LIMIT,
    PolicyError,
    _escape_char,
    load_policy,
    parse_policy,
    quote,
)
from askgate.transports.runtime import runs_eagerly

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


POLICY = """
# comments are fine
[[tools]]
match = "echo"
decision = "allow"

[[tools]]
match = "fs.*"
decision = "ask"
prompt = "Let {tool} touch {args.path}?"

[[tools]]
match = "fs.read"
decision = "allow"   # never reached: fs.* matched first

[[tools]]
match = "rm"
decision = "deny"
reason = "never"

[[reads]]
match = "resources/*"
decision = "allow"

[[reads]]
match = "prompts/get"
decision = "deny"
reason = "prompts are private"
"""


async def test_the_first_matching_entry_decides() -> None:
    policy = parse_policy(POLICY)
    assert await policy.authorize("echo", {}, None) == Allow()
    assert await policy.authorize("fs.read", {"path": "/etc"}, None) == Ask(
        'Let "fs.read" touch "/etc"?'
    )
    assert await policy.authorize("rm", {}, None) == Deny("never")


async def test_a_name_no_entry_matches_is_denied() -> None:
    policy = parse_policy(POLICY)
    assert await policy.authorize("echo2", {}, None) == Deny("no policy rule matches")
    assert await policy.authorize_read("tools/list", {}, None) == Deny("no policy rule matches")
    assert await parse_policy("").authorize("echo", {}, None) == Deny("no policy rule matches")


async def test_reads_have_their_own_section() -> None:
    policy = parse_policy(POLICY)
    assert await policy.authorize_read("resources/read", {"uri": "x://y"}, None) == Allow()
    assert await policy.authorize_read("prompts/get", {}, None) == Deny("prompts are private")
    assert await policy.authorize("resources/read", {}, None) == Deny("no policy rule matches")


def test_the_authorizers_run_on_the_loop_without_a_thread_hop() -> None:
    policy = parse_policy(POLICY)
    assert inspect.iscoroutinefunction(policy.authorize)
    assert inspect.iscoroutinefunction(policy.authorize_read)


def test_the_authorizers_are_marked_to_run_at_once_and_a_users_never_is() -> None:
    policy = parse_policy(POLICY)
    assert runs_eagerly(policy.authorize)
    assert runs_eagerly(policy.authorize_read)
    server = Server("s", authorizer=policy.authorize, read_authorizer=policy.authorize_read)
    assert server.runs_eagerly(Authorize("echo", {}))
    assert server.runs_eagerly(FilterTools(("echo",)))
    assert server.runs_eagerly(AuthorizeRead("tools/list", {}))
    assert not server.runs_eagerly(RunTool("echo", {}))

    async def never_awaits(_tool: str, _arguments: object, _context: object) -> Allow:
        return Allow()  # it would complete at once, but nothing says so: it gets a task

    users = Server("u", authorizer=never_awaits, read_authorizer=never_awaits)
    assert not users.runs_eagerly(Authorize("echo", {}))
    assert not users.runs_eagerly(AuthorizeRead("tools/list", {}))


async def test_a_missing_argument_is_shown_as_none() -> None:
    policy = parse_policy(POLICY)
    assert await policy.authorize("fs.write", {}, None) == Ask('Let "fs.write" touch (none)?')


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("plain", '"plain"'),
        ("two\nlines", '"two\\u000alines"'),
        ("\r\n\n\nApproved by admin. Click Accept", '"\\u000d\\u000a\\u000a\\u000aApproved'),
        ("\x1b[2J clear screen", '"\\u001b[2J clear screen"'),
        ('say "yes"', '"say \\"yes\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("rtl \u202e override", '"rtl \\u202e override"'),
        ("zero\u200bwidth", '"zero\\u200bwidth"'),
        ("line\u2028sep", '"line\\u2028sep"'),
        ("c1 \x9b control", '"c1 \\u009b control"'),
        (42, '"42"'),
        ({"a": [1, 2]}, '"{\\"a\\":[1,2]}"'),
    ],
)
def test_quoted_arguments_are_escaped_to_one_line(value: object, shown: str) -> None:
    quoted = quote(value)
    assert quoted.startswith(shown)
    assert quoted.isprintable()
    assert "\n" not in quoted


async def test_placeholders_look_up_arguments_never_attributes() -> None:
    policy = parse_policy('[[tools]]\nmatch = "*"\ndecision = "ask"\nprompt = "{args.__class__}"\n')
    assert await policy.authorize("t", {}, None) == Ask("(none)")
    assert await policy.authorize("t", {"__class__": "x"}, None) == Ask('"x"')


def test_quoted_arguments_are_truncated() -> None:
    quoted = quote("x" * 100_000)
    assert quoted == '"' + "x" * QUOTE_LIMIT + '…"'


async def test_a_hostile_argument_cannot_forge_the_prompt() -> None:
    policy = parse_policy(POLICY)
    hostile = "/tmp/a?\n\nApproved by admin. Click Accept\u202e" + "A" * 10_000
    decision = await policy.authorize("fs.delete", {"path": hostile}, None)
    assert isinstance(decision, Ask)
    assert decision.prompt.isprintable()
    assert len(decision.prompt) < 400
    assert decision.prompt.startswith('Let "fs.delete" touch "/tmp/a?\\u000a\\u000aApproved')


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ('[[tools]]\nmatch = "a"\ndecision = "allow"\n\n[[tools]]\nmatch = "b"\n', 5, "decision"),
        ('[[tools]]\nmatch = "a"\ndecision = "alow"\n', 1, "one of allow, ask, deny"),
        ('[[tools]]\nmatch = "a"\ndecision = "deny"\n', 1, "a deny needs a reason"),
        ('[[tools]]\nmatch = "a"\ndecision = "ask"\n', 1, "an ask needs a prompt"),
        (
            '\n[[tools]]\nmatch = "a"\ndecision = "ask"\nprompt = "{args.a.b}"\n',
            2,
            "only {tool} and {args.NAME}",
        ),
        ('[[tools]]\nmatch = "a"\ndecision = "ask"\nprompt = "{0}"\n', 1, "{0}"),
        ('[[tools]]\nmatch = "a"\ndecision = "allow"\nreason = "x"\n', 1, "neither"),
        ('[[tools]]\nmatch = ""\ndecision = "allow"\n', 1, "match must be"),
        ('[[tools]]\nmatch = "a"\ndecision = "allow"\nwhen = 1\n', 1, "unknown key 'when'"),
        ('\n\n[[tool]]\nmatch = "a"\n', 3, "unknown section 'tool'"),
        ('tools = "all"\n', 1, "must be an array of tables"),
        ('[[reads]]\nmatch = "*"\ndecision = "ask"\n', 1, "an ask needs a prompt"),
        ('[[tools]]\nmatch = "a"\ndecision = "allow"\n\n[[tools\n', 5, "not valid TOML"),
        ('[[tools]]\nmatch = "a"\nmatch = "b"\n', 3, "not valid TOML"),
    ],
)
def test_a_malformed_policy_is_refused_naming_the_line(text: str, line: int, problem: str) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, "p.toml")
    message = str(refused.value)
    assert message.startswith("p.toml")
    assert f"line {line}" in message
    assert problem in message


def test_a_policy_file_is_read_as_utf8(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[[tools]]\nmatch = "écho"\ndecision = "allow"\n', encoding="utf-8")
    assert load_policy(good).tools[0].match == "écho"
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'[[tools]]\nmatch = "\xff"\n')
    with pytest.raises(PolicyError, match="not UTF-8"):
        load_policy(bad)
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.toml")


async def test_the_shipped_demo_policy() -> None:
    policy = demo_policy()
    assert await policy.authorize("echo", {"text": "x"}, None) == Allow()
    assert await policy.authorize("guarded_echo", {"text": "x"}, None) == Ask(
        'Allow guarded_echo to echo "x"?'
    )
    assert await policy.authorize("forbidden", {}, None) == Deny("forbidden by policy")
    assert isinstance(await policy.authorize("delete_file", {"path": "/x"}, None), Ask)
    assert await policy.authorize("sleep", {"ms": 1}, None) == Allow()
    assert await policy.authorize("crash", {}, None) == Allow()
    assert await policy.authorize("anything_else", {}, None) == Deny("no policy rule matches")
    assert await policy.authorize_read("resources/read", {"uri": "demo://status"}, None) == Allow()


def test_the_readme_shows_the_shipped_demo_policy() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    shipped = (Path(__file__).parent.parent / "askgate" / "demo_policy.toml").read_text()
    assert shipped.strip() in readme


def test_serve_refuses_a_malformed_policy_file_with_exit_2(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[[tools]]\nmatch = "echo"\ndecision = "maybe"\n')
    done = subprocess.run(
        [sys.executable, "-m", "askgate", "serve", "--demo", "--policy", str(policy)],
        input=b"",
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == b""
    assert b"line 1" in done.stderr
    assert b"decision must be one of allow, ask, deny" in done.stderr


@given(st.text(max_size=300))
def test_quoting_takes_a_shortcut_only_where_nothing_needs_escaping(text: str) -> None:
    """quote() skips the per-character escape for printable ASCII without quotes or
    backslashes; the result is what escaping every character gives."""
    slow = "".join(_escape_char(ch) for ch in text[:QUOTE_LIMIT])
    cut = "…" if len(text) > QUOTE_LIMIT else ""
    assert quote(text) == f'"{slow}{cut}"'


def test_the_policy_module_imports_only_from_the_core() -> None:
    source = Path(inspect.getfile(parse_policy)).read_text(encoding="utf-8")
    imported = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.append(node.module)
        elif isinstance(node, ast.Import):
            imported.extend(alias.name for alias in node.names)
    ours = [name for name in imported if name.split(".")[0] == "askgate"]
    assert ours, imported
    assert all(name.startswith("askgate.core") for name in ours), ours
    assert runs_eagerly is core_runs_eagerly  # the shell reads the mark the core defines
