//! Calls that weir's dialect makes up for syntax that is not a plain
//! function call (`TABLE t PARTITION BY ...`, SQL/JSON's clauses, `MAP[...]`):
//! an `Expr::Function` of a name and arguments, spanning the keyword so
//! that an error points at it.

use sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments, Ident,
    ObjectName,
};

pub(super) fn call(name: &str, span: sqlparser::tokenizer::Span, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::with_span(span, name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    })
}
