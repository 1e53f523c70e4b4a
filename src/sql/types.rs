//! SQL types as weir's [`DataType`]s: the names a schema or a `CAST`
//! writes (`BIGINT`, `DECIMAL(10, 2)`, `ROW<city VARCHAR>`, ...), parsed
//! by hand because Flink's `ROW<...>` and `ARRAY<...>` are not every
//! dialect's.

use crate::dataflow::row::{DataType, Field};

/// Parses a whole type name; Err says what was not understood.
pub fn parse_type(text: &str) -> Result<DataType, String> {
    let mut p = TypeParser {
        text,
        chars: text.char_indices().peekable(),
    };
    let t = p.data_type()?;
    p.skip_space();
    match p.chars.peek() {
        None => Ok(t),
        Some(&(i, _)) => Err(format!("unexpected {:?} after the type", &text[i..])),
    }
}

/// The length a `CAST` to `CHAR(n)`, `VARCHAR(n)`, `BINARY(n)` or
/// `VARBINARY(n)` gives its value: weir's columns are VARCHAR and BYTES
/// whatever their declared length, but a cast to a length keeps Flink's
/// rule (since 1.15): longer values are cut to `n`, and a fixed-length
/// type pads shorter ones (spaces for CHAR, zero bytes for BINARY).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CastLength {
    pub length: usize,
    pub fixed: bool,
}

/// The [`CastLength`] of a type's name, if it is a string or binary type
/// with a length.
pub fn cast_length(text: &str) -> Option<CastLength> {
    let (name, rest) = text.trim().split_once('(')?;
    let fixed = match name.trim().to_ascii_uppercase().as_str() {
        "CHAR" | "CHARACTER" | "BINARY" => true,
        "VARCHAR" | "VARBINARY" | "CHARACTER VARYING" => false,
        _ => return None,
    };
    let length = rest.strip_suffix(')')?.trim().parse().ok()?;
    Some(CastLength { length, fixed })
}

impl CastLength {
    /// `v` cut or padded to this length.
    pub fn apply(self, v: crate::dataflow::row::Value) -> crate::dataflow::row::Value {
        use crate::dataflow::row::Value;
        match v {
            Value::String(s) => {
                let count = s.chars().count();
                if count > self.length {
                    Value::String(s.chars().take(self.length).collect())
                } else if self.fixed && count < self.length {
                    Value::String(format!("{s}{}", " ".repeat(self.length - count)))
                } else {
                    Value::String(s)
                }
            }
            Value::Bytes(mut b) => {
                if b.len() > self.length || self.fixed {
                    b.resize(self.length, 0);
                }
                Value::Bytes(b)
            }
            other => other,
        }
    }
}

struct TypeParser<'a> {
    text: &'a str,
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
}

impl TypeParser<'_> {
    fn skip_space(&mut self) {
        while self.chars.peek().is_some_and(|(_, c)| c.is_whitespace()) {
            self.chars.next();
        }
    }

    fn word(&mut self) -> String {
        self.skip_space();
        let mut w = String::new();
        while let Some(&(_, c)) = self.chars.peek() {
            if c.is_alphanumeric() || c == '_' {
                w.push(c);
                self.chars.next();
            } else {
                break;
            }
        }
        w
    }

    /// A field name, bare or quoted with backticks or double quotes.
    fn name(&mut self) -> Result<String, String> {
        self.skip_space();
        match self.chars.peek() {
            Some(&(_, q)) if q == '`' || q == '"' => {
                self.chars.next();
                let mut w = String::new();
                for (_, c) in self.chars.by_ref() {
                    if c == q {
                        return Ok(w);
                    }
                    w.push(c);
                }
                Err(format!("unterminated quoted name in {:?}", self.text))
            }
            _ => {
                let w = self.word();
                if w.is_empty() {
                    Err(format!("expected a field name in {:?}", self.text))
                } else {
                    Ok(w)
                }
            }
        }
    }

    fn eat(&mut self, want: char) -> bool {
        self.skip_space();
        if self.chars.peek().is_some_and(|(_, c)| *c == want) {
            self.chars.next();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, want: char) -> Result<(), String> {
        if self.eat(want) {
            Ok(())
        } else {
            Err(format!("expected '{want}' in {:?}", self.text))
        }
    }

    fn number(&mut self) -> Result<u32, String> {
        let w = self.word();
        w.parse()
            .map_err(|_| format!("expected a number, not {w:?}, in {:?}", self.text))
    }

    /// `(n)` or `(p, s)`, if there.
    fn params(&mut self) -> Result<Vec<u32>, String> {
        let mut out = Vec::new();
        if self.eat('(') {
            out.push(self.number()?);
            while self.eat(',') {
                out.push(self.number()?);
            }
            self.expect(')')?;
        }
        Ok(out)
    }

    fn data_type(&mut self) -> Result<DataType, String> {
        let word = self.word();
        let upper = word.to_ascii_uppercase();
        let t = match upper.as_str() {
            "BOOLEAN" | "BOOL" => DataType::Boolean,
            "INT" | "INTEGER" | "SMALLINT" | "TINYINT" => DataType::Int,
            "BIGINT" => DataType::BigInt,
            "DOUBLE" | "FLOAT" | "REAL" => {
                // DOUBLE PRECISION
                let save = self.chars.clone();
                if !self.word().eq_ignore_ascii_case("PRECISION") {
                    self.chars = save;
                }
                DataType::Double
            }
            "DECIMAL" | "DEC" | "NUMERIC" => {
                let p = self.params()?;
                let (precision, scale) = match p.as_slice() {
                    [] => (10, 0),
                    [p] => (*p, 0),
                    [p, s] => (*p, *s),
                    _ => return Err("DECIMAL takes (precision, scale)".into()),
                };
                if !(1..=38).contains(&precision) || scale > precision {
                    return Err(format!(
                        "DECIMAL({precision}, {scale}): precision must be 1 to 38 and scale at \
                         most the precision"
                    ));
                }
                DataType::Decimal {
                    precision: precision as u8,
                    scale: scale as u8,
                }
            }
            "VARCHAR" | "STRING" | "CHAR" | "TEXT" => {
                self.params()?;
                DataType::String
            }
            "BYTES" | "VARBINARY" | "BINARY" => {
                self.params()?;
                DataType::Bytes
            }
            "TIMESTAMP" | "TIMESTAMP_LTZ" => {
                let p = self.params()?;
                if p.first().is_some_and(|p| *p != 3) {
                    return Err(format!(
                        "{upper}({}): weir keeps milliseconds, {upper}(3)",
                        p[0]
                    ));
                }
                // TIMESTAMP(3) WITH LOCAL TIME ZONE is TIMESTAMP_LTZ(3);
                // WITHOUT TIME ZONE is TIMESTAMP(3).
                let save = self.chars.clone();
                let zone = match (self.word().to_ascii_uppercase().as_str(), upper.as_str()) {
                    ("WITH", "TIMESTAMP") => {
                        let words = [self.word(), self.word(), self.word()];
                        if !words
                            .iter()
                            .map(|w| w.to_ascii_uppercase())
                            .eq(["LOCAL", "TIME", "ZONE"])
                        {
                            return Err(format!(
                                "TIMESTAMP WITH {}: weir has TIMESTAMP WITH LOCAL TIME ZONE \
                                 (TIMESTAMP_LTZ), an instant shown in the session time zone",
                                words.join(" ")
                            ));
                        }
                        true
                    }
                    ("WITHOUT", "TIMESTAMP") => {
                        let words = [self.word(), self.word()];
                        if !words
                            .iter()
                            .map(|w| w.to_ascii_uppercase())
                            .eq(["TIME", "ZONE"])
                        {
                            return Err(format!(
                                "TIMESTAMP WITHOUT {}: expected TIME ZONE",
                                words.join(" ")
                            ));
                        }
                        false
                    }
                    _ => {
                        self.chars = save;
                        upper == "TIMESTAMP_LTZ"
                    }
                };
                if zone {
                    DataType::TimestampLtz
                } else {
                    DataType::Timestamp
                }
            }
            "DATE" => DataType::Date,
            "TIME" => {
                // TIME(p): milliseconds are kept whatever p says.
                self.params()?;
                let save = self.chars.clone();
                if !(self.word().eq_ignore_ascii_case("WITHOUT")
                    && self.word().eq_ignore_ascii_case("TIME")
                    && self.word().eq_ignore_ascii_case("ZONE"))
                {
                    self.chars = save;
                }
                DataType::Time
            }
            "MAP" => {
                self.expect('<')?;
                let key = self.data_type()?;
                self.expect(',')?;
                let value = self.data_type()?;
                self.expect('>')?;
                DataType::Map(Box::new(key), Box::new(value))
            }
            "ARRAY" => {
                self.expect('<')?;
                let item = self.data_type()?;
                self.expect('>')?;
                DataType::List(Box::new(item))
            }
            "ROW" | "STRUCT" => {
                self.expect('<')?;
                let mut fields = Vec::new();
                loop {
                    let name = self.name()?;
                    let t = self.data_type()?;
                    fields.push(Field::new(name, t));
                    if !self.eat(',') {
                        break;
                    }
                }
                self.expect('>')?;
                DataType::Struct(fields)
            }
            "" => return Err(format!("expected a type in {:?}", self.text)),
            _ => {
                return Err(format!(
                    "unknown type {word}; weir has BOOLEAN, INT, BIGINT, DOUBLE, DECIMAL(p, s), \
                     VARCHAR, BYTES, DATE, TIME, TIMESTAMP(3), TIMESTAMP_LTZ(3), ROW<...>, ARRAY<...> and MAP<..., ...>"
                ))
            }
        };
        // NOT NULL is accepted and not enforced (a missing field is NULL).
        let save = self.chars.clone();
        if self.word().eq_ignore_ascii_case("NOT") && self.word().eq_ignore_ascii_case("NULL") {
            return Ok(t);
        }
        self.chars = save;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_parse_as_flink_writes_them() {
        let t = |s: &str| parse_type(s).unwrap().to_string();
        assert_eq!(t("bigint"), "BIGINT");
        assert_eq!(t("DECIMAL(10, 2)"), "DECIMAL(10, 2)");
        assert_eq!(t("TIMESTAMP(3)"), "TIMESTAMP(3)");
        assert_eq!(t("TIMESTAMP_LTZ(3)"), "TIMESTAMP_LTZ(3)");
        assert_eq!(t("date"), "DATE");
        assert_eq!(t("MAP<STRING, BIGINT>"), "MAP<VARCHAR, BIGINT>");
        assert_eq!(t("timestamp(3) with local time zone"), "TIMESTAMP_LTZ(3)");
        assert_eq!(t("TIMESTAMP WITHOUT TIME ZONE"), "TIMESTAMP(3)");
        assert!(parse_type("TIMESTAMP WITH TIME ZONE")
            .unwrap_err()
            .contains("WITH LOCAL TIME ZONE"));
        assert_eq!(t("STRING"), "VARCHAR");
        assert_eq!(t("ARRAY<VARCHAR>"), "ARRAY<VARCHAR>");
        assert_eq!(
            t("ROW<city VARCHAR, zip INT>"),
            DataType::Struct(vec![
                Field::new("city", DataType::String),
                Field::new("zip", DataType::Int)
            ])
            .to_string()
        );
        assert!(parse_type("BIGNT")
            .unwrap_err()
            .contains("unknown type BIGNT"));
        assert!(parse_type("TIMESTAMP(6)")
            .unwrap_err()
            .contains("milliseconds"));
        assert!(parse_type("DECIMAL(40, 2)").is_err());
    }
}
