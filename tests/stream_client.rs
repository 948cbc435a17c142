//! The load harness's stream client (`benches/stream_client/`) reads answers right: its
//! head, chunked-body and SSE readers, fed an answer split at every byte, count the same
//! events as when fed it whole, and refuse what is not a 200 chunked answer.

// The client's socket side makes the failures these tests do not (timeouts, socket errors).
#[allow(dead_code)]
#[path = "../benches/stream_client/answer.rs"]
mod answer;

use answer::{read_head, ChunkedBody, Events, Failure};

/// A streamed answer with every SSE line ending (a CRLF split by a chunk's end too), a
/// chunk extension, comments, a two-line event and a trailer: four events, the last
/// `[DONE]`.
const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
Transfer-Encoding: chunked\r\n\r\n\
1a;name=\"v\"\r\ndata: {\"a\":1}\n\n: comment\n\n\r\n\
16\r\ndata: {\"b\":2}\r\ndata\r\n\r\r\n\
11\r\n\n: {\"c\"\rdata: 3\r\r\r\n\
e\r\ndata: [DONE]\n\n\r\n\
0\r\nx-checksum: 1\r\n\r\n";

/// The events read (`true` for `[DONE]`) and whether the body ended, feeding `answer` in
/// pieces that end at `splits`.
fn read(answer: &[u8], splits: &[usize]) -> Result<(Vec<bool>, bool), Failure> {
    let mut events = Events::default();
    let mut body = ChunkedBody::new();
    let mut seen = Vec::new();
    let mut buffer = Vec::new();
    let mut head_done = false;
    let mut from = 0;
    for &to in splits.iter().chain([&answer.len()]) {
        buffer.extend_from_slice(&answer[from..to]);
        from = to;
        if !head_done {
            match read_head(&buffer)? {
                Some(length) => {
                    buffer.drain(..length);
                    head_done = true;
                }
                None => continue,
            }
        }
        let used = body.read(&buffer, &mut events, &mut |done| seen.push(done))?;
        buffer.drain(..used);
    }
    assert!(
        buffer.is_empty() || !body.is_done(),
        "nothing is left after the body's end"
    );
    Ok((seen, body.is_done()))
}

#[test]
fn an_answer_split_anywhere_reads_as_when_whole() {
    let whole = read(ANSWER, &[]).expect("a valid answer");
    assert_eq!(
        whole,
        (vec![false, false, false, true], true),
        "three events, then [DONE]"
    );
    for split in 1..ANSWER.len() {
        assert_eq!(
            read(ANSWER, &[split]),
            Ok(whole.clone()),
            "split at {split}"
        );
    }
    let every_byte: Vec<usize> = (1..ANSWER.len()).collect();
    assert_eq!(read(ANSWER, &every_byte), Ok(whole), "one byte at a time");
}

#[test]
fn done_is_only_an_event_whose_whole_data_is_done() {
    let body = b"data: [DONE]x\n\ndata: [DONE]\ndata: more\n\ndata:[DONE]\n\n";
    let mut events = Events::default();
    let mut seen = Vec::new();
    events.feed(body, &mut |done| seen.push(done));
    assert_eq!(
        seen,
        vec![false, false, true],
        "only the last event is [DONE]"
    );
}

#[test]
fn an_answer_that_is_not_a_200_is_a_failure_with_its_status() {
    let head = b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(read_head(head), Err(Failure::Status(429)));
}

#[test]
fn an_answer_that_is_not_chunked_is_refused() {
    let head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
    assert!(matches!(read_head(head), Err(Failure::Framing(_))));
}

#[test]
fn broken_chunk_framing_is_refused() {
    let head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    for body in ["zz\r\n", "2\r\nabX\r\n0\r\n\r\n"] {
        let answer = format!("{head}{body}");
        assert!(
            matches!(read(answer.as_bytes(), &[]), Err(Failure::Framing(_))),
            "{body:?} is refused"
        );
    }
}

#[test]
fn a_body_cut_short_is_not_done() {
    let cut = &ANSWER[..ANSWER.len() - 5];
    let (events, done) = read(cut, &[]).expect("valid so far");
    assert_eq!(events.len(), 4, "the events before the cut");
    assert!(!done, "the body has not ended");
}
