"""Which attributes a call changes: the object's own, its class's, and its module's globals.

NOTE [ watched attributes ]
A record that depends on how many records came before is state a checkpoint does not
hold. Where that state lives says who shares it: an attribute of the dataset (or of the
collate object) starts over with each fresh loader, as after a restart; a class attribute
or a module global outlives the object, so every loader built in one process shares it,
and a restarted process starts it over. The diagnosis (NOTE [ mismatch diagnosis ])
watches these places around the calls it probes and names the ones that changed.

A watched value is fingerprinted cheaply, never copied: a number, string or ``None`` by
its value, a sized container (a cache, a list filled in order) by its length, anything
else by identity (rebinding). The callable's module globals are those its code names
(``__code__.co_names``). After probing, class attributes and globals that held a plain
value are put back, so that the probes leave the user's process as they found it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["Change", "Watch"]

_PLAIN = (int, float, complex, str, bytes, bool, type(None), np.generic)
_LIBRARIES = ("builtins", "typing", "abc", "collections", "torch", "numpy", "detsamplers")


@dataclass(frozen=True)
class Change:
    """A watched place whose fingerprint changed, and whether it outlives the object."""

    where: str
    before: str
    after: str
    shared: bool

    def describe(self) -> str:
        """``<where> (from <before> to <after>)``."""
        return f"{self.where} (from {self.before} to {self.after})"


def _fingerprint(value: Any) -> tuple[Any, str]:
    if isinstance(value, _PLAIN):
        return ("value", value), repr(value)[:40]
    if isinstance(value, Sized) and not isinstance(value, (torch.Tensor, np.ndarray)):
        try:
            size = len(value)
        except Exception:
            return ("id", id(value)), f"a {type(value).__name__}"
        return ("len", size), f"{size} items"
    return ("id", id(value)), f"a {type(value).__name__} at {id(value):#x}"


def _watchable(value: Any) -> bool:
    return not (callable(value) or isinstance(value, (staticmethod, classmethod, property)))


def _item(scope: Any, key: str) -> Callable[[], Any]:
    return lambda: vars(scope).get(key) if not isinstance(scope, dict) else scope.get(key)


def _setter(scope: Any, key: str) -> Callable[[Any], None]:
    if isinstance(scope, dict):
        return lambda value: scope.__setitem__(key, value)
    return lambda value: setattr(scope, key, value)


def _code_of(function: Any) -> Any:
    return getattr(getattr(function, "__func__", function), "__code__", None)


class Watch:
    """Fingerprints of the places ``call`` may keep state in, taken now.

    Args:
        obj: The dataset or collate object (its attributes and its class's).
        call: The function probed (``__getitem__`` or the collate function): the module
            globals its code names are watched.
    """

    def __init__(self, obj: Any, call: Callable[..., Any]) -> None:
        self.places: dict[str, tuple[bool, Callable[[], Any], Callable[[Any], None] | None]] = {}
        name = type(obj).__name__
        owner = (
            f"the function attribute {getattr(obj, '__qualname__', name)}."
            if inspect.isfunction(obj)
            else f"{name}'s attribute self."
        )
        for key in list(getattr(obj, "__dict__", {})):
            if not key.startswith("__"):
                self.places[owner + key] = (False, _item(obj, key), None)
        for cls in type(obj).__mro__:
            if cls.__module__.split(".")[0] in _LIBRARIES:
                continue
            for key, value in list(vars(cls).items()):
                if key.startswith("__") or not _watchable(value):
                    continue
                self.places[f"the class attribute {cls.__qualname__}.{key}"] = (
                    True,
                    _item(cls, key),
                    _setter(cls, key),
                )
        code = _code_of(call)
        scope = getattr(getattr(call, "__func__", call), "__globals__", None)
        if code is not None and isinstance(scope, dict):
            module = scope.get("__name__", "its module")
            for key in code.co_names:
                if key in scope and not key.startswith("__") and _watchable(scope[key]):
                    self.places[f"the module global {module}.{key}"] = (
                        True,
                        _item(scope, key),
                        _setter(scope, key),
                    )
        self.before = {where: get() for where, (_, get, _) in self.places.items()}
        self.prints = {where: _fingerprint(value) for where, value in self.before.items()}

    def changes(self) -> list[Change]:
        """The watched places whose fingerprint differs from when the watch began."""
        found = []
        for where, (shared, get, _) in self.places.items():
            now = _fingerprint(get())
            if now[0] != self.prints[where][0]:
                found.append(Change(where, self.prints[where][1], now[1], shared))
        return found

    def put_back(self) -> None:
        """Put back the class attributes and globals that held a plain value."""
        for where, (_, get, put) in self.places.items():
            value = self.before[where]
            moved = _fingerprint(get())[0] != self.prints[where][0]
            if put is not None and isinstance(value, _PLAIN) and moved:
                put(value)
