#include "kit_resident.h"

#include <algorithm>
#include <cmath>

#include "kit_error.h"

namespace kit
{

namespace
{

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Json EpochPlan::json() const
{
    Json j = Json::object();
    j.set("dataset_images", dataset_images);
    j.set("batch", batch);
    j.set("steps_per_epoch", steps_per_epoch);
    j.set("images_dropped_per_epoch", dropped_per_epoch);
    j.set("warmup_steps_requested", warmup_steps_requested);
    j.set("steps_requested", steps_requested);
    j.set("warmup_epochs", warmup_epochs);
    j.set("timed_epochs", timed_epochs);
    j.set("timed_steps", timed_steps());
    j.set("timed_images", timed_images());
    j.set("steps_per_graph", steps_per_graph());
    j.set("graph_launches_per_epoch", graph_launches_per_epoch());
    j.set("eager_tail_steps_per_epoch", steps_per_epoch - graph_steps_per_epoch());
    j.set("mapping", "OpenNN trains whole epochs (train() has no per-step hook): warm-up = OpenNN's built-in "
                     "CUDA warm-up step + max(1, ceil(W / steps_per_epoch)) epochs (epoch 0 captures the "
                     "graphs); timed = max(1, ceil(S / steps_per_epoch)) epochs; images = timed_steps x batch");
    return j;
}

EpochPlan plan_epochs(int64_t dataset_images, int64_t batch, int64_t warmup_steps, int64_t steps)
{
    if (batch < 1 || batch > dataset_images)
        throw TrialError("batch " + std::to_string(batch) + " does not fit the " + std::to_string(dataset_images) +
                         "-image dataset of the GPU-resident path (one batch at most per dataset)");
    EpochPlan p;
    p.dataset_images = dataset_images;
    p.batch = batch;
    p.steps_per_epoch = dataset_images / batch;
    p.dropped_per_epoch = dataset_images % batch;
    p.warmup_steps_requested = warmup_steps;
    p.steps_requested = steps;
    p.warmup_epochs = std::max<int64_t>(1, ceil_div(std::max<int64_t>(warmup_steps, 0), p.steps_per_epoch));
    p.timed_epochs = std::max<int64_t>(1, ceil_div(std::max<int64_t>(steps, 0), p.steps_per_epoch));
    return p;
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
