//! Fuzzes the NBD server with what a client might send: the bytes go, as one client's whole
//! stream, into a connection served over an in-memory export (handshake and transmission);
//! nothing may panic or hang, whatever the bytes.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use optio_nbd::{Export, Exports, Limits, MemoryExport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fuzz_target!(|data: &[u8]| {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let exports: Vec<(String, Arc<dyn Export>)> =
            vec![("vol0".into(), Arc::new(MemoryExport::new(1 << 16, false)) as Arc<dyn Export>)];
        let exports: Arc<dyn Exports> = Arc::new(exports);
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let limits = Limits { handshake_timeout: std::time::Duration::from_secs(5), ..Limits::default() };
        let serving = tokio::spawn(optio_nbd::serve(server, exports, limits));
        let _ = client.write_all(data).await;
        let _ = client.shutdown().await;
        let mut answer = Vec::new();
        let _ = client.read_to_end(&mut answer).await;
        let _ = serving.await;
    });
});
