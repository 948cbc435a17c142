use super::*;
use crate::listener::BufferedStream;
use pingora_core::protocols::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A connection on loopback: the accepted end as ours, and the client's socket.
async fn accepted() -> (PlainStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (client, accepted) = tokio::join!(
        TcpStream::connect(listener.local_addr().unwrap()),
        listener.accept()
    );
    (PlainStream::new(accepted.unwrap().0), client.unwrap())
}

#[tokio::test]
async fn the_digest_reports_both_ends_of_the_socket() {
    let (stream, client) = accepted().await;
    let digest = stream.get_socket_digest().expect("every stream has one");
    let peer = digest.peer_addr().and_then(|a| a.as_inet()).copied();
    let local = digest.local_addr().and_then(|a| a.as_inet()).copied();
    assert_eq!(peer, Some(client.local_addr().unwrap()), "the client's end");
    assert_eq!(
        local,
        Some(client.peer_addr().unwrap()),
        "the listener's end"
    );
    assert_eq!(stream.id(), stream.tcp().as_raw_fd());
    assert!(stream.get_ssl_digest().is_none() && stream.selected_alpn_proto().is_none());
}

#[tokio::test]
async fn a_digest_given_is_the_one_reported() {
    let (stream, _client) = accepted().await;
    let made = SocketDigest::from_raw_fd(stream.tcp().as_raw_fd());
    let known: std::net::SocketAddr = "192.0.2.7:4000".parse().unwrap();
    made.peer_addr
        .set(Some(pingora_core::protocols::l4::socket::SocketAddr::Inet(
            known,
        )))
        .unwrap();
    let (tcp, socket) = (stream.tcp, made);
    let stream = PlainStream::with_digest(tcp, socket);
    let digest = stream.get_socket_digest().unwrap();
    assert_eq!(
        digest.peer_addr().and_then(|a| a.as_inet()).copied(),
        Some(known),
        "not asked of the kernel"
    );
}

#[tokio::test]
async fn shutdown_ends_the_writes_after_what_was_written_and_reads_go_on() {
    let (mut stream, mut client) = accepted().await;
    stream.write_all(b"answer").await.unwrap();
    Shutdown::shutdown(&mut stream).await;
    let mut received = Vec::new();
    client.read_to_end(&mut received).await.unwrap();
    assert_eq!(received, b"answer", "written, then the end of the stream");
    // Half closed: the client can still send, and it is read.
    client.write_all(b"more").await.unwrap();
    let mut more = [0u8; 4];
    stream.read_exact(&mut more).await.unwrap();
    assert_eq!(&more, b"more");
}

#[tokio::test]
async fn a_stream_dropped_after_a_flush_loses_nothing_written() {
    let (stream, mut client) = accepted().await;
    // As the listener uses it: boxed as pingora's stream, under the write buffer.
    let mut buffered = BufferedStream::new(Box::new(stream) as Stream);
    buffered.write_all(b"head and body").await.unwrap();
    buffered.flush().await.unwrap();
    drop(buffered);
    let mut received = Vec::new();
    client.read_to_end(&mut received).await.unwrap();
    assert_eq!(received, b"head and body");
}

#[tokio::test]
async fn vectored_writes_reach_the_socket_whole() {
    let (mut stream, mut client) = accepted().await;
    assert!(stream.is_write_vectored());
    let parts = [IoSlice::new(b"one "), IoSlice::new(b"two")];
    let wrote = stream.write_vectored(&parts).await.unwrap();
    drop(stream);
    let mut received = Vec::new();
    client.read_to_end(&mut received).await.unwrap();
    assert_eq!(&received[..], &b"one two"[..wrote]);
}
