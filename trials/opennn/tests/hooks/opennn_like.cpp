// Stand-in for OpenNN's device_backend.cpp (instantiate_or_update, launch_graph), built into a
// static library as OpenNN is, so its CUDA calls are resolved when the trial is linked.
#include "cuda_runtime_api.h"

cudaGraphExec_t opennn_like_instantiate(cudaGraph_t graph)
{
    cudaGraphExec_t exec = nullptr;
    return cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess ? exec : nullptr;
}

bool opennn_like_update(cudaGraphExec_t exec, cudaGraph_t graph)
{
    cudaGraphExecUpdateResultInfo info{};
    return cudaGraphExecUpdate(exec, graph, &info) == cudaSuccess;
}

bool opennn_like_launch(cudaGraphExec_t exec) { return cudaGraphLaunch(exec, nullptr) == cudaSuccess; }
