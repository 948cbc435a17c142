use super::*;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

/// Both ends of a loopback connection: ours as a pingora stream, the accepted one.
async fn stream(listener: &TcpListener) -> (Stream, TcpStream) {
    let addr = listener.local_addr().unwrap();
    let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
    let client: Stream = Box::new(pingora_core::protocols::l4::stream::Stream::from(
        client.unwrap(),
    ));
    (client, accepted.unwrap().0)
}

/// A connection to a loopback listener whose accepted side writes `parts` one after
/// another (apart, so the client sees them in separate reads), then closes if asked.
async fn answered_with(parts: &[&[u8]], close: bool) -> Http1 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stream, mut server) = stream(&listener).await;
    let parts: Vec<Vec<u8>> = parts.iter().map(|p| p.to_vec()).collect();
    tokio::spawn(async move {
        for part in parts {
            server.write_all(&part).await.unwrap();
            server.flush().await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        if !close {
            // Held open until the client is done with it.
            let _ = server.read(&mut [0u8; 1]).await;
        }
    });
    Http1::new(stream)
}

async fn body_of(connection: &mut Http1) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = connection.read_body().await? {
        assert!(!chunk.is_empty(), "no empty chunk is handed out");
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[tokio::test]
async fn a_length_framed_answer_is_read_across_reads_and_the_connection_kept() {
    let mut connection = answered_with(
        &[
            b"HTTP/1.1 200 OK\r\ncontent-ty",
            b"pe: application/json\r\ncontent-length: 11\r\n\r\n{\"a\"",
            b":\"bcd\"}",
        ],
        false,
    )
    .await;
    let head = connection.read_head().await.unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(head.headers["content-type"], "application/json");
    assert_eq!(head.framing, Framing::Length(11));
    assert_eq!(body_of(&mut connection).await.unwrap(), b"{\"a\":\"bcd\"}");
    assert!(
        connection.reuse().is_ok(),
        "read whole, keep-alive: reusable"
    );
}

#[tokio::test]
async fn a_chunked_answer_loses_its_framing_extensions_and_trailers() {
    let mut connection = answered_with(
        &[
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
            b"lo\r\n6;ext=\"x\"\r\n world\r",
            b"\n0\r\nx-trailer: 1\r\n\r\n",
        ],
        false,
    )
    .await;
    let head = connection.read_head().await.unwrap();
    assert_eq!(head.framing, Framing::Chunked);
    assert_eq!(body_of(&mut connection).await.unwrap(), b"hello world");
    assert!(connection.reuse().is_ok());

    // Bare LF line ends, upper-case hex, a size split over reads.
    let mut connection = answered_with(
        &[
            b"HTTP/1.1 200 OK\ntransfer-encoding: chunked\n\n",
            b"1",
            b"A\n",
            &[b'x'; 26],
            b"\n0\n\n",
        ],
        false,
    )
    .await;
    connection.read_head().await.unwrap();
    assert_eq!(body_of(&mut connection).await.unwrap(), vec![b'x'; 26]);
    assert!(connection.reuse().is_ok());
}

#[tokio::test]
async fn malformed_chunks_are_protocol_errors() {
    for bad in [
        &b"zz\r\nhello\r\n0\r\n\r\n"[..],
        b"5 x\r\nhello\r\n0\r\n\r\n",
        b"5\r\nhello!!\r\n0\r\n\r\n",
        b"ffffffffffffffffff\r\n",
        // The one chunk-line parser the client side uses: no bare CR, well-formed
        // extensions.
        b"5\r\r\nhello\r\n0\r\n\r\n",
        b"5;a\rb\r\nhello\r\n0\r\n\r\n",
        b"5;a=b c\r\nhello\r\n0\r\n\r\n",
    ] {
        let mut connection = answered_with(
            &[
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
                bad,
            ],
            false,
        )
        .await;
        connection.read_head().await.unwrap();
        let e = body_of(&mut connection).await.unwrap_err();
        assert!(
            matches!(e, Error::MalformedBody(_)),
            "{}",
            bad.escape_ascii()
        );
    }
    let mut connection = answered_with(
        &[
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            &[b'1'; 5000],
        ],
        false,
    )
    .await;
    connection.read_head().await.unwrap();
    assert!(
        matches!(
            body_of(&mut connection).await.unwrap_err(),
            Error::MalformedBody(_)
        ),
        "a size line without end is bounded"
    );
}

#[tokio::test]
async fn a_body_cut_short_is_an_error_and_a_close_framed_one_is_not() {
    let mut connection = answered_with(
        &[b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf"],
        true,
    )
    .await;
    connection.read_head().await.unwrap();
    let e = body_of(&mut connection).await.unwrap_err();
    assert!(matches!(e, Error::Closed(_)));

    let mut connection = answered_with(
        &[b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel"],
        true,
    )
    .await;
    connection.read_head().await.unwrap();
    assert!(
        body_of(&mut connection).await.is_err(),
        "a chunked body cut"
    );

    let mut connection = answered_with(&[b"HTTP/1.1 200 OK\r\n\r\nuntil", b" the end"], true).await;
    let head = connection.read_head().await.unwrap();
    assert_eq!(head.framing, Framing::Close);
    assert_eq!(body_of(&mut connection).await.unwrap(), b"until the end");
    assert!(connection.reuse().is_err(), "its end was the connection's");
}

#[tokio::test]
async fn interim_heads_are_skipped_and_a_101_is_refused() {
    let mut connection = answered_with(
        &[
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n",
            b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok",
        ],
        false,
    )
    .await;
    let head = connection.read_head().await.unwrap();
    assert_eq!(head.status, 201);
    assert!(
        head.headers.get("link").is_none(),
        "the interim head's fields are not kept"
    );
    assert_eq!(body_of(&mut connection).await.unwrap(), b"ok");

    let mut connection = answered_with(
        &[b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n"],
        false,
    )
    .await;
    assert!(matches!(
        connection.read_head().await.unwrap_err(),
        Error::MalformedHead(_)
    ),);
}

#[tokio::test]
async fn heads_that_cannot_be_read_are_refused() {
    let huge = format!(
        "HTTP/1.1 200 OK\r\nx-big: {}\r\n",
        "a".repeat(MAX_HEAD_BYTES + 10)
    );
    for (raw, what) in [
        (
            &b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n"[..],
            "lengths that disagree",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
            "a coding other than chunked",
        ),
        (b"HTTP/1.1 2000 OK\r\n\r\n", "a four-digit status"),
        (b"SMTP ready\r\n\r\n", "not HTTP"),
        (huge.as_bytes(), "a head over the limit"),
    ] {
        let mut connection = answered_with(&[raw], false).await;
        let e = connection.read_head().await.unwrap_err();
        assert!(matches!(e, Error::MalformedHead(_)), "{what}");
    }
    let mut connection = answered_with(&[b"HTTP/1.1 200 OK\r\n"], true).await;
    let e = connection.read_head().await.unwrap_err();
    assert!(matches!(e, Error::Closed(_)), "closed inside the head");
}

#[tokio::test]
async fn a_connection_is_kept_only_when_both_ends_may_keep_it() {
    for (raw, reusable, what) in [
        (
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            true,
            "HTTP/1.1 keeps by default",
        ),
        (
            b"HTTP/1.1 200 OK\r\nconnection: Close\r\ncontent-length: 0\r\n\r\n",
            false,
            "close",
        ),
        (
            b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n",
            false,
            "HTTP/1.0 closes by default",
        ),
        (
            b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n",
            true,
            "HTTP/1.0 asked to keep",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA",
            false,
            "bytes after the body",
        ),
        (
            b"HTTP/1.1 204 No Content\r\n\r\n",
            true,
            "no body by its status",
        ),
    ] {
        let mut connection = answered_with(&[raw], false).await;
        connection.read_head().await.unwrap();
        let body = body_of(&mut connection).await.unwrap();
        assert!(body.len() <= 2, "{what}");
        assert_eq!(connection.reuse().is_ok(), reusable, "{what}");
    }
    let mut connection =
        answered_with(&[b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"], false).await;
    connection.read_head().await.unwrap();
    assert!(connection.reuse().is_err(), "an answer not read whole");
}

#[tokio::test]
async fn the_request_goes_out_as_written_and_a_head_request_has_no_body_back() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stream, mut server) = stream(&listener).await;
    let mut connection = Http1::new(stream);
    let head = b"HEAD /v1/models?x=1 HTTP/1.1\r\nhost: up.example\r\ncontent-length: 4\r\n\r\n";
    connection
        .send(head, true, &Bytes::from_static(b"body"))
        .await
        .unwrap();
    let mut received = vec![0u8; 4096];
    let mut length = 0;
    while !received[..length].ends_with(b"body") {
        length += server.read(&mut received[length..]).await.unwrap();
    }
    assert_eq!(
        &received[..length],
        b"HEAD /v1/models?x=1 HTTP/1.1\r\nhost: up.example\r\ncontent-length: 4\r\n\r\nbody"
    );
    server
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 40\r\n\r\n")
        .await
        .unwrap();
    connection.read_head().await.unwrap();
    assert!(body_of(&mut connection).await.unwrap().is_empty());
    assert!(
        connection.reuse().is_ok(),
        "nothing more to read after a HEAD answer"
    );
}

mod properties;
