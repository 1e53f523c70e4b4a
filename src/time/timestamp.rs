//! A record's event time: read from a JSON field, or the Kafka timestamp.
//!
//! Event time is always milliseconds since the Unix epoch as an `i64`, so
//! times before 1970 are negative. A record whose time cannot be read is a
//! bad record (`source.on_bad_record` decides what happens to it): weir never
//! substitutes "now", because a wall-clock time would put the record in a
//! window it does not belong to and nobody would notice.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The earliest event time weir accepts: `jiff::Timestamp::MIN`
/// (-9999-01-02T01:59:59Z). Bounding event times to ±year 9999 leaves
/// windows, lateness and watermarks plenty of room before `i64` overflows,
/// and every accepted time can be printed as a date.
pub const MIN_EVENT_TIME_MS: i64 = -377_705_023_201_000;
/// The latest event time weir accepts: `jiff::Timestamp::MAX` in whole
/// milliseconds (9999-12-30T22:00:00.999Z).
pub const MAX_EVENT_TIME_MS: i64 = 253_402_207_200_999;

/// How the timestamp field is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimestampFormat {
    /// Whole milliseconds: `1700000000123`, `1.7e12`, `"1700000000123"`.
    EpochMillis,
    /// Seconds: `1700000000`, `1700000000.123` (rounded to the nearest
    /// millisecond), `"1700000000"`.
    EpochSeconds,
    /// An RFC 3339 string with an offset: `"2024-03-01T12:00:00.250+02:00"`.
    Rfc3339,
}

impl TimestampFormat {
    /// What a field in this format looks like, for error messages.
    fn expected(self) -> &'static str {
        match self {
            Self::EpochMillis => "an epoch-millis timestamp",
            Self::EpochSeconds => "an epoch-seconds timestamp",
            Self::Rfc3339 => "an RFC 3339 timestamp",
        }
    }
}

/// RFC 6901 pointer normalisation. A bare name means a top-level field, as
/// weir's field settings always did: `user` becomes `/user`, and a `~` or
/// `/` inside a bare name is escaped (`a/b` becomes `/a~1b`, the field named
/// "a/b"), so that a bare name never silently turns into a nested path. `""`
/// (the whole value) and strings starting with `/` are pointers already and
/// are returned as they are.
pub fn normalize_pointer(p: &str) -> String {
    if p.is_empty() || p.starts_with('/') {
        return p.to_owned();
    }
    let mut out = String::with_capacity(p.len() + 1);
    out.push('/');
    for c in p.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
    out
}

/// Reads the event time of records, built once from the job's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimestampExtractor {
    /// A normalised RFC 6901 pointer; `None` means the Kafka timestamp.
    pointer: Option<String>,
    format: TimestampFormat,
}

impl TimestampExtractor {
    /// `pointer` may be a bare field name (see [`normalize_pointer`]). Without
    /// a pointer the Kafka timestamp is used and `format` does not matter:
    /// Kafka timestamps are always epoch milliseconds.
    pub fn new(pointer: Option<String>, format: TimestampFormat) -> Self {
        Self {
            pointer: pointer.map(|p| normalize_pointer(&p)),
            format,
        }
    }

    /// The normalised pointer, if the time comes from a field.
    pub fn pointer(&self) -> Option<&str> {
        self.pointer.as_deref()
    }

    pub fn format(&self) -> TimestampFormat {
        self.format
    }

    /// Event time in ms since the Unix epoch (i64, may be negative).
    ///
    /// `value` is the parsed JSON of the record (`None` when the pointer is
    /// not set: then `kafka_ts` is used); `kafka_ts` is the Kafka record
    /// timestamp in ms if the record has one. The error names the field and
    /// what was found in it.
    pub fn extract(&self, value: Option<&Value>, kafka_ts: Option<i64>) -> Result<i64, String> {
        let Some(pointer) = &self.pointer else {
            let ts = kafka_ts.ok_or("the record has no Kafka timestamp")?;
            if !(MIN_EVENT_TIME_MS..=MAX_EVENT_TIME_MS).contains(&ts) {
                return Err(format!(
                    "the Kafka timestamp {ts} is out of range ({RANGE})"
                ));
            }
            return Ok(ts);
        };
        let subject = Subject(pointer);
        let Some(value) = value else {
            return Err(format!("{subject}: the record has no JSON value"));
        };
        let Some(field) = value.pointer(pointer) else {
            return Err(format!("{subject} is missing"));
        };
        match self.format {
            TimestampFormat::EpochMillis => epoch_millis(field),
            TimestampFormat::EpochSeconds => epoch_seconds(field),
            TimestampFormat::Rfc3339 => rfc3339(field),
        }
        .map_err(|problem| problem.describe(subject, field, self.format))
    }
}

const RANGE: &str = "event times must lie between the years -9999 and 9999";

/// Why a field's value is not a timestamp; turned into a message by
/// [`Problem::describe`], which knows the field.
enum Problem {
    /// Wrong type or shape; the optional text says more.
    NotATimestamp(Option<String>),
    OutOfRange,
}

impl Problem {
    fn describe(self, subject: Subject<'_>, found: &Value, format: TimestampFormat) -> String {
        let found = show(found);
        let expected = format.expected();
        match self {
            Self::NotATimestamp(None) => format!("{subject}: {found} is not {expected}"),
            Self::NotATimestamp(Some(why)) => {
                format!("{subject}: {found} is not {expected} ({why})")
            }
            Self::OutOfRange => format!("{subject}: {found} is out of range ({RANGE})"),
        }
    }
}

/// "field /ts", or "the value" for the empty pointer (the whole record).
#[derive(Clone, Copy)]
struct Subject<'a>(&'a str);

impl std::fmt::Display for Subject<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("the value")
        } else {
            write!(f, "field {}", self.0)
        }
    }
}

/// The JSON text of a found value, cut short: a whole object in a log line
/// would hide the message.
fn show(v: &Value) -> String {
    const LIMIT: usize = 60;
    let text = v.to_string();
    if text.len() <= LIMIT {
        return text;
    }
    let mut cut = LIMIT;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = text[..cut].to_owned();
    let _ = write!(out, "… ({} bytes)", text.len());
    out
}

fn in_range(ms: i64) -> Result<i64, Problem> {
    if (MIN_EVENT_TIME_MS..=MAX_EVENT_TIME_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(Problem::OutOfRange)
    }
}

/// Rounds `ms` (already scaled) to an in-range whole number of milliseconds.
fn float_ms(ms: f64) -> Result<i64, Problem> {
    // Both bounds are below 2^53, so they are exact as f64.
    if ms.is_finite() && (MIN_EVENT_TIME_MS as f64..=MAX_EVENT_TIME_MS as f64).contains(&ms) {
        Ok(ms as i64)
    } else {
        Err(Problem::OutOfRange)
    }
}

/// A string of ASCII digits with an optional leading '-': nothing else, no
/// spaces, no '+', no fraction.
fn digits(s: &str) -> Result<i64, Problem> {
    let body = s.strip_prefix('-').unwrap_or(s);
    if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Problem::NotATimestamp(None));
    }
    // The shape is right, so the only way to fail is overflow.
    s.parse::<i64>().map_err(|_| Problem::OutOfRange)
}

fn epoch_millis(v: &Value) -> Result<i64, Problem> {
    match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                in_range(i)
            } else if n.is_u64() {
                Err(Problem::OutOfRange)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f.fract() != 0.0 {
                    return Err(Problem::NotATimestamp(Some(
                        "it has a fractional part".into(),
                    )));
                }
                float_ms(f)
            }
        }
        Value::String(s) => in_range(digits(s)?),
        _ => Err(Problem::NotATimestamp(None)),
    }
}

fn epoch_seconds(v: &Value) -> Result<i64, Problem> {
    let whole = |s: i64| s.checked_mul(1000).ok_or(Problem::OutOfRange);
    match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                in_range(whole(i)?)
            } else if n.is_u64() {
                Err(Problem::OutOfRange)
            } else {
                // Half a millisecond rounds away from zero.
                float_ms((n.as_f64().unwrap_or(f64::NAN) * 1000.0).round())
            }
        }
        Value::String(s) => in_range(whole(digits(s)?)?),
        _ => Err(Problem::NotATimestamp(None)),
    }
}

fn rfc3339(v: &Value) -> Result<i64, Problem> {
    let Value::String(s) = v else {
        return Err(Problem::NotATimestamp(Some("expected a string".into())));
    };
    let ts: jiff::Timestamp = s
        .parse()
        .map_err(|e: jiff::Error| Problem::NotATimestamp(Some(e.to_string())))?;
    // Sub-millisecond digits are floored, not truncated towards zero, so
    // that a time before 1970 stays inside the millisecond it falls in.
    let ms = ts.as_nanosecond().div_euclid(1_000_000);
    in_range(i64::try_from(ms).map_err(|_| Problem::OutOfRange)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(format: TimestampFormat) -> TimestampExtractor {
        TimestampExtractor::new(Some("/ts".into()), format)
    }

    fn ok(format: TimestampFormat, v: Value) -> i64 {
        field(format)
            .extract(Some(&json!({ "ts": v })), Some(1))
            .unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    fn err(format: TimestampFormat, v: Value) -> String {
        match field(format).extract(Some(&json!({ "ts": v })), Some(1)) {
            Ok(ts) => panic!("{v} gave {ts}, expected an error"),
            Err(e) => e,
        }
    }

    use TimestampFormat::{EpochMillis, EpochSeconds, Rfc3339};

    #[test]
    fn bounds_are_jiffs() {
        assert_eq!(MIN_EVENT_TIME_MS, jiff::Timestamp::MIN.as_millisecond());
        assert_eq!(MAX_EVENT_TIME_MS, jiff::Timestamp::MAX.as_millisecond());
    }

    #[test]
    fn format_names_in_config() {
        for (f, name) in [
            (EpochMillis, "epoch-millis"),
            (EpochSeconds, "epoch-seconds"),
            (Rfc3339, "rfc3339"),
        ] {
            assert_eq!(serde_json::to_value(f).unwrap(), json!(name));
            assert_eq!(
                serde_json::from_value::<TimestampFormat>(json!(name)).unwrap(),
                f
            );
        }
        assert!(serde_json::from_value::<TimestampFormat>(json!("millis")).is_err());
    }

    #[test]
    fn pointer_normalisation() {
        assert_eq!(normalize_pointer("user"), "/user");
        assert_eq!(normalize_pointer("/user"), "/user");
        assert_eq!(normalize_pointer("/a/b"), "/a/b");
        assert_eq!(normalize_pointer(""), "");
        assert_eq!(normalize_pointer("a/b"), "/a~1b");
        assert_eq!(normalize_pointer("x~y"), "/x~0y");
        let bare = TimestampExtractor::new(Some("ts".into()), EpochMillis);
        assert_eq!(bare.pointer(), Some("/ts"));
        assert_eq!(bare.extract(Some(&json!({"ts": 5})), None), Ok(5));
        let slashed = TimestampExtractor::new(Some("a/b".into()), EpochMillis);
        assert_eq!(
            slashed.extract(Some(&json!({"a/b": 7, "a": {"b": 8}})), None),
            Ok(7)
        );
        let nested = TimestampExtractor::new(Some("/a/b".into()), EpochMillis);
        assert_eq!(
            nested.extract(Some(&json!({"a/b": 7, "a": {"b": 8}})), None),
            Ok(8)
        );
        let whole = TimestampExtractor::new(Some(String::new()), EpochMillis);
        assert_eq!(whole.extract(Some(&json!(9)), None), Ok(9));
        assert_eq!(
            whole.extract(Some(&json!("x")), None).unwrap_err(),
            r#"the value: "x" is not an epoch-millis timestamp"#
        );
    }

    #[test]
    fn kafka_timestamp() {
        let k = TimestampExtractor::new(None, Rfc3339);
        assert_eq!(
            k.extract(None, Some(1_700_000_000_000)),
            Ok(1_700_000_000_000)
        );
        assert_eq!(k.extract(Some(&json!({"ts": 3})), Some(-5)), Ok(-5));
        assert_eq!(
            k.extract(None, None).unwrap_err(),
            "the record has no Kafka timestamp"
        );
        assert!(k
            .extract(None, Some(i64::MAX))
            .unwrap_err()
            .contains("out of range"));
    }

    #[test]
    fn epoch_millis_accepts() {
        assert_eq!(
            ok(EpochMillis, json!(1_700_000_000_123i64)),
            1_700_000_000_123
        );
        assert_eq!(ok(EpochMillis, json!(-1)), -1);
        assert_eq!(ok(EpochMillis, json!(0)), 0);
        assert_eq!(ok(EpochMillis, json!(1.7e12)), 1_700_000_000_000);
        assert_eq!(ok(EpochMillis, json!(-250.0)), -250);
        assert_eq!(ok(EpochMillis, json!("1700000000123")), 1_700_000_000_123);
        assert_eq!(ok(EpochMillis, json!("-86400000")), -86_400_000);
        assert_eq!(ok(EpochMillis, json!(MIN_EVENT_TIME_MS)), MIN_EVENT_TIME_MS);
        assert_eq!(ok(EpochMillis, json!(MAX_EVENT_TIME_MS)), MAX_EVENT_TIME_MS);
    }

    #[test]
    fn epoch_millis_rejects() {
        assert_eq!(
            err(EpochMillis, json!(1.5)),
            "field /ts: 1.5 is not an epoch-millis timestamp (it has a fractional part)"
        );
        assert_eq!(
            err(EpochMillis, json!("12a")),
            r#"field /ts: "12a" is not an epoch-millis timestamp"#
        );
        for bad in ["", "-", "+5", " 5", "5 ", "1.0", "1e3", "0x10", "--1"] {
            let e = err(EpochMillis, json!(bad));
            assert!(
                e.contains("is not an epoch-millis timestamp"),
                "{bad:?}: {e}"
            );
        }
        assert_eq!(
            err(EpochMillis, json!(true)),
            "field /ts: true is not an epoch-millis timestamp"
        );
        assert_eq!(
            err(EpochMillis, Value::Null),
            "field /ts: null is not an epoch-millis timestamp"
        );
        assert_eq!(
            err(EpochMillis, json!(MAX_EVENT_TIME_MS + 1)),
            format!(
                "field /ts: {} is out of range ({RANGE})",
                MAX_EVENT_TIME_MS + 1
            )
        );
        assert!(err(EpochMillis, json!(MIN_EVENT_TIME_MS - 1)).contains("out of range"));
        assert!(err(EpochMillis, json!(u64::MAX)).contains("out of range"));
        assert!(err(EpochMillis, json!(1e300)).contains("out of range"));
        assert!(err(EpochMillis, json!("99999999999999999999")).contains("out of range"));
        assert!(err(EpochMillis, json!("-9223372036854775808")).contains("out of range"));
    }

    #[test]
    fn epoch_seconds() {
        assert_eq!(ok(EpochSeconds, json!(1_700_000_000)), 1_700_000_000_000);
        assert_eq!(ok(EpochSeconds, json!(-1)), -1000);
        assert_eq!(ok(EpochSeconds, json!(1.001)), 1001);
        assert_eq!(
            ok(EpochSeconds, json!(1_700_000_000.123)),
            1_700_000_000_123
        );
        assert_eq!(ok(EpochSeconds, json!(-0.25)), -250);
        assert_eq!(ok(EpochSeconds, json!(0.0004)), 0);
        assert_eq!(ok(EpochSeconds, json!(0.0006)), 1);
        assert_eq!(ok(EpochSeconds, json!("1700000000")), 1_700_000_000_000);
        assert_eq!(ok(EpochSeconds, json!("-60")), -60_000);
        assert_eq!(
            err(EpochSeconds, json!("1.5")),
            r#"field /ts: "1.5" is not an epoch-seconds timestamp"#
        );
        assert_eq!(
            err(EpochSeconds, json!([1])),
            "field /ts: [1] is not an epoch-seconds timestamp"
        );
        // i64::MAX seconds overflow when scaled: an error, not a wrap.
        assert!(err(EpochSeconds, json!(i64::MAX)).contains("out of range"));
        assert!(err(EpochSeconds, json!(i64::MIN)).contains("out of range"));
        assert!(err(EpochSeconds, json!("9223372036854775")).contains("out of range"));
        assert!(err(EpochSeconds, json!(253_402_300_800i64)).contains("out of range"));
        assert!(err(EpochSeconds, json!(-1e17)).contains("out of range"));
    }

    #[test]
    fn rfc3339_strings() {
        assert_eq!(ok(Rfc3339, json!("1970-01-01T00:00:00Z")), 0);
        assert_eq!(
            ok(Rfc3339, json!("2023-11-14T22:13:20.123Z")),
            1_700_000_000_123
        );
        assert_eq!(
            ok(Rfc3339, json!("2023-11-15T00:13:20.123+02:00")),
            1_700_000_000_123
        );
        assert_eq!(ok(Rfc3339, json!("1969-12-31T23:59:59Z")), -1000);
        assert_eq!(ok(Rfc3339, json!("1969-12-31T19:00:00-05:00")), 0);
        // Sub-millisecond digits floor, also before 1970.
        assert_eq!(ok(Rfc3339, json!("1970-01-01T00:00:00.0019Z")), 1);
        assert_eq!(ok(Rfc3339, json!("1969-12-31T23:59:59.9995Z")), -1);
        assert_eq!(
            ok(Rfc3339, json!("0001-01-01T00:00:00Z")),
            -62_135_596_800_000
        );
    }

    #[test]
    fn rfc3339_rejects() {
        let e = err(Rfc3339, json!("abc"));
        assert!(
            e.starts_with(r#"field /ts: "abc" is not an RFC 3339 timestamp ("#),
            "{e}"
        );
        // No offset: a local time is not an instant.
        let e = err(Rfc3339, json!("2024-01-01T00:00:00"));
        assert!(e.contains("is not an RFC 3339 timestamp"), "{e}");
        assert_eq!(
            err(Rfc3339, json!(1_700_000_000)),
            "field /ts: 1700000000 is not an RFC 3339 timestamp (expected a string)"
        );
        assert!(err(Rfc3339, json!("2024-02-30T00:00:00Z")).contains("is not an RFC 3339"));
    }

    #[test]
    fn missing_and_absent() {
        let x = field(EpochMillis);
        assert_eq!(
            x.extract(Some(&json!({"other": 1})), Some(5)).unwrap_err(),
            "field /ts is missing"
        );
        assert_eq!(
            x.extract(Some(&json!([1, 2])), Some(5)).unwrap_err(),
            "field /ts is missing"
        );
        assert_eq!(
            x.extract(None, Some(5)).unwrap_err(),
            "field /ts: the record has no JSON value"
        );
    }

    #[test]
    fn long_values_are_cut_short() {
        let long = "x".repeat(500);
        let e = err(Rfc3339, json!({ "nested": long }));
        assert!(e.len() < 200, "{e}");
        assert!(e.contains("bytes)"), "{e}");
        // Cutting never splits a character.
        let e = err(EpochMillis, json!("é".repeat(100)));
        assert!(e.contains("is not an epoch-millis timestamp"), "{e}");
    }
}
