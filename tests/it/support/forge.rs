//! A stand-in for GitHub's and GitLab's commit status APIs on 127.0.0.1,
//! checking each request as the real API would: the path, the token, the
//! headers GitHub requires or documents, the state vocabulary, GitHub's
//! 140-character description, a commit the repository has, and GitLab's
//! state machine (a status still pending or running cannot be set to the
//! state it has: GitLab answers 400 "Cannot transition status"). Accepted
//! statuses are recorded, refused requests too, with why.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};

/// One status a forge accepted.
#[derive(Debug, Clone)]
pub struct Status {
    /// `github` or `gitlab`.
    pub forge: &'static str,
    /// `owner/name`, or GitLab's project id or path (decoded).
    pub repository: String,
    /// The commit.
    pub sha: String,
    /// `state`.
    pub state: String,
    /// GitHub's `context`, GitLab's `name`.
    pub context: String,
    /// `description`.
    pub description: String,
    /// `target_url`, if given.
    pub target_url: Option<String>,
    /// The request's headers, lowercase names.
    pub headers: BTreeMap<String, String>,
}

#[derive(Default)]
struct Inner {
    accepted: Vec<Status>,
    refused: Vec<String>,
    /// GitLab's open statuses: (project, sha, name) -> pending or running.
    open: BTreeMap<(String, String, String), String>,
}

/// The stand-in's state.
#[derive(Clone)]
pub struct Forge {
    token: String,
    commits: Arc<BTreeSet<String>>,
    inner: Arc<Mutex<Inner>>,
}

impl Forge {
    /// The statuses accepted for `sha` by `forge`, in order.
    pub fn statuses(&self, forge: &str, sha: &str) -> Vec<Status> {
        let inner = self.inner.lock().unwrap();
        inner
            .accepted
            .iter()
            .filter(|s| s.forge == forge && s.sha == sha)
            .cloned()
            .collect()
    }

    /// The requests refused, each with why.
    pub fn refused(&self) -> Vec<String> {
        self.inner.lock().unwrap().refused.clone()
    }
}

fn refuse(f: &Forge, code: StatusCode, why: String) -> (StatusCode, axum::Json<Value>) {
    f.inner
        .lock()
        .unwrap()
        .refused
        .push(format!("{code}: {why}"));
    (code, axum::Json(json!({"message": why})))
}

fn headers_of(h: &HeaderMap) -> BTreeMap<String, String> {
    h.iter()
        .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect()
}

async fn github(
    State(f): State<Forge>,
    Path((owner, repo, sha)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, axum::Json<Value>) {
    let h = headers_of(&headers);
    if h.get("authorization") != Some(&format!("Bearer {}", f.token)) {
        return refuse(&f, StatusCode::UNAUTHORIZED, "Bad credentials".into());
    }
    if h.get("user-agent").is_none_or(String::is_empty) {
        return refuse(
            &f,
            StatusCode::FORBIDDEN,
            "a User-Agent header is required".into(),
        );
    }
    if !f.commits.contains(&sha) {
        return refuse(
            &f,
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("No commit found for SHA: {sha}"),
        );
    }
    let Ok(b) = serde_json::from_str::<Value>(&body) else {
        return refuse(&f, StatusCode::BAD_REQUEST, "Problems parsing JSON".into());
    };
    let state = b["state"].as_str().unwrap_or_default().to_string();
    if !["error", "failure", "pending", "success"].contains(&state.as_str()) {
        return refuse(
            &f,
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("state {state:?} is not included in the list"),
        );
    }
    let description = b["description"].as_str().unwrap_or_default().to_string();
    if description.chars().count() > 140 {
        return refuse(
            &f,
            StatusCode::UNPROCESSABLE_ENTITY,
            "description is too long (maximum is 140 characters)".into(),
        );
    }
    let status = Status {
        forge: "github",
        repository: format!("{owner}/{repo}"),
        sha,
        state,
        context: b["context"].as_str().unwrap_or("default").to_string(),
        description,
        target_url: b["target_url"].as_str().map(str::to_string),
        headers: h,
    };
    let answer = json!({"state": status.state, "context": status.context, "description": status.description});
    f.inner.lock().unwrap().accepted.push(status);
    (StatusCode::CREATED, axum::Json(answer))
}

async fn gitlab(
    State(f): State<Forge>,
    Path((project, sha)): Path<(String, String)>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, axum::Json<Value>) {
    let h = headers_of(&headers);
    let bearer = h.get("authorization") == Some(&format!("Bearer {}", f.token));
    let private = h.get("private-token") == Some(&f.token);
    if !bearer && !private {
        return refuse(&f, StatusCode::UNAUTHORIZED, "401 Unauthorized".into());
    }
    if !f.commits.contains(&sha) {
        return refuse(
            &f,
            StatusCode::NOT_FOUND,
            "404 References for commit Not Found".into(),
        );
    }
    let Ok(b) = serde_json::from_str::<Value>(&body) else {
        return refuse(&f, StatusCode::BAD_REQUEST, "400 Bad request".into());
    };
    let state = b["state"].as_str().unwrap_or_default().to_string();
    if ![
        "pending", "running", "success", "failed", "canceled", "skipped",
    ]
    .contains(&state.as_str())
    {
        return refuse(
            &f,
            StatusCode::BAD_REQUEST,
            "state does not have a valid value".into(),
        );
    }
    let name = b["name"].as_str().unwrap_or("default").to_string();
    let key = (project.clone(), sha.clone(), name.clone());
    {
        let mut inner = f.inner.lock().unwrap();
        let open = inner.open.get(&key).cloned();
        // GitLab's commit status state machine: enqueue from pending, run
        // from running are not transitions.
        let invalid = matches!(
            (state.as_str(), open.as_deref()),
            ("pending", Some("pending" | "running")) | ("running", Some("running"))
        );
        if invalid {
            drop(inner);
            return refuse(
                &f,
                StatusCode::BAD_REQUEST,
                format!(
                    "Cannot transition status via :{state} from :{}",
                    open.unwrap_or_default()
                ),
            );
        }
        if matches!(state.as_str(), "pending" | "running") {
            inner.open.insert(key, state.clone());
        } else {
            inner.open.remove(&key);
        }
    }
    let status = Status {
        forge: "gitlab",
        repository: project,
        sha,
        state,
        context: name,
        description: b["description"].as_str().unwrap_or_default().to_string(),
        target_url: b["target_url"].as_str().map(str::to_string),
        headers: h,
    };
    let answer = json!({"status": status.state, "name": status.context});
    f.inner.lock().unwrap().accepted.push(status);
    (StatusCode::CREATED, axum::Json(answer))
}

/// Serves both APIs (GitHub's at `/`, GitLab's at `/api/v4/`) for a
/// repository holding `commits`, accepting `token`.
pub async fn start(token: &str, commits: &[&str]) -> (SocketAddr, Forge) {
    let forge = Forge {
        token: token.to_string(),
        commits: Arc::new(commits.iter().map(|c| (*c).to_string()).collect()),
        inner: Arc::default(),
    };
    let app = Router::new()
        .route("/repos/{owner}/{repo}/statuses/{sha}", post(github))
        .route("/api/v4/projects/{project}/statuses/{sha}", post(gitlab))
        .with_state(forge.clone());
    (super::servers::serve(app).await, forge)
}
