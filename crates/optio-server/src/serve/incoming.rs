//! A device request's body as the handlers take it: the HTTP body (or a frame's) with what
//! its headers say of it — its declared length, the hash its signature covers — so that a
//! handler reads it, checks it or throws it away without seeing the transport's types.

use axum::body::Body;
use axum::http::{HeaderMap, header};
use optio_proto::ErrorKind;
use optio_proto::answer::Refusal;
use optio_proto::auth::{AUTH_HEADER, CONTENT_HASH_HEADER};

/// The largest refused body the server reads (and throws away) before answering.
const DISCARD_BYTES_MAX: u64 = 1 << 30;

/// The longest it spends reading one.
const DISCARD_TIME_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// A request's body, not yet read.
pub(crate) struct Incoming {
    /// None once read or thrown away.
    body: Option<Body>,
    /// `content-length`, or why it is not an integer.
    declared: Result<Option<u64>, Refusal>,
    /// The BLAKE3 hash the request's signed headers carry ([`CONTENT_HASH_HEADER`]), if
    /// present (and text).
    content_hash: Option<String>,
    /// Whether [`CONTENT_HASH_HEADER`] is present at all.
    had_hash: bool,
    /// Whether the request is signed ([`AUTH_HEADER`]).
    signed: bool,
    /// Whether it came over TLS, whose records bind its body to its signed head.
    sealed: bool,
}

/// A request body, read whole, with the hash its signature covers. It is kept in the pieces
/// it arrived in (never joined: a 4 MiB object is not copied once more on its way to the
/// file).
pub(crate) struct Received {
    /// The bytes, in order.
    parts: Vec<bytes::Bytes>,
    /// With authentication on and the request signed: the BLAKE3 hash its signed headers
    /// carry (none: a signed request without one).
    signed_hash: Option<Option<String>>,
}

impl Received {
    /// Whether the body matches the hash the request's signature covers (the signature
    /// covers the hash; the hash covers the body): checked on the blocking pool with the
    /// write, before the write. An unsigned request got past authentication only over mutual TLS,
    /// whose records protect the body.
    pub(crate) fn hash_matches(&self) -> bool {
        match &self.signed_hash {
            None => true,
            Some(signed) => {
                let hash = optio_proto::auth::content_hash_of_parts(&self.slices());
                signed.as_deref() == Some(hash.as_str())
            }
        }
    }

    /// The pieces, in order.
    pub(crate) fn slices(&self) -> Vec<&[u8]> {
        self.parts.iter().map(|part| &part[..]).collect()
    }

    /// The bytes, in the pieces they came in.
    pub(crate) fn into_parts(self) -> Vec<bytes::Bytes> {
        self.parts
    }

    /// How many bytes came.
    pub(crate) fn len(&self) -> u64 {
        self.parts.iter().map(|part| part.len() as u64).sum()
    }

    /// The bytes in one piece (joined if they came in several).
    pub(crate) fn joined(&self) -> bytes::Bytes {
        match self.parts.as_slice() {
            [] => bytes::Bytes::new(),
            [one] => one.clone(),
            parts => parts.concat().into(),
        }
    }
}

impl Incoming {
    /// `body`, described by `headers`; `sealed`: it came over TLS.
    pub(crate) fn new(body: Body, headers: &HeaderMap, sealed: bool) -> Incoming {
        let name = header::CONTENT_LENGTH.as_str();
        let declared = match headers.get(header::CONTENT_LENGTH) {
            None => Ok(None),
            Some(value) => {
                value.to_str().ok().and_then(|v| v.parse().ok()).map(Some).ok_or_else(|| {
                    Refusal::new(ErrorKind::BadRequest, format!("{name} is not an integer"))
                })
            }
        };
        let hash = headers.get(CONTENT_HASH_HEADER);
        Incoming {
            body: Some(body),
            declared,
            content_hash: hash.and_then(|v| v.to_str().ok()).map(str::to_string),
            had_hash: hash.is_some(),
            signed: headers.contains_key(AUTH_HEADER),
            sealed,
        }
    }

    /// Refuses a body declared longer than `limit` (or whose length is not an integer).
    pub(crate) fn check_length(&self, limit: u64) -> Result<(), Refusal> {
        if let Some(length) = self.declared.clone()?
            && length > limit
        {
            return Err(Refusal::new(
                ErrorKind::TooLarge,
                format!("the object is {length} bytes; this server takes at most {limit}"),
            ));
        }
        Ok(())
    }

    /// The declared length (0 when absent or malformed).
    pub(crate) fn declared_bytes(&self) -> u64 {
        self.declared.clone().ok().flatten().unwrap_or(0)
    }

    /// Whether the request carried [`CONTENT_HASH_HEADER`].
    pub(crate) fn had_hash(&self) -> bool {
        self.had_hash
    }

    /// Reads the body, of at most `limit` bytes; `checks_hash`: authentication is on, so a
    /// signed request's body is checked against the hash it signed — unless it came over
    /// TLS: the records that carried the signed head carried the body, each sealed (AES-GCM)
    /// under a key of this connection only, so nobody but the signer could have put it
    /// there, and a hash (BLAKE3, 0.66 ms per 4 MiB on the client and again on each replica)
    /// would add nothing; Optio's clients send none over TLS (Ceph's msgr2 secure mode, too,
    /// signs nothing beside the seal).
    pub(crate) async fn receive(
        &mut self,
        checks_hash: bool,
        limit: u64,
    ) -> Result<Received, Refusal> {
        use futures_util::StreamExt as _;
        let declared = self.declared.clone().ok().flatten();
        let body = self.body.take().unwrap_or_default();
        let mut stream = body.into_data_stream();
        let mut parts = Vec::new();
        let mut read = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| match declared {
                _ if let Some(timeout) = crate::conn::BodyTimeout::find(&e) => Refusal::new(
                    ErrorKind::Timeout,
                    format!("{timeout}; nothing was stored: send the whole body without pausing"),
                ),
                // Its length was checked against the limit before: the body broke off.
                Some(length) => Refusal::new(
                    ErrorKind::BadRequest,
                    format!("the body ended before its {length} bytes were read: {e}"),
                ),
                None => {
                    Refusal::new(ErrorKind::BadRequest, format!("the body could not be read: {e}"))
                }
            })?;
            read += chunk.len() as u64;
            if read > limit {
                return Err(Refusal::new(
                    ErrorKind::TooLarge,
                    format!("the body could not be read within {limit} bytes: it is longer"),
                ));
            }
            if !chunk.is_empty() {
                parts.push(chunk);
            }
        }
        if let Some(length) = declared
            && read != length
        {
            return Err(Refusal::new(
                ErrorKind::BadRequest,
                format!("the body ended before its {length} bytes were read: {read} came"),
            ));
        }
        // (A sealed body that comes with a hash anyway is checked against it.)
        let unhashed = self.sealed && !self.had_hash;
        let signed_hash =
            (checks_hash && self.signed && !unhashed).then(|| self.content_hash.clone());
        Ok(Received { parts, signed_hash })
    }

    /// Reads and drops the body of a refused request, if not read yet (up to
    /// [`DISCARD_BYTES_MAX`] bytes and [`DISCARD_TIME_MAX`]) before the refusal is sent. A
    /// client still writing the body — a 4 MiB object sent to a server that no longer serves
    /// its device, or one above the size limit — then reads the answer (421, 413, … and the
    /// reason) instead of a reset connection: what nginx calls a lingering close. A body
    /// declared larger, or sent slower, is not read to its end: the connection closes.
    pub(crate) async fn discard(&mut self) {
        use futures_util::StreamExt as _;
        let Some(body) = self.body.take() else { return };
        let declared = self.declared.clone().ok().flatten();
        if declared == Some(0) || declared.is_some_and(|length| length > DISCARD_BYTES_MAX) {
            return;
        }
        let mut stream = body.into_data_stream();
        let _ = tokio::time::timeout(DISCARD_TIME_MAX, async {
            let mut read = 0u64;
            while let Some(Ok(chunk)) = stream.next().await {
                read += chunk.len() as u64;
                if read > DISCARD_BYTES_MAX {
                    break;
                }
            }
        })
        .await;
    }
}
