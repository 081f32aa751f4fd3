//! The NVML implementation of [`GpuSampler`] (through `nvml-wrapper`).
//!
//! Each field maps to the NVML call the DCGM catalog names. Fields a device does not support
//! (`NotSupported`) are left out, as dcgm-exporter leaves out blank values. Frame-buffer
//! memory uses `nvmlDeviceGetMemoryInfo_v2` (whose `used` excludes the driver-reserved part,
//! as DCGM's does) when the library has it, else the v1 call with reserved = 0. Remapped rows
//! come from `nvmlDeviceGetRemappedRows`. XID errors are read from an NVML event set (Linux)
//! and the last one per device is kept. `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` and the
//! `DCGM_FI_PROF_*` activity ratios have no plain-NVML equivalent here and are not emitted;
//! PCIe throughput is NVML's 20 ms KB/s sample times 1024.

use std::collections::HashMap;

use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::Nvml;

use super::{DeviceInfo, GpuSampler, Reading, F};

/// NVML field id of the HBM temperature.
const NVML_FI_DEV_MEMORY_TEMP: u32 = 82;

/// GPU sampling through NVML.
pub struct NvmlSampler {
    nvml: &'static Nvml,
    sys: Option<nvml_wrapper_sys::bindings::NvmlLib>,
    devices: Vec<DeviceInfo>,
    driver: String,
    #[cfg(target_os = "linux")]
    events: Option<nvml_wrapper::EventSet<'static>>,
    last_xid: HashMap<u32, u64>,
}

// SAFETY: the NVML handles are thread-safe (NVML is documented thread-safe), so moving them
// to another thread is sound; the sampler is used behind a mutex.
unsafe impl Send for NvmlSampler {}

fn xid_message(code: u64) -> &'static str {
    match code {
        0 => "No Error",
        13 => "Graphics Engine Exception",
        31 => "GPU memory page fault",
        43 => "GPU stopped processing",
        45 => "Preemptive cleanup, due to previous errors",
        48 => "Double Bit ECC Error",
        61 => "Internal micro-controller breakpoint/warning",
        62 => "Internal micro-controller halt",
        63 => "ECC page retirement or row remapping recording event",
        64 => "ECC page retirement or row remapper recording failure",
        74 => "NVLink Error",
        79 => "GPU has fallen off the bus",
        92 => "High single-bit ECC error rate",
        94 => "Contained ECC error",
        95 => "Uncontained ECC error",
        119 => "GSP RPC Timeout",
        120 => "GSP Error",
        _ => "Unknown Error",
    }
}

impl NvmlSampler {
    /// Initialises NVML and lists the devices. Fails without a driver or GPU.
    pub fn open() -> Result<Self, String> {
        let nvml = Nvml::init().map_err(|e| e.to_string())?;
        // One NVML handle for the life of the process: leaking it gives devices and event
        // sets a 'static lifetime.
        let nvml: &'static Nvml = Box::leak(Box::new(nvml));
        let driver = nvml.sys_driver_version().unwrap_or_default();
        let n = nvml.device_count().map_err(|e| e.to_string())?;
        let mut devices = vec![];
        for i in 0..n {
            let d = nvml.device_by_index(i).map_err(|e| e.to_string())?;
            devices.push(DeviceInfo {
                index: d.index().unwrap_or(i),
                uuid: d.uuid().unwrap_or_default(),
                pci_bus_id: d.pci_info().map(|p| p.bus_id).unwrap_or_default(),
                model_name: d.name().unwrap_or_default(),
            });
        }
        // SAFETY: loading the same shared library NVML already loaded; only symbols whose
        // presence is checked are called.
        let sys = unsafe { nvml_wrapper_sys::bindings::NvmlLib::new("libnvidia-ml.so.1") }.ok();
        #[cfg(target_os = "linux")]
        let events = {
            use nvml_wrapper::bitmasks::event::EventTypes;
            let mut set = nvml.create_event_set().ok();
            for i in 0..n {
                if let (Some(s), Ok(d)) = (set.take(), nvml.device_by_index(i)) {
                    set = match d.register_events(EventTypes::CRITICAL_XID_ERROR, s) {
                        Ok(s) => Some(s),
                        Err(e) => {
                            tracing::debug!(gpu = i, "XID events unavailable: {}", e.error);
                            // the set was consumed: start a new one for the other devices
                            nvml.create_event_set().ok()
                        }
                    };
                }
            }
            set
        };
        Ok(NvmlSampler {
            nvml,
            sys,
            devices,
            driver,
            #[cfg(target_os = "linux")]
            events,
            last_xid: HashMap::new(),
        })
    }

    #[cfg(target_os = "linux")]
    fn poll_xid(&mut self) {
        let Some(set) = &self.events else { return };
        for _ in 0..64 {
            match set.wait(0) {
                Ok(ev) => {
                    use nvml_wrapper::enums::event::XidError;
                    if let (Ok(i), Some(x)) = (ev.device.index(), ev.event_data) {
                        let code = match x {
                            XidError::Value(v) => v,
                            XidError::Unknown => 999,
                        };
                        self.last_xid.insert(i, code);
                    }
                }
                Err(_) => break,
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn poll_xid(&mut self) {}

    fn memory_v2(
        &self,
        handle: nvml_wrapper_sys::bindings::nvmlDevice_t,
    ) -> Option<(u64, u64, u64)> {
        use nvml_wrapper_sys::bindings::nvmlMemory_v2_t;
        let lib = self.sys.as_ref()?;
        if lib.nvmlDeviceGetMemoryInfo_v2.is_err() {
            return None;
        }
        let mut m = nvmlMemory_v2_t {
            version: (std::mem::size_of::<nvmlMemory_v2_t>() as u32) | (2 << 24),
            total: 0,
            reserved: 0,
            free: 0,
            used: 0,
        };
        // SAFETY: symbol checked above; `handle` is a live device handle; `m` is a valid
        // out-pointer with its version set.
        let r = unsafe { lib.nvmlDeviceGetMemoryInfo_v2(handle, &mut m) };
        (r == 0).then_some((m.free, m.used, m.reserved))
    }

    fn remapped_rows(
        &self,
        handle: nvml_wrapper_sys::bindings::nvmlDevice_t,
    ) -> Option<(u32, u32, u32)> {
        let lib = self.sys.as_ref()?;
        if lib.nvmlDeviceGetRemappedRows.is_err() {
            return None;
        }
        let (mut corr, mut unc, mut pending, mut failed) = (0u32, 0u32, 0u32, 0u32);
        // SAFETY: symbol checked above; valid out-pointers.
        let r = unsafe {
            lib.nvmlDeviceGetRemappedRows(handle, &mut corr, &mut unc, &mut pending, &mut failed)
        };
        (r == 0).then_some((corr, unc, failed))
    }
}

/// Turns an NVML result into a reading: `NotSupported` (and similar) leaves the field out,
/// a lost GPU fails the whole read.
fn keep<T>(
    out: &mut Vec<Reading>,
    f: F,
    r: Result<T, NvmlError>,
    conv: impl Fn(T) -> f64,
) -> Result<(), String> {
    match r {
        Ok(v) => {
            out.push(Reading::new(f, conv(v)));
            Ok(())
        }
        Err(NvmlError::GpuLost) => Err("GPU is lost".into()),
        Err(NvmlError::Uninitialized) => Err("NVML uninitialized".into()),
        Err(_) => Ok(()),
    }
}

impl GpuSampler for NvmlSampler {
    fn driver_version(&self) -> String {
        self.driver.clone()
    }

    fn devices(&self) -> Vec<DeviceInfo> {
        self.devices.clone()
    }

    fn read(&mut self, index: u32) -> Result<Vec<Reading>, String> {
        self.poll_xid();
        let d = self
            .nvml
            .device_by_index(index)
            .map_err(|e| format!("device {index}: {e}"))?;
        let mut out = vec![];
        keep(
            &mut out,
            F::DCGM_FI_DEV_SM_CLOCK,
            d.clock_info(Clock::SM),
            |v| v as f64,
        )?;
        keep(
            &mut out,
            F::DCGM_FI_DEV_MEM_CLOCK,
            d.clock_info(Clock::Memory),
            |v| v as f64,
        )?;
        if let Ok(vals) = d.field_values_for(&[FieldId(NVML_FI_DEV_MEMORY_TEMP)]) {
            if let Some(Ok(FieldValueSample { value: Ok(v), .. })) = vals.into_iter().next() {
                use nvml_wrapper::enums::device::SampleValue;
                let x = match v {
                    SampleValue::F64(x) => x,
                    SampleValue::U32(x) => x as f64,
                    SampleValue::U64(x) => x as f64,
                    SampleValue::I64(x) => x as f64,
                };
                out.push(Reading::new(F::DCGM_FI_DEV_MEMORY_TEMP, x));
            }
        }
        keep(
            &mut out,
            F::DCGM_FI_DEV_GPU_TEMP,
            d.temperature(TemperatureSensor::Gpu),
            |v| v as f64,
        )?;
        keep(
            &mut out,
            F::DCGM_FI_DEV_POWER_USAGE,
            d.power_usage(),
            |mw| mw as f64 / 1000.0,
        )?;
        keep(
            &mut out,
            F::DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
            d.total_energy_consumption(),
            |v| v as f64,
        )?;
        keep(
            &mut out,
            F::DCGM_FI_DEV_PCIE_REPLAY_COUNTER,
            d.pcie_replay_counter(),
            |v| v as f64,
        )?;
        match d.utilization_rates() {
            Ok(u) => {
                out.push(Reading::new(F::DCGM_FI_DEV_GPU_UTIL, u.gpu as f64));
                out.push(Reading::new(F::DCGM_FI_DEV_MEM_COPY_UTIL, u.memory as f64));
            }
            Err(NvmlError::GpuLost) => return Err("GPU is lost".into()),
            Err(_) => {}
        }
        keep(
            &mut out,
            F::DCGM_FI_DEV_ENC_UTIL,
            d.encoder_utilization(),
            |u| u.utilization as f64,
        )?;
        keep(
            &mut out,
            F::DCGM_FI_DEV_DEC_UTIL,
            d.decoder_utilization(),
            |u| u.utilization as f64,
        )?;
        let xid = self.last_xid.get(&index).copied().unwrap_or(0);
        out.push(Reading {
            field: F::DCGM_FI_DEV_XID_ERRORS,
            value: xid as f64,
            extra: vec![
                ("err_code".into(), xid.to_string()),
                ("err_msg".into(), xid_message(xid).into()),
            ],
        });
        // SAFETY: the handle is only passed to NVML calls while `d` is alive.
        let handle = unsafe { d.handle() };
        const MIB: u64 = 1 << 20;
        match self.memory_v2(handle) {
            Some((free, used, reserved)) => {
                out.push(Reading::new(F::DCGM_FI_DEV_FB_FREE, (free / MIB) as f64));
                out.push(Reading::new(F::DCGM_FI_DEV_FB_USED, (used / MIB) as f64));
                out.push(Reading::new(
                    F::DCGM_FI_DEV_FB_RESERVED,
                    (reserved / MIB) as f64,
                ));
            }
            None => {
                if let Ok(m) = d.memory_info() {
                    out.push(Reading::new(F::DCGM_FI_DEV_FB_FREE, (m.free / MIB) as f64));
                    out.push(Reading::new(F::DCGM_FI_DEV_FB_USED, (m.used / MIB) as f64));
                    out.push(Reading::new(F::DCGM_FI_DEV_FB_RESERVED, 0.0));
                }
            }
        }
        if let Some((corr, unc, failed)) = self.remapped_rows(handle) {
            out.push(Reading::new(
                F::DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS,
                unc as f64,
            ));
            out.push(Reading::new(
                F::DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS,
                corr as f64,
            ));
            out.push(Reading::new(
                F::DCGM_FI_DEV_ROW_REMAP_FAILURE,
                failed as f64,
            ));
        }
        out.push(Reading::new(F::DCGM_FI_DEV_VGPU_LICENSE_STATUS, 0.0));
        keep(
            &mut out,
            F::DCGM_FI_PROF_PCIE_TX_BYTES,
            d.pcie_throughput(PcieUtilCounter::Send),
            |kb| kb as f64 * 1024.0,
        )?;
        keep(
            &mut out,
            F::DCGM_FI_PROF_PCIE_RX_BYTES,
            d.pcie_throughput(PcieUtilCounter::Receive),
            |kb| kb as f64 * 1024.0,
        )?;
        out.sort_by_key(|r| r.field);
        Ok(out)
    }
}
