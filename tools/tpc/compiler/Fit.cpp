//===- Fit.cpp - `tpc compile --fit` -----------------------------------------===//
//
// The search of Fit.h. Every plan it looks at is compiled for real (the passes decide the splits; nothing
// here predicts them) and measured with rt::memoryAt; compiled plans are kept by request, so a request is
// compiled once. The context is not a compile input: a plan's memory at any context follows from its
// caches (rt::memoryAt), so step 1 and the regrowth after the other steps compile nothing.
//===----------------------------------------------------------------------===//
#include "tools/tpc/compiler/Fit.h"

#include "runtime/plan/PlanSummary.h"
#include "tools/tpc/Command.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <sstream>

namespace tpc::cli {

uint64_t parseByteSize(const std::string &text, const std::string &flag) {
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception &) {
    end = 0;
  }
  std::string unit = text.substr(end);
  std::transform(unit.begin(), unit.end(), unit.begin(), [](char c) { return std::tolower(uint8_t(c)); });
  static const std::map<std::string, double> units = {{"", 1},
                                                      {"b", 1},
                                                      {"k", 1024.0},
                                                      {"kib", 1024.0},
                                                      {"kb", 1e3},
                                                      {"m", 1048576.0},
                                                      {"mib", 1048576.0},
                                                      {"mb", 1e6},
                                                      {"g", 1073741824.0},
                                                      {"gib", 1073741824.0},
                                                      {"gb", 1e9},
                                                      {"t", 1099511627776.0},
                                                      {"tib", 1099511627776.0},
                                                      {"tb", 1e12}};
  auto u = units.find(unit);
  if (end == 0 || u == units.end() || !(value > 0) || !std::isfinite(value))
    throw Failure(fmt::format("{}: '{}' is not a memory size (give e.g. 24GiB, 512MiB or 1.5G)", flag, text));
  return static_cast<uint64_t>(value * u->second);
}

namespace {

/// Free memory of each visible CUDA device, from nvidia-smi (CUDA_VISIBLE_DEVICES, when it lists indices,
/// picks among them as the runtime sees them). Empty where there is no NVIDIA GPU or no nvidia-smi.
std::vector<uint64_t> cudaFreeMemory() {
  std::unique_ptr<FILE, int (*)(FILE *)> p(
      ::popen("nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits 2>/dev/null", "r"),
      &::pclose);
  std::vector<uint64_t> all;
  if (!p)
    return all;
  char line[256];
  while (std::fgets(line, sizeof line, p.get())) {
    char *end = nullptr;
    const unsigned long long mib = std::strtoull(line, &end, 10);
    if (end == line)
      return {}; // not a number: an error message, not a GPU
    all.push_back(static_cast<uint64_t>(mib) << 20);
  }
  const char *visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!visible || !*visible)
    return all;
  std::vector<uint64_t> picked;
  std::stringstream in(visible);
  for (std::string id; std::getline(in, id, ',');) {
    if (id.empty() || !std::all_of(id.begin(), id.end(), [](char c) { return std::isdigit(uint8_t(c)); }))
      return all; // UUIDs: leave the order to nvidia-smi
    const size_t i = std::stoul(id);
    if (i < all.size())
      picked.push_back(all[i]);
  }
  return picked;
}

std::string gib(uint64_t b) { return rt::bytesStr(b); }

/// The shares `--tensor-split` would print for these budgets: in GiB, shortest form.
std::string sharesText(const std::vector<double> &shares) {
  std::string s;
  for (double x : shares)
    s += (s.empty() ? "" : ",") + fmt::format("{:g}", x);
  return s;
}

/// A plan's standing against the budgets at one context.
struct Standing {
  bool fits = false;
  std::vector<uint64_t> totals; ///< per device (rt::memoryAt's totalBytes)
  uint64_t host = 0;            ///< the host side of every device together (one host memory)
  std::string over;             ///< the first budget missed, "device 1 needs 25.3 GiB of 24.0 GiB"
};

Standing standing(const rt::Plan &plan, int64_t ctx, const FitBudgets &b) {
  Standing s;
  s.fits = true;
  const std::vector<rt::DeviceMemory> mem = rt::memoryAt(plan, ctx);
  for (size_t d = 0; d < mem.size(); ++d) {
    s.totals.push_back(mem[d].totalBytes);
    s.host += mem[d].hostTotalBytes;
    if (s.fits && mem[d].totalBytes > b.devices[d]) {
      s.fits = false;
      s.over = fmt::format("device {} needs {} of {}", d, gib(mem[d].totalBytes), gib(b.devices[d]));
    }
  }
  if (s.fits && b.host && s.host > b.host) {
    s.fits = false;
    s.over = fmt::format("the host needs {} of {}", gib(s.host), gib(b.host));
  }
  return s;
}

/// The MoE layers of a plan: N of every `blk.N.*_exps*` weight, ascending.
std::vector<int64_t> moeLayers(const rt::Plan &plan) {
  std::set<int64_t> layers;
  for (const rt::DevicePlan &dev : plan.devices)
    for (const rt::WeightSlice &w : dev.weights) {
      if (w.name.rfind("blk.", 0) != 0 || w.name.find("_exps") == std::string::npos)
        continue;
      const size_t dot = w.name.find('.', 4);
      if (dot != std::string::npos)
        layers.insert(std::stoll(w.name.substr(4, dot - 4)));
    }
  return {layers.begin(), layers.end()};
}

/// `-ot` for the experts of `layers` (ascending), as a llama.cpp user writes it: runs of layers sharing all
/// but their last digit as one class, `blk\.(9|1[0-9]|2[0-3])\.ffn_.*_exps=cpu`.
std::string hostExperts(const std::vector<int64_t> &layers) {
  std::string alt;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i; // layers[i..j] consecutive, with the same leading digits
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1 && layers[j + 1] / 10 == layers[i] / 10)
      ++j;
    const int64_t first = layers[i], last = layers[j];
    std::string item;
    if (j - i >= 2 && first >= 10)
      item = fmt::format("{}[{}-{}]", first / 10, first % 10, last % 10);
    else if (j - i >= 2)
      item = fmt::format("[{}-{}]", first, last);
    else
      for (size_t k = i; k <= j; ++k)
        item += (k == i ? "" : "|") + std::to_string(layers[k]);
    alt += (alt.empty() ? "" : "|") + item;
    i = j + 1;
  }
  return fmt::format("blk\\.({})\\.ffn_.*_exps=cpu", alt);
}

class Search {
public:
  Search(const FitOptions &o, const FitCompile &compile, const std::function<void(const std::string &)> &say)
      : o_(o), compile_(compile), say_(say) {}

  const rt::Plan &plan(const CompileRequest &r) {
    std::string key = fmt::format("{}|{}|{}|{}|{}", r.devices, sharesText(r.tensorSplit),
                                  ggmlTypeName(r.cacheTypeK), ggmlTypeName(r.cacheTypeV), r.moeSplit);
    for (const std::string &e : r.overrideTensor)
      key += "|" + e;
    auto it = plans_.find(key);
    if (it == plans_.end())
      it = plans_.emplace(key, std::make_unique<rt::Plan>(compile_(r))).first;
    return *it->second;
  }

  /// The largest context in [ctxMin, ctxStart] at which `p` fits: ctxStart itself, else a multiple of 1024
  /// (binary search: memory only grows with the context), else ctxMin; 0 when not even ctxMin fits.
  int64_t largestCtx(const rt::Plan &p) {
    if (standing(p, ctxStart_, o_.budgets).fits)
      return ctxStart_;
    if (!standing(p, ctxMin_, o_.budgets).fits)
      return 0;
    int64_t lo = ctxMin_, hi = ctxStart_; // lo fits, hi does not
    int64_t a = (ctxMin_ + 1023) / 1024, z = (ctxStart_ - 1) / 1024;
    while (a <= z) {
      const int64_t mid = (a + z) / 2;
      if (mid * 1024 > ctxMin_ && standing(p, mid * 1024, o_.budgets).fits) {
        lo = mid * 1024;
        a = mid + 1;
      } else if (mid * 1024 <= ctxMin_) {
        a = mid + 1;
      } else {
        hi = mid * 1024;
        z = mid - 1;
      }
    }
    (void)hi;
    return lo;
  }

  FitResult run(CompileRequest r) {
    const FitBudgets &b = o_.budgets;
    // Shares: uneven budgets, uneven shares (the budgets in GiB, as -ts takes relative numbers).
    const bool even =
        std::all_of(b.devices.begin(), b.devices.end(), [&](uint64_t x) { return x == b.devices[0]; });
    if (!o_.sharesGiven && !even) {
      // In GiB where every budget is whole GiB (24GiB,16GiB -> 24,16), else in MiB (the shares are relative).
      const bool wholeGiB =
          std::all_of(b.devices.begin(), b.devices.end(), [](uint64_t x) { return x % (1ull << 30) == 0; });
      r.tensorSplit.clear();
      for (uint64_t x : b.devices)
        r.tensorSplit.push_back(std::max(1.0, std::round(double(x) / double(1 << 20))) /
                                (wholeGiB ? 1024.0 : 1.0));
      say_(fmt::format(
          "--fit: tensor split {}: uneven budgets, each device's share in proportion to its budget",
          sharesText(r.tensorSplit)));
    }
    const rt::Plan &first = plan(r);
    ctxStart_ = o_.ctxStart > 0 ? o_.ctxStart : first.model.nCtxTrain > 0 ? first.model.nCtxTrain : 4096;
    ctxMin_ = std::min(o_.ctxMin, ctxStart_);

    // 1. The context.
    if (int64_t ctx = largestCtx(first); ctx) {
      if (ctx == ctxStart_)
        say_(fmt::format("--fit: context {}: the plan fits as asked", ctx));
      else
        say_(fmt::format("--fit: context {} (at {} {}; a shorter context costs nothing per token)", ctx,
                         ctxStart_, standing(first, ctxStart_, b).over));
      return done(r, ctx);
    }
    say_(fmt::format("--fit: context {} (--fit-ctx-min) is not enough: {}", ctxMin_,
                     standing(first, ctxMin_, b).over));

    // 2. Quantized KV caches, q8_0 before q4_0.
    for (GGMLType kv : {GGMLType::Q8_0, GGMLType::Q4_0}) {
      if (o_.kvLowest == "f16" || (o_.kvLowest == "q8_0" && kv == GGMLType::Q4_0))
        break;
      if (r.cacheTypeK == kv || r.cacheTypeK == GGMLType::Q4_0) // -ctk gave this type or a smaller one already
        continue;
      CompileRequest q = r;
      q.cacheTypeK = q.cacheTypeV = kv;
      const rt::Plan &p = plan(q);
      const std::string before = standing(plan(r), ctxMin_, b).over, was = ggmlTypeName(r.cacheTypeK);
      r = q;
      if (int64_t ctx = largestCtx(p); ctx) {
        say_(fmt::format("--fit: KV caches {} (with {} caches at context {}: {}); context {}", ggmlTypeName(kv), was,
                         ctxMin_, before, ctx));
        return done(r, ctx);
      }
      say_(fmt::format("--fit: KV caches {} is not enough: {}", ggmlTypeName(kv), standing(p, ctxMin_, b).over));
    }

    // 3. The other MoE split.
    const std::vector<int64_t> moe = moeLayers(plan(r));
    if (!moe.empty() && !o_.moeSplitGiven) {
      for (const char *split : {"expert", "intermediate"}) {
        CompileRequest m = r;
        m.moeSplit = split;
        const rt::Plan &p = plan(m);
        if (int64_t ctx = largestCtx(p); ctx) {
          say_(fmt::format("--fit: --moe-split {} (with the split auto chose, context {}: {}); context {}",
                           split, ctxMin_, standing(plan(r), ctxMin_, b).over, ctx));
          return done(m, ctx);
        }
        say_(fmt::format("--fit: --moe-split {} is not enough: {}", split, standing(p, ctxMin_, b).over));
      }
    }

    // 4. Whole layers' experts on the host, the last layers first: the fewest that fit (binary search; the
    // devices' totals only shrink with more layers moved). The host budget is checked at the end.
    if (!moe.empty()) {
      auto withHost = [&](size_t k) {
        CompileRequest h = r;
        if (k)
          h.overrideTensor.push_back(hostExperts({moe.end() - static_cast<std::ptrdiff_t>(k), moe.end()}));
        return h;
      };
      auto devicesFit = [&](const CompileRequest &h) {
        FitBudgets noHost = b;
        noHost.host = 0;
        return standing(plan(h), ctxMin_, noHost).fits;
      };
      if (devicesFit(withHost(moe.size()))) {
        size_t lo = 0, hi = moe.size(); // lo does not fit, hi does
        while (hi - lo > 1) {
          const size_t mid = (lo + hi) / 2;
          (devicesFit(withHost(mid)) ? hi : lo) = mid;
        }
        CompileRequest h = withHost(hi);
        const rt::Plan &p = plan(h);
        const Standing at = standing(p, ctxMin_, b);
        if (!at.fits) { // the devices fit with `hi` layers' experts on the host, and the host does not
          std::string budget;
          for (uint64_t x : b.devices)
            budget += fmt::format("{}MiB,", (x + (1 << 20) - 1) >> 20);
          throw Failure(fmt::format(
              "--fit: nothing fits: the devices fit at context {} with the experts of {} "
              "layer(s) on the host (-ot '{}'), and then {}; the smallest budget that would "
              "work: --fit {}host={}MiB",
              ctxMin_, hi, h.overrideTensor.back(), at.over, budget, (at.host + (1 << 20) - 1) >> 20));
        }
        if (int64_t ctx = largestCtx(p); ctx) {
          say_(fmt::format("--fit: the experts of {} layer(s) on the host (-ot '{}'; with {} layer(s): {}); "
                           "context {}",
                           hi, h.overrideTensor.back(), hi - 1,
                           standing(plan(withHost(hi - 1)), ctxMin_, b).over, ctx));
          return done(h, ctx);
        }
      }
      r = withHost(moe.size());
    }

    // Nothing fits: the smallest plan tried (every step as far as it goes) names the budget that would.
    const Standing s = standing(plan(r), ctxMin_, b);
    uint64_t most = *std::max_element(s.totals.begin(), s.totals.end());
    std::string need, budget;
    for (size_t d = 0; d < s.totals.size(); ++d) {
      const uint64_t t = even ? most : s.totals[d];
      need += fmt::format("{}{} on device {}", d ? ", " : "", gib(s.totals[d]), d);
      budget += fmt::format("{}{}MiB", d ? "," : "", (t + (1 << 20) - 1) >> 20);
    }
    if (b.host && s.host > b.host)
      budget += fmt::format(",host={}MiB", (s.host + (1 << 20) - 1) >> 20);
    throw Failure(fmt::format(
        "--fit: nothing fits: the smallest plan (context {}, KV {}{}) needs {}{}; the smallest budget that "
        "would work: --fit {}",
        ctxMin_, ggmlTypeName(r.cacheTypeK), moe.empty() ? "" : ", every MoE layer's experts on the host", need,
        s.host ? fmt::format(" and {} on the host", gib(s.host)) : std::string(), budget));
  }

private:
  FitResult done(const CompileRequest &r, int64_t ctx) {
    FitResult out;
    out.request = r;
    out.ctx = ctx;
    out.plan = plan(r);
    out.plan.model.defaultCtx = ctx;
    // The outcome against the budgets, one line per device (--report prints the whole report after).
    const std::vector<rt::DeviceMemory> mem = rt::memoryAt(out.plan, ctx);
    for (size_t d = 0; d < mem.size(); ++d) {
      const rt::DeviceMemory &m = mem[d];
      say_(fmt::format("--fit: device {}: {} of {} at context {} (weights {}, KV {}, activations {}, logits rows "
                       "{}){}",
                       d, gib(m.totalBytes), gib(o_.budgets.devices[d]), ctx, gib(m.weightBytes), gib(m.kvBytes),
                       gib(m.activationBytes), gib(m.logitsBytes),
                       m.hostTotalBytes ? fmt::format("; host side {}", gib(m.hostTotalBytes)) : std::string()));
    }
    return out;
  }

  const FitOptions &o_;
  const FitCompile &compile_;
  const std::function<void(const std::string &)> &say_;
  std::map<std::string, std::unique_ptr<rt::Plan>> plans_;
  int64_t ctxStart_ = 0, ctxMin_ = 0;
};

} // namespace

FitBudgets parseFitBudgets(const std::string &spec) {
  FitBudgets b;
  if (spec == "auto") {
    b.devices = cudaFreeMemory();
    if (b.devices.empty())
      throw Failure(
          "--fit auto: no CUDA device found (nvidia-smi lists none); give each device's budget, e.g. "
          "--fit 24GiB,24GiB");
    return b;
  }
  std::stringstream in(spec);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.rfind("host=", 0) == 0) {
      if (b.host)
        throw Failure(fmt::format("--fit {}: host= is given twice", spec));
      b.host = parseByteSize(item.substr(5), "--fit");
      continue;
    }
    if (b.host)
      throw Failure(fmt::format("--fit {}: host= comes last, after every device's budget", spec));
    b.devices.push_back(parseByteSize(item, "--fit"));
  }
  if (b.devices.empty())
    throw Failure(
        fmt::format("--fit '{}': give one budget per device, e.g. --fit 24GiB,24GiB[,host=64GiB], or "
                    "--fit auto",
                    spec));
  return b;
}

FitResult fitToBudgets(const CompileRequest &base, const FitOptions &options, const FitCompile &compile,
                       const std::function<void(const std::string &)> &say) {
  Search search(options, compile, say);
  return search.run(base);
}

} // namespace tpc::cli
