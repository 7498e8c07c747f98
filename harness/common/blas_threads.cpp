#include "harness/common/blas_threads.h"

#include <dlfcn.h>

namespace nanchaos::harness {

bool pin_blas_threads(int threads) {
  using SetThreads = void (*)(int);
  auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set == nullptr) return false;
  set(threads);
  return true;
}

int blas_threads() {
  using GetThreads = int (*)();
  auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return get == nullptr ? 0 : get();
}

}  // namespace nanchaos::harness
