use super::*;

impl Binder<'_> {
    /// `CROSS JOIN UNNEST(array)`: a row per item, with the columns of
    /// `rel` that the SELECT mentions (`mentioned`; all of them when None)
    /// and then the item. A column no later clause can read is not copied
    /// into every item's row: word count's line is not.
    pub(super) fn unnest(
        &mut self,
        rel: Rel,
        alias: Option<&ast::TableAlias>,
        arrays: &[E],
        span: sqlparser::tokenizer::Span,
        name: &str,
        mentioned: Option<&std::collections::BTreeSet<String>>,
    ) -> Result<Rel, SqlError> {
        if rel.updating.is_some() {
            return Err(SqlError::at(
                span,
                "UNNEST of an updating result is not supported yet",
            ));
        }
        let [array] = arrays else {
            return Err(SqlError::at(span, "UNNEST takes one array"));
        };
        let c = compile(array, &mut Scope::plain(&rel.columns, &self.session))?;
        let item = match c.data_type() {
            Some(DataType::List(t)) => (**t).clone(),
            _ => return Err(err(array, format!("UNNEST takes an ARRAY, not {}", c.ty))),
        };
        let alias_name = alias.map(|a| a.name.value.clone());
        let column = alias
            .and_then(|a| a.columns.first())
            .map(|c| c.name.value.clone())
            .unwrap_or_else(|| "EXPR$0".into());
        let kept = Kept::of(&rel, mentioned);
        let out = kept.rel(
            &rel,
            vec![ScopeColumn {
                name: column,
                qualifier: alias_name,
                ty: item,
            }],
        );
        let uid = self.uid(&format!("{name}.unnest"));
        // Each item of a row's array, handed to `each`. UNNEST(WORDS(s))
        // splits s as it goes, without an array between.
        use lp::unnest::Items;
        let words_of = match array {
            E::Function(w) if function_name(w).eq_ignore_ascii_case("WORDS") => {
                match call_args(w, array)?.as_slice() {
                    [text] => {
                        Some(compile(text, &mut Scope::plain(&rel.columns, &self.session))?.eval)
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        let items: Arc<Items> = match words_of {
            Some(text) => Arc::new(move |v, each| {
                if let Value::String(s) = text(v)? {
                    s.split_whitespace()
                        .for_each(|w| each(Value::String(w.to_string())));
                }
                Ok(())
            }),
            None => {
                let f = c.eval;
                Arc::new(move |v, each| {
                    if let Value::List(list) = f(v)? {
                        list.into_iter().for_each(each);
                    }
                    Ok(())
                })
            }
        };
        let unnest = lp::unnest::Unnest {
            schema: schema_of(&out.columns),
            keep: kept.keep,
            items,
            text: array.to_string(),
        };
        Ok(self.plan.add(&uid, Op::Unnest(unnest), &[&rel], out))
    }
}
