//! Java date patterns (`yyyy-MM-dd HH:mm:ss.SSS`), as Flink's
//! DATE_FORMAT, TO_TIMESTAMP and UNIX_TIMESTAMP take them: the pattern is
//! read once when the job is planned; the calendar is `jiff`'s.

use jiff::civil::DateTime;
use jiff::tz::Offset;

use super::calendar::civil;

/// One piece of a Java date pattern.
#[derive(Debug, Clone, PartialEq)]
pub enum PatternPart {
    /// A letter and how many times it repeats (`yyyy`: ('y', 4)).
    Field(char, usize),
    Literal(String),
}

/// The letters a pattern may use: year, month, day, hour (0-23, 1-12),
/// minute, second, fraction, AM/PM, day of year, day name. Quoted text
/// and every other character are literal.
const LETTERS: &str = "yMdHhmsSaDE";

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Reads a Java `SimpleDateFormat` pattern.
pub fn java_pattern(p: &str) -> Vec<PatternPart> {
    let mut out = Vec::new();
    let chars: Vec<char> = p.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            let mut lit = String::new();
            i += 1;
            loop {
                match (chars.get(i), chars.get(i + 1)) {
                    // '' inside quotes is a quote.
                    (Some('\''), Some('\'')) => {
                        lit.push('\'');
                        i += 2;
                    }
                    (Some('\''), _) | (None, _) => break,
                    (Some(c), _) => {
                        lit.push(*c);
                        i += 1;
                    }
                }
            }
            i += 1;
            out.push(PatternPart::Literal(if lit.is_empty() {
                "'".into()
            } else {
                lit
            }));
        } else if LETTERS.contains(c) {
            let mut n = 0;
            while i < chars.len() && chars[i] == c {
                n += 1;
                i += 1;
            }
            out.push(PatternPart::Field(c, n));
        } else {
            out.push(PatternPart::Literal(c.to_string()));
            i += 1;
        }
    }
    out
}

/// `ms` (UTC) written by `pattern`.
pub fn format_pattern(ms: i64, pattern: &[PatternPart]) -> Result<String, String> {
    Ok(format_civil(civil(ms)?, pattern))
}

/// A calendar date and time written by `pattern`.
pub fn format_civil(c: DateTime, pattern: &[PatternPart]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for p in pattern {
        match p {
            PatternPart::Literal(l) => out.push_str(l),
            PatternPart::Field('a', _) => out.push_str(if c.hour() < 12 { "AM" } else { "PM" }),
            PatternPart::Field('E', n) => {
                let name = format!("{:?}", c.weekday());
                out.push_str(if *n >= 4 { &name } else { &name[..3] });
            }
            PatternPart::Field('M', n) if *n >= 3 => {
                let name = MONTHS[c.month() as usize - 1];
                out.push_str(if *n >= 4 { name } else { &name[..3] });
            }
            PatternPart::Field(f, n) => {
                let v: i64 = match f {
                    'y' if *n == 2 => i64::from(c.year()).rem_euclid(100),
                    'y' => c.year().into(),
                    'M' => c.month().into(),
                    'd' => c.day().into(),
                    'D' => c.day_of_year().into(),
                    'H' => c.hour().into(),
                    'h' => (i64::from(c.hour()) + 11) % 12 + 1,
                    'm' => c.minute().into(),
                    's' => c.second().into(),
                    _ => {
                        // S: the fraction's first n digits.
                        let millis = format!("{:03}", c.millisecond());
                        let digits: String = millis
                            .chars()
                            .chain(std::iter::repeat('0'))
                            .take(*n)
                            .collect();
                        out.push_str(&digits);
                        continue;
                    }
                };
                let _ = write!(out, "{v:0width$}", width = *n);
            }
        }
    }
    out
}

/// Reads `s` by `pattern` as a UTC instant.
pub fn parse_pattern(s: &str, pattern: &[PatternPart]) -> Result<i64, String> {
    let bad = || format!("{s:?} does not match the date format");
    let (mut y, mut mo, mut d, mut h, mut mi, mut sec, mut milli) = (1970, 1, 1, 0, 0, 0, 0);
    let mut pm = None;
    let mut rest = s;
    for p in pattern {
        match p {
            PatternPart::Literal(l) => rest = rest.strip_prefix(l.as_str()).ok_or_else(bad)?,
            PatternPart::Field('a', _) => {
                let upper = rest.get(..2).map(str::to_ascii_uppercase);
                pm = Some(upper.as_deref() == Some("PM"));
                rest = rest.get(2..).ok_or_else(bad)?;
            }
            PatternPart::Field('M', n) if *n >= 3 => {
                let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
                let word = rest[..letters].to_ascii_lowercase();
                let found = MONTHS.iter().position(|m| {
                    let m = m.to_ascii_lowercase();
                    word == m || (word.len() == 3 && m.starts_with(&word))
                });
                mo = found.ok_or_else(bad)? as i64 + 1;
                rest = &rest[letters..];
            }
            PatternPart::Field('E', _) => {
                let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
                rest = &rest[letters..];
            }
            PatternPart::Field(f, n) => {
                let most = match f {
                    'y' => (*n).max(4),
                    'S' => (*n).max(3),
                    'D' => 3,
                    _ if *n > 1 => *n,
                    _ => 2,
                };
                let take = rest
                    .bytes()
                    .take_while(u8::is_ascii_digit)
                    .count()
                    .min(most);
                if take == 0 {
                    return Err(bad());
                }
                let v: i64 = rest[..take].parse().map_err(|_| bad())?;
                match f {
                    'y' => y = v,
                    'M' => mo = v,
                    'd' => d = v,
                    'H' | 'h' => h = v,
                    'm' => mi = v,
                    's' => sec = v,
                    // The fraction's digits, as milliseconds.
                    'S' => milli = v * 1000 / 10i64.pow(take as u32),
                    _ => return Err(format!("{s:?}: a day of the year cannot be read back")),
                }
                rest = &rest[take..];
            }
        }
    }
    if !rest.is_empty() {
        return Err(bad());
    }
    if pm == Some(true) && h < 12 {
        h += 12;
    }
    let narrow = |v: i64| i8::try_from(v).map_err(|_| bad());
    let civil = DateTime::new(
        i16::try_from(y).map_err(|_| bad())?,
        narrow(mo)?,
        narrow(d)?,
        narrow(h)?,
        narrow(mi)?,
        narrow(sec)?,
        i32::try_from(milli * 1_000_000).map_err(|_| bad())?,
    )
    .map_err(|_| bad())?;
    Offset::UTC
        .to_timestamp(civil)
        .map(|t| t.as_millisecond())
        .map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::json::parse_timestamp;

    #[test]
    fn patterns_write_and_read_back() {
        let ms = parse_timestamp("2026-11-30T10:00:00.123Z").unwrap();
        let p = java_pattern("yyyy-MM-dd HH:mm:ss.SSS");
        assert_eq!(format_pattern(ms, &p).unwrap(), "2026-11-30 10:00:00.123");
        assert_eq!(parse_pattern("2026-11-30 10:00:00.123", &p), Ok(ms));
        let q = java_pattern("EEE, d MMM yy h a");
        assert!(format_pattern(ms, &q).unwrap().starts_with("Mon, 30 "));
        assert_eq!(
            format_pattern(ms, &java_pattern("hh 'o''clock' a")).unwrap(),
            "10 o'clock AM"
        );
        assert!(parse_pattern("2026-02-30 10:00:00.000", &p).is_err());
        assert!(parse_pattern("2026-11-30 10:00", &p).is_err());
        assert_eq!(
            parse_pattern("2026-11-30 10:00:00.5", &p),
            Ok(ms - 123 + 500)
        );
    }
}
