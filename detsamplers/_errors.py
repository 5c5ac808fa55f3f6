"""The library's error type and the argument checks every public constructor uses.

Arguments are validated before anything is stored, in the style of ``torch.utils.data``:
one sentence naming the parameter, the constraint and the value received, plus the fix
where there is one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ReproducibilityError", "check_bool", "check_callable", "check_int", "check_one_of"]


class ReproducibilityError(ValueError):
    """Something would break a reproducible resume.

    Raised, for example, when a sampler's saved state comes from a different chain
    (another seed, dataset length or stage order), so that resuming from it would train
    on other data than the uninterrupted run.

    It subclasses :class:`ValueError`, so code that already catches bad values keeps
    working.

    Examples:
        >>> from detsamplers import ReproducibilityError
        >>> issubclass(ReproducibilityError, ValueError)
        True
    """


ReproducibilityError.__module__ = "detsamplers"  # its public home, as tracebacks show it


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


#: The largest count or position a check accepts: positions are int64 in numpy.
MAX_COUNT = 2**62


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    below: int | None = None,
    below_name: str | None = None,
) -> int:
    """Return ``value`` as an ``int`` after checking it, or raise naming ``name``.

    ``bool`` is rejected even though it subclasses ``int``: ``rank=True`` is a bug.

    Args:
        name: The parameter's name, as the user wrote it.
        value: What the user passed.
        minimum: The smallest allowed value, if any.
        below: An exclusive upper bound, if any.
        below_name: How to name ``below`` in the message, e.g. ``"num_workers"``.

    Returns:
        The value as a plain ``int``.

    Raises:
        TypeError: ``value`` is not an integer.
        ValueError: ``value`` is out of range.

    Examples:
        >>> check_int("batch_size", 32, minimum=1)
        32
        >>> check_int("batch_size", 0, minimum=1)
        Traceback (most recent call last):
        ...
        ValueError: batch_size should be a positive integer value, but got batch_size=0
    """
    if not _is_int(value):
        kind = "a positive integer" if minimum == 1 else "an integer"
        raise TypeError(
            f"{name} should be {kind} value, but got {name}={value!r} "
            f"of type {type(value).__name__}"
        )
    number = int(value)
    if minimum is not None and number < minimum:
        if minimum == 1:
            raise ValueError(f"{name} should be a positive integer value, but got {name}={number}")
        if minimum == 0:
            raise ValueError(
                f"{name} should be a non-negative integer value, but got {name}={number}"
            )
        raise ValueError(f"{name} should be an integer >= {minimum}, but got {name}={number}")
    if minimum is not None and number > MAX_COUNT:
        raise ValueError(
            f"{name} should be at most 2**62, but got {name}={number}: positions and counts "
            "are 64-bit integers"
        )
    if below is not None and number >= below:
        bound = below_name or str(below)
        raise ValueError(
            f"{name} should be an integer in [0, {bound}), but got {name}={number} "
            f"with {bound}={below}"
        )
    return number


def check_one_of(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of the ``allowed`` strings, else raise naming ``name``.

    Examples:
        >>> check_one_of("mode", "training", ("training", "validation"))
        'training'
        >>> check_one_of("mode", "train", ("training", "validation"))
        Traceback (most recent call last):
        ...
        ValueError: mode should be one of 'training', 'validation', but got mode='train'
    """
    if not isinstance(value, str):
        raise TypeError(
            f"{name} should be a string, but got {name}={value!r} of type {type(value).__name__}"
        )
    if value not in allowed:
        choices = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"{name} should be one of {choices}, but got {name}={value!r}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a ``bool``, else raise ``TypeError`` naming ``name``.

    Examples:
        >>> check_bool("shuffle", 1)
        Traceback (most recent call last):
        ...
        TypeError: shuffle should be a bool, but got shuffle=1 of type int
    """
    if not isinstance(value, bool):
        raise TypeError(
            f"{name} should be a bool, but got {name}={value!r} of type {type(value).__name__}"
        )
    return value


def check_callable(name: str, value: Any) -> None:
    """Raise ``TypeError`` naming ``name`` unless ``value`` is callable or None.

    Examples:
        >>> check_callable("collate_fn", 3)
        Traceback (most recent call last):
        ...
        TypeError: collate_fn should be a callable or None, but got collate_fn=3 of type int
    """
    if value is not None and not callable(value):
        raise TypeError(
            f"{name} should be a callable or None, but got {name}={value!r} "
            f"of type {type(value).__name__}"
        )
