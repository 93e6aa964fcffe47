"""Traces: every event the shell fed the reducer, with the effects it got back, as JSON lines;
and replay, which re-runs the reducer over a trace and finds the first step whose effects differ
(spec/audit.md, R-AUD-3 .. R-AUD-6).

A trace's first line is its header: the trace format's version, whether arguments are redacted,
and the reducer's initial state (its options, its tools, its catalog and the run's keys, so that
elicitation ids and sealed approval states come out the same). Every further line is one step:
``{"n": 1, "event": ..., "effects": [...]}``; an event carries its ``now``.

Values are written by :func:`encode`, a small codec over attrs classes: an attrs object is
``{"$type": "ClassName", field: value, ...}``; a tuple ``{"$tuple": [...]}``, bytes
``{"$utf8": text}`` (``{"$bytes": base64}`` when not UTF-8), a persistent map
``{"$map": [[key, value], ...]}``, a dict with a key that is not a string or starts with ``$``
``{"$dict": [[key, value], ...]}``, an enum member
``{"$enum": "Class", "value": ...}``. Every other value is JSON as it is. Only the classes of
:data:`CLASSES` decode.

Redaction (the default): the arguments of a ``tools/call`` (in a ``MessageReceived`` the shell
fed, a ``ToolCallReceived``, and the ``Authorize`` and ``RunTool`` jobs of ``StartWorker``) are
written as ``{"$redacted": digest, "problem": ...}``: their keyed digest (R-AUD-2) and what the
input schema check made of them (R-PROTO-6), so replay can compare them and take the same
schema verdict. What a callback made of arguments (a prompt quoting them, a result) is recorded
as it is: a trace is as secret as the run's traffic, and is created readable by its owner only.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs
from immutables import Map

from askgate.core import codec, decisions, effects, events, jobs, step
from askgate.core.options import Options
from askgate.core.sealing import Key, Keyring, keyed_digest
from askgate.core.state import Catalog, State, initial_state
from askgate.core.tools import ToolInfo, argument_problem
from askgate.ruleids import rules_of

__all__ = [
    "CLASSES",
    "FORMAT",
    "Difference",
    "Redacted",
    "TraceError",
    "decode",
    "digest",
    "encode",
    "header",
    "read_runs",
    "read_trace",
    "redact_effect",
    "redact_event",
    "replay",
    "state_of",
]

FORMAT = 1
"""The version of the trace format written in every header (``"askgate_trace": 1``)."""


class TraceError(ValueError):
    """A trace that cannot be read: names the line."""


class Redacted(dict[str, Any]):
    """Arguments that a trace keeps only as their keyed ``digest``, with the schema check's
    verdict ``problem`` (``None``: they passed). An empty dict to the reducer, so it is an
    object of arguments as the original was."""

    __slots__ = ("digest", "problem")

    def __init__(self, digest: str, problem: str | None) -> None:
        super().__init__()
        self.digest = digest
        self.problem = problem

    @property
    def keyed_digest(self) -> str:
        """The digest the reducer takes for these arguments (R-DLV-5): the recorded one."""
        return self.digest


def _classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for module in (events, effects, jobs, decisions, codec):
        for name in dir(module):
            value = getattr(module, name)
            if isinstance(value, type) and attrs.has(value) and value.__module__ == module.__name__:
                found[name] = value
    for cls in (Options, Key, Keyring, Catalog):
        found[cls.__name__] = cls
    return found


CLASSES: dict[str, type] = _classes()
"""The attrs classes a trace may hold, by name: events, effects, jobs, decisions, decoded
messages, options and keys."""


def digest(key: bytes, arguments: object) -> str:
    """The keyed digest of ``arguments`` (R-AUD-2): BLAKE2b-128 keyed with ``key`` over their
    canonical JSON text (sorted keys, compact, as R-MRTR-3 writes them), hex. Arguments JSON
    cannot carry digest their ``repr``. The reducer's own, so an approval prompt shows the
    start of this very digest (R-DLV-5)."""
    return keyed_digest(key, arguments)


_PLAIN = (str, int, float, bool, type(None))
_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(cls: Any) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in attrs.fields(cls))
    return names


def encode(value: object) -> Any:
    """``value`` as JSON-ready data (see the module's docstring)."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is dict:
        items: dict[Any, Any] = value  # type: ignore[assignment]
        for k in items:
            if type(k) is not str or k.startswith("$"):
                return {"$dict": [[encode(k), encode(v)] for k, v in items.items()]}
        return {k: v if type(v) in _PLAIN else encode(v) for k, v in items.items()}
    if kind is list:
        return [v if type(v) in _PLAIN else encode(v) for v in value]  # type: ignore[attr-defined]
    if kind is tuple:
        return {"$tuple": [encode(v) for v in value]}  # type: ignore[attr-defined]
    if kind is Redacted:
        redacted: Redacted = value  # type: ignore[assignment]
        return {"$redacted": redacted.digest, "problem": redacted.problem}
    if kind in _FIELDS or attrs.has(kind):
        out: dict[str, Any] = {"$type": kind.__name__}
        for name in _fields(kind):
            field = getattr(value, name)
            out[name] = field if type(field) in _PLAIN else encode(field)
        return out
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return encode(dict(value))
    if isinstance(value, list | tuple):
        return encode(tuple(value) if isinstance(value, tuple) else list(value))
    if isinstance(value, bytes):
        try:
            return {"$utf8": value.decode()}
        except UnicodeDecodeError:
            return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Map):
        return {"$map": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, enum.Enum):
        return {"$enum": type(value).__name__, "value": encode(value.value)}
    raise TypeError(f"a trace cannot hold {type(value).__name__}")


def decode(data: Any) -> Any:
    """The value :func:`encode` wrote as ``data``; raises TraceError for an unknown class."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    if "$type" in data:
        cls = CLASSES.get(data["$type"])
        if cls is None:
            raise TraceError(f"unknown class {data['$type']!r}")
        kwargs = {
            f.alias: decode(data[f.name]) for f in attrs.fields(cls) if f.name in data and f.init
        }
        return cls(**kwargs)
    if "$redacted" in data:
        return Redacted(data["$redacted"], data.get("problem"))
    if "$tuple" in data:
        return tuple(decode(v) for v in data["$tuple"])
    if "$utf8" in data:
        return str(data["$utf8"]).encode()
    if "$bytes" in data:
        return base64.b64decode(data["$bytes"])
    if "$map" in data:
        return Map({decode(k): decode(v) for k, v in data["$map"]})
    if "$dict" in data:
        return {decode(k): decode(v) for k, v in data["$dict"]}
    if "$enum" in data:
        raise TraceError(f"unknown enum {data['$enum']!r}")
    return {k: decode(v) for k, v in data.items()}


# -- redaction ------------------------------------------------------------------------------------


def _redacted(key: bytes, tools: Map[str, ToolInfo], tool: object, arguments: object) -> object:
    if not isinstance(arguments, dict) or isinstance(arguments, Redacted):
        return arguments
    info = tools.get(tool) if isinstance(tool, str) else None
    problem = None if info is None else argument_problem(info, arguments)
    return Redacted(digest(key, arguments), problem)


def redact_event(key: bytes, tools: Map[str, ToolInfo], event: object) -> object:
    """``event`` with the arguments of a ``tools/call`` redacted (a ``MessageReceived``'s bytes
    are decoded for it, as the reducer would decode them: R-PROTO-1)."""
    if isinstance(event, events.ToolCallReceived):
        return attrs.evolve(event, arguments=_redacted(key, tools, event.tool, event.arguments))
    if isinstance(event, events.MessageReceived):
        data = event.data
        if isinstance(data, bytes) and b"tools/call" not in data:
            return event  # not a tools/call: nothing to redact, nothing to decode
        message = codec.decode(data) if isinstance(data, bytes) else data
        if (
            isinstance(message, codec.Request)
            and message.method == "tools/call"
            and isinstance(message.params, dict)
            and isinstance(message.params.get("arguments"), dict)
        ):
            params = dict(message.params)
            params["arguments"] = _redacted(key, tools, params.get("name"), params["arguments"])
            return attrs.evolve(event, data=attrs.evolve(message, params=params))
    return event


def redact_effect(key: bytes, tools: Map[str, ToolInfo], effect: object) -> object:
    """``effect`` with the arguments of an ``Authorize`` or ``RunTool`` job redacted."""
    if isinstance(effect, effects.StartWorker) and isinstance(
        effect.job, jobs.Authorize | jobs.RunTool
    ):
        job = effect.job
        return attrs.evolve(
            effect, job=attrs.evolve(job, arguments=_redacted(key, tools, job.tool, job.arguments))
        )
    return effect


# -- the header: the initial state ----------------------------------------------------------------


def header(state: State, *, redacted: bool) -> dict[str, Any]:
    """The first line of a trace of a run that starts from ``state`` (R-AUD-3)."""
    tools = [
        [info.name, info.sensitive, info.derived, encode(info.definition)]
        for info in state.tools.values()
    ]
    return {
        "askgate_trace": FORMAT,
        "redacted": redacted,
        "options": encode(state.options),
        "id_key": encode(state.id_key),
        "keyring": encode(state.keyring),
        # R-DLV-5: whether prompts show a digest; its key only where the arguments are too
        "digest_key": None
        if state.digest_key is None
        else (REDACTED_KEY if redacted else encode(state.digest_key)),
        "tools": tools,
        "catalog": encode(state.catalog),
    }


class _Witness:
    """A schema validator that takes a redacted argument's recorded verdict (R-AUD-4)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def is_valid(self, arguments: Any) -> bool:
        if isinstance(arguments, Redacted):
            return arguments.problem is None
        return bool(self.inner.is_valid(arguments))

    def iter_errors(self, arguments: Any) -> Iterator[Any]:
        if isinstance(arguments, Redacted):
            if arguments.problem is not None:
                yield _Problem(arguments.problem)
            return
        yield from self.inner.iter_errors(arguments)


@attrs.frozen
class _Problem:
    message: str
    instance_path: tuple[object, ...] = ()


def _witnessed(state: State) -> State:
    tools = state.tools
    for name, info in state.tools.items():
        if info.validator is not None and not isinstance(info.validator, _Witness):
            tools = tools.set(name, attrs.evolve(info, validator=_Witness(info.validator)))
    return state if tools is state.tools else attrs.evolve(state, tools=tools)


REDACTED_KEY = "redacted"
"""A redacted trace's ``digest_key``: prompts showed digests, whose key the trace does not hold
(its arguments carry their recorded digests instead, R-AUD-4)."""


def _digest_key(recorded: object) -> bytes | None:
    if recorded is None:
        return None
    if recorded == REDACTED_KEY:  # never used: every asked call's arguments are redacted
        return hashlib.blake2b(b"askgate/redacted-trace").digest()
    key = decode(recorded)
    if not isinstance(key, bytes):
        raise TraceError("line 1: digest_key is not bytes")
    return key


def state_of(head: dict[str, Any]) -> State:
    """The initial state a trace's header describes."""
    if head.get("askgate_trace") != FORMAT:
        raise TraceError(f"line 1: not an askgate trace of format {FORMAT}")
    tools = tuple(
        ToolInfo(name, sensitive, derived, decode(definition))
        for name, sensitive, derived, definition in head["tools"]
    )
    state = initial_state(
        decode(head["options"]),
        id_key=decode(head["id_key"]),
        tools=tools,
        keyring=decode(head["keyring"]),
        digest_key=_digest_key(head.get("digest_key")),
    )
    state = attrs.evolve(state, catalog=decode(head["catalog"]))
    return _witnessed(state) if head.get("redacted") else state


# -- reading and replaying ------------------------------------------------------------------------


def read_runs(lines: Iterable[str]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """The runs of a trace file (each run appends its header, then its steps), as JSON data."""
    runs: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as bad:
            raise TraceError(f"line {number}: not JSON ({bad})") from None
        if not isinstance(data, dict):
            raise TraceError(f"line {number}: not a JSON object")
        if "askgate_trace" in data:
            runs.append((data, []))
        elif not runs:
            raise TraceError(f"line {number}: a step before any header")
        else:
            runs[-1][1].append(data)
    if not runs:
        raise TraceError("the trace is empty")
    return runs


def read_trace(lines: Iterable[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and steps of a trace of one run (the last run of a file that holds more)."""
    return read_runs(lines)[-1]


@attrs.frozen
class Difference:
    """The first step whose replayed effects differ from the recorded ones: its number, its
    event's kind, the place of the first differing effect, both effects (``None`` where one
    list is shorter), and the rule ids each side's step names (:func:`askgate.ruleids.rules_of`)."""

    n: int
    event: str
    index: int
    recorded: Any
    replayed: Any
    recorded_rules: tuple[str, ...]
    replayed_rules: tuple[str, ...]
    where: str = ""
    hint: str = ""

    def text(self) -> str:
        at = f" at {self.where}" if self.where else ""
        hint = f"\n  ({self.hint})" if self.hint else ""
        return (
            f"step {self.n} ({self.event}): effect {self.index} differs{at}\n"
            f"  recorded: {json.dumps(self.recorded, sort_keys=True)}\n"
            f"    rules: {', '.join(self.recorded_rules) or '-'}\n"
            f"  replayed: {json.dumps(self.replayed, sort_keys=True)}\n"
            f"    rules: {', '.join(self.replayed_rules) or '-'}{hint}"
        )


def first_difference(a: Any, b: Any, path: str = "") -> str:
    """Where two encoded values first differ, as a dotted path (``""``: at the top)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            if a.get(key) != b.get(key):
                return first_difference(a.get(key), b.get(key), f"{path}.{key}" if path else key)
        return path
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return first_difference(x, y, f"{path}[{i}]")
    return path


SEALED_HINT = (
    "a redacted trace cannot recompute the arguments digest a 2026-07-28 approval state binds "
    "(R-AUD-4): record with --trace-arguments"
)


Stepper = Callable[[State, Any], tuple[State, list[Any]]]


def replay(
    head: dict[str, Any], steps: list[dict[str, Any]], *, stepper: Stepper | None = None
) -> tuple[int, Difference | None]:
    """Re-runs the reducer from the header's state over every recorded event and compares the
    effects, encoded as they were recorded (R-AUD-5): the number of steps replayed and the first
    :class:`Difference`, or ``None`` when every step reproduced its effects."""
    run = stepper or step
    state = state_of(head)
    redacted = bool(head.get("redacted"))
    for count, record in enumerate(steps, 1):
        event = decode(record["event"])
        before = state
        state, out = run(state, event)
        if redacted and isinstance(event, events.ToolRegistered):
            state = _witnessed(state)
        got = [encode(effect) for effect in out]
        want = record["effects"]
        if got != want:
            index = next(
                (i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b),
                min(len(want), len(got)),
            )
            recorded = [decode(e) for e in want]
            mine = want[index] if index < len(want) else None
            theirs = got[index] if index < len(got) else None
            where = first_difference(mine, theirs)
            sealed = redacted and "requestState" in where
            return count, Difference(
                n=int(record.get("n", count)),
                event=type(event).__name__,
                index=index,
                recorded=mine,
                replayed=theirs,
                recorded_rules=rules_of(before, event, recorded),
                replayed_rules=rules_of(before, event, out),
                where=where,
                hint=SEALED_HINT if sealed else "",
            )
    return len(steps), None


def open_private(path: str) -> Any:
    """Opens ``path`` to append text, created readable and writable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    return os.fdopen(fd, "a", encoding="utf-8")
