//! Bodies the gateway reads before their signature can be checked, and the budget that bounds
//! them.
//!
//! Two kinds of request make the gateway read (part of) a body before it knows who sent it:
//!
//! * a body sent with `Transfer-Encoding: chunked` and no length at all (no `Content-Length`,
//!   no `x-amz-decoded-content-length`; `curl -T -` sends one) is read whole, up to
//!   [`CHUNKED_BODY_MAX`], to learn its length, which s3s needs;
//! * a browser-form upload (`POST` of `multipart/form-data` to a bucket) has its signature in
//!   its form fields, which come before the file: they are read, up to
//!   [`FORM_FIELDS_BYTES_MAX`], to refuse a SigV2 form (`signature` field, no
//!   `x-amz-signature`) before s3s compares its signature (s3s compares SigV2 signatures with
//!   `!=`, see [`crate::sigv2`]). The fields are then written out again in one canonical form
//!   for s3s, so that s3s reads exactly the fields checked here, whatever the client sent.
//!
//! What such bodies hold in memory is counted byte by byte as it arrives, against a budget of
//! [`BUDGET_BYTES`] for the whole gateway and a share of [`CONNECTION_SHARE_BYTES`] for each
//! connection (one HTTP/2 connection carries many requests); a body that would go past either
//! gets `503 SlowDown` at once. A body must arrive whole within the *buffered-body time limit*
//! (default [`TIME_LIMIT_DEFAULT`]), or gets `400 RequestTimeout`: stalled uploads hold their
//! bytes for at most that long, and a stalled upload that has sent little holds little.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use s3s::{S3Error, S3ErrorCode};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::conn::{BodyTimeout, TimedBody};

/// Most bytes of a body sent with `Transfer-Encoding: chunked` and no length at all that the
/// gateway takes.
pub const CHUNKED_BODY_MAX: usize = 64 << 20;
/// Bytes that bodies read before their signature is checked may hold at once, all requests
/// together: four of the largest.
pub const BUDGET_BYTES: usize = 4 * CHUNKED_BODY_MAX;
/// Bytes of such bodies one connection may hold at once: one of the largest.
pub const CONNECTION_SHARE_BYTES: usize = CHUNKED_BODY_MAX;
/// Default longest time such a body may take to arrive.
pub const TIME_LIMIT_DEFAULT: Duration = Duration::from_secs(60);
/// Most bytes of a browser form read before its file (its fields and their headers).
pub const FORM_FIELDS_BYTES_MAX: usize = 1 << 20;
/// Most fields a form may have before its file.
pub const FORM_FIELDS_MAX: usize = 1000;
/// A form's beginning is parsed again once this many more bytes (or half as many again as were
/// parsed) have arrived.
const FORM_PARSE_STEP_BYTES: usize = 4096;

/// The gateway's budget for bodies read before their signature is checked.
pub(crate) struct Budget {
    all: Arc<Semaphore>,
    time_limit: Duration,
}

impl Budget {
    pub(crate) fn new(time_limit: Duration) -> Budget {
        Budget { all: Arc::new(Semaphore::new(BUDGET_BYTES)), time_limit }
    }

    /// Bytes of bodies held now, read before their signature could be checked.
    pub(crate) fn held(&self) -> usize {
        BUDGET_BYTES.saturating_sub(self.all.available_permits())
    }
}

/// Bytes held of the budget and of a connection's share, given back when dropped (once the
/// request is answered).
pub(crate) struct Held {
    all: Option<OwnedSemaphorePermit>,
    share: Option<OwnedSemaphorePermit>,
}

impl Held {
    fn none() -> Held {
        Held { all: None, share: None }
    }

    /// Takes `bytes` more of the connection's `share` and of `budget`.
    fn take(
        &mut self,
        budget: &Budget,
        share: &Arc<Semaphore>,
        bytes: usize,
    ) -> Result<(), Refusal> {
        let Ok(count) = u32::try_from(bytes) else {
            return Err(Refusal::Exhausted);
        };
        if count == 0 {
            return Ok(());
        }
        let take = |semaphore: &Arc<Semaphore>| match semaphore
            .clone()
            .try_acquire_many_owned(count)
        {
            Ok(permit) => Ok(permit),
            Err(TryAcquireError::NoPermits | TryAcquireError::Closed) => Err(Refusal::Exhausted),
        };
        let mine = take(share)?;
        let all = take(&budget.all)?;
        merge(&mut self.share, mine);
        merge(&mut self.all, all);
        Ok(())
    }
}

fn merge(held: &mut Option<OwnedSemaphorePermit>, more: OwnedSemaphorePermit) {
    match held {
        Some(permit) => permit.merge(more),
        None => *held = Some(more),
    }
}

/// Why a body was not taken.
#[derive(Debug)]
enum Refusal {
    /// The budget or the connection's share is spent.
    Exhausted,
    /// Longer than its kind may be.
    TooLarge,
    /// Not whole within the time limit.
    TimedOut(Duration),
    /// The client sent nothing for the body timeout.
    Stalled(Duration),
    /// The body broke off.
    Broken,
    /// A browser form this gateway does not take (the reason).
    Form(S3Error),
}

/// The request for s3s, with what its body holds of the budget. A length-less body is read
/// whole and given its `Content-Length`; a browser form's fields are read and checked. Other
/// bodies pass as they are.
pub(crate) async fn prepare(
    request: http::Request<TimedBody>,
    budget: &Budget,
    share: &Arc<Semaphore>,
) -> Result<(http::Request<s3s::Body>, Held), http::Response<s3s::Body>> {
    let (mut parts, body) = request.into_parts();
    let lengthless = is_lengthless(&parts.headers);
    let mut held = Held::none();
    let mut body = Prefixed { prefix: None, rest: body };
    if parts.method == http::Method::POST && is_form(&parts.headers) {
        let read = async {
            let boundary = form_boundary(&parts.headers).map_err(Refusal::Form)?;
            let prefix = read_form(&mut body.rest, &boundary, budget, share, &mut held).await?;
            Ok::<_, Refusal>((boundary, prefix))
        };
        let (boundary, prefix) = match tokio::time::timeout(budget.time_limit, read).await {
            Ok(Ok(read)) => read,
            Ok(Err(refusal)) => return Err(refusal.answer(body.rest).await),
            Err(_) => return Err(Refusal::TimedOut(budget.time_limit).answer(body.rest).await),
        };
        let content_type =
            http::HeaderValue::from_str(&format!("multipart/form-data; boundary={boundary}"))
                .expect("a checked boundary is a valid header value");
        parts.headers.insert(http::header::CONTENT_TYPE, content_type);
        body.prefix = Some(prefix);
        if !lengthless {
            set_length(&mut parts.headers, body.size_hint().exact());
        }
    }
    if !lengthless {
        return Ok((http::Request::from_parts(parts, s3s::Body::http_body(body)), held));
    }
    let read = read_whole(&mut body, budget, share, &mut held);
    match tokio::time::timeout(budget.time_limit, read).await {
        Ok(Ok(bytes)) => {
            set_length(&mut parts.headers, Some(bytes.len() as u64));
            Ok((http::Request::from_parts(parts, s3s::Body::from(bytes)), held))
        }
        Ok(Err(refusal)) => Err(refusal.answer(body.rest).await),
        Err(_) => Err(Refusal::TimedOut(budget.time_limit).answer(body.rest).await),
    }
}

/// Sent chunked with no length at all.
fn is_lengthless(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|c| c.trim().eq_ignore_ascii_case("chunked")))
        && !headers.contains_key(http::header::CONTENT_LENGTH)
        && !headers.contains_key("x-amz-decoded-content-length")
}

fn set_length(headers: &mut http::HeaderMap, length: Option<u64>) {
    match length {
        Some(length) => {
            headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(length));
        }
        None => {
            headers.remove(http::header::CONTENT_LENGTH);
        }
    }
}

/// Whether s3s might read the body as a browser form: any `Content-Type` naming a multipart
/// type (the form is then read here, or refused when it cannot be).
fn is_form(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::CONTENT_TYPE)
        .iter()
        .any(|v| v.as_bytes().windows(9).any(|w| w.eq_ignore_ascii_case(b"multipart")))
}

/// A form's boundary: from its one `Content-Type`, `multipart/form-data; boundary=…` (quoted
/// or not), made of the characters RFC 2046 allows (no space).
fn form_boundary(headers: &http::HeaderMap) -> Result<String, S3Error> {
    let malformed = |why: &str| {
        S3Error::with_message(
            S3ErrorCode::MalformedPOSTRequest,
            format!("{why}: send one Content-Type: multipart/form-data; boundary=…"),
        )
    };
    let mut values = headers.get_all(http::header::CONTENT_TYPE).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(malformed("a form needs exactly one Content-Type"));
    };
    let value = value.to_str().map_err(|_| malformed("the Content-Type is not ASCII"))?;
    let mut params = value.split(';');
    let media = params.next().unwrap_or_default().trim();
    if !media.eq_ignore_ascii_case("multipart/form-data") {
        return Err(malformed("a multipart POST must be multipart/form-data"));
    }
    let mut boundary = None;
    for param in params {
        let Some((name, value)) = param.split_once('=') else {
            return Err(malformed("a Content-Type parameter has no value"));
        };
        if name.trim().eq_ignore_ascii_case("boundary") {
            if boundary.is_some() {
                return Err(malformed("the Content-Type names two boundaries"));
            }
            let value = value.trim();
            let value = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value);
            boundary = Some(value.to_string());
        }
    }
    let boundary = boundary.ok_or_else(|| malformed("the Content-Type has no boundary"))?;
    let allowed = |c: char| c.is_ascii_alphanumeric() || "'()+_,-./:=?".contains(c);
    if boundary.is_empty() || boundary.len() > 70 || !boundary.chars().all(allowed) {
        return Err(malformed(
            "the form's boundary is not 1 to 70 letters, digits or '()+_,-./:=?",
        ));
    }
    Ok(boundary)
}

/// Reads a length-less body whole, within [`CHUNKED_BODY_MAX`] and the budget.
async fn read_whole(
    body: &mut Prefixed,
    budget: &Budget,
    share: &Arc<Semaphore>,
    held: &mut Held,
) -> Result<Bytes, Refusal> {
    let mut whole = BytesMut::new();
    if let Some(prefix) = body.prefix.take() {
        whole.extend_from_slice(&prefix);
    }
    while let Some(frame) = body.rest.frame().await {
        let frame = frame.map_err(broken)?;
        let Ok(data) = frame.into_data() else { continue };
        if whole.len() + data.len() > CHUNKED_BODY_MAX {
            return Err(Refusal::TooLarge);
        }
        held.take(budget, share, data.len())?;
        whole.extend_from_slice(&data);
    }
    Ok(whole.freeze())
}

fn broken(error: Box<dyn std::error::Error + Send + Sync>) -> Refusal {
    match error.downcast_ref::<BodyTimeout>() {
        Some(timeout) => Refusal::Stalled(timeout.0),
        None => Refusal::Broken,
    }
}

/// Reads a form's fields (to its file part's headers), refuses a SigV2 form, and returns the
/// fields and the file part's headers written out again, with what followed them.
async fn read_form(
    body: &mut TimedBody,
    boundary: &str,
    budget: &Budget,
    share: &Arc<Semaphore>,
    held: &mut Held,
) -> Result<Bytes, Refusal> {
    let mut read = BytesMut::new();
    // Parsed again from the start as bytes arrive, but only once they have grown by half (or
    // at the end): a client sending a byte at a time cannot make the parsing quadratic.
    let mut parse_at = 0;
    let mut ended = false;
    loop {
        if read.len() >= parse_at || ended {
            parse_at = read.len() + (read.len() / 2).max(FORM_PARSE_STEP_BYTES);
            if let Some(form) = parse_form(&read, boundary).map_err(Refusal::Form)? {
                if form.is_sigv2() {
                    return Err(Refusal::Form(S3Error::with_message(
                        S3ErrorCode::AccessDenied,
                        "browser-form uploads signed with AWS Signature Version 2 (a `signature` \
                         field) are refused: sign the policy with SigV4 (x-amz-signature)",
                    )));
                }
                return Ok(form.write(boundary));
            }
            if ended {
                return Err(Refusal::Form(S3Error::with_message(
                    S3ErrorCode::MalformedPOSTRequest,
                    "the form ended before its file field",
                )));
            }
        }
        if read.len() > FORM_FIELDS_BYTES_MAX {
            return Err(Refusal::Form(S3Error::with_message(
                S3ErrorCode::MaxPostPreDataLengthExceededError,
                format!(
                    "a form's fields may take at most {FORM_FIELDS_BYTES_MAX} bytes before its file"
                ),
            )));
        }
        match body.frame().await {
            None => ended = true,
            Some(frame) => {
                let Ok(data) = frame.map_err(broken)?.into_data() else { continue };
                held.take(budget, share, data.len())?;
                read.extend_from_slice(&data);
            }
        }
    }
}

/// A form's fields and file part, as read.
#[derive(Debug, PartialEq, Eq)]
struct Form {
    /// Names (lower-cased, as s3s keeps them) and values, in order.
    fields: Vec<(String, Bytes)>,
    /// The file part's file name, and content type.
    filename: Option<String>,
    content_type: Option<String>,
    /// The bytes after the file part's headers (the start of the file).
    rest: Bytes,
}

impl Form {
    /// Signed with SigV2: s3s takes a form as SigV4 when it has `x-amz-signature`, as SigV2
    /// when it has `signature`.
    fn is_sigv2(&self) -> bool {
        let has = |name: &str| self.fields.iter().any(|(n, _)| n == name);
        has("signature") && !has("x-amz-signature")
    }

    /// The form as s3s reads it: each field in one canonical part, then the file part's
    /// headers and what followed them.
    fn write(&self, boundary: &str) -> Bytes {
        let mut out = BytesMut::new();
        out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        for (name, value) in &self.fields {
            out.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
            );
            out.extend_from_slice(value);
            out.extend_from_slice(format!("\r\n--{boundary}\r\n").as_bytes());
        }
        out.extend_from_slice(b"Content-Disposition: form-data; name=\"file\"");
        if let Some(filename) = &self.filename {
            out.extend_from_slice(format!("; filename=\"{filename}\"").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        if let Some(content_type) = &self.content_type {
            out.extend_from_slice(format!("Content-Type: {content_type}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.rest);
        out.freeze()
    }
}

/// Parses a form's beginning: `Ok(None)` when more bytes are needed. Parts are delimited by a
/// line `--BOUNDARY` (lines end with CRLF); each has headers, of which a `Content-Disposition:
/// form-data; name="NAME"` (and, optionally, `; filename="FILE"`) is required, then a blank
/// line and its value. The part named `file` (any case) ends the fields.
fn parse_form(bytes: &[u8], boundary: &str) -> Result<Option<Form>, S3Error> {
    let malformed = |why: String| S3Error::with_message(S3ErrorCode::MalformedPOSTRequest, why);
    let delimiter = format!("--{boundary}");
    let mut lines = Lines { rest: bytes, at: 0 };
    // An empty line may come before the first delimiter.
    let first = match lines.next() {
        None => return Ok(None),
        Some(b"") => match lines.next() {
            None => return Ok(None),
            Some(line) => line,
        },
        Some(line) => line,
    };
    if first != delimiter.as_bytes() {
        return Err(malformed("the form does not begin with its boundary".into()));
    }
    let mut fields = Vec::new();
    loop {
        if fields.len() > FORM_FIELDS_MAX {
            return Err(malformed(format!("a form may have at most {FORM_FIELDS_MAX} fields")));
        }
        let mut disposition = None;
        let mut content_type = None;
        loop {
            let Some(line) = lines.next() else { return Ok(None) };
            if line.is_empty() {
                break;
            }
            let text = std::str::from_utf8(line)
                .ok()
                .filter(|t| t.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)))
                .ok_or_else(|| malformed("a form part's header is not printable ASCII".into()))?;
            let Some((name, value)) = text.split_once(':') else {
                return Err(malformed(format!("a form part's header has no colon: {text:?}")));
            };
            let (name, value) = (name.trim(), value.trim());
            if name.eq_ignore_ascii_case("content-disposition") {
                if disposition.is_some() {
                    return Err(malformed(
                        "a form part has two Content-Disposition headers".into(),
                    ));
                }
                disposition = Some(parse_disposition(value).ok_or_else(|| {
                    malformed(format!(
                        "a form part's Content-Disposition is not form-data; name=\"…\": {value:?}"
                    ))
                })?);
            } else if name.eq_ignore_ascii_case("content-type") {
                content_type = Some(value.to_string());
            }
        }
        let Some((name, filename)) = disposition else {
            return Err(malformed("a form part has no Content-Disposition".into()));
        };
        if name.eq_ignore_ascii_case("file") {
            let rest = Bytes::copy_from_slice(&bytes[lines.at..]);
            return Ok(Some(Form { fields, filename, content_type, rest }));
        }
        // The value: up to the next delimiter line, without the CRLF before it.
        let start = lines.at;
        let end = loop {
            let before = lines.at;
            let Some(line) = lines.next() else { return Ok(None) };
            if line == delimiter.as_bytes() {
                break before.saturating_sub(2).max(start);
            }
        };
        fields.push((name.to_ascii_lowercase(), Bytes::copy_from_slice(&bytes[start..end])));
    }
}

/// `form-data; name="NAME"` or `form-data; name="NAME"; filename="FILE"`: the name (not
/// empty) and the file name, neither with a quote or a control character.
fn parse_disposition(value: &str) -> Option<(String, Option<String>)> {
    let quoted = |text: &str| -> Option<(String, usize)> {
        let end = text.find('"')?;
        let inner = &text[..end];
        (!inner.is_empty() && inner.bytes().all(|b| (b' '..=b'~').contains(&b)))
            .then(|| (inner.to_string(), end + 1))
    };
    let rest = value.strip_prefix("form-data; name=\"")?;
    let (name, used) = quoted(rest)?;
    let rest = &rest[used..];
    if rest.is_empty() {
        return Some((name, None));
    }
    let (filename, used) = quoted(rest.strip_prefix("; filename=\"")?)?;
    (used == rest.len() - "; filename=\"".len()).then_some((name, Some(filename)))
}

/// Whole lines, each ending with CRLF (a last line not yet whole is not returned).
struct Lines<'a> {
    rest: &'a [u8],
    at: usize,
}

impl<'a> Lines<'a> {
    fn next(&mut self) -> Option<&'a [u8]> {
        let tail = &self.rest[self.at..];
        let end = tail.windows(2).position(|w| w == b"\r\n")?;
        self.at += end + 2;
        Some(&tail[..end])
    }
}

impl Refusal {
    /// The answer; the body of a request refused for its size or form is read first, a
    /// little (see [`drain`]).
    async fn answer(self, body: TimedBody) -> http::Response<s3s::Body> {
        if matches!(self, Refusal::Exhausted | Refusal::TooLarge | Refusal::Form(_)) {
            drain(body).await;
        }
        let error = match self {
            Refusal::Exhausted => S3Error::with_message(
                S3ErrorCode::SlowDown,
                "too many bodies without a length (or browser forms) are being read at once; \
                 retry, or send Content-Length",
            ),
            Refusal::TooLarge => S3Error::with_message(
                S3ErrorCode::MissingContentLength,
                "a body sent chunked without a length is taken up to 64 MiB; send \
                 Content-Length, or aws-chunked with x-amz-decoded-content-length, for a larger one",
            ),
            Refusal::TimedOut(limit) => S3Error::with_message(
                S3ErrorCode::RequestTimeout,
                format!(
                    "a body without a length (or a form's fields) must arrive within {} s; \
                     send Content-Length",
                    limit.as_secs_f64()
                ),
            ),
            Refusal::Stalled(timeout) => S3Error::with_message(
                S3ErrorCode::RequestTimeout,
                format!("the client sent no byte of the body for {} s", timeout.as_secs_f64()),
            ),
            Refusal::Broken => S3Error::with_message(
                S3ErrorCode::IncompleteBody,
                "the request's body broke off before its end",
            ),
            Refusal::Form(error) => error,
        };
        crate::answer::s3_answer(error)
    }
}

/// The most of a refused body [`drain`] reads, and for how long.
const DRAIN_BYTES_MAX: usize = 1 << 20;
const DRAIN_TIME_MAX: Duration = Duration::from_secs(2);

/// Reads and drops a refused request's body — at most [`DRAIN_BYTES_MAX`] bytes, for at most
/// [`DRAIN_TIME_MAX`] — so that its client reads the refusal rather than a reset connection;
/// a larger or slower body is cut off when the connection closes.
async fn drain(mut body: TimedBody) {
    let _ = tokio::time::timeout(DRAIN_TIME_MAX, async {
        let mut read = 0;
        while let Some(Ok(frame)) = body.frame().await {
            read += frame.data_ref().map_or(0, |data| data.len());
            if read > DRAIN_BYTES_MAX {
                break;
            }
        }
    })
    .await;
}

/// A body whose first bytes were read already.
struct Prefixed {
    prefix: Option<Bytes>,
    rest: TimedBody,
}

impl HttpBody for Prefixed {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let prefix = self.prefix.as_ref().map_or(0, |p| p.len() as u64);
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + prefix);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + prefix);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: &str = "XyZ123";

    fn part(name: &str, value: &str) -> String {
        format!("--{B}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
    }

    fn file_part(body: &str) -> String {
        format!(
            "--{B}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\n{body}"
        )
    }

    #[test]
    fn a_form_is_read_to_its_file_and_written_out_as_read() {
        let text = format!(
            "{}{}{}",
            part("key", "k"),
            part("Policy", "line one\r\nline two"),
            file_part("hello\r\n--XyZ123--\r\n")
        );
        // Every prefix short of the file part's headers needs more bytes.
        let file_at = text.find("hello").unwrap();
        for cut in 0..file_at {
            assert_eq!(parse_form(&text.as_bytes()[..cut], B).unwrap(), None, "cut at {cut}");
        }
        let form = parse_form(text.as_bytes(), B).unwrap().unwrap();
        assert_eq!(
            form.fields,
            vec![
                ("key".to_string(), Bytes::from("k")),
                ("policy".to_string(), Bytes::from("line one\r\nline two"))
            ]
        );
        assert_eq!(form.filename.as_deref(), Some("a.txt"));
        assert_eq!(form.content_type.as_deref(), Some("text/plain"));
        assert_eq!(form.rest, Bytes::from("hello\r\n--XyZ123--\r\n"));
        assert!(!form.is_sigv2());
        // Written out again, it reads the same.
        let again = parse_form(&form.write(B), B).unwrap().unwrap();
        assert_eq!(again, form);
    }

    #[test]
    fn sigv2_forms_are_told_from_sigv4_ones() {
        let v2 = format!("{}{}{}", part("Signature", "abc="), part("policy", "p"), file_part("x"));
        assert!(parse_form(v2.as_bytes(), B).unwrap().unwrap().is_sigv2());
        let v4 =
            format!("{}{}{}", part("x-amz-signature", "ab"), part("policy", "p"), file_part("x"));
        assert!(!parse_form(v4.as_bytes(), B).unwrap().unwrap().is_sigv2());
        // A "signature" part inside a value is no part: it is not a field.
        let hidden = format!(
            "{}{}",
            part("x-amz-signature", "a\r\nContent-Disposition: form-data; name=\"signature\""),
            file_part("x")
        );
        let form = parse_form(hidden.as_bytes(), B).unwrap().unwrap();
        assert_eq!(form.fields.len(), 1);
    }

    #[test]
    fn malformed_forms_are_refused() {
        let bad = [
            "--other\r\n".to_string(),
            format!("--{B}\r\nContent-Disposition: form-data;name=\"a\"\r\n\r\nv\r\n"),
            format!("--{B}\r\nContent-Disposition: form-data; name=\"a\r\n\r\nv\r\n"),
            format!("--{B}\r\nContent-Disposition: form-data; name=\"\"\r\n\r\nv\r\n"),
            format!("--{B}\r\nX-No-Colon\r\n\r\nv\r\n"),
            format!("--{B}\r\nContent-Type: text/plain\r\n\r\nv\r\n--{B}\r\n"),
            format!(
                "--{B}\r\nContent-Disposition: form-data; name=\"a\"\r\nContent-Disposition: form-data; name=\"b\"\r\n\r\n"
            ),
            format!(
                "--{B}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"; x\r\n\r\n"
            ),
        ];
        for text in bad {
            assert!(parse_form(text.as_bytes(), B).is_err(), "{text:?} was taken");
        }
    }

    #[test]
    fn boundaries_are_read_from_one_content_type() {
        let headers = |values: &[&str]| {
            let mut map = http::HeaderMap::new();
            for v in values {
                map.append(http::header::CONTENT_TYPE, http::HeaderValue::from_str(v).unwrap());
            }
            map
        };
        assert_eq!(form_boundary(&headers(&["multipart/form-data; boundary=abc"])).unwrap(), "abc");
        assert_eq!(
            form_boundary(&headers(&["Multipart/Form-Data ; Boundary=\"a'b\""])).unwrap(),
            "a'b"
        );
        for bad in [
            &["multipart/form-data"][..],
            &["multipart/mixed; boundary=a"],
            &["multipart/form-data; boundary=a b"],
            &["multipart/form-data; boundary=a; boundary=b"],
            &["multipart/form-data; boundary=a", "text/plain"],
        ] {
            assert!(form_boundary(&headers(bad)).is_err(), "{bad:?}");
        }
        assert!(is_form(&headers(&["MULTIPART/form-data"])));
        assert!(!is_form(&headers(&["application/xml"])));
    }

    #[test]
    fn the_budget_and_a_connection_share_are_counted_in_bytes_and_given_back() {
        let budget = Budget::new(TIME_LIMIT_DEFAULT);
        let share = Arc::new(Semaphore::new(CONNECTION_SHARE_BYTES));
        let mut held = Held::none();
        held.take(&budget, &share, CONNECTION_SHARE_BYTES - 1).unwrap();
        held.take(&budget, &share, 1).unwrap();
        assert!(matches!(held.take(&budget, &share, 1), Err(Refusal::Exhausted)));
        assert_eq!(budget.all.available_permits(), BUDGET_BYTES - CONNECTION_SHARE_BYTES);
        assert_eq!(budget.held(), CONNECTION_SHARE_BYTES);
        drop(held);
        assert_eq!(budget.all.available_permits(), BUDGET_BYTES);
        assert_eq!(budget.held(), 0);
        assert_eq!(share.available_permits(), CONNECTION_SHARE_BYTES);
        // Other connections' shares are spent: the budget refuses a new one.
        let shares: Vec<_> =
            (0..4).map(|_| Arc::new(Semaphore::new(CONNECTION_SHARE_BYTES))).collect();
        let mut helds: Vec<Held> = Vec::new();
        for share in &shares {
            let mut held = Held::none();
            held.take(&budget, share, CONNECTION_SHARE_BYTES).unwrap();
            helds.push(held);
        }
        let fresh = Arc::new(Semaphore::new(CONNECTION_SHARE_BYTES));
        let mut held = Held::none();
        assert!(matches!(held.take(&budget, &fresh, 1), Err(Refusal::Exhausted)));
        assert_eq!(fresh.available_permits(), CONNECTION_SHARE_BYTES, "the share was given back");
    }
}
