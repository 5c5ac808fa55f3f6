"""Growing the training dataset at a resume (NOTE [ trial growth ]): the law, in the trial."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from demo_trial import DemoTrial, Points
from trial_helpers import HPARAMS, identical, weights

from detsamplers import ReproducibilityError
from detsamplers.loader import DataLoader
from detsamplers.trial import Batch, Trainer, find_latest_checkpoint, init
from detsamplers.trial._data import MapData, global_batch, grown_data


class Recorded(DemoTrial):
    """The demo trial, keeping each batch's ``(epoch_idx, indices)`` (one rank)."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.batches: list[tuple[int, list[int]]] = []

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        self.batches.append((epoch_idx, batch[2].tolist()))
        return super().train_batch(batch, epoch_idx, batch_idx)


def run(
    folder: Path,
    batches: int,
    *,
    records: int = 40,
    resume: bool = True,
    growth: bool = True,
    trial_class: type[Recorded] = Recorded,
    **hparams: Any,
) -> Recorded:
    """Train to ``batches`` over ``records`` records, resuming from ``folder``'s newest."""
    with init(hparams={**HPARAMS, "records": records, **hparams}, seed=1) as context:
        trial = trial_class(context)
        latest = find_latest_checkpoint(str(folder)) if resume else None
        Trainer(trial, context).fit(
            Batch(batches),
            checkpoint_period=Batch(5),
            checkpoint_dir=str(folder),
            latest_checkpoint=latest,
            reporting_period=Batch(5),
            dataset_growth=growth,
        )
    return trial


def passes(history: list[tuple[int, int]], end: int) -> list[tuple[int, int, int]]:
    """``(start, stop, length)`` of the shuffle's passes before ``end`` (NOTE [ growth law ])."""
    out, start, length, pending = [], 0, history[0][1], list(history[1:])
    while start < end:
        stop = start + length
        while pending and pending[0][0] < stop:  # a growth inside the pass lengthens it
            length = pending.pop(0)[1]
            stop = start + length
        out.append((start, stop, length))
        if pending and pending[0][0] == stop:  # a growth on the boundary: the next pass
            length = pending.pop(0)[1]
        start = stop
    return out


def check_law(stream: list[int], epochs: list[int], history: list[tuple[int, int]], g: int) -> None:
    """Each pass holds its records once; an epoch is the shortest run of batches of its length."""
    for start, stop, length in passes(history, len(stream)):
        part = stream[start:stop]
        if stop <= len(stream):
            assert sorted(part) == list(range(length)), (start, stop)
        else:
            assert len(set(part)) == len(part) and max(part) < length
    first, epoch = 0, 0
    for batch, epoch_idx in enumerate(epochs):
        assert epoch_idx == epoch, batch
        start = batch * g
        records = [n for at, n in history if at <= start][-1]  # the length at its resume
        if start + g >= first + records:
            first, epoch = start + g, epoch + 1


@pytest.mark.parametrize(
    ("steps", "g"),
    [
        ([(3, 40), (18, 48)], 8),  # pause mid-epoch 0, grow by 8: epochs of 48 after
        ([(2, 40), (12, 45), (20, 45)], 8),  # 45 not a multiple of 8; a second resume
        ([(7, 40), (12, 48), (16, 64), (24, 64)], 8),  # growth in epoch 1, then in epoch 2
        ([(5, 40), (13, 56)], 8),  # a pause on an epoch boundary: the next epoch is 56 long
    ],
)
def test_the_epoch_that_grew_trains_every_unseen_and_new_record_once(
    tmp_path: Path, steps: list[tuple[int, int]], g: int
) -> None:
    stream: list[int] = []
    epochs: list[int] = []
    history = [(0, steps[0][1])]
    for i, (batches, records) in enumerate(steps):
        if records != history[-1][1]:
            history.append((len(stream), records))
        trial = run(tmp_path, batches, records=records, resume=i > 0)
        epochs += [e for e, _ in trial.batches]
        stream += [r for _, indices in trial.batches for r in indices]
    assert len(stream) == steps[-1][0] * g
    check_law(stream, epochs, history, g)
    metadata = json.loads((tmp_path / f"batch-{steps[-1][0]:06d}" / "metadata.json").read_text())
    assert metadata["dataset_growth"] == [list(x) for x in history]
    assert metadata["dataset_length"] == history[-1][1]


def test_the_grown_pass_holds_no_old_record_twice(tmp_path: Path) -> None:
    seen = [r for _, b in run(tmp_path, 3, resume=False).batches for r in b]  # samples 0-23
    grown = run(tmp_path, 6, records=48).batches  # the rest of epoch 0: 24 samples
    rest = [r for _, b in grown for r in b]
    assert [e for e, _ in grown] == [0, 0, 0]
    assert not set(rest) & set(seen)
    assert sorted(seen + rest) == list(range(48))


def test_a_pause_after_the_growth_resumes_bit_identically(tmp_path: Path) -> None:
    run(tmp_path / "straight", 3, resume=False)
    straight = run(tmp_path / "straight", 14, records=48)
    run(tmp_path / "paused", 3, resume=False)
    run(tmp_path / "paused", 8, records=48)
    resumed = run(tmp_path / "paused", 14, records=48, growth=False)  # history from the ckpt
    assert identical(weights(straight), weights(resumed))
    assert straight.batches[5:] == resumed.batches


def test_a_growth_and_a_new_global_batch_size_at_one_resume(tmp_path: Path) -> None:
    first = run(tmp_path / "a", 3, resume=False)
    grown = run(tmp_path / "a", 6, records=48, global_batch_size=12)  # 24 + 3 x 12 = 60
    stream = [r for _, b in first.batches + grown.batches for r in b]
    check_law(stream, [], [(0, 40), (24, 48)], 8)
    assert [e for e, _ in grown.batches] == [0, 0, 1]  # epoch 0 ends at 48: after 24 + 24
    again = run(tmp_path / "a", 8, records=48, global_batch_size=8, growth=False)
    stream += [r for _, b in again.batches for r in b]
    check_law(stream, [], [(0, 40), (24, 48)], 8)


@pytest.mark.parametrize(
    ("records", "growth", "error", "message"),
    [
        (
            48,
            False,
            ReproducibilityError,
            r"dataset_length is 40 in the checkpoint but 48 here; .* Pass "
            r"Trainer.fit\(..., dataset_growth=True\) to record a growth to 48 records at "
            r"sample 24",
        ),
        (32, True, ReproducibilityError, "dataset_length is 40 in the checkpoint but 32 here, "),
        (32, False, ReproducibilityError, "a dataset may only grow during a run"),
    ],
)
def test_a_growth_without_the_opt_in_and_a_shrink_are_refused(
    tmp_path: Path, records: int, growth: bool, error: type[Exception], message: str
) -> None:
    run(tmp_path, 3, resume=False, growth=False)
    with pytest.raises(error, match=message):
        run(tmp_path, 6, records=records, growth=growth)


def test_a_shrink_after_a_growth_is_refused(tmp_path: Path) -> None:
    run(tmp_path, 3, resume=False)
    run(tmp_path, 5, records=48)
    with pytest.raises(ReproducibilityError, match="dataset_length is 48 in the checkpoint but 40"):
        run(tmp_path, 7, records=40)


class Sequential(Recorded):
    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(Points(self.context.get_hparam("records")), batch_size=8)


def test_growth_needs_a_loader_that_shuffles_itself_or_a_mixture(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError,
        match=r"^dataset_growth=True needs the DataLoader .*but it has shuffle=False: .*"
        r"or pass sampler=MixSampler, whose own curriculum adds a dataset",
    ):
        run(tmp_path, 2, resume=False, trial_class=Sequential)


def test_a_recorded_growth_is_refused_over_a_loader_that_does_not_shuffle(tmp_path: Path) -> None:
    run(tmp_path, 3, resume=False)
    run(tmp_path, 4, records=48)
    with pytest.raises(ValueError, match=r"the dataset growth \[\[0, 40\], \[24, 48\]\] recorded"):
        run(tmp_path, 5, records=48, growth=False, trial_class=Sequential)


def test_dataset_growth_must_be_a_bool(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="dataset_growth"):
        run(tmp_path, 1, resume=False, growth="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("world", [1, 2, 4])
def test_ranks_of_any_world_size_resume_a_growth_on_the_global_batches(world: int) -> None:
    # The trainer's steps on simulated ranks: states saved on 2 ranks of 4 before the growth
    # load into the grown chain on 2 ranks (each rank's state), and on another world size
    # the global digest of the data as saved matches the saved one.
    saved = MapData(DataLoader(Points(40), batch_size=4, shuffle=True, seed=1))
    checkpoint = {"dataset_length": 40, "batches_trained": 3, "samples_trained": 24}
    states = [saved.state(24, 2, r) for r in range(2)]
    digest = saved.global_digest(24, 2)
    per_slot = 8 // world
    user = MapData(DataLoader(Points(48), batch_size=per_slot, shuffle=True, seed=1))
    grown = grown_data(user, checkpoint, 24, True, "ckpt")
    assert isinstance(grown, MapData) and grown.history == [[0, 40], [24, 48]]
    assert grown.as_saved().global_digest(24, world) == digest
    assert grown.global_digest(24, world) != digest
    if world == 2:
        for rank in range(2):
            grown.load(grown.build(24, 2, rank), states[rank])
    batches = [global_batch(grown.loader, k, world) for k in range(3, 9)]
    one = grown_data(MapData(DataLoader(Points(48), batch_size=8, shuffle=True, seed=1)),
                     checkpoint, 24, True, "ckpt")  # fmt: skip
    assert isinstance(one, MapData)
    assert batches == [global_batch(one.loader, k, 1) for k in range(3, 9)]
    before = [global_batch(saved.loader, k, 2) for k in range(3)]
    rest = [r for b in batches[:3] for r in b]
    assert sorted([r for b in before for r in b] + rest) == list(range(48))
