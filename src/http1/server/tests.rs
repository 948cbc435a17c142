use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A session on the accepted side of a loopback connection, and the client's side, on
/// which `sent` was written.
async fn session_after(sent: &[u8]) -> (Session, TcpStream) {
    let (mut client, accepted) = loopback().await;
    client.write_all(sent).await.unwrap();
    (Session::new(accepted, DEFAULT_MAX_HEAD_BYTES), client)
}

/// Both ends of a loopback connection: the client's, and the accepted one as a stream.
async fn loopback() -> (TcpStream, Stream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
    let stream: Stream = Box::new(pingora_core::protocols::l4::stream::Stream::from(
        accepted.unwrap().0,
    ));
    (client.unwrap(), stream)
}

async fn body_of(session: &mut Session) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(chunk) = session.read_request_body().await.unwrap() {
        body.extend_from_slice(&chunk);
    }
    body
}

/// Answers 200 with `body` (by its length) and ends the request: whether the connection
/// is kept.
async fn answer(session: &mut Session, body: &'static [u8]) -> bool {
    let mut header = ResponseHeader::build_no_case(200, Some(1)).unwrap();
    header
        .insert_header(header::CONTENT_LENGTH, body.len())
        .unwrap();
    session.write_response_header(header).await.unwrap();
    session
        .write_response_body(Bytes::from_static(body), true)
        .await
        .unwrap();
    session.finish().await
}

/// What the client received until the connection closed.
async fn received(mut client: TcpStream) -> String {
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    String::from_utf8(got).unwrap()
}

#[tokio::test]
async fn pipelined_requests_are_read_in_order_with_their_bodies() {
    let (mut session, client) = session_after(
        b"POST /v1/a?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nX-Custom: v\r\n\r\nhello\
          GET /v1/b HTTP/1.1\r\nhost: h\r\n\r\n\
          POST /v1/c HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n\
          3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\ntrailer: t\r\n\r\n",
    )
    .await;
    assert!(session.read_request().await.unwrap());
    let request = session.req_header();
    assert_eq!(
        (request.method.as_str(), request.uri.to_string().as_str()),
        ("POST", "/v1/a?x=1")
    );
    assert_eq!(request.headers["x-custom"], "v");
    assert!(!session.is_body_done(), "the body is not read yet");
    assert_eq!(body_of(&mut session).await, b"hello");
    assert!(
        answer(&mut session, b"one").await,
        "kept for the next request"
    );

    assert!(session.read_request().await.unwrap());
    assert_eq!(session.req_header().uri.path(), "/v1/b");
    assert!(session.is_body_done(), "no body without a length");
    assert!(answer(&mut session, b"two").await);

    assert!(session.read_request().await.unwrap());
    assert_eq!(session.req_header().uri.path(), "/v1/c");
    assert_eq!(
        body_of(&mut session).await,
        b"abcde",
        "chunk framing taken off"
    );
    assert!(
        !answer(&mut session, b"three").await,
        "the client asked to close"
    );

    let got = received(client).await;
    let answers: Vec<&str> = got.split("HTTP/1.1 200 OK\r\n").skip(1).collect();
    assert_eq!(answers.len(), 3, "{got}");
    assert!(
        answers[0].contains("Connection: keep-alive\r\n") && answers[0].ends_with("\r\n\r\none")
    );
    assert!(answers[0].contains("Date: "), "{got}");
    assert!(answers[2].contains("Connection: close\r\n"), "{got}");
}

#[tokio::test]
async fn heads_with_ambiguous_framing_or_authority_are_refused() {
    let refused: [&[u8]; 6] = [
        b"POST / HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
        b"POST / HTTP/1.1\r\ncontent-length: +5\r\n\r\n",
        b"POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n",
        b"GET / HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n",
        b"GET http://a/ HTTP/1.1\r\nhost: b\r\n\r\n",
        b"GET / HTTP/2.0\r\n\r\n",
    ];
    for (i, head) in refused.iter().enumerate() {
        let (mut session, _client) = session_after(head).await;
        let error = session
            .read_request()
            .await
            .expect_err(&format!("case {i}"));
        assert!(matches!(error, Error::MalformedHead(_)), "case {i}");
    }
    // Identical lengths are one length.
    let (mut session, _client) =
        session_after(b"POST / HTTP/1.1\r\ncontent-length: 2, 2\r\ncontent-length: 2\r\n\r\nok")
            .await;
    assert!(session.read_request().await.unwrap());
    assert_eq!(body_of(&mut session).await, b"ok");
}

#[tokio::test]
async fn a_head_over_its_limit_is_refused_and_a_client_that_leaves_is_let_go() {
    let mut huge = b"GET / HTTP/1.1\r\nx-big: ".to_vec();
    huge.resize(DEFAULT_MAX_HEAD_BYTES + 2, b'a');
    let (mut session, _client) = session_after(&huge).await;
    let error = session.read_request().await.expect_err("over the limit");
    assert!(matches!(error, Error::HeadTooLarge));

    let (mut session, client) = session_after(b"").await;
    drop(client);
    assert!(
        !session.read_request().await.unwrap(),
        "closed before a head"
    );

    let (mut session, client) = session_after(b"GET / HT").await;
    drop(client);
    let error = session
        .read_request()
        .await
        .expect_err("closed inside a head");
    assert!(matches!(error, Error::Closed(_)));
}

#[tokio::test]
async fn both_framings_read_chunked_and_the_connection_closes_after() {
    let (mut session, client) = session_after(
        b"POST / HTTP/1.1\r\ncontent-length: 50\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    )
    .await;
    assert!(session.read_request().await.unwrap());
    assert!(!session
        .req_header()
        .headers
        .contains_key(header::CONTENT_LENGTH));
    assert_eq!(body_of(&mut session).await, b"ok");
    assert!(!answer(&mut session, b"").await);
    assert!(received(client).await.contains("Connection: close\r\n"));
}

#[tokio::test]
async fn http_1_0_is_kept_only_when_it_asks() {
    let (mut session, client) = session_after(b"GET / HTTP/1.0\r\n\r\n").await;
    assert!(session.read_request().await.unwrap());
    assert!(!answer(&mut session, b"x").await);
    assert!(received(client).await.contains("Connection: close\r\n"));

    let (mut session, _client) =
        session_after(b"GET / HTTP/1.0\r\nconnection: Keep-Alive\r\n\r\n").await;
    assert!(session.read_request().await.unwrap());
    assert!(answer(&mut session, b"x").await);
}

#[tokio::test]
async fn an_answer_before_the_body_is_read_closes_the_connection() {
    let (mut session, client) =
        session_after(b"POST / HTTP/1.1\r\ncontent-length: 10\r\n\r\n12345").await;
    assert!(session.read_request().await.unwrap());
    assert!(
        !answer(&mut session, b"early").await,
        "the unread rest is not a request"
    );
    assert!(received(client).await.contains("Connection: close\r\n"));
}

#[tokio::test]
async fn answers_are_framed_by_their_fields() {
    let (mut session, client) = session_after(
        b"GET /stream HTTP/1.1\r\n\r\nHEAD / HTTP/1.1\r\n\r\nGET /gone HTTP/1.1\r\nconnection: close\r\n\r\n",
    )
    .await;
    // Chunked: each piece a chunk, flushed, the last chunk at the end; an upstream's
    // `Date` and `Connection` replaced.
    assert!(session.read_request().await.unwrap());
    let mut header = ResponseHeader::build_no_case(200, Some(3)).unwrap();
    header
        .insert_header(header::TRANSFER_ENCODING, "chunked")
        .unwrap();
    header.insert_header(header::DATE, "yesterday").unwrap();
    header.insert_header(header::CONNECTION, "upgrade").unwrap();
    session.write_response_header(header).await.unwrap();
    for piece in ["data: 1\n\n", "", "data: 22\n\n"] {
        session
            .write_response_body(Bytes::from(piece), false)
            .await
            .unwrap();
    }
    session
        .write_response_body(Bytes::new(), true)
        .await
        .unwrap();
    assert!(session.finish().await);
    // HEAD: the length said, no body sent.
    assert!(session.read_request().await.unwrap());
    assert!(answer(&mut session, b"not sent").await);
    // A `Content-Length` short of its body: an error, and the connection is not kept.
    assert!(session.read_request().await.unwrap());
    let mut header = ResponseHeader::build_no_case(200, Some(1)).unwrap();
    header.insert_header(header::CONTENT_LENGTH, 10).unwrap();
    session.write_response_header(header).await.unwrap();
    let short = session.write_response_body(Bytes::from("abc"), true).await;
    assert!(short.is_err(), "ended short of its length");
    assert!(!session.finish().await);

    let got = received(client).await;
    let (stream, rest) = got.split_once("0\r\n\r\n").expect("a last chunk");
    assert!(
        stream.ends_with("\r\n\r\n9\r\ndata: 1\n\n\r\nA\r\ndata: 22\n\n\r\n"),
        "{stream}"
    );
    assert!(
        !stream.contains("yesterday") && !stream.contains("upgrade"),
        "{stream}"
    );
    assert!(
        stream.contains("Transfer-Encoding: chunked\r\n"),
        "{stream}"
    );
    let (head, rest) = rest.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("Content-Length: 8"), "{head}");
    assert!(
        rest.starts_with("HTTP/1.1 200 OK\r\n"),
        "no body after a HEAD's head: {rest}"
    );
    assert!(rest.ends_with("\r\n\r\nabc"), "{rest}");
}

#[tokio::test]
async fn while_waiting_a_close_is_seen_and_a_next_request_kept() {
    let (mut session, mut client) = session_after(b"GET /one HTTP/1.1\r\n\r\n").await;
    assert!(session.read_request().await.unwrap());
    client
        .write_all(b"GET /two HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(200), session.client_gone()).await;
    assert!(
        waited.is_err(),
        "bytes of the next request are no reason to stop waiting"
    );
    assert!(answer(&mut session, b"1").await);
    assert!(session.read_request().await.unwrap());
    assert_eq!(session.req_header().uri.path(), "/two");

    client.shutdown().await.unwrap();
    let error = session.client_gone().await;
    assert!(matches!(error, Error::Closed(_)));
    assert!(
        !answer(&mut session, b"2").await,
        "not kept after a half close"
    );
}

#[tokio::test]
async fn an_expectation_is_answered_once_and_a_refusal_closes() {
    let (mut session, client) =
        session_after(b"POST / HTTP/1.1\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\nok")
            .await;
    assert!(session.read_request().await.unwrap());
    session.write_continue_response().await.unwrap();
    assert_eq!(body_of(&mut session).await, b"ok");
    session.respond_error(400).await.unwrap();
    session.write_continue_response().await.unwrap();
    assert!(!session.finish().await);
    let got = received(client).await;
    assert!(
        got.starts_with("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 400 Bad Request\r\n"),
        "{got}"
    );
    assert_eq!(got.matches("100 Continue").count(), 1, "{got}");
    assert!(got.contains("Content-Length: 0\r\n") && got.contains("Connection: close\r\n"));
}

#[test]
fn a_head_is_parsed_when_its_request_line_or_a_blank_line_may_have_arrived() {
    let head = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n";
    let line = b"GET / HTTP/1.1\r\n".len();
    assert!(worth_parsing(&head[..line], 0), "the request line ended");
    assert!(!worth_parsing(&head[..line - 1], 0), "not yet");
    assert!(
        !worth_parsing(&head[..line + 9], line),
        "a field line, no blank line"
    );
    for split in line..head.len() {
        assert!(
            worth_parsing(head, split),
            "a blank line ends what was read after {split}"
        );
    }
    let bare = b"GET / HTTP/1.1\nhost: x\n\n";
    assert!(worth_parsing(bare, bare.len() - 1), "bare line ends");
    assert!(worth_parsing(b"PRI * HTTP/2.0\r\n", 3), "a line to refuse");
}

#[tokio::test]
async fn a_head_trickled_in_pieces_is_read_whole() {
    let (mut session, mut client) = session_after(b"").await;
    let pieces: [&[u8]; 6] = [
        b"POST /v1/x HTTP/1.1\r",
        b"\nhost: x\r\ncontent-",
        b"length: 2\r\n",
        b"\r",
        b"\n",
        b"ok",
    ];
    tokio::spawn(async move {
        for piece in pieces {
            client.write_all(piece).await.unwrap();
            client.flush().await.unwrap();
            // Apart, so the session sees them in separate reads.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = client.read(&mut [0u8; 1]).await;
    });
    assert!(session.read_request().await.unwrap());
    assert_eq!(session.req_header().uri.path(), "/v1/x");
    assert_eq!(body_of(&mut session).await, b"ok");

    let (mut session, _client) = session_after(b"NOT A REQUEST LINE\r\n").await;
    let error = session
        .read_request()
        .await
        .expect_err("refused at its first line");
    assert!(matches!(error, Error::MalformedHead(_)));
}

#[tokio::test]
async fn an_http_1_0_client_gets_no_interim_answer() {
    let (mut session, client) =
        session_after(b"POST / HTTP/1.0\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\nok")
            .await;
    assert!(session.read_request().await.unwrap());
    session.write_continue_response().await.unwrap();
    assert_eq!(body_of(&mut session).await, b"ok");
    assert!(!answer(&mut session, b"done").await);
    let got = received(client).await;
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
}

/// Heads mangled at random (bytes replaced, cut short), each sent and the connection
/// half-closed: every one is read, refused or given up, never a panic or a hang.
#[tokio::test]
async fn mangled_heads_are_read_or_refused_never_a_panic() {
    let base: &[u8] = b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n2\r\nok\r\n0\r\n\r\n";
    let alphabet: &[u8] = b"\r\n :;,/?%\t\x00\x7f\x80\xffaZ0-9chunked";
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        // xorshift64: the same cases on every run.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut read, mut refused) = (0, 0);
    for case in 0..300 {
        let mut head = base.to_vec();
        for _ in 0..1 + next() % 4 {
            let at = (next() as usize) % head.len();
            head[at] = alphabet[(next() as usize) % alphabet.len()];
        }
        if case % 5 == 0 {
            head.truncate((next() as usize) % head.len());
        }
        let (mut session, mut client) = session_after(&head).await;
        client.shutdown().await.unwrap();
        let outcome = tokio::time::timeout(Duration::from_secs(5), async {
            if session.read_request().await? {
                while session.read_request_body().await?.is_some() {}
            }
            Ok::<(), Box<Error>>(())
        })
        .await;
        match outcome {
            Ok(Ok(())) => read += 1,
            Ok(Err(_)) => refused += 1,
            Err(_) => panic!("case {case} hung: {:?}", String::from_utf8_lossy(&head)),
        }
    }
    assert!(read > 30 && refused > 30, "{read} read, {refused} refused");
}

mod properties;
mod strict;
