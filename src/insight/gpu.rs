//! GPU series joined to vLLM instances. GPU utilisation comes from dcgm-exporter's
//! `DCGM_FI_DEV_GPU_UTIL` (or inferdb's own GPU sampler, which writes the same name); a GPU
//! belongs to the vLLM instances on its host: its `Hostname` label where it has one
//! (dcgm-exporter's), else the host part of its `instance`, matched against the host part of
//! the vLLM series' `instance` (`gpu-node-7:8000` → `gpu-node-7`).

use std::collections::BTreeMap;

use super::{InsightError, PromSource};

/// Mean GPU utilisation (percent) per GPU series, by the labels the join needs.
pub(crate) const GPU_UTIL_QUERY: &str = "avg by (instance, Hostname) (DCGM_FI_DEV_GPU_UTIL)";

/// The host part of an `instance` label: without `:port`, without IPv6 brackets.
pub fn host_of(instance: &str) -> &str {
    if let Some(rest) = instance.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match instance.rsplit_once(':') {
        // one colon: host:port; more: a bare IPv6 address
        Some((h, p)) if !h.contains(':') && p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => instance,
    }
}

/// GPU utilisation (percent, mean over the host's GPUs) per host at each of `n` steps
/// `first + k*step`, `None` where the host reported nothing.
pub(crate) fn util_by_host(
    src: &dyn PromSource,
    first: i64,
    step: i64,
    n: usize,
) -> Result<BTreeMap<String, Vec<Option<f64>>>, InsightError> {
    let mut sums: BTreeMap<String, Vec<(f64, u32)>> = BTreeMap::new();
    if n == 0 {
        return Ok(BTreeMap::new());
    }
    let last = first + (n as i64 - 1) * step;
    for s in src.range(GPU_UTIL_QUERY, first, last, step)? {
        let host = match s.labels.get("Hostname").filter(|h| !h.is_empty()) {
            Some(h) => h.to_string(),
            None => host_of(s.labels.get("instance").unwrap_or("")).to_string(),
        };
        if host.is_empty() {
            continue;
        }
        let row = sums.entry(host).or_insert_with(|| vec![(0.0, 0); n]);
        for (t, v) in s.samples {
            let i = (t - first) / step;
            if (0..n as i64).contains(&i) && v.is_finite() {
                row[i as usize].0 += v;
                row[i as usize].1 += 1;
            }
        }
    }
    Ok(sums
        .into_iter()
        .map(|(h, r)| {
            let r = r
                .into_iter()
                .map(|(s, c)| (c > 0).then(|| s / c as f64))
                .collect();
            (h, r)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn host_part_of_instance() {
        assert_eq!(host_of("gpu-node-7:8000"), "gpu-node-7");
        assert_eq!(host_of("gpu-node-7"), "gpu-node-7");
        assert_eq!(host_of("10.0.0.5:9400"), "10.0.0.5");
        assert_eq!(host_of("[::1]:8000"), "::1");
        assert_eq!(host_of("fe80::1"), "fe80::1");
        assert_eq!(host_of(""), "");
    }
}
