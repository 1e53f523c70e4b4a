//! The crate's modules form no import cycle (issue #17, "Layering"): a
//! file that names `crate::a::b` or `super::b` depends on that module, and
//! following those dependencies never leads back. `use` groups count item
//! by item. Test code (`mod tests`, `mod testing`) and comments are left
//! out: they may look anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`runtime::source`, `engine` for engine/mod.rs) → source.
fn modules(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path.strip_prefix(root).unwrap().with_extension("");
            let mut name = rel.to_string_lossy().replace('/', "::");
            if let Some(parent) = name.strip_suffix("::mod") {
                name = parent.to_string();
            }
            if name == "lib" || name == "main" {
                continue;
            }
            out.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    out
}

/// The source without comments and without its test modules.
fn production_code(src: &str) -> String {
    let mut code = String::new();
    for line in src.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            break;
        }
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// The paths after each `prefix` in `code` (`crate::a::b::C` → `a::b::C`),
/// a `use` group expanded into one path per item (`super::{changes,
/// x::{self, Y}}` → `changes`, `x`, `x::Y`), so that no import hides
/// behind a brace.
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices(prefix) {
        // `crate::` and `super::` as path roots, not inside a name.
        if code[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        expand(&code[i + prefix.len()..], "", &mut out);
    }
    out
}

/// The path at the start of `rest`, after `base`; a group that follows it
/// (`{a, b::{c, self}}`) gives one path per item.
fn expand(rest: &str, base: &str, out: &mut Vec<String>) {
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(rest.len());
    let head = format!("{base}{}", &rest[..end]);
    let Some(group) = rest[end..].strip_prefix('{') else {
        out.push(head.trim_end_matches(':').to_string());
        return;
    };
    let (mut depth, mut start) = (0, 0);
    let item = |text: &str, out: &mut Vec<String>| match text.trim() {
        "" => {}
        "self" => out.push(head.trim_end_matches(':').to_string()),
        t => expand(t, &head, out),
    };
    for (j, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                item(&group[start..j], out);
                return;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                item(&group[start..j], out);
                start = j + 1;
            }
            _ => {}
        }
    }
}

/// The longest module that `path` starts with.
fn resolve(path: &str, known: &BTreeMap<String, String>) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|m| known.contains_key(m))
}

#[test]
fn the_crate_has_no_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&root);
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, src) in &mods {
        let code = production_code(src);
        let parent = name.rsplit_once("::").map_or("", |(p, _)| p);
        let mut d = BTreeSet::new();
        for p in paths_after(&code, "crate::") {
            d.extend(resolve(&p, &mods));
        }
        for p in paths_after(&code, "super::") {
            let full = if parent.is_empty() {
                p.to_string()
            } else {
                format!("{parent}::{p}")
            };
            d.extend(resolve(&full, &mods));
        }
        d.remove(name);
        deps.insert(name.clone(), d);
    }
    // Depth-first search for a path back to where it started.
    fn find_cycle(
        node: &str,
        deps: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == node) {
            let mut cycle = path[i..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in deps.get(node).into_iter().flatten() {
            if let Some(c) = find_cycle(next, deps, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for name in deps.keys() {
        if let Some(cycle) = find_cycle(name, &deps, &mut Vec::new(), &mut done) {
            panic!("import cycle: {}", cycle.join(" -> "));
        }
    }
    // The scan sees the dependencies it must: a sanity check on the parser.
    assert!(
        deps["engine::group::poll"].contains("engine::group::protocol"),
        "{:?}",
        deps["engine::group::poll"]
    );
    assert!(
        deps["engine::single::stage_task"].contains("engine::single::alignment"),
        "{:?}",
        deps["engine::single::stage_task"]
    );
    assert!(
        deps["runtime::job"].contains("checkpoint::recovery"),
        "{:?}",
        deps["runtime::job"]
    );
    // The storage layers reach no higher: keyed state's bytes and the
    // checkpoints that carry them know nothing of operators, SQL or how a
    // job runs.
    for (name, d) in &deps {
        if !(name.starts_with("state") || name.starts_with("checkpoint")) {
            continue;
        }
        let above: Vec<&String> = d
            .iter()
            .filter(|m| {
                !(m.starts_with("state") || m.starts_with("checkpoint") || m.as_str() == "error")
            })
            .collect();
        assert!(
            above.is_empty(),
            "{name} imports {above:?}: the storage layers import only each other and error"
        );
    }
    // An item of a `use` group (`use super::{changes, ...}`) is seen.
    assert!(
        deps["state::backend"].contains("state::changes"),
        "{:?}",
        deps["state::backend"]
    );
}
