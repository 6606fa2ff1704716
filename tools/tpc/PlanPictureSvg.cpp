//===- PlanPictureSvg.cpp - the plan's figures as SVG and one HTML page ------===//
//
// Four figures, each one <svg> element built as text (no libraries): memory per device (stacked bars, one
// byte scale for all devices), one lane per device along the layers with its collectives, the cut of every
// weight (its pieces in the tensor's rows x row-bytes grid, one colour per device), and one layer's dataflow
// (device 0's steps in program order, coloured by split state, producer -> consumer arcs on the right).
// The HTML page embeds them with a layer chooser (a few lines of inline JS); nothing is loaded from
// elsewhere. Elements carry classes and data-* attributes (device, bytes, name) so tests can count them.
//===----------------------------------------------------------------------===//
#include "tools/tpc/PlanPicture.h"

#include <fmt/format.h>

#include <algorithm>

namespace tpc::cli::picture {
namespace {

const char *const kDeviceColours[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                      "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};
const char *deviceColour(size_t d) { return kDeviceColours[d % std::size(kDeviceColours)]; }

/// Light fills so black text stays readable on them.
const char *stateColour(State s) {
  switch (s) {
  case State::Mirrored:
    return "#9ecae1";
  case State::Split:
    return "#fdae6b";
  case State::Partial:
    return "#f4777f";
  case State::Unknown:
    break;
  }
  return "#d9d9d9";
}

const char *collectiveColour(const std::string &op) {
  if (op == "reduce_scatter")
    return "#2166ac";
  if (op == "all_gather")
    return "#1b7837";
  if (op == "all_reduce_rms_norm")
    return "#762a83";
  if (op == "send" || op == "recv") // a pipeline stage boundary
    return "#e08214";
  return "#b2182b";
}

std::string xml(std::string_view s) {
  std::string o;
  for (char c : s)
    switch (c) {
    case '<':
      o += "&lt;";
      break;
    case '>':
      o += "&gt;";
      break;
    case '&':
      o += "&amp;";
      break;
    case '"':
      o += "&quot;";
      break;
    default:
      o += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
    }
  return o;
}

/// One figure: its SVG body and size.
struct Fig {
  std::string body;
  double w = 0, h = 0;

  void rect(double x, double y, double rw, double rh, std::string_view fill, std::string_view attrs = {},
            std::string_view title = {}) {
    body += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\"{}{}", x, y,
                        rw, rh, fill, attrs.empty() ? "" : " ", attrs);
    body += title.empty() ? "/>" : fmt::format("><title>{}</title></rect>", xml(title));
  }
  void text(double x, double y, std::string_view s, int size = 11, std::string_view anchor = "start",
            std::string_view attrs = {}) {
    body += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{}\" text-anchor=\"{}\"{}{}>{}</text>", x, y,
                        size, anchor, attrs.empty() ? "" : " ", attrs, xml(s));
  }
  void line(double x1, double y1, double x2, double y2, std::string_view stroke, std::string_view attrs = {}) {
    body += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\"{}{}/>", x1, y1,
                        x2, y2, stroke, attrs.empty() ? "" : " ", attrs);
  }
  /// A legend entry: swatch and label; returns the x after it.
  double key(double x, double y, std::string_view fill, std::string_view label) {
    rect(x, y - 10, 12, 12, fill, "stroke=\"#555\" stroke-width=\"0.5\"");
    text(x + 16, y, label);
    return x + 28 + 6.5 * static_cast<double>(label.size());
  }
  /// The figure as an <svg> element for an HTML page (which needs no namespace); `attrs` are added to it.
  std::string svg(std::string_view attrs) const {
    return fmt::format("<svg {} width=\"{:.0f}\" height=\"{:.0f}\" "
                       "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"sans-serif\">{}</svg>",
                       attrs, w, h, w, h, body);
  }
};

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

Fig memoryFigure(const Picture &p) {
  Fig f;
  const double x0 = 170, barW = 620, rowH = 36;
  struct Part {
    const char *kind, *side, *colour;
    uint64_t bytes;
  };
  // rt::memoryAt's figures (sliding-window layers as rings), the ones `tpc inspect` and --report print.
  auto partsOf = [&](const rt::DeviceMemory &s) {
    return std::vector<Part>{{"weights", "device", "#4e79a7", s.weightBytes},
                             {"kv", "device", "#f28e2b", s.kvBytes},
                             {"activations", "device", "#59a14f", s.activationBytes},
                             {"logits", "device", "#e15759", s.logitsBytes},
                             {"weights", "host", "url(#host-weights)", s.hostWeightBytes},
                             {"kv", "host", "url(#host-kv)", s.hostKvBytes},
                             {"activations", "host", "url(#host-activations)", s.hostActivationBytes}};
  };
  uint64_t most = 1;
  for (const rt::DeviceMemory &s : p.memoryAtCtx) {
    uint64_t total = 0;
    for (const Part &part : partsOf(s))
      total += part.bytes;
    most = std::max(most, total);
  }
  f.body += "<defs>";
  for (auto [kind, colour] : {std::pair{"weights", "#4e79a7"}, {"kv", "#f28e2b"}, {"activations", "#59a14f"}})
    f.body += fmt::format("<pattern id=\"host-{}\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
                          "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fff\"/>"
                          "<rect width=\"3\" height=\"6\" fill=\"{}\"/></pattern>",
                          kind, colour);
  f.body += "</defs>";
  double kx = 10;
  kx = f.key(kx, 16, "#4e79a7", "weights");
  kx = f.key(kx, 16, "#f28e2b", fmt::format("KV cache for ctx {}", p.ctx));
  kx = f.key(kx, 16, "#59a14f", "activations (arena)");
  kx = f.key(kx, 16, "#e15759", "logits rows");
  f.key(kx, 16, "url(#host-weights)", "hatched: host-placed");
  for (size_t d = 0; d < p.memory.size(); ++d) {
    const double y = 34 + static_cast<double>(d) * rowH;
    f.text(10, y + 15, p.deviceNames[d], 12);
    double x = x0;
    uint64_t total = 0;
    for (const Part &part : partsOf(p.memoryAtCtx[d])) {
      if (!part.bytes)
        continue;
      total += part.bytes;
      // To scale; a part under a pixel is drawn one pixel wide so it is not lost.
      const double w = std::max(1.0, barW * static_cast<double>(part.bytes) / static_cast<double>(most));
      f.rect(x, y, w, 22, part.colour,
             fmt::format("class=\"mem-seg\" data-device=\"{}\" data-kind=\"{}\" data-side=\"{}\" data-bytes=\"{}\" "
                         "stroke=\"#fff\" stroke-width=\"0.5\"",
                         d, part.kind, part.side, part.bytes),
             fmt::format("{}: {} ({} side) {}", p.deviceNames[d], part.kind, part.side, rt::bytesStr(part.bytes)));
      std::string label = rt::bytesStr(part.bytes);
      if (w > 7.0 * static_cast<double>(label.size()) + 6)
        f.text(x + w / 2, y + 15, label, 10, "middle",
               std::string_view(part.side) == "host" ? "font-weight=\"bold\"" : "fill=\"#fff\"");
      x += w;
    }
    f.text(x + 8, y + 15, rt::bytesStr(total), 11);
  }
  f.w = x0 + barW + 90;
  f.h = 40 + static_cast<double>(p.memory.size()) * rowH;
  return f;
}

//===----------------------------------------------------------------------===//
// Collective lanes
//===----------------------------------------------------------------------===//

Fig lanesFigure(const Picture &p) {
  Fig f;
  const double x0 = 190, slot = 62, laneH = 54, top = 28;
  std::vector<size_t> perLayer(p.layers.size(), 0);
  for (const auto &lane : p.lanes) {
    std::vector<size_t> n(p.layers.size(), 0);
    for (const Collective &c : lane)
      ++n[c.layer];
    for (size_t l = 0; l < n.size(); ++l)
      perLayer[l] = std::max(perLayer[l], n[l]);
  }
  std::vector<double> colX(p.layers.size() + 1, x0);
  for (size_t l = 0; l < p.layers.size(); ++l)
    colX[l + 1] = colX[l] + std::max(52.0, 10 + slot * static_cast<double>(perLayer[l]));
  const double bottom = top + laneH * static_cast<double>(p.lanes.size());
  for (size_t l = 0; l < p.layers.size(); ++l) {
    if (l % 2 == 0)
      f.rect(colX[l], top - 20, colX[l + 1] - colX[l], bottom - top + 20, "#f2f2f2");
    f.text((colX[l] + colX[l + 1]) / 2, top - 6, p.layers[l].label, 11, "middle", "class=\"layer-label\"");
  }
  // The k-th collective of a layer is at the same place in every lane: the devices meet there.
  for (size_t d = 0; d < p.lanes.size(); ++d) {
    const double yc = top + laneH * static_cast<double>(d) + 18;
    f.text(10, yc + 4, p.deviceNames[d], 12);
    f.text(10, yc + 19, fmt::format("{} collectives, {}/token", p.memory[d].collectives,
                                    rt::bytesStr(p.memory[d].collectiveBytesPerToken)),
           10, "start", "fill=\"#555\"");
    f.line(x0, yc, colX.back(), yc, "#888", "class=\"lane\" stroke-width=\"2\"");
    std::vector<size_t> seen(p.layers.size(), 0);
    for (const Collective &c : p.lanes[d]) {
      const double x = colX[c.layer] + 5 + slot * static_cast<double>(seen[c.layer]++) + slot / 2;
      if (d == 0)
        f.line(x, top, x, bottom - 8, "#bbb", "stroke-dasharray=\"3,3\"");
      // A stage transfer (send/recv) is drawn like a collective but classed apart: it meets one peer.
      const bool transfer = c.op == "send" || c.op == "recv";
      f.body += fmt::format("<path class=\"{}\" data-device=\"{}\" data-step=\"{}\" data-bytes=\"{}\" "
                            "d=\"M{:.1f} {:.1f}l7 7l-7 7l-7 -7z\" fill=\"{}\"><title>{}</title></path>",
                            transfer ? "transfer" : "collective", d, c.step, c.bytesPerToken, x, yc - 7,
                            collectiveColour(c.op),
                            xml(fmt::format("{}, step {} ({}): {} per token", p.deviceNames[d], c.step, c.name,
                                            rt::bytesStr(c.bytesPerToken))));
      f.text(x, yc + 20, rt::bytesStr(c.bytesPerToken), 10, "middle");
    }
  }
  double kx = x0;
  for (const char *op : {"all_reduce", "all_reduce_rms_norm", "reduce_scatter", "all_gather"})
    kx = f.key(kx, bottom + 18, collectiveColour(op), op);
  if (p.stages > 1)
    kx = f.key(kx, bottom + 18, collectiveColour("send"), "send/recv between stages");
  f.text(kx, bottom + 18, "label: bytes per token (f32 payload)", 10, "start", "fill=\"#555\"");
  f.w = std::max(colX.back() + 20, kx + 240);
  f.h = bottom + 28;
  return f;
}

//===----------------------------------------------------------------------===//
// Weight cuts
//===----------------------------------------------------------------------===//

/// "attn_q" for "blk.0.attn_q.weight".
std::string shortName(const std::string &name) {
  std::string s = name;
  if (s.rfind("blk.", 0) == 0)
    if (size_t dot = s.find('.', 4); dot != std::string::npos)
      s = s.substr(dot + 1);
  if (s.size() > 7 && s.compare(s.size() - 7, 7, ".weight") == 0)
    s.resize(s.size() - 7);
  return s;
}

/// One weight's cell: name, its grid with every device's runs, caption.
void weightCell(Fig &f, const WeightCut &c, double cx, double cy) {
  const double bx = cx + 8, by = cy + 20, bw = 200, bh = 60;
  f.body += fmt::format("<g class=\"weight-cut\" data-name=\"{}\" data-mirrored=\"{}\" data-axis=\"{}\">",
                        xml(c.name), c.mirrored ? 1 : 0, c.axis);
  const bool host = std::any_of(c.shares.begin(), c.shares.end(), [](const WeightShare &s) { return s.host; });
  f.text(bx, cy + 14, host ? c.name + " (host)" : c.name, 11, "start", "font-weight=\"bold\"");
  f.rect(bx, by, bw, bh, "#fff", "stroke=\"#999\"");
  if (c.mirrored) {
    f.rect(bx, by, bw, bh, stateColour(State::Mirrored), "class=\"cut-run\" data-device=\"all\"",
           fmt::format("{}: every device holds all of it", c.name));
    f.text(bx + bw / 2, by + bh / 2 + 4, "every device: whole", 10, "middle");
  } else if (c.totalRows && c.rowBytes) {
    for (size_t d = 0; d < c.shares.size(); ++d)
      for (const Run &r : c.shares[d].runs) {
        const double x = bx + bw * static_cast<double>(r.col0) / static_cast<double>(c.rowBytes);
        const double y = by + bh * static_cast<double>(r.row0) / static_cast<double>(c.totalRows);
        const double w = std::max(0.5, bw * static_cast<double>(r.cols) / static_cast<double>(c.rowBytes));
        const double h = std::max(0.5, bh * static_cast<double>(r.rows) / static_cast<double>(c.totalRows));
        f.rect(x, y, w, h, deviceColour(d),
               fmt::format("class=\"cut-run\" data-device=\"{}\"{}", d,
                           c.shares[d].host ? " fill-opacity=\"0.45\"" : ""),
               fmt::format("device {}: rows {}..{}, bytes {}..{} of each row{}", d, r.row0, r.row0 + r.rows - 1,
                           r.col0, r.col0 + r.cols - 1, c.shares[d].host ? " (host)" : ""));
      }
    // Expert boundaries of a 3-D weight, so whole-expert and within-expert cuts read apart.
    if (c.shape.size() >= 3 && c.shape[0] > 1 && c.shape[0] <= 64)
      for (int64_t e = 1; e < c.shape[0]; ++e) {
        const double y = by + bh * static_cast<double>(e) / static_cast<double>(c.shape[0]);
        f.line(bx, y, bx + bw, y, "#fff", "stroke-width=\"0.6\"");
      }
  }
  std::string shape = "[";
  for (size_t i = 0; i < c.shape.size(); ++i)
    shape += fmt::format("{}{}", i ? ", " : "", c.shape[i]);
  f.text(bx, by + bh + 13, c.describe(), 10);
  f.text(bx, by + bh + 26, shape + "] " + c.type, 10, "start", "fill=\"#555\"");
  f.body += "</g>";
}

/// The weights first read in layer `l`, four to a row.
Fig weightsFigure(const Picture &p, size_t l) {
  Fig f;
  const double cellW = 262, cellH = 116;
  size_t i = 0;
  for (const WeightCut &c : p.weights)
    if (c.layer == l) {
      weightCell(f, c, cellW * static_cast<double>(i % 4), cellH * static_cast<double>(i / 4));
      ++i;
    }
  f.w = cellW * static_cast<double>(std::min<size_t>(std::max<size_t>(i, 1), 4)) + 8;
  f.h = cellH * static_cast<double>((i + 3) / 4);
  return f;
}

/// The colour key of the weight figure: one swatch per device.
Fig devicesKey(const Picture &p) {
  Fig f;
  double x = 8;
  for (size_t d = 0; d < p.deviceNames.size(); ++d)
    x = f.key(x, 16, deviceColour(d), p.deviceNames[d]);
  x = f.key(x, 16, stateColour(State::Mirrored), "mirrored (whole on every device)");
  f.text(x, 16, "grid: rows (top to bottom) x bytes of a row, to scale", 10, "start", "fill=\"#555\"");
  f.w = x + 300;
  f.h = 24;
  return f;
}

//===----------------------------------------------------------------------===//
// Dataflow
//===----------------------------------------------------------------------===//

Fig flowFigure(const Picture &p, size_t l) {
  Fig f;
  const std::vector<FlowNode> &nodes = p.flows[l];
  const double nodeX = 250, nodeW = 330, rowH = 28, top = 34;
  double kx = 8;
  for (State s : {State::Mirrored, State::Split, State::Partial, State::Unknown})
    kx = f.key(kx, 16, stateColour(s), stateName(s));
  f.text(kx, 16, fmt::format("{} on device 0, program order top to bottom; arcs: producer -> consumer",
                             p.layers[l].label),
         10, "start", "fill=\"#555\"");
  double reach = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const FlowNode &n = nodes[i];
    const double y = top + rowH * static_cast<double>(i);
    for (size_t from : n.from) {
      const double y0 = top + rowH * static_cast<double>(from) + 11, y1 = y + 11;
      const double bulge = 14 + 9 * static_cast<double>(std::min<size_t>(i - from, 24));
      reach = std::max(reach, bulge);
      f.body += fmt::format("<path class=\"flow-edge\" d=\"M{0:.1f} {1:.1f}C{2:.1f} {1:.1f} {2:.1f} {3:.1f} {0:.1f} "
                            "{3:.1f}\" fill=\"none\" stroke=\"#555\" stroke-width=\"1\"/>",
                            nodeX + nodeW, y0, nodeX + nodeW + bulge, y1);
    }
    f.rect(nodeX, y, nodeW, 22, stateColour(n.state),
           fmt::format("class=\"flow-node\" data-state=\"{}\" data-step=\"{}\" rx=\"3\" stroke=\"#666\" "
                       "stroke-width=\"0.5\"",
                       stateName(n.state), n.step),
           fmt::format("step {}: {} -> {} {}{}", n.step, n.name, n.shape, stateName(n.state),
                       n.external ? fmt::format(", {} input(s) from other layers", n.external) : std::string()));
    f.text(nodeX + 8, y + 15, n.op, 11);
    f.text(nodeX + nodeW - 8, y + 15, n.shape + " " + stateName(n.state), 10, "end");
    if (n.external)
      f.body += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"#333\"/>", nodeX - 1, y + 11);
    double wx = nodeX - 8;
    for (auto it = n.weights.rbegin(); it != n.weights.rend(); ++it) {
      std::string label = shortName(it->first);
      const double w = std::min(220.0, 12 + 6.2 * static_cast<double>(label.size()));
      wx -= w;
      if (wx < 4)
        break;
      f.rect(wx, y + 2, w, 18, stateColour(it->second),
             fmt::format("class=\"flow-weight\" data-state=\"{}\" rx=\"8\"", stateName(it->second)),
             fmt::format("{}: {}", it->first, stateName(it->second)));
      f.text(wx + w / 2, y + 15, label, 10, "middle");
      wx -= 4;
    }
  }
  f.w = nodeX + nodeW + reach + 20;
  f.h = top + rowH * static_cast<double>(nodes.size()) + 6;
  return f;
}

const char *kCss = "body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}"
                   "h1{font-size:20px}h2{font-size:16px;margin-top:28px}"
                   ".scroll{overflow-x:auto;border:1px solid #ddd;padding:4px}"
                   "p.note{color:#555;font-size:13px;max-width:900px}"
                   "details{margin:6px 0}summary{cursor:pointer;font-size:13px}"
                   "pre{font-size:12px;background:#f7f7f7;padding:8px;overflow-x:auto}";

} // namespace

std::string renderSvg(const Picture &p) {
  struct Part {
    std::string title;
    Fig fig;
    std::string attrs;
  };
  std::vector<Part> parts;
  parts.push_back({"Memory per device", memoryFigure(p), "class=\"figure\" data-figure=\"memory\""});
  parts.push_back({"Collectives per device along the layers", lanesFigure(p),
                   "class=\"figure\" data-figure=\"collectives\""});
  parts.push_back({"How each weight is cut", devicesKey(p), ""});
  for (size_t l = 0; l < p.layers.size(); ++l)
    if (std::any_of(p.weights.begin(), p.weights.end(), [&](const WeightCut &c) { return c.layer == l; }))
      parts.push_back({p.layers[l].label, weightsFigure(p, l),
                       fmt::format("class=\"figure\" data-figure=\"weights\" data-layer=\"{}\"", p.layers[l].label)});
  if (p.chosenLayer < p.layers.size()) // a plan without steps has no layer to draw
    parts.push_back({"Dataflow of " + p.layers[p.chosenLayer].label, flowFigure(p, p.chosenLayer),
                     fmt::format("class=\"figure flow\" data-figure=\"dataflow\" data-layer=\"{}\"",
                                 p.layers[p.chosenLayer].label)});
  std::string body;
  double y = 8, w = 0;
  for (const Part &part : parts) {
    body += fmt::format("<text x=\"8\" y=\"{:.0f}\" font-size=\"14\" font-weight=\"bold\">{}</text>", y + 14,
                        xml(part.title));
    y += 22;
    body += fmt::format("<svg x=\"0\" y=\"{:.0f}\" {} width=\"{:.0f}\" height=\"{:.0f}\">{}</svg>", y, part.attrs,
                        part.fig.w, part.fig.h, part.fig.body);
    y += part.fig.h + 12;
    w = std::max(w, part.fig.w);
  }
  return fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
                     "width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"sans-serif\">"
                     "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>{2}</svg>\n",
                     w, y, body);
}

std::string renderHtml(const Picture &p) {
  std::string h = fmt::format("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                              "<title>tpc plan {}</title><style>{}</style></head><body>\n",
                              xml(p.planPath), kCss);
  h += fmt::format(
      "<h1>tpc plan: {}</h1>\n<p class=\"note\"><span data-blocks=\"{}\">{} devices, {} blocks</span> "
      "(columns: the embedding, the blocks, the output head), {} weights. Every number is "
      "the plan's own, as <code>tpc inspect</code> prints it (below). Hover over a shape for its "
      "details.</p>\n",
      xml(p.planPath), p.blocks, p.deviceNames.size(), p.blocks, p.weights.size());
  h +=
      "<h2>Memory per device</h2>\n<p class=\"note\">Stacked to one scale: weight slices, the KV cache for a "
      "context of " +
      std::to_string(p.ctx) +
      " tokens (sliding-window layers as their rings), the activation arena, the logits rows; hatched parts "
      "are placed in host memory.</p>\n<div class=\"scroll\">" +
      memoryFigure(p).svg("class=\"figure\" data-figure=\"memory\"") + "</div>\n";
  h += "<h2>Collectives along the layers</h2>\n<p class=\"note\">One lane per device; each collective where it "
       "happens in its layer, labelled with the bytes it moves per token. The devices meet at every dashed line "
       "(each device runs the same sequence of collectives).</p>\n<div class=\"scroll\">" +
       lanesFigure(p).svg("class=\"figure\" data-figure=\"collectives\"") + "</div>\n";
  h += "<h2>How each weight is cut</h2>\n<p class=\"note\">Each weight as its rows (top to bottom) by the bytes "
       "of a row, to scale; a coloured area is the part a device copies from the GGUF. A split on rows cuts "
       "across, on columns along, on experts (3-D weights, white lines between experts) whole experts; pale parts stay in host memory. Weights "
       "are grouped by the block their name says (blk.N), others by the layer of the first step that reads "
       "them.</p>\n" +
       devicesKey(p).svg("class=\"key\"") + "\n";
  for (size_t l = 0; l < p.layers.size(); ++l) {
    size_t n = std::count_if(p.weights.begin(), p.weights.end(), [&](const WeightCut &c) { return c.layer == l; });
    if (!n)
      continue;
    h += fmt::format("<details{}><summary>{} ({} weights)</summary><div class=\"scroll\">{}</div></details>\n",
                     l == p.chosenLayer || p.layers[l].block < 0 ? " open" : "", xml(p.layers[l].label), n,
                     weightsFigure(p, l).svg(fmt::format("class=\"figure\" data-figure=\"weights\" data-layer=\"{}\"",
                                                         xml(p.layers[l].label))));
  }
  h += "<h2>Dataflow of one layer</h2>\n<p class=\"note\">Device 0's steps of the chosen layer with the split "
       "state of each result (derived from the weights' cuts and the collectives); weight operands on the left, "
       "a dot marks inputs from another layer.</p>\n<label>Layer <select id=\"layer\">";
  for (size_t l = 0; l < p.layers.size(); ++l)
    if (!p.flows[l].empty())
      h += fmt::format("<option value=\"{0}\"{1}>{0}</option>", xml(p.layers[l].label),
                       l == p.chosenLayer ? " selected" : "");
  h += "</select></label>\n<div class=\"scroll\">";
  for (size_t l = 0; l < p.layers.size(); ++l)
    if (!p.flows[l].empty())
      h += flowFigure(p, l).svg(fmt::format("class=\"figure flow\" data-figure=\"dataflow\" data-layer=\"{}\"{}",
                                            xml(p.layers[l].label),
                                            l == p.chosenLayer ? "" : " style=\"display:none\""));
  h += "</div>\n<h2>tpc inspect</h2>\n<pre>" + xml(p.summaryText) + "</pre>\n";
  h += "<script>\nconst layer = document.getElementById('layer');\nfunction showLayer() {\n"
       "  for (const s of document.querySelectorAll('svg.flow'))\n"
       "    s.style.display = s.dataset.layer === layer.value ? '' : 'none';\n}\n"
       "layer.addEventListener('change', showLayer);\nshowLayer();\n</script>\n</body></html>\n";
  return h;
}

} // namespace tpc::cli::picture
