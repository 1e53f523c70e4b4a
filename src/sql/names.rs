//! Names that are nearly right: the hint an error about an unknown
//! column, table, field or function gives ("did you mean ...?").

/// The candidate closest to `name` by edit distance, if close enough to
/// be a typo: at most 2 edits, or a third of the candidate's length.
pub fn nearest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    closest(name, candidates, |c| 2.max(c.len() / 3))
}

/// The candidate closest to `name` within `most(candidate)` edits.
pub fn closest<'a>(
    name: &str,
    candidates: impl Iterator<Item = &'a str>,
    most: impl Fn(&str) -> usize,
) -> Option<&'a str> {
    let name = name.to_ascii_lowercase();
    candidates
        .map(|c| (edit_distance(&name, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= most(c))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
