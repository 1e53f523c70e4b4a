//! A client of the Confluent Schema Registry API (Confluent, Apicurio's
//! `ccompat`, Karapace, Redpanda): schemas by id, a subject's latest
//! version, references, and registration for sinks.
//!
//! Blocking on purpose: a source's decoder calls it for a schema id it
//! has not seen, and the record must wait for its schema (skipping it
//! would lose it). Every schema is fetched once per process and cached.
//! A registry that cannot be reached (a connection error, a timeout, a
//! 5xx) is retried with backoff, logged with the registry's name, for as
//! long as the caller's [`Patience`] allows: forever for a running job,
//! a few seconds for `weir validate`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tracing::{info, warn};

use crate::config::RegistryConfig;

/// What a schema is written in (`schemaType`; absent means Avro).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaKind {
    Avro,
    Protobuf,
    Json,
}

impl SchemaKind {
    pub fn api_name(self) -> &'static str {
        match self {
            SchemaKind::Avro => "AVRO",
            SchemaKind::Protobuf => "PROTOBUF",
            SchemaKind::Json => "JSON",
        }
    }
}

/// A schema another one imports (a Protobuf file's `import`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Reference {
    /// The name it is imported by (`google/protobuf/timestamp.proto`).
    pub name: String,
    pub subject: String,
    pub version: i64,
}

/// A schema as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredSchema {
    pub id: u32,
    pub kind: SchemaKind,
    pub text: String,
    pub references: Vec<Reference>,
}

/// Why the registry did not give a schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The registry answered that it has no such schema or subject.
    #[error("{0}")]
    NotFound(String),
    /// The registry refused the request (bad credentials, an invalid
    /// schema): waiting will not help.
    #[error("{0}")]
    Refused(String),
    /// HTTP 409 on registering: the subject's compatibility rule refuses
    /// the schema, or (Apicurio) another writer created the subject at the
    /// same instant. [`Registry::register`] tells the two apart by looking
    /// the schema up.
    #[error("{0}")]
    Conflict(String),
    /// The registry could not be reached within the caller's patience,
    /// or the process is stopping.
    #[error("{0}")]
    Unreachable(String),
}

/// How long a caller waits for an unreachable registry.
#[derive(Debug, Clone, Copy)]
pub enum Patience {
    /// A running job: the record waits until the registry answers.
    Forever,
    /// `weir validate` and tools: give up after this long.
    For(Duration),
}

/// Set when the process stops (SIGTERM): a wait for the registry ends
/// with [`RegistryError::Unreachable`], which fails the task without
/// skipping its record, so the stop is not held up by the registry.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Ends every wait for a registry (the service calls it on a stop signal).
pub fn stop_waiting() {
    STOPPING.store(true, Ordering::SeqCst);
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SchemaBody {
    schema: String,
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<Reference>,
    id: Option<u32>,
}

/// One registry, shared by every source and sink that names it.
pub struct Registry {
    pub name: String,
    url: String,
    auth: Option<String>,
    agent: ureq::Agent,
    by_id: Mutex<HashMap<u32, Arc<RegisteredSchema>>>,
    registered: Mutex<HashMap<(String, String), u32>>,
    /// Held while this process registers a schema, so that the subtasks
    /// of one sink (and the sinks of one job) register one at a time:
    /// Apicurio answers concurrent first registrations of a subject with
    /// a 409 or a 500 (seen in CI), and the second of two identical
    /// registrations then finds the first one's id in the cache.
    registering: Mutex<()>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("name", &self.name)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// A client for `[registries.NAME]`; Err names the key that is wrong.
    pub fn new(name: &str, config: &RegistryConfig) -> Result<Self, String> {
        let url = config.url.trim_end_matches('/').to_string();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "registries.{name}.url: {url:?} is not an http:// or https:// URL"
            ));
        }
        let auth = match (&config.basic_auth_user, &config.basic_auth_password_env) {
            (None, None) => None,
            (Some(user), Some(var)) => {
                let password = std::env::var(var).map_err(|_| {
                    format!("registries.{name}.basic_auth_password_env: the environment variable {var} is not set")
                })?;
                use base64::Engine;
                Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
                ))
            }
            (Some(_), None) => {
                return Err(format!(
                    "registries.{name}.basic_auth_password_env: basic_auth_user needs the \
                     environment variable that holds the password"
                ))
            }
            (None, Some(_)) => {
                return Err(format!(
                    "registries.{name}.basic_auth_user: basic_auth_password_env needs a user"
                ))
            }
        };
        let mut builder = ureq::Agent::config_builder()
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false);
        if let Some(ca) = &config.ssl_ca_location {
            let pem = std::fs::read(ca).map_err(|e| {
                format!(
                    "registries.{name}.ssl_ca_location: cannot read {}: {e}",
                    ca.display()
                )
            })?;
            let certs: Vec<_> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                    _ => None,
                })
                .collect();
            if certs.is_empty() {
                return Err(format!(
                    "registries.{name}.ssl_ca_location: {} holds no PEM certificate",
                    ca.display()
                ));
            }
            builder = builder.tls_config(
                ureq::tls::TlsConfig::builder()
                    .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
                    .build(),
            );
        }
        Ok(Self {
            name: name.to_string(),
            url,
            auth,
            agent: builder.build().new_agent(),
            by_id: Mutex::new(HashMap::new()),
            registered: Mutex::new(HashMap::new()),
            registering: Mutex::new(()),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The schema with this id: from the cache, else fetched (once).
    pub fn schema_by_id(
        &self,
        id: u32,
        patience: Patience,
    ) -> Result<Arc<RegisteredSchema>, RegistryError> {
        if let Some(s) = self.by_id.lock().expect("registry cache").get(&id) {
            return Ok(s.clone());
        }
        let body: SchemaBody = self.get(&format!("/schemas/ids/{id}"), patience, || {
            format!("schema id {id}")
        })?;
        let schema = Arc::new(to_schema(id, body)?);
        self.by_id
            .lock()
            .expect("registry cache")
            .insert(id, schema.clone());
        Ok(schema)
    }

    /// A subject's latest version.
    pub fn latest(
        &self,
        subject: &str,
        patience: Patience,
    ) -> Result<Arc<RegisteredSchema>, RegistryError> {
        self.version(subject, "latest", patience)
    }

    /// A subject's version (`latest` or a number), as references name them.
    pub fn version(
        &self,
        subject: &str,
        version: &str,
        patience: Patience,
    ) -> Result<Arc<RegisteredSchema>, RegistryError> {
        let body: SchemaBody = self.get(
            &format!("/subjects/{}/versions/{version}", encode(subject)),
            patience,
            || format!("subject {subject:?} version {version}"),
        )?;
        let id = body.id.ok_or_else(|| {
            RegistryError::Refused(format!(
                "registry {}: the answer for subject {subject:?} has no id",
                self.name
            ))
        })?;
        let schema = Arc::new(to_schema(id, body)?);
        self.by_id
            .lock()
            .expect("registry cache")
            .entry(id)
            .or_insert_with(|| schema.clone());
        Ok(schema)
    }

    /// Registers `text` under `subject` (or finds it registered) and
    /// returns its id. Cached: a sink registers its schema once.
    pub fn register(
        &self,
        subject: &str,
        kind: SchemaKind,
        text: &str,
        references: &[Reference],
        patience: Patience,
    ) -> Result<u32, RegistryError> {
        let cache_key = (subject.to_string(), text.to_string());
        let cached = || {
            self.registered
                .lock()
                .expect("registry cache")
                .get(&cache_key)
                .copied()
        };
        if let Some(id) = cached() {
            return Ok(id);
        }
        let _one_at_a_time = self.registering.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = cached() {
            return Ok(id);
        }
        let mut body = serde_json::json!({ "schema": text, "schemaType": kind.api_name() });
        if !references.is_empty() {
            body["references"] = serde_json::to_value(references).expect("references serialize");
        }
        #[derive(Deserialize)]
        struct Id {
            id: u32,
        }
        let post = |path: &str| {
            let mut r = self
                .agent
                .post(format!("{}{path}", self.url))
                .header("Content-Type", "application/vnd.schemaregistry.v1+json");
            if let Some(a) = &self.auth {
                r = r.header("Authorization", a);
            }
            r.send_json(&body)
        };
        let versions = format!("/subjects/{}/versions", encode(subject));
        let id = match self.request::<Id>(
            || post(&versions),
            patience,
            || format!("registering a schema under subject {subject:?}"),
        ) {
            Ok(id) => id.id,
            // Another writer (another weir process) may have created the
            // subject with this very schema a moment ago; Confluent's
            // lookup says whether this schema is registered under it.
            Err(RegistryError::Conflict(refusal)) => {
                let lookup = format!("/subjects/{}", encode(subject));
                match self.request::<Id>(
                    || post(&lookup),
                    patience,
                    || format!("looking up a schema under subject {subject:?}"),
                ) {
                    Ok(id) => {
                        info!(registry = %self.name, subject, schema_id = id.id,
                            "schema already registered by another writer");
                        id.id
                    }
                    Err(RegistryError::NotFound(_)) | Err(RegistryError::Conflict(_)) => {
                        return Err(RegistryError::Refused(refusal))
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        self.registered
            .lock()
            .expect("registry cache")
            .insert(cache_key, id);
        Ok(id)
    }

    fn get<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        patience: Patience,
        what: impl Fn() -> String,
    ) -> Result<T, RegistryError> {
        self.request(
            || {
                let mut r = self
                    .agent
                    .get(format!("{}{path}", self.url))
                    .header("Accept", "application/vnd.schemaregistry.v1+json");
                if let Some(a) = &self.auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            },
            patience,
            what,
        )
    }

    /// One request, retried with backoff while the registry cannot be
    /// reached; a 404 is [`RegistryError::NotFound`], another 4xx
    /// [`RegistryError::Refused`].
    fn request<T: serde::de::DeserializeOwned>(
        &self,
        send: impl Fn() -> Result<ureq::http::Response<ureq::Body>, ureq::Error>,
        patience: Patience,
        what: impl Fn() -> String,
    ) -> Result<T, RegistryError> {
        let started = Instant::now();
        let mut backoff = Duration::from_millis(100);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let problem = match send() {
                Ok(mut response) => {
                    let status = response.status().as_u16();
                    let text = response.body_mut().read_to_string().unwrap_or_default();
                    match status {
                        200..=299 => {
                            if attempt > 1 {
                                info!(registry = %self.name, url = %self.url, attempts = attempt,
                                    waited_ms = started.elapsed().as_millis() as u64,
                                    "schema registry answers again");
                            }
                            return serde_json::from_str(&text).map_err(|e| {
                                RegistryError::Refused(format!(
                                    "registry {} ({}): {}: an answer that is not the registry API's: {e}",
                                    self.name, self.url, what()
                                ))
                            });
                        }
                        404 => {
                            return Err(RegistryError::NotFound(format!(
                                "registry {} ({}) has no {}: {}",
                                self.name,
                                self.url,
                                what(),
                                brief(&text)
                            )))
                        }
                        429 | 500..=599 => format!("HTTP {status}: {}", brief(&text)),
                        409 => {
                            return Err(RegistryError::Conflict(format!(
                                "registry {} ({}) refused {}: HTTP 409: {}",
                                self.name,
                                self.url,
                                what(),
                                brief(&text)
                            )))
                        }
                        _ => {
                            return Err(RegistryError::Refused(format!(
                                "registry {} ({}) refused {}: HTTP {status}: {}",
                                self.name,
                                self.url,
                                what(),
                                brief(&text)
                            )))
                        }
                    }
                }
                Err(e) => e.to_string(),
            };
            let out_of_patience = match patience {
                Patience::Forever => false,
                Patience::For(limit) => started.elapsed() + backoff > limit,
            };
            if out_of_patience || STOPPING.load(Ordering::SeqCst) {
                return Err(RegistryError::Unreachable(format!(
                    "registry {} ({}) cannot be reached for {} after {attempt} attempts in {:.1}s: {problem}",
                    self.name,
                    self.url,
                    what(),
                    started.elapsed().as_secs_f64()
                )));
            }
            if attempt == 1 || attempt.is_power_of_two() {
                warn!(registry = %self.name, url = %self.url, attempt, problem = %problem,
                    waited_ms = started.elapsed().as_millis() as u64,
                    "schema registry cannot be reached for {}; the record waits", what());
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }
}

fn to_schema(id: u32, body: SchemaBody) -> Result<RegisteredSchema, RegistryError> {
    let kind = match body.schema_type.as_deref() {
        None | Some("AVRO") => SchemaKind::Avro,
        Some("PROTOBUF") => SchemaKind::Protobuf,
        Some("JSON") => SchemaKind::Json,
        Some(other) => {
            return Err(RegistryError::Refused(format!(
                "schema id {id} is of type {other:?}, which weir does not read"
            )))
        }
    };
    Ok(RegisteredSchema {
        id,
        kind,
        text: body.schema,
        references: body.references,
    })
}

/// The first line of an error body, short enough for a log line.
fn brief(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    line.chars().take(300).collect()
}

/// A subject in a URL path (subjects may hold `/` or spaces).
fn encode(subject: &str) -> String {
    subject
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A sink's schema, registered when the sink writes its first record
/// (not when the job is planned: `weir validate` registers nothing). A
/// registry that cannot be reached makes the sink wait.
pub struct Registration {
    target: Option<(Arc<Registry>, String)>,
    kind: SchemaKind,
    text: String,
    references: Vec<Reference>,
    id: std::sync::OnceLock<u32>,
}

impl Registration {
    /// `text` to register under `subject` in `registry`.
    pub fn new(registry: Arc<Registry>, subject: &str, kind: SchemaKind, text: String) -> Self {
        Self {
            target: Some((registry, subject.to_string())),
            kind,
            text,
            references: Vec::new(),
            id: std::sync::OnceLock::new(),
        }
    }

    /// With the schemas `text` imports.
    pub fn with_references(mut self, references: Vec<Reference>) -> Self {
        self.references = references;
        self
    }

    /// A schema already registered as `id` (tests, and a sink given an id).
    pub fn known(id: u32, kind: SchemaKind, text: String) -> Self {
        let cell = std::sync::OnceLock::new();
        let _ = cell.set(id);
        Self {
            target: None,
            kind,
            text,
            references: Vec::new(),
            id: cell,
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The schema's id, registering it the first time.
    pub fn id(&self) -> Result<u32, String> {
        if let Some(id) = self.id.get() {
            return Ok(*id);
        }
        let (registry, subject) = self
            .target
            .as_ref()
            .expect("a registration without a registry has its id");
        let id = registry
            .register(
                subject,
                self.kind,
                &self.text,
                &self.references,
                Patience::Forever,
            )
            .map_err(|e| e.to_string())?;
        info!(registry = %registry.name, subject = %subject, schema_id = id, "sink schema registered");
        Ok(*self.id.get_or_init(|| id))
    }
}

/// The registries of a configuration, by name, made once per process.
#[derive(Debug, Default, Clone)]
pub struct Registries {
    by_name: HashMap<String, Arc<Registry>>,
}

impl Registries {
    pub fn new(
        configs: &std::collections::BTreeMap<String, RegistryConfig>,
    ) -> Result<Self, String> {
        let mut by_name = HashMap::new();
        for (name, c) in configs {
            by_name.insert(name.clone(), Arc::new(Registry::new(name, c)?));
        }
        Ok(Self { by_name })
    }

    /// The registry `name`; `key` is the config key that names it.
    pub fn get(&self, name: &str, key: &str) -> Result<Arc<Registry>, String> {
        self.by_name.get(name).cloned().ok_or_else(|| {
            let mut known: Vec<&str> = self.by_name.keys().map(String::as_str).collect();
            known.sort();
            format!(
                "{key}: no registry {name:?} is configured ([registries.{name}] url = \"...\"); configured: {}",
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_escaped_in_paths() {
        assert_eq!(encode("orders-value"), "orders-value");
        assert_eq!(encode("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn an_unreachable_registry_is_named_after_the_callers_patience() {
        let config = RegistryConfig {
            url: "http://127.0.0.1:9".into(),
            basic_auth_user: None,
            basic_auth_password_env: None,
            ssl_ca_location: None,
            timeout: Duration::from_secs(1),
        };
        let r = Registry::new("main", &config).unwrap();
        let started = Instant::now();
        let e = r
            .schema_by_id(1, Patience::For(Duration::from_millis(500)))
            .unwrap_err();
        assert!(matches!(e, RegistryError::Unreachable(_)), "{e:?}");
        let m = e.to_string();
        assert!(
            m.contains("registry main") && m.contains("schema id 1"),
            "{m}"
        );
        assert!(started.elapsed() < Duration::from_secs(3));
        let bad = RegistryConfig {
            url: "127.0.0.1:8081".into(),
            ..config
        };
        assert!(Registry::new("x", &bad)
            .unwrap_err()
            .contains("registries.x.url"));
    }
}
