// kit_resident: the OpenNN trial's throughput path (modes `graph` and `resident`): how the
// protocol's steps map onto OpenNN epochs over a dataset of many batches, an audit of the CUDA
// graphs OpenNN launches, so a figure is only reported for steps that ran, and the figures set
// beside a refused one (opennn_figures).
//
// OpenNN's own throughput runner (docs/benchmarks/throughput/resnet50/opennn_resnet50_speed.cpp at
// the pinned commit) trains CIFAR-10's 50,000 training images, GPU-resident, batch 128, and times
// whole epochs: train() has no per-step hook, and its graph path launches 8 steps at a time. So
// one chunk of the window is one epoch:
//   steps per epoch  = floor(images / batch)       (OpenNN drops the remainder every epoch)
//   warm-up epochs   fixed (--warmup-steps W): max(1, ceil(W / steps per epoch))
//                    the rule: epoch 0 (it captures the graphs), then epochs until two successive
//                    epoch rates agree (kit_window.h)
//   timed epochs     fixed (--steps S): max(1, ceil(S / steps per epoch)), the fewest whole
//                    epochs holding S steps; the rule: the fewest whole epochs holding
//                    --window-images images (images actually trained) and lasting
//                    --window-seconds (decided at each epoch's end, kit_window.h)
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
#include "kit_window.h"

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
    WindowRequest request;
    // Fixed parts: the planned counts. Rule-decided parts: the minimum (warm-up: epoch 0;
    // window: the epochs the images need) until the trial sets what ran (settle()).
    int64_t warmup_epochs = 0;
    int64_t timed_epochs = 0;
    int64_t timed_epochs_for_images = 0;  // the rule: the fewest epochs holding min_images
    bool settled = false;
    int64_t epochs() const { return warmup_epochs + timed_epochs; }
    int64_t timed_steps() const { return timed_epochs * steps_per_epoch; }
    int64_t timed_images() const { return timed_steps() * batch; }
    // OpenNN's resident graph path (Optimizer::run_graph_epoch): with at least 8 batches an
    // epoch runs as 8-step mega-graphs and the remainder (< 8 steps) eagerly; with fewer, one
    // graph per step.
    int64_t steps_per_graph() const { return steps_per_epoch >= kOpenNNGraphGroupSize ? kOpenNNGraphGroupSize : 1; }
    int64_t graph_launches_per_epoch() const { return steps_per_epoch / steps_per_graph(); }
    int64_t graph_steps_per_epoch() const { return graph_launches_per_epoch() * steps_per_graph(); }
    int64_t eager_tail_steps_per_epoch() const { return steps_per_epoch - graph_steps_per_epoch(); }
    // The window controller's geometry: one chunk = one epoch, epoch 0 the minimum warm-up.
    EpochGeometry geometry() const;
    // The counts that ran, from a controller whose window closed.
    void settle(const WindowController& controller);
    Json json() const;
};

// The throughput path runs --image-size 32 only; for another side, the one-line refusal saying
// what the 50,000-image GPU-resident dataset would need at that side (computed, not measured):
// GPU memory for OpenNN's one fp32 matrix (ImageDataset::enable_device_residency uploads the
// scaled pixels and one-hot targets), host memory while OpenNN stages it (it builds the input
// matrix, then a copy with the targets, both fp32, before the upload), and temporary disk for
// the BMP tree and OpenNN's uint8 image cache.
std::optional<std::string> resident_side_refusal(const std::string& engine, int64_t side);

// Throws TrialError when the batch is larger than the dataset.
EpochPlan plan_epochs(int64_t dataset_images, int64_t batch, const WindowRequest& request);
// Fixed counts (--warmup-steps W --steps S).
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

// The figures reported beside the naive one (result.opennn_figures), whether or not the audit
// refuses it:
//   naive_ips         timed steps planned x batch / window seconds (= images_per_second)
//   executed_steps    graphs on: the audit's graph_steps_estimate (each launch counted at its
//                     graph's node count / (full graph's nodes / steps per graph)) plus the eager
//                     tail steps the plan runs outside graphs (timed epochs x (steps per epoch mod
//                     8)); when no graph launched at all, OpenNN ran every step eagerly, so all
//                     timed steps. Graphs off: all timed steps (the audit checks none launched).
//   executed_ips      executed_steps x batch / window seconds
//   runner_style_ips  what opennn_resnet50_speed.cpp prints, had it timed this train() call:
//                     long(samples / (call seconds / epochs)) = floor(dataset images x epochs of the
//                     call / call seconds). Its timed span is a whole train() call: setup, dataset
//                     upload, OpenNN's warm-up step, graph capture in epoch 0 and every epoch; its
//                     samples are all dataset images (the batch remainder OpenNN drops and steps
//                     that did not run included). The runner times its second call, after an
//                     untimed one of 2 epochs; the trial's call is the process's first, so it also
//                     holds one-time costs (CUDA module loading, library handles, conv plans).
struct OpenNNFigures
{
    double naive_ips = 0;
    int64_t executed_steps = 0;
    double executed_ips = 0;
    int64_t runner_style_ips = 0;
};
OpenNNFigures opennn_figures(const GraphAudit::Window& window, const EpochPlan& plan, bool cuda_graph,
                             double window_seconds, double train_seconds, int64_t train_epochs);
Json opennn_figures_json(const OpenNNFigures& figures);
// All four keys null (a run that ended before its window was timed).
Json opennn_figures_null();
// The formulas and inputs, for result.settings.
Json opennn_figures_inputs(const GraphAudit::Window& window, const EpochPlan& plan, bool cuda_graph,
                           double window_seconds, double train_seconds, int64_t train_epochs);

}  // namespace kit
