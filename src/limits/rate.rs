//! A key's request rate by GCRA: the arithmetic (admitted or refused, and the position
//! after), and the position as `x-ratelimit-*` headers.

use super::RateStatus;
use http::HeaderName;
use std::time::Duration;

/// The generic cell rate algorithm: `per_minute` sustained, `burst` at once. Admitted: the
/// new theoretical arrival time and the position after this request. Refused: the
/// position and how long until this request would pass.
pub(super) fn gcra(
    tat: Duration,
    now: Duration,
    per_minute: u32,
    burst: u32,
) -> Result<(Duration, RateStatus), (RateStatus, Duration)> {
    let interval = Duration::from_secs(60) / per_minute;
    let window = interval.saturating_mul(burst);
    let tat = within_window(tat, now, per_minute, burst);
    let next = tat.max(now).saturating_add(interval);
    let ahead = next - now;
    if ahead > window {
        return Err((position(tat, now, per_minute, burst), ahead - window));
    }
    Ok((next, position(next, now, per_minute, burst)))
}

/// `tat`, or the furthest ahead of `now` it may be under these limits (one window) if it
/// is further: a reload that raised the rate (shrinking the window) must not leave a wait
/// the new limits would never give. The stored time is clamped too, so the wait then
/// counts down at the new rate.
pub(super) fn within_window(tat: Duration, now: Duration, per_minute: u32, burst: u32) -> Duration {
    let window = (Duration::from_secs(60) / per_minute).saturating_mul(burst);
    tat.min(now.saturating_add(window))
}

/// Where a key stands with theoretical arrival time `tat`: requests left in the burst, and
/// the time until the bucket is full.
pub(super) fn position(tat: Duration, now: Duration, per_minute: u32, burst: u32) -> RateStatus {
    let interval = Duration::from_secs(60) / per_minute;
    let window = interval.saturating_mul(burst);
    let backlog = tat.saturating_sub(now).min(window);
    let remaining = (window.saturating_sub(backlog).as_nanos() / interval.as_nanos()) as u32;
    RateStatus {
        limit: per_minute,
        remaining,
        reset: backlog,
    }
}

/// OpenAI's reset format: `1s`, `120ms`, `6m0s`, `1h2m3s`.
pub fn format_reset(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1000 {
        // The usual case (a key with room), on every answer: no `format!`.
        let mut text = String::with_capacity(5);
        text.push_str(itoa::Buffer::new().format(millis as u64));
        text.push_str("ms");
        return text;
    }
    let total_seconds = duration.as_secs_f64();
    let hours = (total_seconds / 3600.0).floor();
    let minutes = ((total_seconds - hours * 3600.0) / 60.0).floor();
    let seconds = total_seconds - hours * 3600.0 - minutes * 60.0;
    let seconds = format!("{:.3}", seconds)
        .trim_end_matches('0')
        .trim_end_matches('.')
        .to_string();
    match (hours as u64, minutes as u64) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// The `x-ratelimit-*` headers for a rate-limited key.
pub fn rate_headers(status: &RateStatus) -> [(HeaderName, String); 3] {
    const NAMES: [HeaderName; 3] = [
        HeaderName::from_static("x-ratelimit-limit-requests"),
        HeaderName::from_static("x-ratelimit-remaining-requests"),
        HeaderName::from_static("x-ratelimit-reset-requests"),
    ];
    position_headers(
        NAMES,
        status.limit.into(),
        status.remaining.into(),
        status.reset,
    )
}

/// A limit's position as its three `x-ratelimit-*` headers (`names`: limit, remaining,
/// reset), for requests and for tokens alike.
pub(super) fn position_headers(
    names: [HeaderName; 3],
    limit: u64,
    remaining: u64,
    reset: Duration,
) -> [(HeaderName, String); 3] {
    let [limit_name, remaining_name, reset_name] = names;
    [
        (limit_name, limit.to_string()),
        (remaining_name, remaining.to_string()),
        (reset_name, format_reset(reset)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcra_allows_the_burst_then_one_per_interval() {
        let mut tat = Duration::ZERO;
        let now = Duration::from_secs(100);
        // 60 per minute, burst 3: three at once, the fourth waits one second.
        for expected_remaining in [2, 1, 0] {
            let (next, status) = gcra(tat, now, 60, 3).expect("within burst");
            assert_eq!(status.remaining, expected_remaining);
            tat = next;
        }
        let (status, wait) = gcra(tat, now, 60, 3).expect_err("burst used up");
        assert_eq!(wait, Duration::from_secs(1));
        assert_eq!(
            (status.remaining, status.reset),
            (0, Duration::from_secs(3))
        );
        let early = now + wait - Duration::from_millis(1);
        assert!(gcra(tat, early, 60, 3).is_err(), "not a millisecond early");
        assert!(
            gcra(tat, now + wait, 60, 3).is_ok(),
            "admitted after exactly the wait"
        );
    }

    #[test]
    fn a_raised_rate_never_lengthens_the_wait() {
        // 60 per minute, burst 60: sixty at once fill the window (60 s ahead).
        let now = Duration::from_secs(1000);
        let mut tat = Duration::ZERO;
        for _ in 0..60 {
            tat = gcra(tat, now, 60, 60).expect("within burst").0;
        }
        assert!(gcra(tat, now, 60, 60).is_err());
        // Raised to 600 per minute, burst 60 (a 6 s window), 2 s later: at most one new
        // interval to wait, and the reset within the new window.
        let later = now + Duration::from_secs(2);
        let (status, wait) = gcra(tat, later, 600, 60).expect_err("the burst is used");
        assert_eq!(wait, Duration::from_millis(100));
        assert_eq!(status.reset, Duration::from_secs(6));
        // As `admit` keeps it: clamped, then counting down at the new rate.
        let tat = within_window(tat, later, 600, 60);
        assert!(gcra(tat, later + wait, 600, 60).is_ok());
        assert!(gcra(tat, later + wait - Duration::from_millis(1), 600, 60).is_err());
    }

    #[test]
    fn reset_formats_like_openai() {
        assert_eq!(format_reset(Duration::from_millis(20)), "20ms");
        assert_eq!(format_reset(Duration::ZERO), "0ms");
        assert_eq!(format_reset(Duration::from_micros(999_999)), "999ms");
        assert_eq!(format_reset(Duration::from_secs(1)), "1s");
        assert_eq!(format_reset(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_reset(Duration::from_secs(360)), "6m0s");
        assert_eq!(format_reset(Duration::from_secs(3723)), "1h2m3s");
    }
}
