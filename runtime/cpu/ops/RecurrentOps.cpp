//===- RecurrentOps.cpp - the Gated DeltaNet ops over recurrent caches -------===//
//
// SSM_CONV and DELTA_NET bind a step's operands and its recurrent cache (conv state in the K half, the
// delta-rule state in the V half, one cell per sequence: exec::KvBuffers with ctx 1) to the kernels of
// runtime/cpu/DeltaNet.h, which zero a sequence's state where its first token of the call is at position 0.
//===----------------------------------------------------------------------===//
#include "runtime/cpu/ops/Ops.h"

#include "runtime/cpu/DeltaNet.h"

namespace tpc::rt::cpu {

void opSsmConv(const TensorRef &x, const TensorRef &w, KvBuffers &rs, const TensorRef &pos, const TensorRef &y,
               ThreadGroup &tg) {
  SsmConvArgs a;
  a.x = x.f();
  a.w = w.f();
  a.y = y.f();
  a.t = x.shape[0];
  a.c = x.shape[1];
  a.k = w.shape[1];
  if (a.c == 0) // this device holds no key heads of the layer
    return;
  a.pos = pos.i();
  a.seq = rs.seq;
  a.convState = static_cast<float *>(rs.k);
  a.sequences = rs.sequences;
  ssmConv(a, tg);
}

void opDeltaNet(const TensorRef &q, const TensorRef &k, const TensorRef &v, const TensorRef &g,
                const TensorRef &beta, KvBuffers &rs, const TensorRef &pos, const TensorRef &y, float scale,
                ThreadGroup &tg) {
  DeltaNetArgs a;
  a.q = q.f();
  a.k = k.f();
  a.v = v.f();
  a.g = g.f();
  a.beta = beta.f();
  a.y = y.f();
  a.t = q.shape[0];
  a.hk = q.shape[1];
  a.dk = q.shape[2];
  a.hv = v.shape[1];
  a.dv = v.shape[2];
  if (a.hk == 0)
    return;
  a.scale = scale;
  a.pos = pos.i();
  a.seq = rs.seq;
  a.state = static_cast<float *>(rs.v);
  a.sequences = rs.sequences;
  deltaNet(a, tg);
}

} // namespace tpc::rt::cpu
