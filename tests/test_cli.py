"""The ``askgate`` command and the README's walkthrough, held to the same truth.

The walkthrough's files are read out of README.md (each fenced block after a
``<!-- file: NAME -->`` line), so the README and this test cannot drift. Servers run as
subprocesses on 127.0.0.1; every wait is on a line of output or the process's exit, under a
deadline, and a signal is sent only once the server has answered a request.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shlex
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from askgate import Allow, Server
from askgate.__main__ import _OPTION_FLAGS, HTTP_ONLY, _parse, _parser, load_target, main
from askgate.core import Options

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
SERVING = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
DEADLINE = 60.0
BIN = str(Path(sys.executable).parent)  # the venv's askgate and python


def readme_files() -> dict[str, str]:
    """The README's walkthrough files: each fenced block just after ``<!-- file: NAME -->``."""
    found = re.findall(r"<!-- file: (\S+) -->\n```[a-z]*\n(.*?)```\n", README, re.DOTALL)
    return dict(found)


def walkthrough(tmp_path: Path) -> dict[str, str]:
    """Writes the walkthrough's files into ``tmp_path``, an empty folder; returns the environment
    the README assumes (the venv's bin on PATH)."""
    files = readme_files()
    assert set(files) == {"server.py", "policy.toml", "client.py"}
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    env = dict(os.environ)
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    return env


def walkthrough_commands() -> list[list[str]]:
    """The serve commands of the walkthrough's shell block, split as a shell would."""
    section = README.partition("## Your own server in five minutes")[2].partition("\n## ")[0]
    block = section.partition("```sh\n")[2].partition("```")[0]
    return [shlex.split(line) for line in block.splitlines() if line.strip()]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def read_line(stream: Any, what: str) -> str:
    """The next line of a subprocess's pipe, waited for under the deadline."""
    ready, _, _ = select.select([stream], [], [], DEADLINE)
    assert ready, f"no {what} within {DEADLINE} s"
    line: str = stream.readline()
    return line


def check_client_run(output: str) -> None:
    """What client.py prints: the tool listed, an approved call's result, a declined call's
    deny."""
    lines = output.splitlines()
    assert lines[0] == "tools: delete_note"
    digest = r" \(arguments digest [0-9a-f]{12}\)"  # R-DLV-5
    assert re.fullmatch(
        f'Delete the note "shopping"\\?{digest} \\[y/n\\] '
        "delete_note shopping: ok: deleted 'shopping'",
        lines[1],
    ), lines[1]
    assert re.match(
        f'Delete the note "recipes"\\?{digest} \\[y/n\\] delete_note recipes: refused: ', lines[2]
    ), lines[2]
    assert '"decision":"ask"' in lines[2]
    assert '"detail":"declined"' in lines[2]
    assert len(lines) == 3
    # The README shows this run's output: its deny line is the one the client printed.
    shown = next(line for line in README.splitlines() if line.startswith("delete_note recipes:"))
    assert lines[2].endswith(shown)


def test_the_readme_walkthrough_over_stdio(tmp_path: Path) -> None:
    """From an empty folder, following the README: client.py starts
    `askgate serve server.py:server --policy policy.toml` over stdio, lists the tool, and the
    server asks before each call: approved, the result; declined, the deny."""
    env = walkthrough(tmp_path)
    stdio, _ = walkthrough_commands()
    assert stdio == ["askgate", "serve", "server.py:server", "--policy", "policy.toml"]
    assert 'serve = ["serve", "server.py:server", "--policy", "policy.toml"]' in (
        (tmp_path / "client.py").read_text()
    )
    done = subprocess.run(
        [sys.executable, "client.py"],
        cwd=tmp_path,
        env=env,
        input="y\nn\n",
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    check_client_run(done.stdout)


SERVER = ("--server", "server.py:server")


def test_R_POL_9_the_readme_tutorial_policy_passes_its_own_check(tmp_path: Path) -> None:
    """`askgate policy check policy.toml --server server.py:server`, in the tutorial's folder,
    finds nothing: the tutorial teaches a file the checker has nothing to say about."""
    env = walkthrough(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "askgate", "policy", "check", "policy.toml", *SERVER],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert (done.stdout, done.returncode) == ("no findings\n", 0)


def test_the_readme_walkthrough_over_http(tmp_path: Path) -> None:
    """The same over Streamable HTTP: the README's `--http 127.0.0.1:8765` command on a free
    port, client.py given the URL; then Ctrl-C (SIGINT) stops the server: exit 0, no
    traceback."""
    env = walkthrough(tmp_path)
    _, http = walkthrough_commands()
    assert http[-2:] == ["--http", "127.0.0.1:8765"]
    port = free_port()
    command = [*http[:-1], f"127.0.0.1:{port}", "--log-level", "info"]
    command[0] = str(Path(BIN) / "askgate")
    server = subprocess.Popen(
        command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True, bufsize=1
    )
    try:
        assert server.stderr is not None
        while "serving Streamable HTTP on" not in (line := read_line(server.stderr, "log")):
            assert line, "the server ended before it listened"
        assert f"http://127.0.0.1:{port}/mcp" in line
        done = subprocess.run(
            [sys.executable, "client.py", f"http://127.0.0.1:{port}/mcp"],
            cwd=tmp_path,
            env=env,
            input="y\nn\n",
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        check_client_run(done.stdout)
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=DEADLINE) == 0
        rest = server.stderr.read()
        assert "Traceback" not in rest
        assert "stopped by SIGINT" in rest
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=DEADLINE)


def _serve_actions() -> list[argparse.Action]:
    parser = _parser()
    commands = next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    serve = commands.choices["serve"]
    return [action for action in serve._actions if action.dest != "help"]


def test_every_serve_flag_is_in_the_serving_doc_and_shows_its_default_in_help() -> None:
    actions = _serve_actions()
    assert {flag for flag, _, _ in _OPTION_FLAGS} <= {
        option for action in actions for option in action.option_strings
    }
    synopsis = SERVING.partition("The whole synopsis")[2].partition("```\n\n")[0]
    for action in actions:
        name = action.option_strings[0] if action.option_strings else action.metavar
        assert isinstance(name, str)
        assert name in synopsis, name
        assert action.help is not None
        assert "(default: " in action.help or "(the default)" in action.help, name
    # The reducer's defaults come from askgate.core's Options.
    helps = {action.option_strings[0]: action.help for action in actions if action.option_strings}
    for flag, dest, _ in _OPTION_FLAGS:
        default = getattr(Options(), dest)
        if default is not None:
            assert f"(default: {default})" in str(helps[flag]), flag
    assert "(default: half of --max-in-flight" in str(helps["--max-in-flight-per-connection"])
    # Every exit status the command can return is documented, in --help and in docs/serving.md.
    epilog = _parser().epilog or ""
    for status in ("0", "1", "2", "3"):
        assert f"\n  {status}  " in epilog
        assert f"\n| {status} | " in SERVING


def test_serve_needs_one_target_and_refuses_bad_ones_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cli_target_mod.py").write_text(
        "from askgate import Server\n"
        "server = Server('mod')\n"
        "number = 3\n"
        "def make():\n    return Server('made')\n"
        "def make_wrong():\n    return 3\n"
    )
    (tmp_path / "cli_target_broken.py").write_text("raise ValueError('broken on import')\n")
    (tmp_path / "cli_target_serves.py").write_text(
        "from askgate import Server\nserver = Server('s')\nraise SystemExit(server.run_stdio())\n"
    )
    (tmp_path / "cli_target_options.py").write_text(
        "from askgate import Server\nserver = Server('o', max_parked_elicitations=0)\n"
    )
    (tmp_path / "uvicorn.py").write_text("from askgate import Server\nserver = Server('u')\n")

    def refused(*argv: str) -> str:
        assert main(["serve", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert "Traceback" not in err
        return err

    assert "give TARGET" in refused()
    assert "--demo" in refused()
    assert refused("cli_target_mod:server", "--demo") == (
        "askgate: give TARGET or --demo, not both\n"
    )
    for bad in ("cli_target_mod", "cli_target_mod:", ":server"):
        assert refused(bad).startswith("askgate: TARGET wants module:attribute or"), bad
    assert "no module named 'cli_target_nope'" in refused("cli_target_nope:server")
    assert "no file nope.py" in refused("nope.py:server")
    assert "has no attribute 'nothing'" in refused("cli_target_mod.py:nothing")
    assert "is int, not an askgate Server" in refused("cli_target_mod:number")
    assert "returned int, not an askgate Server" in refused("cli_target_mod:make_wrong")
    # A module that serves when imported would ignore every flag (--policy, --http).
    assert "serves when imported" in refused("cli_target_serves.py:server", "--http", "x:1")
    # The module's own options are named as the module wrote them, not as flags.
    assert refused("cli_target_options.py:server") == (
        "askgate refuses to start: cli_target_options.py: option max_parked_elicitations=0: "
        "must be at least 1\n"
    )
    # A file named as a module askgate runs on would hide it.
    assert "has the name of the module uvicorn" in refused("uvicorn.py:server", "--http", "x:1")
    # The user's own code failing: its traceback, then one line saying who raised.
    assert main(["serve", "cli_target_broken.py:server"]) == 2
    err = capsys.readouterr().err
    assert "ValueError: broken on import" in err
    assert err.endswith(
        "askgate refuses to start: cli_target_broken.py raised ValueError (traceback above)\n"
    )


def test_serve_loads_a_server_a_factory_and_sibling_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file's folder goes on sys.path (its sibling imports work); a module is imported from
    the current folder; a callable is called for the Server."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    app = tmp_path / "app"
    app.mkdir()
    (app / "cli_sibling_names.py").write_text("NAME = 'sibling'\n")
    (app / "cli_sibling_main.py").write_text(
        "from askgate import Server\nfrom cli_sibling_names import NAME\n"
        "server = Server(NAME)\ndef build():\n    return Server('built')\n"
    )
    assert load_target(f"{app / 'cli_sibling_main.py'}:server").name == "sibling"
    monkeypatch.chdir(app)
    assert load_target("cli_sibling_main:build").name == "built"


def test_http_only_flags_are_refused_without_http(capsys: pytest.CaptureFixture[str]) -> None:
    values = {"--auth": ["bearer"], "--tokens": ["t"], "--allow-origin": ["http://x"]}
    values |= {"--allow-host": ["x"], "--banner": []}
    assert set(values) == set(HTTP_ONLY)
    for flag in HTTP_ONLY:
        assert main(["serve", "--demo", flag, *values[flag]]) == 2, flag
        err = capsys.readouterr().err
        assert err == f"askgate: {flag} applies to --http only (stdio has no network)\n"
    assert main(["serve", "--demo", "--http", "127.0.0.1:1", "--backend", "trio"]) == 2
    assert capsys.readouterr().err == (
        "askgate: --backend trio serves stdio only; --http runs on asyncio\n"
    )


def test_a_port_in_use_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--demo", "--http", f"127.0.0.1:{port}"]) == 2
        assert capsys.readouterr().err == (
            f"askgate refuses to start: cannot listen on 127.0.0.1:{port}: address already in use\n"
        )
        server = Server(
            "x",
            authorizer=lambda *_: Allow(),
            authorizer_source="configured",
            read_authorizer=lambda *_: Allow(),
        )
        assert server.run_http("127.0.0.1", port) == 2
        assert "address already in use" in capsys.readouterr().err


def test_a_refusal_at_start_is_a_message_and_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    """run_stdio and run_http print why they refuse to start and return 2, no traceback."""
    server = Server("files")

    @server.tool(annotations={"destructiveHint": True})
    def delete_file(path: str) -> str:
        return path

    assert server.run_stdio() == 2
    err = capsys.readouterr().err
    assert err.startswith("askgate refuses to start: option authorizer=None: ")
    assert "delete_file" in err
    assert err.count("\n") == 1
    assert server.run_http("127.0.0.1", 70000) == 2
    assert capsys.readouterr().err == (
        "askgate refuses to start: port=70000 must be an integer from 0 to 65535\n"
    )
    assert server.run_http("127.0.0.1", 0) == 2  # nobody configured its authorizers
    err = capsys.readouterr().err
    assert "no tool authorizer was configured" in err
    assert "--policy" not in err  # a Python caller reads Python's words
    assert server.run_http("127.0.0.1", 0, backend="trio") == 2
    assert "backend='trio'" in capsys.readouterr().err


def test_the_command_names_the_flag_a_sensitive_tool_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = readme_files()
    (tmp_path / "walk_server.py").write_text(files["server.py"])
    assert main(["serve", f"{tmp_path / 'walk_server.py'}:server"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("askgate refuses to start: 1 tool(s) are annotated sensitive")
    assert err.endswith("; give --policy FILE\n")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_stdio_serving_cleanly(backend: str, signum: signal.Signals) -> None:
    """Ctrl-C (SIGINT) or SIGTERM, once the server answered: exit 0, one info line, no
    traceback."""
    command = [sys.executable, "-m", "askgate", "serve", "--demo", "--backend", backend]
    proc = subprocess.Popen(
        [*command, "--log-level", "info"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdin.write('{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
        proc.stdin.flush()
        assert read_line(proc.stdout, "reply") == '{"jsonrpc":"2.0","id":1,"result":{}}\n'
        proc.send_signal(signum)
        assert proc.wait(timeout=DEADLINE) == 0
        err = proc.stderr.read()
        assert "Traceback" not in err
        assert err.splitlines()[-1].endswith(f"stopped by {signum.name}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE)


def test_policy_on_a_served_module_decides_listing_and_calls(tmp_path: Path) -> None:
    """--policy applied to a TARGET of one's own: the file's visibility hides what it denies,
    and its rules decide the calls (R-POL-1 through Server.configure)."""
    (tmp_path / "two.py").write_text(
        "from askgate import Server\nserver = Server('two')\n"
        "@server.tool()\ndef shown(x: int) -> str:\n    return f'shown {x}'\n"
        "@server.tool()\ndef hidden() -> str:\n    return 'ran'\n"
    )
    (tmp_path / "p.toml").write_text(
        '[[tools]]\nmatch = "shown"\ndecision = "allow"\n\n'
        '[[tools]]\nmatch = "hidden"\ndecision = "deny"\nreason = "not here"\n'
    )
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "shown", "arguments": {"x": 5}},
        },
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "hidden"}},
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "askgate", "serve", "two.py:server", "--policy", "p.toml"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write("".join(json.dumps(line) + "\n" for line in lines))
    proc.stdin.flush()
    replies: dict[int, Any] = {}
    try:
        while len(replies) < 4:  # every reply before end of input drops what still runs
            reply = json.loads(read_line(proc.stdout, "a reply"))
            replies[reply["id"]] = reply
        proc.stdin.close()
        assert proc.wait(timeout=DEADLINE) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE)
    assert [tool["name"] for tool in replies[2]["result"]["tools"]] == ["shown"]
    assert replies[3]["result"]["content"][0]["text"] == "shown 5"
    denied = replies[4]["result"]["structuredContent"]
    assert (denied["decision"], denied["detail"]) == ("deny", "not here")


def test_a_print_while_importing_target_goes_to_stderr(tmp_path: Path) -> None:
    """TARGET's module runs before stdout is the wire: what it prints must not corrupt it."""
    (tmp_path / "printy.py").write_text(
        "from askgate import Server\nprint('loading my server')\nserver = Server('p')\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "askgate", "serve", "printy.py:server"],
        input='{"jsonrpc":"2.0","id":1,"method":"ping"}\n',
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=DEADLINE,
        check=True,
    )
    assert done.stdout == '{"jsonrpc":"2.0","id":1,"result":{}}\n'
    assert "loading my server" in done.stderr


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--http", "127.0.0.1:\u00b2"], "askgate: --http wants HOST:PORT, got '127.0.0.1:\u00b2'"),
        (["--http", "127.0.0.1:\u0660"], "askgate: --http wants HOST:PORT, got '127.0.0.1:\u0660'"),
        (
            ["--http", "127.0.0.1:0", "--auth", "none", "--tokens", ""],
            "askgate: --tokens needs --auth bearer or --auth apikey",
        ),
        (
            ["--http", "127.0.0.1:0", "--auth", "bearer", "--tokens", "/nonexistent/t"],
            "askgate refuses to start: cannot read the tokens file /nonexistent/t: "
            "No such file or directory",
        ),
    ],
)
def test_odd_http_flags_are_one_line_and_exit_2(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--demo", *argv]) == 2
    assert capsys.readouterr().err == said + "\n"


def test_python_callers_get_a_clear_error_for_a_wrong_argument() -> None:
    server = Server("x", authorizer=lambda *_: Allow(), authorizer_source="configured")
    with pytest.raises(TypeError, match="auth provider such as BearerAuth"):
        server.run_http("127.0.0.1", 0, auth="bearer")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a sequence of strings"):
        server.run_http("127.0.0.1", 0, allowed_origins="http://x")
    with pytest.raises(ValueError, match="log_level='LOUD'"):
        server.run_http("127.0.0.1", 0, log_level="LOUD")
    with pytest.raises(TypeError, match="visibility must be callable or None, not bool"):
        Server("y", visibility=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="authorizer must be callable or None, not str"):
        server.configure(authorizer="allow")  # type: ignore[arg-type]


def test_the_banner_gives_a_client_configuration_with_the_credential_header(
    tmp_path: Path,
) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("alice 0123456789abcdef0123\n")
    command = [sys.executable, "-m", "askgate", "serve", "--demo", "--http", "127.0.0.1:0"]
    proc = subprocess.Popen(
        [*command, "--banner", "--auth", "bearer", "--tokens", str(tokens)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        # One write: the first line waited for, the other two already in the pipe's buffer.
        lines = [read_line(proc.stderr, "the banner"), proc.stderr.readline()]
        lines.append(proc.stderr.readline())
        assert lines[0].startswith("askgate: serving the demo on http://127.0.0.1:")
        configuration = json.loads(lines[2])
        entry = configuration["mcpServers"]["askgate"]
        assert entry["headers"] == {"Authorization": "Bearer <token>"}
        assert entry["url"] == lines[0].split(" on ", 1)[1].strip()
        # Serving (its signal handlers in place) once it answers: without the header, 401.
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(entry["url"], timeout=DEADLINE)
        assert refused.value.code == 401
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=DEADLINE) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE)


def test_serve_parses_without_the_other_commands_and_errs_as_the_whole_parser(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv in (["serve", "--demo"], ["serve", "--http", "127.0.0.1:0", "--log-level", "INFO"]):
        parser, args = _parse(argv)
        assert args == _parser().parse_args(argv)
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        assert list(commands.choices) == ["serve"]  # the other commands were not built
    errors = []
    for parse in (_parse, _parser().parse_args):
        with pytest.raises(SystemExit) as stopped:
            parse(["serve", "--demo", "--no-such-flag"])
        assert stopped.value.code == 2
        errors.append(capsys.readouterr().err)
    assert errors[0] == errors[1]
    assert "{serve,replay,explain,policy,spec,core}" in errors[0]  # the whole parser's usage


def test_R_POL_13_stdio_without_a_policy_names_the_tools_nobody_gates(tmp_path: Path) -> None:
    """Served over stdio with no authorizer, the tools whose annotations say nothing of their
    effects are named in one warning line at start; a read-only tool is not, a policy silences
    it, and the server serves as before."""
    (tmp_path / "plain.py").write_text(
        "from askgate import Server\n"
        "server = Server('plain')\n"
        "@server.tool()\ndef wipe(path: str) -> str:\n    return path\n"
        "@server.tool(annotations={'title': 'Note'})\ndef note(text: str) -> str:\n"
        "    return text\n"
        "@server.tool(annotations={'readOnlyHint': True})\ndef look() -> str:\n    return 'x'\n"
    )
    (tmp_path / "p.toml").write_text('[[tools]]\nmatch = "*"\ndecision = "allow"\n')
    ping = '{"jsonrpc":"2.0","id":1,"method":"ping"}\n'

    def serve(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "askgate", "serve", "plain.py:server", *flags],
            input=ping,
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=DEADLINE,
            check=True,
        )

    bare = serve()
    assert bare.stdout == '{"jsonrpc":"2.0","id":1,"result":{}}\n'
    warned = [line for line in bare.stderr.splitlines() if "without being asked" in line]
    assert warned == [
        "askgate WARNING askgate: plain.py:server has no policy nor authorizer, and any client "
        "runs note, wipe without being asked (their annotations hold none of readOnlyHint, "
        "destructiveHint, sensitive); give --policy FILE"
    ]
    gated = serve("--policy", "p.toml")
    assert gated.stdout == bare.stdout
    assert "without being asked" not in gated.stderr


@pytest.mark.parametrize(
    ("helper", "said"),
    [
        ("raise ImportError('no backend here')\n", "ImportError: no backend here"),
        ("def broken(:\n", "SyntaxError: invalid syntax"),
    ],
    ids=["ImportError", "SyntaxError"],
)
def test_an_import_error_in_ones_own_module_shows_ones_own_frames(
    tmp_path: Path, helper: str, said: str
) -> None:
    """TARGET's module imports a module of the user's that raises or does not compile: the
    traceback shows the user's two files and lines, and no frame of askgate or importlib. Run
    in a process of its own, as a user runs it: an import hook another test's library installed
    in this process would add frames of its own."""
    name = f"cli_own_{said.split(':', maxsplit=1)[0].lower()}"
    (tmp_path / f"{name}_helper.py").write_text(helper)
    (tmp_path / f"{name}.py").write_text(
        f"import {name}_helper\nfrom askgate import Server\nserver = Server('own')\n"
    )
    for target in (f"{name}:server", f"{name}.py:server"):
        done = subprocess.run(
            [sys.executable, "-m", "askgate", "serve", "--stdio", target],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        err = done.stderr
        assert f'{tmp_path / name}.py", line 1, in <module>\n    import {name}_helper\n' in err
        assert f'{tmp_path / name}_helper.py", line 1' in err
        assert said in err
        assert "__main__.py" not in err
        assert "importlib" not in err
        kind = said.split(":", maxsplit=1)[0]
        assert err.endswith(
            f"askgate refuses to start: {target.split(':')[0]} raised {kind} (traceback above)\n"
        )
