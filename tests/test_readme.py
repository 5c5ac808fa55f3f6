"""The README's Python examples run as written, each on its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.workers
def test_each_readme_example_runs_on_its_own_and_the_first_resumes_at_the_skipped_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "README.md has no python example"
    monkeypatch.chdir(tmp_path)
    namespaces: list[dict[str, object]] = []
    for index, code in enumerate(blocks):
        namespaces.append({"__name__": f"readme_{index}"})
        exec(compile(code, str(README), "exec"), namespaces[-1])
    state = namespaces[0]["state"]
    assert isinstance(state, dict) and state["position"] == 1251
