//! The server's handshake with TLS (the protocol's FORCEDTLS mode, certificates mapped to
//! exports) and its memory budget, over in-memory streams, with rustls as the client.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::*;
use crate::export::{Errno, IoFuture};
use crate::{Authorize, MemoryExport, ReadOnlyExports, Tls, proto, testing};

const SIZE: usize = 8 << 20;

/// A certificate authority, and certificates it signs.
struct Pki {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        Pki { cert: params.self_signed(&key).unwrap(), key }
    }

    fn issue(&self, common_name: &str) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, common_name);
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        (cert.der().clone(), key)
    }

    fn roots(&self) -> Arc<rustls::RootCertStore> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert.der().clone()).unwrap();
        Arc::new(roots)
    }
}

/// A copy of a certificate and its key.
fn copy(
    identity: &(CertificateDer<'static>, PrivateKeyDer<'static>),
) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    (identity.0.clone(), identity.1.clone_key())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server's TLS: its certificate from `pki`; client certificates `pki` signed, or none.
fn server_config(pki: &Pki) -> Arc<rustls::ServerConfig> {
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(pki.roots(), provider())
            .allow_unauthenticated()
            .build()
            .unwrap();
    let (cert, key) = pki.issue("nbd server");
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert], key)
        .unwrap();
    Arc::new(config)
}

/// A client trusting `pki`, showing `identity` if given.
fn client_config(
    pki: &Pki,
    identity: Option<(CertificateDer<'static>, PrivateKeyDer<'static>)>,
) -> Arc<rustls::ClientConfig> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(pki.roots());
    Arc::new(match identity {
        Some((cert, key)) => builder.with_client_auth_cert(vec![cert], key).unwrap(),
        None => builder.with_no_client_auth(),
    })
}

/// Writers see every export, readers see them read-only, anyone else is refused.
struct ByCertificate {
    exports: Arc<dyn Exports>,
    writer: CertificateDer<'static>,
    reader: CertificateDer<'static>,
}

impl Authorize for ByCertificate {
    fn authorize(
        &self,
        certificate: Option<&CertificateDer<'static>>,
    ) -> Result<Arc<dyn Exports>, String> {
        match certificate {
            None => Err("a client certificate is required".into()),
            Some(cert) if *cert == self.writer => Ok(self.exports.clone()),
            Some(cert) if *cert == self.reader => {
                Ok(Arc::new(ReadOnlyExports(self.exports.clone())))
            }
            Some(_) => Err("this certificate names no known entity".into()),
        }
    }
}

/// A TLS server over one export `vol0`, and the certificates of its writer and reader.
struct Setup {
    pki: Pki,
    access: Arc<Access>,
    vol0: Arc<MemoryExport>,
    writer: (CertificateDer<'static>, PrivateKeyDer<'static>),
    reader: (CertificateDer<'static>, PrivateKeyDer<'static>),
}

fn tls_setup() -> Setup {
    let pki = Pki::new("test CA");
    let vol0 = Arc::new(MemoryExport::new(SIZE, false));
    let exports: Vec<(String, Arc<dyn Export>)> = vec![("vol0".into(), vol0.clone())];
    let writer = pki.issue("client.writer");
    let reader = pki.issue("client.reader");
    let authorize = ByCertificate {
        exports: Arc::new(exports),
        writer: writer.0.clone(),
        reader: reader.0.clone(),
    };
    let access = Access::Tls(Tls { config: server_config(&pki), authorize: Arc::new(authorize) });
    Setup { pki, access: Arc::new(access), vol0, writer, reader }
}

/// Serves one connection on a task: the client's end, and the connection's result.
fn connect(
    access: Arc<Access>,
    limits: Limits,
) -> (DuplexStream, tokio::task::JoinHandle<Result<(), NbdError>>) {
    let (client, server) = tokio::io::duplex(64 << 10);
    let served = tokio::spawn(async move { Server::new(limits)?.serve(server, &access).await });
    (client, served)
}

/// Reads the greeting and answers it (fixed newstyle, no zeroes).
async fn greet<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) {
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).await.unwrap();
    assert_eq!(greeting[..8], proto::INIT_MAGIC.to_be_bytes());
    let flags = proto::CLIENT_FIXED_NEWSTYLE | proto::CLIENT_NO_ZEROES;
    stream.write_all(&flags.to_be_bytes()).await.unwrap();
}

fn option_bytes(option: u32, data: &[u8]) -> Vec<u8> {
    let mut out = proto::OPT_MAGIC.to_be_bytes().to_vec();
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// `NBD_OPT_GO`/`INFO` data for export `name`, asking for no information item.
fn go_data(name: &str) -> Vec<u8> {
    let mut data = (name.len() as u32).to_be_bytes().to_vec();
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&0u16.to_be_bytes());
    data
}

/// Sends an option and reads its replies up to the last (an ACK or an error): each reply's
/// type and data.
async fn option<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    option: u32,
    data: &[u8],
) -> Vec<(u32, Vec<u8>)> {
    stream.write_all(&option_bytes(option, data)).await.unwrap();
    let mut replies = Vec::new();
    loop {
        let mut header = [0u8; 20];
        stream.read_exact(&mut header).await.unwrap();
        assert_eq!(header[..8], proto::REPLY_OPT_MAGIC.to_be_bytes());
        assert_eq!(header[8..12], option.to_be_bytes());
        let kind = u32::from_be_bytes(header[12..16].try_into().unwrap());
        let length = u32::from_be_bytes(header[16..20].try_into().unwrap());
        let mut data = vec![0u8; length as usize];
        stream.read_exact(&mut data).await.unwrap();
        replies.push((kind, data));
        if kind == proto::REP_ACK || kind & (1 << 31) != 0 {
            return replies;
        }
    }
}

fn kinds(replies: &[(u32, Vec<u8>)]) -> Vec<u32> {
    replies.iter().map(|(kind, _)| *kind).collect()
}

/// The transmission flags in `NBD_OPT_GO`'s `NBD_INFO_EXPORT` reply.
fn export_flags(replies: &[(u32, Vec<u8>)]) -> u16 {
    let (_, info) = replies.iter().find(|(kind, _)| *kind == proto::REP_INFO).expect("INFO");
    u16::from_be_bytes([info[10], info[11]])
}

/// Upgrades to TLS as `client`.
async fn start_tls(
    mut stream: DuplexStream,
    client: Arc<rustls::ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<DuplexStream>> {
    assert_eq!(kinds(&option(&mut stream, proto::OPT_STARTTLS, &[]).await), [proto::REP_ACK]);
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    tokio_rustls::TlsConnector::from(client).connect(name, stream).await
}

/// One request and its simple reply (with `data` bytes when it succeeded): the error.
async fn request<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    bytes: &[u8],
    data: usize,
) -> (u32, Vec<u8>) {
    stream.write_all(bytes).await.unwrap();
    let mut header = [0u8; 16];
    stream.read_exact(&mut header).await.unwrap();
    assert_eq!(header[..4], proto::SIMPLE_REPLY_MAGIC.to_be_bytes());
    let error = u32::from_be_bytes(header[4..8].try_into().unwrap());
    let mut payload = vec![0u8; if error == 0 { data } else { 0 }];
    stream.read_exact(&mut payload).await.unwrap();
    (error, payload)
}

/// Issue 36, item 3: before TLS nothing is served or listed; after it, a writer's
/// certificate lists, opens and writes.
#[tokio::test]
async fn tls_comes_before_every_option_and_then_the_certificate_decides() {
    let setup = tls_setup();
    let (mut stream, served) = connect(setup.access.clone(), Limits::default());
    greet(&mut stream).await;
    for (opt, data) in [
        (proto::OPT_LIST, Vec::new()),
        (proto::OPT_INFO, go_data("vol0")),
        (proto::OPT_GO, go_data("vol0")),
        (42, Vec::new()),
    ] {
        let replies = option(&mut stream, opt, &data).await;
        assert_eq!(kinds(&replies), [proto::REP_ERR_TLS_REQD], "option {opt} before TLS");
    }
    let replies = option(&mut stream, proto::OPT_STARTTLS, b"x").await;
    assert_eq!(kinds(&replies), [proto::REP_ERR_INVALID], "STARTTLS takes no data");
    let client = client_config(&setup.pki, Some(copy(&setup.writer)));
    let mut stream = start_tls(stream, client).await.expect("the TLS handshake");
    let listed = option(&mut stream, proto::OPT_LIST, &[]).await;
    assert_eq!(kinds(&listed), [proto::REP_SERVER, proto::REP_ACK]);
    assert_eq!(listed[0].1[4..], *b"vol0");
    let again = option(&mut stream, proto::OPT_STARTTLS, &[]).await;
    assert_eq!(kinds(&again), [proto::REP_ERR_INVALID], "TLS is on already");
    let opened = option(&mut stream, proto::OPT_GO, &go_data("vol0")).await;
    assert_eq!(kinds(&opened), [proto::REP_INFO, proto::REP_ACK]);
    assert_eq!(export_flags(&opened) & proto::TFLAG_READ_ONLY, 0);
    let mut write = testing::request(1, 0, 1, 4096, 4);
    write.extend_from_slice(b"data");
    assert_eq!(request(&mut stream, &write, 0).await.0, 0);
    let read = testing::request(0, 0, 2, 4096, 4);
    assert_eq!(request(&mut stream, &read, 4).await, (0, b"data".to_vec()));
    assert_eq!(&setup.vol0.contents()[4096..4100], b"data");
    stream.write_all(&testing::request(2, 0, 3, 0, 0)).await.unwrap();
    served.await.unwrap().expect("a clean disconnect");
}

/// `NBD_OPT_EXPORT_NAME` cannot be answered with an error: before TLS it ends the connection.
#[tokio::test]
async fn export_name_before_tls_ends_the_connection() {
    let setup = tls_setup();
    let (mut stream, served) = connect(setup.access.clone(), Limits::default());
    greet(&mut stream).await;
    stream.write_all(&option_bytes(proto::OPT_EXPORT_NAME, b"vol0")).await.unwrap();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "nothing about the export: {rest:?}");
    assert!(matches!(served.await.unwrap(), Err(NbdError::Protocol(_))));
}

/// Bytes sent after `NBD_OPT_STARTTLS` but before the TLS handshake would be taken as sent
/// inside TLS (a man in the middle's injection): the connection ends instead.
#[tokio::test]
async fn bytes_injected_between_starttls_and_the_tls_handshake_end_the_connection() {
    let setup = tls_setup();
    let (mut stream, served) = connect(setup.access.clone(), Limits::default());
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).await.unwrap();
    let mut sent = (proto::CLIENT_FIXED_NEWSTYLE | proto::CLIENT_NO_ZEROES).to_be_bytes().to_vec();
    sent.extend_from_slice(&option_bytes(proto::OPT_STARTTLS, &[]));
    sent.extend_from_slice(&option_bytes(proto::OPT_GO, &go_data("vol0")));
    stream.write_all(&sent).await.unwrap();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).await.unwrap();
    assert_eq!(rest, proto::option_reply(proto::OPT_STARTTLS, proto::REP_ACK, &[]));
    let ended = served.await.unwrap();
    assert!(matches!(&ended, Err(NbdError::Protocol(m)) if m.contains("STARTTLS")), "{ended:?}");
}

/// A reader's certificate gets the export read-only: advertised so, writes refused, the data
/// unchanged.
#[tokio::test]
async fn a_readers_certificate_gets_a_read_only_export() {
    let setup = tls_setup();
    let (mut stream, served) = connect(setup.access.clone(), Limits::default());
    greet(&mut stream).await;
    let client = client_config(&setup.pki, Some(copy(&setup.reader)));
    let mut stream = start_tls(stream, client).await.expect("the TLS handshake");
    let listed = option(&mut stream, proto::OPT_LIST, &[]).await;
    assert_eq!(kinds(&listed), [proto::REP_SERVER, proto::REP_ACK], "readers may list");
    let opened = option(&mut stream, proto::OPT_GO, &go_data("vol0")).await;
    assert_ne!(export_flags(&opened) & proto::TFLAG_READ_ONLY, 0, "advertised read-only");
    let mut write = testing::request(1, 0, 1, 0, 4);
    write.extend_from_slice(b"evil");
    assert_eq!(request(&mut stream, &write, 0).await.0, proto::EPERM);
    let zeroes = testing::request(6, 0, 2, 0, 4096);
    assert_eq!(request(&mut stream, &zeroes, 0).await.0, proto::EPERM);
    let trim = testing::request(4, 0, 3, 0, 4096);
    assert_eq!(request(&mut stream, &trim, 0).await.0, proto::EPERM);
    assert_eq!(request(&mut stream, &testing::request(0, 0, 4, 0, 4), 4).await.0, 0);
    assert!(setup.vol0.contents().iter().all(|b| *b == 0), "the export is unchanged");
    stream.write_all(&testing::request(2, 0, 5, 0, 0)).await.unwrap();
    served.await.unwrap().expect("a clean disconnect");
}

/// No certificate, or one the CA signed for nobody known: every option is refused with the
/// reason, and the refusal is what the connection's end reports.
#[tokio::test]
async fn no_certificate_or_an_unknown_one_is_refused_with_the_reason() {
    let setup = tls_setup();
    let stranger = setup.pki.issue("client.stranger");
    for identity in [None, Some(stranger)] {
        let unknown = identity.is_some();
        let (mut stream, served) = connect(setup.access.clone(), Limits::default());
        greet(&mut stream).await;
        let client = client_config(&setup.pki, identity);
        let mut stream = start_tls(stream, client).await.expect("the TLS handshake");
        for (opt, data) in [(proto::OPT_LIST, Vec::new()), (proto::OPT_GO, go_data("vol0"))] {
            let replies = option(&mut stream, opt, &data).await;
            assert_eq!(kinds(&replies), [proto::REP_ERR_POLICY], "option {opt}");
            let message = String::from_utf8_lossy(&replies[0].1).into_owned();
            let expected = if unknown { "no known entity" } else { "certificate is required" };
            assert!(message.contains(expected), "{message}");
        }
        assert_eq!(kinds(&option(&mut stream, proto::OPT_ABORT, &[]).await), [proto::REP_ACK]);
        drop(stream);
        let ended = served.await.unwrap();
        assert!(matches!(ended, Err(NbdError::Refused(_))), "{ended:?}");
    }
}

/// A certificate another CA signed fails the TLS handshake.
#[tokio::test]
async fn a_certificate_from_another_ca_fails_the_handshake() {
    let setup = tls_setup();
    let other = Pki::new("another CA");
    let (mut stream, served) = connect(setup.access.clone(), Limits::default());
    greet(&mut stream).await;
    let client = client_config(&setup.pki, Some(other.issue("client.writer")));
    // TLS 1.3: the client may finish its side before the server refuses its certificate; then
    // the first read inside TLS fails.
    if let Ok(mut stream) = start_tls(stream, client).await {
        stream.write_all(&option_bytes(proto::OPT_LIST, &[])).await.unwrap_or_default();
        let mut rest = Vec::new();
        assert!(stream.read_to_end(&mut rest).await.is_err() || rest.is_empty());
    }
    let ended = served.await.unwrap();
    assert!(matches!(ended, Err(NbdError::Tls(_))), "{ended:?}");
    assert!(setup.vol0.contents().iter().all(|b| *b == 0));
}

/// Without TLS configured, `NBD_OPT_STARTTLS` is refused by policy and the client goes on.
#[tokio::test]
async fn starttls_where_tls_is_not_offered_is_refused_by_policy() {
    let vol0: Arc<dyn Export> = Arc::new(MemoryExport::new(SIZE, false));
    let exports: Vec<(String, Arc<dyn Export>)> = vec![("vol0".into(), vol0)];
    let access = Arc::new(Access::Open(Arc::new(exports)));
    let (mut stream, served) = connect(access, Limits::default());
    greet(&mut stream).await;
    let refused = option(&mut stream, proto::OPT_STARTTLS, &[]).await;
    assert_eq!(kinds(&refused), [proto::REP_ERR_POLICY]);
    let opened = option(&mut stream, proto::OPT_GO, &go_data("vol0")).await;
    assert_eq!(kinds(&opened), [proto::REP_INFO, proto::REP_ACK]);
    stream.write_all(&testing::request(2, 0, 1, 0, 0)).await.unwrap();
    served.await.unwrap().expect("a clean disconnect");
}

/// An export whose reads return buffers it counts while they live.
struct Counting {
    live_bytes: Arc<AtomicUsize>,
    most_bytes: Arc<AtomicUsize>,
}

/// A read's buffer, counted until dropped.
struct Counted {
    data: Vec<u8>,
    live_bytes: Arc<AtomicUsize>,
}

impl AsRef<[u8]> for Counted {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.live_bytes.fetch_sub(self.data.len(), Ordering::SeqCst);
    }
}

impl Export for Counting {
    fn size(&self) -> u64 {
        1 << 40
    }

    fn read_only(&self) -> bool {
        true
    }

    fn read(&self, _offset: u64, length: u32) -> IoFuture<'_, Bytes> {
        let now = self.live_bytes.fetch_add(length as usize, Ordering::SeqCst) + length as usize;
        self.most_bytes.fetch_max(now, Ordering::SeqCst);
        let counted =
            Counted { data: vec![7u8; length as usize], live_bytes: self.live_bytes.clone() };
        Box::pin(async move { Ok(Bytes::from_owner(counted)) })
    }

    fn write(&self, _offset: u64, _data: Bytes, _fua: bool) -> IoFuture<'_, ()> {
        Box::pin(async { Err(Errno::Perm) })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    fn trim(&self, _offset: u64, _length: u32, _fua: bool) -> IoFuture<'_, ()> {
        Box::pin(async { Err(Errno::Perm) })
    }

    fn write_zeroes(&self, _: u64, _: u32, _: bool, _: bool) -> IoFuture<'_, ()> {
        Box::pin(async { Err(Errno::Perm) })
    }
}

const MIB: usize = 1 << 20;

/// Small budgets: 1 MiB requests, 4 MiB per connection, 6 MiB in all.
fn small_budget() -> Limits {
    Limits {
        max_request_bytes: MIB as u32,
        max_bytes_in_flight: 4 * MIB,
        max_total_bytes_in_flight: 6 * MIB,
        ..Limits::default()
    }
}

/// Opens `counting` on a server shared with other connections; sends `reads` reads of the
/// largest size without reading a reply.
async fn pipeline_reads(
    server: &Arc<Server>,
    access: &Arc<Access>,
    reads: u64,
) -> (DuplexStream, tokio::task::JoinHandle<Result<(), NbdError>>) {
    let (mut client, end) = tokio::io::duplex(64 << 10);
    let (server, access) = (server.clone(), access.clone());
    let served = tokio::spawn(async move { server.serve(end, &access).await });
    greet(&mut client).await;
    let opened = option(&mut client, proto::OPT_GO, &go_data("counting")).await;
    assert_eq!(kinds(&opened), [proto::REP_INFO, proto::REP_ACK]);
    let mut requests = Vec::new();
    for cookie in 0..reads {
        requests.extend_from_slice(&testing::request(
            0,
            0,
            cookie,
            cookie * MIB as u64,
            MIB as u32,
        ));
    }
    client.write_all(&requests).await.unwrap();
    (client, served)
}

/// Issue 36, item 4: one connection pipelining many large reads without reading a reply made
/// the server hold every answer (64 executing and 64 queued per connection). Now a
/// connection holds at most its budget, all connections at most the server's, and every read
/// is still answered once the client reads.
#[tokio::test(start_paused = true)]
async fn clients_that_do_not_read_replies_hold_at_most_their_budget() {
    let live_bytes = Arc::new(AtomicUsize::new(0));
    let most_bytes = Arc::new(AtomicUsize::new(0));
    let counting = Counting { live_bytes: live_bytes.clone(), most_bytes: most_bytes.clone() };
    let exports: Vec<(String, Arc<dyn Export>)> = vec![("counting".into(), Arc::new(counting))];
    let access = Arc::new(Access::Open(Arc::new(exports)));
    let limits = small_budget();
    let server = Arc::new(Server::new(limits).unwrap());

    let (mut first, first_served) = pipeline_reads(&server, &access, 40).await;
    // Paused time runs ahead only when every task waits: by then the server has done all it
    // will without the client reading.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let most = most_bytes.load(Ordering::SeqCst);
    assert!(most <= limits.max_bytes_in_flight, "one connection held {most} bytes");
    assert!(most >= limits.max_bytes_in_flight / 2, "the budget was used: {most}");

    // A second connection gets what is left of the server's budget, no more.
    let (mut second, second_served) = pipeline_reads(&server, &access, 40).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let most = most_bytes.load(Ordering::SeqCst);
    assert!(most <= limits.max_total_bytes_in_flight, "two connections held {most} bytes");

    // Every read is answered once the clients read.
    for client in [&mut first, &mut second] {
        let mut cookies = Vec::new();
        for _ in 0..40 {
            let (error, cookie, _) = read_reply(client, MIB).await;
            assert_eq!(error, 0);
            cookies.push(cookie);
        }
        cookies.sort_unstable();
        assert_eq!(cookies, (0..40).collect::<Vec<_>>());
        client.write_all(&testing::request(2, 0, 99, 0, 0)).await.unwrap();
    }
    first_served.await.unwrap().unwrap();
    second_served.await.unwrap().unwrap();
    assert!(most_bytes.load(Ordering::SeqCst) <= limits.max_total_bytes_in_flight);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(live_bytes.load(Ordering::SeqCst), 0, "every answer's buffer freed");
}

async fn read_reply(stream: &mut DuplexStream, data: usize) -> (u32, u64, Vec<u8>) {
    let mut header = [0u8; 16];
    stream.read_exact(&mut header).await.unwrap();
    let error = u32::from_be_bytes(header[4..8].try_into().unwrap());
    let cookie = u64::from_be_bytes(header[8..16].try_into().unwrap());
    let mut payload = vec![0u8; if error == 0 { data } else { 0 }];
    stream.read_exact(&mut payload).await.unwrap();
    (error, cookie, payload)
}

/// A client that never reads its replies is disconnected after the reply timeout, and what
/// its connection held is given back.
#[tokio::test(start_paused = true)]
async fn a_client_that_never_reads_its_replies_is_disconnected_and_its_budget_freed() {
    let live_bytes = Arc::new(AtomicUsize::new(0));
    let most_bytes = Arc::new(AtomicUsize::new(0));
    let counting = Counting { live_bytes: live_bytes.clone(), most_bytes };
    let exports: Vec<(String, Arc<dyn Export>)> = vec![("counting".into(), Arc::new(counting))];
    let access = Arc::new(Access::Open(Arc::new(exports)));
    let limits = small_budget();
    let server = Arc::new(Server::new(limits).unwrap());
    let (_client, served) = pipeline_reads(&server, &access, 40).await;
    let ended = served.await.unwrap();
    assert!(matches!(ended, Err(NbdError::RepliesNotRead(_))), "{ended:?}");
    // Paused time runs ahead once every task waits: the requests' tasks have ended by then.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(live_bytes.load(Ordering::SeqCst), 0, "its answers' buffers freed");
}

/// A connection with nothing in flight that sends nothing for the idle timeout is closed
/// while the server is crowded — and only then: an idle virtual disk is a normal client.
#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_closed_after_the_idle_timeout_while_the_server_is_crowded() {
    let vol0: Arc<dyn Export> = Arc::new(MemoryExport::new(SIZE, false));
    let exports: Vec<(String, Arc<dyn Export>)> = vec![("vol0".into(), vol0)];
    let access = Access::Open(Arc::new(exports));
    let limits = Limits { max_connections: 4, idle_close_connections: 2, ..Limits::default() };
    let server = Arc::new(Server::new(limits).unwrap());
    let (mut stream, end) = tokio::io::duplex(64 << 10);
    let served = {
        let server = server.clone();
        tokio::spawn(async move { server.serve(end, &access).await })
    };
    greet(&mut stream).await;
    option(&mut stream, proto::OPT_GO, &go_data("vol0")).await;
    // One connection of four: idle for ten idle timeouts, still served.
    tokio::time::sleep(IDLE_TIMEOUT * 10).await;
    let read = testing::request(0, 0, 1, 0, 512);
    assert_eq!(request(&mut stream, &read, 512).await.0, 0, "an idle connection, not crowded");
    // Two connections open (the others counted as the accept loop counts them): crowded.
    let others = server.connections.clone().acquire_many_owned(1).await.unwrap();
    let permit = server.connections.clone().acquire_many_owned(1).await.unwrap();
    assert_eq!(server.connections_open(), 2);
    let started = tokio::time::Instant::now();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).await.unwrap();
    assert!(started.elapsed() >= IDLE_TIMEOUT, "closed after {:?}", started.elapsed());
    assert!(started.elapsed() <= IDLE_TIMEOUT * 2, "closed after {:?}", started.elapsed());
    assert!(matches!(served.await.unwrap(), Err(NbdError::Idle(_))));
    drop((others, permit));
}

#[test]
fn limits_that_do_not_fit_together_are_refused() {
    assert!(Limits::default().check().is_ok());
    let too_big = Limits { max_request_bytes: 256 << 20, ..Limits::default() };
    assert!(matches!(too_big.check(), Err(NbdError::Limits(_))));
    let too_small_total = Limits { max_total_bytes_in_flight: 1 << 20, ..Limits::default() };
    assert!(Server::new(too_small_total).is_err());
}

/// Structured replies, metadata contexts and block status (issue 40).
mod structured {
    use super::*;
    use crate::export::Extent;
    use crate::transmission::EXTENTS_MAX;

    const STATUS: u16 = 7;

    /// `NBD_OPT_*_META_CONTEXT` data.
    fn meta(name: &str, queries: &[&str]) -> Vec<u8> {
        let mut data = (name.len() as u32).to_be_bytes().to_vec();
        data.extend_from_slice(name.as_bytes());
        data.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for query in queries {
            data.extend_from_slice(&(query.len() as u32).to_be_bytes());
            data.extend_from_slice(query.as_bytes());
        }
        data
    }

    /// The (id, name) of each `NBD_REP_META_CONTEXT`, and the last reply's type.
    fn contexts(replies: &[(u32, Vec<u8>)]) -> (Vec<(u32, String)>, u32) {
        let listed = replies
            .iter()
            .filter(|(kind, _)| *kind == proto::REP_META_CONTEXT)
            .map(|(_, data)| {
                let id = u32::from_be_bytes(data[..4].try_into().unwrap());
                (id, String::from_utf8(data[4..].to_vec()).unwrap())
            })
            .collect();
        (listed, replies.last().unwrap().0)
    }

    /// A structured reply chunk: (flags, type, cookie, payload).
    async fn chunk<S: AsyncRead + Unpin>(stream: &mut S) -> (u16, u16, u64, Vec<u8>) {
        let mut header = [0u8; proto::CHUNK_HEADER_BYTES];
        stream.read_exact(&mut header).await.unwrap();
        assert_eq!(header[..4], proto::STRUCTURED_REPLY_MAGIC.to_be_bytes(), "{header:?}");
        let flags = u16::from_be_bytes(header[4..6].try_into().unwrap());
        let kind = u16::from_be_bytes(header[6..8].try_into().unwrap());
        let cookie = u64::from_be_bytes(header[8..16].try_into().unwrap());
        let length = u32::from_be_bytes(header[16..20].try_into().unwrap());
        let mut payload = vec![0u8; length as usize];
        stream.read_exact(&mut payload).await.unwrap();
        (flags, kind, cookie, payload)
    }

    /// The error of an error chunk.
    fn chunk_error(kind: u16, payload: &[u8]) -> u32 {
        assert_eq!(kind, proto::REPLY_TYPE_ERROR, "an error chunk");
        u32::from_be_bytes(payload[..4].try_into().unwrap())
    }

    /// A block status reply: per context id, its (length, flags) descriptors; or the error.
    async fn block_status<S: AsyncRead + AsyncWrite + Unpin>(
        stream: &mut S,
        flags: u16,
        cookie: u64,
        offset: u64,
        length: u32,
    ) -> Result<Vec<(u32, Vec<(u32, u32)>)>, u32> {
        stream.write_all(&testing::request(STATUS, flags, cookie, offset, length)).await.unwrap();
        let mut out = Vec::new();
        loop {
            let (chunk_flags, kind, got, payload) = chunk(stream).await;
            assert_eq!(got, cookie);
            if kind & (1 << 15) != 0 {
                assert_ne!(chunk_flags & proto::REPLY_FLAG_DONE, 0);
                return Err(chunk_error(kind, &payload));
            }
            assert_eq!(kind, proto::REPLY_TYPE_BLOCK_STATUS);
            assert_eq!((payload.len() - 4) % 8, 0);
            let id = u32::from_be_bytes(payload[..4].try_into().unwrap());
            let descriptors = payload[4..]
                .chunks_exact(8)
                .map(|d| {
                    (
                        u32::from_be_bytes(d[..4].try_into().unwrap()),
                        u32::from_be_bytes(d[4..].try_into().unwrap()),
                    )
                })
                .collect();
            out.push((id, descriptors));
            if chunk_flags & proto::REPLY_FLAG_DONE != 0 {
                return Ok(out);
            }
        }
    }

    /// An export of 64 KiB in layers: 16 KiB of its own, 16 KiB from its backing image, 16
    /// KiB from that one's, 16 KiB nowhere; or, `striped`, 512-byte extents of data and holes
    /// over a large size.
    struct Layers {
        striped: bool,
    }

    impl Export for Layers {
        fn size(&self) -> u64 {
            if self.striped { 1 << 30 } else { 64 << 10 }
        }

        fn read_only(&self) -> bool {
            true
        }

        fn read(&self, _offset: u64, length: u32) -> IoFuture<'_, Bytes> {
            Box::pin(async move { Ok(Bytes::from(vec![1u8; length as usize])) })
        }

        fn write(&self, _: u64, _: Bytes, _: bool) -> IoFuture<'_, ()> {
            Box::pin(async { Err(Errno::Perm) })
        }

        fn flush(&self) -> IoFuture<'_, ()> {
            Box::pin(async { Ok(()) })
        }

        fn trim(&self, _: u64, _: u32, _: bool) -> IoFuture<'_, ()> {
            Box::pin(async { Err(Errno::Perm) })
        }

        fn write_zeroes(&self, _: u64, _: u32, _: bool, _: bool) -> IoFuture<'_, ()> {
            Box::pin(async { Err(Errno::Perm) })
        }

        /// Whole layers from the first one `offset` is in, past the request's end (the server
        /// cuts them).
        fn block_status(&self, offset: u64, _length: u32) -> IoFuture<'_, Vec<Extent>> {
            let mut out = Vec::new();
            if self.striped {
                let mut at = offset;
                while at < self.size() {
                    let extent =
                        if (at / 512).is_multiple_of(2) { Extent::data } else { Extent::hole };
                    out.push(extent(512 - (at % 512) as u32));
                    at = (at / 512 + 1) * 512;
                }
                return Box::pin(async move { Ok(out) });
            }
            let layer = 16 << 10;
            let mut at = offset;
            while at < self.size() {
                let end = (at / layer + 1) * layer;
                let depth = (at / layer) as u32 + 1;
                let length = (end - at) as u32;
                out.push(if depth == 4 {
                    Extent::hole(length)
                } else {
                    Extent { length, hole: false, zero: false, depth }
                });
                at = end;
            }
            Box::pin(async move { Ok(out) })
        }

        fn allocation_depth(&self) -> bool {
            !self.striped
        }
    }

    /// `vol0` (8 MiB in memory), `layers` and `striped`, served without TLS.
    fn open_access() -> (Arc<MemoryExport>, Arc<Access>) {
        let vol0 = Arc::new(MemoryExport::new(SIZE, false));
        let exports: Vec<(String, Arc<dyn Export>)> = vec![
            ("vol0".into(), vol0.clone()),
            ("layers".into(), Arc::new(Layers { striped: false })),
            ("striped".into(), Arc::new(Layers { striped: true })),
        ];
        (vol0, Arc::new(Access::Open(Arc::new(exports))))
    }

    /// Structured replies, then contexts `queries` set for `name`, then `NBD_OPT_GO` on it.
    async fn negotiate(access: &Arc<Access>, name: &str, queries: &[&str]) -> DuplexStream {
        let (mut stream, _served) = connect(access.clone(), Limits::default());
        greet(&mut stream).await;
        let acked = option(&mut stream, proto::OPT_STRUCTURED_REPLY, &[]).await;
        assert_eq!(kinds(&acked), [proto::REP_ACK]);
        let set = option(&mut stream, proto::OPT_SET_META_CONTEXT, &meta(name, queries)).await;
        assert_eq!(set.last().unwrap().0, proto::REP_ACK);
        let opened = option(&mut stream, proto::OPT_GO, &go_data(name)).await;
        assert_eq!(kinds(&opened), [proto::REP_INFO, proto::REP_ACK]);
        stream
    }

    #[tokio::test]
    async fn structured_replies_and_meta_contexts_are_negotiated_as_the_protocol_says() {
        let (_, access) = open_access();
        let (mut stream, served) = connect(access, Limits::default());
        greet(&mut stream).await;
        // Setting contexts needs structured replies first.
        let early = option(&mut stream, proto::OPT_SET_META_CONTEXT, &meta("vol0", &[])).await;
        assert_eq!(kinds(&early), [proto::REP_ERR_INVALID]);
        // Listing does not; no query lists every context of the export.
        let listed = option(&mut stream, proto::OPT_LIST_META_CONTEXT, &meta("vol0", &[])).await;
        assert_eq!(contexts(&listed), (vec![(0, "base:allocation".into())], proto::REP_ACK));
        let data = option(&mut stream, proto::OPT_STRUCTURED_REPLY, b"x").await;
        assert_eq!(kinds(&data), [proto::REP_ERR_INVALID], "the option takes no data");
        let acked = option(&mut stream, proto::OPT_STRUCTURED_REPLY, &[]).await;
        assert_eq!(kinds(&acked), [proto::REP_ACK]);
        // Namespaces list their contexts; qemu:allocation-depth only where the export knows it.
        for (name, query, expected) in [
            ("vol0", "base:", vec![(0, "base:allocation".to_string())]),
            ("vol0", "qemu:", vec![]),
            ("layers", "qemu:", vec![(0, "qemu:allocation-depth".to_string())]),
            ("layers", "qemu:allocation-depth", vec![(0, "qemu:allocation-depth".to_string())]),
            ("layers", "x-other:thing", vec![]),
        ] {
            let data = meta(name, &[query]);
            let listed = option(&mut stream, proto::OPT_LIST_META_CONTEXT, &data).await;
            assert_eq!(contexts(&listed), (expected, proto::REP_ACK), "{name} {query}");
        }
        let unknown = option(&mut stream, proto::OPT_LIST_META_CONTEXT, &meta("nope", &[])).await;
        assert_eq!(kinds(&unknown), [proto::REP_ERR_UNKNOWN]);
        let unknown = option(&mut stream, proto::OPT_SET_META_CONTEXT, &meta("nope", &[])).await;
        assert_eq!(kinds(&unknown), [proto::REP_ERR_UNKNOWN]);
        let mut bad = meta("vol0", &["base:allocation"]);
        bad.pop();
        let bad = option(&mut stream, proto::OPT_SET_META_CONTEXT, &bad).await;
        assert_eq!(kinds(&bad), [proto::REP_ERR_INVALID], "malformed data");
        // Setting: whole names only ("base:" selects nothing), unknown ones ignored, each once.
        let queries = ["x-foo:bar", "base:", "base:allocation", "base:allocation", "qemu:"];
        let set = option(&mut stream, proto::OPT_SET_META_CONTEXT, &meta("layers", &queries)).await;
        let (set, last) = contexts(&set);
        assert_eq!(last, proto::REP_ACK);
        assert_eq!(set.len(), 1, "{set:?}");
        assert_eq!(set[0].1, "base:allocation");
        assert_ne!(set[0].0, 0, "a set context has an id");
        let both = ["qemu:allocation-depth", "base:allocation"];
        let set = option(&mut stream, proto::OPT_SET_META_CONTEXT, &meta("layers", &both)).await;
        let (set, _) = contexts(&set);
        assert_eq!(set.len(), 2);
        assert_ne!(set[0].0, set[1].0, "ids differ");
        let opened = option(&mut stream, proto::OPT_GO, &go_data("layers")).await;
        assert_eq!(kinds(&opened), [proto::REP_INFO, proto::REP_ACK]);
        let answer = block_status(&mut stream, 0, 1, 0, 64 << 10).await.unwrap();
        let by_name = |name: &str| {
            let id = set.iter().find(|(_, n)| n == name).unwrap().0;
            answer.iter().find(|(i, _)| *i == id).unwrap().1.clone()
        };
        let hole = proto::STATE_HOLE | proto::STATE_ZERO;
        assert_eq!(by_name("base:allocation"), [(48 << 10, 0), (16 << 10, hole)]);
        assert_eq!(
            by_name("qemu:allocation-depth"),
            [(16 << 10, 1), (16 << 10, 2), (16 << 10, 3), (16 << 10, 0)]
        );
        stream.write_all(&testing::request(2, 0, 9, 0, 0)).await.unwrap();
        served.await.unwrap().expect("a clean disconnect");
    }

    #[tokio::test]
    async fn block_status_describes_the_request_and_never_beyond_it() {
        let (vol0, access) = open_access();
        let block = MemoryExport::BLOCK as usize;
        let mut stream = negotiate(&access, "vol0", &["base:allocation"]).await;
        // Data in blocks 1 and 2 and 5; the rest holes.
        let mut write = testing::request(1, 0, 1, block as u64, 2 * block as u32);
        write.extend_from_slice(&vec![7u8; 2 * block]);
        assert_eq!(request(&mut stream, &write, 0).await.0, 0, "a simple reply to a write");
        let mut write = testing::request(1, 0, 2, 5 * block as u64, 1);
        write.push(9);
        assert_eq!(request(&mut stream, &write, 0).await.0, 0);
        assert!(vol0.contents()[block..3 * block].iter().all(|b| *b == 7));
        let hole = proto::STATE_HOLE | proto::STATE_ZERO;
        let b = block as u32;
        let answer = block_status(&mut stream, 0, 3, 0, 8 * b).await.unwrap();
        assert_eq!(
            answer,
            [(1, vec![(b, hole), (2 * b, 0), (2 * b, hole), (b, 0), (2 * b, hole)])]
        );
        // Unaligned, and the sum is the request's length exactly (the export says more).
        let answer = block_status(&mut stream, 0, 4, 100, 3 * b).await.unwrap();
        assert_eq!(answer, [(1, vec![(b - 100, hole), (2 * b, 0), (100, hole)])]);
        let answer = block_status(&mut stream, 0, 5, 0, SIZE as u32).await.unwrap();
        let sum: u64 = answer[0].1.iter().map(|(l, _)| u64::from(*l)).sum();
        assert_eq!(sum, SIZE as u64);
        // One extent with REQ_ONE, within the request.
        let one = proto::CMD_FLAG_REQ_ONE;
        assert_eq!(
            block_status(&mut stream, one, 6, 0, 8 * b).await.unwrap(),
            [(1, vec![(b, hole)])]
        );
        assert_eq!(
            block_status(&mut stream, one, 7, b as u64, 10).await.unwrap(),
            [(1, vec![(10, 0)])]
        );
        // Beyond the end, of no length, or with flags it does not know: EINVAL.
        let end = SIZE as u64;
        assert_eq!(block_status(&mut stream, 0, 8, end - 10, 11).await, Err(proto::EINVAL));
        assert_eq!(block_status(&mut stream, 0, 9, 0, 0).await, Err(proto::EINVAL));
        assert_eq!(block_status(&mut stream, 1 << 2, 10, 0, 4096).await, Err(proto::EINVAL));
        // REQ_ONE is for block status only.
        let read = testing::request(0, one, 11, 0, 16);
        stream.write_all(&read).await.unwrap();
        let (flags, kind, _, payload) = chunk(&mut stream).await;
        assert_ne!(flags & proto::REPLY_FLAG_DONE, 0);
        assert_eq!(chunk_error(kind, &payload), proto::EINVAL);
        stream.write_all(&testing::request(2, 0, 12, 0, 0)).await.unwrap();
    }

    #[tokio::test]
    async fn reads_are_answered_in_chunks_once_structured_replies_are_negotiated() {
        let (_, access) = open_access();
        let mut stream = negotiate(&access, "vol0", &[]).await;
        let mut write = testing::request(1, 0, 1, 8192, 5);
        write.extend_from_slice(b"hello");
        assert_eq!(request(&mut stream, &write, 0).await.0, 0);
        // Data: one OFFSET_DATA chunk, the last, at the request's offset.
        stream.write_all(&testing::request(0, 0, 2, 8190, 8)).await.unwrap();
        let (flags, kind, cookie, payload) = chunk(&mut stream).await;
        assert_eq!(
            (flags, kind, cookie),
            (proto::REPLY_FLAG_DONE, proto::REPLY_TYPE_OFFSET_DATA, 2)
        );
        assert_eq!(payload[..8], 8190u64.to_be_bytes());
        assert_eq!(&payload[8..], b"\0\0hello\0");
        // Zeros: one OFFSET_HOLE chunk.
        stream.write_all(&testing::request(0, 0, 3, 1 << 20, 65536)).await.unwrap();
        let (flags, kind, cookie, payload) = chunk(&mut stream).await;
        assert_eq!(
            (flags, kind, cookie),
            (proto::REPLY_FLAG_DONE, proto::REPLY_TYPE_OFFSET_HOLE, 3)
        );
        assert_eq!(payload[..8], (1u64 << 20).to_be_bytes());
        assert_eq!(payload[8..], 65536u32.to_be_bytes());
        // Errors of reads are error chunks, never simple replies.
        stream.write_all(&testing::request(0, 0, 4, SIZE as u64, 1)).await.unwrap();
        let (flags, kind, cookie, payload) = chunk(&mut stream).await;
        assert_eq!((flags, cookie), (proto::REPLY_FLAG_DONE, 4));
        assert_eq!(chunk_error(kind, &payload), proto::EINVAL);
        let message_length = u16::from_be_bytes(payload[4..6].try_into().unwrap()) as usize;
        assert_eq!(payload.len(), 6 + message_length);
        assert_eq!(&payload[6..], b"invalid request", "a message for people");
        // No context was selected: block status is refused.
        assert_eq!(block_status(&mut stream, 0, 5, 0, 4096).await, Err(proto::EINVAL));
        stream.write_all(&testing::request(2, 0, 6, 0, 0)).await.unwrap();
    }

    /// Contexts set for one export do not hold for another chosen after; STARTTLS-free
    /// servers keep structured replies to themselves unless asked.
    #[tokio::test]
    async fn contexts_hold_only_for_the_export_they_were_set_for() {
        let (_, access) = open_access();
        let (mut stream, _served) = connect(access.clone(), Limits::default());
        greet(&mut stream).await;
        option(&mut stream, proto::OPT_STRUCTURED_REPLY, &[]).await;
        let set = meta("layers", &["base:allocation"]);
        let set = option(&mut stream, proto::OPT_SET_META_CONTEXT, &set).await;
        assert_eq!(kinds(&set), [proto::REP_META_CONTEXT, proto::REP_ACK]);
        option(&mut stream, proto::OPT_GO, &go_data("vol0")).await;
        assert_eq!(block_status(&mut stream, 0, 1, 0, 4096).await, Err(proto::EINVAL));
        // Without structured replies, reads stay simple.
        let (mut plain, _served) = connect(access, Limits::default());
        greet(&mut plain).await;
        option(&mut plain, proto::OPT_GO, &go_data("vol0")).await;
        assert_eq!(request(&mut plain, &testing::request(0, 0, 1, 0, 4), 4).await, (0, vec![0; 4]));
    }

    /// An export answering extent by extent is cut at [`EXTENTS_MAX`] descriptors, the sum
    /// short of the request; the client asks again from there.
    #[tokio::test]
    async fn many_extents_are_cut_to_a_bounded_reply() {
        let (_, access) = open_access();
        let mut stream = negotiate(&access, "striped", &["base:allocation"]).await;
        let answer = block_status(&mut stream, 0, 1, 0, 1 << 30).await.unwrap();
        let descriptors = &answer[0].1;
        assert_eq!(descriptors.len(), EXTENTS_MAX);
        let sum: u64 = descriptors.iter().map(|(l, _)| u64::from(*l)).sum();
        assert_eq!(sum, 512 * EXTENTS_MAX as u64);
        assert!(descriptors.iter().all(|(l, _)| *l == 512));
        let again = block_status(&mut stream, 0, 2, sum, 1024).await.unwrap();
        assert_eq!(again, [(1, vec![(512, 0), (512, proto::STATE_HOLE | proto::STATE_ZERO)])]);
    }

    /// Read-only exports keep their block status.
    #[tokio::test]
    async fn read_only_exports_answer_block_status_as_their_export() {
        let exports: Vec<(String, Arc<dyn Export>)> =
            vec![("layers".into(), Arc::new(Layers { striped: false }))];
        let read_only = ReadOnlyExports(Arc::new(exports));
        let access = Arc::new(Access::Open(Arc::new(read_only)));
        let listed = {
            let (mut stream, _served) = connect(access.clone(), Limits::default());
            greet(&mut stream).await;
            option(&mut stream, proto::OPT_LIST_META_CONTEXT, &meta("layers", &[])).await
        };
        assert_eq!(contexts(&listed).0.len(), 2, "both contexts offered");
        let mut stream = negotiate(&access, "layers", &["qemu:allocation-depth"]).await;
        let answer = block_status(&mut stream, 0, 1, 20 << 10, 8 << 10).await.unwrap();
        assert_eq!(answer, [(2, vec![(8 << 10, 2)])]);
    }
}

/// The fuzz target's seed for the new options (`fuzz/corpus/nbd/structured-meta-block-status`),
/// mutated: every variant served to the end, without a panic or a hang.
mod mutated {
    use super::*;
    use proptest::prelude::*;

    fn seed() -> Vec<u8> {
        let bytes = include_bytes!("../../../../fuzz/corpus/nbd/structured-meta-block-status");
        bytes.to_vec()
    }

    /// Serves `stream` as one client's whole input: the server ends (or is still waiting
    /// for more only because the client cannot send more — excluded by closing the write
    /// side) without a panic.
    async fn serve_stream(stream: Vec<u8>) -> Vec<u8> {
        let vol0: Arc<dyn Export> = Arc::new(MemoryExport::new(1 << 16, false));
        let exports: Vec<(String, Arc<dyn Export>)> = vec![("vol0".into(), vol0)];
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let limits = Limits { handshake_timeout: Duration::from_secs(5), ..Limits::default() };
        let serving = tokio::spawn(crate::serve(server, Arc::new(exports), limits));
        let _ = client.write_all(&stream).await;
        let _ = client.shutdown().await;
        let mut answer = Vec::new();
        let _ = client.read_to_end(&mut answer).await;
        let ended = tokio::time::timeout(Duration::from_secs(10), serving).await;
        let joined = ended.expect("the server ends once the client has");
        assert!(!joined.as_ref().is_err_and(|e| e.is_panic()), "a panic: {joined:?}");
        answer
    }

    #[test]
    fn the_seed_negotiates_contexts_and_gets_block_status() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let answer = runtime.block_on(serve_stream(seed()));
        // One block-status chunk, the last, for each of the two requests (a memory export
        // offers base:allocation only, of the two contexts the seed asks for).
        let mut chunk = proto::STRUCTURED_REPLY_MAGIC.to_be_bytes().to_vec();
        chunk.extend_from_slice(&0u16.to_be_bytes());
        chunk.extend_from_slice(&proto::REPLY_TYPE_BLOCK_STATUS.to_be_bytes());
        let last = {
            let mut last = proto::STRUCTURED_REPLY_MAGIC.to_be_bytes().to_vec();
            last.extend_from_slice(&proto::REPLY_FLAG_DONE.to_be_bytes());
            last.extend_from_slice(&proto::REPLY_TYPE_BLOCK_STATUS.to_be_bytes());
            last
        };
        let count = |needle: &[u8]| answer.windows(needle.len()).filter(|w| *w == needle).count();
        assert_eq!((count(&chunk), count(&last)), (0, 2), "{answer:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        #[test]
        fn mutated_seeds_never_panic_or_hang(
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
            cut in any::<usize>(),
        ) {
            let mut stream = seed();
            for (at, byte) in flips {
                let at = at % stream.len();
                stream[at] = byte;
            }
            stream.truncate(stream.len() - cut % 64.min(stream.len()));
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(serve_stream(stream));
        }
    }
}
