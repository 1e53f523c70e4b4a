//! The admin HTTP endpoint: the console, health and readiness probes,
//! Prometheus metrics, checkpoint history, savepoints and interactive
//! state queries.
//!
//! `/health`, `/ready` and the console page `/` are open (probes; the page
//! holds no data and asks for the token itself); with `[admin] token_env`
//! set, the other routes require `Authorization: Bearer <token>`, compared
//! in constant time. Validation requires the token when `listen` is not a
//! loopback address, unless `allow_unauthenticated` says otherwise.

pub mod overview;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use crate::observe::history::History;
use crate::observe::metrics::Metrics;
use crate::runtime::query::{QueryError, QueryFailure, QueryRoutes, QUERY_TIMEOUT};
use crate::runtime::{SavepointError, SavepointRequest};

/// What the endpoint reads and whom it asks for savepoints.
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    pub history: Arc<History>,
    pub ready: Arc<AtomicBool>,
    pub savepoints: crossbeam_channel::Sender<SavepointRequest>,
    pub token: Option<String>,
    pub savepoint_timeout: Duration,
    /// The tasks and input partitions this instance owns (group mode).
    pub ownership: Arc<std::sync::Mutex<crate::runtime::assignment::Ownership>>,
    /// Group mode takes no savepoints (its checkpoints are per task).
    pub group_mode: bool,
    /// The job as configured, for the console.
    pub job: overview::JobInfo,
    /// Where `/state/<uid>/<key>` queries go.
    pub queries: Arc<QueryRoutes>,
}

/// The console: one self-contained page (no request leaves the origin).
const CONSOLE: &str = include_str!("console.html");

pub fn router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/", get(console))
        .route("/api/overview", get(api_overview))
        .route("/state/{uid}/{key}", get(state_query))
        .route("/health", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/checkpoints", get(checkpoints))
        .route("/savepoints", post(savepoint))
        .route("/tasks", get(tasks))
        .with_state(state)
}

/// Serves until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, state: Arc<AdminState>) {
    if let Err(e) = axum::serve(listener, router(state)).await {
        tracing::error!(error = %e, "admin endpoint stopped");
    }
}

/// The 401 for a missing or wrong token, or None when the request may pass.
fn unauthorized(state: &AdminState, headers: &HeaderMap) -> Option<Response> {
    let token = state.token.as_ref()?;
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer ".as_slice()));
    let matches = given.is_some_and(|given| token_matches(given, token.as_bytes()));
    (!matches)
        .then(|| (StatusCode::UNAUTHORIZED, "missing or wrong bearer token\n").into_response())
}

/// Whether `given` is the token, in time that does not depend on where
/// the two differ (only on their lengths), so that response times do not
/// give the token away byte by byte.
fn token_matches(given: &[u8], token: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(given.ct_eq(token))
}

async fn console() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        CONSOLE,
    )
        .into_response()
}

async fn api_overview(State(state): State<Arc<AdminState>>, headers: HeaderMap) -> Response {
    if let Some(denied) = unauthorized(&state, &headers) {
        return denied;
    }
    Json(overview::Overview {
        now_ms: crate::observe::now_ms(),
        job: overview::JobStatus {
            info: &state.job,
            uptime_s: crate::observe::since_process_start().as_secs_f64(),
            restarts: state.metrics.restarts.get(),
            ready: state.ready.load(Ordering::Relaxed),
        },
        metrics: state.metrics.samples(),
    })
    .into_response()
}

fn json_error(status: StatusCode, error: String) -> Response {
    (status, Json(serde_json::json!({ "error": error }))).into_response()
}

/// A key's current state, answered by the keyed subtask that owns it.
async fn state_query(
    State(state): State<Arc<AdminState>>,
    headers: HeaderMap,
    Path((uid, key)): Path<(String, String)>,
) -> Response {
    if let Some(denied) = unauthorized(&state, &headers) {
        return denied;
    }
    let routed = match state.queries.route(&uid, &key) {
        Ok(r) => r,
        Err(QueryError::UnknownOperator { known }) if known.is_empty() => {
            return json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "no job attempt is running (starting, restoring or restarting); retry".into(),
            );
        }
        Err(QueryError::UnknownOperator { known }) => {
            return json_error(
                StatusCode::NOT_FOUND,
                format!(
                    "unknown operator {uid:?}; operators with queryable state: {}",
                    known.join(", ")
                ),
            );
        }
        Err(QueryError::Unavailable(why)) => {
            return json_error(StatusCode::SERVICE_UNAVAILABLE, why);
        }
        Err(QueryError::BadKey(why)) => return json_error(StatusCode::BAD_REQUEST, why),
    };
    let answer = match tokio::time::timeout(QUERY_TIMEOUT, routed.answer).await {
        Ok(Ok(Ok(answer))) => answer,
        Ok(Ok(Err(QueryFailure::Failed(e)))) => {
            return json_error(StatusCode::INTERNAL_SERVER_ERROR, e)
        }
        // Group mode: another instance owns the key's task (GET /tasks
        // there says which).
        Ok(Ok(Err(QueryFailure::NotHere { task, message }))) => {
            return (
                StatusCode::MISDIRECTED_REQUEST,
                Json(serde_json::json!({ "error": message, "task": task })),
            )
                .into_response()
        }
        Ok(Err(_)) => {
            return json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "subtask {} of {uid} stopped before answering",
                    routed.subtask
                ),
            )
        }
        Err(_) => {
            return json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "subtask {} of {uid} did not answer within {} s",
                    routed.subtask,
                    QUERY_TIMEOUT.as_secs()
                ),
            )
        }
    };
    if answer.is_empty() {
        return json_error(
            StatusCode::NOT_FOUND,
            format!("no key {key:?} in operator {uid}"),
        );
    }
    let mut body = serde_json::json!({
        "operator": uid,
        "key": key,
        "key_group": routed.key_group,
        "value": answer.value,
    });
    match answer.task {
        Some(task) => body["task"] = task.into(),
        None => body["subtask"] = routed.subtask.into(),
    }
    if let Some(windows) = answer.windows {
        body["windows"] = serde_json::to_value(windows).expect("windows serialize");
    }
    Json(body).into_response()
}

async fn ready(State(state): State<Arc<AdminState>>) -> Response {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: restoring or restarting\n",
        )
            .into_response()
    }
}

async fn metrics(State(state): State<Arc<AdminState>>, headers: HeaderMap) -> Response {
    if let Some(denied) = unauthorized(&state, &headers) {
        return denied;
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

async fn checkpoints(State(state): State<Arc<AdminState>>, headers: HeaderMap) -> Response {
    if let Some(denied) = unauthorized(&state, &headers) {
        return denied;
    }
    Json(state.history.snapshot()).into_response()
}

/// The tasks and input partitions this instance owns, with the committed
/// checkpoint of each task (group mode; empty lists otherwise).
async fn tasks(State(state): State<Arc<AdminState>>, headers: HeaderMap) -> Response {
    if let Some(denied) = unauthorized(&state, &headers) {
        return denied;
    }
    let owned = state.ownership.lock().expect("ownership lock").clone();
    Json(owned).into_response()
}

async fn savepoint(State(state): State<Arc<AdminState>>, headers: HeaderMap) -> Response {
    if let Some(denied) = unauthorized(&state, &headers) {
        return denied;
    }
    if state.group_mode {
        return json_error(
            StatusCode::NOT_IMPLEMENTED,
            "a running group-mode job takes no savepoints (scale.mode = \"group\"): stop \
             every instance, then `weir savepoint --config <file>` drains the job and writes \
             one (docs/scale-out.md)"
                .into(),
        );
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    // The queue is bounded (`runtime::SAVEPOINT_QUEUE`): when it is full the
    // caller hears so now instead of waiting behind requests that would
    // time out anyway.
    match state.savepoints.try_send(SavepointRequest { reply: tx }) {
        Ok(()) => {}
        Err(crossbeam_channel::TrySendError::Full(_)) => {
            return json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy: a savepoint is already queued; retry later".into(),
            );
        }
        Err(crossbeam_channel::TrySendError::Disconnected(_)) => {
            return (StatusCode::SERVICE_UNAVAILABLE, "job is not running\n").into_response();
        }
    }
    match tokio::time::timeout(state.savepoint_timeout, rx).await {
        Ok(Ok(Ok(path))) => Json(serde_json::json!({ "path": path })).into_response(),
        Ok(Ok(Err(SavepointError::TooMany(reason)))) => json_error(StatusCode::CONFLICT, reason),
        Ok(Ok(Err(SavepointError::Failed(reason)))) => {
            json_error(StatusCode::INTERNAL_SERVER_ERROR, reason)
        }
        Ok(Err(_)) | Err(_) => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no checkpoint completed the savepoint in time".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    fn test_config() -> crate::config::Config {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo.toml");
        crate::config::Config::load(&file).expect("demo config")
    }

    fn state(
        token: Option<&str>,
    ) -> (
        Arc<AdminState>,
        crossbeam_channel::Receiver<SavepointRequest>,
    ) {
        let (shared, tx) = crate::runtime::JobShared::new();
        let rx = shared.savepoints.clone();
        (
            Arc::new(AdminState {
                metrics: Arc::new(Metrics::new()),
                history: Arc::new(History::default()),
                ready: Arc::new(AtomicBool::new(false)),
                savepoints: tx,
                token: token.map(String::from),
                savepoint_timeout: Duration::from_secs(5),
                ownership: Default::default(),
                group_mode: false,
                job: {
                    let config = test_config();
                    let graph = crate::pipelines::graph(&config).expect("the demo plans");
                    overview::JobInfo::from_graph(&config, &graph)
                },
                queries: Default::default(),
            }),
            rx,
        )
    }

    async fn call(
        state: &Arc<AdminState>,
        method: &str,
        path: &str,
        token: Option<&str>,
    ) -> (StatusCode, String) {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let resp = router(state.clone())
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn ready_is_503_until_the_job_runs() {
        let (s, _rx) = state(None);
        assert_eq!(call(&s, "GET", "/health", None).await.0, StatusCode::OK);
        assert_eq!(
            call(&s, "GET", "/ready", None).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        s.ready.store(true, Ordering::Relaxed);
        assert_eq!(call(&s, "GET", "/ready", None).await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn a_token_guards_everything_but_the_probes() {
        let (s, _rx) = state(Some("t0ken"));
        for path in ["/metrics", "/checkpoints", "/api/overview"] {
            assert_eq!(
                call(&s, "GET", path, None).await.0,
                StatusCode::UNAUTHORIZED,
                "{path}"
            );
            assert_eq!(
                call(&s, "GET", path, Some("wrong")).await.0,
                StatusCode::UNAUTHORIZED,
                "{path}"
            );
            assert_eq!(
                call(&s, "GET", path, Some("t0ken")).await.0,
                StatusCode::OK,
                "{path}"
            );
        }
        assert_eq!(
            call(&s, "POST", "/savepoints", None).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            call(&s, "GET", "/state/word-count/a", None).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(call(&s, "GET", "/health", None).await.0, StatusCode::OK);
        // The page holds no data; it asks for the token itself.
        let (status, page) = call(&s, "GET", "/", None).await;
        assert_eq!(status, StatusCode::OK);
        assert!(page.contains("<html"), "{page}");
    }

    #[tokio::test]
    async fn the_overview_has_the_job_and_the_numbers_of_metrics() {
        let (s, _rx) = state(None);
        s.metrics
            .records_in
            .with_label_values(&["word-count"])
            .inc_by(7);
        let (status, body) = call(&s, "GET", "/api/overview", None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["job"]["name"], "demo-wordcount");
        assert_eq!(v["job"]["mode"], "single");
        // The demo's SQL, as planned: its source, then its operators.
        assert_eq!(v["job"]["operators"][0]["uid"], "source.lines");
        let aggregate = v["job"]["operators"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["uid"] == "counts.aggregate")
            .unwrap_or_else(|| panic!("{body}"));
        assert_eq!(aggregate["kind"], "aggregate/count");
        assert_eq!(aggregate["parallelism"], 2);
        let records = v["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "weir_records_in_total")
            .expect("records_in sample");
        assert_eq!(records["labels"]["operator"], "word-count");
        assert_eq!(records["value"], 7.0);
    }

    #[tokio::test]
    async fn a_state_query_is_answered_by_the_owning_subtask() {
        use crate::runtime::query::KeyState;
        let (s, _rx) = state(None);
        assert_eq!(
            call(&s, "GET", "/state/word-count/fox", None).await.0,
            StatusCode::SERVICE_UNAVAILABLE,
            "no attempt runs yet"
        );
        let subtasks = s.queries.register("word-count", 2, 128);
        for (i, rx) in subtasks.into_iter().enumerate() {
            std::thread::spawn(move || {
                while let Ok(q) = rx.recv() {
                    if q.key == "elsewhere" {
                        let _ = q.reply.send(Err(QueryFailure::NotHere {
                            task: 3,
                            message: "in task 3, not owned here".into(),
                        }));
                        continue;
                    }
                    let value = (q.key == "fox").then(|| serde_json::json!({ "count": i }));
                    let _ = q.reply.send(Ok(KeyState {
                        value,
                        windows: None,
                        task: None,
                    }));
                }
            });
        }
        let (status, body) = call(&s, "GET", "/state/word-count/fox", None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let kg = crate::state::key_groups::key_group(b"fox", 128);
        let subtask = crate::state::key_groups::subtask_for_key_group(kg, 2, 128);
        assert_eq!(v["key_group"], kg);
        assert_eq!(v["subtask"], subtask);
        assert_eq!(
            v["value"]["count"], subtask,
            "answered by subtask {subtask}"
        );
        let (status, body) = call(&s, "GET", "/state/word-count/hen", None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(
            body.contains("no key \\\"hen\\\" in operator word-count"),
            "{body}"
        );
        let (status, body) = call(&s, "GET", "/state/word-count/elsewhere", None).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{body}");
        assert!(body.contains("\"task\":3"), "{body}");
        let (status, body) = call(&s, "GET", "/state/nope/fox", None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body.contains("unknown operator"), "{body}");
        assert!(body.contains("word-count"), "{body}");
    }

    #[tokio::test]
    async fn savepoint_answers_with_the_coordinators_path() {
        let (s, rx) = state(None);
        std::thread::spawn(move || {
            let req = rx.recv().unwrap();
            req.reply.send(Ok("/sp/savepoint-1".into())).unwrap();
        });
        let (status, body) = call(&s, "POST", "/savepoints", None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, r#"{"path":"/sp/savepoint-1"}"#);
    }

    #[tokio::test]
    async fn a_savepoint_over_the_bound_answers_409_naming_the_key() {
        let (s, rx) = state(None);
        std::thread::spawn(move || {
            let req = rx.recv().unwrap();
            req.reply
                .send(Err(SavepointError::TooMany(
                    "10 savepoints in /sp reach checkpoint.max_savepoints = 10".into(),
                )))
                .unwrap();
        });
        let (status, body) = call(&s, "POST", "/savepoints", None).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}");
        assert!(body.contains("checkpoint.max_savepoints"), "{body}");
    }

    #[test]
    fn tokens_are_compared_whole() {
        assert!(token_matches(b"t0ken", b"t0ken"));
        assert!(!token_matches(b"t0ke", b"t0ken"), "a prefix");
        assert!(!token_matches(b"t0kenx", b"t0ken"), "longer");
        assert!(!token_matches(b"", b"t0ken"));
        assert!(!token_matches(b"T0KEN", b"t0ken"));
    }

    #[tokio::test]
    async fn a_bearer_token_that_is_not_utf8_or_has_another_scheme_is_refused() {
        let (s, _rx) = state(Some("t0ken"));
        for auth in [&b"Basic t0ken"[..], b"bearer t0ken", b"Bearer t0ken\xff"] {
            let req = Request::builder()
                .uri("/checkpoints")
                .header(
                    "authorization",
                    axum::http::HeaderValue::from_bytes(auth).unwrap(),
                )
                .body(Body::empty())
                .unwrap();
            let resp = router(s.clone()).oneshot(req).await.unwrap();
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{auth:?}");
        }
    }

    #[tokio::test]
    async fn a_busy_savepoint_queue_answers_503_at_once() {
        let (s, rx) = state(None);
        // Nobody serves the queue: the first request waits in it (and times
        // out after savepoint_timeout), the next one finds it full.
        let first = {
            let s = s.clone();
            tokio::spawn(async move { call(&s, "POST", "/savepoints", None).await })
        };
        while rx.is_empty() {
            tokio::task::yield_now().await;
        }
        let started = std::time::Instant::now();
        let (status, body) = call(&s, "POST", "/savepoints", None).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(body.contains("busy"), "{body}");
        assert!(started.elapsed() < Duration::from_secs(1));
        drop(first);
    }
}
