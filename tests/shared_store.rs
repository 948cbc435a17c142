//! What a key's calls to a real `redis-server` carry and where they go: token settlements
//! (refunds and debt) that one replica makes and another sees, the admissions and
//! settlements that gather while a call of the key is in flight, sent together in the next
//! one, and a Redis Cluster whose nodes each hold some of the keys.

mod common;
use common::redis_server::{shared_config, store, RedisCluster, RedisServer, SHARED};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_and_a_debt_settled_on_one_replica_are_seen_by_another() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    // A day's window: Redis's clock gives back about one token in 86 s, none in this test.
    let config = shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 2s\n"),
        "    tokens_per_day: 1000\n    max_concurrent: 10",
    );
    let (a, b) = (
        TestGateway::start(&config).await,
        TestGateway::start(&config).await,
    );
    let body = body_estimating(300);

    // 300 reserved on A, 10 used: 290 given back.
    mock.push(json_with_usage(
        r#"{"prompt_tokens":4,"completion_tokens":6}"#,
    ));
    let first = chat(a.addr(), SHARED, &body).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("x-ratelimit-remaining-tokens"), Some("700"));
    assert_eq!(
        redis.leases_after_settling("shared").await,
        0,
        "A's request settled"
    );

    // B sees the refund: 10 used, 300 held.
    mock.push(json_with_usage(
        r#"{"prompt_tokens":4,"completion_tokens":6}"#,
    ));
    let second = chat(b.addr(), SHARED, &body).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.header("x-ratelimit-remaining-tokens"), Some("690"));
    assert_eq!(
        redis.leases_after_settling("shared").await,
        0,
        "B's request settled"
    );

    // 2000 used against 300 reserved on A: the key owes more than its day.
    mock.push(json_with_usage(
        r#"{"prompt_tokens":1900,"completion_tokens":100}"#,
    ));
    let third = chat(a.addr(), SHARED, &body).await;
    assert_eq!(third.status, 200);
    assert_eq!(third.header("x-ratelimit-remaining-tokens"), Some("680"));
    assert_eq!(
        redis.leases_after_settling("shared").await,
        0,
        "A's overage settled"
    );

    let refused = chat(b.addr(), SHARED, &body).await;
    assert_eq!(refused.status, 429, "B sees the debt");
    assert_eq!(refused.header("x-ratelimit-remaining-tokens"), Some("0"));
    let error = refused.json();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tokens"),
        "{error}"
    );
    // 2020 tokens held and 300 more make 2320 against 1000 a day: 1320 / 1000 of a day.
    let retry_after: f64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!(
        (114_000.0..=114_048.0).contains(&retry_after),
        "retry-after {retry_after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_gather_behind_a_call_share_the_next_one() {
    let redis = RedisServer::start();
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    // A burst of 10 that refills one request a minute: exact whatever the timing.
    let gw = TestGateway::start(&shared_config(
        &mock.url(),
        &store(&redis, "  timeout: 5s\n"),
        "    requests_per_minute: 1\n    burst: 10\n    max_concurrent: 100",
    ))
    .await;
    assert_eq!(
        chat(gw.addr(), SHARED, &chat_body("chat-model"))
            .await
            .status,
        200
    );
    assert_eq!(redis.leases_after_settling("shared").await, 0);
    let calls_before = gw.metric("sluice_limits_store_duration_seconds_count");

    // Redis holds every call for 500 ms: the first admission's call waits there, and the
    // other 29 requests gather behind it.
    let mut client = redis.client().await;
    let _: String = ::redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(500)
        .arg("ALL")
        .query_async(&mut client)
        .await
        .unwrap();
    let addr = gw.addr();
    let sends: Vec<_> = (0..30)
        .map(|_| tokio::spawn(async move { chat(addr, SHARED, &chat_body("chat-model")).await }))
        .collect();
    let mut statuses = Vec::new();
    for send in sends {
        statuses.push(send.await.unwrap().status);
    }
    let admitted = statuses.iter().filter(|&&s| s == 200).count();
    let refused = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!((admitted, refused), (9, 21), "the burst's 9 left, once");
    assert_eq!(
        redis.leases_after_settling("shared").await,
        0,
        "every lease given back"
    );

    // 30 admissions and 9 settlements: 39 calls one by one. Gathered, the admissions
    // take two or three (7 or 8 calls in all here); the settlements come as the answers
    // end, one call each at worst.
    let calls = gw.metric("sluice_limits_store_duration_seconds_count") - calls_before;
    assert!(
        (2.0..=20.0).contains(&calls),
        "{calls} calls for 30 admissions and 9 settlements"
    );
    assert_eq!(gw.metric("sluice_limits_store_up"), 1.0, "no call failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_holds_each_keys_limits_on_the_node_of_its_slot() {
    let cluster = RedisCluster::start().await;
    let mock = MockUpstream::start().await;
    mock.set_default(Reply::completion());
    // One key whose slot is on each node (the first names that land there).
    let mut probe = cluster.nodes[0].client().await;
    let mut names: Vec<(String, u16)> = Vec::new();
    for n in 0.. {
        let name = format!("team{n}");
        let slot: u16 = ::redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(format!("test:sluice:{{{name}}}:requests"))
            .query_async(&mut probe)
            .await
            .unwrap();
        let node = cluster.node_of(slot).port;
        if !names.iter().any(|(_, s)| cluster.node_of(*s).port == node) {
            names.push((name, slot));
        }
        if names.len() == 3 {
            break;
        }
    }
    let secret = |name: &str| format!("sk-test-{name}-0123456789");
    let keys: String = names
        .iter()
        .map(|(name, _)| {
            format!(
                "  - name: {name}\n    sha256: {}\n    requests_per_minute: 1\n    burst: 3\n    max_concurrent: 5\n",
                key_hash(&secret(name))
            )
        })
        .collect();
    // The URL names one node; the client learns the others from it.
    let config = config_with(
        &mock.url(),
        &format!(
            "limits_store:\n  url: {}\n  cluster: true\n  timeout: 2s\n",
            cluster.nodes[0].url()
        ),
    )
    .replace("keys:\n", &format!("keys:\n{keys}"));
    let (a, b) = (
        TestGateway::start(&config).await,
        TestGateway::start(&config).await,
    );

    for (name, slot) in &names {
        let mut statuses = Vec::new();
        for i in 0..6 {
            let gw = if i % 2 == 0 { &a } else { &b };
            statuses.push(
                chat(gw.addr(), &secret(name), &chat_body("chat-model"))
                    .await
                    .status,
            );
        }
        assert_eq!(
            statuses,
            [200, 200, 200, 429, 429, 429],
            "{name}: one burst of 3 between two replicas"
        );
        // The key's state is on the node that holds its slot (the others answer MOVED).
        let held: i64 = ::redis::cmd("EXISTS")
            .arg(format!("test:sluice:{{{name}}}:requests"))
            .query_async(&mut cluster.node_of(*slot).client().await)
            .await
            .unwrap();
        assert_eq!(held, 1, "{name} is kept on the node of slot {slot}");
    }
    for gw in [&a, &b] {
        assert_eq!(gw.metric("sluice_limits_store_up"), 1.0, "no call failed");
    }
}
