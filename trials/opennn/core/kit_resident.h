// kit_resident: the OpenNN trial's throughput path (modes `graph` and `resident`): how the
// protocol's steps map onto OpenNN epochs over a dataset of many batches, and an audit of the
// CUDA graphs OpenNN launches, so a figure is only reported for steps that ran.
//
// OpenNN's own throughput runner (docs/benchmarks/throughput/resnet50/opennn_resnet50_speed.cpp at
// the pinned commit) trains CIFAR-10's 50,000 training images, GPU-resident, batch 128, and times
// whole epochs: train() has no per-step hook, and its graph path launches 8 steps at a time. So:
//   steps per epoch  = floor(images / batch)       (OpenNN drops the remainder every epoch)
//   warm-up epochs   = max(1, ceil(W / steps per epoch))   epoch 0 captures the graphs
//   timed epochs     = max(1, ceil(S / steps per epoch))   the fewest whole epochs holding S steps
// and images = timed epochs x steps per epoch x batch (the images actually trained).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kit_args.h"
#include "kit_json.h"

namespace kit
{

// CIFAR-10's training set: the dataset the reference's OpenNN throughput run trains on.
inline constexpr int64_t kResidentDatasetImages = 50000;

// OpenNN's Optimizer::graph_group_size (optimizer.h, protected): training steps per captured
// mega-graph on the resident path.
inline constexpr int64_t kOpenNNGraphGroupSize = 8;

struct EpochPlan
{
    int64_t dataset_images = 0;
    int64_t batch = 0;
    int64_t steps_per_epoch = 0;
    int64_t dropped_per_epoch = 0;  // images / batch remainder, never trained
    int64_t warmup_steps_requested = 0;
    int64_t steps_requested = 0;
    int64_t warmup_epochs = 0;
    int64_t timed_epochs = 0;
    int64_t epochs() const { return warmup_epochs + timed_epochs; }
    int64_t timed_steps() const { return timed_epochs * steps_per_epoch; }
    int64_t timed_images() const { return timed_steps() * batch; }
    // OpenNN's resident graph path (Optimizer::run_graph_epoch): with at least 8 batches an
    // epoch runs as 8-step mega-graphs and the remainder (< 8 steps) eagerly; with fewer, one
    // graph per step.
    int64_t steps_per_graph() const { return steps_per_epoch >= kOpenNNGraphGroupSize ? kOpenNNGraphGroupSize : 1; }
    int64_t graph_launches_per_epoch() const { return steps_per_epoch / steps_per_graph(); }
    int64_t graph_steps_per_epoch() const { return graph_launches_per_epoch() * steps_per_graph(); }
    Json json() const;
};

// Throws TrialError when the batch is larger than the dataset.
EpochPlan plan_epochs(int64_t dataset_images, int64_t batch, int64_t warmup_steps, int64_t steps);

// What the trial learns from the CUDA runtime calls OpenNN makes (src/kit_cuda_graph_hooks.cpp
// feeds it; nothing here needs CUDA). Graph executables are identified by their handle; each
// launch is booked to the epoch announced last ("Epoch: k" lines, begin_epoch).
class GraphAudit
{
public:
    void on_instantiate(const void* exec, int64_t nodes);
    void on_update(const void* exec, int64_t nodes);  // cudaGraphExecUpdate succeeded
    void on_launch(const void* exec);
    void begin_epoch(int64_t epoch);
    void reset();

    struct Window
    {
        int64_t launches = 0;
        int64_t full_graph_nodes = 0;      // the largest graph launched in the window
        int64_t short_launches = 0;        // launches of graphs under 90 % of that size
        int64_t graph_steps_estimate = 0;  // sum of launches x round(nodes / (full / steps_per_graph))
    };
    // Launches booked to epochs [first, last]; a full graph holds `steps_per_graph` steps.
    Window window(int64_t first_epoch, int64_t last_epoch, int64_t steps_per_graph) const;

    // Every graph instantiated (in order) with its node count and launches per epoch.
    Json json() const;

private:
    struct Exec
    {
        int64_t order = 0;
        int64_t nodes = 0;
        std::map<int64_t, int64_t> launches;  // epoch (-1: before "Epoch: 0") -> launches
    };
    mutable std::mutex mutex_;
    std::map<const void*, Exec> execs_;
    int64_t instantiated_ = 0;
    int64_t epoch_ = -1;
};

GraphAudit& graph_audit();  // the process's audit (the hooks write to it)

// Why the timed window's figure cannot be reported, or nullopt. With graphs requested: no graph
// launched in the window (OpenNN fell back to eager steps), or a graph smaller than a full
// group launched in place of one (steps that were counted but did not run). Without graphs:
// any launch.
std::optional<std::string> audit_failure(const GraphAudit::Window& window, const EpochPlan& plan,
                                         bool cuda_graph);

// The window's figures and the check, for result.settings.
Json audit_json(const GraphAudit::Window& window, const EpochPlan& plan, bool cuda_graph);

}  // namespace kit
