//! A large upload with its `model` field after the file: it reaches the upstream
//! byte-identical, and the gateway does not hold it in memory (the spool moves to an
//! unlinked temporary file past 1 MiB). Alone in its test binary, so the process's memory
//! is this test's only.

mod common;
use common::*;

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20_mb_upload_with_the_model_last_arrives_whole_without_being_held() {
    let mock = MockUpstream::start().await;
    mock.digest_bodies();
    let config = format!(
        r#"
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
max_body_bytes: 32MiB
upstreams:
  - name: mock
    url: {url}
models:
  - id: whisper
    upstream: mock
    endpoint_type: audio_transcription
keys:
  - name: alpha
    sha256: {alpha}
"#,
        url = mock.url(),
        alpha = key_hash(ALPHA),
    );
    let gw = TestGateway::start(&config).await;
    let file: Vec<u8> = (0..20u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut body =
        b"--zz\r\ncontent-disposition: form-data; name=\"file\"; filename=\"long.flac\"\r\n\r\n"
            .to_vec();
    body.extend_from_slice(&file);
    body.extend_from_slice(
        b"\r\n--zz\r\ncontent-disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n--zz--\r\n",
    );
    drop(file);
    let request = request_bytes(
        "POST",
        "/v1/audio/transcriptions",
        &[
            ("authorization", &format!("Bearer {ALPHA}")),
            ("content-type", "multipart/form-data; boundary=zz"),
        ],
        &body,
    );
    let before = resident_bytes();
    let mut conn = Conn::open(gw.addr()).await;
    conn.write(&request).await;
    let response = conn.read_response().await.expect("an answer");
    let grown = resident_bytes().saturating_sub(before);
    assert_eq!(response.status, 200, "{}", response.text());
    use sha2::{Digest, Sha256};
    assert_eq!(
        mock.requests()[0].body,
        Sha256::digest(&body).to_vec(),
        "the upstream received the upload byte for byte"
    );
    assert!(
        grown < 12 << 20,
        "the 20 MiB upload was not held in memory: resident memory grew {} MiB",
        grown >> 20
    );
}
