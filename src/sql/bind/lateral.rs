use super::*;

impl Binder<'_> {
    /// `LATERAL TABLE(f(args))` beside `rel` (`FROM t, LATERAL TABLE(...)`,
    /// `CROSS JOIN LATERAL TABLE(...)`, or `LEFT JOIN LATERAL TABLE(...)
    /// ON TRUE` with `left_outer`): a row per row of the user-defined
    /// table function `f`, with the columns of `rel` the SELECT mentions
    /// (`mentioned`; all when None), then the function's columns, named by
    /// the alias's column list (`AS T(a, b)`) or as the function declares.
    pub(super) fn lateral_table(
        &mut self,
        rel: Rel,
        factor: &TableFactor,
        left_outer: bool,
        name: &str,
        mentioned: Option<&std::collections::BTreeSet<String>>,
    ) -> Result<Rel, SqlError> {
        let span = factor.span();
        let TableFactor::Function {
            lateral: true,
            name: table,
            args,
            alias,
            ..
        } = factor
        else {
            return Err(SqlError::at(span, "expected LATERAL TABLE(f(...))"));
        };
        if !table.to_string().eq_ignore_ascii_case("TABLE") {
            return Err(SqlError::at(span, "write LATERAL TABLE(f(...))"));
        }
        if rel.updating.is_some() {
            return Err(SqlError::at(
                span,
                "LATERAL TABLE over an updating result is not supported yet",
            ));
        }
        let call = match args.as_slice() {
            [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(c @ E::Function(_)))] => c,
            _ => {
                return Err(SqlError::at(
                    span,
                    "LATERAL TABLE takes one call of a table function: LATERAL TABLE(f(x))",
                ))
            }
        };
        let E::Function(f) = call else {
            unreachable!("matched a function call")
        };
        let fname = function_name(f);
        let Some(function) = self.session.functions.get_table(&fname).cloned() else {
            let hint = crate::sql::names::nearest(&fname, self.session.functions.names())
                .map_or(String::new(), |n| format!("; did you mean {n}?"));
            return Err(err(
                call,
                format!(
                    "unknown table function {}{hint} (a table function is user-defined: \
                     [functions.NAME] with columns, or registered in Rust)",
                    fname.to_uppercase()
                ),
            ));
        };
        let session = self.session.clone();
        let compiled = call_args(f, call)?
            .into_iter()
            .map(|a| compile(a, &mut Scope::plain(&rel.columns, &session)))
            .collect::<Result<Vec<_>, _>>()?;
        let fitted = crate::sql::functions::user::fit(&function.name, &function.params, compiled)
            .map_err(|m| err(call, m))?;
        let names: Vec<String> = match alias.as_ref().map(|a| &a.columns) {
            Some(cols) if !cols.is_empty() => {
                if cols.len() != function.columns.len() {
                    return Err(SqlError::at(
                        span,
                        format!(
                            "{} has {} columns; the alias names {}",
                            function.name,
                            function.columns.len(),
                            cols.len()
                        ),
                    ));
                }
                cols.iter().map(|c| c.name.value.clone()).collect()
            }
            _ => function.columns.iter().map(|(n, _)| n.clone()).collect(),
        };
        let qualifier = alias.as_ref().map(|a| a.name.value.clone());
        let added = names
            .into_iter()
            .zip(&function.columns)
            .map(|(n, (_, t))| ScopeColumn {
                name: n,
                qualifier: qualifier.clone(),
                ty: t.clone(),
            })
            .collect();
        let kept = Kept::of(&rel, mentioned);
        let out = kept.rel(&rel, added);
        let lateral = lp::lateral::LateralTable {
            schema: schema_of(&out.columns),
            keep: kept.keep,
            args: fitted.into_iter().map(|c| c.eval).collect(),
            function,
            left_outer,
            text: call.to_string(),
            on_failure: self.on_function_failure(&rel),
        };
        let uid = self.uid(&format!("{name}.lateral"));
        Ok(self.plan.add(&uid, Op::LateralTable(lateral), &[&rel], out))
    }
}
