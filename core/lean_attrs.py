"""attrs as askgate's record classes use it, with a ``__repr__`` that is not compiled per class.

The modules that define record classes import this module as ``attrs`` at run time (and the
real attrs when type checking, so mypy's attrs plugin sees every class as it is). Everything is
attrs's own (module ``__getattr__``) except :func:`frozen` and :func:`define`: they build the
class with attrs, told not to generate a ``__repr__``, and give it instead a closure over its
fields that returns what attrs's generated one returns, character for character:
``ClassName(field=value, ...)`` with each field's ``repr`` (or its own ``repr=`` callable),
``repr=False`` fields left out, and ``...`` for an instance met again while it is being
represented. attrs compiles a generated ``__repr__`` from source for each class; that was about
a fifth of the time ``import askgate`` took. A class that defines its own ``__repr__`` keeps it,
as with attrs (``auto_detect``). ``__init__``, ``__eq__`` and ``__hash__`` stay attrs's compiled
ones: a closure comparing field by field, in order, as attrs's ``__eq__`` does, measured three
to four times slower, and equality is on the hot paths of the model-based tests.

Those methods are not compiled at import either (R-EMB-19). attrs writes each class's methods as
Python source and compiles it; :func:`run_script` runs such a source (attrs's, and
:mod:`~askgate.core.layout`'s constructors) from code compiled ahead of time when the very same
text is in :mod:`~askgate.core.compiled_scripts`, a generated module (``make attrs-scripts``)
that holds each known source as the body of a function, so importlib's ``.pyc`` cache holds the
compiled code. Running that function with the source's own globals defines the same functions
with the same code and defaults that compiling the text defines; a text that is not there is
compiled, as attrs does. While :func:`define` or :func:`frozen` builds a class, attrs's private
``attr._make._linecache_and_compile`` takes its sources from the cache the same way (restored
right after, under a lock; a cached source is not copied into :mod:`linecache`, as its code
names compiled_scripts.py); an attrs without that function builds as ever, compiling.
"""

from __future__ import annotations

import builtins
import os
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import attrs
from attr import _make as attrs_make  # the private hook point of the cache
from attrs import (
    NOTHING,
    Attribute,
    Factory,
    asdict,
    astuple,
    converters,
    evolve,
    field,
    fields,
    fields_dict,
    has,
    setters,
    validators,
)

__all__ = [
    "NOTHING",
    "Attribute",
    "Factory",
    "asdict",
    "astuple",
    "converters",
    "define",
    "evolve",
    "field",
    "fields",
    "fields_dict",
    "frozen",
    "has",
    "install_repr",
    "run_script",
    "setters",
    "validators",
]

_repring = threading.local()
"""The ids of the instances being represented in this thread (attrs's recursion guard)."""


def _cache() -> dict[str, Callable[[], dict[str, Any]]]:
    """:mod:`~askgate.core.compiled_scripts`'s sources, when importing it costs less than
    compiling the sources a process needs one by one: when importlib has (or may write) its
    compiled form. From source, the whole module takes about two and a half times as long to
    compile as its sources one by one, so a process that writes no bytecode
    (``PYTHONDONTWRITEBYTECODE``) and finds none goes without it and compiles as attrs does."""
    if sys.dont_write_bytecode:
        from importlib.util import cache_from_source  # noqa: PLC0415 (only then)

        try:
            cached = cache_from_source(
                os.path.join(os.path.dirname(__file__), "compiled_scripts.py")
            )
        except NotImplementedError:  # an interpreter that caches no bytecode
            return {}
        if not os.path.exists(cached):
            return {}
    from .compiled_scripts import SCRIPTS  # noqa: PLC0415 (see above)

    return SCRIPTS


SCRIPTS = _cache()
"""The cached sources by their text (:func:`_cache`), empty when there are none to use."""


compiled: list[str] = []
"""The file names of the sources :func:`run_script` had to compile (not in the cache)."""

_attrs_compile: Callable[..., dict[str, Any]] | None = getattr(
    attrs_make, "_linecache_and_compile", None
)
_hooked = threading.RLock()

HASH_MARK = 0x5EED_C0DE_5EED_C0DE
"""Stands for the class's own number in a cached ``__hash__``: attrs writes ``hash(<its file
name>)`` into the source, which differs from process to process (string hashing is seeded)."""
_HASHED = "hash((\n"


def cache_key(script: str) -> tuple[str, int | None]:
    """``script`` with attrs's per-process type hash (the line after ``hash((``) written as
    :data:`HASH_MARK`, and that hash (``None`` when there is none)."""
    at = script.find(_HASHED)
    if at < 0:
        return script, None
    start = at + len(_HASHED)
    end = script.find(",\n", start)
    number = script[start:end].strip()
    if end < 0 or not number.lstrip("-").isdigit():
        return script, None
    indent = len(script[start:end]) - len(script[start:end].lstrip())
    return f"{script[: start + indent]}{HASH_MARK}{script[end:]}", int(number)


def run_script(
    script: str,
    globs: dict[str, Any],
    locs: dict[str, Any] | None = None,
    filename: str = "",
) -> None:
    """``exec(compile(script, filename, "exec"), globs, locs)`` for a ``script`` of function
    definitions, from the code compiled ahead of time for that text when
    :mod:`~askgate.core.compiled_scripts` has it: the functions it defines land in ``locs``
    (``globs`` when ``None``), their globals and default values taken from ``globs`` as the
    compiled text's are, and a ``__hash__`` gets the number the text gives it."""
    if not _run_cached(script, globs, globs if locs is None else locs):
        compiled.append(filename)
        exec(compile(script, filename, "exec"), globs, locs)


def _run_cached(script: str, globs: dict[str, Any], into: dict[str, Any]) -> bool:
    key, type_hash = cache_key(script)
    made = SCRIPTS.get(key)
    if made is None:
        return False
    left = getattr(made, "uses", 1) - 1  # the classes it serves, this one included
    if left:
        made.uses = left  # type: ignore[attr-defined]
    else:  # served them all: its key and wrapper need not stay in memory
        SCRIPTS.pop(key, None)
    globs.setdefault("__builtins__", builtins.__dict__)  # as exec() does
    defined = types.FunctionType(made.__code__, globs)()
    for function in defined.values():
        # A code object of its own, as compiling the text gives each class: the interpreter
        # specialises a code object's attribute and global accesses for the one class it meets,
        # and a code object shared by two classes misses (about 3% per reducer event, measured).
        if type(function) is types.FunctionType:
            function.__code__ = function.__code__.replace()
    if type_hash is not None:
        method = defined["__hash__"]
        code = method.__code__
        method.__code__ = code.replace(
            co_consts=tuple(
                type_hash if type(c) is int and c == HASH_MARK else c for c in code.co_consts
            )
        )
    into.update(defined)
    return True


def _attrs_sources(*args: Any, **kwargs: Any) -> Any:
    """attrs's ``_linecache_and_compile(script, filename, globs, locals=None)`` (the functions
    ``script`` defines, in ``locals``) from the cache when it has ``script``; else attrs's own,
    which also gives the source to :mod:`linecache` (a cached function's code names
    compiled_scripts.py and its lines). A call of another shape (another attrs's signature)
    goes to attrs's own unchanged."""
    assert _attrs_compile is not None  # hooked only when attrs has it
    if not kwargs and len(args) in (3, 4):
        script, filename, globs, *rest = args
        into = rest[0] if rest and rest[0] is not None else {}
        if (
            isinstance(script, str)
            and isinstance(globs, dict)
            and isinstance(into, dict)
            and _run_cached(script, globs, into)
        ):
            return into
        compiled.append(str(filename))
    return _attrs_compile(*args, **kwargs)


def __getattr__(name: str) -> Any:
    return getattr(attrs, name)


def define(maybe_cls: type | None = None, **options: Any) -> Any:
    """:func:`attrs.define`, with the ``__repr__`` of :func:`install_repr`."""
    return _build(attrs.define, maybe_cls, options)


def frozen(maybe_cls: type | None = None, **options: Any) -> Any:
    """:func:`attrs.frozen`, with the ``__repr__`` of :func:`install_repr`."""
    return _build(attrs.frozen, maybe_cls, options)


def _build(maker: Callable[..., Any], maybe_cls: type | None, options: dict[str, Any]) -> Any:
    wanted = options.pop("repr", None)

    def wrap(cls: type) -> type:
        with _hooked:  # attrs compiles through run_script while it builds this class
            if _attrs_compile is not None:
                attrs_make._linecache_and_compile = _attrs_sources
            try:
                built: type = maker(cls, repr=False, **options)
            finally:
                if _attrs_compile is not None:
                    attrs_make._linecache_and_compile = _attrs_compile
        own = "__repr__" in cls.__dict__ and options.get("auto_detect", True)
        if wanted is True or (wanted is None and not own):
            install_repr(built)
        return built

    return wrap if maybe_cls is None else wrap(maybe_cls)


def install_repr(cls: type) -> None:
    """Gives the attrs class ``cls`` the ``__repr__`` attrs would have generated for it."""
    shown = tuple(
        (one.name, None if one.repr is True else one.repr, one.init)
        for one in fields(cls)
        if one.repr is not False
    )
    missing = NOTHING

    def represent(self: Any) -> str:
        seen: set[int] | None = getattr(_repring, "ids", None)
        if seen is None:
            seen = _repring.ids = set()
        key = id(self)
        if key in seen:
            return "..."
        seen.add(key)
        try:
            parts = []
            for name, custom, init in shown:
                value = getattr(self, name) if init else getattr(self, name, missing)
                parts.append(f"{name}={value!r}" if custom is None else f"{name}={custom(value)}")
            return f"{self.__class__.__qualname__.rsplit('>.', 1)[-1]}({', '.join(parts)})"
        finally:
            seen.discard(key)

    represent.__name__ = "__repr__"
    represent.__qualname__ = f"{cls.__qualname__}.__repr__"
    represent.__module__ = cls.__module__
    setattr(cls, "__repr__", represent)  # noqa: B010 (a method of the class, set once)
