use super::*;

impl Binder<'_> {
    pub(super) fn sink(
        &mut self,
        name: &str,
        sink: &crate::config::SqlSinkConfig,
        rel: Rel,
        query: &ast::Query,
    ) -> Result<(), SqlError> {
        let names: Vec<&str> = rel.columns.iter().map(|c| c.name.as_str()).collect();
        let key: Vec<String> = match (&sink.key, &rel.updating) {
            (Some(k), _) => {
                // Names match as SQL's do, without regard to case; the key
                // takes the result's spelling.
                let mut resolved = Vec::new();
                for c in k {
                    match names.iter().find(|n| n.eq_ignore_ascii_case(c)) {
                        Some(n) => resolved.push(n.to_string()),
                        None => {
                            return Err(SqlError::at(
                                query.span(),
                                format!(
                                    "sinks.{name}.key: column {c:?} is not in the result ({})",
                                    names.join(", ")
                                ),
                            ))
                        }
                    }
                }
                resolved
            }
            // A Debezium sink of rows no key names (a union or a join of
            // updating inputs): keyed by every column, so that a row's
            // insert and its deletion share a partition, in order.
            (None, Some(unique)) if unique.is_empty() && writes_debezium(sink) => names
                .iter()
                .filter(|n| !n.starts_with('$'))
                .map(|n| n.to_string())
                .collect(),
            (None, Some(unique)) => unique.iter().map(|i| names[*i].to_string()).collect(),
            (None, None) => Vec::new(),
        };
        let key_refs: Vec<&str> = key.iter().map(String::as_str).collect();
        let keyed = |what: &str| {
            if key.is_empty() {
                what.to_string()
            } else {
                format!("{what}, Kafka key ({})", key.join(", "))
            }
        };
        use crate::config::SinkChangelog;
        let changelog = sink.changelog.unwrap_or(match rel.updating {
            _ if sink.format == crate::config::FormatName::DebeziumJson => SinkChangelog::Debezium,
            Some(_) => SinkChangelog::Upsert,
            None => SinkChangelog::Append,
        });
        let (kafka_sink, mode) = match (changelog, &rel.updating) {
            (SinkChangelog::Append, None) => (
                KafkaSink::append(&sink.topic, &key_refs),
                keyed("append-only"),
            ),
            (SinkChangelog::Append, Some(_)) => {
                let by = rel.updated_by.as_deref().unwrap_or("an aggregate");
                return Err(SqlError::at(
                    query.span(),
                    format!(
                        "sink {name:?} is append-only (sinks.{name}.changelog = \"append\"), but \
                         operator {by:?} produces updates (it changes rows it wrote before: a \
                         GROUP BY without a window, an outer join, a join of a table, a top-N): \
                         set sinks.{name}.changelog = \"upsert\" or \"debezium\", or aggregate \
                         per window"
                    ),
                ));
            }
            (SinkChangelog::Debezium, _) => (
                KafkaSink::debezium(&sink.topic, &key_refs),
                keyed("debezium: every change as {\"before\", \"after\", \"op\"}"),
            ),
            (SinkChangelog::Upsert, None) => {
                if key.is_empty() {
                    return Err(SqlError::at(
                        query.span(),
                        format!(
                            "sink {name:?} upserts (sinks.{name}.changelog = \"upsert\") an \
                             append-only result with no key: set sinks.{name}.key to the columns \
                             whose latest row it keeps"
                        ),
                    ));
                }
                (
                    KafkaSink::upsert(&sink.topic, &key_refs),
                    format!(
                        "upsert by ({}): a row replaces its key's row",
                        key.join(", ")
                    ),
                )
            }
            (SinkChangelog::Upsert, Some(unique)) => {
                if unique.is_empty() {
                    return Err(SqlError::at(
                        query.span(),
                        format!(
                            "sink {name:?} receives an updating result (from operator {:?}) with \
                             no key that names its rows: a GROUP BY whose columns are not all \
                             selected (select them), or a join or top-N whose inputs' keys are not \
                             (a join of inputs without primary keys has none): each change must \
                             replace its key's row, or set sinks.{name}.changelog = \"debezium\" \
                             to write every change",
                            rel.updated_by.as_deref().unwrap_or("?")
                        ),
                    ));
                }
                let want: Vec<&str> = unique.iter().map(|i| names[*i]).collect();
                if sink.key.is_some() && key_refs != want {
                    return Err(SqlError::at(
                        query.span(),
                        format!(
                            "sinks.{name}.key: an updating result is keyed by its GROUP BY columns ({}), not ({})",
                            want.join(", "),
                            key.join(", ")
                        ),
                    ));
                }
                (
                    KafkaSink::upsert(&sink.topic, &key_refs),
                    format!("upsert by ({}): a change replaces its key's row; a deletion is a tombstone", key.join(", ")),
                )
            }
        };
        // Records are stamped by the producer, not with their event time:
        // a broker refuses a timestamp more than
        // `log.message.timestamp.after.max.ms` (an hour) ahead of its
        // clock, and one row with a future event time would fail every
        // retry of its epoch.
        let kafka_sink = kafka_sink.without_timestamps();
        let key_idx: Vec<usize> = key
            .iter()
            .filter_map(|k| names.iter().position(|n| n == k))
            .collect();
        let columns: Vec<crate::dataflow::row::Field> = rel
            .columns
            .iter()
            .map(|c| crate::dataflow::row::Field::new(c.name.clone(), c.ty.clone()))
            .collect();
        let encoding =
            crate::sql::formats::sink_encoding(name, sink, &columns, &key_idx, &self.registries)
                .map_err(|m| SqlError::at(query.span(), m))?;
        let kafka_sink = kafka_sink.encoded(encoding);
        let uid = self.uid(&format!("{name}.sink"));
        let node = lp::sink::Sink {
            name: name.to_string(),
            topic: sink.topic.clone(),
            mode: mode.clone(),
            sink: kafka_sink,
        };
        self.plan.add(&uid, Op::Sink(node), &[&rel], rel.clone());
        self.sinks
            .push((name.to_string(), sink.topic.clone(), mode));
        Ok(())
    }
}

/// Whether `sink` writes Debezium changes (set so, or by its format).
fn writes_debezium(sink: &crate::config::SqlSinkConfig) -> bool {
    match sink.changelog {
        Some(c) => c == crate::config::SinkChangelog::Debezium,
        None => sink.format == crate::config::FormatName::DebeziumJson,
    }
}
