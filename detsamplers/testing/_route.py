"""State routes: how the resume checker saves a paused loader's state and loads it back.

NOTE [ state routes ]
A route is two functions, ``save(loader) -> state`` and ``load(loader, state)``, and an
encoding the state makes a round trip through between them, as it would through a
checkpoint: ``"json"`` (``json.dumps`` then ``json.loads``), ``"torch"``
(``torch.save`` into memory, then ``torch.load(weights_only=True)``) or ``None``. The
checker never hands the live state object to the resumed loader, so a state that only
works because it shares memory with the paused loader fails the check.

``route="auto"`` picks the first that fits the loader, in this order:

1. the loader's own ``state_dict()``/``load_state_dict()`` (what
   ``detsamplers.loader.DataLoader.get_data_loader`` returns, torchdata's
   ``StatefulDataLoader``, or any loader with that API): exact with workers;
2. its batch sampler's (``make_batch_sampler`` in torch's DataLoader): exact at
   ``num_workers=0`` only, since with workers the sampler runs ahead of the batches
   delivered by the prefetched batches; the checker pauses such a loader with
   ``num_workers=0`` and resumes it with any.

A loader with neither cannot be resumed at all, and the checker says so.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["StateRoute", "choose_route", "round_trip"]

_ENCODINGS = ("json", "torch", None)


def _has_state(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None)
    )


def _save_loader(loader: Any) -> Any:
    return loader.state_dict()


def _load_loader(loader: Any, state: Any) -> None:
    loader.load_state_dict(state)


def _save_batch_sampler(loader: Any) -> Any:
    return loader.batch_sampler.state_dict()


def _load_batch_sampler(loader: Any, state: Any) -> None:
    loader.batch_sampler.load_state_dict(state)


@dataclass(frozen=True)
class StateRoute:
    """How a paused loader's state is saved, encoded and loaded into a fresh loader.

    Args:
        save: ``save(loader)`` returns the state of a loader paused between batches.
        load: ``load(loader, state)`` puts a fresh loader at that state.
        encoding: The round trip between them: ``"json"`` (default), ``"torch"``
            (``torch.save``, then ``torch.load(weights_only=True)``) or ``None``.
        name: Named in the checker's messages.
        exact_with_workers: Whether ``save`` is exact while workers prefetch; if not,
            the checker pauses with ``num_workers=0`` (NOTE [ state routes ]).

    Examples:
        >>> from detsamplers.loader import DataLoader
        >>> route = StateRoute(
        ...     save=lambda loader: loader.batch_sampler.state_dict(),
        ...     load=lambda loader, state: loader.batch_sampler.load_state_dict(state),
        ...     name="my checkpoint",
        ... )
        >>> loader = DataLoader(range(8), batch_size=2).get_data_loader(repeat=True, skip=3)
        >>> route.round_trip(route.save(loader))["position"]
        3
    """

    save: Callable[[Any], Any]
    load: Callable[[Any, Any], None]
    encoding: str | None = "json"
    name: str = "custom route"
    exact_with_workers: bool = True

    def __post_init__(self) -> None:
        for field in ("save", "load"):
            if not callable(getattr(self, field)):
                raise TypeError(f"{field} should be a callable, but got {getattr(self, field)!r}")
        if self.encoding is not None and not isinstance(self.encoding, str):
            raise TypeError(
                f"encoding should be 'json', 'torch' or None, but got "
                f"{type(self.encoding).__name__} {self.encoding!r}"
            )
        if not isinstance(self.name, str):
            raise TypeError(
                f"name should be a str, but got {type(self.name).__name__} {self.name!r}"
            )
        if not isinstance(self.exact_with_workers, bool):
            raise TypeError(
                f"exact_with_workers should be a bool, but got "
                f"{type(self.exact_with_workers).__name__} {self.exact_with_workers!r}"
            )
        if self.encoding not in _ENCODINGS:
            raise ValueError(
                f"encoding should be one of 'json', 'torch' or None, but got "
                f"encoding={self.encoding!r}"
            )

    def round_trip(self, state: Any) -> Any:
        """``state`` encoded and decoded as it would be through a checkpoint."""
        __tracebackhide__ = True
        return round_trip(state, self.encoding, self.name)


def round_trip(state: Any, encoding: str | None, name: str = "the route") -> Any:
    """Encode and decode ``state`` with ``encoding`` (NOTE [ state routes ])."""
    __tracebackhide__ = True
    if encoding is None:
        return state
    if encoding == "json":
        try:
            text = json.dumps(state)
        except (TypeError, ValueError) as error:
            raise AssertionError(
                f"the state saved by {name} does not survive a JSON round trip ({error}); "
                "keep the state to dicts, lists, strings and numbers, or check with "
                "StateRoute(..., encoding='torch')"
            ) from error
        return json.loads(text)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    try:
        return torch.load(buffer, weights_only=True)
    except Exception as error:  # an unpickling error names the offending type
        raise AssertionError(
            f"the state saved by {name} does not load with torch.load(weights_only=True) "
            f"({error}); a checkpoint that needs full unpickling can run code"
        ) from error


LOADER_ROUTE = StateRoute(_save_loader, _load_loader, name="loader.state_dict()")
SAMPLER_ROUTE = StateRoute(
    _save_batch_sampler,
    _load_batch_sampler,
    name="loader.batch_sampler.state_dict()",
    exact_with_workers=False,
)


def choose_route(loader: Any, route: StateRoute | str) -> StateRoute:
    """The route for ``loader``: ``route`` itself, or the one ``"auto"`` picks.

    Raises:
        ValueError: ``route`` is neither a StateRoute nor ``"auto"``.
        AssertionError: ``"auto"`` finds no state API on the loader.
    """
    __tracebackhide__ = True
    if isinstance(route, StateRoute):
        return route
    if route != "auto":
        raise ValueError(
            f"route should be 'auto' or a StateRoute, but got route={route!r}; build a "
            "StateRoute(save=..., load=...) for your checkpoint code"
        )
    if _has_state(loader):
        return LOADER_ROUTE
    if _has_state(getattr(loader, "batch_sampler", None)):
        return SAMPLER_ROUTE
    raise AssertionError(
        f"this {type(loader).__name__} cannot be resumed: neither it nor its batch sampler "
        f"({type(getattr(loader, 'batch_sampler', None)).__name__}) has state_dict() and "
        "load_state_dict(), so a resumed run starts over; build it with "
        "detsamplers.loader.DataLoader(...).get_data_loader(repeat=True), "
        "make_batch_sampler, or torchdata's StatefulDataLoader, or pass route=StateRoute(...)"
    )
