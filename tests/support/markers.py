"""What a test needs, as markers (registered in pyproject.toml), put on at collection.

* ``cluster``: a run of a test on the session's Redis Cluster (a ``[cluster]`` parametrisation,
  ``BOTH_BACKENDS`` or ``tests.support.backends``), or a test that uses the cluster or builds one
  (:data:`CLUSTER`);
* ``stack``: a test that starts real gunicorn or nginx processes, ``seckill up`` or ``seckill
  drill``: it, or a fixture it uses, calls :data:`STACK` (directly or through helpers in
  ``tests/``), or runs the script (:data:`SCRIPT`) with ``up`` or ``drill``;
* ``browser``: a test that drives Chromium: it uses the ``chromium`` fixture of
  ``tests/support/browser.py`` (:data:`BROWSER`), directly or through ``new_page``.

Found by reading code: the names a test function and its fixtures load, followed into every
function defined under ``tests/`` they name. A test that needs one some other way (a harness
that starts gunicorn, a fixture that picks the cluster) says so itself with ``pytestmark``;
``database`` is always explicit: which tests are about the SQL database is not in their fixtures.
``pytest --collect-only -q -m stack`` lists what a marker selects.
"""

from __future__ import annotations

import dis
import inspect
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest

# The functions that start what a marker stands for, as "module:name".
STACK = {"tests.support.servers:running_server", "tests.support.cli:seckill_up"}
# The names a test runs the seckill script as a process by (stack with "up" or "drill").
SCRIPT = {"SECKILL", "seckill_process"}
BROWSER = {"tests.support.browser:chromium"}
CLUSTER = {"seckill.ops.stack.cluster:EmbeddedCluster", "seckill.ops.stack.cluster:up_cluster",
           "tests.conftest:valkey_cluster"}
TARGETS = {**dict.fromkeys(STACK, "stack"), **dict.fromkeys(BROWSER, "browser"),
           **dict.fromkeys(CLUSTER, "cluster")}


def _name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '')}:{getattr(obj, '__name__', '')}"


def _codes(code: types.CodeType) -> Iterable[types.CodeType]:
    """``code`` and the code of the functions, lambdas and comprehensions inside it."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _named(code: types.CodeType, scope: dict[str, Any]) -> Iterable[Any]:
    """What ``code`` loads from its module by name: its globals, and the attributes it reads of
    a module it has as a global (``altcha_solve.chromium``)."""
    module: types.ModuleType | None = None
    for step in dis.get_instructions(code):
        if step.opname in ("LOAD_GLOBAL", "LOAD_NAME") and step.argval in scope:
            value = scope[step.argval]
            module = value if isinstance(value, types.ModuleType) else None
            yield value
            continue
        if module is not None and step.opname in ("LOAD_ATTR", "LOAD_METHOD"):
            yield getattr(module, str(step.argval), None)
        module = None


def _runs_up(code: types.CodeType) -> bool:
    """Whether ``code`` runs the ``seckill`` script as a process with ``up`` or ``drill`` (the
    whole stack) as its command: ``[str(SECKILL), "up", ...]``, ``seckill_process("up", ...)``."""
    loaded = {step.argval for step in dis.get_instructions(code)
              if step.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    return bool(loaded & SCRIPT) and bool({"up", "drill"} & set(code.co_consts))


def _unwrap(obj: Any) -> Any:
    try:
        return inspect.unwrap(obj)
    except ValueError:
        return obj


class Reach:
    """Which markers a function leads to, memoised by function."""

    def __init__(self) -> None:
        self.seen: dict[Any, frozenset[str]] = {}

    def of(self, func: Callable[..., Any]) -> frozenset[str]:
        func = _unwrap(func)
        if func in self.seen:
            return self.seen[func]
        self.seen[func] = frozenset()  # a cycle adds nothing
        found: set[str] = set()
        code = getattr(func, "__code__", None)
        if code is not None:
            scope = getattr(func, "__globals__", {})
            for inner in _codes(code):
                if _runs_up(inner):
                    found.add("stack")
                for value in _named(inner, scope):
                    target = _unwrap(value)
                    mark = TARGETS.get(_name(target))
                    if mark:
                        found.add(mark)
                    elif inspect.isfunction(target) and target.__module__.startswith("tests"):
                        found |= self.of(target)
        self.seen[func] = frozenset(found)
        return self.seen[func]


def _used(defs: Sequence[Any]) -> list[Any]:
    """The definitions of a fixture that run for a test: the closest one (a test module's own
    ``gateway`` overrides the plugin's), and the one it overrides when it asks for it by its own
    name, and so on."""
    used = []
    for d in reversed(defs):
        used.append(d)
        if d.argname not in d.argnames:
            break
    return used


def marks_of(item: pytest.Function, reach: Reach) -> set[str]:
    """The markers ``item`` needs, from its parameters, its function and its fixtures."""
    found: set[str] = set()
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "cluster" in callspec.params.values():
        found.add("cluster")
    funcs = [item.function]
    for name, defs in item._fixtureinfo.name2fixturedefs.items():
        if name in item.fixturenames:
            used = _used(defs)
            funcs.extend(d.func for d in used)
            for d in used:
                mark = TARGETS.get(f"{d.func.__module__}:{d.argname}")
                if mark:
                    found.add(mark)
    for func in funcs:
        found |= reach.of(func)
    return found


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reach = Reach()
    for item in items:
        if isinstance(item, pytest.Function):
            for mark in sorted(marks_of(item, reach) - {m.name for m in item.iter_markers()}):
                item.add_marker(mark)
