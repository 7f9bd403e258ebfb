/** `--query-gpu` field names real drivers accept (from the headers of the fixture CSVs), with their header unit. */

/** Fields whose header carries no unit. */
const PLAIN = `timestamp
driver_version
vgpu_driver_capability.heterogenous_multivGPU
count
name
serial
uuid
pci.bus_id
pci.domain
pci.bus
pci.device
pci.baseClass
pci.subClass
pci.device_id
pci.sub_device_id
vgpu_device_capability.fractional_multiVgpu
vgpu_device_capability.heterogeneous_timeSlice_profile
vgpu_device_capability.heterogeneous_timeSlice_sizes
vgpu_device_capability.homogeneous_placements
vgpu_device_capability.mig_timeSlicing
vgpu_device_capability.mig_timeSlicing_mode
pcie.link.gen.current
pcie.link.gen.gpucurrent
pcie.link.gen.max
pcie.link.gen.gpumax
pcie.link.gen.hostmax
pcie.link.width.current
pcie.link.width.max
index
display_mode
display_attached
display_active
persistence_mode
addressing_mode
accounting.mode
accounting.buffer_size
driver_model.current
driver_model.pending
vbios_version
inforom.img
inforom.oem
inforom.ecc
inforom.pwr
inforom.checksum_validation
gpu_recovery_action
gom.current
gom.pending
pstate
clocks_event_reasons.supported
clocks_event_reasons.active
clocks_event_reasons.gpu_idle
clocks_event_reasons.applications_clocks_setting
clocks_event_reasons.sw_power_cap
clocks_event_reasons.hw_slowdown
clocks_event_reasons.hw_thermal_slowdown
clocks_event_reasons.hw_power_brake_slowdown
clocks_event_reasons.sw_thermal_slowdown
clocks_event_reasons.sync_boost
compute_mode
compute_cap
encoder.stats.sessionCount
encoder.stats.averageFps
encoder.stats.averageLatency
dramEncryption.mode.current
dramEncryption.mode.pending
ecc.mode.current
ecc.mode.pending
ecc.errors.corrected.volatile.device_memory
ecc.errors.corrected.volatile.dram
ecc.errors.corrected.volatile.register_file
ecc.errors.corrected.volatile.l1_cache
ecc.errors.corrected.volatile.l2_cache
ecc.errors.corrected.volatile.texture_memory
ecc.errors.corrected.volatile.cbu
ecc.errors.corrected.volatile.sram
ecc.errors.corrected.volatile.total
ecc.errors.corrected.aggregate.device_memory
ecc.errors.corrected.aggregate.dram
ecc.errors.corrected.aggregate.register_file
ecc.errors.corrected.aggregate.l1_cache
ecc.errors.corrected.aggregate.l2_cache
ecc.errors.corrected.aggregate.texture_memory
ecc.errors.corrected.aggregate.cbu
ecc.errors.corrected.aggregate.sram
ecc.errors.corrected.aggregate.total
ecc.errors.uncorrected.volatile.device_memory
ecc.errors.uncorrected.volatile.dram
ecc.errors.uncorrected.volatile.register_file
ecc.errors.uncorrected.volatile.l1_cache
ecc.errors.uncorrected.volatile.l2_cache
ecc.errors.uncorrected.volatile.texture_memory
ecc.errors.uncorrected.volatile.cbu
ecc.errors.uncorrected.volatile.sram
ecc.errors.uncorrected.volatile.total
ecc.errors.uncorrected.aggregate.device_memory
ecc.errors.uncorrected.aggregate.dram
ecc.errors.uncorrected.aggregate.register_file
ecc.errors.uncorrected.aggregate.l1_cache
ecc.errors.uncorrected.aggregate.l2_cache
ecc.errors.uncorrected.aggregate.texture_memory
ecc.errors.uncorrected.aggregate.cbu
ecc.errors.uncorrected.aggregate.sram
ecc.errors.uncorrected.aggregate.total
ecc.errors.uncorrected.volatile.sram.parity
ecc.errors.uncorrected.volatile.sram.secded
ecc.errors.uncorrected.aggregate.sram.parity
ecc.errors.uncorrected.aggregate.sram.secded
ecc.errors.uncorrected.aggregate.sram.thresholdExceeded
ecc.errors.uncorrected.aggregate.sram.l2
ecc.errors.uncorrected.aggregate.sram.sm
ecc.errors.uncorrected.aggregate.sram.mcu
ecc.errors.uncorrected.aggregate.sram.pcie
ecc.errors.uncorrected.aggregate.sram.other
retired_pages.single_bit_ecc.count
retired_pages.double_bit.count
retired_pages.pending
remapped_rows.correctable
remapped_rows.uncorrectable
remapped_rows.pending
remapped_rows.failure
remapped_rows.histogram.max
remapped_rows.histogram.high
remapped_rows.histogram.partial
remapped_rows.histogram.low
remapped_rows.histogram.none
temperature.gpu
temperature.gpu.tlimit
temperature.memory
power.management
power_smoothing.delayed_power_smoothing_supported
power_smoothing.curr_profile.primary_floor_act_window_multiplier
power_smoothing.curr_profile.primary_floor_tar_window_multiplier
power_smoothing.admin_override.primary_floor_act_window_multiplier
power_smoothing.admin_override.primary_floor_tar_window_multiplier
mig.mode.current
mig.mode.pending
gsp.mode.current
gsp.mode.default
c2c.mode
fabric.state
fabric.status
fabric.cliqueId
fabric.clusterUuid
fabric.health.summary
fabric.health.bandwidth
fabric.health.route_recovery_in_progress
fabric.health.route_unhealthy
fabric.health.access_timeout_recovery
fabric.health.incorrect_configuration
platform.chassis_serial_number
platform.slot_number
platform.tray_index
platform.host_id
platform.peer_type
platform.module_id
platform.gpu_fabric_guid
hostname
clocks_throttle_reasons.supported
clocks_throttle_reasons.active
clocks_throttle_reasons.gpu_idle
clocks_throttle_reasons.applications_clocks_setting
clocks_throttle_reasons.sw_power_cap
clocks_throttle_reasons.hw_slowdown
clocks_throttle_reasons.hw_thermal_slowdown
clocks_throttle_reasons.hw_power_brake_slowdown
clocks_throttle_reasons.sw_thermal_slowdown
clocks_throttle_reasons.sync_boost`;

const WITH_UNIT: Record<string, string> = {
  'fan.speed': '%',
  'utilization.gpu': '%',
  'utilization.memory': '%',
  'utilization.encoder': '%',
  'utilization.decoder': '%',
  'utilization.jpeg': '%',
  'utilization.ofa': '%',
  edpp_multiplier: '%',
  'clocks_event_reasons_counters.sw_power_cap': 'us',
  'clocks_event_reasons_counters.sync_boost': 'us',
  'clocks_event_reasons_counters.sw_thermal_slowdown': 'us',
  'clocks_event_reasons_counters.hw_thermal_slowdown': 'us',
  'clocks_event_reasons_counters.hw_power_brake_slowdown': 'us',
  'memory.total': 'MiB',
  'memory.reserved': 'MiB',
  'memory.used': 'MiB',
  'memory.free': 'MiB',
  'protected_memory.total': 'MiB',
  'protected_memory.used': 'MiB',
  'protected_memory.free': 'MiB',
  'power.draw': 'W',
  'power.draw.average': 'W',
  'power.draw.instant': 'W',
  'power.limit': 'W',
  'enforced.power.limit': 'W',
  'power.default_limit': 'W',
  'power.min_limit': 'W',
  'power.max_limit': 'W',
  'module.power.draw.average': 'W',
  'module.power.draw.instant': 'W',
  'module.power.limit': 'W',
  'module.enforced.power.limit': 'W',
  'module.power.default_limit': 'W',
  'module.power.min_limit': 'W',
  'module.power.max_limit': 'W',
  'power_smoothing.primary_power_floor': 'W',
  'power_smoothing.secondary_power_floor': 'W',
  'power_smoothing.min_primary_floor_activation_offset': 'W',
  'power_smoothing.min_primary_floor_activation_point': 'W',
  'power_smoothing.curr_profile.secondary_power_floor': 'W',
  'power_smoothing.curr_profile.primary_floor_act_offset': 'W',
  'power_smoothing.admin_override.secondary_power_floor': 'W',
  'power_smoothing.admin_override.primary_floor_act_offset': 'W',
  'power_smoothing.window_multiplier': 'ms',
  'clocks.current.graphics': 'MHz',
  'clocks.current.sm': 'MHz',
  'clocks.current.memory': 'MHz',
  'clocks.current.video': 'MHz',
  'clocks.applications.graphics': 'MHz',
  'clocks.applications.memory': 'MHz',
  'clocks.default_applications.graphics': 'MHz',
  'clocks.default_applications.memory': 'MHz',
  'clocks.max.graphics': 'MHz',
  'clocks.max.sm': 'MHz',
  'clocks.max.memory': 'MHz',
};

/** Field name -> unit shown in the header (`memory.used [MiB]`) and, unless `nounits`, after each value; '' when none. */
export const QUERY_GPU_FIELD_UNITS: ReadonlyMap<string, string> = new Map<string, string>([
  ...PLAIN.split(/\s+/)
    .filter((f) => f !== '')
    .map((f): [string, string] => [f, '']),
  // Aliases nvidia-smi --help-query-gpu documents for the same values.
  ...['gpu_name', 'gpu_uuid', 'gpu_bus_id', 'gpu_serial'].map((f): [string, string] => [f, '']),
  ...Object.entries(WITH_UNIT),
]);
