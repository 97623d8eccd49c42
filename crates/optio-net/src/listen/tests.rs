use super::*;

#[test]
fn the_default_limit_is_within_its_bounds_and_below_the_file_limit() {
    let limit = default_max_connections();
    assert!((CONNECTIONS_DEFAULT_MIN..=CONNECTIONS_DEFAULT_MAX).contains(&limit), "{limit}");
    if let Some(soft) = crate::local::open_files_soft_limit()
        && soft >= 2 * CONNECTIONS_DEFAULT_MIN as u64
    {
        assert!(limit as u64 <= soft / 2, "{limit} of {soft} files");
    }
}

#[test]
fn zero_timeouts_and_limits_are_refused() {
    let limits = Limits { max_connections: 8, ..Limits::default() };
    assert_eq!(limits.check(), Ok(()));
    let zero = Limits { body_timeout: Duration::ZERO, ..limits };
    assert_eq!(zero.check(), Err(LimitsError::ZeroTimeout("body timeout")));
    assert!(zero.check().unwrap_err().to_string().contains("body timeout is zero"));
    let none = Limits { max_connections: 0, ..limits };
    assert_eq!(none.check(), Err(LimitsError::Connections(0)));
    assert!(none.check().unwrap_err().to_string().contains("connection limit is 0"));
    let huge = Limits { max_connections: CONNECTIONS_MAX + 1, ..limits };
    assert!(huge.check().is_err());
}

#[test]
fn a_timeout_is_found_in_a_chain_of_errors() {
    #[derive(Debug, thiserror::Error)]
    #[error("wrapped")]
    struct Wrapped(#[source] BodyTimeout);
    let wrapped = Wrapped(BodyTimeout(Duration::from_secs(3)));
    assert_eq!(BodyTimeout::find(&wrapped).map(|t| t.0), Some(Duration::from_secs(3)));
    let other = io::Error::other("no");
    assert!(BodyTimeout::find(&other).is_none());
}

#[test]
fn accept_errors_back_off_and_are_logged_at_most_once_per_interval() {
    let mut errors = AcceptErrors::new("connection");
    let emfile = io::Error::from_raw_os_error(24);
    let start = Instant::now();
    let mut pauses = Vec::new();
    for i in 0..8 {
        pauses.push(errors.failed(&emfile, start + Duration::from_millis(i)));
    }
    assert_eq!(pauses[0], ACCEPT_ERROR_PAUSE_MIN);
    assert_eq!(pauses[1], ACCEPT_ERROR_PAUSE_MIN * 2);
    assert_eq!(*pauses.last().unwrap(), ACCEPT_ERROR_PAUSE_MAX);
    assert!(pauses.windows(2).all(|w| w[0] <= w[1]), "{pauses:?}");
    // Within the interval, the errors after the first are counted, not logged.
    assert_eq!(errors.unlogged, 7);
    errors.failed(&emfile, start + ACCEPT_ERROR_LOG_INTERVAL);
    assert_eq!(errors.unlogged, 0, "logged again once the interval passed");
    errors.succeeded();
    assert_eq!(errors.failed(&emfile, start), ACCEPT_ERROR_PAUSE_MIN, "a success starts over");
}

#[tokio::test(start_paused = true)]
async fn phases_time_out_by_their_own_clock_and_busy_ones_never() {
    let limits = Limits {
        header_timeout: Duration::from_secs(10),
        body_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(60),
        max_connections: 4,
    };
    let connection = Arc::new(Tracked::new("connection"));
    let accepted = Instant::now();
    assert_eq!(connection.deadline(&limits), Some(accepted + limits.header_timeout));
    let busy = connection.busy();
    let twice = connection.busy();
    assert_eq!(connection.deadline(&limits), None, "no phase timeout while busy");
    drop(busy);
    assert_eq!(connection.deadline(&limits), None, "one request still in flight");
    drop(twice);
    let idle = connection.quiet_since().expect("idle");
    assert_eq!(connection.deadline(&limits), Some(idle + limits.idle_timeout));
    tokio::time::advance(Duration::from_secs(5)).await;
    connection.on_read();
    let head = connection.quiet_since().unwrap();
    assert!(head > idle, "a read of an idle HTTP/1 connection starts a head phase");
    assert_eq!(connection.deadline(&limits), Some(head + limits.header_timeout));
    // HTTP/2: reads of an idle connection start nothing.
    let h2 = Arc::new(Tracked::new("connection"));
    h2.set_http2();
    drop(h2.busy());
    let since = h2.quiet_since().unwrap();
    tokio::time::advance(Duration::from_secs(1)).await;
    h2.on_read();
    assert_eq!(h2.quiet_since(), Some(since));
    // until_closed returns at the phase's deadline.
    connection.until_closed(&limits, std::future::pending()).await;
    assert_eq!(Instant::now(), head + limits.header_timeout);
}

#[tokio::test(start_paused = true)]
async fn the_limit_closes_the_connection_quiet_the_longest_and_never_a_busy_one() {
    let registry = Registry::default();
    let old = Arc::new(Tracked::new("connection"));
    tokio::time::advance(Duration::from_secs(1)).await;
    let young = Arc::new(Tracked::new("connection"));
    let busy = Arc::new(Tracked::new("connection"));
    let _guard = busy.busy();
    for c in [&old, &young, &busy] {
        registry.add(c.clone());
    }
    assert!(registry.evict_one());
    assert!(old.evicted() && !young.evicted() && !busy.evicted());
    assert!(registry.evict_one(), "the next one quiet");
    assert!(young.evicted());
    assert!(!registry.evict_one(), "only a busy one is left");
    // At the limit with every connection busy, a new one is refused.
    let permits = Arc::new(Semaphore::new(0));
    let lone = Registry::default();
    let only = Arc::new(Tracked::new("connection"));
    let _busy = only.busy();
    lone.add(only.clone());
    assert!(admit(&permits, &lone, 1, "connection").await.is_none());
}
