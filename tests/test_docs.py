"""Every Python example in docs/ runs as written, on its own (skip-test blocks excepted).

Each block runs alone, in a fresh namespace and an empty working folder, as a reader who
copies one block into a new file would run it: a block never relies on an earlier one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
# A comment before a block may skip it (``<!-- skip-test: why -->``) or put it in a slow tier
# (``<!-- tier: workers -->``: the block starts DataLoader workers; see tests/tiers.py).
BLOCK = re.compile(r"(<!-- (skip-test|tier: (\w+))[^>]*-->\s*\n)?```python\n(.*?)```", re.DOTALL)
PAGES = sorted(path for path in DOCS.rglob("*.md") if "```python" in path.read_text())


def blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """The runnable blocks of ``page``: (the line the block starts on, its code, its tier)."""
    text = page.read_text()
    out = []
    for match in BLOCK.finditer(text):
        _, comment, tier, code = match.groups()
        if comment != "skip-test":
            out.append((text.count("\n", 0, match.start(4)) + 1, code, tier))
    return out


BLOCKS = [
    pytest.param(
        page,
        line,
        code,
        id=f"{page.name}:{line}",
        marks=[getattr(pytest.mark, tier)] if tier else [],
    )
    for page in PAGES
    for line, code, tier in blocks(page)
]


def test_the_docs_have_runnable_examples() -> None:
    assert len(PAGES) >= 4
    for page in PAGES:
        assert blocks(page), f"{page.name} has only skipped examples"


@pytest.mark.parametrize("page,line,code", BLOCKS)
def test_each_example_in_the_docs_runs_on_its_own(
    page: Path, line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}_{line}"}
    # Blank lines before the block keep the traceback's line numbers those of the page.
    exec(compile("\n" * (line - 1) + code, str(page), "exec"), namespace)
