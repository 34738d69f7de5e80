// Switches of the CUDA back-end that change speed only, never a result bit; each is off by default until
// measured on the GPU, and on once it measured faster (host-only, so tests and tools can flip them). The
// matmul ones are in matmul.cuh (matmul_group_launch_tune, matmul_q8t_early_tune, matmul_f32_row1_tune);
// tests/gpu AllSameBitsSwitches turns them all on, or all off, to compare every logit's bits.
#pragma once

namespace ferry::cuda {

// How the back-end's on/off switches read their environment variable and tune knob (these, the matmul
// ones, FERRY_Q8T and FERRY_MXT). The variable gives `unset` when it is not set; else, for a switch on
// by default (unset true), anything but "0"; for one off by default, "1" only. Callers read it once (a
// function-local static).
bool env_switch(const char* name, bool unset);
// A switch's value: the tune knob where it is set (1 on, 0 off), else the environment's.
inline bool switch_on(int tuned, bool env) { return tuned >= 0 ? tuned == 1 : env; }
// Switches of several levels (0 off, 1 .. hi: FERRY_ATTN_REG, FERRY_F32_TILE): the variable's number clamped
// to [0, hi], `unset` when it is not set (read once, as env_switch); the value, the tune knob where it is set
// (at most hi), else the environment's.
int env_level(const char* name, int unset, int hi);
inline int level_on(int tuned, int env, int hi) { return tuned >= 0 ? (tuned < hi ? tuned : hi) : env; }

// Whether the current device runs the sm_90a code of ferry_cuda_sm90a (wgmma): compute capability 9.0, the
// H100 / H200 (read once).
bool sm90a_device();

// Whether launch_small (common.cuh) launches the small kernels as programmatic dependents: on by default
// (H200, 2026-12-02: +7 % decode on the K3.1 slice, identical logits); FERRY_PDL=0 or launch_pdl_tune(0)
// turns it off.
bool pdl_small();
// 1 on, 0 off, -1 the environment's (FERRY_PDL).
void launch_pdl_tune(int on);
// pdl_small() for one kernel (a __global__ function's address): a diagnosis aid, FERRY_PDL_ONLY=a,b,...
// (or a+b+...) limits the programmatic launches to the kernels whose names contain one of them, and
// FERRY_PDL_ONLY=-a,b,... to the kernels whose names contain none of them.
bool pdl_for(const void* kernel);

// Whether attention_kernel scores 4 keys per warp and sums 4 value columns per thread at once, and the DSA
// indexer's scores take 8 heads per warp at once (attention.cu): on by default (H100, 2026-12-06: K3.1 slice
// decode 501.5 against 494.3 tok/s, same bits); FERRY_ATTN_ILP=0 or attention_ilp_tune(0) turns it off.
bool attention_ilp();
void attention_ilp_tune(int on);
// Whether dense causal attention of several queries (prompt passes, verify blocks) runs 8 queries of a head
// per block, each key row and value loaded once for the 8 (attention.cu attention_multi_kernel): on by
// default (H100, 2026-12-06: the DSA layer's 1,024-token prompt attention 14.1 against 25.1 ms);
// FERRY_ATTN_MULTI=0 or attention_multi_tune(0) gives every (query, head) a block of its own, =16 or
// attention_multi_tune(16) takes 16 queries per block (not measured yet). Same bits in every case.
// attention_multi_queries(): 0 (off), 8 or 16.
int attention_multi_queries();
void attention_multi_tune(int on);
// Whether attention of queries with kAttnSplitMinKeys score slots or more (a DSA layer past index_topk; dense
// attention of one query at long contexts) that the 8-query kernels do not take runs as two launches spread
// over the keys and the columns (attention.cu attention_split_scores_kernel / attention_split_output_kernel)
// instead of a block per (query, head) walking all its keys: the same operations in the same order, the
// same bits. Built 2026-12-07i, not yet run on a GPU: off until it is; FERRY_ATTN_SPLIT=1 or
// attention_split_tune(1) turns it on.
constexpr int64_t kAttnSplitMinKeys = 256;
bool attention_split();
void attention_split_tune(int on);
// How many query groups attention has run split over keys in this process (tests: the path ran).
int64_t attention_split_calls();
// Whether the DSA indexer's selection (ties by position, the default) runs on the device (attention.cu
// indexer_select_kernel, a radix select: select_bits.cuh) instead of on the host after downloading every query's
// scores, and attention takes such a selection as it stands (AttentionArgs::sel_ascending) instead of downloading,
// checking and compacting it: no host round trip in a DSA layer whose context exceeds index_topk. The same
// positions (host test SelectBits.*, GPU tests Ops.IndexerTopk* and Ops.IndexerSelectionOnTheDevice*). On by
// default since 2026-12-07i (H100, K3.1 slice, gpu-select-call.sh: a 3,000-token pass 636.2 -> 476.1 ms, decode
// after it 385.3 -> 412.2 tok/s, the same logits); FERRY_DEVICE_SELECT=0 or device_select_tune(0) selects on
// the host.
bool device_select();
void device_select_tune(int on);
// Where the router's selection (RouteRule: choice, groups, top-k, weights) runs on the device (route.cu
// route_select_kernel, a warp per row; its pieces in route_bits.cuh, run serially on the host against route_rows
// by RouteBits.*) and only the ids and weights come to the host (n x k x 8 bytes, against n x e x 4 of scores and
// the host's selection: 3.7 MB and 8 host threads a layer in a 1,024-token pass). The same ids and weight bits
// (GPU test Ops.RouterSelectionOnTheDevice*). device_route(): 0 never, 1 every call, 2 (the default) calls of
// kDeviceRouteMinRows rows or more, the prompt passes. Measured 2026-12-07i on the H100 K3.1 slice: the
// 1,024-token pass 99.5 -> 97.3 ms, but one-row decode 539.7 -> 520.6 tok/s (the warp's kernel sits on the
// device's path, where the host's selection overlaps the shared experts). FERRY_DEVICE_ROUTE=0|1|2 or
// device_route_tune(0|1|2) picks one.
constexpr int64_t kDeviceRouteMinRows = 64;
int device_route();
bool device_route_for(int64_t rows);  // whether a call of rows rows selects on the device
void device_route_tune(int on);
// Whether those 8-query blocks take attention_multi_reg_kernel where keys are at most 256 floats wide (query
// rows in registers, two keys a warp per round, the grid head-major; attention.cu): 0 no, 1 with each score
// folded over the warp by warp_fold, 2 (the default since 2026-12-07b) with a round's 16 scores folded at once
// through shared memory, a lane per score: the 1,024-token pass's attention 9.7 -> 5.5 ms (H100), 3 as 2
// with each query's sum of p taken once instead of by every output column (built 2026-12-07b, not run).
// FERRY_ATTN_REG=0|1|2|3 or attention_reg_tune(0|1|2|3) picks one. Same bits in every case.
int attention_reg();
void attention_reg_tune(int on);

// Whether the fused ops run fused (CudaBackend's rmsnorm_kept, attn_res_norm, l2norm_qk, conv1d_silu_many:
// the norms prepare their output for the decode matmuls, which skip their own preparation; each fused op
// one launch): on by default; FERRY_FUSE=0 or fused_ops_tune(0) runs Backend's defaults, the ops one by one
// as before they were fused (same bits).
bool fused_ops();
void fused_ops_tune(int on);
// Of those, the gated activations fused with the preparation (gate_kept, the experts' activation; a row on
// a cluster of up to 8 blocks): off by default (FERRY_FUSE_GATE=1 or fused_gate_tune(1) turns it on while
// fused_ops() holds). Its block-per-row versions measured slower on the H200 (2026-12-03: loads one by one
// behind the stores, 13 us for a 12,288-column row, 126 us for a dense FFN's; 2026-12-06, loads first:
// 569.0 against 598.3 tok/s on the K3.1 slice, same bits); the cluster version is not measured yet.
bool fused_gate();
void fused_gate_tune(int on);

}  // namespace ferry::cuda
