//! A SQL table's and sink's formats (docs/formats.md): the columns a
//! registry's schema gives a table without a column list, the decoder of
//! a table's records (its value, its key's columns, its metadata, its
//! computed columns and event time) and the encoders of a sink.

use std::sync::Arc;

use super::compiled::EvalFn;
use super::note_eval_error;
use crate::config::{FormatName, SqlSinkConfig, SqlSourceConfig};
use crate::dataflow::graph::{KafkaRecord, RecordDecoder, RecordError, SinkEncoding};
use crate::dataflow::row::{DataType, Field, Row, RowKind, Schema, Value};
use crate::format::avro::{self, AvroDecoder, AvroEncoder};
use crate::format::csv::{CsvDecoder, CsvEncoder, CsvOptions};
use crate::format::debezium::{envelope_columns, DebeziumDecoder};
use crate::format::json::{JsonDecoder, JsonEncoder};
use crate::format::metadata::MetadataColumn;
use crate::format::protobuf::{self, ProtoSchemas, ProtoSource, ProtobufDecoder, ProtobufEncoder};
use crate::format::registry::{Patience, Registration, Registries, Registry, SchemaKind};
use crate::format::{BytesDecoder, BytesEncoder, DecodeError, Decoded};
use crate::time::NO_TIMESTAMP;

/// How long planning waits for an unreachable registry: forever when the
/// job starts (the registry may come up after weir), a few seconds for
/// `weir validate` and `weir explain` ([`impatient`]).
static IMPATIENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Planning gives up on an unreachable registry after 10 s (for the
/// commands that only check a job).
pub fn impatient() {
    IMPATIENT.store(true, std::sync::atomic::Ordering::SeqCst);
}

fn plan_patience() -> Patience {
    if IMPATIENT.load(std::sync::atomic::Ordering::SeqCst) {
        Patience::For(std::time::Duration::from_secs(10))
    } else {
        Patience::Forever
    }
}

fn registry_of(
    name: &str,
    s_registry: Option<&str>,
    registries: &Registries,
    section: &str,
) -> Result<Arc<Registry>, String> {
    let r = s_registry
        .ok_or_else(|| format!("{section}.{name}.registry: this format needs a registry"))?;
    registries.get(r, &format!("{section}.{name}.registry"))
}

/// The subject of a table's value schema: `subject`, else Confluent's
/// TopicNameStrategy on its first topic.
fn value_subject(s: &SqlSourceConfig) -> String {
    s.subject
        .clone()
        .unwrap_or_else(|| format!("{}-value", s.topics.first().map_or("", String::as_str)))
}

/// The physical columns of a table whose `schema` lists none, from its
/// format: `line` for text, `value` for raw, the registry's latest schema
/// of the subject for Avro and Protobuf (or the `.proto` file's message),
/// with each column's reader default.
pub fn registry_columns(
    name: &str,
    s: &SqlSourceConfig,
    registries: &Registries,
) -> Result<(Vec<Field>, Vec<Option<Value>>), String> {
    let subject = value_subject(s);
    let at = format!("sources.{name}");
    match s.format {
        FormatName::Text => Ok((vec![Field::new("line", DataType::String)], vec![None])),
        FormatName::Raw => Ok((vec![Field::new("value", DataType::Bytes)], vec![None])),
        FormatName::Avro | FormatName::DebeziumAvro => {
            let registry = registry_of(name, s.registry.as_deref(), registries, "sources")?;
            let latest = registry.latest(&subject, plan_patience()).map_err(|e| {
                format!(
                    "{at}.schema: the columns come from subject {subject:?}'s latest schema: {e}"
                )
            })?;
            if latest.kind != SchemaKind::Avro {
                return Err(format!(
                    "{at}.format: subject {subject:?}'s latest schema (id {}) is {}, not Avro",
                    latest.id,
                    latest.kind.api_name()
                ));
            }
            let schema = avro::parse(&latest.text)
                .map_err(|e| format!("{at}: subject {subject:?} id {}: {e}", latest.id))?;
            let mut columns = avro::columns(&schema)
                .map_err(|e| format!("{at}: subject {subject:?} id {}: {e}", latest.id))?;
            if s.format == FormatName::DebeziumAvro {
                // The envelope's `after` is the table's row.
                columns = match columns.iter().find(|(f, _)| f.name == "after") {
                    Some((Field { data_type: DataType::Struct(fields), .. }, _)) => {
                        fields.iter().map(|f| (f.clone(), None)).collect()
                    }
                    _ => {
                        return Err(format!(
                            "{at}: subject {subject:?} id {} is not a Debezium envelope (no `after` record)",
                            latest.id
                        ))
                    }
                };
            }
            Ok(columns.into_iter().unzip())
        }
        FormatName::Protobuf => {
            let source = proto_source(name, s, registries, &subject)?;
            let schemas = ProtoSchemas::new(source).map_err(|e| format!("{at}: {e}"))?;
            let compiled = schemas.latest(plan_patience()).map_err(|e| {
                format!(
                    "{at}.schema: the columns come from the message's schema: {}",
                    e.message()
                )
            })?;
            let message = compiled
                .message(s.message.as_deref())
                .map_err(|e| format!("{at}.message: {e}"))?;
            let columns = protobuf::columns(&message).map_err(|e| format!("{at}: {e}"))?;
            let n = columns.len();
            Ok((columns, vec![None; n]))
        }
        other => Err(format!(
            "{at}.schema: a {other} source needs its columns: schema = \"name TYPE, ...\""
        )),
    }
}

fn proto_source(
    name: &str,
    s: &SqlSourceConfig,
    registries: &Registries,
    subject: &str,
) -> Result<ProtoSource, String> {
    Ok(match (&s.proto_file, &s.registry) {
        (Some(file), _) => ProtoSource::File(file.clone()),
        (None, Some(_)) => ProtoSource::Registry {
            registry: registry_of(name, s.registry.as_deref(), registries, "sources")?,
            subject: subject.to_string(),
        },
        (None, None) => {
            return Err(format!(
                "sources.{name}.proto_file: protobuf needs a registry or a .proto file"
            ))
        }
    })
}

/// The source a decoder is made for.
struct SourceAt<'a> {
    name: &'a str,
    s: &'a SqlSourceConfig,
    registries: &'a Registries,
}

/// The decoder of one format over `columns`.
fn decoder(
    at_source: &SourceAt<'_>,
    format: FormatName,
    message: Option<&str>,
    columns: &[Field],
    defaults: &[Option<Value>],
    subject: &str,
) -> Result<Arc<dyn BytesDecoder>, String> {
    let SourceAt {
        name,
        s,
        registries,
    } = *at_source;
    let at = format!("sources.{name}");
    let registry = || registry_of(name, s.registry.as_deref(), registries, "sources");
    Ok(match format {
        FormatName::Json => Arc::new(JsonDecoder::new(columns.to_vec(), None)),
        FormatName::JsonSchema => Arc::new(JsonDecoder::new(columns.to_vec(), Some(registry()?))),
        FormatName::Text | FormatName::Raw => {
            let [only] = columns else {
                return Err(format!(
                    "{at}.schema: a {format} record is one column, not {}",
                    columns.len()
                ));
            };
            match only.data_type {
                DataType::String => Arc::new(Utf8),
                DataType::Bytes => Arc::new(Bytes),
                ref t => {
                    return Err(format!(
                        "{at}.schema: a {format} column is VARCHAR or BYTES, not {t}"
                    ))
                }
            }
        }
        FormatName::Csv => {
            let char_of = |v: &Option<String>, d: u8| v.as_deref().map_or(d, |c| c.as_bytes()[0]);
            Arc::new(
                CsvDecoder::new(
                    columns.to_vec(),
                    CsvOptions {
                        delimiter: char_of(&s.csv_delimiter, b','),
                        quote: char_of(&s.csv_quote, b'"'),
                        header: s.csv_header.clone(),
                    },
                )
                .map_err(|e| format!("{at}.schema: {e}"))?,
            )
        }
        FormatName::Avro => Arc::new(AvroDecoder::new(
            registry()?,
            columns.to_vec(),
            defaults.to_vec(),
        )),
        FormatName::Protobuf => Arc::new(
            ProtobufDecoder::new(
                proto_source(name, s, registries, subject)?,
                message,
                columns,
                s.proto_file.is_none(),
            )
            .map_err(|e| format!("{at}: {e}"))?,
        ),
        FormatName::DebeziumJson => Arc::new(DebeziumDecoder::json(columns)),
        FormatName::DebeziumAvro => {
            let envelope = envelope_columns(columns);
            let n = envelope.len();
            Arc::new(DebeziumDecoder::over(Arc::new(AvroDecoder::new(
                registry()?,
                envelope,
                vec![None; n],
            ))))
        }
    })
}

/// For `weir validate`: the subject's latest schema can be read into the
/// table's columns (a subject without a schema yet passes: its first
/// writer has not come).
fn check_latest_fits(at: &SourceAt<'_>, columns: &[Field], subject: &str) -> Result<(), String> {
    let SourceAt {
        name,
        s,
        registries,
    } = *at;
    let registry_format = matches!(s.format, FormatName::Avro | FormatName::DebeziumAvro)
        || (s.format == FormatName::Protobuf && s.proto_file.is_none());
    if !registry_format {
        return Ok(());
    }
    let registry = registry_of(name, s.registry.as_deref(), registries, "sources")?;
    let latest = match registry.latest(subject, plan_patience()) {
        Ok(latest) => latest,
        Err(crate::format::registry::RegistryError::NotFound(_)) => return Ok(()),
        Err(e) => return Err(format!("sources.{name}.registry: {e}")),
    };
    let misfit = |e: String| {
        format!(
            "sources.{name}.schema: subject {subject:?}'s latest schema (id {}) does not fit the table's columns: {e}",
            latest.id
        )
    };
    match s.format {
        FormatName::Avro => avro::check_fits(&latest.text, columns).map_err(misfit),
        FormatName::DebeziumAvro => {
            avro::check_fits(&latest.text, &envelope_columns(columns)).map_err(misfit)
        }
        _ => ProtobufDecoder::new(
            proto_source(name, s, registries, subject)?,
            s.message.as_deref(),
            columns,
            true,
        )
        .map_err(misfit)?
        .check_latest(plan_patience())
        .map_err(|e| misfit(e.message().to_string())),
    }
}

/// A text column: the bytes as UTF-8.
struct Utf8;

impl BytesDecoder for Utf8 {
    fn decode(&self, bytes: &[u8], out: &mut Vec<Value>) -> Result<Decoded, DecodeError> {
        let s = std::str::from_utf8(bytes)
            .map_err(|e| DecodeError::Bad(format!("value is not valid UTF-8: {e}")))?;
        out.push(Value::String(s.to_string()));
        Ok(Decoded::Row(RowKind::Insert))
    }
}

/// A BYTES column: the bytes as they are.
struct Bytes;

impl BytesDecoder for Bytes {
    fn decode(&self, bytes: &[u8], out: &mut Vec<Value>) -> Result<Decoded, DecodeError> {
        out.push(Value::Bytes(bytes.to_vec()));
        Ok(Decoded::Row(RowKind::Insert))
    }
}

/// A JSON key: an object of the key columns, or, for one column, its
/// value as JSON or (for a VARCHAR) as bare text, as upsert sinks and
/// Kafka Streams write keys.
struct JsonKey {
    columns: Vec<Field>,
}

impl BytesDecoder for JsonKey {
    fn decode(&self, bytes: &[u8], out: &mut Vec<Value>) -> Result<Decoded, DecodeError> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| DecodeError::Bad(format!("the Kafka key is not UTF-8: {e}")))?;
        let json: Option<serde_json::Value> = serde_json::from_str(text).ok();
        match (json, &self.columns[..]) {
            (Some(j @ serde_json::Value::Object(_)), _) => {
                crate::format::json::decode_object(&j, &self.columns, out)
            }
            (Some(j), [only]) => {
                out.push(
                    crate::dataflow::json::from_json(&j, &only.data_type)
                        .map_err(|e| DecodeError::Bad(format!("the Kafka key {text:?}: {e}")))?,
                );
                Ok(())
            }
            (None, [only]) if only.data_type == DataType::String => {
                out.push(Value::String(text.to_string()));
                Ok(())
            }
            _ => Err(DecodeError::Bad(format!(
                "the Kafka key {text:?} is not a JSON object of the key's {} columns",
                self.columns.len()
            ))),
        }
        .map(|()| Decoded::Row(RowKind::Insert))
        .map_err(|e| e.context("the Kafka key"))
    }
}

/// What the planner gives a table's decoder.
pub struct TableParts {
    pub source: String,
    /// The physical columns (what the formats read), then the metadata's.
    pub physical: Schema,
    pub defaults: Vec<Option<Value>>,
    pub metadata: Vec<MetadataColumn>,
    pub computed: Vec<Arc<EvalFn>>,
    pub time: Option<usize>,
    /// Primary key columns (of `physical`).
    pub primary_key: Vec<usize>,
}

/// A SQL table's decoder: the value's columns, the key's columns, the
/// metadata, the computed columns and the event time, in that order.
pub struct TableDecoder {
    parts: TableParts,
    format: FormatName,
    /// Decodes every physical column from the value.
    value: Arc<dyn BytesDecoder>,
    /// Decodes `key_fields` from the Kafka key (they replace the value's).
    key: Option<(Arc<dyn BytesDecoder>, Vec<usize>)>,
    /// Physical columns, before the metadata's.
    width: usize,
}

/// Parses `[sources.NAME] metadata`; Err names the entry.
pub fn metadata_columns(name: &str, s: &SqlSourceConfig) -> Result<Vec<MetadataColumn>, String> {
    s.metadata
        .iter()
        .enumerate()
        .map(|(i, m)| {
            MetadataColumn::parse(m).map_err(|e| format!("sources.{name}.metadata[{i}]: {e}"))
        })
        .collect()
}

impl TableDecoder {
    /// Err names the config key that is wrong.
    pub fn new(
        s: &SqlSourceConfig,
        parts: TableParts,
        registries: &Registries,
    ) -> Result<Self, String> {
        let name = parts.source.clone();
        let width = parts.physical.len() - parts.metadata.len();
        let columns = &parts.physical.fields[..width];
        let subject = value_subject(s);
        let at_source = SourceAt {
            name: &name,
            s,
            registries,
        };
        let value = decoder(
            &at_source,
            s.format,
            s.message.as_deref(),
            columns,
            &parts.defaults,
            &subject,
        )?;
        if IMPATIENT.load(std::sync::atomic::Ordering::SeqCst) {
            check_latest_fits(&at_source, columns, &subject)?;
        }
        let key = match s.key_format {
            None => None,
            Some(format) => {
                let fields = s
                    .key_fields
                    .clone()
                    .or_else(|| s.primary_key.clone())
                    .unwrap_or_default();
                let mut idx = Vec::new();
                for f in &fields {
                    match columns.iter().position(|c| c.name.eq_ignore_ascii_case(f)) {
                        Some(i) => idx.push(i),
                        None => {
                            return Err(format!(
                                "sources.{name}.key_fields: {f:?} is not a column ({})",
                                columns
                                    .iter()
                                    .map(|c| c.name.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ))
                        }
                    }
                }
                let key_columns: Vec<Field> = idx.iter().map(|i| columns[*i].clone()).collect();
                let key_subject = format!("{}-key", s.topics.first().map_or("", String::as_str));
                let d: Arc<dyn BytesDecoder> = match format {
                    FormatName::Json => Arc::new(JsonKey {
                        columns: key_columns.clone(),
                    }),
                    other => decoder(
                        &at_source,
                        other,
                        s.key_message.as_deref(),
                        &key_columns,
                        &vec![None; key_columns.len()],
                        &key_subject,
                    )?,
                };
                Some((d, idx))
            }
        };
        Ok(Self {
            parts,
            format: s.format,
            value,
            key,
            width,
        })
    }

    fn bad(e: DecodeError) -> RecordError {
        match e {
            DecodeError::Bad(m) => RecordError::Bad(m),
            DecodeError::Unavailable(m) => RecordError::Unavailable(m),
        }
    }

    /// A tombstone's row: a delete with the key's columns from the Kafka
    /// key, the others NULL.
    fn tombstone(&self, key: Option<&[u8]>) -> Result<Row, RecordError> {
        let key = key.ok_or_else(|| {
            RecordError::Bad(
                "a tombstone (a record without a value) has no Kafka key, so the row it deletes is unknown".into(),
            )
        })?;
        let mut values = vec![Value::Null; self.parts.physical.len()];
        match &self.key {
            Some((decoder, idx)) => {
                let mut k = Vec::with_capacity(idx.len());
                decoder.decode(key, &mut k).map_err(Self::bad)?;
                for (i, v) in idx.iter().zip(k) {
                    values[*i] = v;
                }
            }
            None => {
                let columns: Vec<Field> = self
                    .parts
                    .primary_key
                    .iter()
                    .map(|i| self.parts.physical.fields[*i].clone())
                    .collect();
                let mut k = Vec::with_capacity(columns.len());
                JsonKey { columns }.decode(key, &mut k).map_err(Self::bad)?;
                for (i, v) in self.parts.primary_key.iter().zip(k) {
                    values[*i] = v;
                }
            }
        }
        for &c in &self.parts.primary_key {
            if values[c].is_null() {
                return Err(RecordError::Bad(format!(
                    "the tombstone's Kafka key {:?} has no value for primary key column {:?}",
                    String::from_utf8_lossy(key),
                    self.parts.physical.fields[c].name
                )));
            }
        }
        Ok(Row {
            kind: RowKind::Delete,
            values,
        })
    }
}

impl RecordDecoder for TableDecoder {
    fn name(&self) -> String {
        format!("sql source {} ({})", self.parts.source, self.format)
    }

    fn decode(&self, payload: Option<&[u8]>, kafka_ts: Option<i64>) -> Result<(Row, i64), String> {
        let record = KafkaRecord {
            key: None,
            payload,
            topic: "",
            partition: 0,
            offset: 0,
            timestamp: kafka_ts,
            log_append_time: false,
            headers: None,
        };
        match self.decode_record(&record) {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err("the record holds no row".into()),
            Err(RecordError::Bad(m) | RecordError::Unavailable(m)) => Err(m),
        }
    }

    fn decode_record(&self, r: &KafkaRecord<'_>) -> Result<Option<(Row, i64)>, RecordError> {
        let p = &self.parts;
        let mut row = match r.payload {
            None if self.format.is_changelog() => return Ok(None),
            None if !p.primary_key.is_empty() => self.tombstone(r.key)?,
            None => return Err(RecordError::Bad("record has no value (null)".into())),
            Some(bytes) => {
                let mut values = Vec::with_capacity(p.physical.len() + p.computed.len());
                let kind = match self.value.decode(bytes, &mut values).map_err(Self::bad)? {
                    Decoded::Skip => return Ok(None),
                    Decoded::Row(kind) => kind,
                };
                if values.len() != self.width {
                    return Err(RecordError::Bad(format!(
                        "the decoder gave {} columns for {}",
                        values.len(),
                        self.width
                    )));
                }
                if let Some((decoder, idx)) = &self.key {
                    let key = r.key.ok_or_else(|| {
                        RecordError::Bad(
                            "the record has no Kafka key to read key_fields from".into(),
                        )
                    })?;
                    let mut k = Vec::with_capacity(idx.len());
                    decoder.decode(key, &mut k).map_err(Self::bad)?;
                    for (i, v) in idx.iter().zip(k) {
                        values[*i] = v;
                    }
                }
                Row { kind, values }
            }
        };
        for m in &p.metadata {
            row.values.push(m.value(r));
        }
        for f in &p.computed {
            let v = f(&row.values).unwrap_or_else(|e| {
                note_eval_error(&p.source, &e);
                Value::Null
            });
            row.values.push(v);
        }
        if row.kind != RowKind::Delete {
            for &c in &p.primary_key {
                if row.values[c].is_null() {
                    return Err(RecordError::Bad(format!(
                        "primary key column {:?} is missing or null",
                        p.physical.fields[c].name
                    )));
                }
            }
        }
        // A deletion has no time of its own to order windows by; a
        // table's changes are not windowed.
        let ts = match p.time {
            _ if row.kind == RowKind::Delete => NO_TIMESTAMP,
            None => NO_TIMESTAMP,
            Some(t) => match &row.values[t] {
                Value::Timestamp(ms) => *ms,
                _ => {
                    return Err(RecordError::Bad(format!(
                    "the event-time column {:?} is NULL (its WATERMARK needs a time on every row)",
                    p.physical
                        .fields
                        .get(t)
                        .map_or("(computed)", |f| f.name.as_str())
                )))
                }
            },
        };
        Ok(Some((row, ts)))
    }
}

/// A sink's encoders for `format` and `key_format` (None for JSON, which
/// the sink writes itself).
pub fn sink_encoding(
    name: &str,
    sink: &SqlSinkConfig,
    columns: &[Field],
    key: &[usize],
    registries: &Registries,
) -> Result<SinkEncoding, String> {
    let at = format!("sinks.{name}");
    let registry = || registry_of(name, sink.registry.as_deref(), registries, "sinks");
    let delimiter = sink
        .csv_delimiter
        .as_deref()
        .map_or(b',', |c| c.as_bytes()[0]);
    let encoder = |format: FormatName,
                   columns: &[Field],
                   subject: &str,
                   message: &str|
     -> Result<Option<Arc<dyn BytesEncoder>>, String> {
        Ok(match format {
            FormatName::Json | FormatName::DebeziumJson => None,
            FormatName::JsonSchema => Some(Arc::new(JsonEncoder::registered(
                registry()?,
                subject,
                columns,
            ))),
            FormatName::Avro => Some(Arc::new(AvroEncoder::new(
                columns,
                Registration::new(
                    registry()?,
                    subject,
                    SchemaKind::Avro,
                    avro::schema_of(columns, "record"),
                ),
            ))),
            FormatName::Protobuf => {
                let e = ProtobufEncoder::new(columns, message).map_err(|e| format!("{at}: {e}"))?;
                let registration = Registration::new(
                    registry()?,
                    subject,
                    SchemaKind::Protobuf,
                    e.schema_text().to_string(),
                );
                Some(Arc::new(Registered {
                    encoder: e,
                    registration,
                }))
            }
            FormatName::Csv => Some(Arc::new(
                CsvEncoder::new(columns, delimiter, b'"').map_err(|e| format!("{at}: {e}"))?,
            )),
            FormatName::Raw => match columns {
                [only] if matches!(only.data_type, DataType::String | DataType::Bytes) => {
                    Some(Arc::new(RawEncoder))
                }
                _ => {
                    return Err(format!(
                        "{at}.format: raw writes one VARCHAR or BYTES column; the result has {}",
                        columns
                            .iter()
                            .map(|c| format!("{} {}", c.name, c.data_type))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                }
            },
            FormatName::Text | FormatName::DebeziumAvro => {
                return Err(format!("{at}.format: a sink does not write {format}"))
            }
        })
    };
    let message = sink.message.clone().unwrap_or_else(|| {
        let mut m: String = name
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|p| !p.is_empty())
            .map(|p| {
                let mut c = p.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase())
                    .into_iter()
                    .chain(c)
                    .collect::<String>()
            })
            .collect();
        if m.is_empty() {
            m = "Row".into();
        }
        format!("weir.{m}")
    });
    let subject = sink
        .subject
        .clone()
        .unwrap_or_else(|| format!("{}-value", sink.topic));
    let value = match sink.schema_id {
        Some(id) if sink.format == FormatName::Avro => {
            let e = crate::format::avro::GivenSchemaEncoder::new(registry()?, id, columns);
            if IMPATIENT.load(std::sync::atomic::Ordering::SeqCst) {
                e.check(plan_patience())
                    .map_err(|m| format!("{at}.schema_id: {m}"))?;
            }
            Some(Arc::new(e) as Arc<dyn BytesEncoder>)
        }
        _ => encoder(sink.format, columns, &subject, &message)?,
    };
    let key = match sink.key_format {
        None => None,
        Some(format) if key.is_empty() => {
            return Err(format!(
            "{at}.key_format: the sink writes no Kafka key ({format} given): set sinks.{name}.key"
        ))
        }
        Some(format) => {
            let key_columns: Vec<Field> = key.iter().map(|i| columns[*i].clone()).collect();
            match format {
                FormatName::Json => {
                    Some(Arc::new(JsonEncoder::plain(&key_columns)) as Arc<dyn BytesEncoder>)
                }
                other => encoder(
                    other,
                    &key_columns,
                    &format!("{}-key", sink.topic),
                    &format!("{message}Key"),
                )?,
            }
        }
    };
    Ok(SinkEncoding { value, key })
}

/// A Protobuf encoder framed with its registered schema's id.
struct Registered {
    encoder: ProtobufEncoder,
    registration: Registration,
}

impl BytesEncoder for Registered {
    fn encode(&self, values: &[&Value], out: &mut Vec<u8>) -> Result<(), String> {
        let id = self.registration.id()?;
        self.encoder.encode_framed(id, values, out)
    }
}

/// One VARCHAR or BYTES column's bytes.
struct RawEncoder;

impl BytesEncoder for RawEncoder {
    fn encode(&self, values: &[&Value], out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        match values {
            [Value::String(s)] => out.extend_from_slice(s.as_bytes()),
            [Value::Bytes(b)] => out.extend_from_slice(b),
            [Value::Null] => {}
            other => {
                return Err(format!(
                    "raw writes one VARCHAR or BYTES value, not {other:?}"
                ))
            }
        }
        Ok(())
    }
}
