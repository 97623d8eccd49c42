//! The servers' `/metrics` scraped for the console's rates ([`super::rates`] computes them):
//! each server at most once per [`SERVERS_CACHE_TTL`], its previous scrape kept.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use optio_placement::ClusterMap;

use super::api::{Console, SERVERS_CACHE_TTL};
use super::rates::{Rates, between, parse};

impl Console {
    /// Each server's request rates (by address) from its `/metrics`, scraped at most once per
    /// [`SERVERS_CACHE_TTL`]: the counters' differences from the server's previous scrape.
    pub(super) async fn rates(&self, map: &ClusterMap) -> Arc<Rates> {
        let mut cache = self.rates_cache.lock().await;
        if let Some((at, rates)) = &cache.0
            && at.elapsed() < SERVERS_CACHE_TTL
        {
            return rates.clone();
        }
        let addrs: BTreeSet<String> = map.devices().iter().filter_map(|d| d.addr.clone()).collect();
        let scraped = futures_util::future::join_all(addrs.iter().map(|addr| async move {
            let text = self.transport.server_metrics(addr).await;
            (addr.clone(), Instant::now(), text.map(|t| parse(&t)))
        }))
        .await;
        let previous = &mut cache.1;
        previous.retain(|addr, _| addrs.contains(addr));
        let mut rates = Rates::new();
        for (addr, now, scrape) in scraped {
            match scrape {
                Ok(scrape) => {
                    let found = previous
                        .get(&addr)
                        .and_then(|(then, before)| between(before, *then, &scrape, now));
                    if let Some(found) = found {
                        rates.insert(addr.clone(), found);
                    }
                    previous.insert(addr, (now, scrape));
                }
                Err(_) => {
                    previous.remove(&addr);
                }
            }
        }
        let rates = Arc::new(rates);
        cache.0 = Some((Instant::now(), rates.clone()));
        rates
    }
}
