"""The kit's comparison: values it cannot compare are refused by type, ``equal=`` compares them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import testing_pipelines as pipelines
import torch
from hypothesis import given
from hypothesis import strategies as st

from detsamplers.testing import check_resume, first_difference

Box = pipelines.Box


def same_label(a: Box, b: Box) -> bool:
    return a.label == b.label


def test_a_batch_of_objects_without_eq_is_refused_naming_the_type_not_blamed_on_collate() -> None:
    with pytest.raises(
        TypeError,
        match=r"a batch leaf at \[0\] is a Box, which the resume check cannot compare \(its "
        r"class defines no __eq__, so == is identity.*\); define Box.__eq__, return tensors, "
        r"numpy arrays or plain values from the loader, or pass check_resume\(\.\.\., "
        r"equal=\.\.\.\)",
    ):
        check_resume(pipelines.boxes, pauses=[2], batches=4)


def test_equal_compares_the_users_own_types_and_the_check_passes_with_it() -> None:
    report = check_resume(pipelines.boxes, pauses=[1, 3], batches=5, equal=same_label)
    assert report.batches == 3 + 4 + 2  # the pause pass, then the runs resumed after 1 and 3
    difference = first_difference([Box("a"), Box("b")], [Box("a"), Box("c")], equal=same_label)
    assert difference is not None
    assert difference.describe() == "at [1]: value (by equal): expected Box, got Box"


def test_equal_that_returns_no_bool_is_refused() -> None:
    with pytest.raises(
        TypeError, match=r"equal should return a bool, but for two Box at \[0\] it returned str"
    ):
        first_difference([Box("a")], [Box("a")], equal=lambda a, b: "yes")  # type: ignore[arg-type,return-value]


class Raises:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")


class Elementwise:
    def __eq__(self, other: object) -> Any:
        return [True, False]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (Raises(), r"== raised RuntimeError: Boolean value of Tensor"),
        (Elementwise(), r"== gave a list, not a bool"),
    ],
)
def test_a_leaf_whose_eq_raises_or_gives_no_bool_is_refused_naming_why(
    value: Any, why: str
) -> None:
    with pytest.raises(TypeError, match=rf"a batch leaf at \['v'\] is a \w+, .*\({why}"):
        first_difference({"v": value}, {"v": value})


def test_plain_values_still_compare_by_value() -> None:
    plain = [None, 1, 2.5, float("nan"), "a", b"b", True, 1j, torch.tensor(1).numpy()[()]]
    assert first_difference(plain, list(plain)) is None
    assert first_difference({"v": None}, {"v": 0}) is not None


@dataclass
class Sample:
    image: torch.Tensor
    label: int


def test_dataclasses_compare_field_by_field_even_with_tensor_fields() -> None:
    a = Sample(torch.zeros(2, 2), 1)
    assert first_difference(a, Sample(torch.zeros(2, 2), 1)) is None
    b = Sample(torch.zeros(2, 2), 1)
    b.image[1, 0] = 3
    difference = first_difference([a], [b])
    assert difference is not None
    assert difference.describe() == "at [0].image: tensor element [1, 0]: expected 0.0, got 3.0"


@given(labels=st.lists(st.text(max_size=3), min_size=1, max_size=8), data=st.data())
def test_equal_finds_any_single_changed_object_at_its_index(
    labels: list[str], data: st.DataObject
) -> None:
    expected = [Box(label) for label in labels]
    assert first_difference(expected, [Box(label) for label in labels], equal=same_label) is None
    k = data.draw(st.integers(0, len(labels) - 1))
    got = [Box(label + ("x" if j == k else "")) for j, label in enumerate(labels)]
    difference = first_difference(expected, got, equal=same_label)
    assert difference is not None
    assert difference.path == f"[{k}]"
