// Library-call checks: see check.h.
#include "harness/common/check.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace nanchaos::harness {
namespace {

std::atomic<int> g_rank{-1};

std::string rank_text() {
  const int r = g_rank.load();
  if (r >= 0) return std::to_string(r);
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"}) {
    const char* v = std::getenv(var);
    if (v && *v) return v;
  }
  return "";
}

// __FILE__ is an absolute path in CMake builds; the part from the source tree's top folder is
// what a reader can open.
const char* tree_path(const char* file) {
  for (const char* top :
       {"/tests/", "/bench/", "/harness/", "/detectors/", "/inject/", "/results/"}) {
    if (const char* p = std::strstr(file, top)) return p + 1;
  }
  return file;
}

}  // namespace

void set_check_rank(int rank) { g_rank.store(rank); }

std::string process_origin() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  const std::string rank = rank_text();
  if (rank.empty()) return fmt::format("[{} {}]", host, getpid());  // not a rank (the controller)
  return fmt::format("[{} {} rank {}]", host, getpid(), rank);
}

void check_failed(const char* file, int line, const char* call, const std::string& library_error) {
  throw std::runtime_error(fmt::format("{} {}:{}: {} failed: {}", process_origin(), tree_path(file),
                                       line, call, library_error));
}

}  // namespace nanchaos::harness
