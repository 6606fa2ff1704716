// RUN: tpc-opt %s --split-input-file --verify-diagnostics | FileCheck %s
/// #tpc.state forms, the attribute's own checks, and the checks of tpc.state / tpc.placement /
/// tpc.devices against the values and the module they are attached to.

/// Every form round-trips; granule and segments default to 1 and are always printed.
// CHECK-LABEL: func.func @forms
// CHECK-SAME: tpc.state = #tpc.state<split axis = 0, sizes = [2, 1, 0], granule = 1, segments = 1>
// CHECK: tpc.state = [#tpc.state<mirrored>]
// CHECK: tpc.state = [#tpc.state<partial>]
// CHECK: tpc.state = [#tpc.state<local device = 2>]
// CHECK: tpc.state = [#tpc.state<split axis = 1, sizes = [256, 128, 128], granule = 64, segments = 1>]
// CHECK: tpc.state = [#tpc.state<split axis = 1, sizes = [256, 0, 256], granule = 64, segments = 2>]
// CHECK: tpc.state = [#tpc.state<split axis = 0, sizes = [4, 4, 0], granule = 1, segments = 1>]
// CHECK: tpc.state = [#tpc.state<routed sizes = [4, 3, 1]>]
module attributes {tpc.devices = 3} {
  func.func @forms(%x: tensor<?x512xf32>, %c: !tpc.kv_cache<3x64x64> {tpc.state = #tpc.state<split axis = 0, sizes = [2, 1, 0]>}) {
    %0 = tpc.scale %x {value = 1.0 : f32, tpc.state = [#tpc.state<mirrored>]} : tensor<?x512xf32> -> tensor<?x512xf32>
    %1 = tpc.scale %x {value = 1.0 : f32, tpc.state = [#tpc.state<partial>]} : tensor<?x512xf32> -> tensor<?x512xf32>
    %2 = tpc.scale %x {value = 1.0 : f32, tpc.state = [#tpc.state<local device = 2>]} : tensor<?x512xf32> -> tensor<?x512xf32>
    %3 = tpc.scale %x {value = 1.0 : f32, tpc.state = [#tpc.state<split axis = 1, sizes = [256, 128, 128], granule = 64, segments = 1>]} : tensor<?x512xf32> -> tensor<?x512xf32>
    /// merged gate|up: each device holds sizes[d]/2 of each half.
    %4 = tpc.scale %x {value = 1.0 : f32, tpc.state = [#tpc.state<split axis = 1, sizes = [256, 0, 256], granule = 64, segments = 2>]} : tensor<?x512xf32> -> tensor<?x512xf32>
    /// The dynamic token axis can be split; its sum is checked at run time.
    %5 = tpc.scale %x {value = 1.0 : f32, tpc.state = [#tpc.state<split axis = 0, sizes = [4, 4, 0]>]} : tensor<?x512xf32> -> tensor<?x512xf32>
    /// Rows routed to whole experts (expert parallel): experts per device, not a dimension of the value.
    %6 = tpc.scale %x {value = 1.0 : f32, tpc.state = [#tpc.state<routed sizes = [4, 3, 1]>]} : tensor<?x512xf32> -> tensor<?x512xf32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// The attribute's own checks
//===----------------------------------------------------------------------===//

// expected-error @+1 {{unknown split state 'sharded', expected mirrored, split, partial, local or routed}}
func.func private @negative_unknown_kind() attributes {x = #tpc.state<sharded>}

// -----

// expected-error @+1 {{routed state: experts of device 1 must be >= 0, got -2}}
func.func private @negative_routed() attributes {x = #tpc.state<routed sizes = [4, -2]>}

// -----

// expected-error @+1 {{split state: size 100 of device 1 is not a multiple of granule 64 x segments 1}}
func.func private @negative_granule() attributes {x = #tpc.state<split axis = 1, sizes = [64, 100], granule = 64>}

// -----

/// With segments = 2 each size must cover whole granules in both segments.
// expected-error @+1 {{split state: size 64 of device 0 is not a multiple of granule 64 x segments 2}}
func.func private @negative_segments_granule() attributes {x = #tpc.state<split axis = 1, sizes = [64, 192], granule = 64, segments = 2>}

// -----

// expected-error @+1 {{split state: size of device 1 must be >= 0, got -4}}
func.func private @negative_size() attributes {x = #tpc.state<split axis = 0, sizes = [8, -4]>}

// -----

// expected-error @+1 {{split state: axis must be >= 0, got -1}}
func.func private @negative_axis() attributes {x = #tpc.state<split axis = -1, sizes = [8]>}

// -----

// expected-error @+1 {{split state: sizes must list one size per device, got none}}
func.func private @negative_no_sizes() attributes {x = #tpc.state<split axis = 0, sizes = []>}

// -----

// expected-error @+1 {{split state: granule must be >= 1, got 0}}
func.func private @negative_granule_zero() attributes {x = #tpc.state<split axis = 0, sizes = [8], granule = 0>}

// -----

// expected-error @+1 {{split state: segments must be >= 1, got 0}}
func.func private @negative_segments_zero() attributes {x = #tpc.state<split axis = 0, sizes = [8], segments = 0>}

// -----

// expected-error @+1 {{split state: the sum of sizes overflows}}
func.func private @negative_sum_overflow() attributes {x = #tpc.state<split axis = 0, sizes = [9223372036854775807, 1]>}

// -----

// expected-error @+1 {{split state: granule 4294967296 x segments 4294967296 overflows}}
func.func private @negative_unit_overflow() attributes {x = #tpc.state<split axis = 0, sizes = [0], granule = 4294967296, segments = 4294967296>}

// -----

// expected-error @+1 {{duplicate 'granule' in split state, expected granule or segments (once each)}}
func.func private @negative_duplicate_granule() attributes {x = #tpc.state<split axis = 0, sizes = [8], granule = 2, granule = 4>}

// -----

// expected-error @+1 {{unexpected 'device' in split state, expected granule or segments (once each)}}
func.func private @negative_split_device() attributes {x = #tpc.state<split axis = 0, sizes = [8], device = 1>}

// -----

/// Segments may come without a granule, and before it.
// CHECK-LABEL: func.func private @segments_first
// CHECK-SAME: #tpc.state<split axis = 0, sizes = [8, 8], granule = 4, segments = 2>
func.func private @segments_first() attributes {x = #tpc.state<split axis = 0, sizes = [8, 8], segments = 2, granule = 4>}

// -----

// expected-error @+1 {{local state: device must be >= 0, got -1}}
func.func private @negative_local_device() attributes {x = #tpc.state<local device = -1>}

// -----

//===----------------------------------------------------------------------===//
// Checks against the value and the module
//===----------------------------------------------------------------------===//

func.func @negative_sum_mismatch(%x: tensor<?x512xf32>) {
  // expected-error @+1 {{'tpc.scale' op tpc.state of result 0: split sizes sum to 384 but axis 1 of 'tensor<?x512xf32>' has 512}}
  %0 = tpc.scale %x {value = 1.0 : f32, tpc.state = [#tpc.state<split axis = 1, sizes = [256, 128]>]} : tensor<?x512xf32> -> tensor<?x512xf32>
  return
}

// -----

func.func @negative_axis_rank(%x: tensor<?x512xf32>) {
  // expected-error @+1 {{'tpc.scale' op tpc.state of result 0: split axis 2 is out of range for 'tensor<?x512xf32>'}}
  %0 = tpc.scale %x {value = 1.0 : f32, tpc.state = [#tpc.state<split axis = 2, sizes = [256, 256]>]} : tensor<?x512xf32> -> tensor<?x512xf32>
  return
}

// -----

module attributes {tpc.devices = 2} {
  func.func @negative_device_count(%x: tensor<?x512xf32>) {
    // expected-error @+1 {{'tpc.scale' op tpc.state of result 0: split state lists 3 sizes but tpc.devices = 2}}
    %0 = tpc.scale %x {value = 1.0 : f32, tpc.state = [#tpc.state<split axis = 1, sizes = [256, 128, 128]>]} : tensor<?x512xf32> -> tensor<?x512xf32>
    return
  }
}

// -----

module attributes {tpc.devices = 2} {
  func.func @negative_local_out_of_range(%x: tensor<?x512xf32>) {
    // expected-error @+1 {{'tpc.scale' op tpc.state of result 0: local state on device 2 but tpc.devices = 2}}
    %0 = tpc.scale %x {value = 1.0 : f32, tpc.state = [#tpc.state<local device = 2>]} : tensor<?x512xf32> -> tensor<?x512xf32>
    return
  }
}

// -----

// expected-error @+1 {{'builtin.module' op tpc.devices must be a positive integer, got 0 : i64}}
module attributes {tpc.devices = 0} {
}

// -----

func.func @negative_state_count(%x: tensor<?x512xf32>) {
  // expected-error @+1 {{'tpc.scale' op tpc.state must be an array of 1 #tpc.state attributes (one per result)}}
  %0 = tpc.scale %x {value = 1.0 : f32, tpc.state = [#tpc.state<mirrored>, #tpc.state<mirrored>]} : tensor<?x512xf32> -> tensor<?x512xf32>
  return
}

// -----

func.func @negative_state_entry(%x: tensor<?x512xf32>) {
  // expected-error @+1 {{'tpc.scale' op tpc.state entry 0 is not a #tpc.state: "mirrored"}}
  %0 = tpc.scale %x {value = 1.0 : f32, tpc.state = ["mirrored"]} : tensor<?x512xf32> -> tensor<?x512xf32>
  return
}

// -----

/// Only the KV-head axis of a cache can be split.
// expected-error @+1 {{'func.func' op tpc.state of argument 0: split state of a !tpc.kv_cache must use axis 0 (KV heads), got axis 1}}
func.func private @negative_cache_axis(!tpc.kv_cache<2x64x64> {tpc.state = #tpc.state<split axis = 1, sizes = [32, 32]>})

// -----

// expected-error @+1 {{'func.func' op tpc.state of argument 0: split sizes sum to 3 but axis 0 of '!tpc.kv_cache<2x64x64>' has 2}}
func.func private @negative_cache_heads(!tpc.kv_cache<2x64x64> {tpc.state = #tpc.state<split axis = 0, sizes = [2, 1]>})

// -----

// expected-error @+1 {{'func.func' op tpc.state of argument 0: split state on a value of type 'i32', which is neither a ranked tensor nor a !tpc.kv_cache}}
func.func private @negative_scalar(i32 {tpc.state = #tpc.state<split axis = 0, sizes = [1]>})

// -----

// expected-error @+1 {{'func.func' op tpc.state of argument 0: expected a #tpc.state, got [#tpc.state<mirrored>]}}
func.func private @negative_arg_array(tensor<4xf32> {tpc.state = [#tpc.state<mirrored>]})

// -----

// expected-error @+1 {{'func.func' op tpc.state of result 0: split sizes sum to 2 but axis 0 of 'tensor<4xf32>' has 4}}
func.func private @negative_result_state() -> (tensor<4xf32> {tpc.state = #tpc.state<split axis = 0, sizes = [1, 1]>})

// -----

func.func @negative_placement(%x: tensor<?x512xf32>) {
  // expected-error @+1 {{'tpc.scale' op tpc.placement must be "device" or "host", got "gpu"}}
  %0 = tpc.scale %x {value = 1.0 : f32, tpc.placement = "gpu"} : tensor<?x512xf32> -> tensor<?x512xf32>
  return
}

// -----

func.func @negative_placement_count(%x: tensor<?x512xf32>) {
  // expected-error @+1 {{'tpc.scale' op tpc.placement array must have one entry per result (1), got 2}}
  %0 = tpc.scale %x {value = 1.0 : f32, tpc.placement = ["host", "host"]} : tensor<?x512xf32> -> tensor<?x512xf32>
  return
}
