"""The reducer's state: immutable values over persistent maps (see spec/rules.md, "State").

A step builds a new :class:`State` sharing everything it did not change with the old one, so
the cost of a step does not grow with the number of connections or parked calls, and any old
state stays valid (the model checker and the explorer keep many).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Hashable, Iterator, Mapping
from typing import Any, Literal

import attrs
from immutables import Map

from .events import CallerId, ConnId, Mode
from .fifo import Fifo
from .jobs import Round
from .messages import RequestId
from .options import OptionError, Options
from .record import record
from .revisions import Revision
from .sealing import Key, Keyring
from .store import MemoryStore
from .tools import ToolInfo, tool_info

CallKey = tuple[Hashable, Hashable]  # (connection, request id)


class Stage(enum.Enum):
    """Where an open request stands. Each stage but PARKED holds exactly one worker."""

    AUTHORIZING = "authorizing"
    RUNNING = "running"
    PARKED = "parked"
    UNKNOWN_REPLY = "unknown_reply"
    READ_AUTHORIZING = "read_authorizing"
    READ_RUNNING = "read_running"


WORKER_STAGES = frozenset(s for s in Stage if s is not Stage.PARKED)


@record
class Catalog:
    """What the server offers besides tools, keyed by URI, URI template and name."""

    resources: Map[str, Any] = attrs.field(factory=Map)
    templates: Map[str, Any] = attrs.field(factory=Map)
    prompts: Map[str, Any] = attrs.field(factory=Map)


@record
class Call:
    """An open request: admitted, not yet finished. ``name`` is the tool or the read method."""

    conn: ConnId
    request_id: RequestId
    is_tool: bool
    name: str
    arguments: object
    mode: Mode
    caller: CallerId | None
    stage: Stage
    worker: int  # the worker's ref, or -1 while PARKED
    elicitation_id: str  # "" unless PARKED
    replied: bool  # push mode: the request was answered with nothing when it parked
    seq: int  # admission order, so that a drop of many calls answers them in a fixed order
    # For its call_ended record (R-LOG-2): the `now` it was admitted at; what the authorizer
    # decided so far ("" nothing yet, "allow", "ask" (parked), "approved"); the elicitation id
    # it parked under ("" if it never parked), kept after it leaves PARKED.
    started: int
    decision: str
    approval: str
    key: CallKey  # (conn, request_id): the very tuple it is stored under, shared by its indexes
    # Whose workers and parking places it counts against (R-PARK-5), fixed when it is admitted.
    owner: Hashable

    def moved(
        self,
        stage: Stage,
        worker: int,
        elicitation_id: str,
        replied: bool,
        decision: str,
        approval: str,
    ) -> Call:
        """This call in another stage: the one place a call is rebuilt, each field but these
        kept (by position, in the order of the fields)."""
        return Call(
            self.conn,
            self.request_id,
            self.is_tool,
            self.name,
            self.arguments,
            self.mode,
            self.caller,
            stage,
            worker,
            elicitation_id,
            replied,
            self.seq,
            self.started,
            decision,
            approval,
            self.key,
            self.owner,
        )


@record
class ClientRequest:
    """A running tool's outstanding request to its client (R-CTX-4)."""

    key: CallKey
    ref: int
    token: Hashable
    method: str


@record
class Progress:
    """The progress token a ``tools/call`` carried, and the last progress sent (R-CTX-2)."""

    token: str | int
    last: float | None = None


@record
class Parked:
    """What an id the reducer reserved in its store (R-STORE-5) stands for: a parked call, or a
    modern approval's or round's outstanding nonce (``stateless``). The place itself (its
    deadline, its position among its owner's) is the store's."""

    key: CallKey
    # Whose parking place it takes (R-PARK-1): ``(PRINCIPAL_OWNER, principal)``, or the
    # connection.
    owner: Hashable
    # A modern approval (R-MRTR-12): no call waits; ``key`` is (owner, nonce id) and the
    # entry only holds the owner's parking place until a retry closes it.
    stateless: bool = False


@record
class StatelessCall:
    """How an open modern call is served (R-MRTR-9, R-MRTR-12): its revision, whether its own
    capabilities allow a form elicitation, the principal its approval state binds, the owner
    its parking place counts against, whether its answer is cacheable (R-MRTR-11), and the
    least level of the logs its request asked for (``None``: none, R-MRTR-18), and what its
    callback is told of its rounds (R-MRTR-20; ``None`` for a method without rounds)."""

    revision: Revision
    can_elicit: bool
    principal: str
    owner: Hashable
    cacheable: bool = False
    log_level: str | None = None
    round: Round | None = None


@record
class TaskChannel:
    """The connection a task's call is re-keyed onto (spec/tasks.md): its request id is the
    task's id. Nothing outside the reducer ever sees one: ``tasks.absorb`` takes every effect
    addressed to it. Its record's capabilities are its request's own (R-TASK-10), not a
    capabilities entry (R-CAP-*): it has none."""

    task_id: str


CapGroup = Literal["", "unsubscribed", "live"]


@record
class Conn:
    """What the reducer knows about one connection; dropped once it holds nothing."""

    subscribed: bool = False
    # The client-capabilities entry (R-CAP): present iff cap_group != "".
    can_elicit: bool = False
    can_sample: bool = False  # R-CTX-4: capabilities.sampling is an object
    can_task: bool = False  # R-TASK-12: capabilities.tasks is an object
    cap_group: CapGroup = ""
    cap_pos: int = -1
    # Protocol state (spec/protocol.md): negotiated version ("" before initialize), the
    # minimum log level it asked for ("" for none), the resource URIs it subscribed to.
    version: str = ""
    log_level: str = ""
    subscriptions: Map[str, bool] = attrs.field(factory=Map)
    # Who the shell authenticated for the connection when its subscriber attached (R-SUB-1).
    principal: str | None = None
    # Whether it lives for one stateless request (R-PARK-7), as its subscriber said (R-SUB-1).
    per_request: bool = False
    # R-PARK-8: ``None`` once the client may be sent requests; from an ``initialize`` answered
    # (R-PROTO-3) until its ``notifications/initialized`` (``ClientReady``), the prompts of the
    # calls parked meanwhile, in parking order, as (elicitation id, request id, request).
    held: tuple[tuple[str, Any, Any], ...] | None = None

    @property
    def has_caps(self) -> bool:
        return self.cap_group != ""

    def is_empty(self) -> bool:
        """Whether this record holds nothing of its own (the connection may still have open
        requests, or places in the store)."""
        return not self.subscribed and self.cap_group == ""


EMPTY_CONN = Conn()


@attrs.define(slots=False, init=False, repr=False, eq=False)
class Variables:
    """The reducer's state variables, each named and typed here once (spec/rules.md gives each
    one's meaning). :class:`State` is their frozen form, what a step takes and returns; the
    reducer's draft (core/reducer.py) is a mutable subclass that one step edits. The variables
    live in the instance's ``__dict__`` (no slots), so a step copies them all in one dict copy,
    and both subclasses share this class's layout. It only declares them: :class:`State`'s
    ``__init__``, equality and ``repr`` are the ones a state is built and compared with, and a
    draft is built empty.
    """

    options: Options
    id_key: bytes
    tools: Map[str, ToolInfo]
    catalog: Catalog
    conns: Map[ConnId, Conn]
    # The open calls (``State.calls`` is both): those holding a worker, and those PARKED, kept
    # apart so that a call's every move while it holds a worker writes a map without the
    # parked calls (however many wait, R-PARK-3).
    working: Map[CallKey, Call]
    waiting: Map[CallKey, Call]
    workers: Map[int, CallKey]
    # Workers per connection (kept apart from Conn: it changes on every worker start and end).
    in_flight: Map[ConnId, int]
    in_flight_total: int
    # The approvals store (spec/store.md): every parking place of either era, the caps'
    # counts, single use and the record of closed nonces (R-STORE-5); and what each id this
    # state reserved in it stands for.
    store: MemoryStore
    parked: Map[str, Parked]
    cap_unsubscribed: Fifo[ConnId]
    cap_live: Fifo[ConnId]
    callers: Map[CallerId, Map[CallKey, bool]]
    # URI -> the connections subscribed to it; connection -> its log level (R-PROTO-10, 11).
    resource_subscribers: Map[str, Map[ConnId, bool]]
    log_levels: Map[ConnId, str]
    next_ref: int
    next_seq: int
    next_elicitation: int
    # A running tool's context (R-CTX): outstanding client requests by id, the ids each worker
    # has outstanding, and the progress token of each call that carried one.
    client_requests: Map[str, ClientRequest] = attrs.field(factory=Map)
    worker_requests: Map[int, tuple[str, ...]] = attrs.field(factory=Map)
    progress: Map[CallKey, Progress] = attrs.field(factory=Map)
    # Modern requests (spec/modern.md): the key that seals approval states (R-MRTR-12) and
    # the open calls served statelessly and how (R-MRTR-9).
    keyring: Keyring | None = None
    stateless: Map[CallKey, StatelessCall] = attrs.field(factory=Map)
    # Open `subscriptions/listen` requests and the list changes each honours (R-MRTR-19); each
    # connection's listens (request id and owner, in opening order) and how many listens each
    # owner holds, so that opening or ending one reads no other (R-MRTR-25, R-MRTR-27).
    listens: Map[CallKey, tuple[str, ...]] = attrs.field(factory=Map)
    conn_listens: Map[ConnId, tuple[tuple[Any, Hashable], ...]] = attrs.field(factory=Map)
    owner_listens: Map[Hashable, int] = attrs.field(factory=Map)
    # Workers per owner (R-PARK-5), each bounded by the share (R-ADM-6).
    owner_in_flight: Map[Hashable, int] = attrs.field(factory=Map)
    # The key of the arguments' digests the decision log records (R-AUD-2), whose first
    # digits an approval prompt shows (R-DLV-5); ``None``: prompts show none.
    digest_key: bytes | None = None
    # Tasks (spec/tasks.md): every task kept, by id (R-TASK-7, R-TASK-9); the modern calls in
    # their inline window, each with its admission seq (R-TASK-4); the live tasks per owner and
    # in total (R-TASK-6); the wall-clock ms of the shell's monotonic 0, which dates a task;
    # the 2025-11-25 ``tasks/result`` requests waiting on a live task, by request (R-TASK-14).
    tasks: Map[str, Any] = attrs.field(factory=Map)
    task_pending: Map[CallKey, int] = attrs.field(factory=Map)
    task_waits: Map[CallKey, str] = attrs.field(factory=Map)
    owner_tasks: Map[Hashable, int] = attrs.field(factory=Map)
    live_tasks: int = 0
    epoch_ms: int = 0


@record(slots=False)
class State(Variables):
    """Everything the reducer decides from: the :class:`Variables`, frozen."""

    @property
    def calls(self) -> OpenCalls:
        """Every open call by its key, of either map (``working`` and ``waiting``)."""
        return OpenCalls(self.working, self.waiting)

    @property
    def parked_total(self) -> int:
        """How many parking places are held, of either era (R-PARK-3)."""
        return self.store.total

    @property
    def closed_nonces(self) -> Map[str, tuple[str, int, int]]:
        """The nonces closed lately, each with why, its expiry and its place (R-MRTR-14)."""
        return self.store.closed


class OpenCalls(Mapping[CallKey, Call]):
    """The open calls, read-only: the calls holding a worker, then the parked ones."""

    __slots__ = ("waiting", "working")

    def __init__(self, working: Map[CallKey, Call], waiting: Map[CallKey, Call]) -> None:
        self.working = working
        self.waiting = waiting

    def __getitem__(self, key: CallKey) -> Call:
        call = self.working.get(key)
        return self.waiting[key] if call is None else call

    def __contains__(self, key: object) -> bool:
        return key in self.working or key in self.waiting

    def get(self, key: CallKey, default: Any = None) -> Any:
        """``Mapping.get`` without its ``KeyError`` for a missing key (audit logs read this)."""
        call = self.working.get(key)
        return self.waiting.get(key, default) if call is None else call

    def __iter__(self) -> Iterator[CallKey]:
        yield from self.working
        yield from self.waiting

    def __len__(self) -> int:
        return len(self.working) + len(self.waiting)

    def __repr__(self) -> str:
        return f"OpenCalls({dict(self)!r})"


def initial_state(
    options: Options | None = None,
    *,
    id_key: bytes,
    tools: tuple[ToolInfo, ...] = (),
    keyring: Keyring | None = None,
    digest_key: bytes | None = None,
    epoch_ms: int = 0,
) -> State:
    """The state of a server that has just started (R-OPT-1, R-OPT-2).

    ``id_key`` seeds the elicitation ids (R-ID-1): the shell passes 32 bytes from a
    cryptographic source; tests pass a fixed key to replay histories exactly. ``keyring`` seals
    modern approval states (R-MRTR-12): its ttl must be ``elicitation_timeout_ms``; without one,
    a key is derived from ``id_key``. ``digest_key`` keys the arguments' digest an approval
    prompt shows (R-DLV-5), the decision log's (R-AUD-2): 32 bytes from a cryptographic source;
    without one, prompts show no digest.
    """
    opts = (options or Options()).validated()
    if not isinstance(id_key, bytes) or len(id_key) < 16:
        raise OptionError(
            "id_key",
            f"<{type(id_key).__name__}>",
            "must be at least 16 bytes from a cryptographic source",
        )
    if not opts.has_authorizer:
        unguarded = sorted(t.name for t in tools if t.sensitive and not t.derived)
        if unguarded:
            raise OptionError(
                "authorizer",
                None,
                f"{len(unguarded)} tool(s) are annotated sensitive/destructive but no tool "
                f"authorizer is configured: {', '.join(unguarded)} (an allow-all authorizer "
                "opts out, explicitly)",
            )
    if digest_key is not None and (not isinstance(digest_key, bytes) or len(digest_key) < 16):
        raise OptionError(
            "digest_key",
            f"<{type(digest_key).__name__}>",
            "must be at least 16 bytes from a cryptographic source",
        )
    if keyring is None:
        secret = hashlib.blake2b(b"askgate/mrtr/keyring", key=id_key[:64]).digest()
        keyring = Keyring(Key("k0", secret), opts.elicitation_timeout_ms)
    elif not isinstance(keyring, Keyring) or keyring.ttl != opts.elicitation_timeout_ms:
        raise OptionError(
            "keyring",
            f"<{type(keyring).__name__}>",
            "must be a Keyring whose ttl is elicitation_timeout_ms (R-MRTR-12)",
        )
    return State(
        options=opts,
        id_key=id_key,
        tools=Map({t.name: tool_info(t.name, t.sensitive, t.derived, t.definition) for t in tools}),
        catalog=Catalog(),
        conns=Map(),
        working=Map(),
        waiting=Map(),
        workers=Map(),
        in_flight=Map(),
        in_flight_total=0,
        store=MemoryStore(record_cap=opts.max_parked_elicitations_total),
        parked=Map(),
        cap_unsubscribed=Fifo(),
        cap_live=Fifo(),
        callers=Map(),
        resource_subscribers=Map(),
        log_levels=Map(),
        next_ref=1,
        next_seq=0,
        next_elicitation=0,
        keyring=keyring,
        digest_key=digest_key,
        epoch_ms=epoch_ms if isinstance(epoch_ms, int) else 0,
    )
