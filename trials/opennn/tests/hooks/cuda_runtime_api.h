// Stand-in for CUDA's cuda_runtime_api.h, for the graph-hook test only (CUDA cannot exist in
// CI): the types and functions src/kit_cuda_graph_hooks.cpp uses, with CUDA 13's names and
// signatures (cudaGraphInstantiate's flags default as in the real header).
#pragma once
#include <cstddef>

#define CUDARTAPI

extern "C" {
typedef enum cudaError { cudaSuccess = 0, cudaErrorNotSupported = 801 } cudaError_t;
typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUgraphNode_st* cudaGraphNode_t;
typedef struct cudaGraphExecUpdateResultInfo_st { int result; } cudaGraphExecUpdateResultInfo;

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t CUDARTAPI cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                          cudaGraphExecUpdateResultInfo* resultInfo);
cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t CUDARTAPI cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes);
}
