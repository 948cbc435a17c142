//! The store's Redis connection: one endpoint (a primary, or a proxy in front of several)
//! through a connection manager that reconnects, or a Redis Cluster, whose client learns
//! the slots' nodes from the URL's and sends each call to the node that holds its key's
//! slot (following `MOVED` as slots move).

use crate::config::LimitsStoreConfig;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult, Value};
use std::time::Duration;

/// What connects to the store, built from its configuration (no connection yet). One per
/// process: the size of its variants does not matter.
#[allow(clippy::large_enum_variant)]
pub(super) enum Client {
    Single(redis::Client),
    Cluster(ClusterClient),
}

/// A connection to the store, cheap to clone (each clone shares one multiplexed link).
#[derive(Clone)]
pub(super) enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Client {
    pub(super) fn new(config: &LimitsStoreConfig) -> RedisResult<Client> {
        let mut info = config.url.as_str().into_connection_info()?;
        if let Some(password) = &config.password {
            let settings = info
                .redis_settings()
                .clone()
                .set_password(password.expose());
            info = info.set_redis_settings(settings);
        }
        // A `rediss://` store signed by its own CA (`ca_file`) instead of the system's.
        let certificates = config.ca.as_ref().map(|ca| redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca.clone()),
        });
        if config.cluster {
            let mut builder = ClusterClient::builder([info])
                .connection_timeout(config.timeout)
                .response_timeout(config.timeout)
                .retries(1)
                .max_retry_wait(500);
            if let Some(password) = &config.password {
                builder = builder.password(password.expose());
            }
            if let Some(certificates) = certificates {
                builder = builder.certs(certificates);
            }
            return Ok(Client::Cluster(builder.build()?));
        }
        Ok(Client::Single(match certificates {
            Some(certificates) => redis::Client::build_with_tls(info, certificates)?,
            None => redis::Client::open(info)?,
        }))
    }

    /// Connects: at once for a cluster (its slots are learnt now), lazily for one
    /// endpoint (the manager connects on first use and reconnects with backoff).
    pub(super) async fn connect(&self, timeout: Duration) -> RedisResult<Connection> {
        match self {
            Client::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_millis(500));
                ConnectionManager::new_lazy_with_config(client.clone(), config)
                    .map(Connection::Single)
            }
            Client::Cluster(client) => client.get_async_connection().await.map(Connection::Cluster),
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}
