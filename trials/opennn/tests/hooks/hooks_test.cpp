// The graph hooks end to end with the stand-ins: calls made inside a static library (OpenNN's
// place) land in the trial's wrappers, reach the shared runtime unchanged, and are booked in
// kit::graph_audit(). Prints "N passed, N failed".
#include <cstdint>
#include <cstdio>
#include <string>

#include "cuda_runtime_api.h"
#include "kit_resident.h"

cudaGraphExec_t opennn_like_instantiate(cudaGraph_t graph);
bool opennn_like_update(cudaGraphExec_t exec, cudaGraph_t graph);
bool opennn_like_launch(cudaGraphExec_t exec);
extern "C" long fake_cudart_calls(int which);

static int passed = 0, failed = 0;
#define CHECK(cond) ((cond) ? ++passed : (++failed, std::fprintf(stderr, "CHECK failed: %s\n", #cond)))

static cudaGraph_t graph_of(uintptr_t nodes) { return reinterpret_cast<cudaGraph_t>(nodes); }

int main()
{
    const cudaGraphExec_t one_step = opennn_like_instantiate(graph_of(100));  // the warm-up's
    kit::graph_audit().begin_epoch(0);
    const cudaGraphExec_t group = opennn_like_instantiate(graph_of(800));
    const cudaGraphExec_t other = opennn_like_instantiate(graph_of(10));
    CHECK(opennn_like_update(other, graph_of(801)));  // updated in place: its size is the new graph's
    kit::graph_audit().begin_epoch(1);
    for (int g = 0; g < 3; ++g)
    {
        CHECK(opennn_like_launch(one_step));
        CHECK(opennn_like_launch(group));
        CHECK(opennn_like_launch(other));
    }
    CHECK(!opennn_like_launch(nullptr));  // a failed launch is passed on and not booked

    CHECK(fake_cudart_calls(0) == 3 && fake_cudart_calls(1) == 1 && fake_cudart_calls(2) == 10);
    const kit::GraphAudit::Window w = kit::graph_audit().window(1, 1, 8);
    CHECK(w.launches == 9);
    CHECK(w.full_graph_nodes == 801);
    CHECK(w.short_launches == 3);
    CHECK(w.graph_steps_estimate == 3 * (1 + 8 + 8));
    const std::string graphs = kit::graph_audit().json().dump();
    CHECK(graphs.find("{\"instantiated\":0,\"nodes\":100,\"launches_by_epoch\":{\"1\":3}}") != std::string::npos);
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
