//! Multipart uploads: begun with a record under `.s3/u/`, each part a stripe named by a part
//! record under `.s3/p/`, completed into one head naming the chosen parts' stripes in order
//! (the others deleted), or aborted.

use std::collections::HashMap;

use bytes::Bytes;
use futures_util::Stream;
use md5::{Digest, Md5};

use super::error::{GatewayError, Result};
use super::gateway::Gateway;
use super::layout::{Bucket, UPLOAD_SEP, UploadRecord, json, parse, summary_of};
use super::{OBJECT_BYTES_MAX, PART_BYTES_MIN, PARTS_MAX, PUT_BYTES_MAX};
use crate::format::{Meta, Stripe, Summary, decode_head, encode_head, random_id};

/// A multipart upload, as listed.
#[derive(Debug, Clone)]
pub struct Upload {
    /// The key.
    pub key: String,
    /// The upload id.
    pub upload_id: String,
    /// When the upload started (microseconds since the Unix epoch).
    pub initiated_micros: u64,
}

/// An uploaded part.
#[derive(Debug, Clone)]
pub struct PartInfo {
    /// The number.
    pub number: i32,
    /// The summary.
    pub summary: Summary,
    /// When it was written (its version: microseconds since the Unix epoch).
    pub modified_micros: u64,
}

impl Gateway {
    /// Starts a multipart upload of `key`; returns its id.
    pub async fn create_upload(
        &self,
        bucket: &Bucket,
        key: &str,
        meta: Meta,
        policy: Option<&str>,
    ) -> Result<String> {
        bucket.head_key(key)?;
        let upload = random_id(16);
        let record = UploadRecord { meta, policy: policy.map(str::to_string) };
        self.client.put(&bucket.pool, &bucket.upload_key(key, &upload)?, json(&record)).await?;
        Ok(upload)
    }

    async fn upload_record(
        &self,
        bucket: &Bucket,
        key: &str,
        upload: &str,
    ) -> Result<UploadRecord> {
        let valid = upload.len() == 32 && upload.bytes().all(|b| b.is_ascii_hexdigit());
        if !valid {
            return Err(GatewayError::NoSuchUpload(upload.to_string()));
        }
        match self.get_opt(&bucket.pool, &bucket.upload_key(key, upload)?).await? {
            Some((_, bytes)) => parse("an upload record", &bytes),
            None => Err(GatewayError::NoSuchUpload(upload.to_string())),
        }
    }

    /// Stores part `number` of an upload from `body`; returns its summary (its ETag).
    pub async fn upload_part<S, E>(
        &self,
        bucket: &Bucket,
        key: &str,
        upload: &str,
        number: i32,
        body: S,
        content_md5: Option<[u8; 16]>,
    ) -> Result<Summary>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        if !(1..=PARTS_MAX).contains(&number) {
            return Err(GatewayError::InvalidArgument(format!(
                "part number {number} is not between 1 and {PARTS_MAX}"
            )));
        }
        let record = self.upload_record(bucket, key, upload).await?;
        let policy = record.policy.as_deref();
        let received = self.receive(bucket, body, PUT_BYTES_MAX, None, policy).await?;
        let stripe = received.stripes[0].clone();
        if content_md5.is_some_and(|m| m != received.md5) {
            self.drop_stripes(bucket, std::slice::from_ref(&stripe)).await;
            return Err(GatewayError::BadDigest);
        }
        let summary = Summary { md5: received.md5, parts: 0, size: received.size, striped: true };
        let part_key = bucket.part_key(upload, number);
        let old = self.part_stripe(bucket, &part_key).await?;
        let meta = Meta { stripes: vec![stripe.clone()], ..Meta::default() };
        let record = Bytes::from(encode_head(&summary, &meta));
        if let Err(error) = self.client.put(&bucket.pool, &part_key, record).await {
            self.drop_stripes(bucket, &[stripe]).await;
            return Err(error.into());
        }
        self.drop_stripes(bucket, &old).await;
        Ok(summary)
    }

    /// The stripe a part record names, if it exists.
    async fn part_stripe(&self, bucket: &Bucket, part_key: &str) -> Result<Vec<Stripe>> {
        match self.get_opt(&bucket.pool, part_key).await? {
            Some((_, bytes)) => Ok(decode_head(&bytes)?.meta.stripes),
            None => Ok(Vec::new()),
        }
    }

    /// The parts of an upload, in part-number order.
    pub async fn list_parts(
        &self,
        bucket: &Bucket,
        key: &str,
        upload: &str,
    ) -> Result<Vec<PartInfo>> {
        self.upload_record(bucket, key, upload).await?;
        let prefix = bucket.parts_prefix(upload);
        let mut parts = Vec::new();
        for info in self.list_all(&bucket.pool, &prefix).await? {
            let Ok(number) = info.key[prefix.len()..].parse::<i32>() else { continue };
            let Some(summary) = summary_of(&info) else { continue };
            parts.push(PartInfo { number, summary, modified_micros: info.version.0 });
        }
        Ok(parts)
    }

    /// Completes an upload from `chosen` (part number, ETag as sent) in order.
    pub async fn complete_upload(
        &self,
        bucket: &Bucket,
        key: &str,
        upload: &str,
        chosen: &[(i32, String)],
    ) -> Result<(Summary, u64)> {
        let record = self.upload_record(bucket, key, upload).await?;
        if chosen.is_empty() {
            return Err(GatewayError::InvalidArgument(
                "a multipart upload is completed with at least one part".into(),
            ));
        }
        if chosen.windows(2).any(|w| w[0].0 > w[1].0) {
            return Err(GatewayError::InvalidPartOrder);
        }
        let mut stored: HashMap<i32, (Summary, Stripe)> = HashMap::new();
        for part in self.list_parts(bucket, key, upload).await? {
            let stripes = self.part_stripe(bucket, &bucket.part_key(upload, part.number)).await?;
            if let Some(stripe) = stripes.into_iter().next() {
                stored.insert(part.number, (part.summary, stripe));
            }
        }
        // A part named twice (sent again while its first upload ran) counts once, as the
        // upload stored last, if one of the ETags named is that upload's.
        let mut named: Vec<(i32, Vec<&str>)> = Vec::new();
        for (number, etag) in chosen {
            match named.last_mut() {
                Some((last, etags)) if last == number => etags.push(etag),
                _ => named.push((*number, vec![etag])),
            }
        }
        let mut md5s = Md5::new();
        let mut stripes = Vec::new();
        let mut size = 0u64;
        for (i, (number, etags)) in named.iter().enumerate() {
            let Some((summary, stripe)) = stored.get(number) else {
                return Err(GatewayError::InvalidPart(format!(
                    "part {number} was not uploaded (or was aborted)"
                )));
            };
            if let Some(etag) = etags.iter().find(|e| e.trim_matches('"') != summary.etag())
                && !etags.iter().any(|e| e.trim_matches('"') == summary.etag())
            {
                return Err(GatewayError::InvalidPart(format!(
                    "part {number}'s ETag is {}, not {etag}",
                    summary.etag()
                )));
            }
            if i + 1 < named.len() && summary.size < PART_BYTES_MIN {
                return Err(GatewayError::EntityTooSmall { part: *number, size: summary.size });
            }
            md5s.update(summary.md5);
            size += summary.size;
            stripes.push(stripe.clone());
        }
        if size > OBJECT_BYTES_MAX {
            return Err(GatewayError::EntityTooLarge(size, OBJECT_BYTES_MAX));
        }
        let summary =
            Summary { md5: md5s.finalize().into(), parts: named.len() as u32, size, striped: true };
        let head_key = bucket.head_key(key)?;
        let meta = Meta { stripes: stripes.clone(), ..record.meta };
        // An empty object made of one empty part is still striped (its stripe has no data).
        let result =
            self.publish(bucket, &head_key, summary, &meta, None, record.policy.as_deref());
        let written = result.await?;
        // The parts not chosen are dropped; the chosen ones now belong to the object.
        let kept: std::collections::HashSet<&str> = stripes.iter().map(|s| s.id.as_str()).collect();
        let unused: Vec<Stripe> = stored
            .values()
            .filter(|(_, s)| !kept.contains(s.id.as_str()))
            .map(|(_, s)| s.clone())
            .collect();
        self.drop_stripes(bucket, &unused).await;
        self.forget_upload(bucket, key, upload, stored.keys().copied()).await?;
        Ok(written)
    }

    async fn forget_upload(
        &self,
        bucket: &Bucket,
        key: &str,
        upload: &str,
        parts: impl Iterator<Item = i32>,
    ) -> Result<()> {
        for number in parts {
            self.delete_quiet(&bucket.pool, &bucket.part_key(upload, number)).await?;
        }
        self.delete_quiet(&bucket.pool, &bucket.upload_key(key, upload)?).await
    }

    /// Abandons an upload: its parts' data is deleted.
    pub async fn abort_upload(&self, bucket: &Bucket, key: &str, upload: &str) -> Result<()> {
        let parts = self.list_parts(bucket, key, upload).await?;
        for part in &parts {
            let stripes = self.part_stripe(bucket, &bucket.part_key(upload, part.number)).await?;
            self.drop_stripes(bucket, &stripes).await;
        }
        self.forget_upload(bucket, key, upload, parts.iter().map(|p| p.number)).await
    }

    /// Uploads in progress under `prefix`, in (key, upload id) order, after `after` (a key and
    /// an upload id), at most `max`; and whether more follow.
    pub async fn list_uploads(
        &self,
        bucket: &Bucket,
        prefix: &str,
        after: Option<(&str, &str)>,
        max: usize,
    ) -> Result<(Vec<Upload>, bool)> {
        let base = bucket.uploads_prefix();
        let start = after.map(|(key, upload)| format!("{base}{key}{UPLOAD_SEP}{upload}"));
        let mut cursor = self.client.list_cursor(
            &bucket.pool,
            &format!("{base}{prefix}"),
            start.as_deref(),
            max.min(1000),
        )?;
        let mut out = Vec::new();
        while let Some(info) = cursor.next(&self.client).await? {
            let Some((key, upload)) = info.key[base.len()..].rsplit_once(UPLOAD_SEP) else {
                continue;
            };
            if out.len() == max {
                return Ok((out, true));
            }
            out.push(Upload {
                key: key.to_string(),
                upload_id: upload.to_string(),
                initiated_micros: info.version.0,
            });
        }
        Ok((out, false))
    }
}
