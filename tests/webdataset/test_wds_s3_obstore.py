"""S3 reads through obstore (NOTE [ S3 reads through obstore ]), against moto on 127.0.0.1.

The other S3 tests (test_wds_s3.py: a rewritten shard, a versioned bucket, dropped
connections, 503s, a stall, a refused endpoint, forbidden index files) already read
through obstore, since their ``storage_options`` say all it needs; these check that they
do, that a resume then never builds botocore's client, and which options keep s3fs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from s3_server import S3Server
from wds_helpers import label, write_small_samples

from detsamplers.__main__ import main
from detsamplers.loader import WebDatasetSource
from detsamplers.loader._wds.remote._obstore_s3 import store_for
from detsamplers.loader._wds.remote._remote_reads import RemoteOptions, remote_fs

pytest.importorskip("obstore")


@pytest.fixture(scope="module")
def urls(s3_session: S3Server, tmp_path_factory: pytest.TempPathFactory) -> str:
    """4 shards on S3 with their set index (``python -m detsamplers index``)."""
    folder = tmp_path_factory.mktemp("obstore") / "s"
    write_small_samples(folder, 4)
    s3_session.create_bucket("obstore")
    for path in sorted(folder.glob("*.tar")):
        s3_session.put("obstore", f"s/{path.name}", path.read_bytes())
    pattern = "s3://obstore/s/d-{00..03}.tar"
    argv = ["index", pattern, "--endpoint-url", s3_session.endpoint, "--storage-option"]
    assert main([*argv, "key=testing", "--storage-option", "secret=testing"]) == 0
    return pattern


def make(urls: str, s3: S3Server, cache: Path, **options: Any) -> WebDatasetSource:
    defaults: dict[str, Any] = {"seed": 0, "batch_size": 8, "decode": (), "map": label}
    defaults.update(cache_dir=str(cache), parts=4, storage_options=s3.options, repeat=False)
    return WebDatasetSource(urls, **{**defaults, **options})


def test_a_resume_over_s3_reads_through_obstore_and_never_builds_botocores_client(
    urls: str, s3_session: S3Server, tmp_path: Path
) -> None:
    whole = make(urls, s3_session, tmp_path / "a")
    expected = [[int(x) for x in batch] for batch in whole]
    state = {**whole.state_dict(), "position": 2 * 8}
    s3_session.reset()
    # fsspec hands every call with the same options one filesystem: start from none, so
    # that a client an earlier test of this process built is not taken for this resume's.
    pytest.importorskip("s3fs").S3FileSystem.clear_instance_cache()
    resumed = make(urls, s3_session, tmp_path / "b")
    resumed.load_state_dict(state)
    assert [[int(x) for x in batch] for batch in resumed] == expected[2:]
    fs, _ = remote_fs(resumed.shards[0].url, resumed.remote)
    assert getattr(fs, "_s3", None) is None  # s3fs never built its aiobotocore client
    assert store_for(fs, resumed.shards[0].url) is not None
    # The set index and the shards, each through the proxy once: nothing went around it.
    gets = {key: len(ranges) for key, ranges in s3_session.served.ranges.items()}
    assert gets.pop("s/detsamplers-set.index.npz") == 1
    assert set(gets) <= {f"s/d-{i:02d}.tar" for i in range(4)}


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"profile": "dev"}, "a profile: botocore reads ~/.aws"),
        ({"key": "k", "secret": "s", "requester_pays": True}, "an option obstore lacks"),
        ({"client_kwargs": {"region_name": "eu-west-1"}}, "no credentials given"),
        ({"key": "k", "secret": "s"}, "neither a region nor an endpoint"),
        (
            {"key": "k", "secret": "s", "client_kwargs": {"region_name": "r", "verify": False}},
            "a client argument obstore lacks",
        ),
        (
            {"anon": True, "endpoint_url": "http://h", "config_kwargs": {"region_name": "r"}},
            "a botocore Config setting",
        ),
    ],
)
def test_storage_options_obstore_cannot_say_keep_the_reads_on_s3fs(
    options: dict[str, Any], why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    url = "s3://bucket/s/d-00.tar"
    fs, _ = remote_fs(url, RemoteOptions(storage_options=options))
    assert store_for(fs, url) is None, why


def test_explicit_credentials_with_a_region_or_an_endpoint_read_through_obstore(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    url = "s3://bucket/s/d-00.tar"
    for options in (
        {"key": "k", "secret": "s", "client_kwargs": {"region_name": "eu-west-1"}},
        {"anon": True, "endpoint_url": "http://127.0.0.1:9"},
        {"key": "k", "secret": "s", "token": "t", "client_kwargs": {"endpoint_url": "http://h"}},
    ):
        fs, _ = remote_fs(url, RemoteOptions(storage_options=options))
        found = store_for(fs, url)
        assert found is not None and found[1] == "s/d-00.tar", options
    fs, _ = remote_fs("https://h/s/d-00.tar", RemoteOptions())
    assert store_for(fs, "https://h/s/d-00.tar") is None  # S3 only


def test_a_region_left_to_the_environment_reads_through_obstore_unless_a_config_file_may_set_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = "s3://bucket/s/d-00.tar"
    endpoint = {"key": "k", "secret": "s", "endpoint_url": "http://h"}
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    fs, _ = remote_fs(url, RemoteOptions(storage_options=endpoint))
    assert store_for(fs, url) is not None  # no region anywhere: us-east-1, as botocore's
    (tmp_path / "config").write_text("[default]\nregion = eu-west-1\n")
    assert store_for(fs, url) is None  # a profile's region: botocore reads it, so s3fs
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert store_for(fs, url) is not None
    keys = {"key": "k", "secret": "s"}
    fs, _ = remote_fs(url, RemoteOptions(storage_options=keys))
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    assert store_for(fs, url) is not None  # AWS itself, in the environment's region
    for name in ("AWS_ENDPOINT_URL", "AWS_CA_BUNDLE"):  # botocore would follow these
        monkeypatch.setenv(name, "https://minio.internal:9000")
        assert store_for(fs, url) is None, name
        monkeypatch.delenv(name)


def test_reads_stay_on_obstore_after_s3fs_built_its_client_for_the_same_options(
    urls: str, s3_session: S3Server
) -> None:
    """botocore writes its retry mode into the options' dict as s3fs builds its client."""
    url = "s3://obstore/s/d-00.tar"
    fs, path = remote_fs(url, RemoteOptions(storage_options=s3_session.options))
    assert fs.info(path)["size"] > 0  # through s3fs: its aiobotocore client is built now
    again, _ = remote_fs(url, RemoteOptions(storage_options=s3_session.options))
    assert again.storage_options["config_kwargs"]["retries"]["total_max_attempts"] == 1
    assert store_for(again, url) is not None
