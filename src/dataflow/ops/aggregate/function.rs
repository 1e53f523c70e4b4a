//! The aggregate functions a job asks for: each an [`AggFunction`] over an
//! input column, named, with DISTINCT or a FILTER, as an [`Agg`].

use crate::dataflow::row::{DataType, Field, Schema};

/// One aggregate function and its input column (none: `COUNT(*)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFunction {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    /// The variance and standard deviation of the values, as DOUBLE: the
    /// part keeps their sum and sum of squares, so a retraction subtracts.
    VarPop,
    VarSamp,
    StddevPop,
    StddevSamp,
    /// Over BOOLEAN values: the part keeps how many are TRUE.
    BoolAnd,
    BoolOr,
    /// The first or last value in arrival order (not over retractions).
    FirstValue,
    LastValue,
    /// The values in arrival order, NULLs included; a retraction takes
    /// out the first equal value (Flink's `ArrayAggFunction`). LISTAGG is
    /// ARRAY_AGG joined by its separator.
    ArrayAgg,
    /// A user-defined aggregate function ([`Agg::user`]): the part keeps
    /// its accumulator.
    User,
}

impl AggFunction {
    /// COUNT, SUM, MIN, MAX or AVG by its SQL name (any case).
    pub fn from_sql_name(name: &str) -> Option<Self> {
        Some(match name.to_ascii_uppercase().as_str() {
            "COUNT" => AggFunction::Count,
            "SUM" => AggFunction::Sum,
            "MIN" => AggFunction::Min,
            "MAX" => AggFunction::Max,
            "AVG" => AggFunction::Avg,
            "VAR_POP" => AggFunction::VarPop,
            "VAR_SAMP" | "VARIANCE" => AggFunction::VarSamp,
            "STDDEV_POP" => AggFunction::StddevPop,
            "STDDEV_SAMP" | "STDDEV" => AggFunction::StddevSamp,
            "BOOL_AND" | "EVERY" => AggFunction::BoolAnd,
            "BOOL_OR" => AggFunction::BoolOr,
            "FIRST_VALUE" => AggFunction::FirstValue,
            "LAST_VALUE" => AggFunction::LastValue,
            "ARRAY_AGG" => AggFunction::ArrayAgg,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            AggFunction::Count => "count",
            AggFunction::Sum => "sum",
            AggFunction::Min => "min",
            AggFunction::Max => "max",
            AggFunction::Avg => "avg",
            AggFunction::VarPop => "var_pop",
            AggFunction::VarSamp => "var_samp",
            AggFunction::StddevPop => "stddev_pop",
            AggFunction::StddevSamp => "stddev_samp",
            AggFunction::BoolAnd => "bool_and",
            AggFunction::BoolOr => "bool_or",
            AggFunction::FirstValue => "first_value",
            AggFunction::LastValue => "last_value",
            AggFunction::ArrayAgg => "array_agg",
            AggFunction::User => "user-defined",
        }
    }

    /// A variance or a standard deviation.
    pub(super) fn spread(self) -> bool {
        matches!(
            self,
            AggFunction::VarPop
                | AggFunction::VarSamp
                | AggFunction::StddevPop
                | AggFunction::StddevSamp
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agg {
    pub function: AggFunction,
    pub column: Option<usize>,
    /// The output column's name.
    pub name: String,
    /// Over distinct values only (`COUNT(DISTINCT x)`, `SUM(DISTINCT x)`,
    /// ...); each value's multiplicity is kept so that a retraction takes
    /// it away exactly. MIN and MAX over an input that takes rows back
    /// are planned so (Flink's `MinWithRetract`): MIN(DISTINCT x) is
    /// MIN(x), and a retracted minimum leaves the next one in the set.
    pub distinct: bool,
    /// The function of [`AggFunction::User`].
    pub user: Option<UserAggregate>,
}

/// A user-defined aggregate function in an [`Agg`], the same as another
/// of the same name.
#[derive(Clone)]
pub struct UserAggregate(pub std::sync::Arc<crate::udf::AggregateFunction>);

impl std::fmt::Debug for UserAggregate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UserAggregate({})", self.0.name)
    }
}

impl PartialEq for UserAggregate {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for UserAggregate {}

impl Agg {
    /// `COUNT(*)` named `name`.
    pub fn count(name: &str) -> Self {
        Self {
            function: AggFunction::Count,
            column: None,
            name: name.into(),
            distinct: false,
            user: None,
        }
    }

    /// `function(column)` named `name` (`column` None: `COUNT(*)`).
    pub fn of(function: AggFunction, column: Option<usize>, name: &str) -> Self {
        Self {
            function,
            column,
            name: name.into(),
            distinct: false,
            user: None,
        }
    }

    /// The user-defined aggregate `f` of `column`, named `name`.
    pub fn user_defined(
        f: crate::udf::AggregateFunction,
        column: Option<usize>,
        name: &str,
    ) -> Self {
        Self {
            user: Some(UserAggregate(std::sync::Arc::new(f))),
            ..Self::of(AggFunction::User, column, name)
        }
    }

    /// The function of a user-defined aggregate ([`AggFunction::User`]).
    pub(super) fn user_function(
        &self,
    ) -> std::result::Result<&crate::udf::AggregateFunction, String> {
        self.user.as_ref().map(|u| u.0.as_ref()).ok_or_else(|| {
            format!(
                "{}: a user-defined aggregate without its function",
                self.name
            )
        })
    }

    /// The output column's type given the input schema.
    pub fn data_type(&self, input: &Schema) -> DataType {
        if let Some(u) = &self.user {
            return u.0.returns.clone();
        }
        match (self.function, self.column) {
            (AggFunction::Count, _) => DataType::BigInt,
            (AggFunction::Avg, _) => DataType::Double,
            (f, _) if f.spread() => DataType::Double,
            (AggFunction::BoolAnd | AggFunction::BoolOr, _) => DataType::Boolean,
            (AggFunction::ArrayAgg, Some(c)) => DataType::List(Box::new(
                input
                    .fields
                    .get(c)
                    .map_or(DataType::String, |f| f.data_type.clone()),
            )),
            (_, Some(c)) => match input.fields.get(c).map(|f| &f.data_type) {
                Some(DataType::Int) | None => DataType::BigInt,
                Some(t) => t.clone(),
            },
            (_, None) => DataType::BigInt,
        }
    }
}

/// The output schema of an aggregate: key columns, then (for windows)
/// `window_start, window_end`, then one column per aggregate.
pub fn output_schema(input: &Schema, key: &[usize], window: bool, aggs: &[Agg]) -> Schema {
    let mut fields: Vec<Field> = key.iter().map(|c| input.fields[*c].clone()).collect();
    if window {
        fields.push(Field::new("window_start", DataType::Timestamp));
        fields.push(Field::new("window_end", DataType::Timestamp));
    }
    fields.extend(
        aggs.iter()
            .map(|a| Field::new(a.name.clone(), a.data_type(input))),
    );
    Schema::new(fields)
}
