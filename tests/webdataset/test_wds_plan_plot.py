"""``python -m detsamplers plan --plot``: a PNG of bytes and cost per node against the world size.

The tests that draw are marked ``subprocess``: matplotlib's first import may start one (its
font cache). They skip only when matplotlib is absent (the ``plot`` extra).
"""

from __future__ import annotations

import os
import re
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from detsamplers.__main__ import main
from detsamplers.loader import Network, SyntheticShards, plan_run
from detsamplers.loader._wds._plan_plot import node_counts, save_plot, sweep

ARGS = [
    "plan", "--shards", "64", "--shard-bytes", "1048576", "--samples-per-shard", "100",
    "--nodes", "8", "--ranks-per-node", "2", "--batch-size", "4", "--parts", "64",
    "--epochs", "2", "--bandwidth", "1e9", "--price-per-gb", "0.09",
]  # fmt: skip


def test_the_plot_plans_powers_of_two_up_to_the_nodes_whose_world_divides_the_parts() -> None:
    assert node_counts(8, 2, 64) == [1, 2, 4, 8]
    assert node_counts(6, 1, 0) == [1, 2, 4, 6]
    assert node_counts(6, 1, 12) == [1, 2, 4, 6]
    assert node_counts(6, 2, 16) == [1, 2, 4]


@pytest.mark.subprocess
def test_plan_plot_writes_a_png_of_bytes_and_cost_per_node_for_each_world_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "plan.png"
    assert main([*ARGS, "--plot", str(out)]) == 0
    assert "egress per epoch" in capsys.readouterr().out  # the table is still printed
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (700, 450)  # figsize 7 x 4.5 inches at 100 dpi


@pytest.mark.subprocess
def test_the_plots_lines_are_the_plans_bytes_and_cost_per_node(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    shards = SyntheticShards(64, 1 << 20, 100)
    network = Network(bandwidth=1e9, price_per_gb=0.09)

    def plan(nodes: int) -> Any:
        return plan_run(
            synthetic=shards, nodes=nodes, ranks_per_node=2, batch_size=4, parts=64, epochs=2,
            network=network,
        )  # fmt: skip

    plans = sweep(plan, 8, 2, 64)
    assert [p.world_size for p in plans] == [2, 4, 8, 16]
    captured: list[Any] = []
    close = plt.close
    plt.close = captured.append  # keep the figure to read its lines
    try:
        save_plot(plans, tmp_path / "p.png")
    finally:
        plt.close = close
    (figure,) = captured
    left, right = figure.axes
    mean, largest = left.get_lines()
    (cost,) = right.get_lines()
    assert list(mean.get_xdata()) == [2, 4, 8, 16]
    for p, m, big, c in zip(
        plans, mean.get_ydata(), largest.get_ydata(), cost.get_ydata(), strict=True
    ):
        per_node = [sum(n.shard_bytes) + n.index_bytes for n in p.nodes]
        assert m == pytest.approx(sum(per_node) / len(per_node) / 1e9)
        assert big == pytest.approx(max(per_node) / 1e9)
        assert c == pytest.approx(p.cost() / len(p.nodes))
    assert largest.get_ydata()[0] > largest.get_ydata()[-1]  # more nodes, less each
    close(figure)


def test_plot_without_matplotlib_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it now fails
    with pytest.raises(SystemExit) as exit_info:
        main([*ARGS, "--plot", str(tmp_path / "p.png")])
    assert exit_info.value.code == 2
    assert "pip install -c constraints.txt -e '.[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()


def _hostile(kind: str, tmp_path: Path) -> tuple[Path, str]:
    """A ``--plot`` path that cannot take a PNG, and what the error says of it."""
    if kind == "directory":
        return tmp_path, "is a directory"
    if kind == "fifo":  # writing would block until a reader came: it must not be opened
        fifo = tmp_path / "plot.png"
        os.mkfifo(fifo)
        return fifo, "is not one \\(a FIFO"
    if kind == "no-folder":
        return tmp_path / "missing" / "plot.png", "the folder of .* is not one"
    if os.geteuid() == 0:  # root writes through any mode bits
        pytest.skip("running as root: a folder's mode bits do not stop root's writes")
    folder = tmp_path / "locked"
    folder.mkdir(mode=0o500)
    return folder / "plot.png", "cannot be \\(permission denied\\)"


@pytest.mark.parametrize("kind", ["directory", "fifo", "no-folder", "unwritable"])
def test_a_plot_path_that_cannot_take_a_png_is_refused_naming_it_before_any_plan(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, says = _hostile(kind, tmp_path)
    planned: list[int] = []
    monkeypatch.setattr("detsamplers.loader.plan_run", lambda **kw: planned.append(1))
    with pytest.raises(SystemExit) as exit_:
        main([*ARGS, "--plot", str(path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert str(path) in err and "--plot should" in err
    assert re.search(says, err), err
    assert planned == []  # refused before planning, and the FIFO never opened (no hang)
    with pytest.raises(ValueError, match=f"--plot should .*{re.escape(repr(str(path)))}"):
        save_plot([plan_run(synthetic=SyntheticShards(4, 4096, 2), nodes=1, batch_size=1)], path)
