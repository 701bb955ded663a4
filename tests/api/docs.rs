//! Checks of the documentation against the code.

use std::collections::BTreeSet;
use std::path::Path;

/// The names `"TROVE_…"` written in `src/config.rs`.
fn config_literals() -> BTreeSet<String> {
    let source =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/config.rs"))
            .expect("src/config.rs");
    let mut names = BTreeSet::new();
    let mut rest = source.as_str();
    while let Some(start) = rest.find("\"TROVE_") {
        let after = &rest[start + 1..];
        let length = after
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(after.len());
        if after[length..].starts_with('"') {
            names.insert(after[..length].to_owned());
        }
        rest = &after[length..];
    }
    names
}

/// Every environment variable `src/config.rs` reads is documented in `docs/configuration.md`
/// as `` `TROVE_X` ``. The variables are the `"TROVE_…"` literals of the file less the name of
/// the JetStream stream (written there too); every name the configuration asks for while it
/// reads a valid environment must be among them, which confirms the parse.
#[test]
fn configuration_doc_names_every_variable_the_configuration_reads() {
    let stream = trove::config::QueueNames::default().stream;
    let mut variables = config_literals();
    assert!(variables.remove(&stream), "{stream} in {variables:?}");
    assert!(variables.len() > 20, "{variables:?}");

    // The names the configuration asks for, with a complete valid environment.
    let asked = std::sync::Mutex::new(BTreeSet::new());
    let valid = [
        ("TROVE_DATABASE_URL", "postgres://trove@127.0.0.1:1/trove"),
        (
            "TROVE_SECRET",
            "dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q=",
        ),
    ];
    trove::config::Config::from_lookup(|name| {
        asked.lock().expect("lock").insert(name.to_owned());
        valid
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| (*value).to_owned())
    })
    .expect("a valid configuration");
    let asked = asked.into_inner().expect("lock");
    let unknown: Vec<&String> = asked.difference(&variables).collect();
    assert!(
        unknown.is_empty(),
        "read but not found as literals: {unknown:?}"
    );

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let missing: Vec<&String> = variables
        .iter()
        .filter(|name| !doc.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md does not name {missing:?}"
    );
}
