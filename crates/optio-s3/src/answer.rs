//! S3 error answers written by the gateway itself: for requests refused before s3s sees them,
//! and for s3s's errors turned into responses.

use s3s::S3Error;

/// An S3 error as its answer.
pub(crate) fn s3_answer(error: S3Error) -> http::Response<s3s::Body> {
    let status = error.status_code().unwrap_or(http::StatusCode::BAD_REQUEST);
    let code = error.code().as_str().to_string();
    match error.to_http_response() {
        Ok(response) => response,
        Err(_) => error_answer(status, &code, "the error could not be written"),
    }
}

/// An S3 error answer built here (before s3s sees the request).
pub(crate) fn error_answer(
    status: http::StatusCode,
    code: &str,
    message: &str,
) -> http::Response<s3s::Body> {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
    );
    let mut response = http::Response::new(s3s::Body::from(xml));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/xml"));
    response
}
