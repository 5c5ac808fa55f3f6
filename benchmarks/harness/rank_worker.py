"""One rank of ``harness.ranks.on_ranks`` (started by torch.distributed.run).

Arguments: module, function, JSON keyword arguments, output folder. Joins the gloo group of
torchrun's environment, calls ``module.function(world=W, rank=r, **kwargs)`` and writes its
JSON result (or ``{"error": ...}``) to ``rank-<r>.json`` in the output folder.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path


def main() -> None:
    module, function, kwargs, out = sys.argv[1:5]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    try:
        call = getattr(importlib.import_module(module), function)
        result = call(world=world, rank=rank, **json.loads(kwargs))
    except Exception as exc:  # the peer refused: that is the answer, reported to the parent
        result = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    Path(out, f"rank-{rank}.json").write_text(json.dumps(result), encoding="utf-8")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
