"""The artifact store: file:// and s3:// (a real versitygw server started by the test setup)."""

from __future__ import annotations

from pathlib import Path

import pytest

from day0.errors import StoreError
from day0.store import FileStore, S3Store, open_store


def exercise(store) -> None:
    assert not store.exists("a/b.json")
    url = store.put_json("a/b.json", {"x": 1})
    assert url.endswith("a/b.json")
    assert store.exists("a/b.json") and store.get_json("a/b.json") == {"x": 1}
    store.put_text("a/c.md", "# hi")
    store.put_bytes("d.bin", b"\x00\x01")
    assert store.list("a") == ["a/b.json", "a/c.md"]
    assert set(store.list()) >= {"a/b.json", "a/c.md", "d.bin"}
    store.put_json("a/b.json", {"x": 2})  # overwrite
    assert store.get_json("a/b.json") == {"x": 2}
    with pytest.raises(StoreError, match="missing"):
        store.get_bytes("missing")
    # compare-and-swap (the run lock's lease): only over the bytes expected
    store.put_bytes("s/w.json", b"mine")
    assert not store.swap("s/w.json", b"theirs", b"renewed") and store.get_bytes("s/w.json") == b"mine"
    assert store.swap("s/w.json", b"mine", b"renewed") and store.get_bytes("s/w.json") == b"renewed"
    assert store.swap("s/w.json", b"renewed", None) and not store.exists("s/w.json")
    assert not store.swap("s/w.json", b"renewed", b"again") and not store.exists("s/w.json")


def test_file_store(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/store")
    assert isinstance(store, FileStore)
    exercise(store)
    assert not list((tmp_path / "store").rglob("*.tmp")), "no temp files left behind"


def test_file_store_rejects_keys_outside_its_root(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="escapes"):
        open_store(f"file://{tmp_path}").put_text("../outside.txt", "x")


def test_file_store_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path)
    store.put_text("r.json", "old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("day0.store.os.replace", broken_replace)
    with pytest.raises(OSError):
        store.put_text("r.json", "new")
    assert store.get_bytes("r.json") == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.parametrize("uri, message", [("ftp://x", "file:// or s3://"), ("s3://", "s3://bucket")])
def test_bad_uris(uri: str, message: str) -> None:
    with pytest.raises(StoreError, match=message):
        open_store(uri)


@pytest.mark.integration
def test_s3_store_against_a_real_server(s3_server) -> None:
    store = open_store(f"s3://{s3_server.bucket}/runs")
    assert isinstance(store, S3Store)
    exercise(store)
    # The objects are really on the server, under the prefix.
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=s3_server.bucket)["Contents"]]
    assert "runs/a/b.json" in keys


@pytest.mark.integration
def test_s3_swap_is_conditional_on_the_object_read(s3_server) -> None:
    """A write that lands between the swap's read and its PUT wins: the PUT carries the ETag read (If-Match),
    so a lease renewal never overwrites a takeover it did not see."""
    import io

    store = open_store(f"s3://{s3_server.bucket}/swap")
    assert isinstance(store, S3Store)
    store.put_bytes("lock/holder.json", b"mine")
    read = store.client.get_object

    def read_then_taken_over(**kwargs):  # type: ignore[no-untyped-def]
        response = read(**kwargs)
        response["Body"] = io.BytesIO(response["Body"].read())
        store.client.put_object(Bucket=s3_server.bucket, Key="swap/lock/holder.json", Body=b"theirs")
        return response

    store.client.get_object = read_then_taken_over
    assert not store.swap("lock/holder.json", b"mine", b"renewed")
    assert not store.swap("lock/holder.json", b"mine", None)
    store.client.get_object = read
    assert store.get_bytes("lock/holder.json") == b"theirs"


@pytest.mark.integration
def test_s3_unreachable_bucket_is_a_store_error(s3_server) -> None:
    with pytest.raises(StoreError, match="cannot write"):
        open_store("s3://no-such-bucket/x").put_text("k", "v")


def test_file_store_writes_one_file_mode(tmp_path: Path) -> None:
    """mkstemp's 0600 never leaks through: every object gets FILE_MODE (less the umask)."""
    import os

    from day0.store import FILE_MODE

    umask = os.umask(0)
    os.umask(umask)
    store = FileStore(tmp_path)
    store.put_json("a/r.json", {})
    store.put_bytes("b.bin", b"x")
    assert store.create("c.json", b"{}")
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.rglob("*") if p.is_file()}
    assert modes == dict.fromkeys(("r.json", "b.bin", "c.json"), FILE_MODE & ~umask)


def test_create_only_if_absent(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    assert store.create("lock/holder.json", b"first")
    assert not store.create("lock/holder.json", b"second")
    assert store.get_bytes("lock/holder.json") == b"first"
    assert [p.name for p in (tmp_path / "lock").iterdir()] == ["holder.json"], "no temp file left"


@pytest.mark.integration
def test_s3_create_only_if_absent(s3_server) -> None:
    store = open_store(f"s3://{s3_server.bucket}/create")
    assert store.create("lock/holder.json", b"first")
    assert not store.create("lock/holder.json", b"second")
    assert store.get_bytes("lock/holder.json") == b"first"


def test_file_store_refuses_links_inside_its_root_and_deletes_nothing_through_them(tmp_path: Path) -> None:
    """Issue 44: a link planted in one run's folder to another's made `--fresh` of the first delete and
    overwrite the second's results (the link resolved inside the root, so it passed)."""
    store = open_store(f"file://{tmp_path}/store")
    store.put_json("runs/b/2/analyze/result.json", {"verdict": "pass"})
    store.put_json("runs/a/1/operators/result.json", {"verdict": "pass"})
    (tmp_path / "store/runs/a/1/analyze").symlink_to(tmp_path / "store/runs/b/2/analyze")
    (tmp_path / "store/runs/a/1/spec.json").symlink_to(tmp_path / "store/runs/b/2/analyze/result.json")
    for act in (
        lambda: store.delete_prefix("runs/a/1"),
        lambda: store.put_json("runs/a/1/analyze/result.json", {"verdict": "fail"}),
        lambda: store.get_json("runs/a/1/analyze/result.json"),
        lambda: store.exists("runs/a/1/spec.json"),
        lambda: store.list("runs/a/1/analyze"),
    ):
        with pytest.raises(StoreError, match=r"runs/a/1/(analyze|spec.json) is a symbolic link"):
            act()
    assert store.get_json("runs/b/2/analyze/result.json") == {"verdict": "pass"}
    assert store.exists("runs/a/1/operators/result.json"), "a refused deletion deleted nothing"


@pytest.mark.parametrize(
    ("data", "why"),
    [(b"\x00garbage{", "not JSON"), (b'{"a": ' + b"[" * 100_000, "not JSON"), (b"\xff\xfe", "not JSON")],
    ids=["garbage", "deep", "not-utf8"],
)
def test_a_corrupt_record_is_named_with_its_path(tmp_path: Path, data: bytes, why: str) -> None:
    from day0.errors import CorruptRecord

    store = open_store(f"file://{tmp_path}/store")
    store.put_bytes("runs/a/1/analyze/code.json", data)
    with pytest.raises(CorruptRecord, match=why) as caught:
        store.get_json("runs/a/1/analyze/code.json")
    assert caught.value.url == f"file://{tmp_path}/store/runs/a/1/analyze/code.json"
    assert str(caught.value).startswith(caught.value.url) and len(str(caught.value)) < 400


def test_store_keys_from_a_secret_file_lose_its_newline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44: a key read from a Secret made `--from-file` kept the file's newline."""
    from day0.settings import StoreSettings

    monkeypatch.setenv("DAY0_STORE_ACCESS_KEY_ID", "key-id\n")
    monkeypatch.setenv("DAY0_STORE_SECRET_ACCESS_KEY", " secret-key\r\n")
    settings = StoreSettings()
    assert (settings.access_key_id, settings.secret_access_key) == ("key-id", "secret-key")
