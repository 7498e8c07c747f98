# Sourced (not run) by .ci/libtorch2-check and .ci/gpu-check: how to configure nanchaos against the
# LibTorch inside a pip-installed torch (PyPI wheels carry a complete LibTorch, with
# share/cmake/Torch), also on a host where Debian's LibTorch 1.13 is installed.
#
#   nanchaos_torch_setup PYTHON   sets NANCHAOS_TORCH_ROOT (the torch package folder),
#                                 NANCHAOS_TORCH_VERSION (torch.__version__), NANCHAOS_CUDA_ARCHS
#                                 (empty without nvcc) and the array NANCHAOS_CMAKE_ARGS; exports
#                                 TORCH_CUDA_ARCH_LIST; returns 1 (with a message) when PYTHON has
#                                 no torch or its torch has no CMake files.
#   nanchaos_check_linked BINARY  returns 1 (with a message) unless ldd resolves BINARY's
#                                 libtorch*.so and libc10*.so into $NANCHAOS_TORCH_ROOT/lib.
#
# Why each argument:
# - CMAKE_PREFIX_PATH holds the torch root itself, not only torch.utils.cmake_prefix_path: the
#   wheel's TorchConfig.cmake finds libtorch/libc10 with find_library(... PATHS <root>/lib), and
#   CMake searches the system folders before PATHS, so /usr/lib/x86_64-linux-gnu/libtorch.so
#   (Debian's 1.13) was linked under the 2.x headers. Prefixes are searched before system folders.
# - LibTorch 2.x's CMake ignores CMAKE_CUDA_ARCHITECTURES and adds -gencode flags for
#   TORCH_CUDA_ARCH_LIST to CMAKE_CUDA_FLAGS; with no GPU to detect, its default is a list from
#   compute_50, which CUDA 13's nvcc rejects ("Unsupported gpu architecture"). The list is the
#   wanted architectures (NANCHAOS_CUDA_ARCHS, default "90": the H200) that `nvcc --list-gpu-arch`
#   accepts, or the oldest one it accepts when none is.
# - NCCL: the wheel's (nvidia-nccl-cu*), the library libtorch_cuda itself loads, when it ships one;
#   else CMakeLists.txt looks in the CUDA toolkit.

nanchaos_torch_setup() {
  local py="$1" info
  # stdout only: torch may warn on stderr at import (e.g. "Failed to initialize NumPy").
  if ! info="$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__)' 2>/tmp/torch-env.$$)"; then
    echo "torch-env: $py cannot import torch: $(tail -3 /tmp/torch-env.$$)" >&2
    rm -f /tmp/torch-env.$$
    return 1
  fi
  rm -f /tmp/torch-env.$$
  NANCHAOS_TORCH_ROOT="$(sed -n 1p <<<"$info")"
  NANCHAOS_TORCH_VERSION="$(sed -n 2p <<<"$info")"
  if [ ! -f "$NANCHAOS_TORCH_ROOT/share/cmake/Torch/TorchConfig.cmake" ]; then
    echo "torch-env: $NANCHAOS_TORCH_ROOT has no share/cmake/Torch/TorchConfig.cmake" >&2
    return 1
  fi
  NANCHAOS_CMAKE_ARGS=(
    "-DCMAKE_PREFIX_PATH=$NANCHAOS_TORCH_ROOT;$NANCHAOS_TORCH_ROOT/share/cmake${NANCHAOS_EXTRA_PREFIX:+;$NANCHAOS_EXTRA_PREFIX}"
    "-DTorch_DIR=$NANCHAOS_TORCH_ROOT/share/cmake/Torch")

  NANCHAOS_CUDA_ARCHS=""
  local nvcc supported a
  nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  if [ -x "$nvcc" ]; then
    supported="$("$nvcc" --list-gpu-arch 2>/dev/null | sed -n 's/^compute_\([0-9]*[a-z]*\)$/\1/p' | sort -n)"
    for a in ${NANCHAOS_WANT_CUDA_ARCHS:-90}; do
      grep -qx "$a" <<<"$supported" && NANCHAOS_CUDA_ARCHS="${NANCHAOS_CUDA_ARCHS:+$NANCHAOS_CUDA_ARCHS;}$a"
    done
    [ -z "$NANCHAOS_CUDA_ARCHS" ] && NANCHAOS_CUDA_ARCHS="$(head -1 <<<"$supported")"
  fi
  if [ -n "$NANCHAOS_CUDA_ARCHS" ]; then
    NANCHAOS_CMAKE_ARGS+=("-DCMAKE_CUDA_ARCHITECTURES=$NANCHAOS_CUDA_ARCHS")
    # 90 -> 9.0, 100a -> 10.0a: TORCH_CUDA_ARCH_LIST's spelling.
    TORCH_CUDA_ARCH_LIST="$(sed -E 's/([0-9]+)([0-9])/\1.\2/g' <<<"$NANCHAOS_CUDA_ARCHS")"
    export TORCH_CUDA_ARCH_LIST
  fi

  local nccl
  nccl="$("$py" -c 'import os, nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)"
  if [ -n "$nccl" ] && [ -f "$nccl/include/nccl.h" ] && ls "$nccl"/lib/libnccl.so* >/dev/null 2>&1; then
    NANCHAOS_CMAKE_ARGS+=("-DNCCL_INCLUDE_DIR=$nccl/include"
                          "-DNCCL_LIBRARY=$(ls "$nccl"/lib/libnccl.so* | head -1)")
    export LD_LIBRARY_PATH="$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
}

nanchaos_check_linked() {
  local bin="$1" libs bad
  if ! libs="$(ldd "$bin" 2>&1)"; then
    echo "torch-env: ldd $bin failed: $libs" >&2
    return 1
  fi
  libs="$(grep -E '^\s*lib(torch|c10)[a-z_]*\.so' <<<"$libs")"
  if [ -z "$libs" ]; then
    echo "torch-env: $bin links no libtorch/libc10" >&2
    return 1
  fi
  bad="$(grep -v "=> $NANCHAOS_TORCH_ROOT/lib/" <<<"$libs" || true)"
  if [ -n "$bad" ]; then
    echo "torch-env: $bin resolves LibTorch outside $NANCHAOS_TORCH_ROOT/lib:" >&2
    echo "$bad" >&2
    return 1
  fi
  echo "$libs"
}
