//! String functions. Lengths and positions count characters (Unicode
//! scalar values), not bytes, as Flink's do; positions are 1-based.

use std::sync::Arc;

use base64::Engine as _;

use super::super::compiled::{Compiled, EvalFn, Ty};
use super::compose::{all_constant, constant_text, fold_if, int, regex, strict, text, Outcome};
use super::definition::{Call, Function};
use super::signature::{constant, many, optional, p, Kind::*};
use crate::dataflow::row::{DataType as T, Value};

pub const FUNCTIONS: &[Function] = &[
    Function::new("LOWER", &[p("s", Text)], "VARCHAR", case).doc(
        "`s` in lower case",
        "LOWER('Straße')",
        "'straße'",
    ),
    Function::new("UPPER", &[p("s", Text)], "VARCHAR", case).doc(
        "`s` in upper case (Unicode's rules: ß becomes SS)",
        "UPPER('Straße')",
        "'STRASSE'",
    ),
    Function::new("INITCAP", &[p("s", Text)], "VARCHAR", initcap).doc(
        "`s` with the first letter or digit of each word in upper case and the rest in lower \
         case; a word is a run of letters and digits",
        "INITCAP('hello wORLD-wide')",
        "'Hello World-Wide'",
    ),
    Function::new(
        "TRIM",
        &[p("s", Text), optional(p("characters", Text))],
        "VARCHAR",
        trim,
    )
    .doc(
        "`s` without the `characters` (a space if left out) at both ends; \
         also `TRIM([BOTH | LEADING | TRAILING] [c FROM] s)`",
        "TRIM('  hi  ')",
        "'hi'",
    ),
    Function::new(
        "BTRIM",
        &[p("s", Text), optional(p("characters", Text))],
        "VARCHAR",
        trim,
    )
    .doc("TRIM", "BTRIM('xxhixx', 'x')", "'hi'"),
    Function::new(
        "LTRIM",
        &[p("s", Text), optional(p("characters", Text))],
        "VARCHAR",
        trim,
    )
    .doc(
        "`s` without the `characters` (a space if left out) at its start",
        "LTRIM('  hi  ')",
        "'hi  '",
    ),
    Function::new(
        "RTRIM",
        &[p("s", Text), optional(p("characters", Text))],
        "VARCHAR",
        trim,
    )
    .doc(
        "`s` without the `characters` (a space if left out) at its end",
        "RTRIM('  hi  ')",
        "'  hi'",
    ),
    Function::new("CHAR_LENGTH", &[p("s", Text)], "INT", length).doc(
        "the number of characters in `s`",
        "CHAR_LENGTH('日本語')",
        "3",
    ),
    Function::new("CHARACTER_LENGTH", &[p("s", Text)], "INT", length).doc(
        "CHAR_LENGTH",
        "CHARACTER_LENGTH('abc')",
        "3",
    ),
    Function::new("LENGTH", &[p("s", Text)], "INT", length).doc("CHAR_LENGTH", "LENGTH('')", "0"),
    Function::new(
        "SUBSTRING",
        &[
            p("s", Text),
            p("start", Integer),
            optional(p("len", Integer)),
        ],
        "VARCHAR",
        substring,
    )
    .doc(
        "the `len` characters (all, if left out) of `s` from position `start` (1 and 0 are the \
         first character, a negative start counts from the end); NULL when `len` is negative; \
         also `SUBSTRING(s FROM start [FOR len])`",
        "SUBSTRING('weir-flow', 6)",
        "'flow'",
    ),
    Function::new(
        "SUBSTR",
        &[
            p("s", Text),
            p("start", Integer),
            optional(p("len", Integer)),
        ],
        "VARCHAR",
        substring,
    )
    .doc("SUBSTRING", "SUBSTR('weir', 2, 2)", "'ei'"),
    Function::new(
        "LEFT",
        &[p("s", Text), p("len", Integer)],
        "VARCHAR",
        left_right,
    )
    .doc(
        "the first `len` characters of `s`; empty when `len` is negative",
        "LEFT('weir', 2)",
        "'we'",
    ),
    Function::new(
        "RIGHT",
        &[p("s", Text), p("len", Integer)],
        "VARCHAR",
        left_right,
    )
    .doc(
        "the last `len` characters of `s`; empty when `len` is negative",
        "RIGHT('weir', 2)",
        "'ir'",
    ),
    Function::new(
        "LPAD",
        &[p("s", Text), p("len", Integer), p("pad", Text)],
        "VARCHAR",
        pad,
    )
    .doc(
        "`s` padded at its start with `pad`, repeated, to `len` characters, or cut to `len` \
         when longer; NULL when `len` is negative or `pad` empty",
        "LPAD('hi', 4, '??')",
        "'??hi'",
    ),
    Function::new(
        "RPAD",
        &[p("s", Text), p("len", Integer), p("pad", Text)],
        "VARCHAR",
        pad,
    )
    .doc(
        "`s` padded at its end with `pad`, repeated, to `len` characters, or cut to `len` \
         when longer; NULL when `len` is negative or `pad` empty",
        "RPAD('hi', 4, '??')",
        "'hi??'",
    ),
    Function::new(
        "REPEAT",
        &[p("s", Text), p("times", Integer)],
        "VARCHAR",
        repeat,
    )
    .doc(
        "`s` `times` times; empty when `times` is 0 or less",
        "REPEAT('ab', 3)",
        "'ababab'",
    ),
    Function::new("REVERSE", &[p("s", Text)], "VARCHAR", reverse).doc(
        "the characters of `s` in reverse order",
        "REVERSE('weir')",
        "'riew'",
    ),
    Function::new(
        "REPLACE",
        &[p("s", Text), p("search", Text), p("replacement", Text)],
        "VARCHAR",
        replace,
    )
    .doc(
        "`s` with every `search` replaced by `replacement`",
        "REPLACE('a-b-c', '-', '+')",
        "'a+b+c'",
    ),
    Function::new(
        "TRANSLATE",
        &[p("s", Text), p("from", Text), p("to", Text)],
        "VARCHAR",
        translate,
    )
    .doc(
        "`s` with each character of `from` replaced by the character at its place in `to`, \
         or removed when `to` is shorter",
        "TRANSLATE('a-b_c', '-_', '+')",
        "'a+bc'",
    ),
    Function::new(
        "POSITION",
        &[p("needle", Text), p("s", Text)],
        "INT",
        position,
    )
    .doc(
        "where `needle` first starts in `s` (1-based), 0 when it does not; also \
         `POSITION(needle IN s)`",
        "POSITION('ir', 'weir')",
        "3",
    ),
    Function::new(
        "LOCATE",
        &[
            p("needle", Text),
            p("s", Text),
            optional(p("from", Integer)),
        ],
        "INT",
        position,
    )
    .doc(
        "where `needle` first starts in `s` at or after position `from` (1 if left out), 0 \
         when it does not",
        "LOCATE('a', 'banana', 3)",
        "4",
    ),
    Function::new("INSTR", &[p("s", Text), p("needle", Text)], "INT", instr).doc(
        "where `needle` first starts in `s`, 0 when it does not (LOCATE with the arguments \
         the other way round)",
        "INSTR('weir', 'ir')",
        "3",
    ),
    Function::new("CONCAT", &[many(p("s", Text))], "VARCHAR", concat).doc(
        "the strings one after another; NULL if any is NULL",
        "CONCAT('we', 'ir')",
        "'weir'",
    ),
    Function::new(
        "CONCAT_WS",
        &[p("separator", Text), many(p("s", Text))],
        "VARCHAR",
        concat_ws,
    )
    .doc(
        "the strings that are not NULL, with `separator` between them; NULL only when \
         `separator` is",
        "CONCAT_WS('-', 'a', NULL, 'b')",
        "'a-b'",
    ),
    Function::new(
        "SPLIT_INDEX",
        &[p("s", Text), p("separator", Text), p("index", Integer)],
        "VARCHAR",
        split_index,
    )
    .doc(
        "the `index`-th (0-based) piece of `s` split at `separator`; NULL past the end",
        "SPLIT_INDEX('a,b,c', ',', 1)",
        "'b'",
    ),
    Function::new(
        "SPLIT",
        &[p("s", Text), p("separator", Text)],
        "ARRAY<VARCHAR>",
        split,
    )
    .doc(
        "the pieces of `s` split at `separator` (each character when it is empty)",
        "SPLIT('a,b,,c', ',')",
        "ARRAY['a', 'b', '', 'c']",
    ),
    Function::new("WORDS", &[p("s", Text)], "ARRAY<VARCHAR>", words).doc(
        "the words of `s`, split at runs of Unicode white space (weir's own, for word counts)",
        "WORDS(' to be  or ')",
        "ARRAY['to', 'be', 'or']",
    ),
    Function::new(
        "REGEXP",
        &[p("s", Text), constant("pattern", Text)],
        "BOOLEAN",
        regexp_like,
    )
    .doc(
        "whether a part of `s` matches the regular expression `pattern`",
        "REGEXP('weir-42', '[0-9]+')",
        "TRUE",
    ),
    Function::new(
        "REGEXP_LIKE",
        &[p("s", Text), constant("pattern", Text)],
        "BOOLEAN",
        regexp_like,
    )
    .doc("REGEXP", "REGEXP_LIKE('weir', '^w')", "TRUE"),
    Function::new(
        "REGEXP_EXTRACT",
        &[
            p("s", Text),
            constant("pattern", Text),
            optional(constant("group", Integer)),
        ],
        "VARCHAR",
        regexp_extract,
    )
    .doc(
        "the `group` (0, the whole match, if left out) of the first match of `pattern` in `s`; \
         NULL when nothing matches",
        "REGEXP_EXTRACT('id=42;', 'id=([0-9]+)', 1)",
        "'42'",
    ),
    Function::new(
        "REGEXP_SUBSTR",
        &[p("s", Text), constant("pattern", Text)],
        "VARCHAR",
        regexp_extract,
    )
    .doc(
        "the first part of `s` that matches `pattern`; NULL when none does",
        "REGEXP_SUBSTR('id=42;', '[0-9]+')",
        "'42'",
    ),
    Function::new(
        "REGEXP_REPLACE",
        &[
            p("s", Text),
            constant("pattern", Text),
            p("replacement", Text),
        ],
        "VARCHAR",
        regexp_replace,
    )
    .doc(
        "`s` with every match of `pattern` replaced by `replacement` ($1 names a group)",
        "REGEXP_REPLACE('a1b22', '[0-9]+', '#')",
        "'a#b#'",
    ),
    Function::new("ASCII", &[p("s", Text)], "INT", ascii).doc(
        "the code point of the first character of `s`; 0 when `s` is empty",
        "ASCII('A')",
        "65",
    ),
    Function::new("CHR", &[p("code", Integer)], "VARCHAR", chr).doc(
        "the character with code `code` (taken modulo 255 when above 255, as Flink does); \
         NULL when negative",
        "CHR(97)",
        "'a'",
    ),
    Function::new("TO_BASE64", &[p("s", Text)], "VARCHAR", to_base64).doc(
        "the UTF-8 bytes of `s` in base64",
        "TO_BASE64('hello world')",
        "'aGVsbG8gd29ybGQ='",
    ),
    Function::new("FROM_BASE64", &[p("s", Text)], "VARCHAR", from_base64).doc(
        "the text whose base64 is `s`; an error (the value is NULL and the error counted) \
         when `s` is not base64 of UTF-8 text",
        "FROM_BASE64('aGVsbG8gd29ybGQ=')",
        "'hello world'",
    ),
    Function::new("URL_ENCODE", &[p("s", Text)], "VARCHAR", url_encode).doc(
        "`s` in `application/x-www-form-urlencoded` form, as Java's URLEncoder writes it \
         (a space is +)",
        "URL_ENCODE('a b&c=d/é')",
        "'a+b%26c%3Dd%2F%C3%A9'",
    ),
    Function::new("URL_DECODE", &[p("s", Text)], "VARCHAR", url_decode).doc(
        "the text `s` encodes in `application/x-www-form-urlencoded` form; NULL when it is \
         malformed",
        "URL_DECODE('a+b%26c')",
        "'a b&c'",
    ),
    Function::new(
        "PARSE_URL",
        &[p("url", Text), p("part", Text), optional(p("key", Text))],
        "VARCHAR",
        parse_url,
    )
    .doc(
        "a part of `url`: HOST, PATH, QUERY, REF, PROTOCOL, AUTHORITY, FILE or USERINFO; with \
         QUERY and a `key`, that query parameter's value; NULL when absent",
        "PARSE_URL('http://weir.dev/p?k1=v1&k2=v2#top', 'QUERY', 'k2')",
        "'v2'",
    ),
];

fn case(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let up = name == "UPPER";
    let [a] = <[Compiled; 1]>::try_from(args).map_err(|_| "one argument")?;
    // The argument's value is this call's own: ASCII text changes case
    // in place, without a second copy.
    let f = a.eval.clone();
    let c = Compiled::new(Ty::Data(T::String), move |row| match f(row)? {
        Value::String(mut t) if t.is_ascii() => {
            if up {
                t.make_ascii_uppercase()
            } else {
                t.make_ascii_lowercase()
            }
            Ok(Value::String(t))
        }
        Value::String(t) => Ok(Value::String(if up {
            t.to_uppercase()
        } else {
            t.to_lowercase()
        })),
        _ => Ok(Value::Null),
    });
    Ok(fold_if(a.constant.is_some(), c))
}

fn initcap(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        let mut out = String::with_capacity(text(&v[0]).len());
        let mut start = true;
        for c in text(&v[0]).chars() {
            if c.is_alphanumeric() {
                if start {
                    out.extend(c.to_uppercase());
                } else {
                    out.extend(c.to_lowercase());
                }
                start = false;
            } else {
                out.push(c);
                start = true;
            }
        }
        Ok(Value::String(out))
    }))
}

fn trim(call: &Call, mut args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    if args.len() == 1 {
        args.push(Compiled::constant(Value::from(" "), Ty::Data(T::String)));
    }
    let side = match name {
        "LTRIM" => 1,
        "RTRIM" => 2,
        _ => 0,
    };
    Ok(strict(T::String, args, move |v| {
        let chars: smallvec::SmallVec<[char; 4]> = text(&v[1]).chars().collect();
        let x = text(&v[0]);
        let t = match side {
            1 => x.trim_start_matches(chars.as_slice()),
            2 => x.trim_end_matches(chars.as_slice()),
            _ => x.trim_matches(chars.as_slice()),
        };
        Ok(Value::String(t.to_string()))
    }))
}

fn length(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::Int, args, |v| {
        Ok(Value::Int(text(&v[0]).chars().count() as i64))
    }))
}

/// Flink's (and Hive's) rule: a start of 1 is the first character, 0 the
/// first too, a negative start counts from the end; a negative length
/// is NULL.
fn substring(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        let s = text(&v[0]);
        let count = s.chars().count() as i64;
        let pos = int(&v[1]);
        let len = match v.get(2) {
            Some(l) if int(l) < 0 => return Ok(Value::Null),
            Some(l) => int(l),
            None => i64::MAX,
        };
        let start = match pos {
            p if p > 0 => p - 1,
            0 => 0,
            p => count + p,
        };
        if start < 0 || start >= count {
            return Ok(Value::String(String::new()));
        }
        let take = len.min(count - start) as usize;
        Ok(Value::String(
            s.chars().skip(start as usize).take(take).collect(),
        ))
    }))
}

fn left_right(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let left = name == "LEFT";
    Ok(strict(T::String, args, move |v| {
        let s = text(&v[0]);
        let n = usize::try_from(int(&v[1])).unwrap_or(0);
        Ok(Value::String(if left {
            s.chars().take(n).collect()
        } else {
            let count = s.chars().count();
            s.chars().skip(count.saturating_sub(n)).collect()
        }))
    }))
}

fn pad(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let left = name == "LPAD";
    Ok(strict(T::String, args, move |v| {
        let (s, pad) = (text(&v[0]), text(&v[2]));
        let Ok(len) = usize::try_from(int(&v[1])) else {
            return Ok(Value::Null);
        };
        if pad.is_empty() {
            return Ok(Value::Null);
        }
        let have = s.chars().count();
        if have >= len {
            return Ok(Value::String(s.chars().take(len).collect()));
        }
        if len > MAX_BUILT_CHARS {
            return Err(too_long(if left { "LPAD" } else { "RPAD" }, len));
        }
        let fill: String = pad.chars().cycle().take(len - have).collect();
        Ok(Value::String(if left {
            fill + s
        } else {
            s.to_string() + &fill
        }))
    }))
}

/// The longest string LPAD, RPAD and REPEAT build: a bad length must not
/// take the task's memory.
const MAX_BUILT_CHARS: usize = 16 << 20;

fn too_long(name: &str, chars: usize) -> String {
    format!("{name} would build {chars} characters, more than {MAX_BUILT_CHARS}")
}

fn repeat(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        let s = text(&v[0]);
        let n = usize::try_from(int(&v[1])).unwrap_or(0);
        if s.len().saturating_mul(n) > MAX_BUILT_CHARS {
            return Err(too_long("REPEAT", s.chars().count().saturating_mul(n)));
        }
        Ok(Value::String(s.repeat(n)))
    }))
}

fn reverse(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        Ok(Value::String(text(&v[0]).chars().rev().collect()))
    }))
}

fn replace(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        let search = text(&v[1]);
        if search.is_empty() {
            return Ok(v[0].clone());
        }
        Ok(Value::String(text(&v[0]).replace(search, text(&v[2]))))
    }))
}

fn translate(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        let from: Vec<char> = text(&v[1]).chars().collect();
        let to: Vec<char> = text(&v[2]).chars().collect();
        Ok(Value::String(
            text(&v[0])
                .chars()
                .filter_map(|c| match from.iter().position(|f| *f == c) {
                    Some(i) => to.get(i).copied(),
                    None => Some(c),
                })
                .collect(),
        ))
    }))
}

/// The 1-based character position of `needle` in `hay` at or after
/// character `from`, 0 when absent.
fn find_from(needle: &str, hay: &str, from: i64) -> i64 {
    if from < 1 {
        return 0;
    }
    let Some((skip, _)) = hay.char_indices().nth(from as usize - 1).or_else(|| {
        // Just past the end: only an empty needle is found there.
        (hay.chars().count() as i64 == from - 1).then_some((hay.len(), ' '))
    }) else {
        return 0;
    };
    match hay[skip..].find(needle) {
        Some(b) => from + hay[skip..skip + b].chars().count() as i64,
        None => 0,
    }
}

fn position(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::Int, args, |v| {
        let from = v.get(2).map_or(1, int);
        Ok(Value::Int(find_from(text(&v[0]), text(&v[1]), from)))
    }))
}

fn instr(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::Int, args, |v| {
        Ok(Value::Int(find_from(text(&v[1]), text(&v[0]), 1)))
    }))
}

fn concat(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        Ok(Value::String(v.iter().map(text).collect()))
    }))
}

fn concat_ws(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let constant = all_constant(&args);
    let fs: Vec<Arc<EvalFn>> = args.into_iter().map(|a| a.eval).collect();
    let c = Compiled::new(Ty::Data(T::String), move |row| {
        let sep = fs[0](row)?;
        if sep.is_null() {
            return Ok(Value::Null);
        }
        let mut out = String::new();
        let mut first = true;
        for f in &fs[1..] {
            let v = f(row)?;
            if !v.is_null() {
                if !first {
                    out.push_str(text(&sep));
                }
                out.push_str(text(&v));
                first = false;
            }
        }
        Ok(Value::String(out))
    });
    Ok(fold_if(constant, c))
}

fn split_index(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        let i = int(&v[2]);
        let sep = text(&v[1]);
        if i < 0 || sep.is_empty() {
            return Ok(Value::Null);
        }
        Ok(text(&v[0])
            .split(sep)
            .nth(i as usize)
            .map_or(Value::Null, |p| Value::String(p.to_string())))
    }))
}

fn split(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::List(Box::new(T::String)), args, |v| {
        let sep = text(&v[1]);
        let x = text(&v[0]);
        let parts: Vec<Value> = if sep.is_empty() {
            x.chars().map(|c| Value::String(c.to_string())).collect()
        } else {
            x.split(sep).map(|p| Value::String(p.to_string())).collect()
        };
        Ok(Value::List(parts))
    }))
}

fn words(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::List(Box::new(T::String)), args, |v| {
        Ok(Value::List(
            text(&v[0])
                .split_whitespace()
                .map(|w| Value::String(w.to_string()))
                .collect(),
        ))
    }))
}

/// The first argument alone (the pattern, constant, was compiled).
fn first(args: Vec<Compiled>) -> Vec<Compiled> {
    args.into_iter().take(1).collect()
}

fn regexp_like(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let re = regex(&constant_text(&args, 1).unwrap_or_default())?;
    Ok(strict(T::Boolean, first(args), move |v| {
        Ok(Value::Bool(re.is_match(text(&v[0]))))
    }))
}

fn regexp_extract(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let re = regex(&constant_text(&args, 1).unwrap_or_default())?;
    let group = match args.get(2).and_then(|c| c.constant.as_ref()) {
        None => 0,
        Some(Value::Int(g)) if *g >= 0 && (*g as usize) < re.captures_len() => *g as usize,
        Some(_) => {
            return Err(format!(
                "{name}'s group must be from 0 to {}",
                re.captures_len() - 1
            ))
        }
    };
    Ok(strict(T::String, first(args), move |v| {
        Ok(re
            .captures(text(&v[0]))
            .and_then(|c| c.get(group))
            .map_or(Value::Null, |m| Value::String(m.as_str().to_string())))
    }))
}

fn regexp_replace(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let re = regex(&constant_text(&args, 1).unwrap_or_default())?;
    let mut a = args.into_iter();
    let (x, _, r) = (a.next(), a.next(), a.next());
    let args = x.into_iter().chain(r).collect();
    Ok(strict(T::String, args, move |v| {
        Ok(Value::String(
            re.replace_all(text(&v[0]), text(&v[1])).into_owned(),
        ))
    }))
}

fn ascii(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::Int, args, |v| {
        Ok(Value::Int(
            text(&v[0])
                .chars()
                .next()
                .map_or(0, |c| i64::from(u32::from(c))),
        ))
    }))
}

fn chr(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        let mut n = int(&v[0]);
        if n < 0 {
            return Ok(Value::Null);
        }
        if n > 255 {
            n %= 255;
        }
        let c = char::from_u32(n as u32).ok_or("not a character")?;
        Ok(Value::String(c.to_string()))
    }))
}

fn to_base64(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        Ok(Value::String(
            base64::engine::general_purpose::STANDARD.encode(text(&v[0])),
        ))
    }))
}

fn from_base64(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text(&v[0]))
            .map_err(|e| format!("{:?} is not base64: {e}", text(&v[0])))?;
        String::from_utf8(bytes)
            .map(Value::String)
            .map_err(|_| format!("{:?} is not base64 of UTF-8 text", text(&v[0])))
    }))
}

/// Java's `URLEncoder.encode(s, UTF_8)`: letters, digits and `.-*_` kept,
/// a space as `+`, every other byte as `%XX`.
fn url_encode(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        let mut out = String::new();
        for b in text(&v[0]).bytes() {
            match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'*' | b'_' => {
                    out.push(b as char)
                }
                b' ' => out.push('+'),
                _ => out.push_str(&format!("%{b:02X}")),
            }
        }
        Ok(Value::String(out))
    }))
}

fn url_decode(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        Ok(form_decode(text(&v[0])).map_or(Value::Null, Value::String))
    }))
}

/// `application/x-www-form-urlencoded` text decoded; None when a `%` is
/// not followed by two hex digits or the bytes are not UTF-8.
fn form_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

fn parse_url(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::String, args, |v| {
        let part = text(&v[1]).to_ascii_uppercase();
        let Some(u) = Url::parse(text(&v[0])) else {
            return Ok(Value::Null);
        };
        let found = match (part.as_str(), v.get(2)) {
            ("QUERY", Some(key)) => u.query.and_then(|q| {
                q.split('&').find_map(|kv| {
                    let (k, val) = kv.split_once('=').unwrap_or((kv, ""));
                    (k == text(key)).then_some(val)
                })
            }),
            (_, Some(_)) => None,
            ("HOST", _) => u.host,
            ("PATH", _) => Some(u.path),
            ("QUERY", _) => u.query,
            ("REF", _) => u.fragment,
            ("PROTOCOL", _) => Some(u.scheme),
            ("AUTHORITY", _) => u.authority,
            ("FILE", _) => Some(u.file),
            ("USERINFO", _) => u.userinfo,
            _ => None,
        };
        Ok(found.map_or(Value::Null, |s| Value::String(s.to_string())))
    }))
}

/// The parts of a URL as `java.net.URL` names them.
struct Url<'a> {
    scheme: &'a str,
    authority: Option<&'a str>,
    userinfo: Option<&'a str>,
    host: Option<&'a str>,
    path: &'a str,
    query: Option<&'a str>,
    /// The path with its query.
    file: &'a str,
    fragment: Option<&'a str>,
}

impl<'a> Url<'a> {
    fn parse(s: &'a str) -> Option<Self> {
        let (scheme, rest) = s.split_once(':')?;
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            return None;
        }
        let (rest, fragment) = match rest.split_once('#') {
            Some((r, f)) => (r, Some(f)),
            None => (rest, None),
        };
        let (authority, file) = match rest.strip_prefix("//") {
            Some(r) => {
                let end = r.find(['/', '?']).unwrap_or(r.len());
                (Some(&r[..end]), &r[end..])
            }
            None => (None, rest),
        };
        let (path, query) = match file.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (file, None),
        };
        let (userinfo, host_port) = match authority.map(|a| a.rsplit_once('@')) {
            Some(Some((u, h))) => (Some(u), Some(h)),
            _ => (None, authority),
        };
        let host = host_port.map(|h| match h.rfind(':') {
            Some(i) if !h.ends_with(']') => &h[..i],
            _ => h,
        });
        Some(Self {
            scheme,
            authority,
            userinfo,
            host,
            path,
            query,
            file,
            fragment,
        })
    }
}

/// `x [NOT] LIKE pattern`: `%` any run, `_` one character.
pub fn like(
    x: Compiled,
    p: Compiled,
    negated: bool,
    insensitive: bool,
    escape: Option<char>,
) -> Result<Compiled, String> {
    let to_regex = move |pattern: &str| -> Result<regex::Regex, String> {
        let mut re = String::from(if insensitive { "(?s)(?i)^" } else { "(?s)^" });
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            match c {
                c if Some(c) == escape => match chars.next() {
                    Some(n) => re.push_str(&regex::escape(&n.to_string())),
                    None => return Err("LIKE pattern ends with its escape character".into()),
                },
                '%' => re.push_str(".*"),
                '_' => re.push('.'),
                c => re.push_str(&regex::escape(&c.to_string())),
            }
        }
        re.push('$');
        regex::Regex::new(&re).map_err(|e| e.to_string())
    };
    let matches = move |re: &regex::Regex, v: &Value| -> Outcome {
        Ok(Value::Bool(re.is_match(text(v)) != negated))
    };
    match &p.constant {
        Some(Value::String(pattern)) => {
            let re = to_regex(pattern)?;
            Ok(strict(T::Boolean, vec![x], move |v| matches(&re, &v[0])))
        }
        _ => Ok(strict(T::Boolean, vec![x, p], move |v| {
            matches(&to_regex(text(&v[1]))?, &v[0])
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_characters_from_a_start() {
        assert_eq!(find_from("a", "banana", 1), 2);
        assert_eq!(find_from("a", "banana", 3), 4);
        assert_eq!(find_from("a", "banana", 7), 0);
        assert_eq!(find_from("", "ab", 3), 3);
        assert_eq!(find_from("語", "日本語", 1), 3);
        assert_eq!(find_from("x", "abc", 0), 0);
    }

    #[test]
    fn urls_split_as_java_names_their_parts() {
        let u = Url::parse("https://me:pw@weir.dev:8443/a/b.html?k=v&x#frag").unwrap();
        assert_eq!(u.scheme, "https");
        assert_eq!(u.authority, Some("me:pw@weir.dev:8443"));
        assert_eq!(u.userinfo, Some("me:pw"));
        assert_eq!(u.host, Some("weir.dev"));
        assert_eq!(u.path, "/a/b.html");
        assert_eq!(u.query, Some("k=v&x"));
        assert_eq!(u.file, "/a/b.html?k=v&x");
        assert_eq!(u.fragment, Some("frag"));
        assert!(Url::parse("no scheme here").is_none());
    }

    #[test]
    fn form_decoding_refuses_a_broken_escape() {
        assert_eq!(form_decode("a+b%26c").as_deref(), Some("a b&c"));
        assert_eq!(form_decode("%E2%82%AC").as_deref(), Some("€"));
        assert_eq!(form_decode("%zz"), None);
        assert_eq!(form_decode("%4"), None);
        assert_eq!(form_decode("%FF"), None);
        assert_eq!(form_decode("%+b"), None);
    }
}
