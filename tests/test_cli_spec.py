"""The command lines' ``module:function`` specs (detsamplers/_cli_spec.py, NOTE [ factory spec ]).

A spec names a callable as ``module:function`` (or ``script.py:function`` where scripts are
allowed); the module is found from the current folder, as with ``python -m``. Everything
else is a ``ValueError`` naming the option and the spec.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from detsamplers._cli_spec import load_callable


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A current folder holding the user's module ``spec_user_data`` and a script."""
    (tmp_path / "spec_user_data.py").write_text(
        "def make(n=3):\n    return list(range(n))\nnot_callable = 5\n"
    )
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "helper_of_script.py").write_text("SCALE = 10\n")
    (tmp_path / "scripts" / "run.py").write_text(
        "from helper_of_script import SCALE\ndef build(n=2):\n    return [SCALE] * n\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != ""])
    yield tmp_path
    for name in ("spec_user_data", "helper_of_script"):
        sys.modules.pop(name, None)


def test_a_module_of_the_current_folder_is_found_as_python_m_finds_it(folder: Path) -> None:
    make = load_callable("spec_user_data:make", "--dataset", noun="factory")
    assert make() == [0, 1, 2]
    assert "" in sys.path


def test_a_script_path_loads_with_its_own_folder_importable_only_where_scripts_are_allowed(
    folder: Path,
) -> None:
    build = load_callable("scripts/run.py:build", "--against", noun="function", scripts=True)
    assert build(3) == [10, 10, 10]
    with pytest.raises(ValueError, match=r"^--dataset: cannot import 'scripts/run\.py' \("):
        load_callable("scripts/run.py:build", "--dataset", noun="factory")


@pytest.mark.parametrize(
    ("spec", "scripts", "message"),
    [
        ("spec_user_data", False, r"^--opt should be module:factory, but got 'spec_user_data'$"),
        (":make", False, r"^--opt should be module:factory, but got ':make'$"),
        ("spec_user_data:", False, r"^--opt should be module:factory, but got 'spec_user_data:'$"),
        (
            "",
            True,
            r"^--opt should be module:factory or path/to/script\.py:factory, but got ''$",
        ),
        ("no_such_module_xyz:make", False, r"^--opt: cannot import 'no_such_module_xyz' \("),
        ("spec_user_data:missing", False, r"^--opt: spec_user_data has no factory 'missing'$"),
        ("spec_user_data:not_callable", False, r"has no factory 'not_callable'$"),
        ("gone/run.py:build", True, r"^--opt names the script 'gone/run\.py', which does not"),
    ],
)
def test_a_spec_that_names_no_callable_is_refused_naming_the_option_and_the_spec(
    folder: Path, spec: str, scripts: bool, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        load_callable(spec, "--opt", noun="factory", scripts=scripts)


@given(
    module=st.text(alphabet=st.sampled_from("ab._ "), max_size=8).filter(
        lambda name: not name.startswith(".")
    ),
    sep=st.sampled_from([":", "", "::"]),
    attribute=st.text(alphabet=st.sampled_from("ab_:"), max_size=4),
)
def test_any_spec_gives_a_callable_or_a_value_error_naming_the_option(
    module: str, sep: str, attribute: str
) -> None:
    try:
        loaded = load_callable(module + sep + attribute, "--opt", noun="factory")
    except ValueError as error:
        assert str(error).startswith("--opt")
    else:
        assert callable(loaded)


def test_a_relative_module_name_is_refused_naming_the_option() -> None:
    with pytest.raises(
        ValueError, match=r"^--opt should name an absolute module, but got the relative '.data'"
    ):
        load_callable(".data:make", "--opt", noun="factory")
