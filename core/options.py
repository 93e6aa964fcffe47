"""Server options: their defaults and the rules a start is refused by (R-OPT-*).

Options are the embedding program's input, so a bad one raises :class:`OptionError` (a
``ValueError``) naming the option, its value and the rule. Nothing a peer sends can reach here.
"""

from __future__ import annotations

from typing import Literal

from .record import record

AuthorizerSource = Literal["configured", "default"]
Transport = Literal["stdio", "http", "unknown"]


class OptionError(ValueError):
    """A refused start: names the option, the value given and the rule it breaks."""

    def __init__(self, option: str, value: object, rule: str) -> None:
        super().__init__(f"askgate refuses to start: option {option}={value!r}: {rule}")
        self.option = option
        self.value = value
        self.rule = rule


def connection_share(max_in_flight: int, per_connection: int | None) -> int:
    """The per-connection share of ``max_in_flight`` in force (R-OPT-1): ``per_connection``
    when given, else half of ``max_in_flight``, rounded down, at least 1.

    pre: max_in_flight >= 1
    post: per_connection is None or __return__ == per_connection
    post: per_connection is not None or (__return__ == 1 if max_in_flight < 2 else 2 * __return__ in (max_in_flight, max_in_flight - 1))
    """  # noqa: E501
    if per_connection is None:
        return max_in_flight // 2 or 1
    return per_connection


@record
class Options:
    """Every option of the reducer, with the defaults of ``shared/reference/wire-shapes.md``.

    ``max_in_flight_per_connection`` of ``None`` means half of ``max_in_flight``, at least 1.
    ``has_authorizer``/``has_read_authorizer``/``has_visibility``/``has_unknown_tool_reply`` say
    which user callbacks exist; the callbacks themselves live in the shell and run as workers.
    ``catalog_complete`` says every resource, template and prompt callback is in the catalog
    (``CatalogChanged``), so that a read naming none is answered without a worker
    (R-PROTO-18, R-PROTO-19).
    """

    elicitation_timeout_ms: int = 60_000
    max_parked_elicitations: int = 32
    max_parked_elicitations_total: int = 256
    max_client_capabilities: int = 1024
    max_in_flight: int = 32
    max_in_flight_per_connection: int | None = None
    callback_timeout_ms: int = 300_000
    has_authorizer: bool = False
    has_read_authorizer: bool = False
    has_visibility: bool = False
    has_unknown_tool_reply: bool = False
    authorizer_source: AuthorizerSource = "default"
    transport: Transport = "unknown"
    page_size: int = 100
    server_name: str = "askgate"
    server_version: str = "0.1.0"
    instructions: str | None = None
    max_client_requests_per_call: int = 4
    catalog_complete: bool = False
    max_listens_per_owner: int = 16
    max_listens_total: int = 1024
    # Tasks (spec/tasks.md): the inline window of an escalating call (R-TASK-4), how long a
    # finished task is kept (R-TASK-9), and the live tasks per owner and in total (R-TASK-6).
    task_inline_ms: int = 1_000
    task_ttl_ms: int = 300_000
    max_tasks_per_owner: int = 16
    max_tasks_total: int = 256

    @property
    def in_flight_share(self) -> int:
        """The per-connection share of ``max_in_flight`` in force (R-OPT-1):
        :func:`connection_share` of these options.

        A plain property, not a ``functools.cached_property``: that makes attrs give the class
        a ``__getattr__``, and then every attribute read of every ``Options`` goes through
        Python's slow lookup hook (about 1.5% of a reducer event)."""
        return connection_share(self.max_in_flight, self.max_in_flight_per_connection)

    def validated(self) -> Options:
        """Returns ``self`` if every rule holds, else raises :class:`OptionError` (R-OPT-1)."""
        validate_options(self)
        return self


_POSITIVE = (
    "elicitation_timeout_ms",
    "max_parked_elicitations",
    "max_parked_elicitations_total",
    "max_client_capabilities",
    "max_in_flight",
    "callback_timeout_ms",
    "page_size",
    "max_client_requests_per_call",
    "max_listens_per_owner",
    "max_listens_total",
    "task_inline_ms",
    "task_ttl_ms",
    "max_tasks_per_owner",
    "max_tasks_total",
)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# Every option R-OPT-1 constrains.
_CHECKED = (*_POSITIVE, "max_in_flight_per_connection")


def option_refusal(options: Options) -> tuple[str, object, str] | None:
    """The first rule of R-OPT-1 that ``options`` break, as ``(option, value, rule)``, or None.

    :func:`validate_options` raises it as an :class:`OptionError`. The contract states R-OPT-1
    through :func:`_obeys`: a refusal exactly when some option breaks its rule, naming such an
    option and the value it has.

    post: (__return__ is None) == all(_obeys(options, name) for name in _CHECKED)
    post: __return__ is None or __return__[1] is getattr(options, __return__[0])
    post: __return__ is None or not _obeys(options, __return__[0])
    """
    for name in _POSITIVE:
        value = getattr(options, name)
        if not _is_int(value):
            return name, value, "must be an integer"
        if value < 1:
            return name, value, "must be at least 1"
    share = options.max_in_flight_per_connection
    if share is not None:
        if not _is_int(share):
            return "max_in_flight_per_connection", share, "must be an integer"
        if share < 1:
            return "max_in_flight_per_connection", share, "must be at least 1"
        if share > options.max_in_flight:
            return (
                "max_in_flight_per_connection",
                share,
                f"may not exceed max_in_flight ({options.max_in_flight})",
            )
    if options.max_parked_elicitations > options.max_parked_elicitations_total:
        return (
            "max_parked_elicitations",
            options.max_parked_elicitations,
            "may not exceed max_parked_elicitations_total "
            f"({options.max_parked_elicitations_total})",
        )
    if options.max_listens_per_owner > options.max_listens_total:
        return (
            "max_listens_per_owner",
            options.max_listens_per_owner,
            f"may not exceed max_listens_total ({options.max_listens_total})",
        )
    return None


def validate_options(options: Options) -> None:
    """Raises :class:`OptionError` for the first rule the options break (R-OPT-1)."""
    refusal = option_refusal(options)
    if refusal is not None:
        raise OptionError(*refusal)
    for flag in (
        "has_authorizer",
        "has_read_authorizer",
        "has_visibility",
        "has_unknown_tool_reply",
        "catalog_complete",
    ):
        if not isinstance(getattr(options, flag), bool):
            raise OptionError(flag, getattr(options, flag), "must be a bool")
    if options.authorizer_source not in ("configured", "default"):
        raise OptionError(
            "authorizer_source", options.authorizer_source, "must be 'configured' or 'default'"
        )
    if options.transport not in ("stdio", "http", "unknown"):
        raise OptionError("transport", options.transport, "must be 'stdio', 'http' or 'unknown'")


def _obeys(options: Options, name: str) -> bool:
    """Whether option ``name`` obeys R-OPT-1, read off the rule (the spec side of the contract).

    An integer of at least 1; the per-connection share may also be None (the default) and may
    not exceed ``max_in_flight``; ``max_parked_elicitations`` may not exceed
    ``max_parked_elicitations_total``, nor ``max_listens_per_owner`` ``max_listens_total``. A
    bound that is not an integer breaks its own rule.
    """
    value = getattr(options, name)
    if name == "max_in_flight_per_connection" and value is None:
        return True
    if not (_is_int(value) and value >= 1):
        return False
    if name == "max_in_flight_per_connection":
        return not (_is_int(options.max_in_flight) and value > options.max_in_flight)
    if name == "max_parked_elicitations":
        total = options.max_parked_elicitations_total
        return not (_is_int(total) and value > total)
    if name == "max_listens_per_owner":
        total = options.max_listens_total
        return not (_is_int(total) and value > total)
    return True
