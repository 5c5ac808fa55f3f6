"""``TokenSequences(outputs=...)``: only the arrays asked for, equal to the full ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokens_helpers import corpora, write_eod

from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenSequences, collate_tokens
from detsamplers.tokens._features import KEYS

modes = st.sampled_from(["chunk", "concat", "pack"])
subsets = st.lists(st.sampled_from(KEYS[1:]), unique=True).map(lambda rest: ["input_ids", *rest])


@given(files=corpora, seq_len=st.integers(1, 12), mode=modes, seed=st.integers(0, 99),
       outputs=subsets, data=st.data())  # fmt: skip
def test_sequences_with_fewer_outputs_hold_exactly_those_arrays_of_the_full_sequences(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    mode: str,
    seed: int,
    outputs: list[str],
    data: st.DataObject,
) -> None:
    corpus = write_eod(tmp_path_factory.mktemp("c"), files, seed)
    if corpus.num_tokens < seq_len + 1:
        return
    full = TokenSequences(corpus, seq_len, mode=mode, seed=seed)
    some = TokenSequences(corpus, seq_len, mode=mode, seed=seed, outputs=outputs[::-1])
    assert some.outputs == tuple(k for k in KEYS if k in outputs)
    pairs = data.draw(
        st.lists(st.tuples(st.integers(0, 2), st.integers(0, len(full) - 1)), max_size=5)
    )
    for got, one in zip(some.getitems_in_epochs(pairs), full.getitems_in_epochs(pairs),
                        strict=True):  # fmt: skip
        assert list(got) == list(some.outputs)
        for key in got:
            assert got[key].dtype == one[key].dtype and got[key].tolist() == one[key].tolist()
    if pairs:
        epoch, index = pairs[0]
        assert list(some.at(index, epoch)) == list(some.outputs)


def test_a_loader_batch_of_inputs_and_labels_equals_the_full_batchs(tmp_path: Path) -> None:
    corpus = write_eod(tmp_path, [[3, 4, 5, 6, 7] * 9, [8, 9] * 20])
    batches = []
    for outputs in (KEYS, ("input_ids", "labels")):
        sequences = TokenSequences(corpus, 6, mode="concat", seed=2, outputs=outputs)
        loader = DataLoader(sequences, batch_size=3, shuffle=True, seed=2,
                            collate_fn=collate_tokens)  # fmt: skip
        batches.append(next(iter(loader.get_data_loader(repeat=True))))
    full, some = batches
    assert sorted(some) == ["input_ids", "labels"]
    assert all(np.array_equal(some[k].numpy(), full[k].numpy()) for k in some)


@pytest.mark.parametrize(
    ("outputs", "error", "match"),
    [
        ("input_ids", TypeError, r"tuple of array names .* got outputs=.input_ids. of type str"),
        (("input_ids", "label"), ValueError, r"unknown .label. in outputs=.*; fix the spelling"),
        (("input_ids", "labels", "labels"), ValueError, r"should name each array once"),
        (("labels",), ValueError, r"should include 'input_ids', but got outputs=\('labels',\)"),
        ((), ValueError, r"should include 'input_ids', but got outputs=\(\)"),
    ],
)  # fmt: skip
def test_bad_outputs_are_refused_naming_the_parameter_and_the_value(
    tmp_path,
    outputs: object,
    error: type[Exception],
    match: str,  # type: ignore[no-untyped-def]
) -> None:
    corpus = write_eod(tmp_path, [[3, 4, 5, 6, 7] * 3])
    with pytest.raises(error, match=match):
        TokenSequences(corpus, 4, outputs=outputs)  # type: ignore[arg-type]


def test_packed_sequences_compute_only_the_arrays_outputs_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import detsamplers.tokens._sequences as sequences_module

    asked: list[tuple[str, ...]] = []
    real = sequences_module.window_rows  # NOTE [ packed batch rows ]

    def spy(*args: object) -> list[dict[str, np.ndarray]]:
        asked.append(args[4])  # type: ignore[arg-type]
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(sequences_module, "window_rows", spy)
    corpus = write_eod(tmp_path, [[5, 5, 3]])  # document lengths: one a bin, padded
    packed = TokenSequences(corpus, 6, mode="pack", outputs=("input_ids", "labels"))
    rows = packed.getitems_in_epochs([(0, k) for k in range(len(packed))])
    assert asked == [("input_ids", "labels")]
    assert all(list(row) == ["input_ids", "labels"] for row in rows)
    padded = [row for row in rows if (row["labels"] == -100).sum() > 1]
    assert padded  # the padding's labels are ignored without document_ids to find them
