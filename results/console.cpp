// The console table (report.h console_header, console_row, console_footer): fixed-width columns
// from the column table (columns.h), so a CI log lines up, and a reason at the end of each row
// that did not pass.
#include <string>

#include "results/columns.h"

namespace nanchaos::results {
namespace {

const char* const kSep = "  ";
constexpr size_t kReasonW = 80;

}  // namespace

std::string console_header() {
  std::string h;
  for (const Column& c : report_columns()) {
    if (c.console.empty()) continue;
    if (!h.empty()) h += kSep;
    h += cell(std::string(c.console), c.console_width, c.align);
  }
  return h + "\n";
}

std::string console_row(const ScenarioResult& r) {
  const Row w(r, Format::kConsole);
  std::string row;
  bool first = true;
  for (const Column& c : report_columns()) {
    if (c.console.empty()) continue;
    if (!first) row += kSep;
    first = false;
    row += cell(c.text(w), c.console_width, c.align, c.console_cut);
  }
  // A non-passing row says why at its end, so the CI log alone tells what to look at.
  if (!is_pass(r) && !r.reason.empty()) {
    std::string reason = one_line(r.reason);
    if (width(reason) > kReasonW) reason = reason.substr(0, byte_at(reason, kReasonW - 1)) + "…";
    row += kSep + reason;
  }
  return row + "\n";
}

std::string console_footer(const SuiteReport& r) { return "--- " + summary_text(r) + "\n"; }

}  // namespace nanchaos::results
