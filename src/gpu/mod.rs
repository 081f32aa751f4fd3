//! GPU sampling with dcgm-exporter's metric names and labels, so DCGM dashboards work
//! against inferdb unchanged.
//!
//! [`GpuSampler`] abstracts the device library: [`nvml::NvmlSampler`] reads NVML through
//! `nvml-wrapper`, [`FakeGpu`] serves tests. [`run_gpu_sampler`] samples every device at its
//! own interval and writes into a [`SampleSink`]; a device that fails is reported as
//! `inferdb_gpu_up{...} 0` (and its series are marked stale), never a crash. Without NVML,
//! [`open_default`] logs one line and gives `None`: the server runs on without GPU series.
//!
//! Names, types and units follow dcgm-exporter's default counters (see the DCGM catalog):
//! MHz, °C, W (NVML milliwatts / 1000), mJ, %, MiB (bytes / 1048576), bytes/s for PCIe.

#[allow(unsafe_code)] // NVML's C API through nvml-wrapper(-sys)
pub mod nvml;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use inferdb_storage::{stale_nan, Label, Labels};

use crate::model::sink::{SampleSink, SeriesHandle, SinkSample};
use crate::model::time::now_ms;

/// Prometheus type of a DCGM field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `gauge`
    Gauge,
    /// `counter`
    Counter,
}

/// One DCGM field as dcgm-exporter exposes it.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// DCGM field id (page order).
    pub id: u16,
    /// Metric name.
    pub name: &'static str,
    /// Type as dcgm-exporter declares it.
    pub kind: Kind,
    /// HELP text of the default counters CSV.
    pub help: &'static str,
    /// Printed with six decimals (`%f`) rather than as an integer.
    pub float: bool,
}

macro_rules! fields {
    ($($id:expr, $name:ident, $kind:ident, $float:expr, $help:expr;)*) => {
        /// Index of each field in [`FIELDS`].
        #[allow(non_camel_case_types, missing_docs)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum F { $($name),* }
        /// dcgm-exporter's default fields that NVML can provide, in field-id order.
        pub const FIELDS: &[Field] = &[
            $(Field { id: $id, name: stringify!($name), kind: Kind::$kind, help: $help, float: $float }),*
        ];
    };
}

fields! {
    100, DCGM_FI_DEV_SM_CLOCK, Gauge, false, "SM clock frequency (in MHz).";
    101, DCGM_FI_DEV_MEM_CLOCK, Gauge, false, "Memory clock frequency (in MHz).";
    140, DCGM_FI_DEV_MEMORY_TEMP, Gauge, false, "Memory temperature (in C).";
    150, DCGM_FI_DEV_GPU_TEMP, Gauge, false, "GPU temperature (in C).";
    155, DCGM_FI_DEV_POWER_USAGE, Gauge, true, "Power draw (in W).";
    156, DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, Counter, false, "Total energy consumption since boot (in mJ).";
    202, DCGM_FI_DEV_PCIE_REPLAY_COUNTER, Counter, false, "Total number of PCIe retries.";
    203, DCGM_FI_DEV_GPU_UTIL, Gauge, false, "GPU utilization (in %).";
    204, DCGM_FI_DEV_MEM_COPY_UTIL, Gauge, false, "Memory utilization (in %).";
    206, DCGM_FI_DEV_ENC_UTIL, Gauge, false, "Encoder utilization (in %).";
    207, DCGM_FI_DEV_DEC_UTIL, Gauge, false, "Decoder utilization (in %).";
    230, DCGM_FI_DEV_XID_ERRORS, Gauge, false, "Value of the last XID error encountered.";
    251, DCGM_FI_DEV_FB_FREE, Gauge, false, "Frame buffer memory free (in MB).";
    252, DCGM_FI_DEV_FB_USED, Gauge, false, "Frame buffer memory used (in MB).";
    253, DCGM_FI_DEV_FB_RESERVED, Gauge, false, "Frame buffer memory reserved (in MB).";
    393, DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, Counter, false, "Number of remapped rows for uncorrectable errors";
    394, DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, Counter, false, "Number of remapped rows for correctable errors";
    395, DCGM_FI_DEV_ROW_REMAP_FAILURE, Gauge, false, "Whether remapping of rows has failed";
    449, DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, Counter, false, "Total number of NVLink bandwidth counters for all lanes.";
    526, DCGM_FI_DEV_VGPU_LICENSE_STATUS, Gauge, false, "vGPU License status";
    1009, DCGM_FI_PROF_PCIE_TX_BYTES, Gauge, false, "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.";
    1010, DCGM_FI_PROF_PCIE_RX_BYTES, Gauge, false, "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.";
}

impl F {
    /// The field's description.
    pub fn field(self) -> &'static Field {
        &FIELDS[self as usize]
    }
}

/// Identity of a device (the DCGM labels).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// NVML index (`gpu` label; `device` is `nvidia<index>`).
    pub index: u32,
    /// `UUID` label.
    pub uuid: String,
    /// `pci_bus_id` label (`00000000:18:00.0`).
    pub pci_bus_id: String,
    /// `modelName` label.
    pub model_name: String,
}

/// One value read from a device.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// Which field.
    pub field: F,
    /// The value in DCGM units.
    pub value: f64,
    /// Extra labels (`err_code`, `err_msg` on XID errors).
    pub extra: Vec<(String, String)>,
}

impl Reading {
    /// A reading without extra labels.
    pub fn new(field: F, value: f64) -> Self {
        Reading {
            field,
            value,
            extra: vec![],
        }
    }
}

/// A source of GPU readings.
pub trait GpuSampler: Send {
    /// The driver version (`DCGM_FI_DRIVER_VERSION` label).
    fn driver_version(&self) -> String;
    /// The devices.
    fn devices(&self) -> Vec<DeviceInfo>;
    /// Reads every supported field of device `index`; unsupported fields are left out.
    fn read(&mut self, index: u32) -> Result<Vec<Reading>, String>;
}

/// A fake device set for tests: fixed readings per device, optional failures.
#[derive(Debug, Clone, Default)]
pub struct FakeGpu {
    /// The devices.
    pub devices: Vec<DeviceInfo>,
    /// Readings per device index.
    pub readings: BTreeMap<u32, Vec<Reading>>,
    /// Devices whose reads fail, with the message.
    pub failing: BTreeMap<u32, String>,
    /// Added to every value on each read (to see values move).
    pub drift: f64,
    reads: u64,
}

impl FakeGpu {
    /// `n` H100-like devices with plausible readings.
    pub fn h100s(n: u32) -> Self {
        let mut g = FakeGpu::default();
        for i in 0..n {
            g.devices.push(DeviceInfo {
                index: i,
                uuid: format!("GPU-00000000-0000-0000-0000-{i:012}"),
                pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i * 0x10),
                model_name: "NVIDIA H100 80GB HBM3".into(),
            });
            g.readings.insert(
                i,
                vec![
                    Reading::new(F::DCGM_FI_DEV_SM_CLOCK, 1980.0),
                    Reading::new(F::DCGM_FI_DEV_GPU_TEMP, 61.0 + i as f64),
                    Reading::new(F::DCGM_FI_DEV_POWER_USAGE, 412.736),
                    Reading::new(F::DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, 284_917_305_721.0),
                    Reading::new(F::DCGM_FI_DEV_GPU_UTIL, 93.0),
                    Reading {
                        field: F::DCGM_FI_DEV_XID_ERRORS,
                        value: 0.0,
                        extra: vec![
                            ("err_code".into(), "0".into()),
                            ("err_msg".into(), "No Error".into()),
                        ],
                    },
                    Reading::new(F::DCGM_FI_DEV_FB_FREE, 5386.0),
                    Reading::new(F::DCGM_FI_DEV_FB_USED, 75612.0),
                    Reading::new(F::DCGM_FI_DEV_FB_RESERVED, 561.0),
                ],
            );
        }
        g
    }
}

impl GpuSampler for FakeGpu {
    fn driver_version(&self) -> String {
        "580.95.05".into()
    }
    fn devices(&self) -> Vec<DeviceInfo> {
        self.devices.clone()
    }
    fn read(&mut self, index: u32) -> Result<Vec<Reading>, String> {
        if let Some(e) = self.failing.get(&index) {
            return Err(e.clone());
        }
        self.reads += 1;
        let d = self.drift * self.reads as f64;
        Ok(self
            .readings
            .get(&index)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|mut r| {
                r.value += d;
                r
            })
            .collect())
    }
}

/// Opens NVML; without it (no driver, no GPU) logs one line and gives `None`.
pub fn open_default() -> Option<Box<dyn GpuSampler>> {
    match nvml::NvmlSampler::open() {
        Ok(s) => {
            tracing::info!(devices = s.devices().len(), "NVML opened, sampling GPUs");
            Some(Box::new(s))
        }
        Err(e) => {
            tracing::info!("no GPU sampling: NVML unavailable ({e})");
            None
        }
    }
}

/// Labels of GPU series besides the per-device DCGM ones.
#[derive(Debug, Clone)]
pub struct GpuOptions {
    /// `Hostname` label (dcgm-exporter 4.5.3-4.8.2 spelling).
    pub hostname: String,
    /// `job` label ("gpu").
    pub job: String,
    /// `instance` label (the host name).
    pub instance: String,
    /// Sampling interval.
    pub interval: Duration,
}

impl GpuOptions {
    /// Defaults for this machine: hostname from `NODE_NAME`, `/etc/hostname` or "localhost";
    /// 15 s interval.
    pub fn local(interval: Duration) -> Self {
        let hostname = std::env::var("NODE_NAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "localhost".into());
        GpuOptions {
            instance: hostname.clone(),
            hostname,
            job: "gpu".into(),
            interval,
        }
    }
}

/// The DCGM labels of a device, in dcgm-exporter's order (for page rendering).
pub fn device_labels(d: &DeviceInfo, hostname: &str, driver: &str) -> Vec<(String, String)> {
    vec![
        ("gpu".into(), d.index.to_string()),
        ("UUID".into(), d.uuid.clone()),
        ("pci_bus_id".into(), d.pci_bus_id.clone()),
        ("device".into(), format!("nvidia{}", d.index)),
        ("modelName".into(), d.model_name.clone()),
        ("Hostname".into(), hostname.to_string()),
        ("DCGM_FI_DRIVER_VERSION".into(), driver.to_string()),
    ]
}

/// Renders readings as a dcgm-exporter page (families in field-id order, fixed label order,
/// integers without decimals, the float fields with six).
pub fn render_dcgm_page(
    hostname: &str,
    driver: &str,
    devices: &[(DeviceInfo, Vec<Reading>)],
) -> String {
    let mut out = String::new();
    for (fi, f) in FIELDS.iter().enumerate() {
        let rows: Vec<(&DeviceInfo, &Reading)> = devices
            .iter()
            .flat_map(|(d, rs)| {
                rs.iter()
                    .filter(|r| r.field as usize == fi)
                    .map(move |r| (d, r))
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        let kind = match f.kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        };
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {kind}", f.name);
        for (d, r) in rows {
            out.push_str(f.name);
            out.push('{');
            let mut first = true;
            for (k, v) in device_labels(d, hostname, driver)
                .iter()
                .chain(r.extra.iter())
            {
                if !first {
                    out.push(',');
                }
                first = false;
                let _ = write!(out, "{k}=\"{v}\"");
            }
            out.push_str("} ");
            if f.float {
                let _ = writeln!(out, "{:.6}", r.value);
            } else {
                let _ = writeln!(out, "{}", r.value.round() as i64);
            }
        }
    }
    out
}

type SeriesKey = (F, Vec<(String, String)>);

/// A sample of one read, before it is handed to the sink.
struct Queued {
    series: Arc<SeriesHandle>,
    t: i64,
    v: f64,
}

/// The sink's view of queued samples.
fn as_sink(q: &[Queued]) -> Vec<SinkSample<'_>> {
    q.iter()
        .map(|q| SinkSample {
            series: &q.series,
            t: q.t,
            v: q.v,
        })
        .collect()
}

/// The series of one device across reads.
struct DeviceLoop {
    info: DeviceInfo,
    base: Labels,
    up: Arc<SeriesHandle>,
    series: BTreeMap<SeriesKey, Arc<SeriesHandle>>,
    live: Vec<Arc<SeriesHandle>>,
}

impl DeviceLoop {
    fn new(info: DeviceInfo, opts: &GpuOptions, driver: &str) -> Self {
        let mut l: Vec<Label> = device_labels(&info, &opts.hostname, driver)
            .into_iter()
            .map(|(k, v)| Label::new(k, v))
            .collect();
        l.push(Label::new("job", opts.job.clone()));
        l.push(Label::new("instance", opts.instance.clone()));
        let base = Labels::new(l);
        DeviceLoop {
            up: Arc::new(SeriesHandle::new(base.with("__name__", "inferdb_gpu_up"))),
            info,
            base,
            series: BTreeMap::new(),
            live: vec![],
        }
    }

    fn batch(&mut self, t: i64, result: Result<Vec<Reading>, String>) -> Vec<Queued> {
        let mut out = vec![];
        match result {
            Ok(readings) => {
                let mut now_live = vec![];
                for r in readings {
                    let key = (r.field, r.extra.clone());
                    let h = self
                        .series
                        .entry(key)
                        .or_insert_with(|| {
                            let mut l = self.base.with("__name__", r.field.field().name);
                            for (k, v) in &r.extra {
                                l = l.with(k, v);
                            }
                            Arc::new(SeriesHandle::new(l))
                        })
                        .clone();
                    now_live.push(h.clone());
                    out.push(Queued {
                        series: h,
                        t,
                        v: r.value,
                    });
                }
                for old in &self.live {
                    if !now_live.iter().any(|n| Arc::ptr_eq(n, old)) {
                        out.push(Queued {
                            series: old.clone(),
                            t,
                            v: stale_nan(),
                        });
                    }
                }
                self.live = now_live;
                out.push(Queued {
                    series: self.up.clone(),
                    t,
                    v: 1.0,
                });
            }
            Err(e) => {
                tracing::warn!(gpu = self.info.index, "reading GPU failed: {e}");
                for old in self.live.drain(..) {
                    out.push(Queued {
                        series: old,
                        t,
                        v: stale_nan(),
                    });
                }
                out.push(Queued {
                    series: self.up.clone(),
                    t,
                    v: 0.0,
                });
            }
        }
        out
    }
}

/// Samples every device of `sampler` (each at `opts.interval`, phase-shifted per device) into
/// `sink` until `shutdown` completes. A device whose read fails gets `inferdb_gpu_up 0`.
pub async fn run_gpu_sampler(
    sampler: Box<dyn GpuSampler>,
    sink: Arc<dyn SampleSink>,
    opts: GpuOptions,
    shutdown: impl Future<Output = ()>,
) {
    let driver = sampler.driver_version();
    let devices = sampler.devices();
    let sampler = Arc::new(parking_lot::Mutex::new(sampler));
    let mut tasks = vec![];
    let n = devices.len().max(1) as u32;
    for (i, d) in devices.into_iter().enumerate() {
        let sampler = sampler.clone();
        let sink = sink.clone();
        let opts = opts.clone();
        let driver = driver.clone();
        tasks.push(tokio::spawn(async move {
            let mut lp = DeviceLoop::new(d, &opts, &driver);
            let start = tokio::time::Instant::now() + opts.interval * i as u32 / n;
            let mut tick = tokio::time::interval_at(start, opts.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                let s = sampler.clone();
                let idx = lp.info.index;
                // NVML calls block: run them off the async workers
                let r = tokio::task::spawn_blocking(move || s.lock().read(idx))
                    .await
                    .unwrap_or_else(|e| Err(format!("sampler task failed: {e}")));
                let b = lp.batch(now_ms(), r);
                if let Err(e) = sink.append_batch(&as_sink(&b)) {
                    tracing::warn!("storing GPU samples: {e}");
                }
            }
        }));
    }
    shutdown.await;
    for t in tasks {
        t.abort();
    }
}

/// Reads every device once (for tests and `inferdb` self-checks): the DCGM page and the
/// devices that failed.
pub fn sample_once(sampler: &mut dyn GpuSampler, hostname: &str) -> (String, Vec<(u32, String)>) {
    let driver = sampler.driver_version();
    let mut ok = vec![];
    let mut failed = vec![];
    for d in sampler.devices() {
        match sampler.read(d.index) {
            Ok(r) => ok.push((d, r)),
            Err(e) => failed.push((d.index, e)),
        }
    }
    (render_dcgm_page(hostname, &driver, &ok), failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::exposition::{parse, Entry, Format};
    use crate::model::sink::MemorySink;

    #[test]
    fn page_matches_dcgm_exporter_layout() {
        let mut g = FakeGpu::h100s(2);
        let (page, failed) = sample_once(&mut g, "gpu-node-07");
        assert!(failed.is_empty());
        let first = page.lines().nth(2).unwrap();
        assert_eq!(
            first,
            "DCGM_FI_DEV_SM_CLOCK{gpu=\"0\",UUID=\"GPU-00000000-0000-0000-0000-000000000000\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"gpu-node-07\",DCGM_FI_DRIVER_VERSION=\"580.95.05\"} 1980"
        );
        assert!(page.contains("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"));
        assert!(page.contains("\"580.95.05\"} 412.736000\n"));
        assert!(page.contains(",err_code=\"0\",err_msg=\"No Error\"} 0\n"));
        // our parser reads it; every family is in field-id order
        let n = parse(&page, Format::PromText)
            .filter(|e| matches!(e, Ok(Entry::Sample(_))))
            .count();
        assert_eq!(n, 18);
    }

    #[test]
    fn names_match_the_dcgm_fixture() {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/dcgm/metrics-8gpu.txt");
        let page = std::fs::read_to_string(p).unwrap();
        let mut fixture_names = std::collections::BTreeSet::new();
        for e in parse(&page, Format::PromText) {
            if let Ok(Entry::Type { name, kind }) = e {
                fixture_names.insert((name.to_string(), kind.as_str().to_string()));
            }
        }
        for f in FIELDS {
            let kind = if f.kind == Kind::Gauge {
                "gauge"
            } else {
                "counter"
            };
            assert!(
                fixture_names.contains(&(f.name.to_string(), kind.to_string())),
                "{} not on the dcgm page with type {kind}",
                f.name
            );
        }
    }

    #[test]
    fn failing_device_goes_down_and_its_series_go_stale() {
        let opts = GpuOptions {
            hostname: "h".into(),
            job: "gpu".into(),
            instance: "h".into(),
            interval: Duration::from_secs(1),
        };
        let mut g = FakeGpu::h100s(1);
        let d = g.devices()[0].clone();
        let mut lp = DeviceLoop::new(d, &opts, "1");
        let sink = MemorySink::new();
        let r = g.read(0);
        sink.append_batch(&as_sink(&lp.batch(1000, r))).unwrap();
        g.failing.insert(0, "GPU is lost".into());
        let r = g.read(0);
        sink.append_batch(&as_sink(&lp.batch(2000, r))).unwrap();
        let up = sink.find(&[("__name__", "inferdb_gpu_up")]);
        assert_eq!(up[0].1, vec![(1000, 1.0), (2000, 0.0)]);
        let util = sink.find(&[("__name__", "DCGM_FI_DEV_GPU_UTIL")]);
        assert_eq!(util[0].0.get("modelName"), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(util[0].0.get("Hostname"), Some("h"));
        assert_eq!(util[0].1[0], (1000, 93.0));
        assert!(inferdb_storage::is_stale_nan(util[0].1[1].1));
    }

    #[tokio::test]
    async fn runs_on_fake_devices_until_shutdown() {
        let sink = Arc::new(MemorySink::new());
        let opts = GpuOptions {
            hostname: "h".into(),
            job: "gpu".into(),
            instance: "h".into(),
            interval: Duration::from_millis(20),
        };
        let mut g = FakeGpu::h100s(2);
        g.failing.insert(1, "boom".into());
        let s2 = sink.clone();
        let stop = async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while s2
                .find(&[("__name__", "inferdb_gpu_up")])
                .iter()
                .map(|x| x.1.len())
                .min()
                .unwrap_or(0)
                < 2
                && std::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        run_gpu_sampler(Box::new(g), sink.clone(), opts, stop).await;
        let up = sink.find(&[("__name__", "inferdb_gpu_up")]);
        assert_eq!(up.len(), 2);
        for (l, s) in up {
            let want = if l.get("gpu") == Some("0") { 1.0 } else { 0.0 };
            assert!(s.iter().all(|x| x.1 == want), "{l} {s:?}");
        }
    }
}
