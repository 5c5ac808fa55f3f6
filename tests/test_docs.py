"""Every Python example in docs/ runs as written (blocks after a skip-test marker excepted).

The blocks of one page run in order in one namespace, as a reader would run them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"(<!-- skip-test[^>]*-->\s*\n)?```python\n(.*?)```", re.DOTALL)
PAGES = sorted(path for path in DOCS.rglob("*.md") if "```python" in path.read_text())


def test_the_docs_have_runnable_examples() -> None:
    assert len(PAGES) >= 4


@pytest.mark.parametrize("page", PAGES, ids=lambda path: path.name)
def test_the_examples_on_each_docs_page_run(page: Path) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    ran = 0
    for match in BLOCK.finditer(page.read_text()):
        skipped, code = match.groups()
        if skipped:
            continue
        exec(compile(code, str(page), "exec"), namespace)
        ran += 1
    assert ran, f"{page.name} has only skipped examples"
