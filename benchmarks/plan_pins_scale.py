"""The plan's CPU under a reached ``cache_limit`` at scale: 1e5 shards, 1,024 ranks.

Run: ``python benchmarks/plan_pins_scale.py [LIMIT_SHARDS [NODES [EPOCHS]]]``. Plans a
synthetic set of 100,000 shards (1 MB, 10 samples each) read by 1,024 ranks on ``NODES``
nodes (default 128), batch 1, whole-shard parts (``parts=1024``), with a node cache of
``LIMIT_SHARDS`` shards (default 400, below a node's 100,000 / NODES shards: evictions, so
the dry replay of the pins runs), for ``EPOCHS`` epochs (default 1), and prints the
seconds of CPU and the evictions.
"""

from __future__ import annotations

import sys
import time

from detsamplers.loader import SyntheticShards, plan_run


def main() -> None:
    given = [int(a) for a in sys.argv[1:]]
    limit_shards, nodes, epochs = given + [400, 128, 1][len(given) :]
    started = time.process_time()
    plan = plan_run(
        synthetic=SyntheticShards(100_000, 1 << 20, 10), nodes=nodes, ranks_per_node=1024 // nodes,
        batch_size=1, parts=1024, cache_limit=limit_shards << 20, epochs=epochs,
    )  # fmt: skip
    cpu = time.process_time() - started
    evicted = sum(n.evictions for n in plan.nodes)
    print(f"cpu_s={cpu:.2f} evictions={evicted} method={plan.method!r}")


if __name__ == "__main__":
    main()
