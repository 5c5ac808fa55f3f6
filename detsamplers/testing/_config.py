"""``Config``: the world size, worker processes and batch size of one run of a check.

NOTE [ resume check ] (in _resume.py) names what a check does with its configurations;
this module only holds the value and checks its fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import check_int

__all__ = ["Config"]


@dataclass(frozen=True)
class Config:
    """A loader configuration: world size, worker processes and (optionally) batch size.

    Args:
        world_size: Ranks, each with its own loader, ``>= 1``.
        num_workers: Worker processes per loader, ``>= 0``.
        batch_size: Records per batch on each rank, passed to the factory as
            ``batch_size=`` when set; ``None`` leaves it to the factory.

    Examples:
        >>> Config(world_size=2, num_workers=2)
        Config(world_size=2, num_workers=2, batch_size=None)
        >>> Config(world_size=2, num_workers=2).describe()
        'world size 2, num_workers=2'
    """

    world_size: int = 1
    num_workers: int = 0
    batch_size: int | None = None

    def __post_init__(self) -> None:
        check_int("world_size", self.world_size, minimum=1)
        check_int("num_workers", self.num_workers, minimum=0)
        if self.batch_size is not None:
            check_int("batch_size", self.batch_size, minimum=1)

    def describe(self) -> str:
        """The configuration in words, as the checker's messages name it."""
        text = f"world size {self.world_size}, num_workers={self.num_workers}"
        return text if self.batch_size is None else f"{text}, batch_size={self.batch_size}"
