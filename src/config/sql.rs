//! A SQL job's sections: `[sources.NAME]`, `[sinks.NAME]` and
//! `[pipeline] sql` (or `sql_file`). The planner (`crate::sql`) reads them;
//! here they are parsed and checked key by key.

use std::collections::BTreeMap;
use std::path::Path;

use super::sections::*;
use super::{parse_section, ConfigProblem};

/// A SQL job's sections (`[sources.*]`, `[sinks.*]`, `[pipeline] sql` or
/// `sql_file`), or None for a built-in pipeline. A SQL job has no
/// `[source]` or `[pipeline] kind`; its `[sink]` may give the
/// transactional id's prefix, the instance and the delivery, which every
/// sink that names one must agree with (every exactly-once sink of a job
/// commits in the job's one transaction per checkpoint).
pub(super) fn sql_job(
    file: &Path,
    tree: &BTreeMap<String, serde_json::Value>,
    problems: &mut Vec<ConfigProblem>,
) -> Option<SqlSections> {
    if !is_sql_job(tree) {
        return None;
    }
    let pipeline = tree.get("pipeline").and_then(|p| p.as_object());
    let has_sql = pipeline.is_some_and(|p| p.contains_key("sql") || p.contains_key("sql_file"));
    let mut problem = |key: &str, message: String| {
        problems.push(ConfigProblem {
            key: key.into(),
            message,
        })
    };
    if !has_sql {
        problem(
            "pipeline.sql",
            "[sources.*] and [sinks.*] describe a SQL job: give its statements in \
             [pipeline] sql (or sql_file)"
                .into(),
        );
    }
    if tree.contains_key("source") {
        problem(
            "source",
            "a SQL job reads the tables in [sources.NAME]; remove [source]".into(),
        );
    }
    if pipeline.is_some_and(|p| p.contains_key("kind")) {
        problem(
            "pipeline.kind",
            "a SQL job computes what its [pipeline] sql says; remove kind".into(),
        );
    }
    let mut named = |section: &str| -> Vec<(String, serde_json::Value)> {
        match tree.get(section) {
            None => Vec::new(),
            Some(serde_json::Value::Object(m)) => {
                m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
            }
            Some(_) => {
                problems.push(ConfigProblem {
                    key: section.into(),
                    message: format!("expected tables [{section}.NAME]"),
                });
                Vec::new()
            }
        }
    };
    let function_values = named("functions");
    let source_values = named("sources");
    let sink_values = named("sinks");
    let registry_values = named("registries");
    let (declared_sources, declared_sinks) = (source_values.len(), sink_values.len());
    let mut sources = BTreeMap::new();
    for (name, v) in source_values {
        if let Some(s) = parse_section::<SqlSourceConfig>(&v, &format!("sources.{name}"), problems)
        {
            sources.insert(name, s);
        }
    }
    let mut registries = BTreeMap::new();
    for (name, v) in registry_values {
        if let Some(r) =
            parse_section::<RegistryConfig>(&v, &format!("registries.{name}"), problems)
        {
            registries.insert(name, r);
        }
    }
    let mut functions = BTreeMap::new();
    for (name, v) in function_values {
        let key = format!("functions.{name}");
        if let Some(mut f) = parse_section::<FunctionConfig>(&v, &key, problems) {
            if let Some(dir) = file.parent().filter(|_| f.wasm.is_relative()) {
                f.wasm = dir.join(&f.wasm);
            }
            function_problems(&key, &f, problems);
            functions.insert(name, f);
        }
    }
    let mut sinks = BTreeMap::new();
    for (name, v) in sink_values {
        if let Some(s) = parse_section::<SqlSinkConfig>(&v, &format!("sinks.{name}"), problems) {
            sinks.insert(name, s);
        }
    }
    let mut problem = |key: &str, message: String| {
        problems.push(ConfigProblem {
            key: key.into(),
            message,
        })
    };
    if declared_sources == 0 {
        problem(
            "sources",
            "a SQL job needs at least one [sources.NAME] table".into(),
        );
    }
    if declared_sinks == 0 {
        problem("sinks", "a SQL job needs at least one [sinks.NAME]".into());
    }
    for (name, s) in &sources {
        for p in super::formats::source_problems(name, s, &registries) {
            problems_out(&mut problem, p);
        }
        if s.on_bad_record == BadRecordPolicy::DeadLetter && s.dead_letter_topic.is_none() {
            problem(
                &format!("sources.{name}.dead_letter_topic"),
                "on_bad_record = \"dead-letter\" needs a dead_letter_topic".into(),
            );
        }
    }
    for (name, s) in &sinks {
        for p in super::formats::sink_problems(name, s, &registries) {
            problems_out(&mut problem, p);
        }
    }
    // One delivery for the job: every sink that names one, and [sink]'s,
    // must agree (the job commits its sinks in one transaction).
    let name = |d: Delivery| serde_json::to_value(d).expect("delivery serializes");
    let mut declared: Vec<(String, Delivery)> = sinks
        .iter()
        .filter_map(|(n, s)| s.delivery.map(|d| (format!("sinks.{n}.delivery"), d)))
        .collect();
    if let Some(d) = tree
        .get("sink")
        .and_then(|s| s.get("delivery"))
        .and_then(|d| serde_json::from_value::<Delivery>(d.clone()).ok())
    {
        declared.insert(0, ("sink.delivery".into(), d));
    }
    let (first, delivery) = declared
        .first()
        .cloned()
        .unwrap_or_else(|| ("(default)".into(), Delivery::default()));
    for (key, d) in &declared {
        if *d != delivery {
            problem(
                key,
                format!(
                    "every sink of a job has one delivery (the job commits its sinks in one \
                     transaction): {first} says {}, this says {}",
                    name(delivery),
                    name(*d)
                ),
            );
        }
    }
    let mut raw_pipeline = tree.get("pipeline").cloned().unwrap_or_default();
    if let Some(p) = raw_pipeline.as_object_mut() {
        p.remove("kind");
    }
    let pipeline = parse_section::<SqlPipelineConfig>(&raw_pipeline, "pipeline", problems)?;
    let mut problem = |key: &str, message: String| {
        problems.push(ConfigProblem {
            key: key.into(),
            message,
        })
    };
    if let Some(zone) = &pipeline.time_zone {
        if let Err(m) = super::time_zone::time_zone(zone) {
            problem("pipeline.time_zone", m);
        }
    }
    let (text, origin) = match (&pipeline.sql, &pipeline.sql_file) {
        (Some(_), Some(_)) => {
            problem(
                "pipeline.sql_file",
                "give the statements in sql or in sql_file, not both".into(),
            );
            return None;
        }
        (Some(sql), None) => (sql.clone(), "pipeline.sql".to_string()),
        (None, Some(path)) => {
            let path = match file.parent() {
                Some(dir) if path.is_relative() => dir.join(path),
                _ => path.clone(),
            };
            match std::fs::read_to_string(&path) {
                Ok(text) => (text, path.display().to_string()),
                Err(e) => {
                    problem(
                        "pipeline.sql_file",
                        format!("cannot read {}: {e}", path.display()),
                    );
                    return None;
                }
            }
        }
        (None, None) => return None,
    };
    Some(SqlSections {
        job: SqlJob {
            registries,
            sources,
            sinks,
            pipeline,
            text,
            origin,
            functions,
        },
        delivery,
    })
}

/// What is wrong with `[functions.NAME]` (`key`) short of loading its
/// module: the types, and whether it is a scalar or a table function.
fn function_problems(key: &str, f: &FunctionConfig, problems: &mut Vec<ConfigProblem>) {
    let mut problem = |at: &str, message: String| {
        problems.push(ConfigProblem {
            key: format!("{key}.{at}"),
            message,
        })
    };
    for (i, t) in f.params.iter().enumerate() {
        if let Err(m) = crate::sql::types::parse_type(t) {
            problem(&format!("params.{i}"), m);
        }
    }
    match (&f.returns, &f.columns) {
        (Some(t), None) => {
            if let Err(m) = crate::sql::types::parse_type(t) {
                problem("returns", m);
            }
        }
        (None, Some(columns)) => {
            for (i, c) in columns.iter().enumerate() {
                let parsed = c
                    .trim()
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| format!("{c:?} is not \"name TYPE\""))
                    .and_then(|(_, t)| crate::sql::types::parse_type(t.trim()));
                if let Err(m) = parsed {
                    problem(&format!("columns.{i}"), m);
                }
            }
        }
        _ => problem(
            "returns",
            "give returns = \"TYPE\" for a scalar function or columns = [\"name TYPE\", ...] \
             for a table function, one of them"
                .into(),
        ),
    }
    if !f.wasm.exists() {
        problem("wasm", format!("{} does not exist", f.wasm.display()));
    }
}

/// Whether the file describes a SQL job: `[pipeline] sql` or `sql_file`,
/// or `[sources.*]` or `[sinks.*]`.
pub(super) fn is_sql_job(tree: &BTreeMap<String, serde_json::Value>) -> bool {
    let pipeline = tree.get("pipeline").and_then(|p| p.as_object());
    pipeline.is_some_and(|p| p.contains_key("sql") || p.contains_key("sql_file"))
        || tree.contains_key("sources")
        || tree.contains_key("sinks")
}

/// A SQL job and the one delivery its sinks agree on.
pub(super) struct SqlSections {
    pub job: SqlJob,
    pub delivery: Delivery,
}

fn problems_out(problem: &mut impl FnMut(&str, String), p: ConfigProblem) {
    problem(&p.key, p.message);
}
