"""``python -m detsamplers inspect PATH``: what a checkpoint or a saved state holds.

NOTE [ inspect ]
PATH is a checkpoint folder (``batch-000120/``, NOTE [ checkpoint layout ]), a
checkpoint directory (its newest complete folder is inspected), or a saved state of any
object that saves one (a loader's, a sampler's, a ``WebDatasetSource``'s,
``WebDataLoader``'s or ``WebDatasetMix``'s) as ``.json``, or a ``.pth``/``.pt`` file (a
rank file's ``loader`` entry is used). Files are read and checked as NOTE [ inspect reads
data ] says; an unreadable file, or a state that would not load, exits 1 naming the file.
The report gives the position, epoch, samples trained, world size, batch-size history,
the chain and its fingerprint, and the contract's table of what a resume may change
(docs/contract.md) filled in with this state's values. ``--against`` builds a loader from
a factory (``module:function`` or ``path/to/script.py:function``, called as
``factory(rank=0, world_size=W, num_workers=0)`` like ``detsamplers.testing``'s) and
says whether it would resume this state exactly, and if not which field differs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ._cli_inspect_read import KINDS, InspectError, classify, read_json, read_torch
from ._cli_spec import load_callable

__all__ = ["add_parser", "inspect_path", "run"]

# Links of a chain that a resume may change (NOTE [ sample positions ]).
_ELASTIC_STAGES = ("shard", "batch", "skip")
#: The exit status of a command whose output pipe closed: 128 + SIGPIPE, as a shell shows it.
_BROKEN_PIPE = 141
#: The files of a checkpoint folder that stand for the folder.
_FOLDER_FILES = ("metadata.json", "state-dict.pth")


def _rank(kind: str, state: dict[str, Any]) -> int:
    fields = state.get("loader") if kind == "loader" else None
    rank = fields.get("rank", 0) if isinstance(fields, dict) else 0
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else 0


def read_checkpoint(path: str) -> dict[str, Any]:
    """Read PATH into ``{"kind", "path", "metadata", "states", "kinds"}`` (NOTE [ inspect ]).

    The one place that reads files (NOTE [ inspect reads data ]); a checkpoint folder's
    ``metadata.json`` goes through the trial's validator, which also checks that the rank
    files it lists are there.
    """
    if not os.path.lexists(path):
        raise InspectError(f"{path}: no such file or folder")
    if os.path.basename(path) in _FOLDER_FILES and os.path.isfile(path):
        path = os.path.dirname(path) or "."  # a checkpoint's file: its folder
    folder = os.path.isdir(path) and not path.endswith((".json", ".pth", ".pt"))
    if folder and not os.path.exists(os.path.join(path, "metadata.json")):
        from .trial import find_latest_checkpoint

        try:
            latest = find_latest_checkpoint(path)
        except ValueError as error:
            raise InspectError(str(error)) from None
        if latest is None:
            raise InspectError(
                f"{path}: a folder without metadata.json and without a complete "
                "checkpoint folder (batch-NNNNNN/ with its metadata.json) inside"
            )
        path = latest
    states: dict[int, dict[str, Any]] = {}
    kinds: dict[int, str] = {}
    if folder:
        from .trial._metadata import read_checkpoint_metadata

        try:  # the trial's own validator (NOTE [ checkpoint metadata ])
            metadata = read_checkpoint_metadata(path)
        except ValueError as error:
            raise InspectError(str(error)) from None
        for rank in range(metadata["world_size"]):
            file = os.path.join(path, f"rank-{rank}.pth")
            if not os.path.lexists(file):
                continue
            found = classify(read_torch(file), file)
            if found is not None:
                kinds[rank], states[rank] = found
        return {"kind": "checkpoint", "path": path, "metadata": metadata, "states": states,
                "kinds": kinds}  # fmt: skip
    obj = read_json(path) if path.endswith(".json") else read_torch(path)
    found = classify(obj, path)
    if found is not None:
        rank = _rank(*found)
        kinds[rank], states[rank] = found
    return {"kind": "state", "path": path, "metadata": {}, "states": states, "kinds": kinds}


def _link_text(link: dict[str, Any]) -> str:
    name = link.get("stage") or link.get("source") or "?"
    args = ", ".join(f"{k}={v}" for k, v in link.items() if k not in ("stage", "source"))
    return f"{name}({args})" if args else str(name)


def _history(metadata: dict[str, Any]) -> str:
    segments = metadata.get("batch_segments")
    if isinstance(segments, list) and segments:
        parts = []
        for segment in segments:
            if isinstance(segment, list) and len(segment) == 3:
                sample, batch, size = segment
                parts.append(f"{size} from sample {sample} (batch {batch})")
        if parts:
            return "; ".join(parts)
    size = metadata.get("global_batch_size")
    return "?" if size is None else str(size)


def _contract(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The contract's table (docs/contract.md) with this state's values."""
    m, state = report["metadata"], next(iter(report["states"].values()), None)
    rows: list[tuple[str, str]] = []
    chain = state.get("chain", []) if state else []
    fixed = [link for link in chain if link.get("stage") not in _ELASTIC_STAGES]
    config = state.get("config") if state else None
    shards = isinstance(config, dict)  # a WebDatasetSource's or WebDatasetMix's
    elastic = state is not None and (shards or state.get("samples") is not None)
    fields = {**(state.get("loader") or {}), **(config or {})} if state else {}
    for link in chain:  # a sampler's state: the chain's own seed and length
        if "seed" in link:
            fields.setdefault("seed", link["seed"])
        if "source" in link:
            fields.setdefault("dataset_length", link.get("length"))
    counts = state.get("counts") if state else None
    if isinstance(counts, dict):  # a WebDatasetSource's: its samples
        fields.setdefault("dataset_length", counts.get("samples"))
    rows.append(
        (
            "world size and rank" + ("" if elastic else " (no: this chain has no sample grid)"),
            f"seed {m.get('seed', fields.get('seed'))}, data seed "
            f"{m.get('data_seed', '-')}, dataset length "
            f"{m.get('dataset_length', fields.get('dataset_length'))}",
        )
    )
    if isinstance(config, dict):
        order = ", ".join(f"{key}={value}" for key, value in config.items())
        held = "the shards, their sample counts and the order: " + order
    else:
        held = "the source, shuffle and repeat: " + (" > ".join(map(_link_text, fixed)) or "-")
    rows.append(("num_workers, prefetching, worker options", held))
    rows.append(
        (
            "the global batch size given as an int" + ("" if elastic else " (no: fixed batches)"),
            f"aggregation_frequency {m.get('aggregation_frequency', 1)}",
        )
    )
    samples = m.get("samples_trained", state.get("samples") if state else None)
    rows.append(
        (
            f"a schedule's future: segments starting after sample {samples}",
            f"a schedule's past: the batch segments {_history(m)}",
        )
    )
    growth = m.get("dataset_growth")
    rows.append(
        (
            f"a larger dataset with fit(dataset_growth=True): a growth at sample {samples}",
            f"the growth history {growth if growth is not None else '-'}; a smaller dataset never",
        )
    )
    rows.append(("max_length, periods, checkpoint_policy, retention", ""))
    return rows


def inspect_path(path: str) -> dict[str, Any]:
    """The report of PATH as a JSON-able dict (NOTE [ inspect ])."""
    report = read_checkpoint(path)
    m = report["metadata"]
    out: dict[str, Any] = {"kind": report["kind"], "path": report["path"]}
    if m:
        out["checkpoint"] = {
            key: m.get(key)
            for key in (
                "format_version", "batches_trained", "samples_trained", "epoch_index",
                "epoch_start_sample", "world_size", "global_batch_size", "batch_segments",
                "seed", "data_seed", "dataset_length", "dataset_growth",
                "aggregation_frequency", "data_fingerprint", "data_global_digest",
            )
        }  # fmt: skip
    out["ranks"] = {
        str(rank): {
            "kind": report["kinds"][rank],
            "position": state.get("position"),
            "samples": state.get("samples"),
            "chain": state.get("chain"),
            "chain_text": " > ".join(_link_text(link) for link in state.get("chain", [])),
            "fingerprint": state.get("fingerprint"),
            "digest": state.get("digest"),
            "loader": state.get("loader"),
            "config": state.get("config"),
            "counts": state.get("counts"),
            "mixture": state.get("mixture"),
        }
        for rank, state in sorted(report["states"].items())
    }
    out["resume"] = [{"may_change": a, "must_match": b} for a, b in _contract(report)]
    out["_states"] = report["states"]
    return out


def _state_rows(kind: str, state: dict[str, Any]) -> list[tuple[str, Any]]:
    """The lines of one state of ``kind`` (``classify``'s) in the report."""
    position = state["position"]
    digest = "" if state["digest"] is None else f" (digest {state['digest']})"
    if kind in ("source", "mixture"):
        counts = state["counts"]
        sets = counts if isinstance(counts, list) else [counts]
        totals = [
            f"{c.get('shards')} shards, {c.get('samples')} samples" if isinstance(c, dict) else "?"
            for c in sets
        ]
        rows = [
            ("position", f"{position} samples of every rank (the global stream position)"),
            ("config", ", ".join(f"{k}={v}" for k, v in state["config"].items())),
            ("shards", "; ".join(totals)),
        ]
        if state["mixture"] is not None:
            rows.append(("mixture", state["mixture"]))
        return [*rows, ("fingerprint", f"{state['fingerprint']}{digest}")]
    unit = "batches on this rank" if kind == "loader" else "(the chain's stream position)"
    rows = [("position", f"{position} {unit}")]
    if kind == "loader" or state["samples"] is not None:
        rows.append(("samples", f"{state['samples']} (every rank's, before the next batch)"))
    rows.append(("chain", state["chain_text"]))
    if state["mixture"] is not None:
        rows.append(("mixture", state["mixture"]))
    return [*rows, ("fingerprint", f"{state['fingerprint']}{digest}")]


def _print(out: dict[str, Any]) -> None:
    print(f"{out['kind']} {out['path']}")
    c = out.get("checkpoint")
    if c:
        rows = [
            ("format version", c["format_version"]),
            ("batches trained", c["batches_trained"]),
            ("samples trained", c["samples_trained"]),
            ("epoch", f"{c['epoch_index']} (started at sample {c['epoch_start_sample']})"),
            ("world size", c["world_size"]),
            ("global batch size", c["global_batch_size"]),
            ("batch-size history", _history(c)),
            ("seed", f"{c['seed']} (data seed {c['data_seed']})"),
            ("dataset length", f"{c['dataset_length']} (growth {c['dataset_growth']})"),
            ("aggregation", c["aggregation_frequency"]),
            ("data fingerprint", f"{c['data_fingerprint']} (digest {c['data_global_digest']})"),
        ]
        for name, value in rows:
            print(f"  {name:<20}{value}")
    for rank, state in out["ranks"].items():
        kind = state["kind"]
        print(f"{KINDS[kind]} of rank {rank}")
        for name, value in _state_rows(kind, state):
            print(f"  {name:<20}{value}")
    if not out["ranks"]:
        print("  no loader state (a loader the trial skips itself, or a non-detsamplers loader)")
    print("what a resume may change (docs/contract.md), for this state")
    for row in out["resume"]:
        print(f"  may change: {row['may_change']}")
        if row["must_match"]:
            print(f"    must match: {row['must_match']}")


def _differences(saved: list[dict[str, Any]], here: list[dict[str, Any]]) -> list[str]:
    out = []
    for k in range(max(len(saved), len(here))):
        a = saved[k] if k < len(saved) else {}
        b = here[k] if k < len(here) else {}
        name = a.get("stage") or a.get("source") or b.get("stage") or b.get("source")
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                kind = "may change" if name in _ELASTIC_STAGES else "must match"
                out.append(f"{name}.{key}: {a.get(key)!r} saved, {b.get(key)!r} here ({kind})")
    return out


def against(out: dict[str, Any], spec: str, world_size: int) -> tuple[bool, list[str]]:
    """Whether the factory's loader would resume the inspected state exactly, and why."""
    import copy

    from .testing._resume import Config, _build
    from .testing._route import choose_route

    states = out["_states"]
    if not states:
        return False, ["the checkpoint holds no loader state to compare with"]
    factory = load_callable(spec, "--against", noun="function", scripts=True)
    loader = _build(factory, 0, Config(world_size=world_size))
    route = choose_route(loader, "auto")
    state = states[min(states)]
    lines = []
    fresh = None
    try:
        fresh = route.save(loader)
    except Exception:  # a loader whose state needs an iterator first
        fresh = None
    chain = fresh.get("chain") if isinstance(fresh, dict) else None
    if isinstance(chain, list):
        lines += _differences(state.get("chain", []), chain)
    try:
        route.load(loader, copy.deepcopy(state))
    except Exception as error:
        lines.append(f"would not resume: {type(error).__name__}: {error}")
        return False, lines
    lines.append(
        f"would resume exactly at sample {state.get('samples')} (position "
        f"{state.get('position')} of the saved rank) through {route.name}"
    )
    return True, lines


def add_parser(commands: Any) -> None:
    """Add the ``inspect`` command to the CLI's subparsers."""
    inspect = commands.add_parser(
        "inspect",
        help="what a checkpoint folder or a saved loader state holds",
        description="Print a checkpoint's or a saved state's position, epoch, samples "
        "trained, world size and batch-size history, its chain and fingerprint, and what a "
        "resume may change. Files are read as data, never run.",
    )
    inspect.add_argument("path", help="a checkpoint folder or directory, or a .json/.pth state")
    inspect.add_argument(
        "--against",
        default=None,
        help="module:function or script.py:function building a loader (rank, world_size, "
        "num_workers): would it resume this state exactly?",
    )
    inspect.add_argument("--world-size", type=int, default=None, help="for --against (saved)")
    inspect.add_argument("--json", action="store_true", help="print JSON")


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run ``inspect``; the exit status (NOTE [ inspect ]).

    0: the report (and ``--against`` resumes); 1: a file that cannot be read or holds a
    state that would not load, or ``--against`` would not resume it; 2: a bad argument;
    141 (128 + SIGPIPE): the reader of the output went away (``| head``).
    """
    if args.world_size is not None and args.world_size < 1:
        parser.error(f"--world-size should be a positive integer, but got {args.world_size}")
    try:
        out = inspect_path(args.path)
    except InspectError as error:
        print(f"inspect failed: {error}", file=sys.stderr)
        return 1
    ok = True
    if args.against is not None:
        world = args.world_size or (out.get("checkpoint") or {}).get("world_size") or 1
        try:
            ok, lines = against(out, args.against, int(world))
        except (ValueError, TypeError) as error:
            parser.error(str(error))
        except AssertionError as error:  # the loader has no state route
            ok, lines = False, [str(error)]
        out["against"] = {"spec": args.against, "world_size": world, "ok": ok, "lines": lines}
    states = out.pop("_states")
    del states
    try:
        if args.json:
            print(json.dumps(out, indent=1, default=str))
        else:
            _print(out)
            if "against" in out:
                print(f"against {args.against} (world size {out['against']['world_size']})")
                for line in out["against"]["lines"]:
                    print(f"  {line}")
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away, as `| head` does: stop quietly, as a Unix tool that
        # SIGPIPE ends, and point stdout at /dev/null so that the exit's flush is silent.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return _BROKEN_PIPE
    return 0 if ok else 1
