//! What a SQL source's or sink's format keys must say (docs/formats.md):
//! the registry a registry format needs and that exists, the columns a
//! format cannot find by itself, a change stream's key, the metadata keys.
//! Checked when the configuration loads, so `weir validate` names each
//! problem with its key path.

use std::collections::BTreeMap;

use super::sections::{FormatName, RegistryConfig, SinkChangelog, SqlSinkConfig, SqlSourceConfig};
use super::ConfigProblem;

fn problem(key: String, message: impl Into<String>) -> ConfigProblem {
    ConfigProblem {
        key,
        message: message.into(),
    }
}

/// The registry a section names, checked against `[registries]`.
fn registry_problem(
    at: &str,
    named: Option<&str>,
    needed_by: Option<&str>,
    registries: &BTreeMap<String, RegistryConfig>,
) -> Option<ConfigProblem> {
    match (named, needed_by) {
        (None, Some(what)) => Some(problem(
            format!("{at}.registry"),
            format!(
                "{what} needs a schema registry: registry = \"NAME\" with [registries.NAME] url = \"...\""
            ),
        )),
        (Some(name), _) if !registries.contains_key(name) => {
            let known: Vec<&str> = registries.keys().map(String::as_str).collect();
            Some(problem(
                format!("{at}.registry"),
                format!(
                    "no registry {name:?} is configured (add [registries.{name}] url = \"...\"); configured: {}",
                    if known.is_empty() { "none".into() } else { known.join(", ") }
                ),
            ))
        }
        _ => None,
    }
}

fn one_ascii(at: String, value: &Option<String>, out: &mut Vec<ConfigProblem>) {
    if let Some(v) = value {
        if v.len() != 1 || !v.is_ascii() {
            out.push(problem(at, format!("{v:?} is not one ASCII character")));
        }
    }
}

pub fn source_problems(
    name: &str,
    s: &SqlSourceConfig,
    registries: &BTreeMap<String, RegistryConfig>,
) -> Vec<ConfigProblem> {
    let at = format!("sources.{name}");
    let mut out = Vec::new();
    let f = s.format;
    let uses_registry = f.needs_registry() || f == FormatName::Protobuf;
    let needed = if f.needs_registry() {
        Some(format!("format = \"{f}\""))
    } else {
        None
    };
    if f == FormatName::Protobuf && s.registry.is_none() && s.proto_file.is_none() {
        out.push(problem(
            format!("{at}.proto_file"),
            "format = \"protobuf\" reads descriptors from a registry (registry = \"NAME\") or a .proto file (proto_file = \"...\")",
        ));
    }
    if f == FormatName::Protobuf && s.proto_file.is_some() && s.message.is_none() {
        out.push(problem(
            format!("{at}.message"),
            "a .proto file may define several messages: name the one the topic carries, message = \"package.Message\"",
        ));
    }
    if f != FormatName::Protobuf && (s.message.is_some() || s.proto_file.is_some()) {
        let key = if s.message.is_some() {
            "message"
        } else {
            "proto_file"
        };
        out.push(problem(
            format!("{at}.{key}"),
            format!("{key} is for format = \"protobuf\"; this source reads {f}"),
        ));
    }
    let key_uses_registry = matches!(
        s.key_format,
        Some(FormatName::Avro | FormatName::JsonSchema | FormatName::Protobuf)
    );
    if s.registry.is_some() && !uses_registry && !key_uses_registry {
        out.push(problem(
            format!("{at}.registry"),
            format!("format = \"{f}\" does not read a schema registry's framing; remove registry or pick a registry format (avro, protobuf, json-schema, debezium-avro)"),
        ));
    }
    let needed_by = needed.as_deref().or(if key_uses_registry {
        Some("key_format")
    } else {
        None
    });
    if let Some(p) = registry_problem(&at, s.registry.as_deref(), needed_by, registries) {
        if !(f == FormatName::Protobuf && s.proto_file.is_some() && !key_uses_registry) {
            out.push(p);
        }
    }
    let finds_columns = matches!(
        f,
        FormatName::Avro
            | FormatName::Protobuf
            | FormatName::DebeziumAvro
            | FormatName::Text
            | FormatName::Raw
    );
    if s.schema.is_none() && !finds_columns {
        out.push(problem(
            format!("{at}.schema"),
            format!("a {f} source needs its columns: schema = \"name TYPE, ...\""),
        ));
    }
    if f.is_changelog() && s.primary_key.is_none() {
        out.push(problem(
            format!("{at}.primary_key"),
            format!(
                "a {f} change stream is a table keyed by its primary key: primary_key = [\"id\"]"
            ),
        ));
    }
    match s.key_format {
        None if s.key_fields.is_some() => out.push(problem(
            format!("{at}.key_fields"),
            "key_fields are read from the Kafka key: give its format, key_format = \"json\" (or avro, protobuf, ...)",
        )),
        Some(_) if s.key_fields.is_none() && s.primary_key.is_none() => out.push(problem(
            format!("{at}.key_fields"),
            "key_format reads the Kafka key into columns: name them, key_fields = [\"id\"] (or give primary_key)",
        )),
        Some(k) if k.is_changelog() || k == FormatName::Text => out.push(problem(
            format!("{at}.key_format"),
            format!("a Kafka key is not read as {k}: use json, csv, raw, avro, protobuf or json-schema"),
        )),
        Some(FormatName::Protobuf) if s.key_message.is_none() && s.registry.is_none() => {
            out.push(problem(
                format!("{at}.key_message"),
                "a Protobuf key needs its message type: key_message = \"package.Key\"",
            ))
        }
        _ => {}
    }
    if f != FormatName::Csv
        && (s.csv_header.is_some() || s.csv_delimiter.is_some() || s.csv_quote.is_some())
    {
        out.push(problem(
            format!("{at}.csv_header"),
            format!("csv_* keys are for format = \"csv\"; this source reads {f}"),
        ));
    }
    one_ascii(format!("{at}.csv_delimiter"), &s.csv_delimiter, &mut out);
    one_ascii(format!("{at}.csv_quote"), &s.csv_quote, &mut out);
    out
}

pub fn sink_problems(
    name: &str,
    s: &SqlSinkConfig,
    registries: &BTreeMap<String, RegistryConfig>,
) -> Vec<ConfigProblem> {
    let at = format!("sinks.{name}");
    let mut out = Vec::new();
    let f = s.format;
    match f {
        FormatName::DebeziumAvro | FormatName::Text => out.push(problem(
            format!("{at}.format"),
            format!(
                "a sink does not write {f}: write Debezium changes as \"debezium-json\" and text as \"raw\""
            ),
        )),
        FormatName::DebeziumJson
            if s.changelog.is_some_and(|c| c != SinkChangelog::Debezium) =>
        {
            out.push(problem(
                format!("{at}.changelog"),
                "format = \"debezium-json\" writes every change as Debezium's envelope: remove changelog or set it to \"debezium\"",
            ))
        }
        _ => {}
    }
    if s.changelog == Some(SinkChangelog::Debezium)
        && !matches!(f, FormatName::Json | FormatName::DebeziumJson)
    {
        out.push(problem(
            format!("{at}.changelog"),
            format!("Debezium changes are written as JSON (format = \"debezium-json\"), not {f}"),
        ));
    }
    let registry_format = |f: FormatName| {
        matches!(
            f,
            FormatName::Avro | FormatName::Protobuf | FormatName::JsonSchema
        )
    };
    let needed = if registry_format(f) {
        Some("this format")
    } else if s.key_format.is_some_and(registry_format) {
        Some("key_format")
    } else {
        None
    };
    if s.registry.is_some() && needed.is_none() {
        out.push(problem(
            format!("{at}.registry"),
            format!("format = \"{f}\" writes no registry framing; remove registry"),
        ));
    }
    if let Some(p) = registry_problem(&at, s.registry.as_deref(), needed, registries) {
        out.push(p);
    }
    if let Some(k) = s.key_format {
        if k.is_changelog() || k == FormatName::Text {
            out.push(problem(
                format!("{at}.key_format"),
                format!("a Kafka key is not written as {k}: use json, csv, raw, avro, protobuf or json-schema"),
            ));
        }
    }
    if s.schema_id.is_some() && f != FormatName::Avro {
        out.push(problem(
            format!("{at}.schema_id"),
            format!("schema_id names a registered Avro schema; this sink writes {f}"),
        ));
    }
    if s.message.is_some() && f != FormatName::Protobuf {
        out.push(problem(
            format!("{at}.message"),
            format!("message is for format = \"protobuf\"; this sink writes {f}"),
        ));
    }
    if f != FormatName::Csv && s.csv_delimiter.is_some() {
        out.push(problem(
            format!("{at}.csv_delimiter"),
            format!("csv_delimiter is for format = \"csv\"; this sink writes {f}"),
        ));
    }
    one_ascii(format!("{at}.csv_delimiter"), &s.csv_delimiter, &mut out);
    out
}
