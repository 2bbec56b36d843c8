//! The host's `process_*` metrics, named as the Prometheus client libraries
//! export them (client_golang's process collector), so the usual dashboards
//! and alerts work: `process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds` and
//! `process_start_time_seconds`. Read from `/proc/self` at each scrape (Linux;
//! elsewhere, or when `/proc` is not mounted, the series are left out).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// One reading of the process's figures.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reading {
    pub(crate) cpu_seconds: f64,
    pub(crate) resident_bytes: u64,
    pub(crate) virtual_bytes: u64,
    pub(crate) start_time_seconds: f64,
    pub(crate) open_fds: u64,
    pub(crate) max_fds: Option<u64>,
}

/// Field `n` (1-based, as proc(5) numbers them) of `/proc/PID/stat`; the
/// command name (field 2) may hold spaces and parentheses, so fields are
/// counted after its last `)`.
fn stat_field(stat: &str, n: usize) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(n.checked_sub(3)?)?.parse().ok()
}

/// Parses `/proc/self/stat` and `/proc/stat`'s `btime` with the clock tick
/// rate and page size.
pub(crate) fn parse(stat: &str, proc_stat: &str, ticks: f64, page: u64) -> Option<Reading> {
    let btime: f64 = proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let utime = stat_field(stat, 14)? as f64;
    let stime = stat_field(stat, 15)? as f64;
    Some(Reading {
        cpu_seconds: (utime + stime) / ticks,
        start_time_seconds: btime + stat_field(stat, 22)? as f64 / ticks,
        virtual_bytes: stat_field(stat, 23)?,
        resident_bytes: stat_field(stat, 24)?.saturating_mul(page),
        open_fds: 0,
        max_fds: None,
    })
}

/// The process's figures now.
pub(crate) fn read() -> Option<Reading> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let proc_stat = std::fs::read_to_string("/proc/stat").ok()?;
    // SAFETY: sysconf only reads configuration values.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if ticks <= 0 || page <= 0 {
        return None;
    }
    let mut r = parse(&stat, &proc_stat, ticks as f64, page as u64)?;
    r.open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    r.max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    Some(r)
}

/// Reads `/proc/self` at each scrape.
#[derive(Debug, Default)]
pub(crate) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(r) = read() else { return Ok(()) };
        ConstCounter::new(r.cpu_seconds).encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            MetricType::Counter,
        )?)?;
        let gauges: [(&str, &str, f64); 5] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                r.resident_bytes as f64,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                r.virtual_bytes as f64,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                r.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                r.open_fds as f64,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                // No limit: client_golang reports it as the largest value.
                r.max_fds.map_or(f64::MAX, |m| m as f64),
            ),
        ];
        for (name, help, value) in gauges {
            ConstGauge::new(value).encode(encoder.encode_descriptor(
                name,
                help,
                None,
                MetricType::Gauge,
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // A command name with spaces and a parenthesis, as proc(5) allows.
        let stat = "4242 (wasm let) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 8 0 12345 104857600 2560 18446744073709551615";
        let r = parse(stat, "cpu 1 2 3\nbtime 1700000000\n", 100.0, 4096).unwrap();
        assert_eq!(r.cpu_seconds, 3.0);
        assert_eq!(r.start_time_seconds, 1_700_000_000.0 + 123.45);
        assert_eq!(r.virtual_bytes, 104_857_600);
        assert_eq!(r.resident_bytes, 2560 * 4096);
        assert!(parse("garbage", "btime 1", 100.0, 4096).is_none());
    }

    #[test]
    fn this_process_reads_plausibly() {
        let r = read().expect("/proc is mounted where the tests run");
        assert!(r.resident_bytes > 1 << 20, "{r:?}");
        assert!(
            r.open_fds >= 3 && r.max_fds.is_none_or(|m| m >= r.open_fds),
            "{r:?}"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(r.start_time_seconds <= now + 1.0 && r.start_time_seconds > now - 86_400.0 * 365.0);
    }
}
