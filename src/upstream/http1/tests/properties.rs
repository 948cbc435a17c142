//! Property tests of the upstream side's head reader and body framing: any bytes an
//! upstream answers are either refused or read as exactly one answer, whose
//! re-serialisation reads back the same; never a panic or a hang.

use super::*;
use http::header;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::ValueTree;
use std::io::Cursor;

/// An answer as the connection read it: what a re-serialisation must reproduce.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    status: u16,
    version: Version,
    /// Every field but the framing ones, in order.
    fields: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Answer {
    /// Written again, its body framed by its length (none for a bodiless status).
    fn serialise(&self) -> Vec<u8> {
        let version = match self.version {
            Version::HTTP_10 => "HTTP/1.0",
            _ => "HTTP/1.1",
        };
        let mut wire = format!("{version} {} X\r\n", self.status).into_bytes();
        for (name, value) in &self.fields {
            wire.extend_from_slice(name.as_bytes());
            wire.extend_from_slice(b": ");
            wire.extend_from_slice(value);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(format!("content-length: {}\r\n\r\n", self.body.len()).as_bytes());
        wire.extend_from_slice(&self.body);
        wire
    }
}

/// The one final answer read from `bytes` (to a `GET`), its body to the end; `None` when
/// the bytes are refused.
fn read_one(bytes: &[u8]) -> Option<Answer> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut connection = Http1::new(Box::new(Cursor::new(bytes.to_vec())));
        let read = async {
            let head = connection.read_head().await?;
            let body = body_of(&mut connection).await?;
            let framing = [header::CONTENT_LENGTH, header::TRANSFER_ENCODING];
            Ok::<_, Box<Error>>(Answer {
                status: head.status.as_u16(),
                version: head.version,
                fields: head
                    .headers
                    .iter()
                    .filter(|(name, _)| !framing.contains(name))
                    .map(|(name, value)| (name.as_str().into(), value.as_bytes().to_vec()))
                    .collect(),
                body,
            })
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), read)
            .await
            .unwrap_or_else(|_| panic!("a hang on {:?}", String::from_utf8_lossy(bytes)))
            .ok()
    })
}

fn refused_or_one_answer(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Some(answer) = read_one(bytes) {
        let again = read_one(&answer.serialise());
        prop_assert_eq!(
            again.as_ref(),
            Some(&answer),
            "read from {:?}",
            String::from_utf8_lossy(bytes)
        );
    }
    Ok(())
}

const ALPHABET: &[u8] = b"aZ09 \t\r\n:;=,\"\\/%-_.\x00\x7f\x80\xff";

fn some_bytes(most: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(select(ALPHABET), 0..most)
}

/// An answer assembled from likely pieces: an interim head or not, a status line, fields,
/// a framing (none, a length, chunks) and a body, each now and then broken.
fn answer() -> impl Strategy<Value = Vec<u8>> {
    let interim = prop_oneof![4 => Just(""), 1 => Just("HTTP/1.1 100 Continue\r\n\r\n")];
    let status = prop_oneof![
        9 => select(&["HTTP/1.1 200 OK", "HTTP/1.0 200 OK", "HTTP/1.1 204 No Content", "HTTP/1.1 429 x", "HTTP/1.1 500"][..]),
        1 => select(&["HTTP/1.1 999 x", "HTTP/2 200", "HTTP/1.1 20 x", "HTTP/1.1 101 x", ""][..]),
    ];
    let end = prop_oneof![9 => select(&["\r\n", "\n"][..]), 1 => Just("\r")];
    let field = prop_oneof![
        9 => (
            select(&["content-type", "x-request-id", "connection", "set-cookie", "Server "][..]),
            select(&["text/event-stream", "close", "keep-alive", "a=b", "x y"][..]),
        )
            .prop_map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())),
        1 => (some_bytes(6), some_bytes(8)),
    ];
    let framing = prop_oneof![
        some_bytes(30).prop_map(|body| (String::new(), body)),
        (some_bytes(30), 0usize..3)
            .prop_map(|(body, off)| (format!("content-length: {}", body.len() + off), body)),
        (
            some_bytes(30),
            select(&["", ";a=\"b\"", ";a\rb"][..]),
            select(&["\r\n", "\n"][..])
        )
            .prop_map(|(data, extension, end)| {
                let mut body = Vec::new();
                for piece in data.chunks(7) {
                    body.extend_from_slice(format!("{:x}{extension}{end}", piece.len()).as_bytes());
                    body.extend_from_slice(piece);
                    body.extend_from_slice(end.as_bytes());
                }
                body.extend_from_slice(format!("0{end}{end}").as_bytes());
                ("transfer-encoding: chunked".into(), body)
            }),
        select(
            &[
                "transfer-encoding: gzip",
                "content-length: 1, 2",
                "transfer-encoding: chunked, identity"
            ][..]
        )
        .prop_map(|framing| (framing.to_string(), b"x".to_vec())),
    ];
    let fields = prop::collection::vec(field, 0..4);
    (interim, status, end, fields, framing).prop_map(
        |(interim, status, end, fields, (framing, body))| {
            let mut wire = format!("{interim}{status}{end}").into_bytes();
            for (name, value) in fields {
                wire.extend_from_slice(&name);
                wire.extend_from_slice(b": ");
                wire.extend_from_slice(&value);
                wire.extend_from_slice(end.as_bytes());
            }
            if !framing.is_empty() {
                wire.extend_from_slice(framing.as_bytes());
                wire.extend_from_slice(end.as_bytes());
            }
            wire.extend_from_slice(end.as_bytes());
            wire.extend_from_slice(&body);
            wire
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_answer_bytes_are_refused_or_one_answer(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        refused_or_one_answer(&bytes)?;
    }

    #[test]
    fn assembled_answers_are_refused_or_one_answer(bytes in answer()) {
        refused_or_one_answer(&bytes)?;
    }

    #[test]
    fn mutated_answers_are_refused_or_one_answer(
        bytes in answer(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), select(ALPHABET)), 1..4),
    ) {
        let mut bytes = bytes;
        for (at, byte) in edits {
            if !bytes.is_empty() {
                let at = at.index(bytes.len());
                bytes[at] = byte;
            }
        }
        refused_or_one_answer(&bytes)?;
    }
}

/// Both outcomes come up often among the assembled answers.
#[test]
fn the_generated_answers_are_often_read_and_often_refused() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut read, mut refused) = (0, 0);
    for _ in 0..400 {
        let bytes = answer().new_tree(&mut runner).unwrap().current();
        match read_one(&bytes) {
            Some(_) => read += 1,
            None => refused += 1,
        }
    }
    assert!(
        read >= 20 && refused >= 20,
        "{read} read, {refused} refused"
    );
}
