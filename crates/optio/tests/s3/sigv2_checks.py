"""SigV2 against Optio's S3 gateway: refused by default; with --allow-sigv2, taken only when
fresh (dated within 15 minutes, presigned for at most 7 days) and rightly signed. Requests are
signed here with the standard library (HMAC-SHA1, as AWS's "Signing and authenticating REST
requests" says), so that dates and expiries can be anything; with boto3 installed, botocore's
own SigV2 signers ('s3', 's3-query') are checked too, and browser forms (SigV4 taken, SigV2
refused).

Usage: sigv2_checks.py ENDPOINT ACCESS_KEY SECRET_KEY BUCKET refused|allowed
The bucket must hold the object `k` with the body `original`. Exits non-zero (with the failed
check) on any difference.
"""
import base64
import email.utils
import hashlib
import hmac
import http.client
import sys
import time
import urllib.parse

endpoint, access, secret, bucket, mode = sys.argv[1:6]
url = urllib.parse.urlsplit(endpoint)
NOW = time.time()
DATE_2001 = "Mon, 01 Jan 2001 00:00:00 GMT"


def http_date(at):
    return email.utils.formatdate(at, usegmt=True)


def sign(text):
    digest = hmac.new(secret.encode(), text.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def send(method, path, headers=None, body=b""):
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request(method, path, body=body, headers=headers or {})
    answer = conn.getresponse()
    data = answer.read()
    conn.close()
    return answer.status, data


def code_of(data):
    text = data.decode(errors="replace")
    if "<Code>" not in text:
        return None, text
    return text.split("<Code>")[1].split("</Code>")[0], text


def header_signed(method, key, date, body=b"", amz_date=None, signature=None):
    """A request signed in its Authorization header."""
    headers = {"Date": date, "Content-Type": "text/plain"} if body else {"Date": date}
    amz = ""
    if amz_date is not None:
        headers["x-amz-date"] = amz_date
        amz = f"x-amz-date:{amz_date}\n"
    path = f"/{bucket}/{key}"
    shown_date = "" if amz_date is not None else date
    text = f"{method}\n\n{headers.get('Content-Type', '')}\n{shown_date}\n{amz}{path}"
    headers["Authorization"] = f"AWS {access}:{signature or sign(text)}"
    return send(method, path, headers, body)


def presigned(key, expires, name="Signature"):
    """A presigned GET; `name` is written into the query as it is (it may be encoded)."""
    path = f"/{bucket}/{key}"
    signature = urllib.parse.quote(sign(f"GET\n\n\n{expires}\n{path}"), safe="")
    query = f"AWSAccessKeyId={urllib.parse.quote(access)}&Expires={expires}&{name}={signature}"
    return send("GET", f"{path}?{query}")


def expect(what, result, status, code=None, contains=None):
    got_status, data = result
    got_code, text = code_of(data)
    assert got_status == status, f"{what}: {got_status} {text[:400]}"
    if code is not None:
        assert got_code == code, f"{what}: {got_code} {text[:400]}"
    if contains is not None:
        assert contains in text, f"{what}: {text[:400]}"
    return data


def form_post(fields, file_body=b"from a form"):
    boundary = "optioformboundary12345"
    parts = []
    for name, value in fields:
        parts.append(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n"
                     .encode() + (value if isinstance(value, bytes) else value.encode()) + b"\r\n")
    parts.append(f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f.txt\"\r\n"
                 "Content-Type: text/plain\r\n\r\n".encode() + file_body + f"\r\n--{boundary}--\r\n".encode())
    body = b"".join(parts)
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    return send("POST", f"/{bucket}", headers, body)


def v2_form(key):
    policy = base64.b64encode(
        ('{"expiration": "2100-01-01T00:00:00Z", "conditions": [{"bucket": "%s"}, '
         '["starts-with", "$key", ""]]}' % bucket).encode())
    signature = base64.b64encode(hmac.new(secret.encode(), policy, hashlib.sha1).digest())
    return form_post([("key", key), ("AWSAccessKeyId", access), ("policy", policy),
                      ("signature", signature)])


try:
    import boto3
    from botocore.config import Config
except ImportError:
    boto3 = None


def boto3_client(signature_version):
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=access, aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, signature_version=signature_version,
                      retries={"max_attempts": 1}))


def v4_form_works(key):
    """A browser form signed with SigV4 (boto3's presigned POST) is taken, its fields read
    before s3s sees them."""
    post = boto3_client("s3v4").generate_presigned_post(bucket, key, ExpiresIn=300)
    expect("a SigV4 form", form_post(list(post["fields"].items())), 204)
    got = boto3_client("s3v4").get_object(Bucket=bucket, Key=key)["Body"].read()
    assert got == b"from a form", got


if mode == "refused":
    refused = "AccessDenied"
    expect("a SigV2 GET dated 2001", header_signed("GET", "k", DATE_2001), 403, refused)
    expect("a SigV2 PUT dated 2001", header_signed("PUT", "k", DATE_2001, b"replaced"), 403, refused)
    expect("a fresh SigV2 GET", header_signed("GET", "k", http_date(NOW)), 403, refused, "--allow-sigv2")
    expect("a SigV2 PUT", header_signed("PUT", "new", http_date(NOW), b"new"), 403, refused)
    expect("a SigV2 URL valid until 2100", presigned("k", 4102444800), 403, refused, "--allow-sigv2")
    expect("a SigV2 URL, its name encoded", presigned("k", int(NOW) + 300, "%53ignature"), 403, refused)
    expect("a SigV2 form", v2_form("form-v2"), 403, refused)
    if boto3 is not None:
        try:
            boto3_client("s3").get_object(Bucket=bucket, Key="k")
            raise AssertionError("botocore's SigV2 was taken")
        except boto3.session.botocore.exceptions.ClientError as e:
            assert e.response["Error"]["Code"] == refused, e.response
        v4_form_works("form-v4")
elif mode == "allowed":
    got = expect("a fresh SigV2 GET", header_signed("GET", "k", http_date(NOW)), 200)
    assert got == b"original", got
    expect("a fresh SigV2 PUT", header_signed("PUT", "v2put", http_date(NOW), b"put with v2"), 200)
    got = expect("its GET", header_signed("GET", "v2put", http_date(NOW)), 200)
    assert got == b"put with v2", got
    # Within the skew on either side; outside it, refused.
    expect("a SigV2 GET 10 minutes slow", header_signed("GET", "k", http_date(NOW - 600)), 200)
    expect("a SigV2 GET 10 minutes fast", header_signed("GET", "k", http_date(NOW + 600)), 200)
    expect("a SigV2 GET dated 2001", header_signed("GET", "k", DATE_2001), 403, "RequestTimeTooSkewed")
    expect("a SigV2 PUT dated 2001", header_signed("PUT", "k", DATE_2001, b"replaced"), 403,
           "RequestTimeTooSkewed")
    expect("a SigV2 GET 20 minutes slow", header_signed("GET", "k", http_date(NOW - 1200)), 403,
           "RequestTimeTooSkewed")
    expect("x-amz-date dated 2001 beside a fresh Date",
           header_signed("GET", "k", http_date(NOW), amz_date=DATE_2001), 403, "RequestTimeTooSkewed")
    expect("a fresh x-amz-date", header_signed("GET", "k", DATE_2001, amz_date=http_date(NOW)), 200)
    expect("a wrong SigV2 signature",
           header_signed("GET", "k", http_date(NOW), signature=sign("something else")), 403,
           "SignatureDoesNotMatch")
    got = expect("a SigV2 URL valid 5 minutes", presigned("k", int(NOW) + 300), 200)
    assert got == b"original", got
    expect("a SigV2 URL valid until 2100", presigned("k", 4102444800), 403, "AccessDenied", "7 days")
    expect("a SigV2 URL valid 8 days", presigned("k", int(NOW) + 8 * 86400), 403, "AccessDenied")
    expect("an expired SigV2 URL", presigned("k", int(NOW) - 60), 403, "AccessDenied", "expired")
    expect("a SigV2 form, even allowed", v2_form("form-v2"), 403, "AccessDenied", "SigV4")
    if boto3 is not None:
        s3 = boto3_client("s3")
        s3.put_object(Bucket=bucket, Key="boto-v2", Body=b"botocore signs v2")
        assert s3.get_object(Bucket=bucket, Key="boto-v2")["Body"].read() == b"botocore signs v2"
        assert s3.head_object(Bucket=bucket, Key="boto-v2")["ContentLength"] == 17
        # (Not a listing: botocore signs a bucket's resource as "/BUCKET/", s3s as "/BUCKET".)
        link = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "boto-v2"},
                                         ExpiresIn=300)
        assert "Signature=" in link and "X-Amz-" not in link, link
        parts = urllib.parse.urlsplit(link)
        got = expect("botocore's SigV2 URL", send("GET", f"{parts.path}?{parts.query}"), 200)
        assert got == b"botocore signs v2", got
        v4_form_works("form-v4")
else:
    raise SystemExit(f"unknown mode {mode}")
print("sigv2 checks passed")
