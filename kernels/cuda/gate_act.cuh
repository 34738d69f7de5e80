// The gated activations as device functions, one expression each: the element-wise ops (elementwise.cu:
// swiglu, situ, sigmoid_mul) and the kernels that fuse one with the decode matmuls' x preparation
// (matmul_mma.cu prep_gate) compute them here, so both give the same bits.
#pragma once

#include <cuda_runtime.h>

#include "kernels/backend.hpp"
#include "kernels/cuda/common.cuh"

namespace ferry::cuda {

__device__ __forceinline__ float swiglu_value(float g, float u) { return mul(siluf_(g), u); }

// SiTU (K3): beta * tanh(g / beta) * sigmoid(g) * (lbeta > 0 ? lbeta * tanh(u / lbeta) : u).
__device__ __forceinline__ float situ_value(float g, float u, float beta, float lbeta) {
  const float gp = mul(mul(beta, tanhf(g / beta)), sigmoidf_(g));
  const float up = lbeta > 0.0f ? mul(lbeta, tanhf(u / lbeta)) : u;
  return mul(gp, up);
}

__device__ __forceinline__ float sigmoid_mul_value(float x, float gate) { return mul(x, sigmoidf_(gate)); }

__device__ __forceinline__ float gate_value(const GateAct& act, float a, float b) {
  switch (act.op) {
    case GateOp::situ: return situ_value(a, b, act.beta, act.lbeta);
    case GateOp::sigmoid_mul: return sigmoid_mul_value(a, b);
    default: return swiglu_value(a, b);
  }
}

}  // namespace ferry::cuda
