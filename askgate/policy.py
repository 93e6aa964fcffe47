"""Policy files: allow / ask / deny per tool and per read method, in TOML (README "Policy file").

::

    [[tools]]
    match = "echo"              # a tool name, or a glob: "fs.*", "*"
    decision = "allow"

    [[tools]]
    match = "delete_*"
    decision = "ask"
    prompt = "Allow {tool} to delete {args.path}?"

    [[tools]]
    match = "*"
    decision = "deny"
    reason = "not in the policy"

    [[reads]]
    match = "*"                 # a method name or glob: "resources/*", "tools/list"
    decision = "allow"

Entries are tried in file order and the first whose ``match`` fits decides; a name no entry
fits is denied. A prompt may quote the call: ``{tool}`` is the tool's name and ``{args.NAME}``
the argument ``NAME``. Quoted values are escaped (quotes, backslashes, and every control, format
or line-separator character written as an escape, so an argument cannot start a new line or
hide text), cut to :data:`QUOTE_LIMIT` characters, and wrapped in double quotes. Anything wrong
with the file refuses to start with a :class:`PolicyError` that names the file and the line.

The authorizers are ``async def``: a decision is a few comparisons, so it runs on the event
loop without a thread hop. They never suspend, and are marked so: the runtime runs them to
completion at once instead of starting a task for each call.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import attrs

from askgate.core import Allow, Ask, Decision, Deny
from askgate.core.callbacks import completes_without_suspending

__all__ = ["QUOTE_LIMIT", "Policy", "PolicyError", "Rule", "load_policy", "parse_policy", "quote"]

QUOTE_LIMIT: Final = 200
"""The most characters of one quoted argument a prompt shows."""

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_ARG_NAME = re.compile(r"args\.([A-Za-z_][A-Za-z0-9_\-]*)")
_DECISIONS = ("allow", "ask", "deny")
_KEYS: Final = {"match", "decision", "prompt", "reason"}


class PolicyError(ValueError):
    """A policy file that cannot be used; the message names the file and the line."""


Verdict = Literal["allow", "ask", "deny"]


@attrs.frozen(slots=True)
class Rule:
    """One entry: names fitting ``match`` get ``decision`` (with ``text``: the prompt or reason)."""

    match: str
    decision: Verdict
    text: str
    line: int

    def fits(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.match)


def _escape_char(ch: str) -> str:
    if ch in '"\\':
        return "\\" + ch
    if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
        code = ord(ch)
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    return ch


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``value`` as a safe, bounded, double-quoted string for a prompt.

    Text is taken as is, anything else as compact JSON. At most ``limit`` characters of it are
    kept (``…`` marks a cut), then quotes and backslashes are escaped and every control, format
    (bidi overrides, zero-width) or line/paragraph separator character becomes ``\\uXXXX``: the
    result is one line that shows exactly what the argument holds.
    """
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        except (TypeError, ValueError, RecursionError):
            text = f"<{type(value).__name__}>"
    cut = len(text) > limit
    text = text[:limit]
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        escaped = text  # nothing to escape: printable ASCII has no control or format characters
    else:
        escaped = "".join(_escape_char(ch) for ch in text)
    return f'"{escaped}{"…" if cut else ""}"'


def render_prompt(template: str, tool: str, arguments: Mapping[str, Any]) -> str:
    """The prompt for a call: ``{tool}`` and ``{args.NAME}`` replaced by quoted values."""

    def substitute(found: re.Match[str]) -> str:
        field = found.group(1)
        if field == "tool":
            return quote(tool)
        name = field[len("args.") :]
        return quote(arguments[name]) if name in arguments else "(none)"

    return _PLACEHOLDER.sub(substitute, template)


@attrs.frozen(slots=True)
class Policy:
    """The rules of one file; :meth:`authorize` and :meth:`authorize_read` are the authorizers."""

    tools: tuple[Rule, ...]
    reads: tuple[Rule, ...]
    source: str = "<policy>"

    def decide(self, rules: tuple[Rule, ...], name: str, arguments: Mapping[str, Any]) -> Decision:
        for rule in rules:
            if rule.fits(name):
                if rule.decision == "allow":
                    return Allow()
                if rule.decision == "deny":
                    return Deny(rule.text)
                return Ask(render_prompt(rule.text, name, arguments))
        return Deny("no policy rule matches")

    @completes_without_suspending
    async def authorize(self, tool: str, arguments: object, _context: object) -> Decision:
        """The tool authorizer: ``(tool name, arguments, context) -> decision``."""
        return self.decide(self.tools, tool, arguments if isinstance(arguments, dict) else {})

    @completes_without_suspending
    async def authorize_read(self, method: str, params: object, _context: object) -> Decision:
        """The read authorizer: ``(method name, params, context) -> decision``."""
        return self.decide(self.reads, method, params if isinstance(params, dict) else {})


def _header_lines(text: str, section: str) -> list[int]:
    pattern = re.compile(rf"^\s*\[\[\s*{re.escape(section)}\s*\]\]")
    return [n for n, line in enumerate(text.splitlines(), 1) if pattern.match(line)]


def _key_line(text: str, section: str) -> int:
    pattern = re.compile(rf"^\s*{re.escape(section)}\s*=")
    for n, line in enumerate(text.splitlines(), 1):
        if pattern.match(line):
            return n
    return 1


def _rule(entry: object, where: str, line: int) -> Rule:
    def fail(problem: str) -> PolicyError:
        return PolicyError(f"{where}: {problem}")

    if not isinstance(entry, dict):
        raise fail("an entry must be a table with match and decision")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise fail(f"unknown key {unknown[0]!r} (expected match, decision, prompt, reason)")
    match = entry.get("match")
    if not isinstance(match, str) or not match:
        raise fail("match must be a non-empty string (a name or a glob)")
    decision = entry.get("decision")
    if decision not in _DECISIONS:
        raise fail(f"decision must be one of allow, ask, deny (got {decision!r})")
    text = ""
    if decision == "deny":
        reason = entry.get("reason")
        if not isinstance(reason, str) or not reason:
            raise fail("a deny needs a reason (a non-empty string)")
        if "prompt" in entry:
            raise fail("a deny takes a reason, not a prompt")
        text = reason
    elif decision == "ask":
        prompt = entry.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise fail("an ask needs a prompt (a non-empty string)")
        if "reason" in entry:
            raise fail("an ask takes a prompt, not a reason")
        for found in _PLACEHOLDER.finditer(prompt):
            field = found.group(1)
            if field != "tool" and not _ARG_NAME.fullmatch(field):
                raise fail(
                    f"the prompt quotes {{{field}}}; only {{tool}} and {{args.NAME}} are known"
                )
        text = prompt
    elif "prompt" in entry or "reason" in entry:
        raise fail("an allow takes neither a prompt nor a reason")
    return Rule(match, decision, text, line)


def _rules(text: str, data: dict[str, Any], section: str, source: str) -> tuple[Rule, ...]:
    entries = data.get(section, [])
    if not isinstance(entries, list):
        line = _key_line(text, section)
        raise PolicyError(f"{source}, line {line}: {section} must be an array of tables")
    headers = _header_lines(text, section)
    rules = []
    for index, entry in enumerate(entries):
        line = headers[index] if len(headers) == len(entries) else _key_line(text, section)
        where = f"{source}, line {line}: [[{section}]] entry {index + 1}"
        rules.append(_rule(entry, where, line))
    return tuple(rules)


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """The policy in ``text``; raises :class:`PolicyError` naming ``source`` and the line."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as bad:
        raise PolicyError(f"{source}: not valid TOML: {bad}") from None
    unknown = sorted(set(data) - {"tools", "reads"})
    if unknown:
        line = _key_line(text, unknown[0])
        for n, raw in enumerate(text.splitlines(), 1):
            if re.match(rf"^\s*\[+\s*{re.escape(unknown[0])}\s*\]+", raw):
                line = n
                break
        raise PolicyError(
            f"{source}, line {line}: unknown section {unknown[0]!r} (expected tools, reads)"
        )
    return Policy(_rules(text, data, "tools", source), _rules(text, data, "reads", source), source)


def load_policy(path: str | Path) -> Policy:
    """The policy in the file ``path`` (UTF-8 TOML)."""
    where = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as bad:
        raise PolicyError(f"{where}: cannot read the policy file: {bad.strerror}") from None
    except UnicodeDecodeError as bad:
        raise PolicyError(f"{where}: not UTF-8 (byte {bad.start})") from None
    return parse_policy(text, where)
