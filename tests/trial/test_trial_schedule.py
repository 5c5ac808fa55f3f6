"""Global batch size schedules in the trial loop (NOTE [ batch size schedule ]).

The laws: the concatenated global stream of a run whose size follows a schedule, paused
and resumed at any batches on any world sizes, is the uninterrupted sample stream; every
record is trained once in each pass of ``N`` samples; an epoch is the shortest run of
whole global batches holding ``N`` samples (NOTE [ epoch length ]).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from demo_trial import DemoTrial
from hypothesis import given, settings
from hypothesis import strategies as st
from trial_helpers import identical, metrics, run, weights

from detsamplers import ReproducibilityError
from detsamplers.loader import DataLoader
from detsamplers.trial import Batch, Epoch, Trainer, TrialContext, init
from detsamplers.trial._clock import Clock
from detsamplers.trial._data import MapData
from detsamplers.trial._distributed import DistributedContext
from detsamplers.trial._schedule import BatchSchedule, check_past, realize

SEED = 1  # the trial seed, which the demo trial's loader takes


def sample_stream(records: int, samples: int) -> list[int]:
    """The first ``samples`` of the shuffled, repeated stream, read on one rank."""
    loader = DataLoader(range(records), batch_size=samples, shuffle=True, seed=SEED)
    return [int(i) for i in next(iter(loader.get_data_loader(repeat=True)))]


def passes_are_permutations(stream: list[int], records: int) -> bool:
    whole = len(stream) // records * records
    return all(
        sorted(stream[p : p + records]) == list(range(records)) for p in range(0, whole, records)
    )


def epochs_are_minimal(sizes_and_epochs: list[tuple[int, int]], records: int) -> bool:
    """Each complete epoch holds >= N samples, and fewer without its last batch."""
    by_epoch: dict[int, list[int]] = {}
    for size, epoch in sizes_and_epochs:
        by_epoch.setdefault(epoch, []).append(size)
    epochs = sorted(by_epoch)
    if epochs != list(range(epochs[0], epochs[0] + len(epochs))):
        return False
    return all(sum(by_epoch[e]) >= records and sum(by_epoch[e][:-1]) < records for e in epochs[:-1])


# Bad schedules: one clear error each, naming the parameter, the value and the fix.


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (
            True,
            TypeError,
            r"should be a positive int, .* got global_batch_size=True of type bool",
        ),
        ("32", TypeError, r"global_batch_size should be a positive int, a list .* got .*'32'"),
        (0, ValueError, r"positive integer sizes, but got 0 \(global_batch_size=0\); use"),
        ([], ValueError, r"at least one \[from_sample, size\] segment, but got global_batch_si"),
        ([[10, 8]], ValueError, r"should start at sample 0, but its first segment is \[10, 8\]"),
        ([[0, 8], [0, 16]], ValueError, r"segment 1 \[0, 16\] starts at or before segment 0"),
        ([[0, 8], [50, 16], [20, 4]], ValueError, r"segment 2 \[20, 4\] starts at or before"),
        ([[0, 8], [5]], ValueError, r"segment 1 should be a \[from_sample, size\] pair, but got"),
        ([8, 16], TypeError, r"segment 0 should be a \[from_sample, size\] pair, but got 8 of"),
        ([[0.5, 8]], TypeError, r"segment 0 should start at an integer sample, but got from_s"),
        ([[0, 8], [9, 0]], ValueError, r"sizes, but got 0 in segment 1 \(\[9, 0\]\); use a size"),
        ([[0, 8.0]], TypeError, r"sizes, but got 8.0 of type float in segment 0"),
        ([[0, False]], TypeError, r"sizes, but got False of type bool in segment 0"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_parameter_value_and_fix(
    value: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        BatchSchedule(value)
    context = TrialContext({"global_batch_size": value}, 0, DistributedContext())
    with pytest.raises(error, match=message):
        context.get_global_batch_size()


def test_a_callable_that_returns_a_bad_size_is_named_with_the_sample() -> None:
    with pytest.raises(ValueError, match=r"but got -4 from global_batch_size\(24\)"):
        BatchSchedule(lambda samples: -4).size_at(24)
    with pytest.raises(TypeError, match=r"but got True of type bool from global_batch_size\(0\)"):
        BatchSchedule(lambda samples: True).size_at(0)


def test_sizes_the_world_size_does_not_divide_are_refused_before_training() -> None:
    schedule = BatchSchedule([[0, 8], [100, 12], [200, 6]])
    Clock(schedule, 1, samples=300).check_world_size(2)  # 12 and 8 are past
    with pytest.raises(ValueError, match=r"whose size 6 is not a multiple of world size 4; use"):
        Clock(schedule, 1).check_world_size(4)


def test_a_list_switches_at_the_first_step_boundary_at_or_after_its_start() -> None:
    schedule = BatchSchedule([[0, 8], [20, 12], [30, 12], [60, 4]])
    assert realize(schedule, 1, 100) == [(0, 0, 8), (3, 24, 12), (6, 60, 4)]
    assert realize(schedule, 2, 100) == [(0, 0, 8), (4, 32, 12), (8, 80, 4)]
    clock = Clock(schedule, 1, records=1000)
    for _ in range(8):
        clock.advance()
    assert clock.segments == realize(schedule, 1, clock.samples)


# The law, in-process: every rank of every segment built from the trainer's pieces.


@st.composite
def plans(draw: st.DrawFn) -> tuple[int, list[tuple[Any, int, int]]]:
    """A record count and segments (schedule, world size, batches trained at its end)."""
    records = draw(st.integers(5, 40))
    points = [(0, 6 * draw(st.integers(1, 3)))]
    for _ in range(draw(st.integers(0, 3))):
        points.append((points[-1][0] + draw(st.integers(1, 60)), 6 * draw(st.integers(1, 3))))
    segments, stop = [], 0
    for _ in range(draw(st.integers(1, 3))):
        stop += draw(st.integers(1, 8))
        segments.append(([list(p) for p in points], draw(st.sampled_from([1, 2, 3])), stop))
    return records, segments


def test_the_schedule_law_holds_for_every_pause_world_size_and_changed_future() -> None:
    @given(plan=plans(), future=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 3))))
    @settings(deadline=None)
    def law(plan: tuple[int, list[tuple[Any, int, int]]], future: list[tuple[int, int]]) -> None:
        records, segments = plan
        data = MapData(DataLoader(range(records), batch_size=1, shuffle=True, seed=SEED))
        stream: list[int] = []
        trained: list[tuple[int, int]] = []  # (size, epoch) of every global batch
        saved: dict[str, Any] | None = None
        schedule_value: Any = segments[0][0]
        for index, (_, world, stop) in enumerate(segments):
            samples = 0 if saved is None else saved["samples_trained"]
            if index == len(segments) - 1 and future:  # a changed future on the last resume
                kept = [p for p in schedule_value if p[0] <= samples]
                start = max(samples, kept[-1][0])
                for offset, k in future:
                    start += offset
                    kept.append([start, 6 * k])
                schedule_value = kept
            schedule = BatchSchedule(schedule_value)
            clock = Clock.restore(schedule, 1, saved, samples)
            if saved is not None:
                check_past(
                    "ckpt", schedule, 1, [tuple(s) for s in saved["batch_segments"]], samples
                )
            clock.restore_epoch(records, saved)
            built, iterators = 0, []
            while clock.batches < stop:
                per_slot = clock.size // world
                assert clock.size == schedule.size_at(clock.samples)
                if per_slot != built:  # the trainer's rebuild at a switch
                    iterators = [
                        iter(data.build(clock.samples, world, r, per_slot)) for r in range(world)
                    ]
                    built = per_slot
                shares = [next(it).tolist() for it in iterators]
                stream += [shares[r][j] for j in range(per_slot) for r in range(world)]
                trained.append((clock.size, clock.epoch))
                clock.advance()
            saved = {
                "batches_trained": clock.batches,
                "samples_trained": clock.samples,
                "global_batch_size": clock.size,
                **clock.metadata(),
            }
        assert stream == sample_stream(records, len(stream))
        assert passes_are_permutations(stream, records)
        assert epochs_are_minimal(trained, records)

    law()


# The trainer itself, one rank.


def recorded(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (folder / "records-rank0.jsonl").read_text().splitlines()]


@settings(max_examples=3, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([4, 8, 12]), min_size=2, max_size=3),
    gaps=st.lists(st.integers(1, 30), min_size=2, max_size=2),
    pauses=st.lists(st.integers(1, 7), min_size=1, max_size=2, unique=True),
)
def test_a_trainer_paused_anywhere_under_a_schedule_trains_the_sample_stream(
    sizes: list[int], gaps: list[int], pauses: list[int]
) -> None:
    import tempfile

    schedule = [[0, sizes[0]]] + [[sum(gaps[: i + 1]), size] for i, size in enumerate(sizes[1:])]
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        (work / "records").mkdir()
        hparams = {"global_batch_size": schedule, "record_dir": str(work / "records")}
        for n, stop in enumerate([*sorted(pauses), 8]):
            run(str(work / "ckpt"), stop, resume=n > 0, **hparams)
        lines = recorded(work / "records")
        assert [line["batch"] for line in lines] == list(range(8))
        seen = [i for line in lines for i in line["indices"]]
        assert seen == sample_stream(40, len(seen))
        assert passes_are_permutations(seen, 40)
        starts = [0]
        for line in lines[:-1]:
            starts.append(starts[-1] + len(line["indices"]))
        assert [len(line["indices"]) for line in lines] == [
            BatchSchedule(schedule).size_at(s) for s in starts
        ]


def test_a_resume_under_the_same_schedule_ends_with_bit_identical_weights(
    tmp_path: Path,
) -> None:
    schedule = [[0, 8], [20, 12], [70, 4]]
    straight = run(str(tmp_path / "straight"), 12, global_batch_size=schedule)
    run(str(tmp_path / "paused"), 5, global_batch_size=schedule)  # samples 0-47
    resumed = run(str(tmp_path / "paused"), 12, resume=True, global_batch_size=schedule)
    assert identical(weights(straight), weights(resumed))
    switches = [r for r in metrics(str(tmp_path / "straight")) if r["type"] == "batch_size"]
    assert [(r["batches_trained"], r["metrics"]["global_batch_size"]) for r in switches] == [
        (3, 12),
        (7, 4),
    ]
    saved = json.loads((tmp_path / "paused" / "batch-000012" / "metadata.json").read_text())
    assert saved["batch_segments"] == [[0, 0, 8], [3, 24, 12], [7, 72, 4]]
    assert saved["batch_size_schedule"] == schedule
    assert (saved["samples_trained"], saved["global_batch_size"]) == (92, 4)
    assert resumed.context.get_global_batch_size() == 4


def test_a_changed_past_is_refused_and_a_changed_future_is_accepted(tmp_path: Path) -> None:
    folder = str(tmp_path)
    run(folder, 5, global_batch_size=[[0, 8], [20, 12]])  # 3 x 8 then 2 x 12: 48 samples
    with pytest.raises(
        ReproducibilityError,
        match=r"replayed to the 48 samples trained gives \[2, 16, 12\] as \(batch, sample, "
        r"size\) segment 1 but the checkpoint trained \[3, 24, 12\]; a schedule may change "
        r"only after the samples trained",
    ):
        run(folder, 6, resume=True, global_batch_size=[[0, 8], [10, 12]])
    later = run(folder, 8, resume=True, global_batch_size=[[0, 8], [20, 12], [48, 4]])
    assert later.context.get_global_batch_size() == 4
    plain = run(folder, 9, resume=True, global_batch_size=8)  # an int: the size from now on
    assert plain.context.get_global_batch_size() == 8


def test_a_callable_schedule_is_followed_and_saved_as_its_realized_list(tmp_path: Path) -> None:
    def ramp(samples: int) -> int:
        return 4 if samples < 16 else 8

    records = tmp_path / "records"
    records.mkdir()
    trial = run(str(tmp_path), 6, global_batch_size=ramp, record_dir=str(records))
    assert [len(line["indices"]) for line in recorded(records)] == [4, 4, 4, 4, 8, 8]
    saved = json.loads((tmp_path / "batch-000006" / "metadata.json").read_text())
    assert saved["hparams"]["global_batch_size"] == [[0, 4], [16, 8]]
    assert saved["batch_size_schedule"] == "callable " + ramp.__qualname__
    assert trial.context.get_per_slot_batch_size() == 8


def test_epochs_periods_and_the_epoch_scheduler_count_samples_across_a_switch(
    tmp_path: Path,
) -> None:
    """40 records: 5 batches of 8 (epoch 0), then 12s: 12+12+12+12 (epoch 1 at 88)."""
    epochs: list[tuple[int, int, bool, bool]] = []

    class Epochs(DemoTrial):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            context = self.context
            assert context.get_global_batch_size() == len(batch[2])
            epochs.append((batch_idx, epoch_idx, context.is_epoch_start(), context.is_epoch_end()))
            return super().train_batch(batch, epoch_idx, batch_idx)

    hparams = {"global_batch_size": [[0, 8], [36, 12]], "lr": 0.1, "records": 40}
    with init(hparams={**hparams, "num_workers": 0}, seed=SEED) as context:
        trial = Epochs(context)
        Trainer(trial, context).fit(
            Epoch(3), validation_period=Epoch(1), checkpoint_dir=str(tmp_path)
        )
    # Epoch 0: batches 0-4 (8 each, samples 0-40); the switch at 36 lands at sample 40.
    # Epoch 1: 12 x 4 = 48 samples (40-88); epoch 2: 12 x 4 (88-136).
    assert [e[1] for e in epochs] == [0] * 5 + [1] * 4 + [2] * 4
    assert [b for b, _, start, _ in epochs if start] == [0, 5, 9]
    assert [b for b, _, _, end in epochs if end] == [4, 8, 12]
    validated = [r["batches_trained"] for r in metrics(str(tmp_path)) if r["type"] == "validation"]
    assert validated == [5, 9, 13]
    assert trial.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.7**3)
    saved = json.loads((tmp_path / "batch-000013" / "metadata.json").read_text())
    assert (saved["epoch_index"], saved["epoch_start_sample"]) == (3, 136)


def test_a_resume_mid_epoch_with_another_size_continues_that_epoch(tmp_path: Path) -> None:
    folder = str(tmp_path)
    run(folder, 3)  # 3 x 8 = 24 of epoch 0's 40 samples
    epochs: list[int] = []

    class Epochs(DemoTrial):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            epochs.append(epoch_idx)
            return super().train_batch(batch, epoch_idx, batch_idx)

    run(folder, 8, resume=True, global_batch_size=12, trial_class=Epochs)
    # Samples 24-36 and 36-48 finish epoch 0 (it reaches 40); epoch 1 starts at 48.
    assert epochs == [0, 0, 1, 1, 1]


def test_a_schedule_needs_a_loader_the_trainer_can_rebuild(tmp_path: Path) -> None:
    class Plain(DemoTrial):
        def __init__(self, context: TrialContext) -> None:
            super().__init__(context)
            context.experimental.disable_dataset_reproducibility_checks()

        def build_training_data_loader(self) -> Any:
            data = torch.utils.data.TensorDataset(torch.zeros(40, 8), torch.zeros(40).long())
            return torch.utils.data.DataLoader(data, batch_size=8)

    hparams = {"global_batch_size": [[0, 8], [16, 4]], "lr": 0.1}
    with (
        init(hparams=hparams) as context,
        pytest.raises(ValueError, match=r"should be one size when the trainer cannot rebuild"),
    ):
        Trainer(Plain(context), context).fit(Batch(4), checkpoint_dir=str(tmp_path))
