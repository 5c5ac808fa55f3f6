"""``check_resume``'s arguments, checked before any loader is built.

NOTE [ kit arguments ]
Each argument of the checker is checked for its type before anything runs, and a wrong
one is a ``TypeError`` naming the parameter, what it takes and what it got. The factory
is a user's function that the check calls with keywords only: ``rank``, ``world_size``,
``num_workers`` and, when a Config sets one, ``batch_size``. Its signature
(``inspect.signature``) is bound to those keywords first, so that a factory of another
shape is refused with both shapes named, instead of Python's bare "unexpected keyword
argument" from deep inside the first build; a callable without a signature (a builtin)
is checked by its first call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._errors import check_int
from ._config import Config

__all__ = ["check_signature", "configs_of", "factory_name", "iterable_arg", "pause_points_of"]


def factory_name(factory: Callable[..., Any]) -> str:
    return str(getattr(factory, "__qualname__", type(factory).__name__))


def check_signature(factory: Callable[..., Any], configs: list[Config]) -> None:
    """Bind the keywords the check will call ``factory`` with, before building anything."""
    __tracebackhide__ = True
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return  # no signature to read (a builtin): the first call tells
    names = ["rank", "world_size", "num_workers"]
    if any(config.batch_size is not None for config in configs):
        names.append("batch_size")
    try:
        signature.bind(**dict.fromkeys(names, 1))
    except TypeError as error:
        wanted = ", ".join(names)
        signature = signature.replace(return_annotation=inspect.Signature.empty)
        why = " (a Config sets batch_size)" if "batch_size" in names else ""
        raise TypeError(
            f"factory should take the keyword arguments {wanted}{why}, but "
            f"{factory_name(factory)}{signature} cannot ({error}); define it as "
            f"def factory({wanted}) returning that rank's loader"
        ) from None


def configs_of(name: str, value: Config | Sequence[Config] | None, default: Config) -> list[Config]:
    __tracebackhide__ = True
    if value is None:
        return [default]
    items = [value] if isinstance(value, Config) else list(value) if iterable_arg(value) else []
    if not items or not all(isinstance(c, Config) for c in items):
        raise TypeError(
            f"{name} should be a Config or a non-empty list of Config, but got {value!r}"
        )
    return items


def iterable_arg(value: Any) -> bool:
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping))


def pause_points_of(pauses: Iterable[int], batches: int) -> list[int]:
    __tracebackhide__ = True
    if not iterable_arg(pauses):
        raise TypeError(
            f"pauses should be a list of ints (global batches trained before each pause), "
            f"but got {type(pauses).__name__} {pauses!r}; pass pauses=[{pauses!r}] for one pause"
        )
    points: set[int] = set()
    for pause in pauses:
        points.add(check_int("pauses", pause, minimum=1))
    if not points:
        raise ValueError("pauses should name at least one pause point, but got none")
    if max(points) >= batches:
        raise ValueError(
            f"pauses should be below batches={batches}, but got pause {max(points)}; raise "
            "batches or pause earlier"
        )
    return sorted(points)
