//! AWS Signature Version 2: refused unless the gateway runs with `--allow-sigv2`, and then
//! checked here, before s3s sees the request.
//!
//! s3s accepts SigV2 (an `Authorization: AWS KEY:SIGNATURE` header, or `AWSAccessKeyId`,
//! `Expires` and `Signature` in the query) with no check of the request's date, presigned URLs
//! valid for any time ahead, and compares the signatures with `!=`, whose time tells an
//! attacker how much of a guessed signature is right. So the gateway takes no SigV2 request
//! to s3s it has not verified itself:
//!
//! * by default every SigV2 request is refused, `403 AccessDenied` saying why;
//! * with `--allow-sigv2` (for old clients), a header-signed request must be dated (`Date`, or
//!   `x-amz-date`, which then takes its place) within [`SKEW_MAX`] of the gateway's clock, a
//!   presigned URL must expire within [`PRESIGNED_MAX`] from now (as SigV4's are), and the
//!   signature (HMAC-SHA1 of the string to sign, as AWS's "Signing and authenticating REST
//!   requests" defines it) is compared in constant time. Only then does s3s see the request —
//!   whose signature it checks again, with `!=`, on a request already known to be genuine, so
//!   that comparison's time tells nothing.
//!
//! SigV2 browser forms (a `POST` with a `signature` field) are refused even with
//! `--allow-sigv2`, before s3s reads them ([`crate::buffered`]).

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use s3s::auth::S3Auth;
use s3s::host::S3Host;
use s3s::{S3Error, S3ErrorCode};
use subtle::ConstantTimeEq;
use time::OffsetDateTime;

/// Largest difference between a SigV2 request's date and the gateway's clock.
pub const SKEW_MAX: time::Duration = time::Duration::minutes(15);
/// Longest time ahead a SigV2 presigned URL may expire (SigV4's `X-Amz-Expires` limit).
pub const PRESIGNED_MAX: time::Duration = time::Duration::days(7);

/// The query parameters that are part of the resource a SigV2 signature covers (the
/// sub-resources and the response overrides).
const SUB_RESOURCES: &[&str] = &[
    "accelerate",
    "acl",
    "analytics",
    "cors",
    "defaultObjectAcl",
    "delete",
    "inventory",
    "lifecycle",
    "location",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "partNumber",
    "policy",
    "replication",
    "requestPayment",
    "response-cache-control",
    "response-content-disposition",
    "response-content-encoding",
    "response-content-language",
    "response-content-type",
    "response-expires",
    "restore",
    "select",
    "select-type",
    "storageClass",
    "tagging",
    "torrent",
    "uploadId",
    "uploads",
    "versionId",
    "versioning",
    "versions",
    "website",
];

/// A SigV2-signed request's credentials.
#[derive(Debug, PartialEq, Eq)]
enum Signed {
    /// `Authorization: AWS KEY:SIGNATURE`.
    Header { access_key: String, signature: String },
    /// `?AWSAccessKeyId=KEY&Expires=SECONDS&Signature=SIGNATURE`.
    Query { access_key: String, expires: String, signature: String },
}

/// Whether s3s would take `request` as SigV2-signed: a `Signature` query parameter (its name
/// decoded), or an `Authorization` header starting `AWS `.
pub(crate) fn is_sigv2<B>(request: &http::Request<B>, query: &[(String, String)]) -> bool {
    query.iter().any(|(name, _)| name == "Signature")
        || request
            .headers()
            .get_all(http::header::AUTHORIZATION)
            .iter()
            .any(|v| v.as_bytes().starts_with(b"AWS "))
}

/// The refusal of a SigV2 request when SigV2 is not allowed.
pub(crate) fn refused() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::AccessDenied,
        "AWS Signature Version 2 is refused by this gateway: sign with SigV4 (every current SDK \
         and CLI does), or start the gateway with --allow-sigv2 for old clients",
    )
}

/// Checks a SigV2 request (one [`is_sigv2`] found) as the module's documentation says, at
/// `now`.
pub(crate) async fn verify<B>(
    request: &http::Request<B>,
    query: &[(String, String)],
    host: Option<&dyn S3Host>,
    auth: &dyn S3Auth,
    now: OffsetDateTime,
) -> Result<(), S3Error> {
    let signed = credentials(request.headers(), query)?;
    let (access_key, sent) = match &signed {
        Signed::Header { access_key, signature } => {
            fresh(request.headers(), now)?;
            (access_key, signature)
        }
        Signed::Query { access_key, expires, signature } => {
            unexpired(expires, now)?;
            (access_key, signature)
        }
    };
    // An unknown key is InvalidAccessKeyId, as s3s answers it.
    let secret = auth.get_secret_key(access_key).await?;
    let bucket = virtual_host_bucket(request, host);
    let text = string_to_sign(request, query, bucket.as_deref(), &signed);
    let expected = signature(secret.expose(), &text);
    if bool::from(expected.as_bytes().ct_eq(sent.as_bytes())) {
        Ok(())
    } else {
        Err(S3Error::new(S3ErrorCode::SignatureDoesNotMatch))
    }
}

/// The access key and signature, each given once.
fn credentials(headers: &http::HeaderMap, query: &[(String, String)]) -> Result<Signed, S3Error> {
    let malformed = |what: &str| {
        S3Error::with_message(S3ErrorCode::AccessDenied, format!("a SigV2 request needs {what}"))
    };
    if query.iter().any(|(name, _)| name == "Signature") {
        let one = |name: &str| -> Result<String, S3Error> {
            let mut values = query.iter().filter(|(n, _)| n == name).map(|(_, v)| v);
            match (values.next(), values.next()) {
                (Some(value), None) => Ok(value.clone()),
                _ => Err(malformed(&format!("exactly one {name} parameter"))),
            }
        };
        // s3s decodes the signature once more after the query's decoding (some clients
        // encode it twice); so does this check, to compare what s3s will.
        let signature = one("Signature")?;
        let signature = percent_decode(&signature).unwrap_or(signature);
        return Ok(Signed::Query {
            access_key: one("AWSAccessKeyId")?,
            expires: one("Expires")?,
            signature,
        });
    }
    let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(malformed("exactly one Authorization header"));
    };
    let value = value.to_str().map_err(|_| malformed("an ASCII Authorization header"))?;
    let (access_key, signature) = value
        .strip_prefix("AWS ")
        .and_then(|v| v.split_once(':'))
        .ok_or_else(|| malformed("Authorization: AWS ACCESS_KEY:SIGNATURE"))?;
    Ok(Signed::Header { access_key: access_key.to_string(), signature: signature.to_string() })
}

/// `%XX` decoded (`+` left as it is); `None` when that is not UTF-8 or a `%` is not followed
/// by two hexadecimal digits.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = std::str::from_utf8(bytes.get(at + 1..at + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A header-signed request's date (its `x-amz-date`, else its `Date`) is within [`SKEW_MAX`]
/// of `now`.
fn fresh(headers: &http::HeaderMap, now: OffsetDateTime) -> Result<(), S3Error> {
    let denied = |message: String| Err(S3Error::with_message(S3ErrorCode::AccessDenied, message));
    let value = match (one_header(headers, "x-amz-date"), one_header(headers, "date")) {
        (Some(Ok(value)), _) | (None, Some(Ok(value))) => value,
        (Some(Err(())), _) | (None, Some(Err(()))) => {
            return denied("a SigV2 request's date must be one ASCII header".into());
        }
        (None, None) => return denied("a SigV2 request needs a Date or x-amz-date header".into()),
    };
    let Some(date) = parse_date(value) else {
        return denied(format!("cannot read the SigV2 request's date {value:?} (RFC 1123)"));
    };
    if (now - date).abs() > SKEW_MAX {
        return Err(S3Error::with_message(
            S3ErrorCode::RequestTimeTooSkewed,
            format!(
                "the request's date {value} is more than {} minutes from the gateway's clock",
                SKEW_MAX.whole_minutes()
            ),
        ));
    }
    Ok(())
}

/// The header's value when given once (`Err` when given more than once, or not ASCII).
fn one_header<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<Result<&'a str, ()>> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return Some(Err(()));
    }
    Some(first.to_str().map_err(|_| ()))
}

/// An HTTP date (RFC 1123, `GMT` or a numeric zone, as RFC 2822 allows), or ISO 8601's basic
/// form (`20260101T000000Z`).
fn parse_date(value: &str) -> Option<OffsetDateTime> {
    use time::format_description::well_known::Rfc2822;
    let value = value.trim();
    if let Ok(date) = OffsetDateTime::parse(value, &Rfc2822) {
        return Some(date);
    }
    if let Some(gmt) = value.strip_suffix(" GMT").or_else(|| value.strip_suffix(" UTC"))
        && let Ok(date) = OffsetDateTime::parse(&format!("{gmt} +0000"), &Rfc2822)
    {
        return Some(date);
    }
    let basic = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    time::PrimitiveDateTime::parse(value, basic).ok().map(|d| d.assume_utc())
}

/// A presigned URL's `Expires` (seconds since 1970) is not past, and not more than
/// [`PRESIGNED_MAX`] ahead.
fn unexpired(expires: &str, now: OffsetDateTime) -> Result<(), S3Error> {
    let denied = |message: String| S3Error::with_message(S3ErrorCode::AccessDenied, message);
    let at = expires
        .parse::<i64>()
        .ok()
        .and_then(|seconds| OffsetDateTime::from_unix_timestamp(seconds).ok())
        .ok_or_else(|| {
            denied(format!("Expires={expires:?} is not a time in seconds since 1970"))
        })?;
    if at < now {
        return Err(denied("Request has expired".into()));
    }
    if at - now > PRESIGNED_MAX {
        return Err(denied(format!(
            "a SigV2 presigned URL may be valid for at most {} days: Expires must be at most \
             {} seconds from now",
            PRESIGNED_MAX.whole_days(),
            PRESIGNED_MAX.whole_seconds()
        )));
    }
    Ok(())
}

/// The bucket a virtual-hosted–style request names in its host, as s3s reads it (none for an
/// address, or without `--domain`).
fn virtual_host_bucket<B>(request: &http::Request<B>, host: Option<&dyn S3Host>) -> Option<String> {
    let host_parser = host?;
    let value = match request.headers().get(http::header::HOST) {
        Some(value) => value.to_str().ok()?,
        None => request.uri().authority()?.as_str(),
    };
    let address =
        value.parse::<std::net::SocketAddr>().is_ok() || value.parse::<std::net::IpAddr>().is_ok();
    if address {
        return None;
    }
    host_parser.parse_host_header(value).ok()?.bucket().map(str::to_string)
}

/// The string a SigV2 signature signs: the method, `Content-MD5`, `Content-Type`, the date
/// (empty when `x-amz-date` is sent) or the URL's `Expires`, the `x-amz-*` headers
/// (lower-case, sorted, values of one name joined by commas), and the resource (the bucket
/// of a virtual host, the path as sent, and the sub-resources of the query, sorted).
fn string_to_sign<B>(
    request: &http::Request<B>,
    query: &[(String, String)],
    bucket: Option<&str>,
    signed: &Signed,
) -> String {
    let headers = request.headers();
    let header = |name: &str| match one_header(headers, name) {
        Some(Ok(value)) => value.trim().to_string(),
        _ => String::new(),
    };
    let mut text = format!(
        "{}\n{}\n{}\n",
        request.method().as_str(),
        header("content-md5"),
        header("content-type")
    );
    match signed {
        Signed::Header { .. } if headers.contains_key("x-amz-date") => {}
        Signed::Header { .. } => text.push_str(&header("date")),
        Signed::Query { expires, .. } => text.push_str(expires),
    }
    text.push('\n');
    let mut amz: Vec<&str> = headers
        .keys()
        .map(http::HeaderName::as_str)
        .filter(|name| name.starts_with("x-amz-"))
        .collect();
    amz.sort_unstable();
    for name in amz {
        let values: Vec<&str> =
            headers.get_all(name).iter().map(|v| v.to_str().unwrap_or_default().trim()).collect();
        text.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    if let Some(bucket) = bucket {
        text.push('/');
        text.push_str(bucket);
    }
    text.push_str(request.uri().path());
    let mut sub: Vec<&(String, String)> =
        query.iter().filter(|(name, _)| SUB_RESOURCES.contains(&name.as_str())).collect();
    sub.sort_by(|a, b| a.0.cmp(&b.0));
    for (i, (name, value)) in sub.into_iter().enumerate() {
        text.push(if i == 0 { '?' } else { '&' });
        text.push_str(name);
        if !value.is_empty() {
            text.push('=');
            text.push_str(value);
        }
    }
    text
}

/// Base64 of HMAC-SHA1 under the secret.
fn signature(secret: &str, text: &str) -> String {
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(secret.as_bytes())
        .expect("HMAC takes keys of any length");
    mac.update(text.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> OffsetDateTime {
        parse_date(text).expect("a date")
    }

    fn get(headers: &[(&str, &str)], uri: &str) -> http::Request<()> {
        let mut request = http::Request::builder().method("GET").uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap()
    }

    /// AWS's own example (the "Object GET" of "Signing and authenticating REST requests"),
    /// whose signature was computed apart, with Python's `hmac`.
    #[test]
    fn the_string_to_sign_and_signature_of_aws_example() {
        let request = get(
            &[
                ("host", "awsexamplebucket1.s3.us-west-1.amazonaws.com"),
                ("date", "Tue, 27 Mar 2007 19:36:42 +0000"),
            ],
            "/photos/puppy.jpg",
        );
        let signed =
            Signed::Header { access_key: "AKIAIOSFODNN7EXAMPLE".into(), signature: String::new() };
        let text = string_to_sign(&request, &[], Some("awsexamplebucket1"), &signed);
        assert_eq!(
            text,
            "GET\n\n\nTue, 27 Mar 2007 19:36:42 +0000\n/awsexamplebucket1/photos/puppy.jpg"
        );
        assert_eq!(
            signature("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", &text),
            "qgk2+6Sv9/oM7G3qLEjTH1a1l1g="
        );
    }

    #[test]
    fn amz_headers_and_sub_resources_are_canonical() {
        let request = get(
            &[
                ("x-amz-meta-b", " 2 "),
                ("X-Amz-Date", "Tue, 27 Mar 2007 19:36:42 +0000"),
                ("x-amz-meta-b", "3"),
                ("date", "ignored"),
                ("content-type", "text/plain"),
            ],
            "/b/k?uploadId=u1&prefix=p&acl",
        );
        let query = vec![
            ("uploadId".to_string(), "u1".to_string()),
            ("prefix".to_string(), "p".to_string()),
            ("acl".to_string(), String::new()),
        ];
        let signed = Signed::Header { access_key: "A".into(), signature: String::new() };
        assert_eq!(
            string_to_sign(&request, &query, None, &signed),
            "GET\n\ntext/plain\n\nx-amz-date:Tue, 27 Mar 2007 19:36:42 +0000\nx-amz-meta-b:2,3\n/b/k?acl&uploadId=u1"
        );
        let presigned = Signed::Query {
            access_key: "A".into(),
            expires: "1175139620".into(),
            signature: String::new(),
        };
        let plain = get(&[], "/b/k");
        assert_eq!(string_to_sign(&plain, &[], None, &presigned), "GET\n\n\n1175139620\n/b/k");
    }

    #[test]
    fn header_requests_must_be_dated_within_the_skew() {
        let now = at("Tue, 27 Mar 2007 19:36:42 GMT");
        let dated = |date: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert("date", http::HeaderValue::from_str(date).unwrap());
            fresh(&headers, now)
        };
        assert!(dated("Tue, 27 Mar 2007 19:36:42 GMT").is_ok());
        assert!(dated("Tue, 27 Mar 2007 19:50:00 +0000").is_ok());
        assert!(dated("20070327T192200Z").is_ok());
        let stale = dated("Mon, 01 Jan 2001 00:00:00 GMT").unwrap_err();
        assert_eq!(stale.code(), &S3ErrorCode::RequestTimeTooSkewed);
        assert_eq!(
            dated("Tue, 27 Mar 2007 19:52:00 GMT").unwrap_err().code(),
            &S3ErrorCode::RequestTimeTooSkewed
        );
        assert_eq!(dated("yesterday").unwrap_err().code(), &S3ErrorCode::AccessDenied);
        assert_eq!(
            fresh(&http::HeaderMap::new(), now).unwrap_err().code(),
            &S3ErrorCode::AccessDenied
        );
        // x-amz-date takes the place of Date.
        let mut headers = http::HeaderMap::new();
        headers.insert("date", http::HeaderValue::from_static("Tue, 27 Mar 2007 19:36:42 GMT"));
        headers
            .insert("x-amz-date", http::HeaderValue::from_static("Mon, 01 Jan 2001 00:00:00 GMT"));
        assert!(fresh(&headers, now).is_err());
    }

    #[test]
    fn presigned_urls_expire_within_seven_days() {
        let now = OffsetDateTime::from_unix_timestamp(1_000_000_000).unwrap();
        assert!(unexpired("1000000300", now).is_ok());
        assert!(unexpired("1000604800", now).is_ok());
        assert!(unexpired("1000604801", now).unwrap_err().message().unwrap().contains("7 days"));
        assert!(unexpired("4102444800", now).is_err(), "2100");
        assert_eq!(unexpired("999999999", now).unwrap_err().message(), Some("Request has expired"));
        assert!(unexpired("soon", now).is_err());
        assert!(unexpired("-1", now).is_err());
    }

    #[test]
    fn credentials_are_read_once_and_the_signature_decoded_as_s3s_does() {
        let query = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
        };
        let signed = credentials(
            &http::HeaderMap::new(),
            &query(&[("AWSAccessKeyId", "A"), ("Expires", "5"), ("Signature", "ab%2Bc=")]),
        )
        .unwrap();
        assert_eq!(
            signed,
            Signed::Query {
                access_key: "A".into(),
                expires: "5".into(),
                signature: "ab+c=".into()
            }
        );
        let twice = query(&[
            ("AWSAccessKeyId", "A"),
            ("Expires", "5"),
            ("Signature", "x"),
            ("Signature", "y"),
        ]);
        assert!(credentials(&http::HeaderMap::new(), &twice).is_err());
        let mut headers = http::HeaderMap::new();
        headers.insert("authorization", http::HeaderValue::from_static("AWS A:s/ig="));
        assert_eq!(
            credentials(&headers, &[]).unwrap(),
            Signed::Header { access_key: "A".into(), signature: "s/ig=".into() }
        );
        headers.insert("authorization", http::HeaderValue::from_static("AWS no-colon"));
        assert!(credentials(&headers, &[]).is_err());
    }

    #[test]
    fn sigv2_is_found_by_its_query_or_header() {
        let found = |headers: &[(&str, &str)], query: &[(&str, &str)]| {
            let query: Vec<(String, String)> =
                query.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
            is_sigv2(&get(headers, "/"), &query)
        };
        assert!(found(&[("authorization", "AWS A:b")], &[]));
        assert!(found(&[], &[("Signature", "x")]));
        assert!(!found(&[("authorization", "AWS4-HMAC-SHA256 Credential=…")], &[]));
        assert!(!found(&[], &[("X-Amz-Signature", "x")]));
    }
}
