"""What boto3 users do with Optio's S3 gateway: ranges, conditional requests, copies, metadata,
errors, multipart with a copied part, and paging through 10,000 keys with a delimiter.

Usage: boto3_checks.py ENDPOINT ACCESS_KEY SECRET_KEY BUCKET
Exits non-zero (with the failed check) on any difference from S3's behaviour.
"""
import hashlib
import sys
from concurrent.futures import ThreadPoolExecutor

import boto3
import botocore
from botocore.config import Config

endpoint, access, secret, bucket = sys.argv[1:5]
s3 = boto3.client(
    "s3", endpoint_url=endpoint, aws_access_key_id=access, aws_secret_access_key=secret,
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2},
                  max_pool_connections=32),
)


def status_of(call, **kwargs):
    try:
        call(**kwargs)
    except botocore.exceptions.ClientError as e:
        return int(e.response["ResponseMetadata"]["HTTPStatusCode"]), e.response["Error"]["Code"]
    return 200, None


s3.create_bucket(Bucket=bucket)

# Ranges.
data = bytes(range(256)) * 400  # 102,400 bytes
put = s3.put_object(Bucket=bucket, Key="ranged", Body=data, ContentType="application/x-test",
                    Metadata={"Color": "blue"})
etag = put["ETag"]
assert etag.strip('"') == hashlib.md5(data).hexdigest(), etag
for header, expected in [("bytes=0-9", data[0:10]), ("bytes=100-", data[100:]),
                         ("bytes=-7", data[-7:]), ("bytes=102000-200000", data[102000:])]:
    got = s3.get_object(Bucket=bucket, Key="ranged", Range=header)
    assert got["Body"].read() == expected, header
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206, header
assert status_of(s3.get_object, Bucket=bucket, Key="ranged", Range="bytes=500000-") == (416, "InvalidRange")

# GetObjectAttributes writes the ETag bare, as S3 does there.
attributes = s3.get_object_attributes(Bucket=bucket, Key="ranged",
                                      ObjectAttributes=["ETag", "ObjectSize"])
assert attributes["ETag"] == etag.strip('"'), attributes
assert attributes["ObjectSize"] == len(data), attributes

# Metadata and content headers.
head = s3.head_object(Bucket=bucket, Key="ranged")
assert head["ContentLength"] == len(data) and head["ContentType"] == "application/x-test", head
assert head["Metadata"] == {"color": "blue"}, head["Metadata"]

# Conditional requests.
assert s3.get_object(Bucket=bucket, Key="ranged", IfMatch=etag)["Body"].read() == data
assert status_of(s3.get_object, Bucket=bucket, Key="ranged", IfMatch='"0000"') == (412, "PreconditionFailed")
assert status_of(s3.get_object, Bucket=bucket, Key="ranged", IfNoneMatch=etag)[0] == 304
modified = head["LastModified"]
assert status_of(s3.get_object, Bucket=bucket, Key="ranged", IfModifiedSince=modified)[0] == 304
assert status_of(s3.get_object, Bucket=bucket, Key="ranged", IfUnmodifiedSince="Sat, 01 Jan 2000 00:00:00 GMT") == (412, "PreconditionFailed")
# A conditional PUT (botocore knows the parameter from 1.35 on; older ones get the header).
extra = {}
def if_none_match(request, **kwargs):
    for name, value in extra.items():
        request.headers[name] = value
s3.meta.events.register("before-sign.s3.PutObject", if_none_match)
extra["If-None-Match"] = "*"
assert status_of(s3.put_object, Bucket=bucket, Key="ranged", Body=b"x") == (412, "PreconditionFailed")
# It succeeds at its first attempt: a refused request's answer, given before its body was read,
# closes the connection and says so (before, botocore could send this PUT on that connection
# and read the refusal's stale 412 for it).
s3.put_object(Bucket=bucket, Key="fresh", Body=b"x")
assert s3.get_object(Bucket=bucket, Key="fresh")["Body"].read() == b"x"
extra.clear()
s3.delete_object(Bucket=bucket, Key="fresh")

# A body sent chunked with no length at all (what `curl -T -` sends), through a presigned URL.
import urllib.request
signer = boto3.client(
    "s3", endpoint_url=endpoint, aws_access_key_id=access, aws_secret_access_key=secret,
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"),
)
url = signer.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "chunked"},
                                    ExpiresIn=300)
pieces = [b"sent ", b"in ", b"chunks " * 3000]
request = urllib.request.Request(url, data=iter(pieces), method="PUT")
try:
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200, answer.status
except urllib.error.HTTPError as e:
    raise AssertionError(f"chunked PUT: {e.code} {e.read()[:500]!r} {url}")
got = s3.get_object(Bucket=bucket, Key="chunked")["Body"].read()
assert got == b"".join(pieces), len(got)
s3.delete_object(Bucket=bucket, Key="chunked")

# Such bodies are read before their signature can be checked; the gateway's budget for them
# counts the bytes they have sent, so four stalled after a few bytes block no fifth (the budget
# spent by large stalled bodies, and its time limit, are tested in s3_security).
import socket
import urllib.parse


def chunked_url(key):
    return signer.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": key},
                                         ExpiresIn=300)


def stalled_chunked_put(key):
    parts = urllib.parse.urlsplit(chunked_url(key))
    conn = socket.create_connection((parts.hostname, parts.port))
    conn.sendall((f"PUT {parts.path}?{parts.query} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n").encode())
    return conn


held = [stalled_chunked_put(f"stalled{i}") for i in range(4)]
with urllib.request.urlopen(urllib.request.Request(chunked_url("fifth"), data=iter([b"x"]),
                                                   method="PUT"), timeout=30) as answer:
    assert answer.status == 200, answer.status
for conn in held:
    conn.close()
s3.delete_object(Bucket=bucket, Key="fifth")

# S3's additional checksums: stored, returned, and a wrong one refuses the PUT.
import base64
sha = base64.b64encode(hashlib.sha256(b"summed data").digest()).decode()
put = s3.put_object(Bucket=bucket, Key="summed", Body=b"summed data", ChecksumAlgorithm="SHA256")
assert put.get("ChecksumSHA256") == sha, put
head = s3.head_object(Bucket=bucket, Key="summed", ChecksumMode="ENABLED")
assert head.get("ChecksumSHA256") == sha, head
wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
assert status_of(s3.put_object, Bucket=bucket, Key="summed", Body=b"summed data",
                 ChecksumAlgorithm="SHA256", ChecksumSHA256=wrong) == (400, "BadDigest")
assert s3.get_object(Bucket=bucket, Key="summed")["Body"].read() == b"summed data"
s3.delete_object(Bucket=bucket, Key="summed")

# Copies: same metadata by default, replaced on request.
s3.copy_object(Bucket=bucket, Key="copied", CopySource={"Bucket": bucket, "Key": "ranged"})
copied = s3.get_object(Bucket=bucket, Key="copied")
assert copied["Body"].read() == data and copied["Metadata"] == {"color": "blue"}
s3.copy_object(Bucket=bucket, Key="copied", CopySource={"Bucket": bucket, "Key": "ranged"},
               MetadataDirective="REPLACE", Metadata={"shape": "round"}, ContentType="text/plain")
head = s3.head_object(Bucket=bucket, Key="copied")
assert head["Metadata"] == {"shape": "round"} and head["ContentType"] == "text/plain", head

# Errors.
assert status_of(s3.get_object, Bucket=bucket, Key="absent") == (404, "NoSuchKey")
assert status_of(s3.list_objects_v2, Bucket="no-such-bucket-here") == (404, "NoSuchBucket")
assert status_of(s3.delete_bucket, Bucket=bucket) == (409, "BucketNotEmpty")

# Multipart with a copied part: 5 MiB + a range of the object above.
part1 = b"a" * (5 << 20)
upload = s3.create_multipart_upload(Bucket=bucket, Key="multi")["UploadId"]
e1 = s3.upload_part(Bucket=bucket, Key="multi", UploadId=upload, PartNumber=1, Body=part1)["ETag"]
e2 = s3.upload_part_copy(Bucket=bucket, Key="multi", UploadId=upload, PartNumber=2,
                         CopySource={"Bucket": bucket, "Key": "ranged"},
                         CopySourceRange="bytes=10-1009")["CopyPartResult"]["ETag"]
parts = s3.list_parts(Bucket=bucket, Key="multi", UploadId=upload)["Parts"]
assert [p["PartNumber"] for p in parts] == [1, 2] and parts[1]["Size"] == 1000, parts
uploads = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
assert [(u["Key"], u["UploadId"]) for u in uploads] == [("multi", upload)], uploads
done = s3.complete_multipart_upload(
    Bucket=bucket, Key="multi", UploadId=upload,
    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
whole = part1 + data[10:1010]
md5s = hashlib.md5(hashlib.md5(part1).digest() + hashlib.md5(data[10:1010]).digest()).hexdigest()
assert done["ETag"].strip('"') == f"{md5s}-2", done["ETag"]
assert s3.get_object(Bucket=bucket, Key="multi")["Body"].read() == whole
got = s3.get_object(Bucket=bucket, Key="multi", Range=f"bytes={(5 << 20) - 3}-{(5 << 20) + 2}")
assert got["Body"].read() == whole[(5 << 20) - 3:(5 << 20) + 3]
assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
# A part sent twice and named twice (the second upload replaced the first): one part, the
# second's bytes, and the ETag counts it once.
again = s3.create_multipart_upload(Bucket=bucket, Key="again")["UploadId"]
first = s3.upload_part(Bucket=bucket, Key="again", UploadId=again, PartNumber=1, Body=b"first")["ETag"]
second = s3.upload_part(Bucket=bucket, Key="again", UploadId=again, PartNumber=1, Body=b"second")["ETag"]
done = s3.complete_multipart_upload(
    Bucket=bucket, Key="again", UploadId=again,
    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": first}, {"PartNumber": 1, "ETag": second}]})
expected = hashlib.md5(hashlib.md5(b"second").digest()).hexdigest() + "-1"
assert done["ETag"].strip('"') == expected, (done["ETag"], expected)
assert s3.get_object(Bucket=bucket, Key="again")["Body"].read() == b"second"
s3.delete_object(Bucket=bucket, Key="again")
small = s3.create_multipart_upload(Bucket=bucket, Key="too-small")["UploadId"]
t1 = s3.upload_part(Bucket=bucket, Key="too-small", UploadId=small, PartNumber=1, Body=b"x")["ETag"]
t2 = s3.upload_part(Bucket=bucket, Key="too-small", UploadId=small, PartNumber=2, Body=b"y")["ETag"]
assert status_of(s3.complete_multipart_upload, Bucket=bucket, Key="too-small", UploadId=small,
                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": t1}, {"PartNumber": 2, "ETag": t2}]}) == (400, "EntityTooSmall")
s3.abort_multipart_upload(Bucket=bucket, Key="too-small", UploadId=small)
assert status_of(s3.list_parts, Bucket=bucket, Key="too-small", UploadId=small) == (404, "NoSuchUpload")

# Paging through 10,000 keys with a delimiter: 100 "directories" of 100 keys, and 100 keys at
# the top.
for key in ["ranged", "copied", "multi"]:
    s3.delete_object(Bucket=bucket, Key=key)
keys = [f"dir{d:03}/k{i:03}" for d in range(99) for i in range(100)] + [f"top{i:03}" for i in range(100)]
with ThreadPoolExecutor(32) as pool:
    list(pool.map(lambda k: s3.put_object(Bucket=bucket, Key=k, Body=k.encode()), keys))
seen_keys, seen_prefixes, pages = [], [], 0
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Delimiter="/", PaginationConfig={"PageSize": 37}):
    pages += 1
    seen_keys += [o["Key"] for o in page.get("Contents", [])]
    seen_prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
assert seen_prefixes == [f"dir{d:03}/" for d in range(99)], seen_prefixes[:5]
assert seen_keys == [f"top{i:03}" for i in range(100)], seen_keys[:5]
assert pages == (99 + 100 + 36) // 37, pages
flat = []
for page in s3.get_paginator("list_objects").paginate(Bucket=bucket, Prefix="dir05", PaginationConfig={"PageSize": 250}):
    flat += [o["Key"] for o in page.get("Contents", [])]
assert flat == sorted(k for k in keys if k.startswith("dir05")), len(flat)
after = s3.list_objects_v2(Bucket=bucket, StartAfter="dir098/k050", MaxKeys=3)
assert [o["Key"] for o in after["Contents"]] == ["dir098/k051", "dir098/k052", "dir098/k053"]
all_keys = []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
    all_keys += [o["Key"] for o in page.get("Contents", [])]
assert all_keys == sorted(keys), len(all_keys)

# DeleteObjects, then the bucket.
for start in range(0, len(keys), 1000):
    chunk = keys[start:start + 1000]
    out = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in chunk]})
    assert len(out.get("Deleted", [])) == len(chunk) and not out.get("Errors"), out.get("Errors")
assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
s3.delete_bucket(Bucket=bucket)
assert status_of(s3.head_bucket, Bucket=bucket)[0] == 404
print("boto3 checks passed")
