use super::*;
use std::io::BufRead;
use std::net::{TcpListener, TcpStream};

fn answer_of(bytes: &[u8]) -> Result<Answer> {
    read_answer(&mut &bytes[..], false, 64 << 10)
}

#[test]
fn the_head_names_the_path_length_and_fields() {
    let request = Request::post("http://collector:4318/v1/traces")
        .header("content-type", "application/x-protobuf")
        .header("authorization", "Bearer t")
        .header("content-length", "999")
        .body(Bytes::from_static(b"abc"))
        .unwrap();
    let head = String::from_utf8(request_head(&request)).unwrap();
    assert!(head.starts_with("POST /v1/traces HTTP/1.1\r\nhost: collector:4318\r\n"));
    assert!(head.contains("content-length: 3\r\nconnection: close\r\n"));
    assert!(
        !head.contains("999"),
        "the body's own length, not the caller's"
    );
    assert!(head.contains("content-type: application/x-protobuf\r\n"));
    assert!(head.contains("authorization: Bearer t\r\n"));
    assert!(head.ends_with("\r\n\r\n"));
}

#[test]
fn an_answer_is_read_by_its_framing() {
    let answer = answer_of(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA").unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body.as_ref(), b"ok", "its length, not what follows");
    let chunked = answer_of(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2;x=y\r\nok\r\n1\r\n!\r\n0\r\n\r\n",
    )
    .unwrap();
    assert_eq!(chunked.body.as_ref(), b"ok!", "chunks decoded");
    let closed = answer_of(b"HTTP/1.1 503 Service Unavailable\r\n\r\nbusy").unwrap();
    assert_eq!(closed.status, 503);
    assert_eq!(closed.body.as_ref(), b"busy", "until the close");
    let interim = answer_of(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n");
    assert_eq!(interim.unwrap().status, 204, "an interim head skipped");
}

#[test]
fn a_cut_or_malformed_answer_is_refused() {
    assert!(matches!(
        answer_of(b"HTTP/1.1 200 OK\r\ncontent-"),
        Err(Error::Closed(_))
    ));
    assert!(matches!(
        answer_of(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nok"),
        Err(Error::Closed(_))
    ));
    assert!(matches!(
        answer_of(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"),
        Err(Error::MalformedBody(_))
    ));
    assert!(matches!(
        answer_of(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nok"),
        Err(Error::MalformedHead(_))
    ));
    let long = format!("HTTP/1.1 200 OK\r\n\r\n{}", "a".repeat(100));
    assert!(matches!(
        read_answer(&mut long.as_bytes(), false, 64),
        Err(Error::MalformedBody(_))
    ));
}

#[test]
fn an_exchange_ends_with_its_answer_not_with_the_close() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (accepted, _) = listener.accept().unwrap();
        let mut reader = std::io::BufReader::new(accepted);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let mut body = [0u8; 3];
        reader.read_exact(&mut body).unwrap();
        let mut accepted = reader.into_inner();
        accepted
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .unwrap();
        // The connection stays open until the client is done with it.
        let mut rest = Vec::new();
        let _ = accepted.read_to_end(&mut rest);
        (head, body)
    });
    let mut stream = TcpStream::connect(address).unwrap();
    let request = Request::post(format!("http://{address}/v1/traces"))
        .body(Bytes::from_static(b"abc"))
        .unwrap();
    let answer = exchange(&mut stream, &request, 1024).unwrap();
    assert_eq!(
        (answer.status.as_u16(), answer.body.as_ref()),
        (200, &b"ok"[..])
    );
    drop(stream);
    let (head, body) = server.join().unwrap();
    assert!(head.starts_with("POST /v1/traces HTTP/1.1\r\n"), "{head}");
    assert_eq!(&body, b"abc");
}
