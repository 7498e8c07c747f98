// Shared set-up of the libFuzzer targets; see fuzz_common.h.
#include "tests/fuzz/fuzz_common.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "harness/scenario/registry_json.h"

namespace nanchaos::fuzz {

[[noreturn]] static void die(const std::string& what) {
  std::fprintf(stderr, "fuzz harness: %s\n", what.c_str());
  std::abort();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) die("cannot write " + path);
}

void register_snapshot() {
  const char* env = std::getenv("NANCHAOS_REGISTRY_JSON");
  const std::string path = env && *env ? env : NANCHAOS_REGISTRY_JSON;
  try {
    harness::register_from_json(nlohmann::json::parse(read_file(path)));
  } catch (const std::exception& e) {
    die(path + ": " + e.what());
  }
}

const std::string& scratch_dir() {
  // Never destroyed (a leaked pointer), so the atexit hook can still read it.
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto* d = new std::string(std::string(tmp && *tmp ? tmp : "/tmp") + "/nanchaos-fuzz-" +
                              std::to_string(getpid()));
    std::error_code ec;
    std::filesystem::create_directories(*d + "/events", ec);
    if (ec) die("cannot create " + *d + ": " + ec.message());
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir(), ignored);
    });
    return d;
  }();
  return *dir;
}

}  // namespace nanchaos::fuzz
