"""askgate.core.lean_attrs: attrs's classes with a shared ``__repr__`` that says what attrs's
generated one says, and every record class of the core built with it."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from askgate import attrs_scripts
from askgate.core import compiled_scripts, lean_attrs


def _pair(decorator_options: dict[str, Any], body: Any) -> tuple[type, type]:
    """The same class built by attrs and by lean_attrs, with one qualified name."""
    maker = attrs.define if decorator_options.pop("mutable", False) else attrs.frozen
    lean = lean_attrs.define if maker is attrs.define else lean_attrs.frozen
    built = []
    for make in (maker, lean):
        namespace = dict(body())
        namespace["__qualname__"] = "Record"
        built.append(make(type("Record", (), namespace), **decorator_options))
    return built[0], built[1]


def _fields() -> dict[str, Any]:
    return {
        "__annotations__": {"a": "int", "b": "str", "hidden": "bytes", "shown": "int"},
        "a": attrs.field(),
        "b": attrs.field(default="x"),
        "hidden": attrs.field(default=b"secret", repr=False),
        "shown": attrs.field(default=7, repr=lambda value: f"<{value}>"),
    }


@pytest.mark.parametrize("options", [{}, {"slots": True}, {"slots": False}, {"mutable": True}])
def test_the_repr_is_attrs_own(options: dict[str, Any]) -> None:
    original, lean = _pair(options, _fields)
    for args in ((1,), (2, "two", b"k", 3), ("quote's", None)):
        assert repr(lean(*args)) == repr(original(*args))
    assert repr(lean(1)) == "Record(a=1, b='x', shown=<7>)"
    nested_original = original(original(1), [original(2)])
    nested_lean = lean(lean(1), [lean(2)])
    assert repr(nested_lean) == repr(nested_original)
    assert lean.__repr__ is not original.__repr__


def test_an_instance_met_again_is_dots_as_with_attrs() -> None:
    original, lean = _pair({"mutable": True}, _fields)
    loops = []
    for kind in (original, lean):
        one = kind(1)
        one.b = [one]
        loops.append(repr(one))
    assert loops[1] == loops[0] == "Record(a=1, b=[...], shown=<7>)"


def test_an_unset_field_without_init_and_a_subclass_are_as_with_attrs() -> None:
    def body() -> dict[str, Any]:
        return {
            "__annotations__": {"a": "int", "later": "int"},
            "a": attrs.field(),
            "later": attrs.field(init=False),
        }

    original, lean = _pair({"mutable": True}, body)
    assert repr(lean(1)) == repr(original(1)) == "Record(a=1, later=NOTHING)"
    sub_original = type("Sub", (original,), {})
    sub_lean = type("Sub", (lean,), {})
    assert repr(sub_lean(2)) == repr(sub_original(2)) == "Sub(a=2, later=NOTHING)"


def test_a_class_of_its_own_repr_keeps_it_unless_told() -> None:
    def body() -> dict[str, Any]:
        return {"__annotations__": {"a": "int"}, "__repr__": lambda _self: "mine"}

    assert repr(lean_attrs.frozen(type("Own", (), body()))(1)) == "mine"
    assert repr(lean_attrs.frozen(type("Own", (), body()), repr=True)(1)) == "Own(a=1)"
    assert repr(
        lean_attrs.frozen(type("NoRepr", (), {"__annotations__": {"a": "int"}}), repr=False)(1)
    ).startswith("<")


CORE_MODULES = [
    "codec",
    "decisions",
    "door",
    "effects",
    "events",
    "fifo",
    "http",
    "jobs",
    "jsonwire",
    "options",
    "reducer",
    "revisions",
    "sealing",
    "sse_legacy",
    "state",
    "tools",
]


def test_every_record_class_of_the_core_and_the_server_has_the_shared_repr() -> None:
    counted = 0
    for name in [f"askgate.core.{module}" for module in CORE_MODULES] + ["askgate.server"]:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and attrs.has(value) and value.__module__ == name:
                code = value.__repr__.__code__
                assert code.co_filename == lean_attrs.__file__, value
                counted += 1
    assert counted >= 80  # the modules still define their classes


def _as_cached(monkeypatch: pytest.MonkeyPatch, body: Any, options: dict[str, Any]) -> type:
    """The class of ``body`` built by lean_attrs with its methods' code taken from a cache that
    holds its sources as ``make attrs-scripts`` writes them; checks nothing was compiled."""
    noted: list[str] = []

    class Noting(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            noted.append(key)
            return default

    options = dict(options)
    maker = lean_attrs.define if options.pop("mutable", False) else lean_attrs.frozen
    monkeypatch.setattr(lean_attrs, "SCRIPTS", Noting())
    maker(type("Record", (), body()), **options)
    cache = {}
    for source in noted:
        assert attrs_scripts.cacheable(source)
        scope: dict[str, Any] = {}
        exec(compile(attrs_scripts.as_function(source), "<cache>", "exec"), scope)
        cache[source] = scope["_"]
    monkeypatch.setattr(lean_attrs, "SCRIPTS", cache)
    misses = len(lean_attrs.compiled)
    built: type = maker(type("Record", (), body()), **options)
    assert len(lean_attrs.compiled) == misses
    assert built.__init__.__code__.co_filename == "<cache>"  # type: ignore[misc]
    return built


def _defaults() -> dict[str, Any]:
    return {
        **_fields(),
        "__annotations__": {**_fields()["__annotations__"], "made": "list[int]", "loose": "int"},
        "made": attrs.field(factory=list, hash=False),
        "loose": attrs.field(default=0, eq=False),
    }


@pytest.mark.parametrize("options", [{}, {"slots": False}, {"mutable": True}])
def test_R_EMB_19_a_class_of_cached_code_behaves_as_attrs_builds_it(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    original = (attrs.define if options.get("mutable") else attrs.frozen)(
        type("Record", (), _defaults()), **{k: v for k, v in options.items() if k != "mutable"}
    )
    cached = _as_cached(monkeypatch, _defaults, options)
    for args in ((1,), (2, "two", b"k", 3, [4], 5)):
        one, other = cached(*args), original(*args)
        assert repr(one) == repr(other)
        assert attrs.asdict(one) == attrs.asdict(other)
        assert one == cached(*args)
        if not options.get("mutable"):
            assert hash(one) == hash(other)
        assert one != other  # another class
    assert cached(1).made is not cached(1).made  # a factory per instance
    assert cached(1, loose=9) == cached(1, loose=8)  # eq=False
    assert [f.name for f in attrs.fields(cached)] == [f.name for f in attrs.fields(original)]
    assert attrs.evolve(cached(1), b="y") == cached(1, "y")
    errors = []
    for kind in (cached, original):
        with pytest.raises(TypeError) as missing:
            kind()
        errors.append(str(missing.value))
    assert errors[0] == errors[1]
    if not options.get("mutable"):
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            cached(1).a = 2


def test_R_EMB_19_the_cache_of_compiled_sources_is_current() -> None:
    sources = attrs_scripts.noted_sources()
    assert attrs_scripts.render(sources) == attrs_scripts.TARGET.read_text(encoding="utf-8")
    assert len(sources) >= 100  # attrs's methods of every record class and layout's builders


def _imported_askgate(**env: str) -> list[str]:
    """What a fresh interpreter importing askgate, the demo and the policy loader (with
    ``env`` on top of this one's, PYTHONDONTWRITEBYTECODE left out) says: the sources it
    compiled, whether it imported the cache, two methods' code files; then, every module of
    record classes imported, the cache's entries left and the sources compiled."""
    code = (
        "import sys\n"
        "import askgate, askgate.demo, askgate.policy\n"
        "from askgate.core import lean_attrs, events, state\n"
        "print(lean_attrs.compiled)\n"
        "print('askgate.core.compiled_scripts' in sys.modules)\n"
        "print(events.MessageReceived.__init__.__code__.co_filename)\n"
        "print(state.State.__eq__.__code__.co_filename)\n"
        "import importlib\n"
        f"for name in {attrs_scripts.MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "print(len(lean_attrs.SCRIPTS), len(lean_attrs.compiled))\n"
    )
    return _fresh(code, **env)


def _fresh(code: str, **env: str) -> list[str]:
    """The lines a fresh interpreter running ``code`` prints (``env`` on top of this one's,
    PYTHONDONTWRITEBYTECODE left out: importlib may write the cache's bytecode)."""
    outer = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [sys.executable, "-P", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**outer, "PYTHONPATH": str(attrs_scripts.ROOT), **env},
    )
    return done.stdout.splitlines()


def test_R_EMB_19_a_stdio_server_compiles_no_source_of_its_record_classes() -> None:
    misses, cached, *filenames, after_all = _imported_askgate()  # importlib may write bytecode
    assert (misses, cached) == ("[]", "True")
    target = str(attrs_scripts.TARGET.resolve())
    assert [str(Path(name).resolve()) for name in filenames] == [target] * 2
    # every record module imported: each entry served its classes and was dropped, none compiled
    assert after_all == "0 0"


def test_R_EMB_19_without_the_caches_bytecode_a_process_that_writes_none_compiles(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # compiling the whole cache from source costs more than the sources one by one
    pyc = tmp_path / "compiled_scripts.pyc"
    monkeypatch.setattr(importlib.util, "cache_from_source", lambda _path: str(pyc))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert lean_attrs._cache() == {}  # no bytecode, none to be written
    pyc.write_bytes(b"")
    assert lean_attrs._cache() is compiled_scripts.SCRIPTS  # importlib's to load
    pyc.unlink()
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert lean_attrs._cache() is compiled_scripts.SCRIPTS  # importlib's to write


def test_R_EMB_19_a_call_of_another_shape_goes_to_attrs_own_compile() -> None:
    """The hook passes a call it does not recognise (keywords, as another attrs might make
    them) to attrs's own function unchanged, instead of failing the class being built."""
    if lean_attrs._attrs_compile is None:  # an attrs without the hook point: nothing hooked
        from attr import _make  # noqa: PLC0415

        assert not hasattr(_make, "_linecache_and_compile")
        return
    made = lean_attrs._attrs_sources(
        script="def f():\n    return 1\n", filename="<another shape>", globs={}, locals=None
    )
    assert made["f"]() == 1
    assert "<another shape>" not in lean_attrs.compiled  # attrs's own compiled it


def test_R_EMB_19_each_class_has_code_objects_of_its_own_where_classes_share_a_source() -> None:
    """Two classes built from one cached source (the cache has such sources: ``uses``) get
    code objects of their own, as compiling the text gives them; the code is the same."""
    code = (
        "import importlib, types\n"
        "import askgate, askgate.demo, askgate.policy\n"
        "from askgate.core import lean_attrs\n"
        f"for name in {attrs_scripts.MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "import attrs, gc\n"
        "seen = {}\n"
        "shared = []\n"
        "for kind in [k for k in gc.get_objects() if isinstance(k, type) and attrs.has(k)]:\n"
        "    for method in ('__init__', '__eq__', '__hash__'):\n"
        "        own = kind.__dict__.get(method)\n"
        "        if type(own) is types.FunctionType:\n"
        "            if id(own.__code__) in seen and seen[id(own.__code__)] is not kind:\n"
        "                shared.append(kind.__qualname__ + '.' + method)\n"
        "            seen[id(own.__code__)] = kind\n"
        "print(sorted(shared), lean_attrs.compiled)\n"
    )
    assert _fresh(code) == ["[] []"]  # every source cached, no code object shared
    assert "\n_.uses = " in attrs_scripts.TARGET.read_text(encoding="utf-8")  # such sources exist


def test_R_EMB_19_a_cached_source_run_twice_defines_distinct_code_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = "def make(a):\n    return _cls(a)\n"

    def cached() -> dict[str, Any]:
        def make(a: Any) -> Any:
            return _cls(a)  # type: ignore[name-defined]  # noqa: F821 (the source's global)

        return locals()

    cached.uses = 2  # type: ignore[attr-defined]
    monkeypatch.setattr(lean_attrs, "SCRIPTS", {source: cached})
    made = []
    for kind in (list, tuple):
        scope: dict[str, Any] = {"_cls": kind}
        lean_attrs.run_script(source, scope, filename="<shared>")
        made.append(scope["make"])
    assert "<shared>" not in lean_attrs.compiled  # both from the cache
    assert made[0]("ab") == ["a", "b"]
    assert made[1]("ab") == ("a", "b")
    assert made[0].__code__ is not made[1].__code__
    assert made[0].__code__.co_code == made[1].__code__.co_code
