// One pipeline for both drivers: tpc-opt --tpc-pipeline on the imported IR prints exactly what
// `tpc compile --emit=mlir` prints for the same options (blank lines aside).
// RUN: rm -rf %t && mkdir -p %t
// RUN: tpc compile %S/../../examples/models/tiny-demo.gguf --emit=mlir --stop-after=import -o %t/in.mlir
// RUN: tpc-opt %t/in.mlir '--tpc-pipeline=devices=3 tensor-split=3,2,1' | grep -v '^$' > %t/opt.mlir
// RUN: tpc compile %S/../../examples/models/tiny-demo.gguf --devices 3 --tensor-split 3,2,1 --emit=mlir | grep -v '^$' > %t/cli.mlir
// RUN: diff %t/opt.mlir %t/cli.mlir
// RUN: FileCheck %s < %t/opt.mlir
// CHECK: tpc.activation_bytes = array<i64: {{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}>{{.*}}tpc.devices = 3
// CHECK: tpc.all_reduce_rms_norm {{.*}}tpc.offsets = [array<i64:
// CHECK: return
