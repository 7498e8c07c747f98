// Precompiled header for the torch-side translation units (LibTorch headers cost ~20 s each).
#pragma once
#include <torch/torch.h>
