"""Streaming from S3 side by side: ours (rank-local parts + node cache) against Mosaic and litdata.

Run ``python benchmarks/s3_peers_table.py`` (8,192 samples of 2-8 KB in 32 shards, batch
64) or ``--quick`` (512 samples in 8 shards, W = 1, our shuffled row only; ``make
bench-quick``, about a minute). The same samples
(random bytes under ``bin``, the label under ``cls``) are written three ways: webdataset
tar shards (``webdataset.TarWriter``, then indexed on S3 as docs/webdataset-remote.md tells a
user to, ``python -m detsamplers index URLS --endpoint-url ...``: each shard's index file
and the folder's set index, which embeds them), Mosaic's MDS (``MDSWriter``,
shards of the same sample count) and litdata's chunks (``litdata.optimize``, the same
count per chunk), and uploaded to moto's S3 server on 127.0.0.1 behind the tests' counting
proxy (``tests/webdataset/s3_server.py``, in this process). For W = 1 and 4 ranks, each
rank a process of its own (``torch.distributed`` over gloo on 127.0.0.1 when W > 1; one
node: the ranks share one cache folder), ``num_workers=0``, it measures:

- epoch 1 and the warm epochs' bytes of shards served (over the dataset's bytes in that
  format) and ``GetObject`` requests;
- samples/s of epoch 1 and of each warm epoch (2 to ``1 + --warm-epochs``, read from the
  cache: all ranks' samples over the slowest rank's time);
- the time from building a reader, with the state its loader saved mid-epoch 1 loaded,
  to its first batch (the slowest rank; each cache emptied first: the worst case). Each
  library's S3 client (s3fs and obstore, boto3) is imported before the timer starts, as ``import
  litdata`` imports boto3, and so is webdataset, which ours expands the URLs with: the
  figure is the reader's, not an import's;
- ours only: how often, and how long, reading waited on a download in epoch 1 after each
  rank's first batch (the cache's ``stats.waits`` and ``stats.waited``: the rank that
  waited longest, its wait against its epoch time, and the waits of all ranks; of the round
  whose epoch 1 was slowest).

Each cell is the median of ``--rounds`` rounds (3; the range in brackets), each round a
fresh set of processes with an empty cache for every row, the rows in the opposite order in
every other round; a warm epoch's cell is the median of every round's warm epochs. An epoch
2 over a warm cache lasts 50 to 90 ms: one pass of it in one process is not a measure.
Before the first round every object is read once through the proxy, so that no row is the
first to be served (a first GET is not measurably slower on its own, 17 against 11-18 ms for
2.3 MB: this only takes the question away), and the footer gives the same-round ratios of
ours (tar order) to litdata's obstore path.

Rows: ours with ``parts=720`` and the node cache (tar order, and the part block shuffle
``shuffle_block_shards=4``; and tar order over the same samples written by
``detsamplers.loader.ShardWriter(pack_small=2**31)``, one member a sample: fewer bytes, a
row of its own); Mosaic streaming 0.13 (``StreamingDataset(remote=...,
local=..., shuffle=True)``: py1e, ``predownload`` and ``cache_limit`` at their defaults),
run in ``.venv-mosaic`` (``make mosaic``; with ``boto3``) when it exists; litdata
(``StreamingDataset("s3://...", shuffle=True)``) through boto3, since its obstore client
refuses an ``http://`` endpoint and no option of litdata's reaches it (see ``_litdata``),
and again through obstore with ``allow_http`` patched into litdata's private client
options (what it would read real S3 with, over HTTPS). Every row collates with torch's
``default_collate`` (ours after webdataset's default decoding, ``decode=()``, so labels
are integers as in the peers' formats). ``--worlds 1 --rows litdata`` runs a subset. A
peer that is not installed gets a line saying why. moto and the proxy run in Python on the
same 2 cores as the ranks: the figures compare the libraries on one loopback server, not
S3's latency.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.machine import load_average

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TESTS = ROOT / "tests" / "webdataset"
MOSAIC_PYTHON = ROOT / ".venv-mosaic" / "bin" / "python"
BATCH = 64
BUCKET = "peers"
ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "ours, parts=720, tar order": ("ours", {"parts": 720}),
    "ours, parts=720, shuffle_block_shards=4": ("ours", {"parts": 720, "shuffle_block_shards": 4}),
    "ours, pack_small=2**31 shards, parts=720, tar order": ("ours", {"parts": 720, "packed": 1}),
    "Mosaic streaming (py1e)": ("mosaic", {}),
    "litdata": ("litdata", {}),
    "litdata, obstore (allow_http patched in)": ("litdata", {"obstore": True}),
}
OURS = "ours, parts=720, tar order"
LITDATA = "litdata, obstore (allow_http patched in)"
SUFFIX = {"ours": ".tar", "ours-packed": ".tar", "mosaic": ".mds", "litdata": ".bin"}


def samples(total: int) -> list[tuple[bytes, int]]:
    rng = random.Random(0)
    return [(rng.randbytes(rng.randint(2048, 8192)), label) for label in range(total)]


# -- writing the three copies ---------------------------------------------------------


def write_tar(folder: Path, data: list[tuple[bytes, int]], shards: int) -> None:
    import webdataset as wds

    folder.mkdir(parents=True)
    per = len(data) // shards
    for shard in range(shards):
        with wds.TarWriter(str(folder / f"d-{shard:03d}.tar")) as sink:
            for payload, label in data[shard * per : (shard + 1) * per]:
                sink.write({"__key__": f"k{label:06d}", "bin": payload, "cls": label})


def write_packed(folder: Path, data: list[tuple[bytes, int]], shards: int) -> None:
    """The tar shards again through ``ShardWriter(pack_small=2**31)``: one member a sample."""
    from detsamplers.loader import ShardWriter

    folder.mkdir(parents=True)
    per = len(data) // shards
    pattern = str(folder / "d-%03d.tar")
    with ShardWriter(pattern, maxcount=per, pack_small=2**31, verbose=0) as sink:
        for payload, label in data:
            sink.write({"__key__": f"k{label:06d}", "bin": payload, "cls": label})
    for index in folder.glob("*.index.npz"):  # indexed on S3 below, as the plain tars are
        index.unlink()


def write_mds(folder: Path, total: int, shards: int) -> None:
    """Run in .venv-mosaic (``--write-mds``): MDS shards of ``total / shards`` samples."""
    sys.path.insert(0, str(HERE))
    base = importlib.import_module("peers.mosaic_streaming").streaming_base()
    data = samples(total)
    per = total // shards
    limit = 1 + max(8 + len(p) + 8 for p, _ in data) * per  # about per samples a shard
    with base.MDSWriter(
        out=str(folder), columns={"bin": "bytes", "cls": "int"}, size_limit=limit
    ) as sink:
        for payload, label in data:
            sink.write({"bin": payload, "cls": label})


def _litdata_sample(item: tuple[bytes, int]) -> dict[str, Any]:
    return {"bin": item[0], "cls": item[1]}


def write_litdata(folder: Path, data: list[tuple[bytes, int]], shards: int) -> None:
    import litdata

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        litdata.optimize(
            fn=_litdata_sample,
            inputs=data,
            output_dir=str(folder),
            chunk_size=len(data) // shards,
            num_workers=1,
            verbose=False,
        )


# -- one rank ---------------------------------------------------------------------------


def _ours(spec: dict[str, Any]) -> tuple[Any, Any]:
    from torch.utils.data import default_collate

    from detsamplers.loader import WebDatasetSource

    importlib.import_module("s3fs")  # the S3 client, imported before any timer as litdata's
    with contextlib.suppress(ImportError):  # and obstore's, which reads S3 when installed
        importlib.import_module("obstore")
    importlib.import_module("webdataset")  # expands the URLs: a library, imported as the peers'

    def build(state: Any = None) -> Any:
        source = WebDatasetSource(
            spec["urls"],
            seed=0,
            batch_size=BATCH,
            world_size=spec["world"],
            rank=spec["rank"],
            repeat=False,
            decode=(),  # webdataset's default decoding: cls to int, as the peers' formats do
            collate_fn=default_collate,
            cache_dir=spec["cache"],
            storage_options=spec["storage_options"],
            index_dir=spec["index_dir"],
            **{k: v for k, v in spec["config"].items() if k != "packed"},
        )
        if state is not None:
            source.load_state_dict(state)
        return source

    return build, lambda batch: len(batch["cls"])


def _mosaic(spec: dict[str, Any]) -> tuple[Any, Any]:
    sys.path.insert(0, str(HERE))
    base = importlib.import_module("peers.mosaic_streaming").streaming_base()
    importlib.import_module("boto3")  # the S3 client, imported before any timer as litdata's

    def build(state: Any = None) -> Any:
        dataset = base.StreamingDataset(
            remote=spec["remote"],
            local=spec["cache"],
            shuffle=True,
            shuffle_seed=0,
            batch_size=BATCH,
        )
        loader = base.StreamingDataLoader(dataset, batch_size=BATCH, num_workers=0)
        if state is not None:
            loader.load_state_dict(state)
        return loader

    return build, lambda batch: len(batch["cls"])


def _litdata(spec: dict[str, Any]) -> tuple[Any, Any]:
    import litdata
    from litdata.streaming import downloader

    # litdata 0.2.76 builds its obstore S3Store from the boto3 client's endpoint, region and
    # addressing only, with fixed client options (``_OBSTORE_CLIENT_OPTIONS``, no
    # ``allow_http``), so no storage option reaches it, and obstore then ignores
    # ``AWS_ALLOW_HTTP``; nor does obstore trust a local HTTPS endpoint's certificate through
    # ``SSL_CERT_FILE`` (both tried). Against moto's http:// endpoint its obstore path fails
    # (BadScheme): the row "litdata" takes its boto3 path; the row "litdata, obstore" adds
    # allow_http to that private constant, which no user option can do.
    if spec["config"].get("obstore"):
        options = downloader._OBSTORE_CLIENT_OPTIONS
        downloader._OBSTORE_CLIENT_OPTIONS = {**options, "allow_http": "true"}
    else:
        downloader._OBSTORE_AVAILABLE = False

    def build(state: Any = None) -> Any:
        dataset = litdata.StreamingDataset(
            spec["remote"],
            cache_dir=spec["cache"],
            shuffle=True,
            seed=0,
            drop_last=spec["world"] > 1,
            storage_options=spec["litdata_options"],
        )
        loader = litdata.StreamingDataLoader(dataset, batch_size=BATCH, num_workers=0)
        if state is not None:
            loader.load_state_dict(state)
        return loader

    return build, lambda batch: len(batch["cls"])


def rank_main(spec: dict[str, Any]) -> None:
    """One rank: ``epochs`` (epoch 1, the state saved mid-way, the warm epochs) or ``resume``."""
    if spec["world"] > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=spec["rank"], world_size=spec["world"])
    build, count = {"ours": _ours, "mosaic": _mosaic, "litdata": _litdata}[spec["peer"]](spec)
    state_file = Path(spec["state_dir"]) / f"rank-{spec['rank']}.json"
    out: dict[str, Any] = {}
    if spec["phase"] == "epochs":
        loader = build()
        for epoch in range(1, 2 + spec["warm"]):
            seen, started = 0, time.perf_counter()
            stats = getattr(getattr(loader, "cache", None), "stats", None)
            waits, waited = (stats.waits, stats.waited) if stats is not None else (0, 0.0)
            for step, batch in enumerate(loader):
                seen += count(batch)
                if epoch == 1 and step == spec["save_at"]:
                    state_file.write_text(json.dumps(loader.state_dict()))
            out[f"seconds{epoch}"] = time.perf_counter() - started
            out[f"samples{epoch}"] = seen
            if stats is not None:  # ours: reading's waits on downloads after the first batch
                out[f"waits{epoch}"] = stats.waits - waits
                out[f"waited{epoch}"] = stats.waited - waited
            print(json.dumps({"epoch": epoch}), flush=True)
            input()  # the driver reads the server's log between the epochs
    else:
        state = json.loads(state_file.read_text())
        started = time.perf_counter()
        batches = iter(build(state))
        next(batches)
        out["resume"] = time.perf_counter() - started
    print(json.dumps(out), flush=True)
    os._exit(0)  # leave prefetch threads and peers' background downloads behind


# -- the driver -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_ranks(python: str, spec: dict[str, Any], world: int, server: Any) -> list[Any]:
    """Start ``world`` rank processes; for ``epochs``, the shard traffic of each epoch."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        S3_ENDPOINT_URL=server.endpoint,
        OMP_NUM_THREADS="1",
        PYTHONWARNINGS="ignore",
    )
    ranks = []
    for rank in range(world):
        rank_env = {**env, "RANK": str(rank), "WORLD_SIZE": str(world)}
        rank_env.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
        ranks.append(
            subprocess.Popen(
                [python, __file__, "--rank", json.dumps({**spec, "rank": rank, "world": world})],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=rank_env,
                cwd=tempfile.gettempdir(),
            )
        )
    traffic = []
    try:
        if spec["phase"] == "epochs":
            for _ in range(1 + spec["warm"]):
                server.reset()
                for process in ranks:
                    _read_json(process)
                traffic.append(shard_traffic(server, spec["prefix"]))
                for process in ranks:
                    assert process.stdin is not None
                    process.stdin.write("\n")
                    process.stdin.flush()
        results = [_read_json(process) for process in ranks]
        for process in ranks:
            process.wait(timeout=600)
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
    return [results, traffic]


def _read_json(process: subprocess.Popen[str]) -> dict[str, Any]:
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("{"):
            out: dict[str, Any] = json.loads(line)
            return out
    raise RuntimeError(f"a rank ended without a result (exit {process.wait(timeout=60)})")


def waited(results: list[dict[str, Any]]) -> str:
    """Ours: the longest epoch 1 wait on downloads after a rank's first batch, of its time."""
    if "waited1" not in results[0]:
        return "not measured"
    worst = max(results, key=lambda r: r["waited1"])
    share = f"{1000 * worst['waited1']:,.0f} of {1000 * worst['seconds1']:,.0f} ms"
    return f"{share} ({sum(r['waits1'] for r in results)} waits)"


def shard_traffic(server: Any, peer: str) -> tuple[int, int]:
    keys = [k for k in server.served.ranges if k.startswith(f"{peer}/")]
    shards = [k for k in keys if k.endswith(SUFFIX[peer])]
    sent = sum(server.served.bytes[k] for k in shards)
    return sent, sum(len(server.served.ranges[k]) for k in keys)


def upload(server: Any, folder: Path, prefix: str) -> int:
    """Upload a folder's files under ``prefix/``; the bytes of its shards."""
    client, data = server.client(), 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        key = f"{prefix}/{path.relative_to(folder)}"
        client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
        if key.endswith(SUFFIX[prefix]):
            data += path.stat().st_size
    return data


def warm_up(server: Any, prefixes: list[str]) -> None:
    """Read every object under ``prefixes`` once through the proxy, then forget the counts.

    Whatever the server does on the first reads of an object then falls on no row.
    """
    client = importlib.import_module("boto3").client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    for prefix in prefixes:
        listed = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/")
        for item in listed.get("Contents", []):
            client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
    server.reset()


def one_round(
    results: list[dict[str, Any]],
    traffic: list[tuple[int, int]],
    resumed: list[dict[str, Any]],
    size: int,
    warm: int,
) -> dict[str, Any]:
    """One round of a row: its rates (all ranks' samples over the slowest rank's time)."""

    def rate(epoch: int) -> float:
        seen = sum(r[f"samples{epoch}"] for r in results)
        return float(seen / max(r[f"seconds{epoch}"] for r in results))

    return {
        "epoch1": rate(1),
        "warm": [rate(epoch) for epoch in range(2, 2 + warm)],
        "bytes1": traffic[0][0] / size,
        "gets1": traffic[0][1],
        "bytes_warm": max(sent for sent, _ in traffic[1:]) / size,
        "resume": 1000 * max(r["resume"] for r in resumed),
        "waited": waited(results),
    }


def _spread(values: list[float], form: str) -> str:
    """The median of ``values``, and their range in brackets when there are several."""
    ordered = sorted(values)
    middle = format(statistics.median(ordered), form)
    if len(ordered) == 1:
        return middle
    return f"{middle} [{format(ordered[0], form)}-{format(ordered[-1], form)}]"


def row_cells(runs: list[dict[str, Any]]) -> list[str]:
    """A row's cells over its rounds: medians [ranges]; bytes and GETs as their range."""
    gets = sorted({run["gets1"] for run in runs})
    requests = str(gets[0]) if len(gets) == 1 else f"{gets[0]}-{gets[-1]}"
    slowest = min(runs, key=lambda run: float(run["epoch1"]))
    return [
        f"{max(run['bytes1'] for run in runs):.2f}x ({requests})",
        _spread([run["epoch1"] for run in runs], ",.0f"),
        f"{max(run['bytes_warm'] for run in runs):.2f}x",
        _spread([rate for run in runs for rate in run["warm"]], ",.0f"),
        _spread([run["resume"] for run in runs], ",.0f") + " ms",
        slowest["waited"],
    ]


def ratios(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> str:
    """Ours over litdata's samples/s, round by round (each round's warm epochs' median)."""
    first = [a["epoch1"] / b["epoch1"] for a, b in zip(ours, theirs, strict=True)]
    warm = [
        statistics.median(a["warm"]) / statistics.median(b["warm"])
        for a, b in zip(ours, theirs, strict=True)
    ]
    return f"epoch 1 {_spread(first, '.2f')}x, warm epochs {_spread(warm, '.2f')}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="512 samples in 8 shards, W = 1 (CI)")
    parser.add_argument("--worlds", default="1,4", help="world sizes, comma-separated")
    parser.add_argument(
        "--rows", help="only the rows whose name holds one of these texts, comma-separated"
    )
    parser.add_argument("--rounds", type=int, help="rounds of every row (3; --quick 1)")
    parser.add_argument(
        "--warm-epochs", type=int, help="epochs read from the warm cache (3; --quick 1)"
    )
    parser.add_argument("--rank", help=argparse.SUPPRESS)
    parser.add_argument("--write-mds", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        rank_main(json.loads(args.rank))
        return
    if args.write_mds:
        write_mds(Path(args.write_mds[0]), int(args.write_mds[1]), int(args.write_mds[2]))
        return
    total, shards = (512, 8) if args.quick else (8192, 32)
    args.rounds = (1 if args.quick else 3) if args.rounds is None else args.rounds
    warm = (1 if args.quick else 3) if args.warm_epochs is None else args.warm_epochs
    if args.rounds < 1 or warm < 1:
        parser.error(f"--rounds and --warm-epochs take 1 or more, not {args.rounds} and {warm}")
    worlds = (1,) if args.quick else tuple(int(w) for w in args.worlds.split(","))
    sys.path.insert(0, str(TESTS))
    server = importlib.import_module("s3_server").S3Server()
    folder = Path(tempfile.mkdtemp(prefix="s3-peers-"))
    try:
        server.create_bucket(BUCKET)
        data = samples(total)
        sizes: dict[str, int] = {}
        pythons: dict[str, str] = {"ours": sys.executable}
        write_tar(folder / "ours", data, shards)
        sizes["ours"] = upload(server, folder / "ours", "ours")
        write_packed(folder / "ours-packed", data, shards)
        sizes["ours-packed"] = upload(server, folder / "ours-packed", "ours-packed")
        urls = f"s3://{BUCKET}/ours/d-{{000..{shards - 1:03d}}}.tar"
        packed_urls = urls.replace("/ours/", "/ours-packed/")
        cli = importlib.import_module("detsamplers.__main__").main
        for each in (urls, packed_urls):
            with contextlib.redirect_stdout(io.StringIO()):
                argv = ["index", each, "--endpoint-url", server.endpoint, "--storage-option"]
                cli([*argv, "key=testing", "--storage-option", "secret=testing"])
        missing: dict[str, str] = {}
        mosaic = MOSAIC_PYTHON if MOSAIC_PYTHON.exists() else None
        if mosaic is None:
            missing["mosaic"] = "no .venv-mosaic: run make mosaic"
        else:
            code = "import boto3, importlib.util as u; assert u.find_spec('streaming')"
            check = subprocess.run([str(mosaic), "-c", code], check=False)
            if check.returncode:
                missing["mosaic"] = ".venv-mosaic lacks boto3 or streaming: run make mosaic"
        if "mosaic" not in missing:
            subprocess.run(
                [str(mosaic), __file__, "--write-mds", str(folder / "mosaic"), str(total),
                 str(shards)],
                check=True,
            )  # fmt: skip
            sizes["mosaic"] = upload(server, folder / "mosaic", "mosaic")
            pythons["mosaic"] = str(mosaic)
        try:
            write_litdata(folder / "litdata", data, shards)
            sizes["litdata"] = upload(server, folder / "litdata", "litdata")
            pythons["litdata"] = sys.executable
        except ImportError:
            missing["litdata"] = "not installed: pip install litdata (the compare extra)"
        options: dict[str, Any] = {"key": "testing", "secret": "testing"}
        options["client_kwargs"] = {"endpoint_url": server.endpoint, "region_name": "us-east-1"}
        litdata_options = {
            "endpoint_url": server.endpoint,
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "region_name": "us-east-1",
        }
        megabytes = ", ".join(f"{peer} {size / 1e6:.1f} MB" for peer, size in sizes.items())
        print(
            f"# {total} samples of 2-8 KB in {shards} shards ({megabytes}); batch {BATCH}, "
            f"num_workers=0; moto S3 on 127.0.0.1; load average {load_average()}"
        )
        jobs = []
        for name, (peer, config) in ROWS.items():
            if args.quick and name.endswith("parts=720, tar order"):
                continue  # CI: the shuffled row only
            if args.rows and not any(part in name for part in args.rows.split(",")):
                continue
            jobs += [(name, peer, config, world) for world in worlds]
        warm_up(server, sorted({"ours-packed" if c.get("packed") else p for _, p, c, _ in jobs}))
        rounds: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for round_ in range(args.rounds):
            for name, peer, config, world in jobs if round_ % 2 == 0 else jobs[::-1]:
                if peer in missing:
                    continue
                prefix = "ours-packed" if config.get("packed") else peer
                cache = folder / f"cache-{prefix}-{world}-{len(config)}"
                spec: dict[str, Any] = {
                    "peer": peer,
                    "prefix": prefix,
                    "config": config,
                    "urls": packed_urls if config.get("packed") else urls,
                    "remote": f"s3://{BUCKET}/{peer}",
                    "cache": str(cache),
                    "index_dir": str(folder / "index"),
                    "storage_options": options,
                    "litdata_options": litdata_options,
                    "state_dir": str(folder / "states"),
                    "save_at": total // (2 * BATCH * world),
                    "warm": warm,
                    "phase": "epochs",
                }
                for stale in (folder / "states", folder / "index"):
                    shutil.rmtree(stale, ignore_errors=True)
                (folder / "states").mkdir()
                results, traffic = run_ranks(pythons[peer], spec, world, server)
                shutil.rmtree(cache, ignore_errors=True)
                resumed, _ = run_ranks(pythons[peer], {**spec, "phase": "resume"}, world, server)
                shutil.rmtree(cache, ignore_errors=True)
                got = one_round(results, traffic, resumed, sizes[prefix], warm)
                rounds.setdefault((name, world), []).append(got)
                warm_rates = ", ".join(f"{r:,.0f}" for r in got["warm"])
                print(
                    f"# round {round_}, {name}, W = {world}: epoch 1 {got['epoch1']:,.0f}, warm "
                    f"epochs {warm_rates} samples/s, resume {got['resume']:,.0f} ms",
                    flush=True,
                )
        warm_title = "epoch 2" if warm == 1 else f"epochs 2-{1 + warm}"
        print(
            "| | W | epoch 1 bytes / data (GETs) | epoch 1 samples/s | warm epochs' bytes / data |"
            f" {warm_title} samples/s | first batch after resume | epoch 1 waits on downloads |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for name, peer, _, world in jobs:
            if peer in missing:
                print(f"| {name} | {world} | {missing[peer]} | | | | | |")
            else:
                print(f"| {name} | {world} | {' | '.join(row_cells(rounds[name, world]))} |")
        for world in worlds:
            ours, theirs = rounds.get((OURS, world)), rounds.get((LITDATA, world))
            if ours and theirs:
                print(f"# W = {world}, ours (tar order) / litdata obstore: {ratios(ours, theirs)}")
        for peer, why in missing.items():
            print(f"# {peer} skipped: {why}")
        print(f"# load average at the end {load_average()}")
    finally:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
