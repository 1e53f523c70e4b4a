//! The built-in aggregate functions by name: what the binder recognizes
//! as an aggregate call, and the reference in docs/sql.md (generated from
//! this table; `tests/functions.rs` fails when the two differ). The
//! accumulators themselves are `dataflow::ops::aggregate`'s.

/// One aggregate function as a user writes it.
pub struct Aggregate {
    /// Its names: the first is the one the reference lists, the others
    /// are synonyms.
    pub names: &'static [&'static str],
    /// How it is called.
    pub written: &'static str,
    /// Its result's type and what it is.
    pub result: &'static str,
}

const fn agg(
    names: &'static [&'static str],
    written: &'static str,
    result: &'static str,
) -> Aggregate {
    Aggregate {
        names,
        written,
        result,
    }
}

/// Every built-in aggregate, in the reference's order.
pub const AGGREGATES: &[Aggregate] = &[
    agg(
        &["COUNT"],
        "COUNT(*), COUNT(x), COUNT(DISTINCT x)",
        "`BIGINT`: the rows; the rows where `x` is not NULL; the distinct non-NULL values",
    ),
    agg(
        &["SUM"],
        "SUM([DISTINCT] x)",
        "of numbers: `BIGINT` for integers, the argument's type otherwise; an overflow \
         stops the job",
    ),
    agg(
        &["MIN"],
        "MIN([DISTINCT] x)",
        "of any type but ROW, ARRAY and MAP; `BIGINT` for integers",
    ),
    agg(
        &["MAX"],
        "MAX([DISTINCT] x)",
        "of any type but ROW, ARRAY and MAP; `BIGINT` for integers",
    ),
    agg(&["AVG"], "AVG([DISTINCT] x)", "of numbers: always `DOUBLE`"),
    agg(
        &["VAR_POP"],
        "VAR_POP([DISTINCT] x)",
        "of numbers: `DOUBLE`, the population variance",
    ),
    agg(
        &["VAR_SAMP", "VARIANCE"],
        "VAR_SAMP([DISTINCT] x)",
        "of numbers: `DOUBLE`, the sample variance; NULL for fewer than two values",
    ),
    agg(
        &["STDDEV_POP"],
        "STDDEV_POP([DISTINCT] x)",
        "of numbers: `DOUBLE`, the population standard deviation",
    ),
    agg(
        &["STDDEV_SAMP", "STDDEV"],
        "STDDEV_SAMP([DISTINCT] x)",
        "of numbers: `DOUBLE`, the sample standard deviation; NULL for fewer than two values",
    ),
    agg(
        &["BOOL_AND", "EVERY"],
        "BOOL_AND([DISTINCT] b)",
        "`BOOLEAN`: whether every non-NULL `b` is TRUE",
    ),
    agg(
        &["BOOL_OR"],
        "BOOL_OR([DISTINCT] b)",
        "`BOOLEAN`: whether some `b` is TRUE",
    ),
    agg(
        &["FIRST_VALUE"],
        "FIRST_VALUE(x)",
        "the first non-NULL value in arrival order; not over an updating result",
    ),
    agg(
        &["LAST_VALUE"],
        "LAST_VALUE(x)",
        "the last non-NULL value in arrival order; not over an updating result",
    ),
    agg(
        &["ARRAY_AGG"],
        "ARRAY_AGG([DISTINCT] x)",
        "`ARRAY` of the values in arrival order, NULLs included; a retraction takes out the \
         first equal value. With DISTINCT, the distinct values in value order",
    ),
    agg(
        &["LISTAGG"],
        "LISTAGG([DISTINCT] s [, sep])",
        "`VARCHAR`: the values joined by `sep` (`,` by default), NULLs left out",
    ),
    agg(
        &["JSON_ARRAYAGG"],
        "JSON_ARRAYAGG(x [NULL | ABSENT ON NULL])",
        "`VARCHAR`: a JSON array of the values in arrival order (ABSENT ON NULL by default); \
         takes retractions back",
    ),
    agg(
        &["JSON_OBJECTAGG"],
        "JSON_OBJECTAGG([KEY] k VALUE v [NULL | ABSENT ON NULL])",
        "`VARCHAR`: a JSON object of the pairs in arrival order (NULL ON NULL by default); a \
         NULL or repeated key is an error",
    ),
];

/// Whether `name` (any case) is a built-in aggregate's.
pub fn is_builtin(name: &str) -> bool {
    AGGREGATES
        .iter()
        .any(|a| a.names.iter().any(|n| n.eq_ignore_ascii_case(name)))
}

/// The aggregate reference of docs/sql.md, as markdown.
pub fn reference_markdown() -> String {
    let mut out = String::from("| aggregate | result |\n|---|---|\n");
    for a in AGGREGATES {
        let synonyms = match a.names {
            [_, rest @ ..] if !rest.is_empty() => format!(" (also `{}`)", rest.join("`, `")),
            _ => String::new(),
        };
        out.push_str(&format!(
            "| `{}`{synonyms} | {} |\n",
            a.written.replace('|', "\\|"),
            a.result.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::ops::aggregate::AggFunction;

    /// Every name the reference lists is one the planner builds: an
    /// accumulator of its own, or (LISTAGG and the JSON aggregates)
    /// ARRAY_AGG written otherwise.
    #[test]
    fn every_listed_aggregate_has_an_accumulator() {
        for a in AGGREGATES {
            for n in a.names {
                let rewritten = ["LISTAGG", "JSON_ARRAYAGG", "JSON_OBJECTAGG"].contains(n);
                assert!(
                    rewritten || AggFunction::from_sql_name(n).is_some(),
                    "{n} is listed but has no accumulator"
                );
            }
        }
        assert!(is_builtin("every") && is_builtin("Listagg") && !is_builtin("MEDIAN"));
    }
}
