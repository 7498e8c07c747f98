// One BLAS thread per rank, as one torch intra-op thread per rank (torch::set_num_threads(1) in
// the rank loop): Debian's LibTorch takes its GEMMs from the system libblas.so.3, and the BLAS
// that libtorch1.13 recommends (libopenblas0, i.e. libopenblas0-pthread) starts a pool of as many
// threads as the host has cores in every process. Two ranks on two cores then run four BLAS
// threads that spin while they wait for work; torch::set_num_threads does not reach OpenBLAS's
// pool (PyTorch sets MKL's thread count, not OpenBLAS's).
//
//   pin_blas_threads(1);  // after torch::set_num_threads(1)
//
// Where the loaded BLAS has no thread pool (the reference BLAS, libblas3; a serial OpenBLAS) this
// does nothing. OpenBLAS's count is process-wide: ranks that are threads of one process (the
// in-process tests) share it. Torch-free; never throws.
#pragma once

namespace nanchaos::harness {

/// Sets the loaded OpenBLAS's thread count to `threads` (openblas_set_num_threads, looked up in
/// the process's loaded libraries). Returns whether an OpenBLAS that takes the call is loaded.
bool pin_blas_threads(int threads);

/// The loaded OpenBLAS's thread count (openblas_get_num_threads), or 0 when none is loaded.
int blas_threads();

}  // namespace nanchaos::harness
