// Text helpers the report writers share (text.h), and xml_escape (report.h), which junit.xml and
// report.html both use so they escape alike.
#include "results/text.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

namespace nanchaos::results {
namespace {

std::string plural(int n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace

size_t width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

size_t byte_at(const std::string& s, size_t cp) {
  size_t i = 0;
  for (size_t seen = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (seen == cp) return i;
      ++seen;
    }
  }
  return s.size();
}

std::string one_line(std::string s) {
  for (auto& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return s;
}

std::string cell(const std::string& raw, size_t w, Align align, Cut cut) {
  std::string s = one_line(raw.empty() ? "-" : raw);
  size_t n = width(s);
  if (n > w) {
    if (cut == Cut::kTail) {
      s = s.substr(0, byte_at(s, w - 1)) + "…";
    } else {
      s = "…" + s.substr(byte_at(s, n - (w - 1)));
    }
    n = w;
  }
  std::string pad(w - n, ' ');
  return align == Align::kLeft ? s + pad : pad + s;
}

std::string ranks_text(const std::vector<int64_t>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ","));
}

std::string fmt_opt_int(const std::optional<int64_t>& v) {
  return v ? std::to_string(*v) : std::string();
}

std::string fmt_opt_ms(const std::optional<double>& v) {
  return v ? fmt::format("{:.1f}", *v) : std::string();
}

std::string verdict_label(const ScenarioResult& r) {
  if (is_pass(r)) return "PASS";
  if (is_fail(r)) return "FAIL";
  if (is_skipped(r)) return "SKIP";
  return "ERROR";
}

std::string summary_text(const SuiteReport& r) {
  std::string text =
      fmt::format("{}: {} passed, {} failed, {}, {} skipped",
                  plural(static_cast<int>(r.scenarios.size()), "scenario", "scenarios"), r.passed(),
                  r.failed(), plural(r.errors(), "error", "errors"), r.skipped());
  if (r.interrupted) {
    text += fmt::format("; INTERRUPTED by {}: {} not run", r.interrupt_signal, r.not_run.size());
    if (!r.not_run.empty()) text += fmt::format(" ({})", fmt::join(r.not_run, ", "));
  } else if (!r.complete) {
    text += fmt::format("; INCOMPLETE: {} not judged yet", r.pending.size());
    if (!r.pending.empty()) text += fmt::format(" ({})", fmt::join(r.pending, ", "));
  }
  return text;
}

std::string value_text(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  return sanitized<nlohmann::json>(v).dump();
}

std::vector<const Check*> failed_checks(const ScenarioResult& r) {
  std::vector<const Check*> out;
  for (const auto& c : r.checks) {
    if (!c.pass) out.push_back(&c);
  }
  return out;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      case '\n':
        out += "&#10;";
        break;
      case '\r':
        out += "&#13;";
        break;
      case '\t':
        out += "&#9;";
        break;
      default:
        if (c < 0x20) {
          out += "\xEF\xBF\xBD";
        } else {
          out += ch;
        }
    }
  }
  return out;
}

std::string xml_text(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\n') {
      out += '\n';
    } else {
      out += xml_escape(std::string(1, ch));
    }
  }
  return out;
}

std::string md_cell(const std::string& raw) {
  std::string s = one_line(raw.empty() ? "-" : raw);
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string score_sparkline(const std::vector<double>& scores, size_t max_chars) {
  static const char* const kLevels[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  if (scores.empty() || max_chars == 0) return "";
  const size_t group = (scores.size() + max_chars - 1) / max_chars;
  std::string out;
  for (size_t b = 0; b < scores.size(); b += group) {
    double top = scores[b];
    for (size_t k = b; k < std::min(b + group, scores.size()); ++k) top = std::max(top, scores[k]);
    // ceil(score / 0.375) - 1: (1.125, 1.5] -> level 3, anything above 1.5 -> 4 or more.
    const double level = std::ceil(top / (kSlowScore / 4)) - 1;
    out += kLevels[size_t(std::clamp(std::isfinite(level) ? level : 7.0, 0.0, 7.0))];
  }
  return out;
}

std::vector<LogLink> log_links(const ScenarioResult& r, const std::string& report_path,
                               size_t max_ranks) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path from = fs::absolute(fs::path(report_path), ec).parent_path();
  auto href = [&](const std::string& in_run) {
    const std::string file = (fs::path(r.run_dir) / in_run).string();
    const fs::path rel = fs::absolute(fs::path(file), ec)
                             .lexically_normal()
                             .lexically_relative(from.lexically_normal());
    std::string out;
    for (char c : rel.empty() ? file : rel.generic_string()) {
      if (c == ' ' || c == '(' || c == ')' || c == '"' || c == '%' || c == '<' || c == '>') {
        out += fmt::format("%{:02X}", static_cast<unsigned char>(c));
      } else {
        out += c;
      }
    }
    return out;
  };
  std::vector<LogLink> links;
  if (!r.logs.merged.empty()) links.push_back({"ranks.log", href(r.logs.merged)});
  if (!r.logs.launcher.empty()) links.push_back({"launcher.log", href(r.logs.launcher)});
  if (r.logs.ranks.size() > max_ranks) {
    const std::string& any = r.logs.ranks.front().stdout_path.empty()
                                 ? r.logs.ranks.front().stderr_path
                                 : r.logs.ranks.front().stdout_path;
    links.push_back({"ranks/", href(fs::path(any).parent_path().string()) + "/"});
    return links;
  }
  for (const auto& k : r.logs.ranks) {
    if (!k.stdout_path.empty()) {
      links.push_back({fmt::format("rank {} out", k.rank), href(k.stdout_path)});
    }
    if (!k.stderr_path.empty()) {
      links.push_back({fmt::format("rank {} err", k.rank), href(k.stderr_path)});
    }
  }
  return links;
}

}  // namespace nanchaos::results
