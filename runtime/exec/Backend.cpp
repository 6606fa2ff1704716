//===- Backend.cpp - the backend registry ------------------------------------===//
//
// Selection by name, with errors that name what exists; no backend is known here.
//===----------------------------------------------------------------------===//
#include "runtime/exec/Backend.h"

#include <fmt/core.h>

namespace tpc::rt {

namespace {
/// A name without an implementation in this build (e.g. "cuda" without nvcc).
class UnavailableBackend final : public Backend {
public:
  UnavailableBackend(std::string name, std::string reason)
      : name_(std::move(name)), reason_(std::move(reason)) {}
  std::string name() const override { return name_; }
  Expected<void> usable() const override { return Error{reason_}; }
  Expected<std::unique_ptr<Session>> open(Plan, const SessionOptions &) const override {
    return Error{fmt::format("backend '{}': {}", name_, reason_)};
  }

private:
  std::string name_, reason_;
};
} // namespace

std::unique_ptr<exec::HostStepRunner> Backend::hostStepRunner(int) const { return nullptr; }

Expected<void> Backend::mayBePresent() const { return {}; }

std::unique_ptr<Backend> makeUnavailableBackend(std::string name, std::string reason) {
  return std::make_unique<UnavailableBackend>(std::move(name), std::move(reason));
}

void BackendRegistry::add(std::unique_ptr<Backend> b) {
  for (std::unique_ptr<Backend> &have : backends_)
    if (have->name() == b->name()) {
      have = std::move(b);
      return;
    }
  backends_.push_back(std::move(b));
}

const Backend *BackendRegistry::find(const std::string &name) const {
  for (const std::unique_ptr<Backend> &b : backends_)
    if (b->name() == name)
      return b.get();
  return nullptr;
}

std::vector<std::string> BackendRegistry::names() const {
  std::vector<std::string> out;
  for (const std::unique_ptr<Backend> &b : backends_)
    out.push_back(b->name());
  return out;
}

Expected<const Backend *> BackendRegistry::select(const std::string &name) const {
  // Every backend of this build with its state: "cpu, cuda (not usable here: no GPU is visible)".
  auto listing = [&] {
    std::string out;
    for (const std::unique_ptr<Backend> &b : backends_) {
      out += out.empty() ? "" : ", ";
      out += b->name();
      Expected<void> ok = b->mayBePresent();
      if (ok)
        ok = b->usable();
      if (!ok)
        out += " (not usable here: " + ok.message() + ")";
    }
    return out.empty() ? std::string("none") : out;
  };
  if (name == "auto") {
    for (const std::unique_ptr<Backend> &b : backends_)
      if (b->mayBePresent() && b->usable())
        return b.get();
    return Error{fmt::format("no backend can run here; this build has: {}", listing())};
  }
  const Backend *b = find(name);
  if (!b)
    return Error{fmt::format("unknown backend '{}'; this build has: auto, {}", name, listing())};
  if (Expected<void> ok = b->usable(); !ok)
    return Error{fmt::format("backend '{}' cannot run here: {}", name, ok.message())};
  return b;
}

Expected<std::unique_ptr<Session>> BackendRegistry::open(const std::string &name, Plan plan,
                                                         const SessionOptions &opts) const {
  Expected<const Backend *> b = select(name);
  if (!b)
    return Error{b.message()};
  return (*b)->open(std::move(plan), opts);
}

} // namespace tpc::rt
