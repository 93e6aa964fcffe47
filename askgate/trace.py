"""Traces: every event the shell fed the reducer, with the effects it got back, as JSON lines;
and replay, which re-runs the reducer over a trace and finds the first step whose effects differ
(spec/audit.md, R-AUD-3 .. R-AUD-6, R-AUD-9 .. R-AUD-12).

A trace's first line is its header: the trace format's version, whether arguments are redacted,
and the reducer's initial state (its options, its tools, its catalog, and the run's keys named
by key id: see "Keys" below). Every further line is one step:
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
as it is: a trace is as secret as the run's traffic, and is created readable by its owner only,
never through a link (R-AUD-9: :func:`open_private`).

Keys (R-AUD-10 .. R-AUD-12): a trace holds no key material. The header names the run's
``id_key`` and each sealing key's secret by a key id, ``{"$key": fingerprint}`` (:func:`key_id`:
an HMAC of a fixed label under the key, which says nothing of it); the secrets go, if the embedder
asks, to a separate key file (``--trace-keys``: one ``key-id hex-secret`` line each,
:func:`key_lines`, :func:`read_keys`). Replay given the keys is exact; without them it stands
substitutes in, and takes the values only the keys derive (elicitation and request ids, nonces,
sealed request states) as recorded, learning at each step the recorded value its own stands for:
every other value of every step is still compared, and the steps whose effects needed a key are
named (:class:`Replayed`).
"""

from __future__ import annotations

import base64
import enum
import errno
import hashlib
import hmac
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, TextIO

import attrs
from immutables import Map

from askgate.core import codec, decisions, effects, events, jobs, sealing, step
from askgate.core import messages as m
from askgate.core.options import Options
from askgate.core.reducer import _keyed_digest, mint_elicitation_id, nonce_id
from askgate.core.sealing import Key, Keyring, keyed_digest
from askgate.core.state import Catalog, State, initial_state
from askgate.core.tools import ToolInfo, argument_problem
from askgate.ruleids import rules_of

__all__ = [
    "CLASSES",
    "FORMAT",
    "LOG_KINDS",
    "MAX_DEPTH",
    "Difference",
    "Redacted",
    "Replayed",
    "TraceError",
    "UnsafeFileError",
    "Walker",
    "decode",
    "digest",
    "encode",
    "header",
    "key_id",
    "key_lines",
    "open_private",
    "read_keys",
    "read_runs",
    "read_trace",
    "redact_effect",
    "redact_event",
    "replay",
    "state_of",
]

FORMAT = 2
"""The version of the trace format written in every header (``"askgate_trace": 2``): 2 names
keys by their key id (R-AUD-10); format 1, which held them, is still read."""

FORMATS = (1, 2)


class TraceError(ValueError):
    """A trace that cannot be read: names the line."""


MAX_DEPTH = 200
"""The deepest nesting of a trace line read (R-AUD-13): a recorded message is at most
:data:`askgate.core.codec.MAX_DEPTH` deep, and what reads a line (decoding, replaying,
comparing, explaining) recurses once or twice per level, far within Python's limit."""


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
    if kind is Key:  # its secret is named, never written (R-AUD-10)
        key: Key = value  # type: ignore[assignment]
        return {"$type": "Key", "key_id": key.key_id, "secret": {"$key": key_id(key.secret)}}
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
    if "$key" in data:
        raise TraceError(f"the secret of key {data['$key']!r} is not in the trace (R-AUD-10)")
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


def key_id(secret: bytes) -> str:
    """The key id a trace names ``secret`` by (R-AUD-10): 16 hex digits of HMAC-SHA256, keyed
    with the secret, of a fixed label. It tells which key; it tells nothing of the key."""
    return hmac.digest(secret, b"askgate/trace/key-id", "sha256")[:8].hex()


def _secrets(state: State) -> list[bytes]:
    secrets = [state.id_key]
    ring = state.keyring
    if ring is not None:
        secrets.append(ring.current.secret)
        if ring.previous is not None:
            secrets.append(ring.previous.secret)
    if state.digest_key is not None:  # R-DLV-5: the prompts' digests, for a trace with arguments
        secrets.append(state.digest_key)
    return secrets


KEY_FILE_HEAD = "# askgate trace keys (spec/audit.md, R-AUD-11): key-id hex-secret"


def key_lines(state: State) -> list[str]:
    """The lines of a key file that holds the keys of a run starting from ``state``
    (R-AUD-11): ``key-id hex-secret``, the run's ``id_key`` first, then the sealing keys."""
    return [KEY_FILE_HEAD, *(f"{key_id(secret)} {secret.hex()}" for secret in _secrets(state))]


def read_keys(lines: Iterable[str]) -> dict[str, bytes]:
    """The keys of a key file, by key id; raises TraceError naming the line (never quoting a
    secret) for a line that is not ``key-id hex-secret`` or whose secret is not that key's."""
    keys: dict[str, bytes] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        parts = text.split()
        if len(parts) != 2:
            raise TraceError(f"line {number}: not `key-id hex-secret`")
        name, hexed = parts
        try:
            secret = bytes.fromhex(hexed)
        except ValueError:
            raise TraceError(f"line {number}: the secret is not hexadecimal") from None
        if not secret or not hmac.compare_digest(key_id(secret), name):
            raise TraceError(f"line {number}: the secret is not that of key {name[:16]!r}")
        keys[name] = secret
    return keys


def header(state: State, *, redacted: bool) -> dict[str, Any]:
    """The first line of a trace of a run that starts from ``state`` (R-AUD-3); its keys are
    named by key id, never written (R-AUD-10)."""
    tools = [
        [info.name, info.sensitive, info.derived, encode(info.definition)]
        for info in state.tools.values()
    ]
    return {
        "askgate_trace": FORMAT,
        "redacted": redacted,
        "options": encode(state.options),
        "id_key": {"$key": key_id(state.id_key)},
        "keyring": encode(state.keyring),
        # R-DLV-5: whether prompts show a digest; its key (by key id, R-AUD-10) only where the
        # arguments are kept too
        "digest_key": None
        if state.digest_key is None
        else (REDACTED_KEY if redacted else {"$key": key_id(state.digest_key)}),
        "tools": tools,
        "catalog": encode(state.catalog),
    }


def _stand_in(name: str) -> bytes:
    """The secret replay stands in for the key ``name`` it was not given (R-AUD-12)."""
    return hmac.digest(b"askgate/replay/stand-in", name.encode(), "sha256")


def _with_keys(data: Any, keys: Mapping[str, bytes], missing: list[str]) -> Any:
    """``data`` (a header's keys) with each ``{"$key": id}`` the secret ``keys`` has for it, or
    a stand-in (its id added to ``missing``)."""
    if isinstance(data, list):
        return [_with_keys(v, keys, missing) for v in data]
    if not isinstance(data, dict):
        return data
    if "$key" in data:
        name = str(data["$key"])
        secret = keys.get(name)
        if secret is None:
            secret = _stand_in(name)
            if name not in missing:
                missing.append(name)
        return {"$bytes": base64.b64encode(secret).decode("ascii")}
    return {k: _with_keys(v, keys, missing) for k, v in data.items()}


def missing_keys(head: dict[str, Any], keys: Mapping[str, bytes] | None = None) -> tuple[str, ...]:
    """The ids of the keys a trace's header names that ``keys`` does not hold."""
    missing: list[str] = []
    _with_keys(
        [head.get("id_key"), head.get("keyring"), head.get("digest_key")], keys or {}, missing
    )
    return tuple(missing)


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
"""A redacted trace's ``digest_key``: prompts showed digests, whose key the trace does not need
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


def state_of(head: dict[str, Any], keys: Mapping[str, bytes] | None = None) -> State:
    """The initial state a trace's header describes, its keys taken from ``keys`` (by key id),
    each key ``keys`` does not hold replaced by a stand-in (R-AUD-12)."""
    if head.get("askgate_trace") not in FORMATS:
        raise TraceError(f"line 1: not an askgate trace of format {FORMAT}")
    tools = tuple(
        ToolInfo(name, sensitive, derived, decode(definition))
        for name, sensitive, derived, definition in head["tools"]
    )
    id_key, keyring, digest_key = _with_keys(
        [head["id_key"], head["keyring"], head.get("digest_key")], keys or {}, []
    )
    state = initial_state(
        decode(head["options"]),
        id_key=decode(id_key),
        tools=tools,
        keyring=decode(keyring),
        digest_key=_digest_key(digest_key),
    )
    state = attrs.evolve(state, catalog=decode(head["catalog"]))
    return _witnessed(state) if head.get("redacted") else state


# -- reading and replaying ------------------------------------------------------------------------


LOG_KINDS: Final = {"call_parked": "parked", "call_ended": "ended", "read_denied": "read_denied"}
"""The decision log's line kind of each record it writes a line for (R-AUD-1); a line of kind
``decided`` says an authorizer's verdict."""


def _log_line(data: dict[str, Any]) -> bool:
    """Whether ``data`` reads as a line of the decision log (R-AUD-1), not of a trace."""
    return data.get("kind") in ("decided", *LOG_KINDS.values()) and "request_id" in data


def read_runs(lines: Iterable[str]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """The runs of a trace file (each run appends its header, then its steps), as JSON data."""
    runs: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if line.count("[") + line.count("{") > MAX_DEPTH and codec._deeper_than(
            line.encode("utf-8", "surrogatepass"), MAX_DEPTH
        ):
            raise TraceError(f"line {number}: nested deeper than {MAX_DEPTH} levels (R-AUD-13)")
        try:
            data = json.loads(line)
        except ValueError as bad:
            raise TraceError(f"line {number}: not JSON ({bad})") from None
        except RecursionError:
            raise TraceError(f"line {number}: nested too deeply to read (R-AUD-13)") from None
        if not isinstance(data, dict):
            raise TraceError(f"line {number}: not a JSON object")
        if "askgate_trace" in data:
            runs.append((data, []))
        elif not runs and _log_line(data):  # R-AUD-13
            raise TraceError(
                f"line {number}: a line of a decision log (askgate serve --audit-log), not of a "
                "trace: replay and explain read the file askgate serve --trace writes"
            )
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


KEYS_HINT = (
    "replayed without the run's keys {names}: if this step opens an approval state sealed "
    "before the trace began, give them with --keys FILE (R-AUD-12)"
)


Stepper = Callable[[State, Any], tuple[State, list[Any]]]

_RUN = re.compile(r"[A-Za-z0-9_-]{16,}")
"""A run of the characters an id or a sealed state is spelled with, as long as the shortest."""
_RUNS = re.compile(f"({_RUN.pattern})")


def _renamed(data: Any, table: Mapping[str, str]) -> Any:
    """``data`` with every run of :data:`_RUN` that ``table`` names replaced by its value."""
    if isinstance(data, str):
        if len(data) < 16:
            return data
        return _RUN.sub(lambda run: table.get(run.group(0), run.group(0)), data)
    if isinstance(data, list):
        return [_renamed(v, table) for v in data]
    if isinstance(data, dict):
        return {_renamed(k, table): _renamed(v, table) for k, v in data.items()}
    return data


class Walker:
    """Steps the reducer from a trace's initial state over its recorded events (R-AUD-5).

    Given every key the header names (``keys``, by key id), the replay is exact. For each key it
    lacks it steps with a stand-in (R-AUD-12): the ids and nonces the stand-in ``id_key``
    derives and the request states the stand-in sealing keys seal are not the recorded ones.
    Where a step's effects differ from the recorded ones only in such values, it learns which
    recorded value each of its own stands for, names the step in :attr:`unverified`, and from
    then on gives the reducer its own value wherever an event carries the recorded one (an
    answer to that elicitation, a retry with that state) and compares effects with the recorded
    value put back. Every other value of every step is compared as it is."""

    def __init__(
        self,
        head: dict[str, Any],
        *,
        keys: Mapping[str, bytes] | None = None,
        stepper: Stepper | None = None,
    ) -> None:
        self.missing = missing_keys(head, keys)
        self.state = state_of(head, keys)
        self.redacted = bool(head.get("redacted"))
        self.unverified: list[int] = []
        self.unbound: list[int] = []
        self._run = stepper or step
        self._stand_ins = frozenset(_stand_in(name) for name in self.missing)
        self._to_replayed: dict[str, str] = {}
        self._to_recorded: dict[str, str] = {}

    def step(self, record: dict[str, Any], n: int) -> tuple[State, Any, list[Any], list[Any]]:
        """Feeds step ``n``'s recorded event: the state before, the event as fed, the effects
        the reducer gave and their encoding, with recorded values put back for learned ones."""
        data = record["event"]
        if self._to_replayed:
            data = _renamed(data, self._to_replayed)
        event = decode(data)
        before = self.state
        after, out = self._run(before, event)
        if self.redacted and isinstance(event, events.ToolRegistered):
            after = _witnessed(after)
        self.state = after
        mine = [encode(effect) for effect in out]
        got = _renamed(mine, self._to_recorded) if self._to_recorded else mine
        want = record["effects"]
        learned = None
        if got != want and (self._stand_ins or self.redacted):
            learned = self._learn(before, after, want, got)
        if learned is not None:
            got = _renamed(mine, self._to_recorded)
            if got == want:
                self.unverified.append(n)
                if learned:
                    self.unbound.append(n)
        return before, event, out, got

    def _learn(self, before: State, after: State, want: Any, got: Any) -> bool | None:
        """Learns the recorded value each of ``got``'s stand-in derived values is, when the two
        differ in those values and nothing else (a request state of a redacted trace also when
        it differs only in the arguments it binds, :meth:`_unbound`); ``None`` when it learned
        none, else whether a request state was taken for that reason (R-AUD-15)."""
        recorded = _RUNS.split(json.dumps(want, sort_keys=True, ensure_ascii=False))
        replayed = _RUNS.split(json.dumps(got, sort_keys=True, ensure_ascii=False))
        if len(recorded) != len(replayed):
            return None
        pairs: dict[str, str] = {}
        unbound = False
        for i, (theirs, mine) in enumerate(zip(recorded, replayed, strict=True)):
            if theirs == mine:
                continue
            if i % 2 == 0:
                return None  # a difference in no id nor sealed state
            if not self._derived(mine, before, after):
                if not self._unbound(theirs, mine, before):
                    return None  # a difference no stand-in key made
                unbound = True
            if pairs.setdefault(mine, theirs) != theirs:
                return None
        new = {
            mine: theirs
            for mine, theirs in pairs.items()
            if mine not in self._to_recorded and theirs not in self._to_replayed
        }
        self._to_recorded.update(new)
        self._to_replayed.update((theirs, mine) for mine, theirs in new.items())
        return unbound if new else None

    def _unbound(self, theirs: str, mine: str, before: State) -> bool:
        """Whether, in a redacted trace, the recorded request state ``theirs`` and the replayed
        ``mine`` are one state but for the arguments it binds (R-AUD-4, R-AUD-15): the same
        version, key id, nonce, expiry, principal and tool tags (and a round's approval and
        state), only the arguments tag and the MAC over it differing, and the recorded MAC made
        by a sealing key of the run."""
        if not self.redacted:
            return False
        a, b = _token_bytes(theirs), _token_bytes(mine)
        if a is None or b is None or len(a) != len(b) or len(a) < 2:
            return False
        if a[0] not in (sealing.TOKEN_VERSION, sealing.ROUND_VERSION) or a[:2] != b[:2]:
            return False
        tag = 2 + a[1] + sealing.NONCE_BYTES + sealing.EXPIRY_BYTES + 2 * sealing.TAG_BYTES
        end = tag + sealing.TAG_BYTES
        if len(a) < end + sealing.MAC_BYTES:
            return False
        if a[:tag] != b[:tag] or a[end : -sealing.MAC_BYTES] != b[end : -sealing.MAC_BYTES]:
            return False
        ring = before.keyring
        if ring is None:
            return False
        keys = [key for key in (ring.current, ring.previous) if key is not None]
        body, mac = a[: -sealing.MAC_BYTES], a[-sealing.MAC_BYTES :]
        return any(hmac.compare_digest(sealing._mac(key.secret, body), mac) for key in keys)

    def _derived(self, value: str, before: State, after: State) -> bool:
        """Whether the step could have derived ``value`` from a stand-in key: an elicitation
        or request id or a nonce's parking id of a counter it used (R-ID-1), or a request
        state whose MAC a stand-in sealing key makes."""
        id_key = before.id_key
        if id_key in self._stand_ins:
            for counter in range(before.next_elicitation, after.next_elicitation + 1):
                if value in (
                    mint_elicitation_id(id_key, counter),
                    mint_elicitation_id(id_key, counter, m.CLIENT_REQUEST_ID_PREFIX),
                    nonce_id(_keyed_digest(id_key, counter)),
                ):
                    return True
        raw = _token_bytes(value)
        if raw is None:
            return False
        body, mac = raw[: -sealing.MAC_BYTES], raw[-sealing.MAC_BYTES :]
        return any(
            hmac.compare_digest(sealing._mac(secret, body), mac)  # the one MAC (core/sealing.py)
            for secret in self._stand_ins
        )


def _token_bytes(value: str) -> bytes | None:
    """The bytes of a request state (R-MRTR-1, R-MRTR-21) spelled ``value``, or ``None``."""
    if sealing.token_version(value) not in (sealing.TOKEN_VERSION, sealing.ROUND_VERSION):
        return None
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except ValueError:  # binascii.Error: a length no base64 text has
        return None


@attrs.frozen
class Replayed:
    """What replaying a run found: how many steps it replayed, the first :class:`Difference`
    (``None``: every step reproduced its effects), the steps whose effects needed a key it
    lacked (their key-derived values taken as recorded, R-AUD-12) and the ids of those keys,
    and among those steps the ones whose request state binds arguments a redacted trace does
    not hold (``unbound``, R-AUD-15).
    Unpacks and indexes as the pair ``count, difference`` replay returned before it."""

    count: int
    difference: Difference | None
    unverified: tuple[int, ...] = ()
    missing: tuple[str, ...] = ()
    unbound: tuple[int, ...] = ()

    def __iter__(self) -> Iterator[Any]:
        return iter((self.count, self.difference))

    def __getitem__(self, index: int) -> Any:
        return (self.count, self.difference)[index]


def replay(
    head: dict[str, Any],
    steps: list[dict[str, Any]],
    *,
    stepper: Stepper | None = None,
    keys: Mapping[str, bytes] | None = None,
) -> Replayed:
    """Re-runs the reducer from the header's state over every recorded event and compares the
    effects, encoded as they were recorded (R-AUD-5), with the run's keys from ``keys`` (by key
    id; each one missing is stood in for, R-AUD-12)."""
    walker = Walker(head, keys=keys, stepper=stepper)
    for count, record in enumerate(steps, 1):
        n = int(record.get("n", count))
        before, event, out, got = walker.step(record, n)
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
            hint = ""
            if walker.missing:
                hint = KEYS_HINT.format(names=", ".join(walker.missing))
            difference = Difference(
                n=n,
                event=type(event).__name__,
                index=index,
                recorded=mine,
                replayed=theirs,
                recorded_rules=rules_of(before, event, recorded),
                replayed_rules=rules_of(before, event, out),
                where=where,
                hint=hint,
            )
            return Replayed(
                count, difference, tuple(walker.unverified), walker.missing, tuple(walker.unbound)
            )
    return Replayed(
        len(steps), None, tuple(walker.unverified), walker.missing, tuple(walker.unbound)
    )


class UnsafeFileError(OSError):
    """A trace, log or key file refused before it is written (R-AUD-9): a link, not a regular
    file, another user's, or readable or writable by others."""


def open_private(path: str) -> TextIO:
    """Opens ``path`` to append text (R-AUD-9): created readable and writable by its owner only
    (0600, whatever the umask), never through a symbolic link (``O_NOFOLLOW``); an existing file
    is refused (:class:`UnsafeFileError`, one line) unless it is a regular file of this user that no
    one else may read or write. The checks are made on the opened descriptor, so no rename
    between a check and the open can slip another file in."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as bad:
        if bad.errno == errno.ELOOP:
            raise UnsafeFileError(bad.errno, "it is a symbolic link (refused)", path) from None
        if bad.errno == errno.ENXIO:  # a FIFO no one reads: O_NONBLOCK says so, never waits
            raise UnsafeFileError(bad.errno, "it is not a regular file (refused)", path) from None
        raise
    try:
        info = os.fstat(fd)
        why = None
        if not stat.S_ISREG(info.st_mode):
            why = "it is not a regular file (refused)"
        elif info.st_uid != os.geteuid():
            why = "it belongs to another user (refused)"
        elif info.st_mode & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            why = f"its mode {mode:04o} lets others read or write it (refused: chmod 600 it)"
        if why is not None:
            raise UnsafeFileError(errno.EPERM, why, path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "a", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise
