"""The house rules that keep the package readable: no import circles, no file over 600 lines.

Every module of ``detsamplers/`` is parsed (never imported) and each of its imports is
resolved to the modules of the package it names. The walk counts *every* import statement,
wherever it stands: at module level, inside a function or method (a lazy import), and under
``if TYPE_CHECKING:``. A lazy import is still a dependency: it is how the core's circle
hid for a while (``Stage.load_state_dict`` imported the mixture and growth modules inside
the method), and a type-only import still means one file must be read to understand the
other. The only import not counted is the one Python makes implicitly, of a module's parent
packages: ``from ._mix._law import X`` runs ``detsamplers/_mix/__init__.py`` first, but a
package's ``__init__`` re-exporting its own files is not a circle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "detsamplers"
#: The most lines a library file may have (split longer ones along the law they implement).
MAX_LINES = 600


def module_name(path: Path) -> str:
    """``detsamplers/_mix/_law.py`` -> ``detsamplers._mix._law`` (a package: its folder's name)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` (at ``path``) imports, anywhere in its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            # ``from origin import n``: the submodule origin.n, else a name origin defines.
            targets = [
                f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in known else origin
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:  # ``import a.b.c``: the deepest module
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def import_graph() -> dict[str, set[str]]:
    """Each module's imports of the package's modules (parents' implicit imports left out)."""
    found = modules()
    known = set(found)
    return {name: imported(name, path, known) for name, path in found.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(out)


def oversized(limit: int = MAX_LINES) -> dict[str, int]:
    """Library files (Python and C sources) over ``limit`` lines, by path."""
    out = {}
    for path in sorted([*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.c")]):
        lines = len(path.read_text().splitlines())
        if lines > limit:
            out[str(path.relative_to(PACKAGE.parent))] = lines
    return out


def test_the_import_walk_sees_module_level_lazy_and_type_only_imports(tmp_path: Path) -> None:
    folder = tmp_path / "detsamplers"
    (folder / "sub").mkdir(parents=True)
    (folder / "__init__.py").write_text("from ._a import A\n")
    (folder / "_a.py").write_text("def f():\n    from ._b import B\n")
    (folder / "_b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import detsamplers.sub._c\n"
    )
    (folder / "sub" / "__init__.py").write_text("")
    (folder / "sub" / "_c.py").write_text("from .. import _a\nfrom .._b import x\n")
    known = {
        "detsamplers",
        "detsamplers._a",
        "detsamplers._b",
        "detsamplers.sub",
        "detsamplers.sub._c",
    }
    root = tmp_path.joinpath
    assert imported("detsamplers", root("detsamplers/__init__.py"), known) == {"detsamplers._a"}
    assert imported("detsamplers._a", root("detsamplers/_a.py"), known) == {"detsamplers._b"}
    assert imported("detsamplers._b", root("detsamplers/_b.py"), known) == {"detsamplers.sub._c"}
    c = imported("detsamplers.sub._c", root("detsamplers/sub/_c.py"), known)
    assert c == {"detsamplers._a", "detsamplers._b"}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_circle() -> None:
    found = circles(import_graph())
    assert not found, "import circles in detsamplers/ (break each: see docs/architecture.md): " + (
        "; ".join(" <-> ".join(circle) for circle in found)
    )


def test_no_library_file_is_over_600_lines() -> None:
    found = oversized()
    assert not found, (
        f"library files over {MAX_LINES} lines (split each along the law it implements, every "
        f"file opening with its NOTE: see docs/architecture.md): {found}"
    )


#: The loader internals that remote token files reuse (NOTE [ remote token files ]): the
#: webdataset source's remote layer, its node cache and the default cache limit, nothing above.
TOKENS_REMOTE_REUSES = (
    "detsamplers.loader._wds.remote.",
    "detsamplers.loader._wds.read._node_cache",
    "detsamplers.loader._wds.shard._shard_info",
    "detsamplers.loader._wds._source_parts",
)


def test_the_tokens_package_sits_beside_the_loader_and_imports_only_the_core() -> None:
    graph = import_graph()
    members = [name for name in graph if name.startswith("detsamplers.tokens")]
    assert "detsamplers.tokens._corpus" in members
    for name in members:
        above = sorted(
            target
            for target in graph[name]
            if target.startswith(("detsamplers.loader", "detsamplers.trial", "detsamplers.testing"))
            and not (
                name == "detsamplers.tokens._remote" and target.startswith(TOKENS_REMOTE_REUSES)
            )
        )
        assert not above, f"{name} imports {above}: tokens is a floor below the loader's users"
    assert graph["detsamplers.tokens._remote"] & {
        m for m in graph if m.startswith(TOKENS_REMOTE_REUSES)
    }, "remote token files should reuse the webdataset source's remote layer, not copy it"
    loader = [name for name in graph if name.startswith("detsamplers.loader")]
    below = sorted(n for n in loader if any(t.startswith("detsamplers.tokens") for t in graph[n]))
    assert not below, f"{below} import detsamplers.tokens: the loader must not depend on it"


# --- layers of loader/_wds (written by wds_split.py; re-run it to update) ---

#: The sub-packages of ``loader/_wds`` by layer, top first (``""``: the front door, ``_wds``
#: itself). A module imports only from its own layer or those below; two packages of one layer
#: import nothing of each other. ``_wds/__init__.py`` re-exports from every layer.
WDS_LAYERS: list[list[str]] = [["mix"], [""], ["read"], ["order", "index"], ["remote"], ["shard"]]


def wds_package(module: str, root: str) -> str | None:
    """The sub-package of ``root`` that ``module`` is in (``""``: a module of ``root`` itself)."""
    if not module.startswith(root + "."):
        return None
    first = module[len(root) + 1 :].split(".")[0]
    return "" if first.startswith("_") else first


def upward_imports(graph: dict[str, set[str]], root: str, layers: list[list[str]]) -> list[str]:
    """Each import in ``graph`` of a module under ``root`` that goes up or across its layers."""
    rank = {package: n for n, group in enumerate(layers) for package in group}

    out = []
    for module, targets in sorted(graph.items()):
        source = wds_package(module, root)
        if source is None or module == root:
            continue
        for target in sorted(targets):
            to = wds_package(target, root)
            if to is None or to == source:
                continue
            if source not in rank or to not in rank:
                out.append(f"{module} -> {target} (a package of no layer)")
            elif rank[to] <= rank[source]:
                out.append(f"{module} -> {target}")
    return out


def test_the_layer_check_finds_an_import_up_or_across_the_layers() -> None:
    layers = [["top"], ["a", "b"], ["low"]]
    graph = {
        "r.top._x": {"r.a._y", "r.low._z", "other"},
        "r.a._y": {"r.a._w", "r.low._z"},
        "r.low._z": {"r.top._x"},
        "r.a._w": {"r.b._v"},
        "r.new._u": set(),
        "r._door": {"r.new._u"},
    }
    found = upward_imports(graph, "r", [*layers, [""]])
    assert found == [
        "r._door -> r.new._u (a package of no layer)",
        "r.a._w -> r.b._v",
        "r.low._z -> r.top._x",
    ]


def test_the_webdataset_subpackages_import_down_the_layers_only() -> None:
    root = "detsamplers.loader._wds"
    graph = import_graph()
    packages = {wds_package(name, root) for name in graph if name.startswith(root + ".")}
    assert packages == {p for group in WDS_LAYERS for p in group}, packages
    found = upward_imports(graph, root, WDS_LAYERS)
    assert not found, "imports up or across the layers of loader/_wds: " + "; ".join(found)


# --- the maps of docs/architecture.md ---

ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def map_section(title: str) -> str:
    """The text of the ``## {title}`` section of docs/architecture.md."""
    text = ARCHITECTURE.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def table_rows(section: str) -> list[list[str]]:
    """The cells of each row of the tables in ``section`` (header and rule rows left out)."""
    rows = [line.strip("|").split(" | ") for line in section.splitlines() if line.startswith("| ")]
    return [
        [cell.strip() for cell in row] for row in rows if row[0] not in ("module", "tier", "layer")
    ]


def files_named(cell: str) -> set[str]:
    """The module files a map's cell names in backticks (``_x.py``, ``read/_y.py``)."""
    return set(re.findall(r"`([\w/]+\.py)`", cell))


def package_files(folder: str) -> set[str]:
    """The modules of ``detsamplers/{folder}`` (sub-packages' too), as paths inside it."""
    root = PACKAGE / folder
    return {str(p.relative_to(root)) for p in root.rglob("*.py") if p.name != "__init__.py"}


def test_the_loader_map_names_every_module_of_the_loader() -> None:
    named = set().union(
        *(files_named(row[0]) for row in table_rows(map_section("Map of `loader/`")))
    )
    assert named == {f for f in package_files("loader") if "/" not in f}


def test_the_webdataset_map_names_every_module_and_the_layers_in_their_order() -> None:
    section = map_section("Map of `loader/_wds/`")
    rows = table_rows(section)
    # A layer's packages in backticks (``read/``); the front door is ``_wds/`` itself.
    layers = [
        sorted("" if name == "_wds" else name for name in re.findall(r"`(\w+)/`", row[1]))
        for row in rows
        if row[0].isdigit()
    ]
    assert layers == [sorted(layer) for layer in WDS_LAYERS]
    named = set().union(*(files_named(row[0]) for row in rows if not row[0].isdigit()))
    assert named == package_files("loader/_wds")


def trial_tiers() -> list[set[str]]:
    """The modules of each tier of the map of ``trial/``, top first."""
    return [files_named(row[1]) for row in table_rows(map_section("Map of `trial/`"))]


def test_the_trial_map_names_every_module_once_and_its_imports_go_down_the_tiers() -> None:
    tiers = trial_tiers()
    named = [name for tier in tiers for name in tier]
    assert sorted(named) == sorted(package_files("trial"))
    rank = {f"detsamplers.trial.{name[:-3]}": n for n, tier in enumerate(tiers) for name in tier}
    graph = import_graph()
    upward = [
        f"{module} -> {target}"
        for module, n in sorted(rank.items())
        for target in sorted(graph[module])
        if target in rank and rank[target] < n
    ]
    assert not upward, "trial/ imports up its tiers (docs/architecture.md): " + "; ".join(upward)
    below = [
        name for name in graph if name.startswith(("detsamplers.loader", "detsamplers.tokens"))
    ]
    assert not [n for n in below if any(t.startswith("detsamplers.trial") for t in graph[n])]
