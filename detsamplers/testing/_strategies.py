"""Hypothesis strategies for resume checks: pause points and loader configurations.

A property test of a user's pipeline is then a few lines::

    @given(pauses=pause_points(batches=8), resume=configs())
    def test_my_pipeline_resumes(pauses, resume):
        check_resume(make_loader, pauses, batches=8, resume=resume)

Hypothesis shrinks a failure to the fewest, earliest pauses and the smallest
configuration, so the checker's message names a minimal case.
"""

from __future__ import annotations

from hypothesis import strategies as st

from .._errors import check_int
from ._config import Config

__all__ = ["configs", "pause_points"]


def pause_points(batches: int, max_pauses: int = 3) -> st.SearchStrategy[list[int]]:
    """Sorted, distinct pause points in ``[1, batches)``: 1 to ``max_pauses`` of them.

    Examples:
        >>> from hypothesis import find
        >>> find(pause_points(batches=8), lambda p: len(p) == 3)
        [1, 2, 3]
    """
    batches = check_int("batches", batches, minimum=2)
    max_pauses = check_int("max_pauses", max_pauses, minimum=1)
    return st.lists(st.integers(1, batches - 1), min_size=1, max_size=max_pauses, unique=True).map(
        sorted
    )


def configs(
    world_sizes: st.SearchStrategy[int] | None = None,
    num_workers: st.SearchStrategy[int] | None = None,
    batch_sizes: st.SearchStrategy[int | None] | None = None,
) -> st.SearchStrategy[Config]:
    """Loader configurations for the resumed run (or the paused one).

    Args:
        world_sizes: Default ``1..4``.
        num_workers: Default ``0..2`` (workers are slow to start: keep it small).
        batch_sizes: Default ``None`` (the factory's own batch size).

    Examples:
        >>> from hypothesis import find
        >>> find(configs(), lambda c: c.world_size > 2 and c.num_workers > 0)
        Config(world_size=3, num_workers=1, batch_size=None)
    """
    for name, value in (
        ("world_sizes", world_sizes),
        ("num_workers", num_workers),
        ("batch_sizes", batch_sizes),
    ):
        if value is not None and not isinstance(value, st.SearchStrategy):
            raise TypeError(
                f"{name} should be a hypothesis strategy or None, but got "
                f"{type(value).__name__} {value!r}; wrap a fixed value in st.just(...)"
            )
    return st.builds(
        Config,
        world_size=world_sizes if world_sizes is not None else st.integers(1, 4),
        num_workers=num_workers if num_workers is not None else st.integers(0, 2),
        batch_size=batch_sizes if batch_sizes is not None else st.none(),
    )
