//! The layers of `src/` point one way (docs/architecture.md):
//!
//! `main` → `startup` → transports (`http`, `mcp`, `sidecar`, `upload`) → `service` → `state` →
//! (`auth`, `agents`, `retrieval`, `ingest`, `providers`) → `store` → leaves (`access`,
//! `config`, `crypto`, `error`, `license`, `metadata_schema`, `metrics`, `names`, `telemetry`,
//! `time`).
//!
//! This test reads every file of `src/` and fails when a file names a module of a higher layer
//! (`crate::<module>` in code, comments excluded), when `sqlx` or `sea_orm` appear outside the
//! store (and search execution in `src/retrieval/`, state and start-up, which hold the pool),
//! when `poem` or `poem_openapi` appear below the transports, when a transport names the
//! store, or when `trove-query` gains an IO dependency.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use std::path::{Path, PathBuf};

/// The layer of a top-level module of `src/`; higher layers may use lower ones.
fn layer(module: &str) -> Option<u8> {
    Some(match module {
        "main" => 8,
        "startup" => 7,
        "http" | "mcp" | "sidecar" | "upload" => 6,
        "service" => 5,
        "state" => 4,
        "auth" | "agents" | "retrieval" | "ingest" | "providers" => 3,
        "store" => 2,
        "access" | "config" | "crypto" | "error" | "license" | "metadata_schema" | "metrics"
        | "names" | "telemetry" | "time" => 1,
        _ => return None,
    })
}

/// Files that may name `sqlx` / `sea_orm` outside `src/store/`: search execution and the
/// composition that opens the pool.
const DATABASE_FILES: [&str; 4] = [
    "src/retrieval/search.rs",
    "src/retrieval/estimates.rs",
    "src/state.rs",
    "src/startup.rs",
];

/// The web framework's crates: only the transports and what composes them name them.
const WEB_CRATES: [&str; 2] = ["poem", "poem_openapi"];

/// Crates that do IO; `trove-query` depends on none of them.
const IO_CRATES: [&str; 10] = [
    "sqlx",
    "sea-orm",
    "sea-query-sqlx",
    "tokio",
    "reqwest",
    "async-nats",
    "poem",
    "tonic",
    "hyper",
    "rmcp",
];

/// The code of a file without its comments (line and doc comments; block comments are not
/// used in the tree).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a file names through `crate::` paths, grouped imports included.
fn named_modules(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c, d}`: the first segment of each item at the group's top level.
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_ascii_alphabetic() || c == '_') => {
                        let ident: String = group[i..]
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect();
                        names.push(ident);
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let ident: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            names.push(ident);
        }
    }
    names
}

/// The top-level module a file of `src/` belongs to (`src/http/search.rs` → `http`).
fn module_of(relative: &str) -> Option<String> {
    let inner = relative.strip_prefix("src/")?;
    let first = inner.split('/').next()?;
    Some(first.trim_end_matches(".rs").to_owned())
}

/// Every violation of the layering rules in one file.
fn violations(relative: &str, text: &str) -> Vec<String> {
    let Some(module) = module_of(relative) else {
        return Vec::new();
    };
    if module == "lib" {
        return Vec::new();
    }
    let code = code_of(text);
    let mut found = Vec::new();
    let own = layer(&module);
    if own.is_none() {
        found.push(format!(
            "{relative}: module `{module}` has no layer (add it to tests/layering.rs and the README)"
        ));
    }
    for named in named_modules(&code) {
        let Some(theirs) = layer(&named) else {
            continue;
        };
        if let Some(own) = own
            && theirs > own
        {
            found.push(format!(
                "{relative}: `{module}` names `crate::{named}`, a higher layer"
            ));
        }
        if matches!(module.as_str(), "http" | "mcp") && named == "store" {
            found.push(format!("{relative}: a transport names the store"));
        }
    }
    let database_allowed = relative.starts_with("src/store/") || DATABASE_FILES.contains(&relative);
    if !database_allowed && (contains_word(&code, "sqlx") || contains_word(&code, "sea_orm")) {
        found.push(format!("{relative}: database access outside the store"));
    }
    // Transports (layer 6) and above speak HTTP; below them, types are the service's own.
    let below_transports = own.is_some_and(|own| own < 6);
    for web in WEB_CRATES {
        if below_transports && contains_word(&code, web) {
            found.push(format!(
                "{relative}: `{web}` below the transports (schemas belong in src/http/)"
            ));
        }
    }
    found
}

/// Whether `word` appears in `code` as a whole identifier.
fn contains_word(code: &str, word: &str) -> bool {
    code.match_indices(word).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + word.len()..].chars().next();
        let is_ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !is_ident(before) && !is_ident(after)
    })
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn src_layers_point_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    assert!(files.len() > 50, "src/ was not found");
    let mut found = Vec::new();
    for path in files {
        let relative = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        found.extend(violations(
            &relative,
            &std::fs::read_to_string(&path).unwrap(),
        ));
    }
    assert!(
        found.is_empty(),
        "layering violations:\n{}",
        found.join("\n")
    );
}

#[test]
fn trove_query_does_no_io() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("query/Cargo.toml"))
            .unwrap();
    let mut section = "";
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
            continue;
        }
        if section != "[dependencies]" {
            continue;
        }
        let name = line.split(['=', ' ', '.']).next().unwrap_or_default();
        assert!(
            !IO_CRATES.contains(&name),
            "trove-query depends on `{name}`, which does IO"
        );
    }
}

#[test]
fn the_checker_sees_each_kind_of_bad_import() {
    // A store file naming the service above it.
    assert_eq!(
        violations("src/store/x.rs", "use crate::service::pipelines;\n").len(),
        1
    );
    // Grouped imports are read item by item.
    assert_eq!(
        violations(
            "src/service/x.rs",
            "use crate::{error::ApiError, startup::AppState};"
        )
        .len(),
        1
    );
    // A transport naming the store (a lower layer, but not its own to use).
    assert_eq!(
        violations("src/http/x.rs", "fn f() { crate::store::listing::list(); }").len(),
        1
    );
    // Database access outside the store.
    assert_eq!(
        violations("src/service/x.rs", "fn f(p: &sqlx::PgPool) {}").len(),
        1
    );
    // The web framework below the transports: a derived schema, an imported type.
    assert_eq!(
        violations(
            "src/store/x.rs",
            "#[derive(poem_openapi::Object)]\nstruct Row;"
        )
        .len(),
        1
    );
    assert_eq!(
        violations("src/service/x.rs", "use poem::http::HeaderMap;").len(),
        1
    );
    assert!(
        violations(
            "src/http/x.rs",
            "use poem_openapi::Object;\nuse poem::Request;"
        )
        .is_empty()
    );
    // Nothing below start-up names start-up or a transport.
    assert_eq!(
        violations(
            "src/ingest/x.rs",
            "use crate::startup::AppState;\nuse crate::http::x;"
        )
        .len(),
        2
    );
    // Comments and lower layers are fine.
    assert!(
        violations(
            "src/service/x.rs",
            "// crate::startup in a comment\nuse crate::store::Pool;\nuse crate::error::ApiError;"
        )
        .is_empty()
    );
    // A module without a layer is reported.
    assert_eq!(violations("src/widgets.rs", "").len(), 1);
}
