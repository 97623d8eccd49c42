//! Listing a bucket: pages of keys in order after a marker, rolled up into common prefixes at
//! a delimiter.

use super::error::Result;
use super::gateway::Gateway;
use super::layout::{Bucket, summary_of};
use crate::format::Summary;

/// One page of a listing.
#[derive(Debug, Default)]
pub struct ListPage {
    /// Keys (without the bucket), with what the listing knows of them.
    pub objects: Vec<Listed>,
    /// Common prefixes (with a delimiter).
    pub prefixes: Vec<String>,
    /// More follow.
    pub truncated: bool,
    /// Where the next page starts (after this key or prefix), when truncated.
    pub next: Option<String>,
}

/// An object in a listing.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The key.
    pub key: String,
    /// The summary.
    pub summary: Summary,
    /// When it was written (its version: microseconds since the Unix epoch).
    pub modified_micros: u64,
}

impl Gateway {
    /// A page of the objects of `bucket` under `prefix`, after `after` (a key or a common
    /// prefix the previous page ended with), rolled up at `delimiter`.
    pub async fn list(
        &self,
        bucket: &Bucket,
        prefix: &str,
        delimiter: Option<&str>,
        after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage> {
        let base = bucket.objects_prefix();
        let full_prefix = format!("{base}{prefix}");
        let start = after.filter(|a| *a >= prefix).map(|a| format!("{base}{a}"));
        let mut cursor =
            self.client.list_cursor(&bucket.pool, &full_prefix, start.as_deref(), max_keys)?;
        let delimiter = delimiter.filter(|d| !d.is_empty());
        let mut page = ListPage::default();
        // A common prefix the previous page ended with is not shown again.
        let mut last_prefix: Option<String> = after.map(str::to_string);
        let mut count = 0usize;
        if max_keys == 0 {
            return Ok(page);
        }
        while let Some(info) = cursor.next(&self.client).await? {
            let key = &info.key[base.len()..];
            let rolled = delimiter.and_then(|d| {
                key[prefix.len()..].find(d).map(|at| key[..prefix.len() + at + d.len()].to_string())
            });
            if let Some(common) = &rolled
                && last_prefix.as_deref() == Some(common.as_str())
            {
                cursor.skip_to(&format!("{base}{common}{}", char::MAX));
                continue;
            }
            if count == max_keys {
                page.truncated = true;
                break;
            }
            count += 1;
            match rolled {
                Some(common) => {
                    cursor.skip_to(&format!("{base}{common}{}", char::MAX));
                    page.next = Some(common.clone());
                    last_prefix = Some(common.clone());
                    page.prefixes.push(common);
                }
                None => {
                    let Some(summary) = summary_of(&info) else {
                        tracing::warn!(key = %info.key, "an object without an S3 head in a bucket; not listed");
                        count -= 1;
                        continue;
                    };
                    page.next = Some(key.to_string());
                    page.objects.push(Listed {
                        key: key.to_string(),
                        summary,
                        modified_micros: info.version.0,
                    });
                }
            }
        }
        if !page.truncated {
            page.next = None;
        }
        Ok(page)
    }
}
