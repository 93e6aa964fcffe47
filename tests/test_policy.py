"""Policy files: parsing, first match wins, no match denies, safe prompts, errors naming lines."""

from __future__ import annotations

import ast
import inspect
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from askgate import Allow, Ask, Deny, Server
from askgate.core.jobs import Authorize, AuthorizeRead, FilterTools, RunTool
from askgate.core.sealing import arguments_digest
from askgate.demo import demo_policy
from askgate.policy import (
    _LINKISH,
    NO_READS_REASON,
    QUOTE_LIMIT,
    PolicyError,
    _defang,
    _escape_char,
    load_policy,
    parse_policy,
    quote,
    render_prompt,
    shown,
)
from askgate.transports.callbacks import runs_eagerly as marks_runs_eagerly
from askgate.transports.callbacks import wants_context
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


async def test_R_POL_1_the_first_matching_entry_decides() -> None:
    policy = parse_policy(POLICY)
    assert await policy.authorize("echo", {}, None) == Allow()
    assert await policy.authorize("fs.read", {"path": "/etc"}, None) == Ask(
        'Let "fs.read" touch "/etc"?'
    )
    assert await policy.authorize("rm", {}, None) == Deny("never")


async def test_R_POL_1_a_name_no_entry_matches_is_denied() -> None:
    policy = parse_policy(POLICY)
    assert await policy.authorize("echo2", {}, None) == Deny("no policy rule matches")
    assert await policy.authorize_read("tools/list", {}, None) == Deny("no policy rule matches")
    assert await parse_policy("").authorize("echo", {}, None) == Deny("no policy rule matches")


async def test_R_POL_1_reads_have_their_own_section() -> None:
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
    assert runs_eagerly(policy.visible)
    server = Server(
        "s",
        authorizer=policy.authorize,
        read_authorizer=policy.authorize_read,
        visibility=policy.visible,
    )
    assert server.runs_eagerly(Authorize("echo", {}))
    assert server.runs_eagerly(FilterTools(("echo",)))
    assert not Server("n", authorizer=policy.authorize).runs_eagerly(FilterTools(("echo",)))
    assert server.runs_eagerly(AuthorizeRead("tools/list", {}))
    assert not server.runs_eagerly(RunTool("echo", {}))

    async def never_awaits(_tool: str, _arguments: object, _context: object) -> Allow:
        return Allow()  # it would complete at once, but nothing says so: it gets a task

    async def shows_all(_tool: str, _context: object) -> bool:
        return True

    users = Server("u", authorizer=never_awaits, read_authorizer=never_awaits, visibility=shows_all)
    assert not users.runs_eagerly(Authorize("echo", {}))
    assert not users.runs_eagerly(FilterTools(("echo",)))
    assert not users.runs_eagerly(AuthorizeRead("tools/list", {}))


async def test_R_POL_3_a_missing_argument_is_shown_as_none() -> None:
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
def test_R_POL_3_quoted_arguments_are_escaped_to_one_line(value: object, shown: str) -> None:
    quoted = quote(value)
    assert quoted.startswith(shown)
    assert quoted.isprintable()
    assert "\n" not in quoted


async def test_R_POL_3_placeholders_look_up_arguments_never_attributes() -> None:
    policy = parse_policy('[[tools]]\nmatch = "*"\ndecision = "ask"\nprompt = "{args.__class__}"\n')
    assert await policy.authorize("t", {}, None) == Ask("(none)")
    assert await policy.authorize("t", {"__class__": "x"}, None) == Ask('"x"')


def test_R_POL_3_quoted_arguments_are_truncated_and_say_how_much_was_cut() -> None:
    quoted = quote("x" * 100_000)
    assert quoted == '"' + "x" * QUOTE_LIMIT + f'…" (and {100_000 - QUOTE_LIMIT} more bytes)'
    assert quote("é" * (QUOTE_LIMIT + 3)).endswith('…" (and 6 more bytes)')  # bytes, in UTF-8
    assert quote("x" * QUOTE_LIMIT) == '"' + "x" * QUOTE_LIMIT + '"'


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("[link](https://evil.example)", '"[link]\\(https:\\/\\/evil.example)"'),
        ("![img](x)", '"![img]\\(x)"'),
        ("[a](b) and [c] (d)", '"[a]\\(b) and [c] (d)"'),
        ("<a href=x>", '"\\<a href=x\\>"'),
        ("<https://evil.example>", '"\\<https:\\/\\/evil.example\\>"'),
        ("see https://evil.example/x", '"see https:\\/\\/evil.example/x"'),
        ("go to WWW.evil.example", '"go to WWW\\.evil.example"'),
        ("mail admin@evil.example", '"mail admin\\@evil.example"'),
        ("back\\<", '"back\\\\\\<"'),  # the value's backslash escaped, then R-POL-6's
        ({"u": "http://x", "v": [1]}, '"{\\"u\\":\\"http:\\/\\/x\\",\\"v\\":[1]}"'),
    ],
)
def test_R_POL_6_quoted_values_cannot_render_as_links(value: object, shown: str) -> None:
    quoted = quote(value)
    assert quoted == shown
    assert "://" not in quoted
    assert "](" not in quoted
    assert "www." not in quoted.lower()
    for markup in "<>@":
        assert markup not in quoted.replace("\\" + markup, "")


async def test_R_POL_6_a_cut_prompt_says_how_much_and_names_the_whole_call() -> None:
    policy = parse_policy(POLICY)
    path = "/tmp/" + "a" * 10_000
    decision = await policy.authorize("fs.delete", {"path": path}, None)
    assert isinstance(decision, Ask)
    digest = arguments_digest({"path": path})[:16]
    more = len(path) - QUOTE_LIMIT
    assert decision.prompt.endswith(f'…" (and {more} more bytes)? (arguments sha256:{digest})')
    other = await policy.authorize("fs.delete", {"path": path + "b"}, None)
    assert isinstance(other, Ask)
    assert other.prompt != decision.prompt  # same first 200 characters, told apart
    short = await policy.authorize("fs.delete", {"path": "/tmp/a"}, None)
    assert short == Ask('Let "fs.delete" touch "/tmp/a"?')  # nothing cut: no digest
    assert render_prompt("{args.x}", "t", {"x": "y" * 300, "z": math.nan}).endswith(
        "(arguments sha256:unavailable)"
    )


async def test_R_POL_3_a_hostile_argument_cannot_forge_the_prompt() -> None:
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
        (
            '[[tools]]\nmatch = "a"\ndecision = "allow"\n\n[[tools]]\nmatch = "b"\n',
            5,
            "has no decision",
        ),
        (
            '[[tools]]\nmatch = "a"\ndecision = "alow"\n',
            3,
            "'alow': decision must be one of allow, ask, deny",
        ),
        ('[[tools]]\nmatch = "a"\ndecision = "deny"\n', 3, "a deny needs a reason"),
        ('[[tools]]\nmatch = "a"\ndecision = "deny"\nreason = ""\n', 4, "a deny needs a reason"),
        ('[[tools]]\nmatch = "a"\ndecision = "ask"\n', 3, "an ask needs a prompt"),
        (
            '\n[[tools]]\nmatch = "a"\ndecision = "ask"\nprompt = "{args.a.b}"\n',
            5,
            "only {tool} and {args.NAME}",
        ),
        ('[[tools]]\nmatch = "a"\ndecision = "ask"\nprompt = "{0}"\n', 4, "{0}"),
        (
            '[[tools]]\nmatch = "a"\ndecision = "ask"\nprompt = "Delete {args.title?"\n',
            4,
            "the prompt has a { that no } closes, at '{args.title?'",
        ),
        (
            '[[tools]]\nmatch = "a"\ndecision = "ask"\nprompt = "Run {tool} on {args.x"\n',
            4,
            "no } closes, at '{args.x'",
        ),
        (
            '[[tools]]\nmatch = "a"\ndecision = "ask"\nprompt = "Run {args.x {tool}?"\n',
            4,
            "no } closes, at '{args.x {tool}?'",
        ),
        (
            '[[tools]]\nmatch = "a"\ndecision = "ask"\nprompt = "p"\nreason = "r"\n',
            5,
            "not a reason",
        ),
        (
            '[[tools]]\nmatch = "a"\ndecision = "deny"\nprompt = "p"\nreason = "r"\n',
            4,
            "not a prompt",
        ),
        ('[[tools]]\nmatch = "a"\ndecision = "allow"\nreason = "x"\n', 4, "neither"),
        ('[[tools]]\nmatch = ""\ndecision = "allow"\n', 2, "match must be"),
        ('[[tools]]\ndecision = "allow"\n', 1, "has no match"),
        ('[[tools]]\nmatch = "a"\ndecision = "allow"\nwhen = 1\n', 4, "unknown key 'when'"),
        ('\n\n[[tool]]\nmatch = "a"\n', 3, "unknown section 'tool'"),
        ('tools = "all"\n', 1, "must be an array of tables"),
        ('\n[tools]\nmatch = "a"\n', 2, "must be an array of tables"),
        ('[[reads]]\nmatch = "*"\ndecision = "ask"\n', 3, "an ask needs a prompt"),
        ('[[tools]]\nmatch = "a"\ndecision = "allow"\n\n[[tools\n', 5, "not valid TOML"),
        ('[[tools]]\nmatch = "a"\nmatch = "b"\n', 3, "not valid TOML"),
    ],
)
def test_R_POL_4_a_malformed_policy_is_refused_naming_the_line(
    text: str, line: int, problem: str
) -> None:
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


def test_the_policy_reference_shows_the_shipped_demo_policy() -> None:
    readme = (Path(__file__).parent.parent / "docs" / "policy.md").read_text(encoding="utf-8")
    shipped = (Path(__file__).parent.parent / "askgate" / "demo_policy.toml").read_text()
    assert shipped.strip() in readme


def test_R_POL_4_serve_refuses_a_malformed_policy_file_with_exit_2(tmp_path: Path) -> None:
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
    assert b"policy.toml, line 3: [[tools]] entry 1: decision = 'maybe'" in done.stderr
    assert b"decision must be one of allow, ask, deny" in done.stderr


@given(st.text(max_size=300))
def test_quoting_takes_a_shortcut_only_where_nothing_needs_escaping(text: str) -> None:
    """quote() skips the per-character escape for printable ASCII without quotes or
    backslashes; the result is what escaping every character gives."""
    slow = _LINKISH.sub(_defang, "".join(_escape_char(ch) for ch in text[:QUOTE_LIMIT]))
    rest = text[QUOTE_LIMIT:].encode("utf-8", "surrogatepass")
    cut = f'…" (and {len(rest)} more bytes)' if rest else '"'
    assert quote(text) == f'"{slow}{cut}'


def test_the_policy_module_imports_only_the_core_and_the_marks_on_callbacks() -> None:
    """askgate.policy decides with the core's values and marks its authorizers for the shell
    (askgate.transports.callbacks, which imports nothing); it needs no other part of the shell."""
    source = Path(inspect.getfile(parse_policy)).read_text(encoding="utf-8")
    imported = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.append(node.module)
        elif isinstance(node, ast.Import):
            imported.extend(alias.name for alias in node.names)
    ours = [name for name in imported if name.split(".")[0] == "askgate"]
    assert ours, imported
    marks = "askgate.transports.callbacks"
    assert all(name.startswith("askgate.core") or name == marks for name in ours), ours
    assert runs_eagerly is marks_runs_eagerly  # the runtime reads the mark policy.py sets


async def test_the_policy_tool_authorizer_is_given_no_context_and_decides_the_same() -> None:
    policy = parse_policy(POLICY)
    assert not wants_context(policy.authorize)  # the shell builds no Context for it

    def plain(_tool: str, _arguments: object, _context: object) -> object:
        return None

    assert wants_context(plain)  # every other callback gets its Context
    assert wants_context(policy.authorize_read)
    assert await policy.authorize("echo", {}, None) == Allow()
    assert await policy.authorize("rm", {}, None) == await policy.authorize("rm", {}, object())


async def test_R_POL_1_tools_list_shows_what_the_first_matching_tools_entry_does_not_deny() -> None:
    policy = parse_policy(POLICY)
    assert await policy.visible("echo", None) is True  # allow
    assert await policy.visible("fs.read", None) is True  # ask (fs.* comes first)
    assert await policy.visible("rm", None) is False  # deny
    assert await policy.visible("unmatched", None) is False  # no entry: denied, not shown
    shadowed = parse_policy(
        '[[tools]]\nmatch = "a*"\ndecision = "deny"\nreason = "no"\n'
        '[[tools]]\nmatch = "ab"\ndecision = "allow"\n'
    )
    assert await shadowed.visible("ab", None) is False  # the first match decides


async def test_R_POL_2_a_file_without_reads_allows_listing_and_denies_every_other_read() -> None:
    policy = parse_policy('[[tools]]\nmatch = "echo"\ndecision = "allow"\n', "p.toml")
    for method in ("tools/list", "resources/list", "resources/templates/list", "prompts/list"):
        assert await policy.authorize_read(method, {}, None) == Allow(), method
    for method in ("resources/read", "prompts/get", "completion/complete", "logging/setLevel"):
        assert await policy.authorize_read(method, {}, None) == Deny(NO_READS_REASON), method
    assert NO_READS_REASON == "the policy file has no [[reads]] entry for this method"
    assert policy.notices == (
        "p.toml has no [[reads]] entry: tools/list, resources/list, resources/templates/list, "
        "prompts/list are allowed, every other read (resources/read, prompts/get, ...) is denied",
    )
    assert policy.warnings == ()
    empty = parse_policy("reads = []\n")
    assert await empty.authorize_read("prompts/list", {}, None) == Allow()
    strict = parse_policy('[[reads]]\nmatch = "resources/read"\ndecision = "allow"\n')
    assert await strict.authorize_read("tools/list", {}, None) == Deny("no policy rule matches")
    assert strict.notices == ()


@pytest.mark.parametrize(
    ("value", "shown_as"),
    [
        (5, "5"),
        (-3, "-3"),
        (2.5, "2.5"),
        (1e100, "1e+100"),
        (True, "true"),
        (False, "false"),
        (None, "null"),
        ("5", '"5"'),
        ("two\nlines", '"two\\u000alines"'),
        ({"n": 1}, '"{\\"n\\":1}"'),
        ([1, "a"], '"[1,\\"a\\"]"'),
        (float("nan"), '"NaN"'),
        # too long for a literal: quoted, cut, and the prompt ends with the digest (R-POL-6)
        (10**250, '"' + "1" + "0" * (QUOTE_LIMIT - 1) + '…" (and 51 more bytes)'),
    ],
)
async def test_R_POL_3_numbers_booleans_and_null_are_shown_as_json_literals(
    value: object, shown_as: str
) -> None:
    policy = parse_policy('[[tools]]\nmatch = "*"\ndecision = "ask"\nprompt = "n={args.n}"\n')
    decision = await policy.authorize("t", {"n": value}, None)
    assert isinstance(decision, Ask)
    assert decision.prompt.startswith(f"n={shown_as}")
    rest = decision.prompt[len(f"n={shown_as}") :]
    if value == 10**250:
        assert rest == f" (arguments sha256:{arguments_digest({'n': value})[:16]})"
    else:
        assert rest == ""
    assert shown(value) == shown_as


def test_R_POL_4_every_message_names_file_line_entry_key_and_what_is_allowed() -> None:
    text = (
        "# two good entries, then a typo on line 7\n"
        '[[tools]]\nmatch = "a"\ndecision = "allow"\n'
        '[[tools]]\nmatch = "b"\ndecision = "alow"\n'
    )
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, "p.toml")
    assert str(refused.value) == (
        "p.toml, line 7: [[tools]] entry 2: decision = 'alow': decision must be one of "
        "allow, ask, deny"
    )
    with pytest.raises(PolicyError) as unknown:
        parse_policy('[[reads]]\nmatch = "*"\n"decision" = "allow"\nwhy = "x"\n', "p.toml")
    assert str(unknown.value) == (
        "p.toml, line 4: [[reads]] entry 1: unknown key 'why' (the keys are match, decision, "
        "prompt, reason, literal)"
    )
    with pytest.raises(PolicyError) as section:
        parse_policy('[[tool]]\nmatch = "*"\n', "p.toml")
    assert str(section.value) == (
        "p.toml, line 1: unknown section 'tool' (the sections are [[tools]] and [[reads]])"
    )


def test_R_POL_4_a_file_that_is_not_utf8_names_the_line_of_the_bad_byte(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'[[tools]]\nmatch = "\xff"\n')
    with pytest.raises(PolicyError) as refused:
        load_policy(bad)
    assert str(refused.value) == f"{bad}, line 2: not UTF-8 (byte 19)"


def test_R_POL_5_an_ask_on_a_read_and_a_shadowed_entry_are_warned_about() -> None:
    text = (
        '[[tools]]\nmatch = "*"\ndecision = "allow"\n'  # lines 1-3
        '[[tools]]\nmatch = "rm"\ndecision = "deny"\nreason = "no"\n'  # 4-7: never applies
        '[[reads]]\nmatch = "resources/read"\ndecision = "ask"\nprompt = "read?"\n'  # 8-11
        '[[reads]]\nmatch = "resources/read"\ndecision = "allow"\n'  # 12-14: same match
    )
    policy = parse_policy(text, "p.toml")
    assert policy.warnings == (
        "p.toml, line 4: [[tools]] entry 2 (match = 'rm') never applies: entry 1 on line 1 "
        "(match = '*') comes first and matches every name it matches",
        "p.toml, line 8: [[reads]] entry 1 (match = 'resources/read') asks, but a read is "
        "never parked: the client is denied ('interactive approval unsupported'); write allow "
        "or deny",
        "p.toml, line 12: [[reads]] entry 2 (match = 'resources/read') never applies: entry 1 "
        "on line 8 (match = 'resources/read') comes first and matches every name it matches",
    )
    assert policy.notices == ()
    assert parse_policy(POLICY).warnings == ()  # fs.read after fs.* is not caught: a glob


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "tools = []\n"])
def test_R_POL_5_a_file_without_tools_entries_is_warned_about(text: str) -> None:
    assert parse_policy(text, "p.toml").warnings == (
        "p.toml, line 1: no [[tools]] entry: every tool is denied and hidden "
        '(write [[tools]] entries, match = "*" for a default)',
    )


def test_R_POL_5_serve_logs_the_warnings_and_the_reads_default_at_start(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        '[[tools]]\nmatch = "*"\ndecision = "allow"\n'
        '[[tools]]\nmatch = "echo"\ndecision = "allow"\n'
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "askgate",
            "serve",
            "--demo",
            "--log-level=info",
            f"--policy={policy}",
        ],
        input=b"",
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.decode().splitlines()
    assert f"askgate WARNING askgate: {policy}, line 4: [[tools]] entry 2 (match = 'echo') " in (
        "".join(line for line in lines if "never applies" in line)
    )
    assert any(
        line.startswith(f"askgate INFO askgate: {policy} has no [[reads]] entry: tools/list")
        for line in lines
    ), lines
