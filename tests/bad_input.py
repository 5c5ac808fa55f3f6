"""What every bad-input module shares: the alarm that fails a hanging case, and the case shape.

Hostile input to the public surface gets a clear error, never a raw one, a hang or silence.
Each area keeps its cases beside its other tests (``tests/test_samplers_bad_input.py``,
``tests/loader/test_loader_bad_input.py``, ``tests/webdataset/test_wds_bad_input.py``,
``tests/webdataset/test_wds_writer_bad_input.py``, ``tests/trial/test_trial_bad_input.py``): one
parametrised case per input, each under a 20 s alarm, pinning the fitting exception type and
a message naming the parameter, field, shard or file, the value, and the fix.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

# A case: the call, the exception type it must raise, and the pattern its message must match.
Case = tuple[Callable[[], Any], type[Exception], str]


@pytest.fixture(autouse=True)
def alarm() -> Iterator[None]:
    """Fail a case that hangs instead of hanging the suite (autouse where it is imported)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("the case hung for 20 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def assert_clear_error(call: Callable[[], Any], kind: type[Exception], message: str) -> None:
    """``call()`` raises ``kind`` matching ``message``, and not a raw lookup error."""
    with pytest.raises(kind, match=message) as raised:
        call()
    assert type(raised.value) not in (KeyError, IndexError, AttributeError)
