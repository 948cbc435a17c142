use super::*;
use crate::listener::PlainStream;
use std::time::Duration;
use tokio::net::TcpListener;

fn plain_peer(addr: std::net::SocketAddr) -> HttpPeer {
    let mut peer = HttpPeer::new(addr, false, String::new());
    peer.options.connection_timeout = Some(Duration::from_secs(10));
    peer.options.total_connection_timeout = Some(Duration::from_secs(10));
    peer
}

#[tokio::test]
async fn a_plain_peer_is_connected_as_our_stream_with_its_address_known() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connector = crate::upstream::pool::connector();
    let peer = plain_peer(addr);
    let (stream, accepted) = tokio::join!(connect(&connector, &peer), listener.accept());
    let stream = stream.unwrap();
    let (_server, client_addr) = accepted.unwrap();
    let plain = stream
        .as_any()
        .downcast_ref::<PlainStream>()
        .expect("plain TCP is ours, not pingora's stream");
    assert!(plain.tcp().nodelay().unwrap(), "TCP_NODELAY, as pingora's");
    let digest = stream.get_socket_digest().unwrap();
    assert_eq!(digest.peer_addr().and_then(|a| a.as_inet()), Some(&addr));
    assert_eq!(
        digest.local_addr().and_then(|a| a.as_inet()),
        Some(&client_addr)
    );
}

#[tokio::test]
async fn a_refused_connection_fails_as_pingoras_connector_fails() {
    let addr = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let peer = plain_peer(addr);
    let connector = crate::upstream::pool::connector();
    let ours = connect(&connector, &peer).await.unwrap_err();
    let pingoras = connector.new_stream(&peer).await.unwrap_err();
    assert_eq!(ours.etype(), &ErrorType::ConnectRefused);
    assert_eq!(ours.etype(), pingoras.etype());
}

#[test]
fn a_peer_that_asks_more_of_its_socket_is_left_to_pingora() {
    let addr: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    assert_eq!(plain_address(&plain_peer(addr)), Some(addr));
    let tls = HttpPeer::new(addr, true, "upstream.test".into());
    assert_eq!(plain_address(&tls), None, "TLS");
    let mut fast_open = plain_peer(addr);
    fast_open.options.tcp_fast_open = true;
    assert_eq!(plain_address(&fast_open), None, "fast open");
    let mut bound = plain_peer(addr);
    bound.options.bind_to = Some(Default::default());
    assert_eq!(plain_address(&bound), None, "a source address");
    let mut buffer = plain_peer(addr);
    buffer.options.tcp_recv_buf = Some(1 << 20);
    assert_eq!(plain_address(&buffer), None, "a receive buffer");
}
