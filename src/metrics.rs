//! Every Prometheus series the gateway exports, in one owned registry (no globals, so tests
//! run several gateways in one process). Labels come only from configuration and fixed sets.

mod key_info;
mod labels;
mod tls;

use crate::catalog::Key;
use key_info::KeyInfo;
use labels::{ANONYMOUS_CODES, KEY_CODES, UPSTREAM_CODES};
pub use labels::{CONNECT_FAILED, RATE_LIMITED, RESEND_REASONS, UNKNOWN};
use prometheus::{
    exponential_buckets, CounterVec, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter,
    IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::sync::Arc;
pub use tls::TlsMetrics;

pub struct Metrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub request_duration: HistogramVec,
    pub overhead: Histogram,
    pub upstream_ttfb: HistogramVec,
    pub in_flight: IntGaugeVec,
    pub rejections: IntCounterVec,
    pub upstream_errors: IntCounterVec,
    pub config_reloads: IntCounterVec,
    pub upstream_in_flight: IntGaugeVec,
    pub upstream_available: IntGaugeVec,
    pub upstream_ejections: IntCounterVec,
    pub upstream_cooldowns: IntCounterVec,
    pub upstream_retries: IntCounterVec,
    pub model_fallbacks: IntCounterVec,
    pub upstream_queue: HistogramVec,
    pub tokens: IntCounterVec,
    /// Money spent, in USD, by key and model (priced models only).
    pub spend: CounterVec,
    pub usage_missing: IntCounterVec,
    pub usage_implausible: IntCounterVec,
    /// Streams whose edits stopped at an event over the bound of what is held.
    pub stream_edits_skipped: IntCounterVec,
    pub limits_store_up: IntGauge,
    pub limits_store_errors: IntCounterVec,
    pub limits_store_duration: Histogram,
    pub upstream_health_checks: IntCounterVec,
    pub access_log_dropped: IntGauge,
    /// Spans not exported: the export queue was full, or their export failed.
    pub trace_spans_dropped: IntCounter,
    pub config_generation: IntGauge,
    pub config_last_success: IntGauge,
    pub key_expiry: IntGaugeVec,
    key_info: KeyInfo,
    pub tls: TlsMetrics,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        // Whole requests and time to first byte: LLM calls take milliseconds to minutes.
        let llm_buckets = exponential_buckets(0.005, 2.0, 18).expect("static buckets");
        // The gateway's own share: microseconds to a few milliseconds.
        let overhead_buckets = exponential_buckets(0.000_01, 2.0, 16).expect("static buckets");
        let requests = IntCounterVec::new(
            Opts::new(
                "sluice_requests_total",
                "Requests answered, by key, model and HTTP status.",
            ),
            &["key", "model", "status"],
        )
        .expect("valid metric");
        let request_duration = HistogramVec::new(
            HistogramOpts::new(
                "sluice_request_duration_seconds",
                "Whole request time, first byte in to last byte out.",
            )
            .buckets(llm_buckets.clone()),
            &["model"],
        )
        .expect("valid metric");
        let overhead = Histogram::with_opts(
            HistogramOpts::new(
                "sluice_overhead_seconds",
                "Request time minus time spent waiting for the upstream.",
            )
            .buckets(overhead_buckets),
        )
        .expect("valid metric");
        let upstream_ttfb = HistogramVec::new(
            HistogramOpts::new(
                "sluice_upstream_ttfb_seconds",
                "Time from sending a request upstream to its response header.",
            )
            .buckets(llm_buckets),
            &["upstream"],
        )
        .expect("valid metric");
        let in_flight = IntGaugeVec::new(
            Opts::new(
                "sluice_in_flight_requests",
                "Requests of a key being served now (streams count to their end).",
            ),
            &["key"],
        )
        .expect("valid metric");
        let rejections = IntCounterVec::new(
            Opts::new(
                "sluice_rejections_total",
                "Gateway-made error answers, by key and error code.",
            ),
            &["key", "code"],
        )
        .expect("valid metric");
        let upstream_errors = IntCounterVec::new(
            Opts::new(
                "sluice_upstream_errors_total",
                "Failures talking to an upstream, by error code.",
            ),
            &["upstream", "code"],
        )
        .expect("valid metric");
        let stream_edits_skipped = IntCounterVec::new(
            Opts::new(
                "sluice_stream_edits_skipped_total",
                "Edited streams (usage taken out, IDs rewritten) with an event over 1 MiB: the rest passed unedited.",
            ),
            &["upstream"],
        )
        .expect("valid metric");
        let config_reloads = IntCounterVec::new(
            Opts::new(
                "sluice_config_reloads_total",
                "Configuration loads after start, by result.",
            ),
            &["result"],
        )
        .expect("valid metric");
        let config_generation = IntGauge::new(
            "sluice_config_generation",
            "Generation of the catalog being served (1 at start).",
        )
        .expect("valid metric");
        let config_last_success = IntGauge::new(
            "sluice_config_last_success_timestamp_seconds",
            "Unix time of the last configuration load that succeeded.",
        )
        .expect("valid metric");
        let upstream_in_flight = IntGaugeVec::new(
            Opts::new(
                "sluice_upstream_in_flight_requests",
                "Requests being sent to or answered by an upstream now.",
            ),
            &["upstream"],
        )
        .expect("valid metric");
        let upstream_available = IntGaugeVec::new(
            Opts::new(
                "sluice_upstream_available",
                "1 while an upstream takes requests, 0 while it is ejected or cooling down (as of the scrape).",
            ),
            &["upstream"],
        )
        .expect("valid metric");
        let upstream_ejections = IntCounterVec::new(
            Opts::new(
                "sluice_upstream_ejections_total",
                "Times an upstream was ejected after consecutive failures.",
            ),
            &["upstream"],
        )
        .expect("valid metric");
        let upstream_cooldowns = IntCounterVec::new(
            Opts::new(
                "sluice_upstream_cooldowns_total",
                "Times an upstream answered 429 and was cooled down.",
            ),
            &["upstream"],
        )
        .expect("valid metric");
        let upstream_retries = IntCounterVec::new(
            Opts::new(
                "sluice_upstream_retries_total",
                "Requests sent again, to another target, after a failure the upstream's retry_on names.",
            ),
            &["upstream", "reason"],
        )
        .expect("valid metric");
        let tokens = IntCounterVec::new(
            Opts::new(
                "sluice_tokens_total",
                "Tokens that answers reported using, by key, model and kind (input, output).",
            ),
            &["key", "model", "kind"],
        )
        .expect("valid metric");
        let spend = CounterVec::new(
            Opts::new(
                "sluice_spend_usd_total",
                "USD spent at the configured prices (what each request's budget settlement charged), by key and model.",
            ),
            &["key", "model"],
        )
        .expect("valid metric");
        let usage_missing = IntCounterVec::new(
            Opts::new(
                "sluice_usage_missing_total",
                "Answers that may have used tokens but reported no usage (cut, client gone, none sent); their reservation stands.",
            ),
            &["upstream"],
        )
        .expect("valid metric");
        let usage_implausible = IntCounterVec::new(
            Opts::new(
                "sluice_usage_implausible_total",
                "Answers whose reported usage was not believed (a count of 2^24 or more, or output beyond the request's limit plus slack); their reservation stands.",
            ),
            &["upstream"],
        )
        .expect("valid metric");
        let limits_store_up = IntGauge::new(
            "sluice_limits_store_up",
            "1 while the shared limits store (limits_store) answers; 0 while it does not (exported only with a limits_store).",
        )
        .expect("valid metric");
        let limits_store_errors = IntCounterVec::new(
            Opts::new(
                "sluice_limits_store_errors_total",
                "Calls to the shared limits store that failed, by kind (timeout, connection, server; script: one key's call, the store stays up).",
            ),
            &["kind"],
        )
        .expect("valid metric");
        let limits_store_duration = Histogram::with_opts(
            HistogramOpts::new(
                "sluice_limits_store_duration_seconds",
                "Time of each call to the shared limits store, failed ones included.",
            )
            .buckets(exponential_buckets(0.00005, 2.0, 14).expect("static buckets")),
        )
        .expect("valid metric");
        let model_fallbacks = IntCounterVec::new(
            Opts::new(
                "sluice_model_fallbacks_total",
                "Requests answered by a fallback model, by the model asked for and the model that served.",
            ),
            &["model", "served_model"],
        )
        .expect("valid metric");
        let upstream_queue = HistogramVec::new(
            HistogramOpts::new(
                "sluice_upstream_queue_seconds",
                "Time spent waiting for a slot of an upstream's max_concurrent.",
            )
            .buckets(exponential_buckets(0.0001, 2.0, 18).expect("static buckets")),
            &["upstream"],
        )
        .expect("valid metric");
        let upstream_health_checks = IntCounterVec::new(
            Opts::new(
                "sluice_upstream_health_checks_total",
                "Active health checks of an upstream, by result (pass, fail).",
            ),
            &["upstream", "result"],
        )
        .expect("valid metric");
        let access_log_dropped = IntGauge::new(
            "sluice_access_log_dropped_lines",
            "Access log lines dropped since start because stdout did not keep up (set at scrape time).",
        )
        .expect("valid metric");
        let trace_spans_dropped = IntCounter::new(
            "sluice_trace_spans_dropped_total",
            "Trace spans not exported: the export queue was full (the collector down or slow) or their export failed.",
        )
        .expect("valid metric");
        let key_expiry = IntGaugeVec::new(
            Opts::new(
                "sluice_key_expiry_timestamp_seconds",
                "Unix time at which a key's expires_at makes it invalid (keys with expires_at only).",
            ),
            &["key"],
        )
        .expect("valid metric");
        let key_info = KeyInfo::new();
        let tls = TlsMetrics::new();
        let build_info = IntGaugeVec::new(
            Opts::new(
                "sluice_build_info",
                "Always 1; the version label names the build.",
            ),
            &["version"],
        )
        .expect("valid metric");
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);

        for collector in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(request_duration.clone()),
            Box::new(overhead.clone()),
            Box::new(upstream_ttfb.clone()),
            Box::new(in_flight.clone()),
            Box::new(rejections.clone()),
            Box::new(upstream_errors.clone()),
            Box::new(stream_edits_skipped.clone()),
            Box::new(config_reloads.clone()),
            Box::new(config_generation.clone()),
            Box::new(config_last_success.clone()),
            Box::new(upstream_in_flight.clone()),
            Box::new(upstream_available.clone()),
            Box::new(upstream_ejections.clone()),
            Box::new(upstream_cooldowns.clone()),
            Box::new(upstream_retries.clone()),
            Box::new(model_fallbacks.clone()),
            Box::new(upstream_queue.clone()),
            Box::new(tokens.clone()),
            Box::new(spend.clone()),
            Box::new(usage_missing.clone()),
            Box::new(usage_implausible.clone()),
            Box::new(upstream_health_checks.clone()),
            Box::new(access_log_dropped.clone()),
            Box::new(trace_spans_dropped.clone()),
            Box::new(key_expiry.clone()),
            Box::new(key_info.clone()),
            Box::new(build_info),
        ]
        .into_iter()
        .chain(tls.collectors())
        {
            registry
                .register(collector)
                .expect("each series is registered once");
        }
        Metrics {
            registry,
            requests,
            request_duration,
            overhead,
            upstream_ttfb,
            in_flight,
            rejections,
            upstream_errors,
            stream_edits_skipped,
            config_reloads,
            config_generation,
            config_last_success,
            upstream_in_flight,
            upstream_available,
            upstream_ejections,
            upstream_cooldowns,
            upstream_retries,
            model_fallbacks,
            upstream_queue,
            tokens,
            spend,
            usage_missing,
            usage_implausible,
            limits_store_up,
            limits_store_errors,
            limits_store_duration,
            upstream_health_checks,
            access_log_dropped,
            trace_spans_dropped,
            key_expiry,
            key_info,
            tls,
        }
    }

    /// The series that describe the keys themselves, replaced whole at start and on every
    /// reload: `sluice_key_expiry_timestamp_seconds` for each key with `expires_at`, and
    /// `sluice_key_info` with the labels `metric_labels` names.
    pub fn describe_keys(&self, keys: &[Arc<Key>], metric_labels: &[String]) {
        self.key_expiry.reset();
        for key in keys {
            if let Some(at) = key.expires_at_unix_ms {
                self.key_expiry
                    .with_label_values(&[&key.name])
                    .set(at.div_euclid(1000));
            }
        }
        self.key_info.replace(keys, metric_labels);
    }

    /// Creates, at zero, every series whose labels all come from configuration and fixed
    /// sets, so it exists from the first scrape: an `increase()` or `rate()` over a series
    /// that only appears when it first moves misses that first count, and an alert on it
    /// never sees a baseline. Called at start and on every reload.
    pub fn declare<'a>(
        &self,
        upstreams: impl Iterator<Item = &'a str>,
        keys: impl Iterator<Item = &'a str>,
    ) {
        for result in ["success", "failure"] {
            self.config_reloads.with_label_values(&[result]);
        }
        for code in ANONYMOUS_CODES {
            self.rejections.with_label_values(&[UNKNOWN, code]);
        }
        for upstream in upstreams {
            self.upstream_ejections.with_label_values(&[upstream]);
            self.upstream_cooldowns.with_label_values(&[upstream]);
            self.upstream_in_flight.with_label_values(&[upstream]);
            self.usage_missing.with_label_values(&[upstream]);
            self.usage_implausible.with_label_values(&[upstream]);
            self.stream_edits_skipped.with_label_values(&[upstream]);
            for result in ["pass", "fail"] {
                self.upstream_health_checks
                    .with_label_values(&[upstream, result]);
            }
            for reason in RESEND_REASONS {
                self.upstream_retries.with_label_values(&[upstream, reason]);
            }
            for code in UPSTREAM_CODES {
                self.upstream_errors.with_label_values(&[upstream, code]);
            }
        }
        for key in keys {
            self.in_flight.with_label_values(&[key]);
            for code in KEY_CODES {
                self.rejections.with_label_values(&[key, code]);
            }
        }
    }

    /// Registers the limits store's series, at zero: only a gateway with a `limits_store`
    /// exports them (an alert on the gauge must not fire where there is no store).
    pub fn declare_limits_store(&self) {
        let series: [Box<dyn prometheus::core::Collector>; 3] = [
            Box::new(self.limits_store_up.clone()),
            Box::new(self.limits_store_errors.clone()),
            Box::new(self.limits_store_duration.clone()),
        ];
        for collector in series {
            // Registered once per gateway: a second call finds them there.
            let _ = self.registry.register(collector);
        }
        for kind in ["timeout", "connection", "server", "script"] {
            self.limits_store_errors.with_label_values(&[kind]);
        }
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
