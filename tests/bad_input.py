"""What every bad-input module shares: the alarm that fails a hanging case, and the case shape.

Hostile input to the public surface gets a clear error, never a raw one, a hang or silence.
Each area keeps its cases beside its other tests (``tests/test_samplers_bad_input.py``,
``tests/loader/test_loader_bad_input.py``, ``tests/webdataset/test_wds_bad_input.py``,
``tests/webdataset/test_wds_writer_bad_input.py``, ``tests/trial/test_trial_bad_input.py``): one
parametrised case per input, each under a 20 s alarm (60 s if it starts a process), pinning the
fitting exception type and a message naming the parameter, field, shard or file, the value, and
the fix.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from tests.tiers import SLOW

# A case: the call, the exception type it must raise, and the pattern its message must match.
Case = tuple[Callable[[], Any], type[Exception], str]


# A case in-process hangs after 20 s; one that starts a process or a server (a slow marker, as
# the kernel-status cases' child importing torch) gets 60 s, which holds while pytest-xdist's
# workers and other work share the cores.
ALARM_SECONDS = 20
ALARM_SECONDS_SLOW = 60


@pytest.fixture(autouse=True)
def alarm(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a case that hangs instead of hanging the suite (autouse where it is imported)."""
    slow = any(request.node.get_closest_marker(name) for name in SLOW)
    seconds = ALARM_SECONDS_SLOW if slow else ALARM_SECONDS

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"the case hung for {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def assert_clear_error(call: Callable[[], Any], kind: type[Exception], message: str) -> None:
    """``call()`` raises ``kind`` matching ``message``, and not a raw lookup error."""
    with pytest.raises(kind, match=message) as raised:
        call()
    assert type(raised.value) not in (KeyError, IndexError, AttributeError)
