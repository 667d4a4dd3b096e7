//! `POST /v1/reload`: re-reads the configuration file, as SIGHUP does; a file that cannot be applied is refused with a 400 naming the field.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::json;

use crate::reload::ReloadError;
use crate::state::AppState;

/// `200 {"reloaded": true, "config": {"loaded_at", "sha256"}}`, or `400
/// {"error", "field"}` with the configuration in force unchanged (`409`
/// when the sidecar was started from no file).
pub(crate) async fn reload(State(state): State<AppState>) -> Response {
    match state.reload() {
        Ok(loaded) => Json(json!({ "reloaded": true, "config": loaded })).into_response(),
        Err(error) => {
            let status = match error {
                ReloadError::NoFile => StatusCode::CONFLICT,
                _ => StatusCode::BAD_REQUEST,
            };
            let body = json!({ "error": error.to_string(), "field": error.field() });
            (status, Json(body)).into_response()
        }
    }
}
