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


# A docs page a user can finish: the guides are split into pages of at most this many lines.
MOST_LINES = 500
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.DOTALL | re.MULTILINE)
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings, as mkdocs' ``toc`` extension spells them."""
    out: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
        slug = re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())
        anchor, n = slug, 0
        while anchor in out:
            n += 1
            anchor = f"{slug}_{n}"
        out.add(anchor)
    return out


def broken_links(pages: list[Path]) -> list[str]:
    """Each relative link of ``pages`` to a missing file, or to a heading its page lacks."""
    broken = []
    for page in pages:
        for target in LINK.findall(FENCE.sub("", page.read_text())):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.is_file():
                broken.append(f"{page.name}: {target} (no file {path})")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.name}: {target} (no heading #{anchor} in {linked.name})")
    return broken


def test_no_docs_page_is_longer_than_500_lines() -> None:
    long = {
        str(page.relative_to(DOCS)): lines
        for page in sorted(DOCS.rglob("*.md"))
        if (lines := page.read_text().count("\n")) > MOST_LINES
    }
    assert not long, f"split these pages into pages of at most {MOST_LINES} lines: {long}"


def test_every_relative_link_between_the_docs_pages_reaches_its_page_and_heading() -> None:
    assert broken_links([*sorted(DOCS.rglob("*.md")), DOCS.parent / "README.md"]) == []


def test_the_link_check_finds_a_missing_page_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(
        "# A page\n\n## The `parts` option\n\n```bash\n# not a heading\n```\n\n"
        "[ok](#the-parts-option) [ok](b.md#b_1) [gone](#not-a-heading) [gone](c.md)\n"
        "[ok](b.md#b) [web](https://example.com/#x)\n"
    )
    (tmp_path / "b.md").write_text("# B\n\n## B\n")
    assert broken_links([tmp_path / "a.md"]) == [
        "a.md: #not-a-heading (no heading #not-a-heading in a.md)",
        "a.md: c.md (no file c.md)",
    ]
    assert anchors(tmp_path / "b.md") == {"b", "b_1"}


def test_the_navigation_lists_every_page_once_in_the_order_a_user_meets_them() -> None:
    text = (DOCS.parent / "mkdocs.yml").read_text()
    nav = re.findall(
        r":\s*([\w/.-]+\.md)\s*$", text[text.index("\nnav:") : text.index("\nplugins:")], re.M
    )
    pages = sorted(str(page.relative_to(DOCS)) for page in DOCS.rglob("*.md"))
    assert sorted(nav) == pages
    path = [
        "index.md",
        "getting-started.md",
        "rules.md",
        "webdataset.md",
        "tokens.md",
        "preemption.md",
        "recipes/index.md",
        "testing.md",
        "webdataset-order.md",
        "benchmarks.md",
        "architecture.md",
    ]
    assert sorted(path, key=nav.index) == path
