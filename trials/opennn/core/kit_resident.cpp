#include "kit_resident.h"

#include <algorithm>
#include <cmath>

#include "kit_data.h"
#include "kit_error.h"

namespace kit
{

namespace
{

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

EpochGeometry EpochPlan::geometry() const
{
    EpochGeometry g;
    g.steps_per_epoch = steps_per_epoch;
    g.batch = batch;
    g.chunk_epochs = 1;
    g.min_warmup_epochs = 1;  // epoch 0: the graph path captures its graphs there
    g.fixed_warmup_epochs = request.warmup_by_rule ? 1 : warmup_epochs;
    g.fixed_timed_epochs = request.window_by_rule ? timed_epochs_for_images : timed_epochs;
    return g;
}

void EpochPlan::settle(const WindowController& controller)
{
    if (!controller.done()) throw TrialError("internal: the throughput window did not close");
    warmup_epochs = *controller.warmup_epochs();
    timed_epochs = controller.timed_epochs();
    settled = true;
}

Json EpochPlan::json() const
{
    Json j = Json::object();
    j.set("dataset_images", dataset_images);
    j.set("batch", batch);
    j.set("steps_per_epoch", steps_per_epoch);
    j.set("images_dropped_per_epoch", dropped_per_epoch);
    j.set("warmup_rule", request.warmup_rule());
    j.set("window_rule", request.window_rule());
    j.set("warmup_steps_requested", request.warmup_by_rule ? Json() : Json(request.warmup_steps));
    j.set("steps_requested", request.window_by_rule ? Json() : Json(request.steps));
    j.set("window_images_requested", request.window_by_rule ? Json(request.min_images) : Json());
    j.set("window_seconds_requested", request.window_by_rule ? Json(request.min_seconds) : Json());
    j.set("timed_epochs_for_images", request.window_by_rule ? Json(timed_epochs_for_images) : Json());
    // Before training (or when it ended before its window closed), a rule-decided count is its
    // minimum; "settled" says whether these are the counts that ran.
    j.set("settled", settled);
    j.set("warmup_epochs", warmup_epochs);
    j.set("timed_epochs", timed_epochs);
    j.set("timed_steps", timed_steps());
    j.set("timed_images", timed_images());
    j.set("steps_per_graph", steps_per_graph());
    j.set("graph_launches_per_epoch", graph_launches_per_epoch());
    j.set("eager_tail_steps_per_epoch", eager_tail_steps_per_epoch());
    j.set("mapping",
          "OpenNN trains whole epochs (train() has no per-step hook), so a chunk is one epoch. Warm-up: OpenNN's "
          "built-in CUDA warm-up step, then epoch 0 (it captures the graphs), then fixed: max(1, ceil(W / "
          "steps_per_epoch)) epochs in all, or the rule: epochs until two successive epoch rates differ by <= the "
          "tolerance (at most max_warmup_seconds after epoch 0). Timed: fixed: max(1, ceil(S / steps_per_epoch)) "
          "epochs; the rule: the fewest whole epochs holding window_images trained images and lasting "
          "window_seconds, decided at each epoch's end from its 'Training error' line (the trial then lowers "
          "OpenNN's maximum_epochs so train() stops after that epoch). images = timed_steps x batch");
    return j;
}

std::optional<std::string> resident_side_refusal(const std::string& engine, int64_t side)
{
    if (side == kImageHeight) return std::nullopt;
    const double images = double(kResidentDatasetImages);
    const double values = images * double(side) * double(side) * kImageChannels;
    const double targets = images * kNumClasses;
    const double gpu_gb = (values + targets) * 4 / 1e9;
    const double host_gb = (2 * values + 2 * targets) * 4 / 1e9;
    const double bmp_bytes = 54 + double((side * 3 + 3) / 4 * 4) * double(side);
    const double disk_gb = (images * bmp_bytes + values) / 1e9;
    auto gb = [](double v) { return std::to_string(int64_t(std::llround(v))); };
    return engine + " runs --image-size 32 only: at " + std::to_string(side) + " its GPU-resident dataset of " +
           std::to_string(kResidentDatasetImages) + " images would need about " + gb(gpu_gb) +
           " GB of GPU memory (one fp32 matrix), about " + gb(host_gb) +
           " GB of host memory while OpenNN stages it (ImageDataset::enable_device_residency builds the fp32 "
           "matrix twice) and about " + gb(disk_gb) + " GB of temporary disk (BMP tree and OpenNN's image cache); "
           "opennn-pool1 and opennn-default run 224";
}

EpochPlan plan_epochs(int64_t dataset_images, int64_t batch, const WindowRequest& request)
{
    if (batch < 1 || batch > dataset_images)
        throw TrialError("batch " + std::to_string(batch) + " does not fit the " + std::to_string(dataset_images) +
                         "-image dataset of the GPU-resident path (one batch at most per dataset)");
    EpochPlan p;
    p.dataset_images = dataset_images;
    p.batch = batch;
    p.steps_per_epoch = dataset_images / batch;
    p.dropped_per_epoch = dataset_images % batch;
    p.request = request;
    p.warmup_epochs = request.warmup_by_rule
        ? 1
        : std::max<int64_t>(1, ceil_div(std::max<int64_t>(request.warmup_steps, 0), p.steps_per_epoch));
    EpochGeometry g;
    g.steps_per_epoch = p.steps_per_epoch;
    g.batch = batch;
    p.timed_epochs_for_images = epochs_for_images(g, request.min_images);
    p.timed_epochs = request.window_by_rule
        ? p.timed_epochs_for_images
        : std::max<int64_t>(1, ceil_div(std::max<int64_t>(request.steps, 0), p.steps_per_epoch));
    if (p.epochs() > kEpochCap)
        throw TrialError("the throughput window needs " + std::to_string(p.epochs()) + " epochs of " +
                         std::to_string(p.steps_per_epoch) + " steps, more than the trial's cap of " +
                         std::to_string(kEpochCap));
    return p;
}

EpochPlan plan_epochs(int64_t dataset_images, int64_t batch, int64_t warmup_steps, int64_t steps)
{
    WindowRequest r;
    r.warmup_steps = warmup_steps;
    r.steps = steps;
    return plan_epochs(dataset_images, batch, r);
}

// ------------------------------------------------------------------------------ GraphAudit

void GraphAudit::on_instantiate(const void* exec, int64_t nodes)
{
    std::lock_guard<std::mutex> lock(mutex_);
    Exec& e = execs_[exec];  // a handle freed and handed out again starts over
    e = Exec{};
    e.order = instantiated_++;
    e.nodes = nodes;
}

void GraphAudit::on_update(const void* exec, int64_t nodes)
{
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = execs_.find(exec);
    if (it != execs_.end()) it->second.nodes = nodes;
}

void GraphAudit::on_launch(const void* exec)
{
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = execs_.find(exec);
    if (it == execs_.end())
    {
        // Instantiated by a call the hooks do not see: booked with an unknown (0) size.
        it = execs_.emplace(exec, Exec{}).first;
        it->second.order = instantiated_++;
    }
    ++it->second.launches[epoch_];
}

void GraphAudit::begin_epoch(int64_t epoch)
{
    std::lock_guard<std::mutex> lock(mutex_);
    epoch_ = epoch;
}

void GraphAudit::reset()
{
    std::lock_guard<std::mutex> lock(mutex_);
    execs_.clear();
    instantiated_ = 0;
    epoch_ = -1;
}

GraphAudit::Window GraphAudit::window(int64_t first_epoch, int64_t last_epoch, int64_t steps_per_graph) const
{
    std::lock_guard<std::mutex> lock(mutex_);
    Window w;
    std::vector<std::pair<int64_t, int64_t>> launched;  // (nodes, launches)
    for (const auto& [handle, e] : execs_)
    {
        int64_t n = 0;
        for (const auto& [epoch, count] : e.launches)
            if (epoch >= first_epoch && epoch <= last_epoch) n += count;
        if (n == 0) continue;
        launched.emplace_back(e.nodes, n);
        w.launches += n;
        w.full_graph_nodes = std::max(w.full_graph_nodes, e.nodes);
    }
    const double nodes_per_step = w.full_graph_nodes > 0 ? double(w.full_graph_nodes) / double(steps_per_graph) : 0;
    for (const auto& [nodes, n] : launched)
    {
        if (double(nodes) < 0.9 * double(w.full_graph_nodes)) w.short_launches += n;
        if (nodes_per_step > 0) w.graph_steps_estimate += n * int64_t(std::llround(double(nodes) / nodes_per_step));
    }
    return w;
}

Json GraphAudit::json() const
{
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<const Exec*> ordered;
    for (const auto& [handle, e] : execs_) ordered.push_back(&e);
    std::sort(ordered.begin(), ordered.end(), [](const Exec* a, const Exec* b) { return a->order < b->order; });
    Json graphs = Json::array();
    for (const Exec* e : ordered)
    {
        Json g = Json::object();
        g.set("instantiated", e->order);
        g.set("nodes", e->nodes);
        Json by_epoch = Json::object();
        for (const auto& [epoch, count] : e->launches)
            by_epoch.set(epoch < 0 ? std::string("before_epoch_0") : std::to_string(epoch), count);
        g.set("launches_by_epoch", by_epoch);
        graphs.push_back(g);
    }
    return graphs;
}

GraphAudit& graph_audit()
{
    static GraphAudit* audit = new GraphAudit();  // never destroyed: hooks may run during exit
    return *audit;
}

std::optional<std::string> audit_failure(const GraphAudit::Window& w, const EpochPlan& plan, bool cuda_graph)
{
    const int64_t expected_launches = plan.timed_epochs * plan.graph_launches_per_epoch();
    const int64_t expected_steps = plan.timed_epochs * plan.graph_steps_per_epoch();
    if (!cuda_graph)
    {
        if (w.launches > 0)
            return "CUDA graphs were off, yet " + std::to_string(w.launches) + " graph launches ran in the timed epochs";
        return std::nullopt;
    }
    if (w.launches == 0)
        return "CUDA graphs were requested but OpenNN launched no graph in the timed epochs (capture failed or "
               "the graph path was not taken: see OpenNN's 'CUDA graph capture failed' line on stderr)";
    if (w.short_launches > 0)
        return "OpenNN's CUDA graph path launched a graph smaller than a full " + std::to_string(plan.steps_per_graph()) +
               "-step group " + std::to_string(w.short_launches) + " of " + std::to_string(w.launches) +
               " times in the timed epochs (about " + std::to_string(w.graph_steps_estimate) + " of " +
               std::to_string(expected_steps) + " graph steps ran): images/s would count steps that did not "
               "run, so no figure is reported (trials/opennn/README.md, 'opennn-graph')";
    if (w.launches != expected_launches)
        return "OpenNN launched " + std::to_string(w.launches) + " CUDA graphs in the timed epochs, expected " +
               std::to_string(expected_launches) + " (" + std::to_string(plan.timed_epochs) + " epochs x " +
               std::to_string(plan.graph_launches_per_epoch()) + ")";
    return std::nullopt;
}

Json audit_json(const GraphAudit::Window& w, const EpochPlan& plan, bool cuda_graph)
{
    Json j = Json::object();
    j.set("source", "the trial's wrappers of cudaGraphInstantiate/cudaGraphExecUpdate/cudaGraphLaunch "
                    "(src/kit_cuda_graph_hooks.cpp): node count per graph, launches per epoch");
    j.set("timed_graph_launches", w.launches);
    j.set("expected_graph_launches", cuda_graph ? plan.timed_epochs * plan.graph_launches_per_epoch() : 0);
    j.set("full_graph_nodes", w.full_graph_nodes);
    j.set("short_graph_launches", w.short_launches);
    j.set("timed_graph_steps_estimate", w.graph_steps_estimate);
    j.set("expected_graph_steps", cuda_graph ? plan.timed_epochs * plan.graph_steps_per_epoch() : 0);
    const std::optional<std::string> failure = audit_failure(w, plan, cuda_graph);
    j.set("check", failure ? Json(*failure) : Json("ok"));
    return j;
}

}  // namespace kit

namespace kit
{

OpenNNFigures opennn_figures(const GraphAudit::Window& w, const EpochPlan& plan, bool cuda_graph, double window_seconds,
                             double train_seconds, int64_t train_epochs)
{
    OpenNNFigures f;
    const int64_t timed_steps = plan.timed_steps();
    if (!cuda_graph || w.launches == 0)
        f.executed_steps = timed_steps;
    else
        f.executed_steps = w.graph_steps_estimate + plan.timed_epochs * plan.eager_tail_steps_per_epoch();
    if (window_seconds > 0)
    {
        f.naive_ips = double(timed_steps * plan.batch) / window_seconds;
        f.executed_ips = double(f.executed_steps * plan.batch) / window_seconds;
    }
    // opennn_resnet50_speed.cpp: epoch_s = total_s / timed_epochs; long(double(samples) / epoch_s).
    if (train_seconds > 0 && train_epochs > 0)
        f.runner_style_ips = int64_t(double(plan.dataset_images) / (train_seconds / double(train_epochs)));
    return f;
}

Json opennn_figures_json(const OpenNNFigures& f)
{
    Json j = Json::object();
    j.set("naive_ips", f.naive_ips > 0 ? Json(f.naive_ips) : Json());
    j.set("executed_steps", f.executed_steps);
    j.set("executed_ips", f.executed_ips > 0 ? Json(f.executed_ips) : Json());
    j.set("runner_style_ips", f.runner_style_ips > 0 ? Json(f.runner_style_ips) : Json());
    return j;
}

Json opennn_figures_null()
{
    Json j = Json::object();
    for (const char* key : {"naive_ips", "executed_steps", "executed_ips", "runner_style_ips"}) j.set(key, nullptr);
    return j;
}

Json opennn_figures_inputs(const GraphAudit::Window& w, const EpochPlan& plan, bool cuda_graph, double window_seconds,
                           double train_seconds, int64_t train_epochs)
{
    Json j = Json::object();
    j.set("naive_ips", "timed_steps x batch / window_seconds (the figure the audit refuses when graphs ran short)");
    j.set("executed_steps",
          cuda_graph ? (w.launches == 0
                            ? "timed_steps: no graph launched in the timed epochs, so OpenNN ran every step eagerly"
                            : "cuda_graph_audit.timed_graph_steps_estimate + timed_epochs x eager_tail_steps_per_epoch")
                     : "timed_steps (CUDA graphs off: every step eager)");
    j.set("executed_ips", "executed_steps x batch / window_seconds");
    j.set("runner_style_ips",
          "floor(dataset_images x train_epochs / train_seconds): opennn_resnet50_speed.cpp's "
          "long(samples / (total_s / epochs)) over this trial's whole train() call (setup, dataset upload, warm-up "
          "step, graph capture and every epoch; all dataset images per epoch, the dropped batch remainder "
          "included). The runner times a second train() call after an untimed 2-epoch one; this call is the "
          "process's first, so it also holds one-time costs (CUDA module loading, library handles, conv plans)");
    j.set("timed_steps", plan.timed_steps());
    j.set("timed_graph_steps_estimate", w.graph_steps_estimate);
    j.set("eager_tail_steps", plan.timed_epochs * plan.eager_tail_steps_per_epoch());
    j.set("window_seconds", window_seconds);
    j.set("dataset_images", plan.dataset_images);
    j.set("train_epochs", train_epochs);
    j.set("train_seconds", train_seconds);
    return j;
}

}  // namespace kit
