//! `[pipeline] time_zone`: the names a session time zone is given by.
//! Here, beside the configuration that validates it, so that `weir
//! validate` names a bad zone by its key; SQL's session reads it through
//! [`time_zone`].

use jiff::tz::{Offset, TimeZone};

/// A time zone by the name `[pipeline] time_zone` gives: an IANA name
/// (`America/New_York`), `UTC`/`Z`, or a fixed offset (`+05:30`, `-08`,
/// `GMT+08:00`, `UTC-3`). Err says what is wrong, for the key's problem.
pub fn time_zone(name: &str) -> Result<TimeZone, String> {
    let trimmed = name.trim();
    if trimmed.eq_ignore_ascii_case("UTC") || trimmed == "Z" {
        return Ok(TimeZone::UTC);
    }
    let offset = ["GMT", "UTC"]
        .iter()
        .find_map(|p| trimmed.strip_prefix(p).filter(|r| !r.is_empty()))
        .unwrap_or(trimmed);
    if offset.starts_with(['+', '-']) {
        return fixed_offset(offset).map(TimeZone::fixed).ok_or_else(|| {
            format!("{name:?} is not an offset: write +HH:MM or -HH:MM (at most 18 hours)")
        });
    }
    TimeZone::get(trimmed).map_err(|e| {
        format!("unknown time zone {name:?} ({e}); give an IANA name such as \"Europe/Berlin\", \"UTC\" or an offset such as \"+05:30\"")
    })
}

/// `+HH`, `+HH:MM` or `+HHMM`.
fn fixed_offset(text: &str) -> Option<Offset> {
    let (sign, rest) = text.split_at(1);
    let (h, m) = match rest.split_once(':') {
        Some((h, m)) => (h, m),
        None if rest.len() == 4 => rest.split_at(2),
        None => (rest, "0"),
    };
    if h.is_empty() || h.len() > 2 || m.len() > 2 {
        return None;
    }
    let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
    if h > 18 || m > 59 {
        return None;
    }
    let seconds = (h * 3600 + m * 60) * if sign == "-" { -1 } else { 1 };
    Offset::from_seconds(seconds).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_zones_by_name_or_offset() {
        let at = jiff::Timestamp::from_second(1_796_626_624).unwrap();
        let offset = |name: &str| time_zone(name).unwrap().to_offset(at).seconds();
        assert_eq!(offset("UTC"), 0);
        assert_eq!(offset("Asia/Kolkata"), 19_800);
        assert_eq!(offset("America/New_York"), -5 * 3600);
        assert_eq!(offset("+05:30"), 19_800);
        assert_eq!(offset("GMT-08:00"), -8 * 3600);
        assert_eq!(offset("UTC+8"), 8 * 3600);
        assert_eq!(offset("-0330"), -(3 * 3600 + 1800));
        for bad in ["Mars/Olympus", "+25:00", "GMT+", "+5:99"] {
            let e = time_zone(bad).unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }
}
