"""The S3 server of the tests (s3_helpers.py) is a real S3 API: these check the fixture.

Ranged GETs, ETags, conditional GETs, multipart uploads, SigV4 authentication with
identities, loopback-only listeners, and a restart that keeps the data: what quiver's
object-storage tests rely on (docs/object-storage.md, "The S3 server of the tests").
"""

from __future__ import annotations

import datetime
import email.utils
import hashlib
import os
import re
import time
from pathlib import Path

import pyarrow.fs as pyarrow_fs
import pytest

from quiver import testing
from s3_helpers import READER_KEY, start_s3, unique_bucket

#: An object of a few chunks (weed's filer splits at 4 MiB), with no repeating pattern.
BLOB = hashlib.sha256(b"quiver").digest() * (6 * 1024 * 1024 // 32) + b"tail"


def _bucket_with_blob(s3: testing.S3Server, key: str = "dir/blob.bin") -> str:
    bucket = unique_bucket()
    s3.create_bucket(bucket)
    s3.put_object(bucket, key, BLOB)
    return bucket


def test_a_ranged_read_returns_the_bytes_asked(s3: testing.S3Server) -> None:
    bucket = _bucket_with_blob(s3)
    fs = s3.filesystem()
    assert fs.get_file_info(f"{bucket}/dir/blob.bin").size == len(BLOB)
    with fs.open_input_file(f"{bucket}/dir/blob.bin") as f:
        for offset, length in [(0, 10), (4 * 1024 * 1024 - 3, 7), (len(BLOB) - 4, 4), (123, 1)]:
            assert f.read_at(length, offset) == BLOB[offset : offset + length]
    response = s3.request("GET", f"/{bucket}/dir/blob.bin", headers={"Range": "bytes=100-199"})
    assert response.status == 206
    assert response.body == BLOB[100:200]
    assert response.headers["content-range"] == f"bytes 100-199/{len(BLOB)}"


def test_head_gives_the_etag_length_and_date(s3: testing.S3Server) -> None:
    bucket = unique_bucket()
    s3.create_bucket(bucket)
    etag = s3.put_object(bucket, "dir/blob.bin", BLOB)
    assert etag == f'"{hashlib.md5(BLOB).hexdigest()}"'
    response = s3.request("HEAD", f"/{bucket}/dir/blob.bin")
    assert response.status == 200, response
    assert response.headers["etag"] == etag
    assert int(response.headers["content-length"]) == len(BLOB)
    assert email.utils.parsedate_to_datetime(response.headers["last-modified"]).year >= 2024
    assert response.body == b""
    assert s3.request("HEAD", f"/{bucket}/no-such-key").status == 404
    # Overwritten: another ETag.
    assert (
        s3.put_object(bucket, "dir/blob.bin", b"other") == f'"{hashlib.md5(b"other").hexdigest()}"'
    )
    assert s3.request("HEAD", f"/{bucket}/dir/blob.bin").headers["etag"] == (
        f'"{hashlib.md5(b"other").hexdigest()}"'
    )


def test_pyarrow_writes_and_lists_through_the_s3_api(s3: testing.S3Server) -> None:
    bucket = unique_bucket()
    fs = s3.filesystem()
    fs.create_dir(bucket)
    with fs.open_output_stream(f"{bucket}/p/blob.bin") as out:
        out.write(BLOB)
    listed = fs.get_file_info(pyarrow_fs.FileSelector(bucket, recursive=True))
    assert sorted(info.path for info in listed) == [f"{bucket}/p", f"{bucket}/p/blob.bin"]
    assert s3.request("GET", f"/{bucket}/p/blob.bin").body == BLOB


def test_conditional_gets_are_honoured(s3: testing.S3Server) -> None:
    bucket = _bucket_with_blob(s3)
    path = f"/{bucket}/dir/blob.bin"
    head = s3.request("HEAD", path).headers
    etag, other = head["etag"], '"0123456789abcdef0123456789abcdef"'
    modified = email.utils.parsedate_to_datetime(head["last-modified"])
    later = email.utils.format_datetime(modified + datetime.timedelta(days=1), usegmt=True)
    earlier = email.utils.format_datetime(modified - datetime.timedelta(days=1), usegmt=True)

    def status(method: str = "GET", **headers: str) -> int:
        named = {k.replace("_", "-"): v for k, v in headers.items()}
        return s3.request(method, path, headers=named).status

    assert status(If_None_Match=etag) == 304
    assert status("HEAD", If_None_Match=etag) == 304
    assert status(If_None_Match="*") == 304
    assert status(If_None_Match=other) == 200
    assert status(If_Match=etag) == 200
    assert status(If_Match="*") == 200
    assert status(If_Match=other) == 412
    assert status("HEAD", If_Match=other) == 412
    assert status(If_Modified_Since=later) == 304
    assert status(If_Modified_Since=earlier) == 200
    assert status(If_Unmodified_Since=earlier) == 412
    assert status(If_Unmodified_Since=later) == 200
    # RFC 9110's precedence, as S3's: If-Match decides over If-Unmodified-Since, and
    # If-None-Match over If-Modified-Since.
    assert status(If_Match=etag, If_Unmodified_Since=earlier) == 200
    assert status(If_None_Match=other, If_Modified_Since=later) == 200
    # A range read under the ETag a listing gave: the bytes of that version, or 412 once
    # the object is rewritten, never bytes of another version.
    ranged = s3.request("GET", path, headers={"Range": "bytes=0-9", "If-Match": etag})
    assert (ranged.status, ranged.body) == (206, BLOB[:10])
    assert status(Range="bytes=0-9", If_Match=other) == 412
    s3.put_object(bucket, "dir/blob.bin", b"rewritten")
    assert status(Range="bytes=0-1", If_Match=etag) == 412


def test_a_multipart_upload_assembles_its_parts(s3: testing.S3Server) -> None:
    bucket = unique_bucket()
    s3.create_bucket(bucket)
    path = f"/{bucket}/multi.bin"
    created = s3.request("POST", path, query={"uploads": ""})
    assert created.status == 200, created
    upload_id = re.search(rb"<UploadId>(.+?)</UploadId>", created.body)
    assert upload_id is not None, created.body
    upload = upload_id.group(1).decode()
    part_size = 5 * 1024 * 1024  # S3's smallest part but the last
    parts = [BLOB[:part_size], BLOB[part_size:]]
    etags = []
    for number, data in enumerate(parts, start=1):
        put = s3.request(
            "PUT", path, query={"partNumber": str(number), "uploadId": upload}, body=data
        )
        assert put.status == 200, put
        etags.append(put.headers["etag"])
    body = "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>"
        for n, etag in enumerate(etags, start=1)
    )
    done = s3.request(
        "POST",
        path,
        query={"uploadId": upload},
        body=f"<CompleteMultipartUpload>{body}</CompleteMultipartUpload>".encode(),
    )
    assert done.status == 200, done
    whole = s3.request("GET", path)
    assert whole.status == 200
    assert whole.body == BLOB
    # S3's multipart ETag: the MD5 of the parts' MD5s, and their count.
    digest = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    assert whole.headers["etag"] == f'"{digest}-2"'
    ranged = s3.request("GET", path, headers={"Range": f"bytes={part_size - 5}-{part_size + 4}"})
    assert ranged.status == 206
    assert ranged.body == BLOB[part_size - 5 : part_size + 5]


def test_requests_need_valid_credentials_of_an_allowed_identity(s3: testing.S3Server) -> None:
    bucket = _bucket_with_blob(s3)
    path = f"/{bucket}/dir/blob.bin"
    assert s3.request("GET", path, credentials=(s3.access_key, "wrong-secret")).status == 403
    assert s3.request("GET", path, credentials=("no-such-key", "whatever")).status == 403
    # Unsigned: refused too (no anonymous identity).
    import http.client

    connection = http.client.HTTPConnection(s3.host, s3.port, timeout=10)
    try:
        connection.request("GET", path)
        assert connection.getresponse().status == 403
    finally:
        connection.close()
    # The read-only identity reads and lists, and may not write.
    assert s3.request("GET", path, credentials=READER_KEY).body == BLOB
    assert s3.request("GET", f"/{bucket}", credentials=READER_KEY).status == 200
    assert s3.request("PUT", f"/{bucket}/x", body=b"x", credentials=READER_KEY).status == 403
    assert s3.request("DELETE", path, credentials=READER_KEY).status == 403
    assert s3.request("HEAD", path).status == 200


def test_delete_object_removes_it(s3: testing.S3Server) -> None:
    bucket = _bucket_with_blob(s3, key="gone.bin")
    s3.delete_object(bucket, "gone.bin")
    assert s3.request("HEAD", f"/{bucket}/gone.bin").status == 404


def test_env_points_at_the_server(s3: testing.S3Server) -> None:
    env = s3.env()
    assert env == {
        "AWS_ACCESS_KEY_ID": s3.access_key,
        "AWS_SECRET_ACCESS_KEY": s3.secret_key,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{s3.port}",
        "AWS_ALLOW_HTTP": "true",
    }
    assert s3.endpoint == env["AWS_ENDPOINT_URL"]


def _listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) of every TCP socket ``pid`` listens on (/proc, IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            assert len(address) == width
            if width == 8:
                ip = ".".join(str(b) for b in reversed(bytes.fromhex(address)))
            else:
                ip = f"[{address}]"
            found.add((ip, int(port, 16)))
    return found


def test_every_listener_is_on_loopback(s3: testing.S3Server) -> None:
    listening = _listening(s3.pid)
    # The admin server (mini's maintenance worker) may still be starting.
    served = {port for name, port in s3.ports.items() if not name.startswith("admin")}
    assert {port for _, port in listening} >= served
    assert {port for _, port in listening} <= set(s3.ports.values()), listening
    assert {ip for ip, _ in listening} == {"127.0.0.1"}, listening


def test_a_paused_server_answers_nothing_until_resumed(s3: testing.S3Server) -> None:
    s3.pause()
    try:
        with pytest.raises(TimeoutError):
            s3.request("GET", "/", timeout=0.5)
    finally:
        s3.resume()
    assert s3.request("GET", "/").status == 200


def test_a_restart_keeps_ports_and_data(tmp_path: Path) -> None:
    s3 = start_s3(tmp_path)
    pid, endpoint = s3.pid, s3.endpoint
    try:
        bucket = _bucket_with_blob(s3)
        etag = s3.request("HEAD", f"/{bucket}/dir/blob.bin").headers["etag"]
        s3.stop()
        assert not Path(f"/proc/{pid}").exists(), "the stopped server's process is left"
        with pytest.raises(ConnectionRefusedError):
            s3.request("GET", "/", timeout=0.5)
        started = time.monotonic()
        # Back for reads at once; writes wait out the master's warm-up (start's docstring).
        s3.start(writable=False)
        print(f"restarted (readable) in {time.monotonic() - started:.1f} s")
        assert s3.endpoint == endpoint
        assert s3.pid != pid
        head = s3.request("HEAD", f"/{bucket}/dir/blob.bin")
        assert head.status == 200
        assert head.headers["etag"] == etag
        with s3.filesystem().open_input_file(f"{bucket}/dir/blob.bin") as f:
            assert f.read_at(8, 4 * 1024 * 1024) == BLOB[4 * 1024 * 1024 : 4 * 1024 * 1024 + 8]
        # New writes work after the restart too, once the warm-up is over.
        s3.put_object(bucket, "after.bin", b"after")
        print(f"written {time.monotonic() - started:.1f} s after the restart")
        assert s3.request("GET", f"/{bucket}/after.bin").body == b"after"
        assert s3.request("GET", f"/{bucket}/dir/blob.bin").body == BLOB
        pid = s3.pid
    finally:
        s3.stop()
    assert not Path(f"/proc/{pid}").exists()


def test_a_missing_binary_fails_with_how_to_build_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUIVER_S3_SERVER_BIN", str(tmp_path / "no-such-weed"))
    with pytest.raises(pytest.fail.Exception, match=r"scripts/install-s3-server\.sh"):
        start_s3(tmp_path)
