// Stand-in for the shared CUDA runtime (libcudart.so) in the graph-hook test: a "graph" handle's
// value is its node count, instantiating returns the same value as the executable, and every
// call is counted so the test sees what reached the runtime.
#include <cstdint>

#include "cuda_runtime_api.h"

namespace { long g_instantiated = 0, g_updated = 0, g_launched = 0; }

extern "C" {
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long)
{
    ++g_instantiated;
    *exec = reinterpret_cast<cudaGraphExec_t>(graph);
    return cudaSuccess;
}
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t, cudaGraph_t, cudaGraphExecUpdateResultInfo*)
{
    ++g_updated;
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t)
{
    ++g_launched;
    return exec ? cudaSuccess : cudaErrorNotSupported;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t*, size_t* n)
{
    *n = size_t(reinterpret_cast<uintptr_t>(graph));
    return cudaSuccess;
}
long fake_cudart_calls(int which) { return which == 0 ? g_instantiated : which == 1 ? g_updated : g_launched; }
}
