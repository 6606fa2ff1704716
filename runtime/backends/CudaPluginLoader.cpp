//===- CudaPluginLoader.cpp - dlopen of the CUDA plugin, with its checks -----===//
//
// RTLD_LOCAL: the module's symbols never serve other libraries; RTLD_NOW: a missing symbol (cuBLAS of
// another major version, say) is reported here, as dlerror(), instead of aborting mid-run. The module is
// never closed: sessions it made are destroyed through code inside it.
//===----------------------------------------------------------------------===//
#include "runtime/backends/CudaPluginLoader.h"

#include <fmt/core.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <sys/stat.h>

namespace tpc::rt {

namespace {

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

/// The folder of the running executable, or "" when /proc is not mounted.
std::string executableDir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0)
    return "";
  std::string path(buf, size_t(n));
  return path.substr(0, path.rfind('/'));
}

#ifdef TPC_HAVE_CUDA
/// What to do about a plugin that cannot be used, after the reason.
std::string fix() {
  if (const char *env = std::getenv("TPC_CUDA_PLUGIN"); env && *env)
    return "point TPC_CUDA_PLUGIN at the libtpc_cuda.so of this tpc's build (its lib folder), or unset it";
  return "build tpc with CUDA (-DTPC_ENABLE_CUDA=ON; libtpc_cuda.so goes to its lib folder), or set "
         "TPC_CUDA_PLUGIN to the plugin's path";
}

Expected<const cuda::CudaPluginApi *> openPlugin() {
  std::vector<std::string> tried;
  const std::string path = cudaPluginPath(&tried);
  if (path.empty()) {
    std::string list;
    for (const std::string &t : tried)
      list += (list.empty() ? "" : ", ") + t;
    if (list.empty())
      list = "no path: /proc/self/exe, the executable's folder, is unreadable";
    return Error{
        fmt::format("the CUDA plugin libtpc_cuda.so is not installed (looked for {}): {}", list, fix())};
  }
  void *lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return Error{fmt::format("cannot load the CUDA plugin {}: {}; {}", path, ::dlerror(), fix())};
  auto abi = reinterpret_cast<int (*)()>(::dlsym(lib, "tpc_cuda_plugin_abi"));
  auto build = reinterpret_cast<const char *(*)()>(::dlsym(lib, "tpc_cuda_plugin_build"));
  auto api = reinterpret_cast<const cuda::CudaPluginApi *(*)()>(::dlsym(lib, "tpc_cuda_plugin_api"));
  if (!abi || !build || !api)
    return Error{fmt::format("{} is not a tpc CUDA plugin (it lacks tpc_cuda_plugin_abi/_build/_api); {}",
                             path, fix())};
  const std::string want = cuda::cudaPluginBuildTag(TPC_PLUGIN_VERSION);
  if (abi() != cuda::kCudaPluginAbi || want != build())
    return Error{
        fmt::format("the CUDA plugin {} is from another build of tpc (plugin ABI {}, '{}'; this tpc: ABI {}, "
                    "'{}'): rebuild it with this tpc, or point TPC_CUDA_PLUGIN at the matching file",
                    path, abi(), build(), cuda::kCudaPluginAbi, want)};
  return api();
}
#endif

} // namespace

std::string cudaPluginPath(std::vector<std::string> *candidates) {
  std::vector<std::string> paths;
  if (const char *env = std::getenv("TPC_CUDA_PLUGIN"); env && *env) {
    if (candidates)
      *candidates = {env};
    return env; // the override is taken as given: dlopen says what is wrong with it
  }
  if (const std::string dir = executableDir(); !dir.empty())
    paths = {dir + "/libtpc_cuda.so", dir + "/../lib/libtpc_cuda.so"};
  if (candidates)
    *candidates = paths;
  for (const std::string &p : paths)
    if (exists(p))
      return p;
  return "";
}

bool nvidiaDriverPresent() {
  return exists("/dev/nvidiactl") || exists("/dev/nvidia0") || exists("/proc/driver/nvidia");
}

Expected<const cuda::CudaPluginApi *> loadCudaPlugin() {
#ifdef TPC_HAVE_CUDA
  static std::once_flag once;
  static Expected<const cuda::CudaPluginApi *> loaded = Error{"not loaded"};
  std::call_once(once, [] { loaded = openPlugin(); });
  if (!loaded)
    return Error{loaded.message()};
  return *loaded;
#else
  return Error{"this tpc was built without CUDA (configure with -DTPC_ENABLE_CUDA=ON)"};
#endif
}

} // namespace tpc::rt
