//! The S3 API on the gateway: s3s parses requests and checks their signatures; each method
//! here maps one operation onto [`Gateway`]. Below the methods: `convert` (errors, times,
//! metadata and bodies between S3's terms and the gateway's), `checksum` (Content-MD5 and
//! the additional checksums), `preconditions`, `copy` (a copy's source and range) and
//! `listing` (what the listings share).

mod checksum;
mod convert;
mod copy;
mod listing;
mod preconditions;

pub use convert::to_s3;

use std::sync::Arc;
use std::time::SystemTime;

use futures_util::StreamExt;

use s3s::dto::*;
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use crate::format::Meta;
use crate::store::{Bucket, Gateway, GatewayError, Opened};
use checksum::{checked_body, content_md5, sent_checksums, stored_checksums};
use convert::{
    async_stream, body_stream, etag_of, expires_of, header, meta_from, metadata_of, owner,
    owner_of, timestamp,
};
use copy::{copy_range, copy_source};
use listing::{Page, encoded, listed, max_keys_of, page_token, prefixes, token_after};
use preconditions::{Preconditions, check_preconditions};

/// The header choosing a new bucket's pool.
pub const POOL_HEADER: &str = "x-optio-pool";
/// The header choosing a new object's CHOICE policy.
pub const POLICY_HEADER: &str = "x-optio-policy";

/// The S3 service.
#[derive(Clone, Debug)]
pub struct OptioS3 {
    gateway: Arc<Gateway>,
    /// The region buckets are in (GetBucketLocation, HeadBucket).
    region: String,
}

impl OptioS3 {
    /// The S3 API of `gateway`, whose buckets are in `region`.
    pub fn new(gateway: Arc<Gateway>, region: &str) -> OptioS3 {
        OptioS3 { gateway, region: region.to_string() }
    }

    async fn bucket(&self, name: &str) -> S3Result<Bucket> {
        self.gateway.bucket(name).await.map_err(to_s3)
    }

    /// Opens `key` in `bucket` and checks a request's preconditions on it.
    async fn open_checked(
        &self,
        bucket: &Bucket,
        key: &str,
        whole: bool,
        conditions: Preconditions<'_>,
    ) -> S3Result<Opened> {
        let opened = self.gateway.open(bucket, key, whole).await.map_err(to_s3)?;
        check_preconditions(opened.summary(), opened.modified_micros, conditions)?;
        Ok(opened)
    }

    /// Opens the source of a copy (`x-amz-copy-source`) and checks the copy's preconditions
    /// on it.
    async fn open_copy_source(
        &self,
        source: &CopySource,
        conditions: Preconditions<'_>,
    ) -> S3Result<Opened> {
        let (bucket, key) = copy_source(source)?;
        let from = self.bucket(bucket).await?;
        self.open_checked(&from, key, false, conditions).await
    }

    /// The part every listing shares: the bucket, the page of keys after `after`, and how
    /// the answer encodes keys.
    async fn list_page(
        &self,
        bucket: &str,
        max_keys: Option<i32>,
        prefix: Option<&str>,
        delimiter: Option<&str>,
        after: Option<&str>,
        encoding_type: Option<&EncodingType>,
    ) -> S3Result<Page> {
        let bucket = self.bucket(bucket).await?;
        let max = max_keys_of(max_keys)?;
        let prefix = prefix.unwrap_or_default().to_string();
        let delimiter = delimiter.filter(|d| !d.is_empty()).map(str::to_string);
        let page = self
            .gateway
            .list(&bucket, &prefix, delimiter.as_deref(), after, max)
            .await
            .map_err(to_s3)?;
        let url = encoding_type.is_some_and(|e| e.as_str() == "url");
        Ok(Page { bucket, max, prefix, delimiter, page, url })
    }

    /// The user who signed a request, as the access check found it.
    fn requester(extensions: &http::Extensions) -> S3Result<String> {
        extensions
            .get::<Requester>()
            .map(|r| r.0.clone())
            .ok_or_else(|| s3_error!(InternalError, "the request's user was not resolved"))
    }
}

/// The user who signed a request: the access check puts it in the request's extensions.
#[derive(Clone, Debug)]
pub struct Requester(pub String);

#[async_trait::async_trait]
impl S3 for OptioS3 {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let pool = header(&req.headers, POOL_HEADER);
        let user = Self::requester(&req.extensions)?;
        self.gateway.create_bucket(&req.input.bucket, pool, Some(&user)).await.map_err(to_s3)?;
        let output = CreateBucketOutput { location: Some(format!("/{}", req.input.bucket)) };
        Ok(S3Response::new(output))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        self.gateway.delete_bucket(&req.input.bucket).await.map_err(to_s3)?;
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.bucket(&req.input.bucket).await?;
        Ok(S3Response::new(HeadBucketOutput {
            bucket_region: Some(self.region.clone()),
            ..Default::default()
        }))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.bucket(&req.input.bucket).await?;
        // S3 answers no constraint for us-east-1.
        let location_constraint = (self.region != "us-east-1")
            .then(|| BucketLocationConstraint::from(self.region.clone()));
        Ok(S3Response::new(GetBucketLocationOutput { location_constraint }))
    }

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let user = Self::requester(&req.extensions)?;
        let mut buckets = Vec::new();
        for (name, created) in self.gateway.buckets().await.map_err(to_s3)? {
            match self.gateway.bucket(&name).await {
                Ok(bucket) if bucket.usable_by(&user) => buckets.push(s3s::dto::Bucket {
                    name: Some(name),
                    creation_date: Some(timestamp(created)),
                    ..Default::default()
                }),
                Ok(_) | Err(GatewayError::NoSuchBucket(_)) => {}
                Err(error) => return Err(to_s3(error)),
            }
        }
        let output = ListBucketsOutput {
            buckets: Some(buckets),
            owner: Some(owner(&user)),
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let policy = header(&req.headers, POLICY_HEADER).map(str::to_string);
        let input = req.input;
        let bucket = self.bucket(&input.bucket).await?;
        if let Some(length) = input.content_length
            && length as u64 > crate::store::PUT_BYTES_MAX
        {
            return Err(s3_error!(
                EntityTooLarge,
                "a single PUT is at most 5 GiB; use a multipart upload"
            ));
        }
        if input.if_match.is_some() || input.if_none_match.is_some() {
            let existing = match self.gateway.open(&bucket, &input.key, false).await {
                Ok(opened) => Some(opened),
                Err(GatewayError::NoSuchKey(_)) => None,
                Err(error) => return Err(to_s3(error)),
            };
            let etag = existing.as_ref().map(|o| o.summary().etag());
            let matches = |c: &ETagCondition| match (c, &etag) {
                (_, None) => false,
                (ETagCondition::Any, Some(_)) => true,
                (ETagCondition::ETag(tag), Some(etag)) => tag.value() == etag,
            };
            if input.if_match.as_ref().is_some_and(|c| !matches(c))
                || input.if_none_match.as_ref().is_some_and(matches)
            {
                return Err(s3_error!(PreconditionFailed));
            }
        }
        let md5 = content_md5(input.content_md5.as_deref())?;
        let sent = sent_checksums(Checksum {
            checksum_crc32: input.checksum_crc32,
            checksum_crc32c: input.checksum_crc32c,
            checksum_crc64nvme: input.checksum_crc64nvme,
            checksum_sha1: input.checksum_sha1,
            checksum_sha256: input.checksum_sha256,
            checksum_type: None,
        });
        let mut meta = meta_from(
            input.content_type,
            input.content_encoding,
            input.content_disposition,
            input.content_language,
            input.cache_control,
            input.expires,
            input.metadata,
        );
        meta.checksums = sent.clone();
        let (body, check) = checked_body(input.body, &sent);
        let (summary, _) = self
            .gateway
            .put_object(&bucket, &input.key, body, meta, policy.as_deref(), |received| match md5 {
                Some(sent) if sent != *received => Err(GatewayError::BadDigest),
                _ => check(),
            })
            .await
            .map_err(to_s3)?;
        let checksums = stored_checksums(&Meta { checksums: sent, ..Meta::default() });
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(etag_of(&summary)),
            checksum_crc32: checksums.checksum_crc32,
            checksum_crc32c: checksums.checksum_crc32c,
            checksum_crc64nvme: checksums.checksum_crc64nvme,
            checksum_sha1: checksums.checksum_sha1,
            checksum_sha256: checksums.checksum_sha256,
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        let bucket = self.bucket(&input.bucket).await?;
        let conditions = Preconditions {
            if_match: input.if_match.as_ref(),
            if_unmodified_since: input.if_unmodified_since.as_ref(),
            if_none_match: input.if_none_match.as_ref(),
            if_modified_since: input.if_modified_since.as_ref(),
            not_modified: S3ErrorCode::NotModified,
        };
        let opened =
            self.open_checked(&bucket, &input.key, input.range.is_none(), conditions).await?;
        let summary = *opened.summary();
        let size = summary.size;
        let (range, content_range) = match &input.range {
            None => (0..size, None),
            Some(range) => {
                let r = range.check(size).map_err(|_| {
                    s3_error!(InvalidRange, "the range is not within the object's {size} bytes")
                })?;
                let text = format!("bytes {}-{}/{size}", r.start, r.end - 1);
                (r, Some(text))
            }
        };
        let length = range.end - range.start;
        let meta = opened.head.meta.clone();
        let checksums = if input.checksum_mode.as_ref().is_some_and(|m| m.as_str() == "ENABLED")
            && length == size
        {
            stored_checksums(&meta)
        } else {
            Checksum::default()
        };
        let modified = opened.modified_micros;
        let body = match opened.already_read(&range) {
            // A small object read whole with its head: its bytes as they are.
            Some(chunks) => StreamingBlob::wrap(futures_util::stream::iter(
                chunks.into_chunks().into_iter().map(Ok::<_, GatewayError>),
            )),
            None => StreamingBlob::wrap(async_stream(self.gateway.clone(), opened, range)),
        };
        let output = GetObjectOutput {
            body: Some(body),
            content_length: Some(length as i64),
            content_range,
            accept_ranges: Some("bytes".into()),
            last_modified: Some(timestamp(modified)),
            e_tag: Some(etag_of(&summary)),
            expires: expires_of(&meta),
            metadata: metadata_of(&meta),
            content_type: input.response_content_type.or(meta.content_type),
            content_encoding: input.response_content_encoding.or(meta.content_encoding),
            content_disposition: input.response_content_disposition.or(meta.content_disposition),
            content_language: input.response_content_language.or(meta.content_language),
            cache_control: input.response_cache_control.or(meta.cache_control),
            parts_count: (summary.parts > 0).then_some(summary.parts as i32),
            checksum_crc32: checksums.checksum_crc32,
            checksum_crc32c: checksums.checksum_crc32c,
            checksum_crc64nvme: checksums.checksum_crc64nvme,
            checksum_sha1: checksums.checksum_sha1,
            checksum_sha256: checksums.checksum_sha256,
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        let input = req.input;
        let bucket = self.bucket(&input.bucket).await?;
        let opened = self.gateway.open(&bucket, &input.key, false).await.map_err(to_s3)?;
        // (One header may carry several, comma-separated.)
        let wanted = |name: &str| {
            input
                .object_attributes
                .iter()
                .flat_map(|a| a.as_str().split(','))
                .any(|a| a.trim() == name)
        };
        let summary = opened.summary();
        let checksums = stored_checksums(&opened.head.meta);
        let has_checksum = checksums.checksum_crc32.is_some()
            || checksums.checksum_crc32c.is_some()
            || checksums.checksum_crc64nvme.is_some()
            || checksums.checksum_sha1.is_some()
            || checksums.checksum_sha256.is_some();
        Ok(S3Response::new(GetObjectAttributesOutput {
            e_tag: wanted(ObjectAttributes::ETAG).then(|| etag_of(summary)),
            object_size: wanted(ObjectAttributes::OBJECT_SIZE).then_some(summary.size as i64),
            storage_class: wanted(ObjectAttributes::STORAGE_CLASS)
                .then(|| StorageClass::from_static(StorageClass::STANDARD)),
            checksum: (wanted(ObjectAttributes::CHECKSUM) && has_checksum).then_some(checksums),
            last_modified: Some(timestamp(opened.modified_micros)),
            ..Default::default()
        }))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = req.input;
        let bucket = self.bucket(&input.bucket).await?;
        let conditions = Preconditions {
            if_match: input.if_match.as_ref(),
            if_unmodified_since: input.if_unmodified_since.as_ref(),
            if_none_match: input.if_none_match.as_ref(),
            if_modified_since: input.if_modified_since.as_ref(),
            not_modified: S3ErrorCode::NotModified,
        };
        let opened = self.open_checked(&bucket, &input.key, false, conditions).await?;
        let summary = *opened.summary();
        let meta = &opened.head.meta;
        let checksums = if input.checksum_mode.as_ref().is_some_and(|m| m.as_str() == "ENABLED") {
            stored_checksums(meta)
        } else {
            Checksum::default()
        };
        let output = HeadObjectOutput {
            checksum_crc32: checksums.checksum_crc32,
            checksum_crc32c: checksums.checksum_crc32c,
            checksum_crc64nvme: checksums.checksum_crc64nvme,
            checksum_sha1: checksums.checksum_sha1,
            checksum_sha256: checksums.checksum_sha256,
            content_length: Some(summary.size as i64),
            accept_ranges: Some("bytes".into()),
            last_modified: Some(timestamp(opened.modified_micros)),
            e_tag: Some(etag_of(&summary)),
            expires: expires_of(meta),
            metadata: metadata_of(meta),
            content_type: meta.content_type.clone(),
            content_encoding: meta.content_encoding.clone(),
            content_disposition: meta.content_disposition.clone(),
            content_language: meta.content_language.clone(),
            cache_control: meta.cache_control.clone(),
            parts_count: (summary.parts > 0).then_some(summary.parts as i32),
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let bucket = self.bucket(&req.input.bucket).await?;
        self.gateway.delete_object(&bucket, &req.input.key).await.map_err(to_s3)?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let input = req.input;
        let bucket = self.bucket(&input.bucket).await?;
        if input.delete.objects.len() > 1000 {
            return Err(s3_error!(MalformedXML, "at most 1000 keys are deleted per request"));
        }
        let quiet = input.delete.quiet.unwrap_or(false);
        let deletes = input.delete.objects.into_iter().map(|object| {
            let bucket = &bucket;
            async move {
                let result = self.gateway.delete_object(bucket, &object.key).await;
                (object.key, result)
            }
        });
        let results: Vec<_> =
            futures_util::stream::iter(deletes).buffered(8).collect::<Vec<_>>().await;
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for (key, result) in results {
            match result {
                Ok(()) if quiet => {}
                Ok(()) => deleted.push(DeletedObject { key: Some(key), ..Default::default() }),
                Err(error) => {
                    let error = to_s3(error);
                    errors.push(s3s::dto::Error {
                        code: Some(error.code().as_str().to_string()),
                        key: Some(key),
                        message: error.message().map(str::to_string),
                        ..Default::default()
                    });
                }
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let input = req.input;
        let (source_bucket, source_key) = copy_source(&input.copy_source)?;
        let to = self.bucket(&input.bucket).await?;
        let conditions = Preconditions {
            if_match: input.copy_source_if_match.as_ref(),
            if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
            if_none_match: input.copy_source_if_none_match.as_ref(),
            if_modified_since: input.copy_source_if_modified_since.as_ref(),
            not_modified: S3ErrorCode::PreconditionFailed,
        };
        let opened = self.open_copy_source(&input.copy_source, conditions).await?;
        let summary = *opened.summary();
        let replace = input.metadata_directive.as_ref().is_some_and(|d| d.as_str() == "REPLACE");
        let same = source_bucket == input.bucket && source_key == input.key;
        if same && !replace {
            return Err(s3_error!(
                InvalidRequest,
                "this copy request is illegal because it is trying to copy an object to itself without changing the object's metadata"
            ));
        }
        let meta = if replace {
            meta_from(
                input.content_type,
                input.content_encoding,
                input.content_disposition,
                input.content_language,
                input.cache_control,
                input.expires,
                input.metadata,
            )
        } else {
            Meta { stripes: Vec::new(), ..opened.head.meta.clone() }
        };
        let size = summary.size;
        let (summary, version) = self
            .gateway
            .copy_object(opened, 0..size, &to, &input.key, meta)
            .await
            .map_err(to_s3)?;
        let result = CopyObjectResult {
            e_tag: Some(etag_of(&summary)),
            last_modified: Some(timestamp(version)),
            ..Default::default()
        };
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(result),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        let after = match &input.continuation_token {
            Some(token) => Some(token_after(token)?),
            None => input.start_after.clone(),
        };
        let Page { bucket, max, prefix, delimiter, page, url } = self
            .list_page(
                &input.bucket,
                input.max_keys,
                input.prefix.as_deref(),
                input.delimiter.as_deref(),
                after.as_deref(),
                input.encoding_type.as_ref(),
            )
            .await?;
        let key_count = (page.objects.len() + page.prefixes.len()) as i32;
        let shown_owner = input.fetch_owner.unwrap_or(false).then(|| owner_of(&bucket));
        let output = ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: Some(encoded(url, prefix)),
            delimiter: delimiter.map(|d| encoded(url, d)),
            max_keys: Some(max as i32),
            key_count: Some(key_count),
            continuation_token: input.continuation_token,
            start_after: input.start_after.map(|s| encoded(url, s)),
            is_truncated: Some(page.truncated),
            next_continuation_token: page.next.as_deref().map(page_token),
            contents: Some(listed(url, page.objects, shown_owner)),
            common_prefixes: Some(prefixes(url, page.prefixes)),
            encoding_type: input.encoding_type,
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let input = req.input;
        let Page { bucket, max, prefix, delimiter, page, url } = self
            .list_page(
                &input.bucket,
                input.max_keys,
                input.prefix.as_deref(),
                input.delimiter.as_deref(),
                input.marker.as_deref(),
                input.encoding_type.as_ref(),
            )
            .await?;
        // S3 gives NextMarker only with a delimiter; clients use the last key otherwise.
        let next_marker = if delimiter.is_some() { page.next.clone() } else { None };
        let output = ListObjectsOutput {
            name: Some(input.bucket),
            // (Version 1 does not encode the prefix it echoes; clients do not decode it.)
            prefix: Some(prefix),
            delimiter: delimiter.map(|d| encoded(url, d)),
            marker: Some(encoded(url, input.marker.unwrap_or_default())),
            max_keys: Some(max as i32),
            is_truncated: Some(page.truncated),
            next_marker: next_marker.map(|m| encoded(url, m)),
            contents: Some(listed(url, page.objects, Some(owner_of(&bucket)))),
            common_prefixes: Some(prefixes(url, page.prefixes)),
            encoding_type: input.encoding_type,
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }

    /// Buckets are not versioned: each object is its one version, `null` (what S3 lists for
    /// a bucket that never had versioning), so tools that clean up by versions work.
    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let input = req.input;
        let Page { max, prefix, delimiter, page, url, .. } = self
            .list_page(
                &input.bucket,
                input.max_keys,
                input.prefix.as_deref(),
                input.delimiter.as_deref(),
                input.key_marker.as_deref(),
                input.encoding_type.as_ref(),
            )
            .await?;
        let versions = page
            .objects
            .into_iter()
            .map(|o| s3s::dto::ObjectVersion {
                key: Some(encoded(url, o.key)),
                version_id: Some("null".into()),
                is_latest: Some(true),
                size: Some(o.summary.size as i64),
                e_tag: Some(etag_of(&o.summary)),
                last_modified: Some(timestamp(o.modified_micros)),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(input.bucket),
            prefix: Some(encoded(url, prefix)),
            delimiter: delimiter.map(|d| encoded(url, d)),
            key_marker: input.key_marker,
            version_id_marker: input.version_id_marker,
            max_keys: Some(max as i32),
            is_truncated: Some(page.truncated),
            next_key_marker: page.next.clone().filter(|_| page.truncated),
            next_version_id_marker: page.next.filter(|_| page.truncated).map(|_| "null".into()),
            versions: Some(versions),
            common_prefixes: Some(prefixes(url, page.prefixes)),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn put_public_access_block(
        &self,
        req: S3Request<PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
        let c = &req.input.public_access_block_configuration;
        let settings = [
            c.block_public_acls.unwrap_or(false),
            c.ignore_public_acls.unwrap_or(false),
            c.block_public_policy.unwrap_or(false),
            c.restrict_public_buckets.unwrap_or(false),
        ];
        self.gateway
            .set_public_access_block(&req.input.bucket, Some(settings))
            .await
            .map_err(to_s3)?;
        Ok(S3Response::new(PutPublicAccessBlockOutput::default()))
    }

    async fn get_public_access_block(
        &self,
        req: S3Request<GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
        let bucket = self.bucket(&req.input.bucket).await?;
        let Some([block_acls, ignore_acls, block_policy, restrict]) = bucket.public_access_block
        else {
            let mut error = S3Error::with_message(
                S3ErrorCode::Custom("NoSuchPublicAccessBlockConfiguration".into()),
                "the bucket has no PublicAccessBlock settings",
            );
            error.set_status_code(http::StatusCode::NOT_FOUND);
            return Err(error);
        };
        Ok(S3Response::new(GetPublicAccessBlockOutput {
            public_access_block_configuration: Some(PublicAccessBlockConfiguration {
                block_public_acls: Some(block_acls),
                ignore_public_acls: Some(ignore_acls),
                block_public_policy: Some(block_policy),
                restrict_public_buckets: Some(restrict),
            }),
        }))
    }

    async fn delete_public_access_block(
        &self,
        req: S3Request<DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
        self.gateway.set_public_access_block(&req.input.bucket, None).await.map_err(to_s3)?;
        Ok(S3Response::new(DeletePublicAccessBlockOutput::default()))
    }

    /// Torrents are not served; a missing object is still NoSuchKey.
    async fn get_object_torrent(
        &self,
        req: S3Request<GetObjectTorrentInput>,
    ) -> S3Result<S3Response<GetObjectTorrentOutput>> {
        let bucket = self.bucket(&req.input.bucket).await?;
        self.gateway.open(&bucket, &req.input.key, false).await.map_err(to_s3)?;
        Err(s3_error!(NotImplemented, "this gateway does not serve torrents"))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let policy = header(&req.headers, POLICY_HEADER).map(str::to_string);
        let input = req.input;
        let bucket = self.bucket(&input.bucket).await?;
        let meta = meta_from(
            input.content_type,
            input.content_encoding,
            input.content_disposition,
            input.content_language,
            input.cache_control,
            input.expires,
            input.metadata,
        );
        let upload = self
            .gateway
            .create_upload(&bucket, &input.key, meta, policy.as_deref())
            .await
            .map_err(to_s3)?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(upload),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let input = req.input;
        let bucket = self.bucket(&input.bucket).await?;
        if let Some(length) = input.content_length
            && length as u64 > crate::store::PUT_BYTES_MAX
        {
            return Err(s3_error!(EntityTooLarge, "a part is at most 5 GiB"));
        }
        let md5 = content_md5(input.content_md5.as_deref())?;
        let body = body_stream(input.body);
        let summary = self
            .gateway
            .upload_part(&bucket, &input.key, &input.upload_id, input.part_number, body, md5)
            .await
            .map_err(to_s3)?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(etag_of(&summary)),
            ..Default::default()
        }))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let input = req.input;
        let to = self.bucket(&input.bucket).await?;
        let conditions = Preconditions {
            if_match: input.copy_source_if_match.as_ref(),
            if_unmodified_since: input.copy_source_if_unmodified_since.as_ref(),
            if_none_match: input.copy_source_if_none_match.as_ref(),
            if_modified_since: input.copy_source_if_modified_since.as_ref(),
            not_modified: S3ErrorCode::PreconditionFailed,
        };
        let opened = self.open_copy_source(&input.copy_source, conditions).await?;
        let summary = *opened.summary();
        let range = copy_range(input.copy_source_range.as_deref(), summary.size)?;
        let stream = Box::pin(self.gateway.read(opened, range));
        let part = self
            .gateway
            .upload_part(&to, &input.key, &input.upload_id, input.part_number, stream, None)
            .await
            .map_err(to_s3)?;
        let result = CopyPartResult {
            e_tag: Some(etag_of(&part)),
            last_modified: Some(Timestamp::from(SystemTime::now())),
            ..Default::default()
        };
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(result),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let input = req.input;
        let bucket = self.bucket(&input.bucket).await?;
        let parts = input.multipart_upload.and_then(|m| m.parts).unwrap_or_default();
        let mut chosen = Vec::with_capacity(parts.len());
        for part in parts {
            let number = part.part_number.ok_or_else(|| {
                s3_error!(InvalidPart, "a part in the completion list has no part number")
            })?;
            let etag = part.e_tag.map(|e| e.value().to_string()).unwrap_or_default();
            chosen.push((number, etag));
        }
        let (summary, _) = self
            .gateway
            .complete_upload(&bucket, &input.key, &input.upload_id, &chosen)
            .await
            .map_err(to_s3)?;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(input.bucket.clone()),
            key: Some(input.key.clone()),
            e_tag: Some(etag_of(&summary)),
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let input = req.input;
        let bucket = self.bucket(&input.bucket).await?;
        self.gateway.abort_upload(&bucket, &input.key, &input.upload_id).await.map_err(to_s3)?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let input = req.input;
        let bucket = self.bucket(&input.bucket).await?;
        let parts =
            self.gateway.list_parts(&bucket, &input.key, &input.upload_id).await.map_err(to_s3)?;
        let marker = input.part_number_marker.unwrap_or(0);
        let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
        let after: Vec<_> = parts.into_iter().filter(|p| p.number > marker).collect();
        let truncated = after.len() > max;
        let shown: Vec<_> = after.into_iter().take(max).collect();
        let next = if truncated { shown.last().map(|p| p.number) } else { None };
        let parts = shown
            .into_iter()
            .map(|p| Part {
                part_number: Some(p.number),
                e_tag: Some(etag_of(&p.summary)),
                size: Some(p.summary.size as i64),
                last_modified: Some(timestamp(p.modified_micros)),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            max_parts: Some(max as i32),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: next,
            is_truncated: Some(truncated),
            parts: Some(parts),
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let input = req.input;
        let bucket = self.bucket(&input.bucket).await?;
        let max = input.max_uploads.unwrap_or(1000).clamp(0, 1000) as usize;
        let prefix = input.prefix.clone().unwrap_or_default();
        // After a key marker alone, every upload of that key is skipped.
        let after = input
            .key_marker
            .as_deref()
            .map(|key| (key, input.upload_id_marker.as_deref().unwrap_or("\u{10FFFF}")));
        let (uploads, truncated) =
            self.gateway.list_uploads(&bucket, &prefix, after, max).await.map_err(to_s3)?;
        let last = uploads.last().cloned();
        let uploads = uploads
            .into_iter()
            .map(|u| MultipartUpload {
                key: Some(u.key),
                upload_id: Some(u.upload_id),
                initiated: Some(timestamp(u.initiated_micros)),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: input.prefix,
            key_marker: input.key_marker,
            upload_id_marker: input.upload_id_marker,
            max_uploads: Some(max as i32),
            is_truncated: Some(truncated),
            next_key_marker: last.as_ref().filter(|_| truncated).map(|u| u.key.clone()),
            next_upload_id_marker: last.filter(|_| truncated).map(|u| u.upload_id),
            uploads: Some(uploads),
            ..Default::default()
        }))
    }
}
