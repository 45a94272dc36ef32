// The CUDA graph audit's eyes: this executable defines cudaGraphInstantiate,
// cudaGraphExecUpdate and cudaGraphLaunch, so OpenNN's calls (device_backend.cpp:
// instantiate_or_update, launch_graph; OpenNN is a static library linked into the trial) land
// here first. Each wrapper calls the CUDA runtime's own function (dlsym RTLD_NEXT: the shared
// libcudart the trial links) and books what happened in kit::graph_audit(): a graph's node
// count when it is instantiated or updated, every launch. Nothing else changes: same arguments,
// same return value, no synchronisation.
//
// Why: at the pinned commit OpenNN's resident graph path launches its graphs by slot parity and
// its built-in warm-up may leave a one-step graph where an 8-step group graph is expected
// (trials/opennn/README.md, "opennn-graph"); only the graphs actually launched say how many
// steps ran.
#ifdef OPENNN_HAS_CUDA

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "kit_resident.h"

namespace
{

template <typename Fn>
Fn real(const char* name)
{
    void* f = dlsym(RTLD_NEXT, name);
    return reinterpret_cast<Fn>(f);
}

int64_t node_count(cudaGraph_t graph)
{
    size_t n = 0;
    if (graph && cudaGraphGetNodes(graph, nullptr, &n) == cudaSuccess) return int64_t(n);
    return -1;
}

}  // namespace

extern "C" {

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
    using Fn = cudaError_t (*)(cudaGraphExec_t*, cudaGraph_t, unsigned long long);
    static const Fn fn = real<Fn>("cudaGraphInstantiate");
    if (!fn) return cudaErrorNotSupported;
    const cudaError_t status = fn(pGraphExec, graph, flags);
    if (status == cudaSuccess && pGraphExec) kit::graph_audit().on_instantiate(*pGraphExec, node_count(graph));
    return status;
}

cudaError_t CUDARTAPI cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                          cudaGraphExecUpdateResultInfo* resultInfo)
{
    using Fn = cudaError_t (*)(cudaGraphExec_t, cudaGraph_t, cudaGraphExecUpdateResultInfo*);
    static const Fn fn = real<Fn>("cudaGraphExecUpdate");
    if (!fn) return cudaErrorNotSupported;
    const cudaError_t status = fn(hGraphExec, hGraph, resultInfo);
    if (status == cudaSuccess) kit::graph_audit().on_update(hGraphExec, node_count(hGraph));
    return status;
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    using Fn = cudaError_t (*)(cudaGraphExec_t, cudaStream_t);
    static const Fn fn = real<Fn>("cudaGraphLaunch");
    if (!fn) return cudaErrorNotSupported;
    const cudaError_t status = fn(graphExec, stream);
    if (status == cudaSuccess) kit::graph_audit().on_launch(graphExec);
    return status;
}

}  // extern "C"

#endif  // OPENNN_HAS_CUDA
