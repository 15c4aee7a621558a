"""Rego engines behind one small interface.

- `RegorusEngine` (the default): the regorus Rust engine embedded in the process, no server.
- `OpaServerEngine` (rego_opa.py): a real OPA server through `opa-python-client`; modules are pushed
  with the policy API, data with the data API, and each request is one query of the data API.
- `OpaGoEngine` (rego_opa.py): OPA's own Go engine in-process (`opa-golib-python-bindings`), used as
  the conformance reference when it is installed.

`prepare()` compiles a complete module set once; the returned `PreparedRego` answers queries. Native
engines are created lazily in the thread (and so the process) that first queries, after any fork.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

RegoEngineName = Literal["regorus", "opa", "opa-go"]


class RegoCompileError(ValueError):
    pass


class RegoEvaluationError(RuntimeError):
    pass


class RegoEngineUnavailable(RegoCompileError):
    """The engine could not be reached to load a module set (as opposed to refusing it): try again later."""


class RegoEngineUnreachable(RegoEvaluationError):
    """A query could not reach the engine, or the engine no longer holds the module set (it restarted)."""




class _Undefined:
    def __repr__(self) -> str:
        return "UNDEFINED"


UNDEFINED: Any = _Undefined()


@dataclass
class RegoInput:
    """One request's input, serialised once and shared by every engine call."""

    document: dict[str, Any]
    _raw: bytes | None = field(default=None, repr=False)

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = orjson.dumps(self.document, default=_json_default)
        return self._raw


def _json_default(value: Any) -> Any:
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def clean_error(message: str) -> str:
    """Native engines append a Rust backtrace when RUST_BACKTRACE is set; the first part is the error."""
    return message.split("Stack backtrace:")[0].strip()


class PreparedRego(Protocol):
    engine_name: str

    def query(self, path: str, rego_input: RegoInput | None = None) -> Any:
        """The value of the document at `path` (`data.x.y`), or UNDEFINED; raises RegoEvaluationError."""

    def set_cluster(self, cluster: Mapping[str, Any]) -> None:
        """Make `data.kgwe.cluster` this summary; cheap when it is the same object as last time."""

    def close(self) -> None: ...


class RegoEngine(Protocol):
    name: str

    def prepare(self, modules: Mapping[str, str], data: Mapping[str, Any]) -> PreparedRego:
        """Compile `modules` (file name -> source) with static `data`; raises RegoCompileError."""


# -- regorus (embedded) ------------------------------------------------------------------------


# regorus engines are "unsendable": usable, cloneable and droppable only in the thread that made them.
# Each thread therefore keeps its own engines, keyed by prepared set, and evicts them itself.
_THREAD_ENGINES = threading.local()
_ENGINES_PER_THREAD = 4
_tokens = itertools.count()


@dataclass
class _ThreadEngine:
    engine: Any
    data_generation: int


class ThreadBound:
    """One native regorus object per thread for one prepared set: built by `build` in the thread that
    uses it, kept in that thread's LRU of `per_thread` (under `slot`), and given the set's data again by
    `load_data` whenever `data_changed()` has been called since."""

    def __init__(
        self, slot: str, build: Callable[[], Any], load_data: Callable[[Any], None], per_thread: int = 4
    ) -> None:
        self._slot, self._build, self._load_data, self._per_thread = slot, build, load_data, per_thread
        self._token = next(_tokens)
        self._generation = 0
        self._lock = threading.Lock()

    def data_changed(self) -> None:
        with self._lock:
            self._generation += 1

    def get(self) -> Any:
        cache: OrderedDict[int, _ThreadEngine] | None = getattr(_THREAD_ENGINES, self._slot, None)
        if cache is None:
            cache = OrderedDict()
            setattr(_THREAD_ENGINES, self._slot, cache)
        entry = cache.get(self._token)
        if entry is None:
            entry = _ThreadEngine(self._build(), -1)
            cache[self._token] = entry
            while len(cache) > self._per_thread:
                cache.popitem(last=False)
        else:
            cache.move_to_end(self._token)
        generation = self._generation
        if entry.data_generation != generation:
            self._load_data(entry.engine)
            entry.data_generation = generation
        return entry.engine

    def forget(self) -> None:
        """Drop this thread's object (the set is closed, or was refused)."""
        cache = getattr(_THREAD_ENGINES, self._slot, None)
        if cache is not None:
            cache.pop(self._token, None)


class _PreparedRegorus:
    engine_name = "regorus"

    def __init__(self, modules: Mapping[str, str], data: Mapping[str, Any]) -> None:
        self._modules = dict(modules)
        self._data = dict(data)
        self._cluster: Mapping[str, Any] | None = None
        self._engines = ThreadBound("cache", self._build, self._load_data, _ENGINES_PER_THREAD)
        self._engine()  # parse now, in this thread: a module that does not parse is refused at load

    def _build(self) -> Any:
        import regorus

        engine = regorus.Engine()
        for name, source in self._modules.items():
            try:
                engine.add_policy(name, source)
            except Exception as exc:
                raise RegoCompileError(f"{name}: {clean_error(str(exc))}") from exc
        return engine

    def _engine(self) -> Any:
        return self._engines.get()

    def _load_data(self, engine: Any) -> None:
        engine.clear_data()
        engine.add_data_json(orjson.dumps(self._full_data(), default=_json_default).decode())

    def _full_data(self) -> dict[str, Any]:
        data = dict(self._data)
        if self._cluster is not None:
            kgwe = dict(data.get("kgwe") or {})
            kgwe["cluster"] = self._cluster
            data["kgwe"] = kgwe
        return data

    def set_cluster(self, cluster: Mapping[str, Any]) -> None:
        if cluster is not self._cluster:
            self._cluster = cluster
            self._engines.data_changed()

    def query(self, path: str, rego_input: RegoInput | None = None) -> Any:
        try:
            engine = self._engine()
            engine.set_input_json(rego_input.raw.decode() if rego_input is not None else "{}")
            result = orjson.loads(engine.eval_query_as_json(path))
        except RegoCompileError as exc:
            raise RegoEvaluationError(str(exc)) from exc
        except Exception as exc:
            raise RegoEvaluationError(clean_error(str(exc))) from exc
        rows = result.get("result") or []
        if not rows:
            return UNDEFINED
        return rows[0]["expressions"][0]["value"]

    def close(self) -> None:
        self._engines.forget()


class RegorusEngine:
    name = "regorus"

    def prepare(self, modules: Mapping[str, str], data: Mapping[str, Any]) -> PreparedRego:
        return _PreparedRegorus(modules, data)


# -- OPA's Go engine in-process (reference) ----------------------------------------------------


# -- OPA server over its REST API ---------------------------------------------------------------


