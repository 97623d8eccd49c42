//! The console's volume and S3 endpoints: `optio volume` and `optio s3 user` as JSON, with
//! the CLI's shapes.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use optio_proto::auth::Cap;
use serde_json::{Value, json};

use super::api::{Answer, ApiError, Console, ok, s3_error};

/// A volume error's status: what the CLI says, with the status saying whose fault it is.
fn volume_error(error: optio_client::volume::VolumeError) -> ApiError {
    use optio_client::volume::VolumeError as E;
    let status = match &error {
        E::NotFound(_) => StatusCode::NOT_FOUND,
        E::Exists(_) | E::Locked { .. } | E::LockLost(_) | E::Snapshot(_) | E::ReadOnly(_) => {
            StatusCode::CONFLICT
        }
        E::BadName(_) | E::BadSize(_) | E::WouldShrink { .. } | E::OutOfRange { .. } => {
            StatusCode::BAD_REQUEST
        }
        _ => StatusCode::BAD_GATEWAY,
    };
    let mut answer = ApiError::new(status, error.to_string());
    if let E::WouldShrink { current, .. } = error {
        // What a page asks before it sends the shrink again with "allow_shrink".
        answer.extra = serde_json::json!({ "code": "would_shrink", "size_before": current });
    }
    answer
}

/// A request body of type `T`, or 400 saying what it should be.
fn body_of<T: serde::de::DeserializeOwned>(body: &[u8], shape: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("the body is {shape}: {e}")))
}

/// A size: bytes, or text with a unit (`10GiB`).
fn size_of(value: &Value) -> Result<u64, ApiError> {
    match value {
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| ApiError::bad(format!("size {n} is not a whole number of bytes"))),
        Value::String(text) => crate::output::parse_size(text).map_err(ApiError::bad),
        other => {
            Err(ApiError::bad(format!("size {other} is neither bytes nor text like \"10GiB\"")))
        }
    }
}

/// Every volume, as `optio volume ls --json` lists it (its snapshots, parent and lock
/// included).
pub async fn volumes(State(console): State<Arc<Console>>, headers: HeaderMap) -> Answer {
    console.authorize(&headers, Cap::Read, false)?;
    let client = console.client().await?;
    let list = optio_client::volume::list(&client).await.map_err(volume_error)?;
    let list: Vec<Value> = list.iter().map(crate::commands::volume::header_json).collect();
    ok(json!({ "volumes": list }))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct VolumeCreate {
    name: String,
    size: Value,
    #[serde(default)]
    pool: Option<String>,
    #[serde(default)]
    object_size: Option<Value>,
}

/// `optio volume create`: answers the volume as `--json` prints it.
pub async fn volume_create(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let session = console.authorize(&headers, Cap::Admin, true)?;
    let request: VolumeCreate = body_of(
        &body,
        "{\"name\": NAME, \"size\": BYTES or \"10GiB\", \"pool\": POOL (default data), \"object_size\": (default 4MiB)}",
    )?;
    let size = size_of(&request.size)?;
    let object_size = match &request.object_size {
        Some(value) => size_of(value)?,
        None => 4 << 20,
    };
    let pool = request.pool.unwrap_or_else(|| "data".into());
    let client = console.client().await?;
    crate::commands::volume::check_volume_pool(&client, &pool)
        .map_err(|e| ApiError::bad(format!("{e:#}")))?;
    let header = optio_client::volume::create(&client, &request.name, size, &pool, object_size)
        .await
        .map_err(volume_error)?;
    eprintln!("optio console: {} created volume {} ({size} bytes)", session.entity, header.name);
    ok(crate::commands::volume::header_json(&header))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct VolumeResize {
    name: String,
    size: Value,
    #[serde(default)]
    allow_shrink: bool,
}

/// `optio volume resize` (never breaking a lock: a volume in use is refused, 409).
pub async fn volume_resize(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let session = console.authorize(&headers, Cap::Admin, true)?;
    let request: VolumeResize =
        body_of(&body, "{\"name\": NAME, \"size\": BYTES or \"10GiB\", \"allow_shrink\": false}")?;
    let size = size_of(&request.size)?;
    let client = console.client().await?;
    let old = crate::commands::volume::resize_volume(
        &client,
        &request.name,
        size,
        request.allow_shrink,
        false,
    )
    .await
    .map_err(volume_error)?;
    eprintln!("optio console: {} resized volume {} to {size} bytes", session.entity, request.name);
    ok(crate::commands::volume::resized_json(&request.name, old, size))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Named {
    name: String,
}

/// `optio volume rm` (never breaking a lock: a volume in use, one with protected snapshots
/// or with clones is refused, 409, with the CLI's reason).
pub async fn volume_rm(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let session = console.authorize(&headers, Cap::Admin, true)?;
    let request: Named = body_of(&body, "{\"name\": NAME}")?;
    let client = console.client().await?;
    let removed =
        optio_client::volume::remove(&client, &request.name, false).await.map_err(volume_error)?;
    eprintln!("optio console: {} removed volume {}", session.entity, request.name);
    ok(crate::commands::volume::removed_json(&request.name, &removed))
}

// ---- S3 ----

/// The S3 gateway's users (name, access key, the buckets each owns: never a secret) and
/// buckets (as `optio s3 user ls --json` and `bucket ls --json` list them).
pub async fn s3(State(console): State<Arc<Console>>, headers: HeaderMap) -> Answer {
    console.authorize(&headers, Cap::Read, false)?;
    let gateway = console.gateway().await?;
    let users = gateway.users().await.map_err(s3_error)?;
    let buckets = crate::commands::s3::bucket_records(&gateway)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, format!("{e:#}")))?;
    let users: Vec<Value> = users
        .iter()
        .map(|user| {
            let mut value = serde_json::to_value(user).unwrap_or(Value::Null);
            value["buckets"] = buckets
                .iter()
                .filter(|b| b.owner.as_deref() == Some(user.name.as_str()))
                .map(|b| json!(b.name))
                .collect();
            value
        })
        .collect();
    let buckets: Vec<Value> = buckets.iter().map(crate::commands::s3::bucket_json).collect();
    ok(json!({ "meta_pool": console.s3_meta_pool, "users": users, "buckets": buckets }))
}

/// An S3 user change of the admin's: the body names the user; `change` makes it and says
/// what to log and answer.
async fn s3_user_change<F, Fut>(
    console: &Console,
    headers: &HeaderMap,
    body: &[u8],
    change: F,
) -> Answer
where
    F: FnOnce(optio_s3::Gateway, String) -> Fut,
    Fut: std::future::Future<Output = Result<(String, Value), optio_s3::GatewayError>>,
{
    let session = console.authorize(headers, Cap::Admin, true)?;
    let request: Named = body_of(body, "{\"name\": USER}")?;
    let (done, answer) = change(console.gateway().await?, request.name).await.map_err(s3_error)?;
    eprintln!("optio console: {} {done}", session.entity);
    ok(answer)
}

/// `optio s3 user create`: the new key pair, its secret shown this once.
pub async fn s3_user_create(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    s3_user_change(&console, &headers, &body, |gateway, name| async move {
        let pair = gateway.create_user(&name).await?;
        Ok((format!("created S3 user {name}"), crate::commands::s3::pair_json(&pair)))
    })
    .await
}

/// `optio s3 user rotate`: a new key pair, its secret shown this once (the old one stops
/// working).
pub async fn s3_user_rotate(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    s3_user_change(&console, &headers, &body, |gateway, name| async move {
        let pair = gateway.rotate_user(&name).await?;
        Ok((format!("rotated the key of S3 user {name}"), crate::commands::s3::pair_json(&pair)))
    })
    .await
}

/// `optio s3 user rm`.
pub async fn s3_user_rm(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    s3_user_change(&console, &headers, &body, |gateway, name| async move {
        gateway.remove_user(&name).await?;
        Ok((format!("removed S3 user {name}"), crate::commands::s3::removed_json(&name)))
    })
    .await
}
