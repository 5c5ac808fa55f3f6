"""The versions object storage pins (loader/_wds/remote/_object_store.py), as strings.

NOTE [ object storage ]. test_wds_s3.py, test_wds_gcs.py and test_wds_s3_obstore.py read
shards from moto's S3 and a GCS emulator on 127.0.0.1 (a rewritten shard refused by name, a
versioned bucket read at the version indexed, retries, obstore); these check the rules
those reads rest on, for any ETag and pin: the version recorded splits back into what
the filesystem reported, two versions compare as the same bytes exactly when they should,
and which versions a read can check without a lookup.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from detsamplers.loader._wds.remote._object_store import (
    checked_on_read,
    pinned_version,
    same_version,
    split_version,
)

words = st.text("abcdef0123456789=-_", min_size=1, max_size=12)
etags = words.map(lambda w: f'"{w}"') | words  # strong (quoted) or weak-looking
s3_versions = st.builds(lambda e, v: f"{e}?versionId={v}" if v else e, etags, st.none() | words)
gcs_versions = st.builds(lambda e, g: f"{e}?generation={g}", etags, st.integers(1, 10**12))


@given(etag=etags, version_id=st.none() | words)
def test_an_s3_version_recorded_splits_back_into_the_etag_and_version_id(
    etag: str, version_id: str | None
) -> None:
    info = {"ETag": etag, "VersionId": version_id}
    recorded = pinned_version("s3://bucket/a.tar", info)
    assert split_version(recorded) == (
        (etag, "versionId", version_id) if version_id else (etag, None, None)
    )
    assert checked_on_read("s3://bucket/a.tar", recorded) == etag.startswith('"')


@given(etag=etags, generation=st.integers(1, 10**12))
def test_a_gcs_version_recorded_splits_back_and_is_always_checked_on_read(
    etag: str, generation: int
) -> None:
    recorded = pinned_version("gs://bucket/a.tar", {"etag": etag, "generation": generation})
    assert split_version(recorded) == (etag, "generation", str(generation))
    assert checked_on_read("gs://bucket/a.tar", recorded)


@given(a=s3_versions | gcs_versions | st.none(), b=s3_versions | gcs_versions | st.none())
def test_same_version_is_reflexive_and_symmetric(a: str | None, b: str | None) -> None:
    assert same_version(a, a)
    assert same_version(a, b) == same_version(b, a)


@given(etag=etags, other=etags, v=words, w=words, g=st.integers(1, 99), h=st.integers(1, 99))
def test_versions_are_the_same_bytes_exactly_when_their_pins_or_etags_say_so(
    etag: str, other: str, v: str, w: str, g: int, h: int
) -> None:
    # S3: another ETag is other bytes; an unpinned side compares the ETag alone.
    assert same_version(f"{etag}?versionId={v}", etag)
    assert same_version(f"{etag}?versionId={v}", f"{etag}?versionId={w}") == (v == w)
    assert same_version(etag, other) == (etag == other)
    # GCS: the generation decides alone (the ETag changes with metadata too).
    assert same_version(f"{etag}?generation={g}", f"{other}?generation={h}") == (g == h)


def test_a_version_is_none_when_the_filesystem_reports_nothing_to_pin() -> None:
    assert pinned_version("s3://bucket/a.tar", {"size": 10}) is None
    assert pinned_version("file:///a.tar", {"mtime": 5.5}) == "5.5"
    assert split_version(None) == (None, None, None)
    assert not checked_on_read("https://host/a.tar", 'W/"weak"')
