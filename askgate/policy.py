"""Policy files: allow / ask / deny per tool and per read method, in TOML (docs/policy.md).

::

    [[tools]]
    match = "echo"              # a tool name, or a glob: "fs.*", "*"
    decision = "allow"

    [[tools]]
    match = "delete_*"
    decision = "ask"
    prompt = "Allow {tool} to delete {args.path}?"

    [[tools]]
    match = "rm[1]"             # the tool named rm[1] exactly, not the glob (rm1)
    literal = true
    decision = "deny"
    reason = "never"

    [[tools]]
    match = "*"
    decision = "deny"
    reason = "not in the policy"

    [[reads]]
    match = "*"                 # a method name or glob: "resources/*", "tools/list"
    decision = "allow"

The rules are spec/policy.md's (R-POL-*). Entries are tried in file order and the first whose
``match`` fits decides (an entry with ``literal = true`` fits exactly the name its ``match``
says, R-POL-11); a name no entry fits is denied. ``tools/list`` shows a tool when the
first ``[[tools]]`` entry fitting its name allows or asks (:meth:`Policy.visible`, the
visibility hook). A file without ``[[reads]]`` allows the list methods and denies every other
read. A prompt may quote the call: ``{tool}`` is the tool's name and ``{args.NAME}`` the
argument ``NAME``: a number, boolean or null as its JSON literal, anything else quoted (quotes,
backslashes, and every control, format or line-separator character written as an escape, so an
argument cannot start a new line or hide text), cut to :data:`QUOTE_LIMIT` characters, and
wrapped in double quotes. Anything wrong with the file refuses to start with a
:class:`PolicyError` that names the file, the line of the offending key, and what is allowed
there; what is suspicious but usable is in :attr:`Policy.warnings`.

The authorizers and the visibility hook are ``async def``: a decision is a few comparisons, so
it runs on the event loop without a thread hop. They never suspend, and are marked so: the
runtime runs them to completion at once instead of starting a task for each call.
"""

from __future__ import annotations

import fnmatch
import math
import re
import tomllib
import unicodedata
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Literal

import attrs

from askgate.core import Allow, Ask, Decision, Deny
from askgate.core.messages import READ_ASK
from askgate.core.sealing import arguments_digest
from askgate.transports.callbacks import completes_without_suspending, ignores_context

__all__ = [
    "LIST_METHODS",
    "NO_READS_REASON",
    "QUOTE_LIMIT",
    "Policy",
    "PolicyError",
    "Rule",
    "literal_glob",
    "load_policy",
    "parse_policy",
    "quote",
    "shown",
]

QUOTE_LIMIT: Final = 200
"""The most characters of one quoted argument a prompt shows."""

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_ARG_NAME = re.compile(r"args\.([A-Za-z_][A-Za-z0-9_\-]*)")
_DECISIONS = ("allow", "ask", "deny")
_ALLOW: Final = Allow()
"""The one ``Allow`` the policy answers (immutable, with no fields: one serves every call)."""
_KEYS: Final = {"match", "decision", "prompt", "reason", "literal"}


class PolicyError(ValueError):
    """A policy file that cannot be used; the message names the file and the line."""


Verdict = Literal["allow", "ask", "deny"]


@attrs.frozen(slots=True)
class Rule:
    """One entry: names fitting ``match`` get ``decision`` (with ``text``: the prompt or reason).
    ``literal`` is the entry's ``literal`` key (``None`` when it has none): when true, ``match``
    is a name fitting itself alone, glob characters and spaces included (R-POL-11)."""

    match: str
    decision: Verdict
    text: str
    line: int
    literal: bool | None = None

    def fits(self, name: str) -> bool:
        if self.literal:
            return self.match == name
        return bool(_matcher(self.match)(name))

    @property
    def glob(self) -> str:
        """The ``fnmatch`` glob that fits the names this entry fits: ``match``, or for a literal
        entry :func:`literal_glob` of it (the analysis reads globs, R-POL-11)."""
        return literal_glob(self.match) if self.literal else self.match

    @property
    def label(self) -> str:
        """``match = '...'`` as messages name the entry, ``(literal)`` after a literal one."""
        return f"match = {self.match!r}" + (" (literal)" if self.literal else "")


def literal_glob(name: str) -> str:
    """The ``fnmatch`` glob that fits ``name`` alone: each ``*``, ``?`` and ``[`` of it in
    brackets (a ``]`` outside brackets is itself)."""
    return "".join(f"[{ch}]" if ch in "*?[" else ch for ch in name)


_MATCHERS: dict[str, Callable[[str], object]] = {}
"""What each ``match`` pattern met so far fits, by pattern: ``str.__eq__`` for a pattern with
no wildcard (``*?[``), else the match of its ``fnmatch`` expression (:func:`_matcher`)."""


def _matcher(pattern: str) -> Callable[[str], object]:
    """A test for the names ``pattern`` fits, as ``fnmatch.fnmatchcase`` says (a true result:
    it fits), remembered per pattern: a policy decides every call."""
    matcher = _MATCHERS.get(pattern)
    if matcher is None:
        if "*" in pattern or "?" in pattern or "[" in pattern:
            matcher = re.compile(fnmatch.translate(pattern)).match
        else:
            matcher = pattern.__eq__
        if len(_MATCHERS) >= 4096:  # patterns come from policy files: few; bound it anyway
            _MATCHERS.clear()
        _MATCHERS[pattern] = matcher
    return matcher


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
    kept (``…`` marks a cut, followed by how many bytes were left out), then quotes and
    backslashes are escaped and every control, format (bidi overrides, zero-width) or
    line/paragraph separator character becomes ``\\uXXXX``, and what Markdown could make a link
    of is backslash-escaped (R-POL-6): the result is one line that shows exactly what the
    argument holds, and no link.
    """
    if isinstance(value, str):
        text = value
    else:
        import json  # noqa: PLC0415 (when a prompt quotes a value that is not text: docs/performance.md)

        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        except (TypeError, ValueError, RecursionError):
            text = f"<{type(value).__name__}>"
    rest = text[limit:]
    text = text[:limit]
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        escaped = text  # nothing to escape: printable ASCII has no control or format characters
    else:
        escaped = "".join(_escape_char(ch) for ch in text)
    if not escaped.isalnum():  # letters and digits alone make no link: nothing to look for
        escaped = _LINKISH.sub(_defang, escaped)  # R-POL-6
    if not rest:
        return f'"{escaped}"'
    more = len(rest.encode("utf-8", "surrogatepass"))
    return f'"{escaped}…" (and {more} more bytes)'


_LINKISH = re.compile(r"\]\(|[<>@]|://|(?i:www)\.")
"""What could make a quoted value a link, an image, a tag or an autolink (R-POL-6)."""


def _defang(found: re.Match[str]) -> str:
    markup = found.group()
    if markup == "://":
        return ":\\/\\/"
    if markup == "](":
        return "]\\("
    if markup.endswith("."):
        return markup[:-1] + "\\."
    return "\\" + markup


def shown(value: object, limit: int = QUOTE_LIMIT) -> str:
    """An argument as a prompt shows it: a number, boolean or null as its JSON literal (``5``,
    ``2.5``, ``true``, ``null``) when that is at most ``limit`` characters; anything else (text,
    objects, arrays, a longer number) as :func:`quote` writes it."""
    if type(value) is str:
        return quote(value, limit)
    import json  # noqa: PLC0415 (as in quote)

    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int | float) and math.isfinite(value):
        try:
            literal = json.dumps(value)
        except ValueError:  # an int past the interpreter's digit limit
            return quote(value, limit)
        if len(literal) <= limit:
            return literal
    return quote(value, limit)


def render_prompt(template: str, tool: str, arguments: Mapping[str, Any]) -> str:
    """The prompt for a call: ``{tool}`` replaced by the quoted name, ``{args.NAME}`` by the
    argument as :func:`shown` writes it, or ``(none)`` when the call has no such argument; when
    a value was cut, the prompt ends with the digest of the whole arguments (R-POL-6)."""

    parts = _TEMPLATES.get(template)
    if parts is None:
        parts = _template_parts(template)
    pieces = list(parts)
    cut = False
    for i in range(1, len(pieces), 2):  # the fields, between the literal texts
        field = pieces[i]
        if field == "tool":
            text = quote(tool)
        else:
            name = field[len("args.") :]
            text = shown(arguments[name]) if name in arguments else "(none)"
        cut = cut or text.endswith(" more bytes)")
        pieces[i] = text
    prompt = "".join(pieces)
    if not cut:
        return prompt
    try:
        digest = arguments_digest(dict(arguments))[:16]
    except ValueError:
        digest = "unavailable"
    return f"{prompt} (arguments sha256:{digest})"  # R-POL-6


_TEMPLATES: dict[str, tuple[str, ...]] = {}
"""Each prompt template met so far, split (:func:`_template_parts`), by its text."""


def _template_parts(template: str) -> tuple[str, ...]:
    """``template`` split at its placeholders: literal text, then the field of a placeholder
    (``tool``, ``args.NAME``), then literal text, and so on; remembered per template."""
    parts = tuple(_PLACEHOLDER.split(template))
    if len(_TEMPLATES) >= 4096:  # templates come from policy files: few; bound it anyway
        _TEMPLATES.clear()
    _TEMPLATES[template] = parts
    return parts


LIST_METHODS: Final = ("tools/list", "resources/list", "resources/templates/list", "prompts/list")
"""The read methods a file without ``[[reads]]`` allows (R-POL-2)."""

NO_READS_REASON: Final = "the policy file has no [[reads]] entry for this method"
"""The reason a read other than a list gets from a file without ``[[reads]]`` (R-POL-2)."""


def _default_reads() -> tuple[Rule, ...]:
    allowed = tuple(Rule(method, "allow", "", 0) for method in LIST_METHODS)
    return (*allowed, Rule("*", "deny", NO_READS_REASON, 0))


@attrs.frozen(slots=True)
class Policy:
    """The rules of one file. :meth:`authorize` and :meth:`authorize_read` are the authorizers,
    :meth:`visible` the visibility hook (``Server(visibility=...)``).

    ``warnings`` are what the loader found suspicious (an ``ask`` on a read, an entry an earlier
    one shadows), ``notices`` what it chose for the file (the reads of a file without
    ``[[reads]]``); each names the file and the line. ``askgate serve`` logs them at start.
    """

    tools: tuple[Rule, ...]
    reads: tuple[Rule, ...]
    source: str = "<policy>"
    warnings: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()

    def decide(self, rules: tuple[Rule, ...], name: str, arguments: Mapping[str, Any]) -> Decision:
        matchers = _MATCHERS
        for rule in rules:
            pattern = rule.match
            if rule.literal:  # R-POL-11: the name itself
                if pattern != name:
                    continue
            elif not (matchers.get(pattern) or _matcher(pattern))(name):
                continue
            if rule.decision == "allow":
                return _ALLOW
            if rule.decision == "deny":
                return Deny(rule.text)
            return Ask(render_prompt(rule.text, name, arguments))
        return Deny("no policy rule matches")

    @ignores_context  # the shell may pass None as the context
    @completes_without_suspending
    async def authorize(self, tool: str, arguments: object, _context: object) -> Decision:
        """The tool authorizer: ``(tool name, arguments, context) -> decision``."""
        return self.decide(self.tools, tool, arguments if isinstance(arguments, dict) else {})

    @completes_without_suspending
    async def authorize_read(self, method: str, params: object, _context: object) -> Decision:
        """The read authorizer: ``(method name, params, context) -> decision``."""
        return self.decide(self.reads, method, params if isinstance(params, dict) else {})

    @completes_without_suspending
    async def visible(self, tool: str, _context: object) -> bool:
        """The visibility hook: ``tools/list`` shows ``tool`` when the first ``[[tools]]`` entry
        matching its name allows or asks (R-POL-1). Arguments play no part."""
        for rule in self.tools:
            if rule.fits(tool):
                return rule.decision != "deny"
        return False


# -- loading ---------------------------------------------------------------------------------------

_HEADER = re.compile(r"^\s*\[")


class _Layout:
    """Where things are in the file's text, for messages that name a line."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.headers = [n for n, line in enumerate(self.lines, 1) if _HEADER.match(line)]

    def headers_of(self, section: str) -> list[int]:
        pattern = re.compile(rf"^\s*\[\[\s*{re.escape(section)}\s*\]\]")
        return [n for n in self.headers if pattern.match(self.lines[n - 1])]

    def key_line(self, key: str, start: int = 1) -> int | None:
        """The line of ``key = ...`` in the table that starts at line ``start`` (or at the top
        of the file), or ``None``."""
        pattern = re.compile(
            rf"""^\s*(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')\s*="""
        )
        end = next((n for n in self.headers if n > start), len(self.lines) + 1)
        first = start + 1 if start in self.headers else start
        for n in range(first, end):
            if pattern.match(self.lines[n - 1]):
                return n
        return None

    def section_line(self, section: str) -> int:
        """The line that opens ``section``: its header, else ``section = ...``."""
        pattern = re.compile(rf"^\s*\[+\s*{re.escape(section)}\s*[\].]")
        for n in self.headers:
            if pattern.match(self.lines[n - 1]):
                return n
        return self.key_line(section) or 1


_KEY_LIST: Final = "match, decision, prompt, reason, literal"


def _unclosed_brace(prompt: str) -> int | None:
    """Where in ``prompt`` the first ``{`` is that no ``}`` closes (R-POL-4), or ``None``."""
    at = 0
    for found in _PLACEHOLDER.finditer(prompt):
        brace = prompt.find("{", at, found.start())
        if brace >= 0:
            return brace
        at = found.end()
    brace = prompt.find("{", at)
    return brace if brace >= 0 else None


def _rule(entry: object, section: str, index: int, layout: _Layout, source: str) -> Rule:
    headers = layout.headers_of(section)
    start = headers[index] if index < len(headers) else layout.section_line(section)

    def fail(problem: str, key: str | None = None) -> PolicyError:
        line = (layout.key_line(key, start) if key else None) or start
        return PolicyError(f"{source}, line {line}: [[{section}]] entry {index + 1}: {problem}")

    if not isinstance(entry, dict):
        raise fail(f"an entry must be a table with the keys {_KEY_LIST}")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise fail(f"unknown key {unknown[0]!r} (the keys are {_KEY_LIST})", unknown[0])
    match = entry.get("match")
    if "match" not in entry:
        raise fail('has no match (a name, or a glob such as "fs.*" or "*")')
    if not isinstance(match, str) or not match:
        raise fail(
            f"match = {match!r}: match must be a non-empty string (a name, or a glob such as "
            '"fs.*")',
            "match",
        )
    literal = entry.get("literal")
    if literal is not None and type(literal) is not bool:
        raise fail(
            f"literal = {literal!r}: literal must be true (match is a name, read exactly) or "
            "false (match is a glob)",
            "literal",
        )
    if "decision" not in entry:
        raise fail("has no decision (one of allow, ask, deny)")
    decision = entry["decision"]
    if decision not in _DECISIONS:
        raise fail(f"decision = {decision!r}: decision must be one of allow, ask, deny", "decision")
    text = ""
    if decision == "deny":
        if "prompt" in entry:
            raise fail("a deny takes a reason, not a prompt", "prompt")
        reason = entry.get("reason")
        if not isinstance(reason, str) or not reason:
            where = "reason" if "reason" in entry else "decision"
            raise fail("a deny needs a reason (a non-empty string the client reads)", where)
        text = reason
    elif decision == "ask":
        if "reason" in entry:
            raise fail("an ask takes a prompt, not a reason", "reason")
        prompt = entry.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            where = "prompt" if "prompt" in entry else "decision"
            raise fail("an ask needs a prompt (a non-empty string the user approves)", where)
        brace = _unclosed_brace(prompt)
        if brace is not None:
            raise fail(
                f"the prompt has a {{ that no }} closes, at {prompt[brace : brace + 24]!r}; "
                "a placeholder is {tool} or {args.NAME}",
                "prompt",
            )
        for found in _PLACEHOLDER.finditer(prompt):
            field = found.group(1)
            if field != "tool" and not _ARG_NAME.fullmatch(field):
                raise fail(
                    f"the prompt quotes {{{field}}}; only {{tool}} and {{args.NAME}} are known",
                    "prompt",
                )
        text = prompt
    else:
        for key in ("prompt", "reason"):
            if key in entry:
                raise fail(f"an allow takes neither a prompt nor a reason (found {key})", key)
    return Rule(match, decision, text, start, literal)


def _rules(data: dict[str, Any], section: str, layout: _Layout, source: str) -> tuple[Rule, ...]:
    entries = data.get(section, [])
    if not isinstance(entries, list):
        line = layout.section_line(section)
        raise PolicyError(
            f"{source}, line {line}: {section} must be an array of tables ([[{section}]] entries)"
        )
    return tuple(_rule(entry, section, i, layout, source) for i, entry in enumerate(entries))


def _shadowing(rules: tuple[Rule, ...], section: str, source: str) -> list[str]:
    """A warning for each entry an earlier one always wins over (``match = "*"``, or the same
    match): it can never decide anything."""
    found = []
    for later_index, later in enumerate(rules):
        for index, earlier in enumerate(rules[:later_index]):
            if earlier.glob in ("*", later.glob):
                found.append(
                    f"{source}, line {later.line}: [[{section}]] entry {later_index + 1} "
                    f"({later.label}) never applies: entry {index + 1} on line "
                    f"{earlier.line} ({earlier.label}) comes first and matches every "
                    "name it matches"
                )
                break
    return found


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """The policy in ``text``; raises :class:`PolicyError` naming ``source`` and the line."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as bad:
        raise PolicyError(f"{source}: not valid TOML: {bad}") from None
    layout = _Layout(text)
    unknown = sorted(set(data) - {"tools", "reads"})
    if unknown:
        line = layout.section_line(unknown[0])
        raise PolicyError(
            f"{source}, line {line}: unknown section {unknown[0]!r} (the sections are "
            "[[tools]] and [[reads]])"
        )
    tools = _rules(data, "tools", layout, source)
    reads = _rules(data, "reads", layout, source)
    warnings = [*_shadowing(tools, "tools", source), *_shadowing(reads, "reads", source)]
    for index, rule in enumerate(reads):
        if rule.decision == "ask":
            warnings.append(
                f"{source}, line {rule.line}: [[reads]] entry {index + 1} ({rule.label}) "
                "asks, but a read is never parked: the client is denied "
                f"({READ_ASK!r}); write allow or deny"
            )
    if not tools:
        warnings.append(
            f"{source}, line 1: no [[tools]] entry: every tool is denied and hidden "
            '(write [[tools]] entries, match = "*" for a default)'
        )
    notices = []
    if not reads:
        reads = _default_reads()
        notices.append(
            f"{source} has no [[reads]] entry: {', '.join(LIST_METHODS)} are allowed, every "
            "other read (resources/read, prompts/get, ...) is denied"
        )
    return Policy(tools, reads, source, tuple(sorted(warnings, key=_line_of)), tuple(notices))


def _line_of(message: str) -> int:
    found = re.search(r", line (\d+):", message)
    return int(found.group(1)) if found else 0


def load_policy(path: str | Path) -> Policy:
    """The policy in the file ``path`` (UTF-8 TOML)."""
    where = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as bad:
        raise PolicyError(f"{where}: cannot read the policy file: {bad.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        line = raw[: bad.start].count(b"\n") + 1
        raise PolicyError(f"{where}, line {line}: not UTF-8 (byte {bad.start})") from None
    return parse_policy(text, where)
