// kit_window: the throughput window of trial protocol v1 (its "window" and "warmup" result keys)
// for a trial that trains in epochs and can only stop at an epoch's end.
//
// The OpenNN trial cannot time a step: train() runs whole epochs and displays, per epoch, an
// "Epoch: k" line before it and a "Training error: x" line after it (the loss read back from the
// device, so the epoch's work is done). Its chunks are therefore whole epochs (the throughput
// path: one epoch = 390 steps at batch 128) or groups of one-step epochs (the one-batch modes).
// The WindowController is fed those two lines' times and decides, at each epoch's end:
//   warm-up  fixed: the planned epochs; adaptive (the rule): the engine's minimum epochs, then
//            chunks until the last two chunk rates differ by <= tolerance (relative to their
//            mean) or --max-warmup-seconds have passed since the minimum ended (not converged)
//   window   fixed: the planned epochs; the rule: the fewest whole chunks holding at least
//            --window-images images and lasting at least --window-seconds (measured, not
//            predicted: the window closes at the first chunk end where both hold)
// and says when training must stop. Nothing here needs OpenNN or a clock of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kit_args.h"
#include "kit_json.h"
#include "kit_protocol.h"

namespace kit
{

// What the flags ask of a throughput run's warm-up and window (kit_args.h: window_by_rule,
// warmup_by_rule). Steps are the protocol's; how they map onto epochs is the trial's plan.
struct WindowRequest
{
    bool window_by_rule = false;
    int64_t steps = kThroughputSteps;    // fixed window: measured steps
    int64_t min_images = 0;              // the rule: at least (0: no minimum)
    double min_seconds = 0;              // the rule: at least (0: no minimum)
    bool warmup_by_rule = false;
    int64_t warmup_steps = kThroughputWarmupSteps;  // fixed warm-up steps
    double tolerance = kSteadyTolerance;
    double max_warmup_seconds = kMaxWarmupSeconds;

    // "fixed: S steps" | "at least N images and S s"
    std::string window_rule() const;
    // "fixed: W steps" | "until two successive chunks within F (at most S s)"
    std::string warmup_rule() const;
};

WindowRequest window_request(const Args& args);

// The "window" and "warmup" objects with every key, null where nothing is measured yet
// (base_result puts them on every throughput result).
Json window_skeleton(const WindowRequest& request);
Json warmup_skeleton(const WindowRequest& request);

// How a trial's epochs group into chunks and what the plan fixes beforehand.
struct EpochGeometry
{
    int64_t steps_per_epoch = 1;
    int64_t batch = 1;
    int64_t chunk_epochs = 1;          // epochs per chunk (window and adaptive warm-up)
    int64_t min_warmup_epochs = 1;     // the engine's own minimum before adaptive chunks
    int64_t fixed_warmup_epochs = 0;   // the warm-up when it is fixed
    int64_t fixed_timed_epochs = 1;    // the window when it is fixed (whole chunks)
    int64_t images_per_epoch() const { return steps_per_epoch * batch; }
};

// Epochs a rule-decided run may take at most: what the trial gives OpenNN as maximum_epochs
// up front (train() sizes its loss history by it, so the trial may only lower it later).
inline constexpr int64_t kEpochCap = 1000000;

// One-step epochs (the OpenNN trial's one-batch modes: the dataset is one batch): a chunk is
// kOneStepChunkSteps epochs under the rule; with --steps S, the largest divisor of S not over it.
inline constexpr int64_t kOneStepChunkSteps = 50;
EpochGeometry one_step_geometry(const WindowRequest& request, int64_t batch);

// The fewest whole chunks' epochs holding at least `images` (at least one chunk).
int64_t epochs_for_images(const EpochGeometry& geometry, int64_t images);

// For fixed step counts on one-step epochs: the chunk is the largest divisor of `steps` not
// over `limit`, so the window is whole chunks.
int64_t divisor_chunk(int64_t steps, int64_t limit);

struct Halves
{
    std::optional<double> first_ips, second_ips, change;
    std::optional<bool> steady;
};

// First half = chunks [0, n/2), second half = chunks [n/2, n) (the middle one goes to the second
// half when n is odd); each half's rate is its images over its seconds. With fewer than 2
// chunks everything is null; steady = |change| <= tolerance.
Halves halves(const std::vector<double>& chunk_seconds, int64_t images_per_chunk, double tolerance);

class WindowController
{
public:
    WindowController(WindowRequest request, EpochGeometry geometry);

    // maximum_epochs for train() up front: exact when both parts are fixed, else kEpochCap.
    int64_t initial_maximum_epochs() const;

    // Feed the epoch lines. epoch_finished returns true when training must stop after `epoch`
    // (the window closed); it is idempotent per epoch.
    void epoch_started(int64_t epoch, Clock::time_point when);
    bool epoch_finished(int64_t epoch, Clock::time_point when);

    std::optional<int64_t> warmup_epochs() const { return warmup_epochs_; }   // once the warm-up ended
    std::optional<int64_t> last_epoch() const { return last_epoch_; }         // once the window closed
    int64_t timed_epochs() const;  // 0 until the window closed
    bool done() const { return last_epoch_.has_value(); }

    const WindowRequest& request() const { return request_; }
    const EpochGeometry& geometry() const { return geometry_; }

    // The window's chunk seconds: contiguous, from the first timed epoch's start through each
    // chunk's next start to the last epoch's end, so they sum to the window exactly.
    std::vector<double> chunk_seconds() const;
    double window_seconds() const;

    // The result's "window" (start/end as Unix time: steady clock + unix_offset) and "warmup"
    // (its seconds run from train_start to the window's start). Only once done().
    Json window_json(double unix_offset) const;
    Json warmup_json(Clock::time_point train_start) const;

    const std::vector<double>& warmup_chunk_rates() const { return rates_; }
    std::optional<bool> converged() const { return converged_; }

private:
    void end_warmup(int64_t after_epoch, std::optional<bool> converged);
    double seconds_between(int64_t from_epoch_start, Clock::time_point to) const;

    WindowRequest request_;
    EpochGeometry geometry_;
    std::map<int64_t, Clock::time_point> started_;
    std::map<int64_t, Clock::time_point> finished_;
    std::optional<int64_t> warmup_epochs_;
    std::optional<int64_t> last_epoch_;
    std::optional<bool> converged_;
    std::vector<double> rates_;                    // adaptive warm-up chunk rates, images/s
    std::optional<Clock::time_point> adaptive_from_;  // end of the minimum warm-up
};

// Seconds to add to a steady_clock time to read it as Unix time (time.time()).
double unix_offset_now();

// OpenNN's display lines -> timeline + controller. Each "Epoch: k" line starts epoch k
// (on_epoch(k) is called after the controller heard of it, so the callee can ask whether k is
// the first timed epoch); the first "Training error" line after it ends epoch k, and when the
// controller closes the window there, stop_after(k) is called: the trial lowers OpenNN's
// maximum_epochs to k + 1, which train() reads at the end of each epoch (optimizer.cpp,
// check_stopping_condition), so training ends after epoch k. The lines come from the training
// thread's std::cout, so everything here runs on that thread, between epochs.
class EpochLineFeed
{
public:
    using EpochCallback = std::function<void(int64_t epoch)>;
    EpochLineFeed(EpochTimeline& timeline, WindowController& controller, EpochCallback on_epoch,
                  EpochCallback stop_after);
    void on_line(std::string_view line, Clock::time_point when);

private:
    EpochTimeline& timeline_;
    WindowController& controller_;
    EpochCallback on_epoch_;
    EpochCallback stop_after_;
};

// After training: step_window's checks, then record_steps (images = timed steps x batch over the
// window) and the result's "window" and "warmup". Throws TrialError when the window did not
// close or a display line is missing.
void record_window(Json& result, const Args& args, const WindowController& controller, const EpochTimeline& timeline,
                   Clock::time_point train_start, double unix_offset, std::optional<double> loss_warmup,
                   std::optional<double> loss_final);

// A TrialError for a training that stopped before the window closed.
std::string window_not_closed(const WindowController& controller, int64_t epochs_trained);

}  // namespace kit
