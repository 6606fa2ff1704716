//===- FakePlugin.cpp - libraries that TPC_CUDA_PLUGIN must refuse ------------===//
//
// Built twice: without TPC_FAKE_STALE, a shared library with none of the plugin's entry points; with it,
// one whose entry points say it comes from another build (another ABI and build tag), so the loader must
// refuse it before it reads the table (which it never exports).
//===----------------------------------------------------------------------===//
#define TPC_FAKE_EXPORT extern "C" __attribute__((visibility("default")))

#ifdef TPC_FAKE_STALE
TPC_FAKE_EXPORT int tpc_cuda_plugin_abi() { return 0; }
TPC_FAKE_EXPORT const char *tpc_cuda_plugin_build() { return "tpc 0.0.1; an older build"; }
TPC_FAKE_EXPORT const void *tpc_cuda_plugin_api() { return nullptr; }
#else
TPC_FAKE_EXPORT int tpc_not_a_plugin() { return 1; }
#endif
