//! The rules that make the session as strict as nginx: one `chunked` coding or 501, chunk
//! lines without a bare CR, a head read no further than its limit, no chunks to HTTP/1.0.

use super::*;

#[tokio::test]
async fn transfer_encoding_is_one_chunked_coding_or_refused_501() {
    for coding in ["chunked", "Chunked", "CHUNKED", " chunked "] {
        let head =
            format!("POST / HTTP/1.1\r\ntransfer-encoding: {coding}\r\n\r\n2\r\nok\r\n0\r\n\r\n");
        let (mut session, _client) = session_after(head.as_bytes()).await;
        assert!(session.read_request().await.unwrap(), "{coding:?}");
        assert_eq!(body_of(&mut session).await, b"ok", "{coding:?}");
    }
    for fields in [
        "transfer-encoding: gzip, chunked",
        "transfer-encoding: chunked, chunked",
        "transfer-encoding: chunked, gzip",
        "transfer-encoding: chunked\r\ntransfer-encoding: chunked",
        "transfer-encoding: gzip\r\ntransfer-encoding: chunked",
        "transfer-encoding: identity",
        "transfer-encoding: chunked;q=1",
        "transfer-encoding: xchunked",
        "transfer-encoding: ",
    ] {
        let head = format!("POST / HTTP/1.1\r\n{fields}\r\n\r\n");
        let (mut session, _client) = session_after(head.as_bytes()).await;
        let error = session.read_request().await.expect_err(fields);
        assert!(
            matches!(error, Error::UnsupportedTransferCoding),
            "{fields:?}"
        );
    }
}

#[tokio::test]
async fn chunk_lines_with_a_bare_cr_are_refused() {
    for body in [
        &b"5\r\r\nhello\r\n0\r\n\r\n"[..],
        b"5;a\rb\r\nhello\r\n0\r\n\r\n",
        b"5\r\nhello\r\r\n0\r\n\r\n",
        b"5\r\nhello\r\n0\r\nx: a\rb\r\n\r\n",
    ] {
        let mut sent = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        sent.extend_from_slice(body);
        let (mut session, _client) = session_after(&sent).await;
        assert!(session.read_request().await.unwrap());
        let mut error = None;
        while error.is_none() {
            match session.read_request_body().await {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => error = Some(e),
            }
        }
        let error = error.unwrap_or_else(|| panic!("{:?} refused", String::from_utf8_lossy(body)));
        assert!(matches!(error, Error::MalformedBody(_)));
    }
}

#[tokio::test]
async fn a_head_is_read_no_further_than_its_limit() {
    // A head that ends at the limit is read; one past it is refused when the limit is
    // reached, with the rest of it never read.
    let limit = 1024;
    let mut exact = b"GET / HTTP/1.1\r\nx-pad: ".to_vec();
    exact.resize(limit - 4, b'a');
    exact.extend_from_slice(b"\r\n\r\n");
    let (client, accepted) = loopback().await;
    let mut client = client;
    client.write_all(&exact).await.unwrap();
    let mut session = Session::new(accepted, limit);
    assert!(
        session.read_request().await.unwrap(),
        "a head of exactly the limit"
    );

    let (mut client, accepted) = loopback().await;
    let mut session = Session::new(accepted, limit);
    let mut over = b"GET / HTTP/1.1\r\nx-pad: ".to_vec();
    over.resize(limit + 1, b'a');
    client.write_all(&over).await.unwrap();
    let error = session.read_request().await.expect_err("over the limit");
    assert!(matches!(error, Error::HeadTooLarge));
    assert_eq!(
        session.reader.buffered().len(),
        limit,
        "no byte past the limit is read"
    );

    // Pipelined heads beyond the limit in the buffer: each is read while it fits.
    let mut two = b"GET /a HTTP/1.1\r\n\r\n".to_vec();
    let mut second = b"GET /b HTTP/1.1\r\nx-pad: ".to_vec();
    second.resize(limit + 10, b'a');
    second.extend_from_slice(b"\r\n\r\n");
    two.extend_from_slice(&second);
    let (mut client, accepted) = loopback().await;
    client.write_all(&two).await.unwrap();
    let mut session = Session::new(accepted, limit);
    assert!(session.read_request().await.unwrap());
    assert!(answer(&mut session, b"ok").await);
    let error = session
        .read_request()
        .await
        .expect_err("the second is over");
    assert!(matches!(error, Error::HeadTooLarge));
}

#[tokio::test]
async fn an_http_1_0_client_gets_a_close_delimited_body_never_chunks() {
    let (mut session, client) =
        session_after(b"GET / HTTP/1.0\r\nconnection: keep-alive\r\n\r\n").await;
    assert!(session.read_request().await.unwrap());
    let mut header = ResponseHeader::build_no_case(200, Some(1)).unwrap();
    header
        .insert_header(header::TRANSFER_ENCODING, "chunked")
        .unwrap();
    session.write_response_header(header).await.unwrap();
    for part in [&b"data: one\n\n"[..], b"data: two\n\n"] {
        session
            .write_response_body(Bytes::from_static(part), false)
            .await
            .unwrap();
    }
    session
        .write_response_body(Bytes::new(), true)
        .await
        .unwrap();
    assert!(!session.finish().await, "the close ends the body");
    let got = received(client).await;
    let (head, body) = got.split_once("\r\n\r\n").unwrap();
    assert!(
        !head.to_ascii_lowercase().contains("transfer-encoding"),
        "{head}"
    );
    assert!(head.contains("Connection: close"), "{head}");
    assert_eq!(body, "data: one\n\ndata: two\n\n");
}

#[tokio::test]
async fn a_head_trickled_in_small_reads_never_allocates_past_its_limit() {
    // Reads of at most 64 bytes: a buffer growing by doubling would reach 1024.
    let limit = 1000;
    let (mut client, server) = tokio::io::duplex(64);
    let mut session = Session::new(Box::new(server), limit);
    let writer = tokio::spawn(async move {
        let mut over = b"GET / HTTP/1.1\r\nx-pad: ".to_vec();
        over.resize(limit + 100, b'a');
        let _ = client.write_all(&over).await;
        client
    });
    let error = session.read_request().await.expect_err("over the limit");
    assert!(matches!(error, Error::HeadTooLarge));
    assert_eq!(session.reader.buffered().len(), limit);
    assert!(
        session.reader.capacity() <= limit,
        "the head's buffer allocated {} bytes",
        session.reader.capacity()
    );
    drop(session);
    writer.await.unwrap();
}

/// An origin-form target's `Host` rules are checked as the head is read, not by pingora's
/// authority check: the two agree on every request here (methods, one to three `Host`
/// fields, userinfo anywhere in them, absent), and CONNECT and the other target forms still
/// go through pingora's.
#[tokio::test]
async fn an_origin_form_heads_host_rules_are_pingoras() {
    use pingora_core::protocols::http::authority::validate_request_authority;
    let hosts: [&[&str]; 8] = [
        &[],
        &["gw"],
        &["gw:8080"],
        &["gw", "gw"],
        &["gw", "other"],
        &["user@gw"],
        &["gw@"],
        &["gw", "gw", "gw"],
    ];
    for method in ["GET", "POST", "OPTIONS", "DELETE"] {
        for fields in hosts {
            let mut head = format!("{method} /v1/models?x=1 HTTP/1.1\r\n");
            for host in fields {
                head.push_str(&format!("Host: {host}\r\n"));
            }
            head.push_str("\r\n");
            let (mut session, _client) = session_after(head.as_bytes()).await;
            let ours = session.read_request().await;
            let mut request =
                RequestHeader::build_no_case(method, b"/v1/models?x=1", None).unwrap();
            for host in fields {
                request.append_header(header::HOST, *host).unwrap();
            }
            let pingoras = validate_request_authority(&request);
            assert_eq!(ours.is_ok(), pingoras.is_ok(), "{head:?}");
            if let Err(error) = ours {
                assert!(matches!(error, Error::MalformedHead(_)), "{head:?}");
            }
        }
    }
    // The other forms are pingora's to judge, as before.
    for head in [
        "CONNECT gw:443 HTTP/1.1\r\nHost: other:443\r\n\r\n",
        "GET http://gw/v1/models HTTP/1.1\r\nHost: other\r\n\r\n",
        "GET http://user@gw/v1/models HTTP/1.1\r\nHost: user@gw\r\n\r\n",
    ] {
        let (mut session, _client) = session_after(head.as_bytes()).await;
        assert!(
            matches!(session.read_request().await, Err(Error::MalformedHead(_))),
            "{head:?}"
        );
    }
}
