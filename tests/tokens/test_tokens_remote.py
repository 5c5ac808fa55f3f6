"""Remote token corpora: the same files over nginx and moto's S3 give the sequences they give on
disk, read by ranges (the bytes each sequence needs, counted by the server) or downloaded once
into the node cache; a hostile server or file is an error naming the URL."""

from __future__ import annotations

import asyncio
import os
import pickle
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parents[1] / "webdataset"))  # the servers' helpers
from http_server import ShardServer
from nginx_server import Nginx
from s3_server import S3Server
from tokens_helpers import corpora, write_eod, write_unique

from detsamplers.loader import DataLoader
from detsamplers.testing import Config, check_resume
from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens

pytestmark = pytest.mark.servers

#: Document lengths of the two ``.bin`` files (uint16, end-of-document id 0).
EOD_FILES = [[5, 9, 3, 14, 2, 7, 11, 30, 4], [6, 1, 8, 20, 4, 17]]
#: Document lengths of the two ``.npy`` files (uint32) with lengths sidecars.
NPY_FILES = [[12, 3, 7, 25, 10], [4, 4, 16, 8, 11, 2]]
L = 7


@dataclass
class Stores:
    """The corpus files on disk, under nginx (``/c/``) and in moto's S3 (``s3://tok/c/``)."""

    root: Path
    nginx: Nginx
    s3: S3Server

    def urls(self, where: str, names: list[str]) -> list[str]:
        base = f"{self.nginx.url}/c" if where == "nginx" else "s3://tok/c"
        return [f"{base}/{name}" for name in names]

    def options(self, where: str) -> dict[str, Any]:
        return {"storage_options": self.s3.options} if where == "s3" else {}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stores]:
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    root = tmp_path_factory.mktemp("token-files")
    write_eod(root / "c", EOD_FILES)  # part0.bin, part1.bin (+ their .eod0.npy, kept apart)
    folder = tmp_path_factory.mktemp("npy")
    write_unique(folder, NPY_FILES)
    for i in range(2):
        for name in (f"part{i}.npy", f"part{i}.lengths.npy"):
            shutil.copy(folder / name, root / "c" / name)
    index = tmp_path_factory.mktemp("beside")
    for path in (root / "c").glob("*.eod0.npy"):  # served only where a test puts them back
        path.rename(index / path.name)
    nginx = Nginx(root, tmp_path_factory.mktemp("nginx"))
    s3 = S3Server()
    try:
        s3.create_bucket("tok")
        for path in (root / "c").iterdir():
            s3.put("tok", f"c/{path.name}", path.read_bytes())
        yield Stores(root, nginx, s3)
    finally:
        nginx.close()
        s3.close()


def local_corpus(stores: Stores, kind: str) -> TokenCorpus:
    folder = stores.root / "c"
    if kind == "bin":
        paths = [folder / "part0.bin", folder / "part1.bin"]
        return TokenCorpus(paths, dtype="uint16", eod_id=0, cache=False, progress=False)
    paths = [folder / "part0.npy", folder / "part1.npy"]
    return TokenCorpus(paths, lengths=[folder / "part0.lengths.npy", folder / "part1.lengths.npy"])


def remote_corpus(stores: Stores, where: str, kind: str, **kwargs: Any) -> TokenCorpus:
    options = {**stores.options(where), **kwargs}
    if kind == "bin":
        urls = stores.urls(where, ["part0.bin", "part1.bin"])
        return TokenCorpus(urls, dtype="uint16", eod_id=0, progress=False, **options)
    urls = stores.urls(where, ["part0.npy", "part1.npy"])
    sidecars = stores.urls(where, ["part0.lengths.npy", "part1.lengths.npy"])
    return TokenCorpus(urls, lengths=sidecars, **options)


def every_sequence(corpus: TokenCorpus, mode: str, seq_len: int = L) -> list[dict[str, list[int]]]:
    sequences = TokenSequences(corpus, seq_len, mode=mode, seed=5, block_documents=3)
    return [{k: v.tolist() for k, v in sequences[i].items()} for i in range(len(sequences))]


@pytest.mark.parametrize("where", ["nginx", "s3"])
@pytest.mark.parametrize("kind", ["bin", "npy"])
@pytest.mark.parametrize("mode", ["chunk", "concat"])
@pytest.mark.parametrize("download", [False, True])
def test_remote_files_give_the_sequences_of_the_same_files_on_disk(
    stores: Stores, tmp_path: Path, where: str, kind: str, mode: str, download: bool
) -> None:
    remote = remote_corpus(stores, where, kind, cache_dir=tmp_path, download=download)
    local = local_corpus(stores, kind)
    assert (remote.num_tokens, remote.num_documents) == (local.num_tokens, local.num_documents)
    assert remote.config() == local.config()  # a state saved on disk loads over the URLs
    assert every_sequence(remote, mode) == every_sequence(local, mode)


@settings(max_examples=15)
@given(
    files=corpora,
    seq_len=st.integers(1, 9),
    mode=st.sampled_from(["chunk", "concat"]),
    download=st.booleans(),
)
def test_any_corpus_over_nginx_gives_the_sequences_it_gives_on_disk(
    stores: Stores,
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    mode: str,
    download: bool,
) -> None:
    assume(sum(map(sum, files)) > seq_len)
    folder = Path(tempfile.mkdtemp(dir=stores.root / "c"))
    local = write_eod(folder, files, seed=seq_len)
    for path in folder.glob("*.eod0.npy"):  # the remote open scans: no index beside the files
        path.unlink()
    urls = [f"{stores.nginx.url}/c/{folder.name}/{path.name}" for path in local.paths]
    remote = TokenCorpus(urls, dtype="uint16", eod_id=0, progress=False, download=download,
                         cache_dir=tmp_path_factory.mktemp("cache"))  # fmt: skip
    assert every_sequence(remote, mode, seq_len) == every_sequence(local, mode, seq_len)


def file_starts(corpus: TokenCorpus) -> list[int]:
    return [int(s) for s in corpus._token_start[1:-1]]


@pytest.mark.parametrize("kind", ["bin", "npy"])
def test_a_chunk_sequence_downloads_exactly_its_tokens_in_one_range_or_two_across_files(
    stores: Stores, tmp_path: Path, kind: str
) -> None:
    corpus = remote_corpus(stores, "nginx", kind, cache_dir=tmp_path)
    sequences = TokenSequences(corpus, L, mode="chunk")
    itemsize = 2 if kind == "bin" else 4
    crossings = 0
    for k in range(len(sequences)):
        mark = stores.nginx.mark()
        sequences[k]
        sent, requests = stores.nginx.served(mark, suffix=f".{kind}")
        crosses = any(k * (L + 1) < s < (k + 1) * (L + 1) for s in file_starts(corpus))
        crossings += crosses
        assert (sent, requests) == ((L + 1) * itemsize, 2 if crosses else 1), k
    assert crossings == 1  # the corpus has two files: one window straddles them


def test_a_concat_sequence_downloads_exactly_its_tokens_one_range_per_document_piece(
    stores: Stores, tmp_path: Path
) -> None:
    corpus = remote_corpus(stores, "nginx", "bin", cache_dir=tmp_path)
    sequences = TokenSequences(corpus, L, mode="concat", seed=5, block_documents=3)
    for k in range(len(sequences)):
        mark = stores.nginx.mark()
        sequences[k]
        pieces = len(sequences.pieces(k)[0])
        assert stores.nginx.served(mark, suffix=".bin") == ((L + 1) * 2, pieces), k


def test_the_eod_scan_downloads_each_file_once_and_later_opens_read_the_node_cache(
    stores: Stores, tmp_path: Path
) -> None:
    size = sum((stores.root / "c" / f"part{i}.bin").stat().st_size for i in range(2))
    mark = stores.nginx.mark()
    first = remote_corpus(stores, "nginx", "bin", cache_dir=tmp_path)
    assert stores.nginx.served(mark, suffix=".bin") == (size, 2)  # one scan range per file
    assert len(list(tmp_path.glob("*.eod0.npy"))) == 2
    mark = stores.nginx.mark()
    again = remote_corpus(stores, "nginx", "bin", cache_dir=tmp_path)
    assert stores.nginx.served(mark, suffix=".bin") == (0, 0)
    assert again.num_documents == first.num_documents == sum(map(len, EOD_FILES))
    mark = stores.nginx.mark()
    remote_corpus(stores, "nginx", "bin", cache_dir=False)  # nothing kept: scanned again
    assert stores.nginx.served(mark, suffix=".bin") == (size, 2)
    folder = Path(os.environ["XDG_CACHE_HOME"])  # the default folder (tests/conftest.py)
    assert not list(folder.rglob("*.eod0.npy"))  # cache_dir=False: nothing written anywhere


def requests_since(nginx: Nginx, mark: int) -> list[tuple[str, str, str]]:
    """Every request nginx answered since ``mark``: (method, file name, status)."""
    lines = nginx.lines(mark)
    return [(m, uri.rsplit("/", 1)[-1], status) for m, uri, status, _ in map(str.split, lines)]


def test_an_open_with_the_index_on_the_node_asks_one_head_per_file_and_one_per_host(
    stores: Stores, tmp_path: Path
) -> None:
    remote_corpus(stores, "nginx", "bin", cache_dir=tmp_path)
    mark = stores.nginx.mark()
    remote_corpus(stores, "nginx", "bin", cache_dir=tmp_path)
    heads = [("HEAD", "part0.bin", "200"), ("HEAD", "part1.bin", "200")]
    assert sorted(requests_since(stores.nginx, mark)) == sorted([*heads, heads[0]])


def test_an_eod_index_beside_the_remote_file_replaces_the_scan(
    stores: Stores, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = stores.root / "c"
    TokenCorpus([folder / "part0.bin"], dtype="uint16", eod_id=0, progress=False)  # writes it
    index = folder / "part0.bin.eod0.npy"
    try:
        mark = stores.nginx.mark()
        corpus = remote_corpus(stores, "nginx", "bin", cache_dir=tmp_path)
        assert stores.nginx.served(mark, suffix="part0.bin") == (0, 0)
        assert stores.nginx.served(mark, suffix="part0.bin.eod0.npy") == (index.stat().st_size, 1)
        assert every_sequence(corpus, "concat") == every_sequence(
            local_corpus(stores, "bin"), "concat"
        )
    finally:
        index.unlink()


def test_download_mode_fetches_each_file_once_per_node_and_a_second_epoch_nothing(
    stores: Stores, tmp_path: Path
) -> None:
    size = sum((stores.root / "c" / f"part{i}.bin").stat().st_size for i in range(2))
    cache = tmp_path / "node"
    remote_corpus(stores, "nginx", "bin", cache_dir=cache)  # the index, built once
    mark = stores.nginx.mark()
    two_ranks = [
        remote_corpus(stores, "nginx", "bin", cache_dir=cache, download=True) for _ in range(2)
    ]
    for corpus in two_ranks:
        every_sequence(corpus, "concat")
    assert stores.nginx.served(mark, suffix=".bin") == (size, 2)  # whole, once for the node
    mark = stores.nginx.mark()
    every_sequence(remote_corpus(stores, "nginx", "bin", cache_dir=cache, download=True), "chunk")
    assert stores.nginx.served(mark, suffix=".bin") == (0, 0)


def test_s3_reads_only_the_ranges_of_the_sequences_read(stores: Stores, tmp_path: Path) -> None:
    stores.s3.reset()
    corpus = remote_corpus(stores, "s3", "npy", cache_dir=tmp_path)
    sidecar = (stores.root / "c" / "part0.lengths.npy").stat().st_size
    assert stores.s3.served.ranges["c/part0.lengths.npy"] == [f"bytes=0-{sidecar - 1}"]
    opened = sum(stores.s3.served.bytes[f"c/part{i}.npy"] for i in range(2))
    assert opened == 2 * 128  # the two headers
    sequences = TokenSequences(corpus, L, mode="chunk")
    sequences[0]
    assert stores.s3.served.ranges["c/part0.npy"] == [
        "bytes=0-127",
        f"bytes=128-{128 + 4 * (L + 1) - 1}",
    ]
    assert sum(stores.s3.served.bytes[f"c/part{i}.npy"] for i in range(2)) == opened + 4 * (L + 1)


@pytest.mark.workers
@pytest.mark.parametrize("download", [False, True])
def test_a_dataloader_with_two_workers_resumes_remote_sequences_exactly(
    stores: Stores, tmp_path: Path, download: bool
) -> None:
    corpus = remote_corpus(stores, "nginx", "bin", cache_dir=tmp_path, download=download)
    sequences = TokenSequences(corpus, L, mode="concat", seed=5, block_documents=3)

    def factory(rank: int, world_size: int, num_workers: int, batch_size: int = 2) -> DataLoader:
        return DataLoader(sequences, batch_size=batch_size, shuffle=True, seed=5,
                          num_workers=num_workers, collate_fn=collate_tokens)  # fmt: skip

    report = check_resume(
        factory, [3, 7], batches=10, run=Config(num_workers=2), resume=[Config(num_workers=2)]
    )
    assert report.pauses == [3, 7]
    local = TokenSequences(local_corpus(stores, "bin"), L, mode="concat", seed=5, block_documents=3)
    loader = DataLoader(sequences, batch_size=2, shuffle=True, seed=5, num_workers=2,
                        collate_fn=collate_tokens)  # fmt: skip
    on_disk = DataLoader(local, batch_size=2, shuffle=True, seed=5, collate_fn=collate_tokens)
    batches = zip(loader.get_data_loader(), on_disk.get_data_loader(), strict=True)
    assert all(a["input_ids"].equal(b["input_ids"]) for a, b in batches)


# --- hostile servers and files: each a clear error naming the URL ---


class LyingServer:
    """An aiohttp server on 127.0.0.1: a ``HEAD`` of a ``.bin`` says 1000 bytes, its ranges 2000
    (``short.bin``: 1000, but each body stops halfway and the connection closes)."""

    def __init__(self) -> None:
        from aiohttp import web

        async def handle(request: web.Request) -> web.StreamResponse:
            if not request.path.endswith(".bin"):
                return web.Response(status=404)
            headers = {"Accept-Ranges": "bytes", "ETag": '"lie"'}
            if request.method == "HEAD":
                return web.Response(headers={**headers, "Content-Length": "1000"})
            start, stop = request.http_range.start or 0, request.http_range.stop or 1000
            if request.path.endswith("short.bin"):  # the size is true, the body cut short
                headers["Content-Range"] = f"bytes {start}-{stop - 1}/1000"
                response = web.StreamResponse(status=206, headers=headers)
                response.content_length = stop - start
                await response.prepare(request)
                await response.write(bytes((stop - start) // 2))
                assert request.transport is not None
                request.transport.close()
                return response
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/2000"
            return web.Response(status=206, body=bytes(stop - start), headers=headers)

        self.loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_route("*", "/{name:.*}", handle)
        self.runner = web.AppRunner(app)
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.runner.setup())
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            self.loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        started.wait(10)
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def test_a_server_whose_ranges_contradict_its_size_is_an_error_naming_the_url() -> None:
    server = LyingServer()
    try:
        url = f"{server.url}/lie.bin"
        with pytest.raises(
            ValueError,
            match=rf"token file {url} cannot be read: it changed on the server since the corpus "
            r"opened it \(it has 2000 bytes, 1000 when indexed\); open the corpus again",
        ):
            TokenCorpus(url, dtype="uint16", eod_id=0, cache_dir=False, retries=0, progress=False)
    finally:
        server.close()


def test_a_body_shorter_than_its_content_length_is_an_error_naming_the_url_after_retries() -> None:
    server = LyingServer()
    try:
        url = f"{server.url}/short.bin"
        with pytest.raises(OSError, match=rf"token file {url} cannot be read: .*failed 2 times"):
            TokenCorpus(url, dtype="uint16", eod_id=0, cache_dir=False, retries=1, progress=False)
    finally:
        server.close()


def test_a_remote_corpus_pickles_as_urls_and_reads_the_same_sequences(
    stores: Stores, tmp_path: Path
) -> None:
    for download in (False, True):
        corpus = remote_corpus(stores, "nginx", "npy", cache_dir=tmp_path, download=download)
        expected = every_sequence(corpus, "concat")
        copy = pickle.loads(pickle.dumps(corpus))  # what a spawned DataLoader worker gets
        assert all(t._mapped is None and t.file._reader is None for t in copy._tokens)
        assert (
            every_sequence(copy, "concat")
            == expected
            == every_sequence(local_corpus(stores, "npy"), "concat")
        )


def test_a_bin_whose_size_is_not_a_multiple_of_the_dtype_is_an_error_naming_the_url(
    stores: Stores, tmp_path: Path
) -> None:
    (stores.root / "c" / "odd.bin").write_bytes(bytes(7))
    try:
        url = f"{stores.nginx.url}/c/odd.bin"
        with pytest.raises(ValueError, match=rf"token file {url} should hold whole uint16 tokens"):
            TokenCorpus(url, dtype="uint16", eod_id=0, cache_dir=tmp_path)
    finally:
        (stores.root / "c" / "odd.bin").unlink()


def test_a_lengths_sidecar_that_does_not_sum_to_its_file_is_an_error_naming_it(
    stores: Stores, tmp_path: Path
) -> None:
    tokens, wrong = stores.urls("nginx", ["part0.npy", "part1.lengths.npy"])
    with pytest.raises(
        ValueError, match=rf"document lengths file {wrong} should sum to the 57 tokens"
    ):
        TokenCorpus(tokens, lengths=[wrong], cache_dir=tmp_path)


def test_a_missing_file_is_a_file_not_found_error_naming_the_url(
    stores: Stores, tmp_path: Path
) -> None:
    url = f"{stores.nginx.url}/c/absent.bin"
    with pytest.raises(
        FileNotFoundError, match=rf"token file {url} cannot be read: .* does not exist"
    ):
        TokenCorpus(url, dtype="uint16", eod_id=0, cache_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match=r"token file s3://tok/c/absent.bin cannot be read"):
        TokenCorpus("s3://tok/c/absent.bin", dtype="uint16", eod_id=0, cache_dir=tmp_path,
                    storage_options=stores.s3.options)  # fmt: skip


def test_a_server_without_range_support_is_an_error_naming_the_url(tmp_path: Path) -> None:
    np.arange(1, 40, dtype=np.uint16).tofile(tmp_path / "t.bin")
    server = ShardServer(tmp_path)
    try:
        server.no_range.add("t.bin")
        url = f"{server.url}/t.bin"
        with pytest.raises(ValueError, match=rf"token file {url} cannot be read: .*ignores Range"):
            TokenCorpus(url, dtype="uint16", eod_id=0, cache_dir=tmp_path / "cache")
    finally:
        server.close()


def test_download_without_a_cache_folder_is_refused_before_any_request() -> None:
    with pytest.raises(ValueError, match="download should be False when cache_dir=False"):
        TokenCorpus("http://127.0.0.1:9/t.bin", dtype="uint16", eod_id=0, cache_dir=False,
                    download=True)  # fmt: skip


def test_a_file_rewritten_after_the_open_is_an_error_naming_the_url(
    stores: Stores, tmp_path: Path
) -> None:
    path = stores.root / "c" / "moving.bin"
    np.arange(1, 65, dtype=np.uint16).tofile(path)
    try:
        url = f"{stores.nginx.url}/c/moving.bin"
        corpus = TokenCorpus(url, dtype="uint16", eod_id=64, cache_dir=tmp_path, progress=False)
        np.arange(2, 66, dtype=np.uint16).tofile(path)  # same size, another ETag (mtime)
        os.utime(path, (1, 1))
        with pytest.raises(
            ValueError, match=rf"token file {url} cannot be read: it changed on the server since"
        ):
            corpus.read(0, 8)
    finally:
        path.unlink()


def test_a_sidecar_larger_than_its_file_could_need_is_refused_unread(
    stores: Stores, tmp_path: Path
) -> None:
    big = stores.root / "c" / "big.lengths.npy"
    np.save(big, np.ones(2000, dtype=np.int64))  # 16,128 bytes: over 10,012 + 8 * 4
    small = stores.root / "c" / "small.bin"
    np.arange(1, 5, dtype=np.uint16).tofile(small)
    try:
        tokens, sidecar = stores.urls("nginx", ["small.bin", "big.lengths.npy"])
        mark = stores.nginx.mark()
        with pytest.raises(ValueError, match=rf"document lengths file {sidecar} should be at most"):
            TokenCorpus(tokens, dtype="uint16", lengths=[sidecar], cache_dir=tmp_path)
        assert stores.nginx.served(mark, suffix="big.lengths.npy") == (0, 0)
    finally:
        big.unlink()
        small.unlink()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"cache_dir": 3}, TypeError, r"cache_dir should be a folder .* but got cache_dir=3"),
        ({"timeout": 0}, ValueError, r"timeout should be a positive number of seconds, but got"),
        (
            {"retries": -1},
            ValueError,
            r"retries should be a non-negative integer value, but got retries=-1",
        ),
        (
            {"cache_limit": 0},
            ValueError,
            r"cache_limit should be a positive integer value, but got cache_limit=0",
        ),
        ({"download": "yes"}, TypeError, r"download should be a bool, but got download=.yes."),
    ],
)
def test_bad_remote_arguments_are_refused_before_any_request(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        TokenCorpus("http://127.0.0.1:9/t.bin", dtype="uint16", eod_id=0, **kwargs)
