//! The programs of `examples/` run as a reader would run them, against a test server (with its
//! worker) and the fake model server: `quickstart.sh` with bash, the Python ones with the
//! project venv's interpreter (`TROVE_TEST_PYTHON`, which has the pinned OpenAI and MCP SDKs
//! and openapi-python-client). Each test checks the exit status and the lines that matter, and
//! what reached the server and the fake. Also here: the README shows the quickstart's body
//! verbatim, and Trove's OpenAPI document generates a Python client with every operation.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::fake_llm::{Answer, FakeLlm};
use crate::helpers::{TestApp, data_of, spawn_app, spawn_app_without_worker, wait_until_processed};
use crate::llms::{KEY, openai_llm};

/// The repository root.
fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's interpreter: `TROVE_TEST_PYTHON` (exported by `scripts/test`), else
/// `.data/venv/bin/python`.
fn python() -> PathBuf {
    std::env::var_os("TROVE_TEST_PYTHON")
        .map_or_else(|| repo().join(".data/venv/bin/python"), PathBuf::from)
}

/// Variables the examples read, removed from the environment they inherit so that only what a
/// test sets counts.
const EXAMPLE_VARIABLES: [&str; 13] = [
    "TROVE_URL",
    "TROVE_KEY_ID",
    "TROVE_KEY_SECRET",
    "TROVE_LLM_ID",
    "TROVE_PIPELINE_ID",
    "LLM_PROVIDER",
    "LLM_ENDPOINT",
    "LLM_MODEL",
    "LLM_API_KEY",
    "WAIT_SECONDS",
    "QUERY",
    "SEARCH_TYPE",
    "CLASSIFICATION",
];

/// What an example printed.
struct Run {
    stdout: String,
    stderr: String,
}

impl Run {
    /// The stdout lines after the step line (`==> ...`) that starts with `step`, up to the next
    /// step line.
    fn section(&self, step: &str) -> Vec<&str> {
        let mut lines = self.stdout.lines();
        let heading = format!("==> {step}");
        assert!(
            lines.by_ref().any(|line| line.starts_with(&heading)),
            "no step {heading:?} in\n{}",
            self.stdout
        );
        lines.take_while(|line| !line.starts_with("==> ")).collect()
    }

    /// Whether stdout has this exact line.
    fn has_line(&self, expected: &str) -> bool {
        self.stdout.lines().any(|line| line == expected)
    }
}

/// Runs `program args` from the repository root with the example variables of `env` (and no
/// others); panics with its output unless it exits 0 within two minutes.
async fn run(program: &Path, args: &[&Path], env: &[(&str, String)]) -> Run {
    let mut command = tokio::process::Command::new(program);
    command.args(args).current_dir(repo()).kill_on_drop(true);
    for name in EXAMPLE_VARIABLES {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .unwrap_or_else(|_| panic!("{args:?} finished within two minutes"))
        .unwrap_or_else(|e| panic!("{} runs: {e}", program.display()));
    let run = Run {
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    assert!(
        output.status.success(),
        "{args:?} exited with {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        run.stdout,
        run.stderr
    );
    // Shown with --nocapture.
    println!("{args:?}:\n{}{}", run.stdout, run.stderr);
    run
}

/// The Trove variables of an example: the app's address and master key.
fn trove_env(app: &TestApp) -> Vec<(&'static str, String)> {
    let (id, secret) = app.master_key();
    vec![
        ("TROVE_URL", app.address.clone()),
        ("TROVE_KEY_ID", id),
        ("TROVE_KEY_SECRET", secret),
    ]
}

/// Checks that the seeded `default` model is the local all-MiniLM-L6-v2 (loaded from
/// `TROVE_MODELS_DIR`, which `scripts/test` sets): the rankings checked here are its.
async fn assert_local_default_model(app: &TestApp) {
    let reply = app.get("/embedding-models?name=default").await;
    let model = &data_of(&reply)[0];
    assert_eq!(
        (&model["provider"], &model["model_name"]),
        (&json!("local"), &json!("all-MiniLM-L6-v2")),
        "the seeded model is not the local one (is TROVE_MODELS_DIR set?): {model}"
    );
}

/// Runs `examples/<name>` with the venv's Python.
async fn run_python(name: &str, env: &[(&str, String)]) -> Run {
    let script = repo().join("examples").join(name);
    run(&python(), &[&script], env).await
}

/// Runs `examples/quickstart.sh` with bash against the app, the LLM on the fake.
async fn run_quickstart(app: &TestApp, fake: &FakeLlm) -> Run {
    let mut env = trove_env(app);
    env.extend([
        ("LLM_PROVIDER", "openai".to_owned()),
        ("LLM_ENDPOINT", fake.openai_endpoint()),
        ("LLM_MODEL", "gpt-quickstart".to_owned()),
        ("LLM_API_KEY", KEY.to_owned()),
    ]);
    let script = repo().join("examples/quickstart.sh");
    run(Path::new("/bin/bash"), &[&script], &env).await
}

// The documents of the quickstart, as it submits them.
const REMOTE_WORK: &str = "Employees may work remotely up to three days a week. Core hours are 10:00 to 15:00 in the employee's local time zone.";
const RELEASE: &str = "Release 4.2 adds single sign-on with SAML and OpenID Connect and cuts the cold start of the search service by forty percent.";
const POSTMORTEM: &str = "Postmortem: on 12 March the ingestion queue stalled for 47 minutes after a certificate expired on the message broker. Certificates now renew 30 days before they expire.";
const TRAVEL: &str = "Travel expenses are reimbursed within 14 days. Take the train for journeys under four hours, and fly economy on flights under six hours.";

/// The steps the quickstart announces, in order.
const QUICKSTART_STEPS: [&str; 11] = [
    "Finding the seeded embedding model and text splitter",
    "Creating a pipeline",
    "Submitting four documents",
    "Waiting until every document is processed",
    "Similarity search as a reader of 'internal'",
    "Full-text search for 'certificate expired'",
    "Similarity search of public documents from 2024 on",
    "Registering the LLM gpt-quickstart (openai at http://127.0.0.1:",
    "Creating an agent",
    "Running the agent",
    "MCP: point a client at http://127.0.0.1:",
];

/// The fragment text of a result line of the quickstart (`  <score>  [<team> <year>]  <text>`):
/// `(team and year, text)`.
fn result_of(line: &str) -> (&str, &str) {
    let rest = line
        .split_once("  [")
        .unwrap_or_else(|| panic!("not a result line: {line:?}"))
        .1;
    rest.split_once("]  ")
        .unwrap_or_else(|| panic!("not a result line: {line:?}"))
}

/// Checks the output of one quickstart run and what the fake received for its agent.
fn check_quickstart_run(run: &Run, fake: &FakeLlm, answer: &str) {
    let steps: Vec<&str> = run
        .stdout
        .lines()
        .filter_map(|line| line.strip_prefix("==> "))
        .collect();
    assert_eq!(steps.len(), QUICKSTART_STEPS.len(), "{}", run.stdout);
    for (step, expected) in steps.iter().zip(QUICKSTART_STEPS) {
        assert!(step.starts_with(expected), "{step:?}: {}", run.stdout);
    }
    let mcp = steps[10];
    assert!(
        mcp.contains("/mcp ")
            && mcp.contains("docs/mcp.md")
            && mcp.contains("examples/mcp_search.py"),
        "{mcp}"
    );
    assert!(run.has_line("    4 documents processed"), "{}", run.stdout);

    // Similarity, as a reader of `internal` (k 2): the remote-work note first.
    let similar: Vec<(&str, &str)> = run
        .section("Similarity search as a reader")
        .into_iter()
        .map(result_of)
        .collect();
    assert_eq!(similar.len(), 2, "{}", run.stdout);
    assert_eq!(similar[0], ("people 2023", REMOTE_WORK), "{}", run.stdout);

    // Full text: only the internal postmortem has both words.
    let full_text: Vec<(&str, &str)> = run
        .section("Full-text search")
        .into_iter()
        .map(result_of)
        .collect();
    assert_eq!(full_text, [("platform 2024", POSTMORTEM)], "{}", run.stdout);

    // The filter: the public documents of 2024 and later, whatever their distance.
    let mut filtered: Vec<(&str, &str)> = run
        .section("Similarity search of public documents from 2024 on")
        .into_iter()
        .map(result_of)
        .collect();
    filtered.sort_unstable();
    assert_eq!(
        filtered,
        [("finance 2025", TRAVEL), ("platform 2024", RELEASE)],
        "{}",
        run.stdout
    );

    // The agent: the streamed answer is the model's, and the model saw the retrieved note.
    assert_eq!(run.section("Running the agent"), [answer], "{}", run.stdout);
    let request = fake.last_request();
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let body = request.json();
    assert_eq!(body["model"], "gpt-quickstart");
    assert_eq!(body["stream"], true);
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2, "{body}");
    assert_eq!(messages[0]["role"], "system");
    let system = messages[0]["content"].as_str().expect("system text");
    assert!(
        system.starts_with("Answer in one sentence, only from these notes:\n")
            && system.contains(REMOTE_WORK),
        "{system}"
    );
    assert!(
        !system.contains(POSTMORTEM),
        "internal text reached a public run: {system}"
    );
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "How many days a week can I work remotely?"})
    );
}

#[tokio::test]
async fn quickstart_goes_from_an_empty_server_to_a_streamed_answer_twice() {
    let app = spawn_app().await;
    assert_local_default_model(&app).await;
    let fake = FakeLlm::start().await;
    let answer = Answer::new(["You may work ", "remotely up to ", "three days a week."]);

    for round in 1..=2 {
        fake.script(answer.clone());
        let before = fake.requests().len();
        let run = run_quickstart(&app, &fake).await;
        check_quickstart_run(&run, &fake, &answer.text());
        assert_eq!(fake.requests().len(), before + 1, "one model call a run");

        // What the run left: one more pipeline, agent and LLM named quickstart-…, four
        // processed documents in the new pipeline.
        let pipelines = app.get("/pipelines?name$startswith=quickstart-").await;
        assert_eq!(data_of(&pipelines).len(), round, "{}", pipelines.text);
        for path in ["/agents", "/llms"] {
            let reply = app
                .get(&format!("{path}?name$startswith=quickstart-"))
                .await;
            assert_eq!(data_of(&reply).len(), round, "{}", reply.text);
        }
        let pipeline = run
            .stdout
            .lines()
            .find_map(|line| line.strip_prefix("    pipeline "))
            .expect("the pipeline id is printed");
        let documents = app
            .get(&format!("/pipelines/{pipeline}/documents?status=success"))
            .await;
        assert_eq!(data_of(&documents).len(), 4, "{}", documents.text);
    }
}

#[tokio::test]
async fn openai_relay_prints_a_whole_and_a_streamed_answer() {
    let app = spawn_app_without_worker().await;
    let fake = FakeLlm::start().await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    fake.script(Answer::new(["It finds ", "the nearest vectors."]));
    fake.script(
        Answer::new(["Site search, ", "log search ", "and support answers."])
            .paced(Duration::from_millis(50)),
    );

    let mut env = trove_env(&app);
    env.push(("TROVE_LLM_ID", llm));
    let run = run_python("openai_relay.py", &env).await;
    assert!(
        run.has_line("whole answer: It finds the nearest vectors."),
        "{}",
        run.stdout
    );
    assert!(
        run.has_line("streamed answer: Site search, log search and support answers."),
        "{}",
        run.stdout
    );

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    for (request, stream) in requests.iter().zip([false, true]) {
        assert_eq!(request.path, "/v1/chat/completions");
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {KEY}").as_str()),
            "the LLM's key, not the SDK's"
        );
        let body = request.json();
        assert_eq!(
            body["model"], "gpt-fake",
            "the LLM's model replaces the client's"
        );
        assert_eq!(body["stream"] == json!(true), stream, "{body}");
    }
    assert_eq!(
        requests[0].json()["messages"][1]["content"],
        "What is a vector database for?"
    );
    assert_eq!(
        requests[1].json()["messages"][0]["content"],
        "Name three uses of full-text search."
    );
}

/// A pipeline named `name` with full-text search and the quickstart's four documents
/// (metadata `team`, `year`), processed; returns its id.
async fn quickstart_pipeline(app: &TestApp, name: &str) -> String {
    let pid = app
        .new_pipeline_id(json!({"name": name, "has_full_text_search": true}))
        .await;
    let documents = [
        ("remote-work", "public", "people", 2023, REMOTE_WORK),
        ("release-4.2", "public", "platform", 2024, RELEASE),
        ("postmortem-march", "internal", "platform", 2024, POSTMORTEM),
        ("travel-policy", "public", "finance", 2025, TRAVEL),
    ]
    .map(|(id, classification, team, year, text)| {
        json!({
            "external_identifier": id,
            "classification": classification,
            "metadata": {"team": team, "year": year},
            "text": text,
        })
    });
    app.submit_batch(&pid, documents.to_vec()).await;
    wait_until_processed(app, &pid, 4).await;
    pid
}

#[tokio::test]
async fn mcp_search_lists_tools_and_searches_the_newest_quickstart_pipeline() {
    let app = spawn_app().await;
    assert_local_default_model(&app).await;
    let older = app
        .new_pipeline_id(json!({"name": "quickstart-20250101-090000-1"}))
        .await;
    let other = app.new_pipeline_id(json!({"name": "handbook"})).await;
    let newest = quickstart_pipeline(&app, "quickstart-20260101-090000-2").await;

    let run = run_python("mcp_search.py", &trove_env(&app)).await;
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines[0].starts_with("connected: protocol 20"),
        "{}",
        run.stdout
    );
    assert!(lines[0].ends_with(", server rmcp"), "{}", run.stdout);
    assert_eq!(
        lines[1],
        "tools: get_pipeline_classifications, get_pipelines, search_knowledge"
    );
    assert_eq!(lines[2], "quickstart pipelines: 2");
    let mut listed = lines[3..5].to_vec();
    listed.sort_unstable();
    let mut expected = [
        format!("  {older}  quickstart-20250101-090000-1"),
        format!("  {newest}  quickstart-20260101-090000-2"),
    ];
    expected.sort_unstable();
    assert_eq!(listed, expected, "{}", run.stdout);
    assert!(!run.stdout.contains(&other), "{}", run.stdout);
    assert_eq!(
        lines[5],
        format!("classifications of {newest}: internal, public")
    );
    assert_eq!(
        lines[6],
        "search_knowledge \"How many days can I work from home?\": 3 fragments"
    );
    assert!(
        lines[7].starts_with("    0.") && lines[7].ends_with(&format!("  {REMOTE_WORK}")),
        "the closest fragment first: {}",
        run.stdout
    );
    assert_eq!(lines.len(), 10, "{}", run.stdout);

    // Full text through the same tool, on a pipeline named by the caller.
    let mut env = trove_env(&app);
    env.extend([
        ("TROVE_PIPELINE_ID", newest.clone()),
        ("QUERY", "certificate expired".to_owned()),
        ("SEARCH_TYPE", "search".to_owned()),
    ]);
    let run = run_python("mcp_search.py", &env).await;
    assert!(
        run.has_line("search_knowledge \"certificate expired\": 1 fragments"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.trim_end().ends_with(&format!("  {POSTMORTEM}")),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn generated_client_searches_a_pipeline() {
    let app = spawn_app().await;
    assert_local_default_model(&app).await;
    let pid = quickstart_pipeline(&app, "quickstart-generated").await;
    let mut env = trove_env(&app);
    env.push(("TROVE_PIPELINE_ID", pid.clone()));
    let run = run_python("generated_client.py", &env).await;

    assert!(
        run.has_line(&format!(
            "pipeline quickstart-generated ({pid}), full-text search: True"
        )),
        "{}",
        run.stdout
    );
    let similar = run
        .stdout
        .lines()
        .skip_while(|line| !line.starts_with("similarity 'How many days"))
        .nth(1)
        .unwrap_or_default();
    assert!(similar.ends_with(REMOTE_WORK), "{}", run.stdout);
    assert!(
        run.has_line("full text 'certificate expired': 1 fragments"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains(POSTMORTEM), "{}", run.stdout);
    let filtered: Vec<&str> = run
        .stdout
        .lines()
        .skip_while(|line| !line.starts_with("similarity, year >= 2024: "))
        .skip(1)
        .collect();
    assert_eq!(filtered.len(), 3, "{}", run.stdout);
    for text in [RELEASE, POSTMORTEM, TRAVEL] {
        assert!(
            filtered.iter().any(|line| line.ends_with(text)),
            "{text}: {}",
            run.stdout
        );
    }
    assert!(run.stderr.is_empty(), "{}", run.stderr);
}

/// The quickstart's body: the script after its leading comment block.
fn quickstart_body() -> String {
    let script = std::fs::read_to_string(repo().join("examples/quickstart.sh"))
        .expect("examples/quickstart.sh");
    let body: Vec<&str> = script
        .lines()
        .skip_while(|line| line.starts_with('#'))
        .collect();
    body.join("\n").trim_matches('\n').to_owned()
}

#[test]
fn quickstart_body_is_what_the_readme_shows() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let (begin, end) = ("<!-- quickstart:begin -->", "<!-- quickstart:end -->");
    let start = readme
        .find(begin)
        .unwrap_or_else(|| panic!("README.md has no {begin} marker"))
        + begin.len();
    let stop = readme[start..]
        .find(end)
        .unwrap_or_else(|| panic!("README.md has no {end} marker after {begin}"))
        + start;
    let block = readme[start..stop].trim();
    let shown = block
        .strip_prefix("```sh\n")
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or_else(|| panic!("the quickstart block is not one ```sh fence:\n{block}"));
    let body = quickstart_body();
    let shown = shown.trim_matches('\n');
    if shown != body {
        let line = shown
            .lines()
            .zip(body.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| shown.lines().count().min(body.lines().count()));
        panic!(
            "README.md's quickstart differs from examples/quickstart.sh after its header, from line {} of the block:\nREADME:  {:?}\nscript:  {:?}",
            line + 1,
            shown.lines().nth(line),
            body.lines().nth(line)
        );
    }
    assert!(body.starts_with("set -euo pipefail\n"), "{body}");
}

#[tokio::test]
async fn openapi_document_generates_a_complete_python_client() {
    let app = spawn_app_without_worker().await;
    let reply = app.get("/openapi.json").await;
    assert_eq!(reply.status, StatusCode::OK);
    let paths = reply.body["paths"].as_object().expect("paths").len();
    assert!(paths > 40, "{paths} paths");

    let folder = std::env::temp_dir().join(format!("trove-client-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&folder).expect("temporary folder");
    let document = folder.join("openapi.json");
    std::fs::write(&document, &reply.text).expect("write the document");
    let config = folder.join("config.yaml");
    std::fs::write(
        &config,
        "package_name_override: trove_client\npost_hooks: []\n",
    )
    .expect("write the configuration");

    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(python())
            .args(["-m", "openapi_python_client", "generate", "--meta", "none"])
            .arg("--path")
            .arg(&document)
            .arg("--config")
            .arg(&config)
            .arg("--output-path")
            .arg(folder.join("trove_client"))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the generator finished within two minutes")
    .expect("the venv has openapi-python-client (scripts/test installs it)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{said}");
    // The generator reports what it skipped (an endpoint, a schema) as warnings and goes on.
    assert!(
        !said.to_lowercase().contains("warning"),
        "the generator warned:\n{said}"
    );
    assert_eq!(
        said.trim(),
        format!("Generating {}", folder.join("trove_client").display())
    );

    let check = repo().join("tests/python/generated_client_check.py");
    let output = tokio::process::Command::new(python())
        .arg(check)
        .arg(&document)
        .arg(&folder)
        .kill_on_drop(true)
        .output()
        .await
        .expect("the check runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    let operations: usize = reply.body["paths"]
        .as_object()
        .expect("paths")
        .values()
        .map(|item| item.as_object().map_or(0, serde_json::Map::len))
        .sum();
    assert!(
        stdout.starts_with(&format!("ok: {operations} operations, ")),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&folder);
}
