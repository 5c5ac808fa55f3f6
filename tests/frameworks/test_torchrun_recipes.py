"""The plain torchrun loop and the DCP loop: exact epochs across a 2 -> 1 -> 2 resume chain.

examples/torchrun_train.py and examples/dcp_train.py (docs/recipes/) under torchrun: 64
records, a global batch of 8, so an epoch is 8 steps. A run with 2 loader workers stops at
step 3; relaunched, it resumes from its newest checkpoint on 1 process to step 6, then on 2
to step 16 (the DCP loop: on 1 process to step 16): every record is trained exactly once in
each of the two epochs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .framework_helpers import per_epoch, torchrun

RECORDS = 64
STEPS_PER_EPOCH = 8
CHAIN = ((2, 3, 4, 2), (1, 6, 8, 0), (2, 16, 4, 0))  # ranks, max steps, batch size, workers


@pytest.mark.distributed
@pytest.mark.frameworks
@pytest.mark.parametrize(
    ("script", "chain"),
    [("torchrun_train.py", CHAIN), ("dcp_train.py", (*CHAIN[:1], (1, 16, 8, 0)))],
)
def test_the_recipe_resumes_from_its_checkpoints_on_another_number_of_processes(
    script: str, chain: tuple[tuple[int, int, int, int], ...], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    trained = []
    for ranks, steps, batch_size, workers in chain:
        args = ["--out", str(out), "--max-steps", str(steps), "--batch-size", str(batch_size)]
        torchrun(script, ranks, [*args, "--num-workers", str(workers)], tmp_path / "log")
        trained.append(sum(sum(c.values()) for c in per_epoch(out, STEPS_PER_EPOCH).values()))
    # each launch trained only what was left
    assert trained == [steps * 8 for _, steps, _, _ in chain]
    counts = per_epoch(out, STEPS_PER_EPOCH)
    assert sorted(counts) == [0, 1]
    for epoch, seen in counts.items():
        assert seen == dict.fromkeys(range(RECORDS), 1), epoch
