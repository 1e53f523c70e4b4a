use super::*;

impl Binder<'_> {
    /// A source's relation, planned on first use.
    pub(super) fn source(
        &mut self,
        name: &str,
        at: &ast::ObjectName,
    ) -> Result<Option<Rel>, SqlError> {
        let key = name.to_ascii_lowercase();
        if let Some(r) = self.views.get(&key).or_else(|| self.sources.get(&key)) {
            return Ok(Some(r.clone()));
        }
        let Some((source_name, s)) = self
            .sql
            .sources
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
        else {
            return Ok(self.catalog_source(name));
        };
        let source_name = source_name.clone();
        let fail =
            |m: String| SqlError::at(at.span(), format!("sources.{source_name}.schema: {m}"));
        let (mut physical, computed, watermark) = match s.format {
            FormatName::Text => {
                if s.schema.is_some() {
                    return Err(fail(
                        "a text source has one column, `line`: remove schema".into(),
                    ));
                }
                (Schema::of(&[("line", DataType::String)]), Vec::new(), None)
            }
            _ => {
                let t = parse_schema(s.schema.as_deref().unwrap_or("")).map_err(fail)?;
                (t.physical, t.computed, t.watermark)
            }
        };
        let mut defaults = vec![None; physical.len()];
        if physical.is_empty() {
            // The columns are the registry's (or the .proto file's).
            let (columns, d) =
                crate::sql::formats::registry_columns(&source_name, s, &self.registries)
                    .map_err(|m| SqlError::at(at.span(), m))?;
            physical = Schema::new(columns);
            defaults = d;
        }
        let metadata = crate::sql::formats::metadata_columns(&source_name, s)
            .map_err(|m| SqlError::at(at.span(), m))?;
        for m in &metadata {
            if physical
                .fields
                .iter()
                .any(|f| f.name.eq_ignore_ascii_case(&m.name))
            {
                return Err(SqlError::at(
                    at.span(),
                    format!(
                        "sources.{source_name}.metadata: column {:?} is already a physical column; name it with `KEY AS other_name`",
                        m.name
                    ),
                ));
            }
            physical.fields.push(m.field());
        }
        let mut columns = scope_columns(&physical, &source_name);
        let mut computed_fns: Vec<Arc<EvalFn>> = Vec::new();
        for (n, e) in &computed {
            let c = compile(e, &mut Scope::plain(&columns, &self.session))
                .map_err(|m| fail(format!("computed column {n}: {}", m.message)))?;
            columns.push(ScopeColumn {
                name: n.clone(),
                qualifier: Some(source_name.clone()),
                ty: c.ty.column_type(),
            });
            computed_fns.push(c.eval);
        }
        let time = watermark
            .as_ref()
            .and_then(|(c, _)| columns.iter().position(|x| x.name.eq_ignore_ascii_case(c)));
        if let (Some((c, _)), None) = (&watermark, time) {
            let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
            return Err(fail(format!(
                "WATERMARK FOR {c}: no such column ({})",
                names.join(", ")
            )));
        }
        if let Some(t) = time {
            if !columns[t].ty.is_timestamp() {
                return Err(fail(format!(
                    "WATERMARK FOR {}: the column is {}, not TIMESTAMP(3)",
                    columns[t].name, columns[t].ty
                )));
            }
        }
        let schema = Schema::new(
            columns
                .iter()
                .map(|c| crate::dataflow::row::Field::new(c.name.clone(), c.ty.clone()))
                .collect(),
        );
        let primary_key = match &s.primary_key {
            None => Vec::new(),
            Some(_) if s.format == FormatName::Text => {
                return Err(SqlError::at(
                    at.span(),
                    format!("sources.{source_name}.primary_key: a text source has no columns to key by; use format = \"json\""),
                ))
            }
            Some(k) if k.is_empty() => {
                return Err(SqlError::at(
                    at.span(),
                    format!("sources.{source_name}.primary_key: name at least one column"),
                ))
            }
            Some(k) => {
                let mut idx = Vec::new();
                for c in k {
                    match physical.fields.iter().position(|f| f.name.eq_ignore_ascii_case(c)) {
                        Some(i) if !idx.contains(&i) => idx.push(i),
                        Some(_) => {
                            return Err(SqlError::at(
                                at.span(),
                                format!("sources.{source_name}.primary_key: column {c:?} is named twice"),
                            ))
                        }
                        None => {
                            let names: Vec<&str> =
                                physical.fields.iter().map(|f| f.name.as_str()).collect();
                            return Err(SqlError::at(
                                at.span(),
                                format!(
                                    "sources.{source_name}.primary_key: column {c:?} is not a column of the schema ({})",
                                    names.join(", ")
                                ),
                            ));
                        }
                    }
                }
                idx
            }
        };
        let decoder = crate::sql::formats::TableDecoder::new(
            s,
            crate::sql::formats::TableParts {
                source: source_name.clone(),
                physical,
                defaults,
                metadata,
                computed: computed_fns,
                time,
                primary_key: primary_key.clone(),
            },
            &self.registries,
        )
        .map_err(|m| SqlError::at(at.span(), m))?;
        let topics: Vec<&str> = s.topics.iter().map(String::as_str).collect();
        let mut k = KafkaSource::custom(&topics, schema, Arc::new(decoder)).start(s.start);
        k = match (s.on_bad_record, &s.dead_letter_topic) {
            (BadRecordPolicy::Skip, _) => k.skip_bad_records(),
            (BadRecordPolicy::DeadLetter, Some(t)) => k.dead_letter(t),
            _ => k,
        };
        if let (Some(t), Some((_, delay))) = (time, &watermark) {
            k = k.event_time(&columns[t].name, Duration::from_millis(*delay as u64));
            if let Some(idle) = s.idle_timeout {
                k = k.idle_timeout(idle);
            }
        }
        let uid = self.uid(&format!("source.{source_name}"));
        let scan = Rel {
            node: 0,
            columns,
            updating: None,
            updated_by: None,
            time,
            source: Some(source_name.clone()),
            window: None,
            window_end: None,
            timed: time.is_some(),
        };
        let scan_op = lp::scan::Scan {
            table: source_name.clone(),
            source: k,
        };
        let mut rel = self.plan.add(&uid, Op::Scan(scan_op), &[], scan);
        if !primary_key.is_empty() {
            // An upsert topic: the rows it replaces are in the table's state.
            let key = primary_key
                .iter()
                .map(|i| rel.columns[*i].name.clone())
                .collect();
            let uid = self.uid(&format!("source.{source_name}.normalize"));
            let normalized = Rel {
                updating: Some(primary_key),
                updated_by: Some(uid.clone()),
                ..rel.clone()
            };
            let ttl = self.state_ttl(
                &rel,
                &format!("the table {source_name:?} (its primary key's normalize)"),
                at.span(),
            )?;
            let op = Op::Normalize(lp::scan::Normalize { key, ttl });
            rel = self.plan.add(&uid, op, &[&rel], normalized);
        }
        self.sources.insert(key, rel.clone());
        Ok(Some(rel))
    }

    /// A table of the catalog, planned on first use.
    pub(super) fn catalog_source(&mut self, name: &str) -> Option<Rel> {
        let (n, c) = self
            .catalog
            .sources
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))?;
        let (n, source, uid) = (n.clone(), c.source.clone(), c.uid.clone());
        let columns = scope_columns(&source.columns(), &n);
        let time = c
            .time
            .as_ref()
            .and_then(|t| columns.iter().position(|x| x.name.eq_ignore_ascii_case(t)));
        let uid = self.uid(&uid);
        let scan = Rel {
            node: 0,
            columns,
            updating: None,
            updated_by: None,
            time,
            source: Some(n.clone()),
            window: None,
            window_end: None,
            timed: time.is_some(),
        };
        let op = Op::Scan(lp::scan::Scan { table: n, source });
        let rel = self.plan.add(&uid, op, &[], scan);
        self.sources.insert(name.to_ascii_lowercase(), rel.clone());
        Some(rel)
    }

    /// The dead-letter topic of the source `name`, if it has one.
    /// What a row of `rel` a user-defined function fails on becomes: its
    /// one source's `on_bad_record` (`sql::plan::on_failure`). A relation
    /// of several sources, or of a table built in Rust, keeps the NULL, and
    /// so does an updating one (a retraction must meet the row it takes
    /// back). A job without user-defined functions keeps the plain map (no
    /// failure of one to route).
    pub(super) fn on_function_failure(&self, rel: &Rel) -> lp::on_failure::OnFunctionFailure {
        if self.session.functions.is_empty() || rel.updating.is_some() {
            return lp::on_failure::OnFunctionFailure::Null;
        }
        match rel.source.as_deref().and_then(|n| self.sql.sources.get(n)) {
            Some(s) => lp::on_failure::OnFunctionFailure::of_source(
                s.on_bad_record,
                s.dead_letter_topic.as_deref(),
            ),
            None => lp::on_failure::OnFunctionFailure::Null,
        }
    }

    pub(super) fn dead_letter_topic(&self, name: &str) -> Option<String> {
        match self.sql.sources.get(name) {
            Some(s) => s.dead_letter_topic.clone(),
            None => self.catalog.sources.get(name)?.dead_letter_topic.clone(),
        }
    }

    /// A source or view by name, qualified by its alias (or its name).
    pub(super) fn named_table(
        &mut self,
        table: &ast::ObjectName,
        alias: Option<&ast::TableAlias>,
    ) -> Result<Rel, SqlError> {
        let n = name_of(table);
        let Some(rel) = self.source(&n, table)? else {
            let known: Vec<String> = self
                .sql
                .sources
                .keys()
                .chain(self.catalog.sources.keys())
                .chain(self.views.keys())
                .cloned()
                .collect();
            let hint = crate::sql::names::nearest(&n, known.iter().map(String::as_str))
                .map_or(String::new(), |x| format!("; did you mean {x:?}?"));
            return Err(SqlError::at(
                table.span(),
                format!(
                    "unknown table {n:?}: FROM reads a [sources.NAME] or a view ({}){hint}",
                    known.join(", ")
                ),
            ));
        };
        let q = alias.map_or(n, |a| a.name.value.clone());
        Ok(rel.with_qualifier(&q))
    }
}
