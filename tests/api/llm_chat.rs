//! `LlmClient` against the fake model server: streaming, failures, timeouts, relay.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use trove::providers::llm::{
    ChatEvent, ChatMessage, ChatStream, LlmClient, LlmError, LlmProvider, LlmTarget, Usage, collect,
};

use crate::fake_llm::{Answer, DEFAULT_PROMPT_TOKENS, FakeLlm, Reply, refused_addr};
use crate::helpers::within;

const KEY: &str = "sk-test-0123456789abcdef";

fn client() -> LlmClient {
    LlmClient::new(Duration::from_secs(2), Duration::from_secs(5)).unwrap()
}

fn impatient_client(read_timeout: Duration) -> LlmClient {
    LlmClient::new(Duration::from_secs(2), read_timeout).unwrap()
}

fn parameters(value: Value) -> Map<String, Value> {
    let Value::Object(map) = value else {
        panic!("parameters are an object")
    };
    map
}

fn openai<'a>(endpoint: &'a str, parameters: &'a Map<String, Value>) -> LlmTarget<'a> {
    LlmTarget {
        provider: LlmProvider::OpenAi,
        endpoint,
        model: Some("gpt-fake"),
        api_key: Some(KEY),
        parameters,
    }
}

fn ollama<'a>(endpoint: &'a str, parameters: &'a Map<String, Value>) -> LlmTarget<'a> {
    LlmTarget {
        provider: LlmProvider::Ollama,
        endpoint,
        model: Some("llama-fake"),
        api_key: None,
        parameters,
    }
}

fn prompt() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("system", "Answer briefly."),
        ChatMessage::user("Say hello."),
    ]
}

async fn all_events(stream: ChatStream) -> Vec<Result<ChatEvent, LlmError>> {
    within(stream.collect()).await
}

fn deltas(texts: &[&str]) -> Vec<ChatEvent> {
    texts
        .iter()
        .map(|text| ChatEvent::Delta((*text).to_owned()))
        .collect()
}

fn done(finish_reason: &str, usage: Option<(u64, u64)>) -> ChatEvent {
    ChatEvent::Done {
        finish_reason: Some(finish_reason.to_owned()),
        usage: usage.map(|(prompt_tokens, completion_tokens)| Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
        }),
    }
}

fn ok_events(events: Vec<Result<ChatEvent, LlmError>>) -> Vec<ChatEvent> {
    events.into_iter().map(|event| event.unwrap()).collect()
}

#[tokio::test]
async fn openai_stream_yields_deltas_in_order_then_done() {
    let fake = FakeLlm::start().await;
    fake.script(Answer::new(["Hel", "lo", " world"]).usage(5, 3));
    let endpoint = fake.openai_endpoint();
    let params = parameters(json!({"temperature": 0.2}));

    let stream = within(client().chat(&openai(&endpoint, &params), &prompt()))
        .await
        .unwrap();

    let mut expected = deltas(&["Hel", "lo", " world"]);
    expected.push(done("stop", Some((5, 3))));
    assert_eq!(ok_events(all_events(stream).await), expected);
    let request = fake.last_request();
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(
        request.header("authorization"),
        Some(&*format!("Bearer {KEY}"))
    );
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(
        request.json(),
        json!({
            "temperature": 0.2,
            "model": "gpt-fake",
            "messages": [
                {"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": "Say hello."}
            ],
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
}

#[tokio::test]
async fn ollama_stream_yields_deltas_in_order_then_done() {
    let fake = FakeLlm::start().await;
    fake.script(
        Answer::new(["Hel", "lo"])
            .usage(7, 2)
            .finish_reason("length"),
    );
    let endpoint = fake.base_url();
    let params = parameters(json!({"temperature": 0.2, "num_ctx": 2048}));

    let stream = within(client().chat(&ollama(&endpoint, &params), &prompt()))
        .await
        .unwrap();

    let mut expected = deltas(&["Hel", "lo"]);
    expected.push(done("length", Some((7, 2))));
    assert_eq!(ok_events(all_events(stream).await), expected);
    let request = fake.last_request();
    assert_eq!(request.path, "/api/chat");
    assert_eq!(request.header("authorization"), None);
    assert_eq!(
        request.json(),
        json!({
            "model": "llama-fake",
            "messages": [
                {"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": "Say hello."}
            ],
            "stream": true,
            "options": {"temperature": 0.2, "num_ctx": 2048}
        })
    );
}

#[tokio::test]
async fn ollama_sends_the_key_when_it_has_one_and_reports_no_usage_without_counts() {
    let fake = FakeLlm::start().await;
    fake.script(Answer::new(["x"]).without_usage());
    let endpoint = fake.base_url();
    let params = Map::new();
    let target = LlmTarget {
        api_key: Some(KEY),
        ..ollama(&endpoint, &params)
    };

    let stream = within(client().chat(&target, &prompt())).await.unwrap();

    let mut expected = deltas(&["x"]);
    expected.push(done("stop", None));
    assert_eq!(ok_events(all_events(stream).await), expected);
    assert_eq!(
        fake.last_request().header("authorization"),
        Some(&*format!("Bearer {KEY}"))
    );
}

async fn first_delta_arrives_while_the_server_holds(target: &LlmTarget<'_>, fake: &FakeLlm) {
    let mut stream = within(client().chat(target, &prompt())).await.unwrap();

    // The fake holds after its first chunk: this delta can only come from incremental reading.
    let first = within(stream.next()).await.unwrap().unwrap();
    assert_eq!(first, ChatEvent::Delta("Hello".to_owned()));
    fake.release();
    let rest = ok_events(all_events(stream).await);
    assert_eq!(rest[..3], deltas(&[", ", "world", "!"])[..]);
    assert!(matches!(rest[3], ChatEvent::Done { .. }), "{rest:?}");
}

#[tokio::test]
async fn openai_deltas_arrive_before_the_answer_is_complete() {
    let fake = FakeLlm::start().await;
    fake.script(Answer::default().hold_after_first());
    let endpoint = fake.openai_endpoint();
    let params = Map::new();
    first_delta_arrives_while_the_server_holds(&openai(&endpoint, &params), &fake).await;
}

#[tokio::test]
async fn ollama_deltas_arrive_before_the_answer_is_complete() {
    let fake = FakeLlm::start().await;
    fake.script(Answer::default().hold_after_first());
    let endpoint = fake.base_url();
    let params = Map::new();
    first_delta_arrives_while_the_server_holds(&ollama(&endpoint, &params), &fake).await;
}

#[tokio::test]
async fn paced_stream_is_read_whole() {
    let fake = FakeLlm::start().await;
    fake.script(Answer::new(["a", "b", "c"]).paced(Duration::from_millis(30)));
    let endpoint = fake.openai_endpoint();
    let params = Map::new();

    let stream = within(client().chat(&openai(&endpoint, &params), &prompt()))
        .await
        .unwrap();

    let mut expected = deltas(&["a", "b", "c"]);
    expected.push(done("stop", Some((DEFAULT_PROMPT_TOKENS, 3))));
    assert_eq!(ok_events(all_events(stream).await), expected);
}

#[tokio::test]
async fn non_success_head_is_an_error_with_status_and_excerpt() {
    let fake = FakeLlm::start().await;
    fake.script(Reply::rate_limited());
    let endpoint = fake.openai_endpoint();
    let params = Map::new();

    let Err(err) = within(client().chat(&openai(&endpoint, &params), &prompt())).await else {
        panic!("a 429 head is an error")
    };

    let LlmError::Status { status, .. } = &err else {
        panic!("expected a status error, got {err:?}")
    };
    assert_eq!(status.as_u16(), 429);
    assert_eq!(
        err.to_string(),
        r#"model server answered 429 Too Many Requests: {"error":{"code":"rate_limit_exceeded","message":"Rate limit reached","type":"requests"}}"#
    );
}

#[tokio::test]
async fn long_error_bodies_are_cut_to_200_characters() {
    let fake = FakeLlm::start().await;
    fake.script(Reply::json(500, json!({"error": "x".repeat(1000)})));
    let endpoint = fake.base_url();
    let params = Map::new();

    let Err(LlmError::Status { excerpt, .. }) =
        within(client().chat(&ollama(&endpoint, &params), &prompt())).await
    else {
        panic!("a 500 head is a status error")
    };
    assert_eq!(excerpt.chars().count(), 200);
    assert!(excerpt.starts_with(r#"{"error":"xxx"#), "{excerpt}");
}

#[tokio::test]
async fn echoed_key_is_redacted_in_the_error() {
    let fake = FakeLlm::start().await;
    fake.script(Reply::EchoKey { status: 401 });
    let endpoint = fake.openai_endpoint();
    let params = Map::new();

    let Err(err) = within(client().chat(&openai(&endpoint, &params), &prompt())).await else {
        panic!("a 401 head is an error")
    };

    let text = err.to_string();
    assert!(
        text.starts_with(
            "model server answered 401 Unauthorized: {\"error\":{\"code\":\"invalid_api_key\",\"message\":\"Incorrect API key provided: [redacted]."
        ),
        "{text}"
    );
    assert!(!text.contains(KEY), "{text}");
    assert!(!format!("{err:?}").contains(KEY));
    // The fake really echoed it: the redaction is ours.
    assert!(String::from_utf8_lossy(&fake.last_request().response_body).contains(KEY));
}

#[tokio::test]
async fn refused_connection_is_an_error() {
    let endpoint = format!("http://{}/v1", refused_addr());
    let params = Map::new();

    let Err(err) = within(client().chat(&openai(&endpoint, &params), &prompt())).await else {
        panic!("nothing listens there")
    };

    assert!(matches!(err, LlmError::Transport(_)), "{err:?}");
    assert!(err.to_string().to_lowercase().contains("connect"), "{err}");
}

#[tokio::test]
async fn server_that_never_answers_times_out() {
    let fake = FakeLlm::start().await;
    fake.script(Reply::Hang);
    let endpoint = fake.openai_endpoint();
    let params = Map::new();
    let read_timeout = Duration::from_millis(300);
    let started = Instant::now();

    let Err(err) =
        within(impatient_client(read_timeout).chat(&openai(&endpoint, &params), &prompt())).await
    else {
        panic!("no head, no stream")
    };

    let waited = started.elapsed();
    assert!(matches!(err, LlmError::NoAnswer(_)), "{err:?}");
    assert!(
        waited >= read_timeout && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    assert_eq!(
        err.to_string(),
        "timed out waiting for the model server to answer after 300ms"
    );
}

async fn stall_ends_with_one_error(target: &LlmTarget<'_>) {
    let read_timeout = Duration::from_millis(300);
    let mut stream = within(impatient_client(read_timeout).chat(target, &prompt()))
        .await
        .unwrap();
    assert_eq!(
        within(stream.next()).await.unwrap().unwrap(),
        ChatEvent::Delta("Hello".to_owned())
    );
    let started = Instant::now();

    let rest = all_events(stream).await;

    let waited = started.elapsed();
    assert!(
        matches!(rest[..], [Err(LlmError::Stalled(_))]),
        "one error and the end: {rest:?}"
    );
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}

#[tokio::test]
async fn openai_stall_past_the_read_timeout_ends_with_one_error() {
    let fake = FakeLlm::start().await;
    fake.script(Answer::default().hold_after_first());
    let endpoint = fake.openai_endpoint();
    let params = Map::new();
    stall_ends_with_one_error(&openai(&endpoint, &params)).await;
}

#[tokio::test]
async fn ollama_stall_past_the_read_timeout_ends_with_one_error() {
    let fake = FakeLlm::start().await;
    fake.script(Answer::default().hold_after_first());
    let endpoint = fake.base_url();
    let params = Map::new();
    stall_ends_with_one_error(&ollama(&endpoint, &params)).await;
}

async fn break_ends_with_one_error(target: &LlmTarget<'_>) {
    let stream = within(client().chat(target, &prompt())).await.unwrap();

    let events = all_events(stream).await;

    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(
        events[0].as_ref().unwrap(),
        &ChatEvent::Delta("Hello".to_owned())
    );
    assert_eq!(
        events[1].as_ref().unwrap(),
        &ChatEvent::Delta(", ".to_owned())
    );
    assert!(
        matches!(events[2], Err(LlmError::Transport(_))),
        "{events:?}"
    );
}

#[tokio::test]
async fn openai_break_mid_stream_is_an_error_without_done() {
    let fake = FakeLlm::start().await;
    fake.script(Answer::default().break_after(2));
    let endpoint = fake.openai_endpoint();
    let params = Map::new();
    break_ends_with_one_error(&openai(&endpoint, &params)).await;
}

#[tokio::test]
async fn ollama_break_mid_stream_is_an_error_without_done() {
    let fake = FakeLlm::start().await;
    fake.script(Answer::default().break_after(2));
    let endpoint = fake.base_url();
    let params = Map::new();
    break_ends_with_one_error(&ollama(&endpoint, &params)).await;
}

#[tokio::test]
async fn dropping_the_stream_closes_the_upstream_connection() {
    let fake = FakeLlm::start().await;
    fake.script(Answer::default().hold_after_first());
    let endpoint = fake.openai_endpoint();
    let params = Map::new();
    let mut stream = within(client().chat(&openai(&endpoint, &params), &prompt()))
        .await
        .unwrap();
    within(stream.next()).await.unwrap().unwrap();

    drop(stream);

    fake.assert_client_left("the client").await;
}

#[tokio::test]
async fn given_stream_options_are_kept() {
    let fake = FakeLlm::start().await;
    let endpoint = fake.openai_endpoint();
    let params = parameters(json!({"stream_options": {"include_usage": false}}));

    let stream = within(client().chat(&openai(&endpoint, &params), &prompt()))
        .await
        .unwrap();

    let events = ok_events(all_events(stream).await);
    assert_eq!(events.last(), Some(&done("stop", None)));
    assert_eq!(
        fake.last_request().json()["stream_options"],
        json!({"include_usage": false})
    );
}

#[tokio::test]
async fn reserved_keys_in_parameters_are_ignored() {
    let fake = FakeLlm::start().await;
    let params = parameters(json!({
        "model": "other-model",
        "messages": [{"role": "user", "content": "injected"}],
        "stream": false,
        "temperature": 0.3
    }));
    let openai_endpoint = fake.openai_endpoint();
    let ollama_endpoint = fake.base_url();

    let openai_events = all_events(
        within(client().chat(&openai(&openai_endpoint, &params), &prompt()))
            .await
            .unwrap(),
    )
    .await;
    let ollama_events = all_events(
        within(client().chat(&ollama(&ollama_endpoint, &params), &prompt()))
            .await
            .unwrap(),
    )
    .await;

    assert!(openai_events.iter().all(Result::is_ok));
    assert!(ollama_events.iter().all(Result::is_ok));
    let requests = fake.requests();
    let messages = json!([
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Say hello."}
    ]);
    let sent = requests[0].json();
    assert_eq!(sent["model"], "gpt-fake");
    assert_eq!(sent["messages"], messages);
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["temperature"], 0.3);
    let sent = requests[1].json();
    assert_eq!(sent["model"], "llama-fake");
    assert_eq!(sent["messages"], messages);
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["options"], json!({"temperature": 0.3}));
}

#[tokio::test]
async fn collect_gathers_the_whole_answer() {
    let fake = FakeLlm::start().await;
    fake.script(Answer::new(["All ", "of ", "it"]).usage(4, 3));
    let endpoint = fake.openai_endpoint();
    let params = Map::new();
    let stream = within(client().chat(&openai(&endpoint, &params), &prompt()))
        .await
        .unwrap();

    let (answer, finish_reason, usage) = within(collect(stream)).await.unwrap();

    assert_eq!(answer, "All of it");
    assert_eq!(finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        usage,
        Some(Usage {
            prompt_tokens: 4,
            completion_tokens: 3,
            total_tokens: 7
        })
    );
}

#[tokio::test]
async fn collect_fails_on_a_broken_answer() {
    let fake = FakeLlm::start().await;
    fake.script(Answer::default().break_after(1));
    let endpoint = fake.base_url();
    let params = Map::new();
    let stream = within(client().chat(&ollama(&endpoint, &params), &prompt()))
        .await
        .unwrap();

    let result = within(collect(stream)).await;

    assert!(matches!(result, Err(LlmError::Transport(_))), "{result:?}");
}

#[tokio::test]
async fn server_ignoring_stream_answers_one_completion() {
    let fake = FakeLlm::start().await;
    fake.script(Reply::json(
        200,
        json!({
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Whole"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}
        }),
    ));
    let endpoint = fake.openai_endpoint();
    let params = Map::new();

    let stream = within(client().chat(&openai(&endpoint, &params), &prompt()))
        .await
        .unwrap();

    let mut expected = deltas(&["Whole"]);
    expected.push(done("stop", Some((2, 1))));
    assert_eq!(ok_events(all_events(stream).await), expected);
}

#[tokio::test]
async fn completed_streams_leave_the_connection_for_reuse() {
    let fake = FakeLlm::start().await;
    let endpoint = fake.openai_endpoint();
    let params = Map::new();
    let client = client();

    for _ in 0..2 {
        let stream = within(client.chat(&openai(&endpoint, &params), &prompt()))
            .await
            .unwrap();
        within(collect(stream)).await.unwrap();
    }

    let requests = fake.requests();
    assert_eq!(requests[0].remote_addr, requests[1].remote_addr);
}

#[tokio::test]
async fn forward_relays_bodies_byte_for_byte() {
    let fake = FakeLlm::start().await;
    let body = Bytes::from_static(
        br#"{"model":"m","messages":[{"role":"user","content":"hi"}],  "temperature":0.1}"#,
    );
    let url = format!("{}/chat/completions", fake.openai_endpoint());

    let response = within(client().forward(&url, Some(KEY), body.clone()))
        .await
        .unwrap();

    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let received = within(response.bytes()).await.unwrap();
    let exchange = fake.last_request();
    assert_eq!(exchange.body, body);
    assert_eq!(received, exchange.response_body);
    assert_eq!(exchange.header("content-type"), Some("application/json"));
    assert_eq!(
        exchange.header("authorization"),
        Some(&*format!("Bearer {KEY}"))
    );
}

#[tokio::test]
async fn forward_streams_and_passes_error_statuses_through() {
    let fake = FakeLlm::start().await;
    fake.script(Answer::new(["a", "b"]));
    fake.script(Reply::rate_limited());
    let url = format!("{}/chat/completions", fake.openai_endpoint());
    let streamed = Bytes::from_static(br#"{"messages":[],"stream":true}"#);

    let response = within(client().forward(&url, None, streamed))
        .await
        .unwrap();
    let received = within(response.bytes()).await.unwrap();
    let refused = within(client().forward(&url, None, Bytes::from_static(b"{}")))
        .await
        .unwrap();

    let exchanges = fake.requests();
    assert_eq!(received, exchanges[0].response_body);
    assert!(received.ends_with(b"data: [DONE]\n\n"));
    assert_eq!(exchanges[0].header("authorization"), None);
    assert_eq!(refused.status().as_u16(), 429);
    assert_eq!(
        within(refused.bytes()).await.unwrap(),
        exchanges[1].response_body
    );
}
