// The report's summary columns: one table that the console table (report.h console_header,
// console_row), report.md's summary table and report.html's summary table all read, so a column
// is added, renamed or reformatted in one place and the formats cannot drift apart.
//
// Internal to results/ (the writers include it; callers use report.h and html.h). Each column
// says what it is called in each format (empty: that format does not show it), how its cell is
// read from a scenario's result, and how it is laid out. Example, the Markdown header row:
//
//   std::string row = "|";
//   for (const Column& c : report_columns())
//     if (!c.header(Format::kMarkdown).empty()) row += fmt::format(" {} |", c.header(...));
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "results/report.h"
#include "results/text.h"

namespace nanchaos::results {

enum class Format { kConsole, kMarkdown, kHtml };

/// One scenario as a table row shows it. `detection` is what the detector columns (detector, rank,
/// layer, cause, latencies) describe: the first detection; on the console, when no detector fired
/// but the harness's post-mortem blamed ranks (JobFacts::postmortem), that blame as detector
/// "post-mortem" (the console's DETECTOR column says who was blamed; report.md and report.html
/// head theirs "First detector" and show only the stack's). Null: nothing to show.
class Row {
 public:
  Row(const ScenarioResult& r, Format f);
  Row(const Row&) = delete;  // `detection` may point into the row itself
  Row& operator=(const Row&) = delete;

  const ScenarioResult& result;
  const Detection* detection = nullptr;

 private:
  Detection postmortem_;
};

struct Column {
  std::string_view console;   ///< console header ("": not shown on the console)
  std::string_view markdown;  ///< report.md header ("": not shown there)
  std::string_view html;      ///< report.html header ("": not shown there)
  /// The cell's text; "" when there is no value, which every format shows as "-".
  std::string (*text)(const Row&);
  /// Right: a number (console padding, Markdown `--:`, HTML `td class="n"`).
  Align align = Align::kLeft;
  size_t console_width = 0;      ///< console columns (the header and every row use it)
  Cut console_cut = Cut::kTail;  ///< which end of a too-long value the console drops
  bool html_link = false;        ///< report.html: the cell links to the scenario's section

  std::string_view header(Format f) const;
};

/// The columns in display order; each format shows those with a header in it.
const std::vector<Column>& report_columns();

}  // namespace nanchaos::results
