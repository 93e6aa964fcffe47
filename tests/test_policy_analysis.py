"""askgate policy check / explain / diff (spec/policy.md R-POL-7 .. R-POL-10).

The analysis is exact over the glob languages; the Hypothesis tests check it against
``fnmatch`` and against the loaded policies deciding each of many generated names.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from askgate import policy_analysis as analysis
from askgate.__main__ import main
from askgate.policy import Policy, Rule, load_policy, parse_policy
from askgate.policy_analysis import (
    GUARDED_READS,
    Change,
    check,
    diff,
    explain,
    is_literal,
    name_classes,
    shadowed,
)

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "askgate" / "demo_policy.toml"

# A later revision of the demo's policy, as an operator would write it: globs, a catch-all, reads
# named one by one.
REVISED_FILE = ROOT / "examples" / "revised_policy.toml"
REVISED = REVISED_FILE.read_text(encoding="utf-8")


def _entry(match: str, decision: str) -> str:
    extra = {"allow": "", "ask": 'prompt = "ok?"\n', "deny": 'reason = "no"\n'}[decision]
    return f'match = {json.dumps(match)}\ndecision = "{decision}"\n{extra}'


def _file(tools: list[tuple[str, str]], reads: list[tuple[str, str]] = ()) -> str:  # type: ignore[assignment]
    text = "".join(f"[[tools]]\n{_entry(m, d)}\n" for m, d in tools)
    return text + "".join(f"[[reads]]\n{_entry(m, d)}\n" for m, d in reads)


def _flags(patterns: list[str], name: str) -> tuple[bool, ...]:
    return tuple(fnmatch.fnmatchcase(name, p) for p in patterns)


# Globs over a small alphabet, with every kind of glob syntax, so that names drawn from the same
# alphabet hit their boundaries.
ALPHABET = "ab.-]!["
glob_text = st.text(alphabet="ab.*?[]!-", min_size=1, max_size=6)
names = st.text(alphabet=ALPHABET + "z\n", max_size=7)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(glob_text, min_size=1, max_size=5), st.lists(names, max_size=40))
def test_R_POL_7_the_classes_of_names_are_those_fnmatch_tells_apart(
    patterns: list[str], drawn: list[str]
) -> None:
    classes = name_classes(patterns)
    for flags, example in classes.items():  # each class holds its representative
        assert _flags(patterns, example) == flags
    for name in drawn:  # every name falls in a class that was found
        assert _flags(patterns, name) in classes, name
    for k, pattern in enumerate(patterns):
        if is_literal(pattern):  # a literal glob matches one name: one class, that name
            holding = [example for flags, example in classes.items() if flags[k]]
            assert len(holding) == 1
            assert fnmatch.fnmatchcase(holding[0], pattern)


def test_R_POL_7_check_finds_a_planted_shadowed_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planted = tmp_path / "planted.toml"
    planted.write_text(
        _file(
            [
                ("fs.*", "ask"),  # entry 1, line 1
                ("net.[a-m]*", "allow"),  # 2, line 6
                ("net.[n-z]*", "deny"),  # 3, line 10
                ("fs.read", "allow"),  # 4: shadowed by fs.* (a glob, not * nor the same)
                ("net.[g-q]?", "allow"),  # 5: covered by entries 2 and 3 together
                ("[z-a]x", "allow"),  # 6: matches no name
                ("net.", "allow"),  # 7: decides the name "net." itself
            ]
        ).replace('"net.[g-q]?"\n', '"net.[g-q]?"\nliteral = false\n'),  # a glob, said (R-POL-12)
        encoding="utf-8",
    )
    policy = load_policy(planted)
    assert policy.warnings == ()  # the loader's cheap check (R-POL-5) misses all three
    assert [(k, w) for k, w in shadowed(policy.tools)] == [(3, (0,)), (4, (1, 2)), (5, ())]
    assert main(["policy", "check", str(planted)]) == 1
    out = capsys.readouterr().out.splitlines()
    line_of = [r.line for r in policy.tools]
    assert out == [
        f"{planted}, line {line_of[3]}: [[tools]] entry 4 (match = 'fs.read') never applies: "
        f"entry 1 on line {line_of[0]} (match = 'fs.*') comes first and matches every name it "
        "matches",
        f"{planted}, line {line_of[4]}: [[tools]] entry 5 (match = 'net.[g-q]?') never applies: "
        f"every name it matches is matched first by entries 2 on line {line_of[1]} (match = "
        f"'net.[a-m]*'), 3 on line {line_of[2]} (match = 'net.[n-z]*')",
        f"{planted}, line {line_of[5]}: [[tools]] entry 6 (match = '[z-a]x') never applies: "
        "its glob matches no name",
        "3 findings",
    ]
    healthy = tmp_path / "healthy.toml"
    healthy.write_text(_file([("fs.read", "allow"), ("fs.*", "ask"), ("*", "allow")]), "utf-8")
    assert main(["policy", "check", str(healthy)]) == 0  # each entry decides some name
    assert capsys.readouterr().out == "no findings\n"


def test_R_POL_8_explain_names_the_deciding_entry_and_what_the_authorizer_returns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    revised = tmp_path / "revised.toml"
    revised.write_text(REVISED, encoding="utf-8")
    policy = load_policy(revised)
    found = explain(policy, "delete_cache", {"path": "/tmp/x"})
    assert (found.index, found.decision, found.listed) == (2, "ask", True)
    assert found.text == 'Allow "delete_cache" to delete "/tmp/x"?'
    assert main(["policy", "explain", str(revised), "delete_cache", '{"path": "/tmp/x"}']) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{revised}, line 13: [[tools]] entry 3 (match = 'delete_[a-f]*') decides "
        "delete_cache: ask",
        "  the 2 entries before it do not match delete_cache",
        '  prompt: Allow "delete_cache" to delete "/tmp/x"?',
        "  tools/list: shown",
    ]
    assert main(["policy", "explain", str(revised), "delete_zone"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "  the 4 entries before it do not match delete_zone",
        "  reason: not in the policy",
        "  tools/list: hidden",
    ]
    assert main(["policy", "explain", str(revised), "--read", "completion/complete"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "completion/complete: no [[reads]] entry matches: deny (no policy rule matches)"
    ]
    assert main(["policy", "explain", str(revised), "--format", "json", "s1eep"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert (said["index"], said["decision"], said["rule"]["line"]) == (3, "allow", 18)
    assert main(["policy", "explain", str(revised), "echo", "[1]"]) == 2
    assert "ARGS-JSON must be a JSON object" in capsys.readouterr().err


def test_R_POL_9_check_reports_prompt_arguments_unguarded_reads_and_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = REVISED.replace("{args.text}", "{args.txt}") + _file(
        [], [("resources/*", "allow"), ("logging/setLevel", "ask")]
    )
    bad = tmp_path / "bad.toml"
    bad.write_text(text, encoding="utf-8")
    policy = load_policy(bad)
    assert check(policy) == [f for f in check(policy, None) if f.kind != "argument"]
    found = check(policy, {"guarded_echo": {"inputSchema": {"properties": {"text": {}}}}})
    found = [f for f in found if f.kind != "unused"]  # entries for the tools not given
    assert [f.kind for f in found] == ["argument", "unguarded", "warning"]
    assert "quoting {args.txt}, an argument guarded_echo does not have (its arguments: text)" in (
        found[0].message
    )
    assert "allows resources/subscribe, resources/unsubscribe without naming them" in (
        found[1].message
    )  # resources/read is named by line 33's entry
    assert "asks, but a read is never parked" in found[2].message
    assert main(["policy", "check", str(bad), "--demo"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "3 findings"
    assert "{args.txt}" in out[0]
    # The demo's own policy opens every read with "*": reported, one line for the entry.
    assert main(["policy", "check", str(DEMO), "--demo", "--format", "json"]) == 1
    findings = json.loads(capsys.readouterr().out)
    assert [f["kind"] for f in findings] == ["unguarded"]
    assert ", ".join(GUARDED_READS) in findings[0]["message"]
    assert main(["policy", "check", str(tmp_path / "missing.toml")]) == 2


def _differs(old: Policy, new: Policy, section: str, name: str) -> bool:
    """Whether the two loaded policies decide ``name`` differently (a prompt compared as its
    template: rendered with no arguments, each template renders to itself or differs)."""
    before: tuple[Rule, ...] = getattr(old, section)
    after: tuple[Rule, ...] = getattr(new, section)
    first_old = next((r for r in before if r.fits(name)), None)
    first_new = next((r for r in after if r.fits(name)), None)

    def said(rule: Rule | None) -> tuple[str, str]:
        return ("deny", "no policy rule matches") if rule is None else (rule.decision, rule.text)

    assert said(first_old)[0] == type(old.decide(before, name, {})).__name__.lower()
    assert said(first_new)[0] == type(new.decide(after, name, {})).__name__.lower()
    return said(first_old) != said(first_new)


def _assert_exact(
    old: Policy, new: Policy, drawn: list[str], changes: list[Change] | None = None
) -> None:
    changes = diff(old, new) if changes is None else changes
    for section in ("tools", "reads"):
        patterns = [r.match for r in (*getattr(old, section), *getattr(new, section))]
        listed = {_flags(patterns, c.example) for c in changes if c.section == section}
        for change in changes:  # every listed class does change, on its own example
            if change.section == section:
                assert _differs(old, new, section, change.example), change
                if change.name is not None:
                    assert change.name == change.example
        for name in drawn:  # a drawn name changes exactly when its class is listed
            assert _differs(old, new, section, name) == (_flags(patterns, name) in listed), (
                section,
                name,
            )


REAL_NAMES = [
    "echo", "guarded_echo", "guarded_", "delete_file", "delete_zone", "delete_", "forbidden",
    "sleep", "slEep", "seep", "crash", "", "tools/list", "resources/read", "prompts/get",
    "prompts/list", "completion/complete", "logging/setLevel", "resources/templates/list",
]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="_abdefghlnoprstcz/.-[", max_size=14), max_size=60))
def test_R_POL_10_diff_of_two_real_policies_is_exact_against_brute_force(
    drawn: list[str],
) -> None:
    old, new, forward, backward = _real()
    _assert_exact(old, new, drawn + REAL_NAMES, forward)
    _assert_exact(new, old, drawn + REAL_NAMES, backward)


@functools.cache
def _real() -> tuple[Policy, Policy, list[Change], list[Change]]:
    """The two real policies and their diffs both ways, computed once."""
    old, new = load_policy(DEMO), parse_policy(REVISED, "revised.toml")
    return old, new, diff(old, new), diff(new, old)


entries = st.lists(
    st.tuples(glob_text, st.sampled_from(["allow", "ask", "deny"])), min_size=0, max_size=4
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries, entries, entries, st.lists(names, max_size=40))
def test_R_POL_10_diff_of_generated_policies_is_exact_against_brute_force(
    old_tools: list[tuple[str, str]],
    new_tools: list[tuple[str, str]],
    new_reads: list[tuple[str, str]],
    drawn: list[str],
) -> None:
    old = parse_policy(_file(old_tools), "old.toml")  # no [[reads]]: the defaults (R-POL-2)
    new = parse_policy(_file(new_tools, new_reads), "new.toml")
    _assert_exact(old, new, [*drawn, "tools/list", "resources/read"])


def test_R_POL_10_the_diff_command_lists_names_and_classes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    revised = tmp_path / "revised.toml"
    revised.write_text(REVISED, encoding="utf-8")
    assert main(["policy", "diff", str(DEMO), str(DEMO)]) == 0
    assert capsys.readouterr().out == "[[tools]]: no changes\n[[reads]]: no changes\n"
    assert main(["policy", "diff", str(DEMO), str(revised), "--format", "json"]) == 1
    changes = json.loads(capsys.readouterr().out)
    named = {c["name"]: (c["before"], c["after"]) for c in changes if c["section"] == "tools"}
    assert named["crash"] == (["allow", ""], ["deny", "not in the policy"])
    assert named["forbidden"] == (["deny", "forbidden by policy"], ["deny", "not in the policy"])
    assert "echo" not in named
    assert "sleep" not in named
    assert named["delete_file"][1] == ["ask", "Allow {tool} to delete {args.path}?"]
    classes = [c for c in changes if c["name"] is None and c["section"] == "tools"]
    assert {c["after"][0] for c in classes} >= {"ask", "allow", "deny"}  # guarded_*, s?eep, *
    reads = [c for c in changes if c["section"] == "reads"]
    assert all(c["before"] == ["allow", ""] for c in reads)  # the demo allows every read
    assert {c["name"] for c in reads} == {None}  # the revision names no read it changes
    methods = {m: c["after"][0] for c in reads for m in c["methods"]}
    assert methods == {
        "completion/complete": "deny",  # no entry of the revision matches them
        "logging/setLevel": "deny",
        "resources/subscribe": "deny",
        "resources/unsubscribe": "deny",
        "prompts/get": "deny",  # prompts/[!l]*
    }
    assert main(["policy", "diff", str(DEMO), str(revised)]) == 1
    out = capsys.readouterr().out
    assert "  crash:\n    old: allow (" in out
    assert "names matched by 's?eep' (new line 18) and '*' (new line 22)" in out


def test_R_POL_10_diff_says_changes_with_equal_decisions_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Names, and apart from them classes, that go from the same decision to the same
    decision are one change in text, with every deciding entry's line; JSON keeps each class."""
    old, new = tmp_path / "old.toml", tmp_path / "new.toml"
    old.write_text(_file([("echo", "allow")]), encoding="utf-8")
    new.write_text(
        _file([("echo", "allow"), ("x*", "allow"), ("*y", "allow"), ("crash", "deny")])
        + _file([("boom", "deny"), ("sleep", "ask")]),
        encoding="utf-8",
    )
    assert main(["policy", "diff", str(old), str(new)]) == 1
    out = capsys.readouterr().out.replace(str(tmp_path) + "/", "")
    said = [
        "[[tools]]: 3 changes (6 names and classes)",
        "  boom, crash:",
        "    old: deny (no policy rule matches; no entry of old.toml matches)",
        "    new: deny (new.toml, lines 13, 18; reason 'no')",
        "  sleep:",
        "    old: deny (no policy rule matches; no entry of old.toml matches)",
        "    new: ask (new.toml, line 23; prompt 'ok?')",
        "  3 classes of names, each changed alike:",
        "    names matched by 'x*' (new line 5) and by no other entry, e.g. \"x\"",
        "    names matched by 'x*' (new line 5) and '*y' (new line 9) and by no other entry, "
        'e.g. "xy"',
        "    names matched by '*y' (new line 9) and by no other entry, e.g. \"y\"",
        "    old: deny (no policy rule matches; no entry of old.toml matches)",
        "    new: allow (new.toml, lines 5, 9)",
        "[[reads]]: no changes",
    ]
    assert out.splitlines() == said
    assert main(["policy", "diff", str(old), str(new), "--format", "json"]) == 1
    assert len(json.loads(capsys.readouterr().out)) == 6


def test_R_POL_9_check_takes_the_tools_of_a_server_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--server TARGET`` loads a Server as ``askgate serve`` does (path/to/file.py:attr)."""
    app = tmp_path / "policy_check_target_app.py"
    app.write_text(
        "from askgate import Server\n"
        "server = Server('app')\n"
        "@server.tool()\n"
        "def rm(target: str) -> str:\n"
        "    return target\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(sys, "path", list(sys.path))  # the loader puts the file's folder first
    monkeypatch.delitem(sys.modules, app.stem, raising=False)
    policy = tmp_path / "p.toml"
    policy.write_text(_file([("rm", "ask")]).replace("ok?", "Remove {args.path}?"), "utf-8")
    assert main(["policy", "check", str(policy), "--server", f"{app}:server"]) == 1
    monkeypatch.delitem(sys.modules, app.stem, raising=False)
    assert "quoting {args.path}, an argument rm does not have (its arguments: target)" in (
        capsys.readouterr().out
    )
    assert main(["policy", "check", str(policy), "--server", str(tmp_path / "no.py:x")]) == 2
    assert "no file" in capsys.readouterr().err


def test_R_POL_9_check_with_the_servers_tools_finds_unused_entries_and_uncovered_tools() -> None:
    """Given the tools: an entry fitting none of them is ``unused`` (a shadowed one is not
    reported twice), a tool no entry fits is ``uncovered``; a file covering exactly the tools
    has no finding."""
    definitions: dict[str, object] = {"delete_note": {}, "list_notes": {}}
    text = _file([("delete_note", "allow"), ("rename_*", "allow"), ("delete_*", "deny")])
    policy = parse_policy(text + _file([], [("*/list", "allow")]), "p.toml")
    found = check(policy, definitions)
    assert [(f.kind, f.line) for f in found] == [("uncovered", 0), ("unused", 5)]
    assert found[0].message == (
        "p.toml: no [[tools]] entry matches the server's tool list_notes: every call of it is "
        "denied (no policy rule matches) and tools/list hides it"
    )
    assert found[1].message == (
        "p.toml, line 5: [[tools]] entry 2 (match = 'rename_*') matches no tool of the server "
        "(its tools: delete_note, list_notes)"
    )
    assert check(policy) == []  # without the server's tools, nothing to hold them against
    shadowed_too = parse_policy(_file([("*", "allow"), ("nothing_here", "deny")]), "s.toml")
    assert [f.kind for f in check(shadowed_too, definitions)] == ["shadowed"]
    covered = parse_policy(_file([("delete_note", "allow"), ("list_*", "allow")]), "c.toml")
    assert [f.kind for f in check(covered, definitions)] == []


def test_R_POL_9_a_file_past_the_analysis_bound_is_refused_not_guessed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(analysis, "MAX_STATES", 3)
    policy = tmp_path / "p.toml"
    policy.write_text(_file([("a*b*c", "allow"), ("*c*b", "deny")]), encoding="utf-8")
    assert main(["policy", "check", str(policy)]) == 2
    assert "need more than 3 states" in capsys.readouterr().err
