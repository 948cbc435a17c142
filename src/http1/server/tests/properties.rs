//! Property tests of the head reader and the body framing (issue 31): any bytes are either
//! refused or read as exactly one message, whose re-serialisation reads back the same;
//! never a panic or a hang. The bytes are read from memory (a `Cursor`, which ends where
//! they do), so a hang could only be a loop that never waits: each read is also bounded.

use super::*;
use proptest::prelude::*;
use proptest::sample::select;
use std::io::Cursor;

/// A head limit no generated head reaches, so a re-serialised head (which may be longer:
/// CRLF for LF, `: ` for `:`) is never refused for its size.
const ROOMY: usize = 1 << 20;

/// A request as the session read it: what a re-serialisation must reproduce.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Message {
    method: String,
    target: Vec<u8>,
    version: Version,
    /// Every field but the framing ones, in order.
    fields: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Message {
    fn of(request: &RequestHeader, body: Vec<u8>) -> Self {
        let framing = [header::CONTENT_LENGTH, header::TRANSFER_ENCODING];
        Message {
            method: request.method.as_str().into(),
            target: request.raw_path().to_vec(),
            version: request.version,
            fields: request
                .headers
                .iter()
                .filter(|(name, _)| !framing.contains(name))
                .map(|(name, value)| (name.as_str().into(), value.as_bytes().to_vec()))
                .collect(),
            body,
        }
    }

    /// The message written again, its body framed by its length.
    fn serialise(&self) -> Vec<u8> {
        let mut wire = self.method.as_bytes().to_vec();
        wire.push(b' ');
        wire.extend_from_slice(&self.target);
        wire.extend_from_slice(match self.version {
            Version::HTTP_10 => b" HTTP/1.0\r\n",
            _ => b" HTTP/1.1\r\n",
        });
        for (name, value) in &self.fields {
            wire.extend_from_slice(name.as_bytes());
            wire.extend_from_slice(b": ");
            wire.extend_from_slice(value);
            wire.extend_from_slice(b"\r\n");
        }
        if !self.body.is_empty() {
            wire.extend_from_slice(format!("content-length: {}\r\n", self.body.len()).as_bytes());
        }
        wire.extend_from_slice(b"\r\n");
        wire.extend_from_slice(&self.body);
        wire
    }
}

/// The one message a session reads from `bytes` (head, then body to its end); `None` when
/// the bytes are refused (or hold no head).
fn read_one(bytes: &[u8]) -> Option<Message> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let stream: Stream = Box::new(Cursor::new(bytes.to_vec()));
        let mut session = Session::new(stream, ROOMY);
        let read = async {
            if !session.read_request().await? {
                return Ok(None);
            }
            let mut body = Vec::new();
            while let Some(chunk) = session.read_request_body().await? {
                body.extend_from_slice(&chunk);
            }
            Ok::<_, Box<Error>>(Some(Message::of(session.req_header(), body)))
        };
        tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .unwrap_or_else(|_| panic!("a hang on {:?}", String::from_utf8_lossy(bytes)))
            .ok()
            .flatten()
    })
}

/// Whatever `bytes` are: refused, or one message that reads back the same once written
/// again.
fn refused_or_one_message(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Some(message) = read_one(bytes) {
        let again = read_one(&message.serialise());
        prop_assert_eq!(
            again.as_ref(),
            Some(&message),
            "read from {:?}",
            String::from_utf8_lossy(bytes)
        );
    }
    Ok(())
}

/// Bytes that matter to a head or a chunked body, and some that must never pass.
const ALPHABET: &[u8] = b"aZ09 \t\r\n:;=,\"\\/?%*-_.\x00\x01\x7f\x80\xff";

fn some_bytes(most: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(select(ALPHABET), 0..most)
}

/// A field: mostly an ordinary name and value, sometimes a framing one, or random bytes.
fn field() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let name = prop_oneof![
        8 => select(&["x-custom", "x_custom", "Connection", "expect", "te", "content-type"][..]),
        2 => select(&["host", "Host", "content-length", "transfer-encoding"][..]),
    ]
    .prop_map(|name| name.as_bytes().to_vec());
    let name = prop_oneof![9 => name, 1 => some_bytes(8)];
    let value = prop_oneof![
        8 => select(&["x", "close", "keep-alive", "100-continue", "a\u{e9}", " padded "][..]),
        2 => select(&[
            "5", "0", "5, 5", "+5", "-1", "18446744073709551616", "chunked", "Chunked",
            "gzip, chunked", "chunked, chunked", "identity",
        ][..]),
    ]
    .prop_map(|value| value.as_bytes().to_vec());
    let value = prop_oneof![9 => value, 1 => some_bytes(12)];
    (name, value)
}

/// A chunked body of `data` cut at `cuts`, each size line with an extension or not, line
/// ends chosen per line, and a trailer field or not.
fn chunked(data: &[u8], cuts: &[usize], extension: &str, end: &str, trailer: bool) -> Vec<u8> {
    let mut wire = Vec::new();
    let mut rest = data;
    let mut cuts = cuts.iter();
    while !rest.is_empty() {
        let size = cuts
            .next()
            .map_or(rest.len(), |&cut| cut.clamp(1, rest.len()));
        let (chunk, after) = rest.split_at(size);
        wire.extend_from_slice(format!("{size:x}{extension}{end}").as_bytes());
        wire.extend_from_slice(chunk);
        wire.extend_from_slice(end.as_bytes());
        rest = after;
    }
    wire.extend_from_slice(format!("0{extension}{end}").as_bytes());
    if trailer {
        wire.extend_from_slice(format!("x-trailer: t{end}").as_bytes());
    }
    wire.extend_from_slice(end.as_bytes());
    wire
}

/// The framing field and body of a message: none, a length (sometimes not the body's), or
/// chunks cut any way (extensions, line ends, a trailer), sometimes broken.
fn framed_body() -> impl Strategy<Value = (String, Vec<u8>)> {
    let extension = select(&["", ";a", ";a=\"b c\"", " ; a = b", ";a\rb", ";=", ";a=b c"][..]);
    prop_oneof![
        some_bytes(8).prop_map(|tail| (String::new(), tail)),
        (some_bytes(40), 0usize..3)
            .prop_map(|(body, off)| { (format!("content-length: {}", body.len() + off), body) }),
        (
            some_bytes(40),
            prop::collection::vec(1usize..20, 0..4),
            extension,
            prop_oneof![8 => select(&["\r\n", "\n"][..]), 1 => Just("\r\r\n")],
            any::<bool>(),
        )
            .prop_map(|(data, cuts, extension, end, trailer)| {
                let body = chunked(&data, &cuts, extension, end, trailer);
                ("transfer-encoding: chunked".into(), body)
            }),
    ]
}

/// A message assembled from likely pieces: mostly well-formed, often not quite.
fn message() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        9 => select(&["GET", "POST", "HEAD", "PUT"][..]),
        1 => select(&["X-Y", "G T", ""][..]),
    ];
    let target = prop_oneof![
        9 => select(&["/", "/v1/chat/completions?x=1", "/%zz", "*"][..]),
        1 => select(&["http://h/p", "h:443", "/a b", "/\u{e9}", ""][..]),
    ];
    let version = prop_oneof![
        9 => select(&["HTTP/1.1", "HTTP/1.0"][..]),
        1 => select(&["HTTP/2.0", "http/1.1", "HTTP/1.1 "][..]),
    ];
    let end = prop_oneof![
        9 => select(&["\r\n", "\n"][..]),
        1 => select(&["\r", "\r\r\n"][..]),
    ];
    let fields = prop::collection::vec(field(), 0..4);
    (method, target, version, end, fields, framed_body()).prop_map(
        |(method, target, version, end, fields, (framing, body))| {
            let mut wire = format!("{method} {target} {version}{end}").into_bytes();
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

/// `bytes` with a few bytes replaced, inserted or removed.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let edits = prop::collection::vec(
        (any::<prop::sample::Index>(), select(ALPHABET), 0u8..3),
        1..4,
    );
    (message(), edits).prop_map(|(mut bytes, edits)| {
        for (at, byte, kind) in edits {
            if bytes.is_empty() {
                break;
            }
            let at = at.index(bytes.len());
            match kind {
                0 => bytes[at] = byte,
                1 => bytes.insert(at, byte),
                _ => {
                    bytes.remove(at);
                }
            }
        }
        bytes
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_are_refused_or_one_message(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        refused_or_one_message(&bytes)?;
    }

    #[test]
    fn assembled_messages_are_refused_or_one_message(bytes in message()) {
        refused_or_one_message(&bytes)?;
    }

    #[test]
    fn mutated_messages_are_refused_or_one_message(bytes in mutated()) {
        refused_or_one_message(&bytes)?;
    }

    /// Chunked framing cut any way, with extensions, LF or CRLF line ends and trailers,
    /// reads back exactly the data.
    #[test]
    fn a_chunked_body_reads_back_its_data(
        data in prop::collection::vec(any::<u8>(), 0..300),
        cuts in prop::collection::vec(1usize..64, 0..8),
        extension in select(&["", ";a", ";a=b", " ; name = \"q \\\" ;\"", ";a;b=c\t"][..]),
        end in select(&["\r\n", "\n"][..]),
        trailer in any::<bool>(),
    ) {
        let mut wire = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        wire.extend_from_slice(&chunked(&data, &cuts, extension, end, trailer));
        let message = read_one(&wire);
        prop_assert_eq!(message.map(|m| m.body), Some(data));
    }
}

/// The generators are worth their cases: both outcomes come up often, so the properties
/// above test reading as much as refusing.
#[test]
fn the_generated_messages_are_often_read_and_often_refused() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for (name, strategy) in [
        ("assembled", message().boxed()),
        ("mutated", mutated().boxed()),
    ] {
        let (mut read, mut refused) = (0, 0);
        for _ in 0..400 {
            let bytes = strategy.new_tree(&mut runner).unwrap().current();
            match read_one(&bytes) {
                Some(_) => read += 1,
                None => refused += 1,
            }
        }
        assert!(
            read >= 20 && refused >= 20,
            "{name}: {read} read, {refused} refused"
        );
    }
}
