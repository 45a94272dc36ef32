#include "kit_window.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kit_error.h"

namespace kit
{

namespace
{

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

// ------------------------------------------------------------------------------ request

std::string WindowRequest::window_rule() const
{
    if (!window_by_rule) return "fixed: " + std::to_string(steps) + " steps";
    return "at least " + std::to_string(min_images) + " images and " + json_number(min_seconds) + " s";
}

std::string WindowRequest::warmup_rule() const
{
    if (!warmup_by_rule) return "fixed: " + std::to_string(warmup_steps) + " steps";
    return "until two successive chunks within " + json_number(tolerance) + " (at most " +
           json_number(max_warmup_seconds) + " s)";
}

WindowRequest window_request(const Args& args)
{
    WindowRequest r;
    const auto [warmup, steps] = step_counts(args);
    r.window_by_rule = window_by_rule(args);
    r.warmup_by_rule = warmup_by_rule(args);
    r.steps = steps;
    r.warmup_steps = warmup;
    r.min_images = args.window_images.value_or(0);
    r.min_seconds = args.window_seconds.value_or(0);
    r.tolerance = args.steady_tolerance;
    r.max_warmup_seconds = args.max_warmup_seconds.value_or(kMaxWarmupSeconds);
    return r;
}

Json window_skeleton(const WindowRequest& request)
{
    Json w = Json::object();
    w.set("rule", request.window_rule());
    for (const char* key : {"steps", "images", "seconds", "chunk_steps", "chunk_seconds", "chunk_device_seconds",
                            "start_unix", "end_unix", "first_half_ips", "second_half_ips", "halves_change"})
        w.set(key, nullptr);
    w.set("tolerance", request.tolerance);
    w.set("steady", nullptr);
    return w;
}

Json warmup_skeleton(const WindowRequest& request)
{
    Json w = Json::object();
    w.set("rule", request.warmup_rule());
    for (const char* key : {"steps", "seconds", "converged", "chunk_rates"}) w.set(key, nullptr);
    return w;
}

// ------------------------------------------------------------------------------ helpers

int64_t epochs_for_images(const EpochGeometry& g, int64_t images)
{
    const int64_t per_chunk = g.images_per_epoch() * g.chunk_epochs;
    const int64_t chunks = std::max<int64_t>(1, ceil_div(std::max<int64_t>(images, 0), per_chunk));
    return chunks * g.chunk_epochs;
}

int64_t divisor_chunk(int64_t steps, int64_t limit)
{
    for (int64_t k = std::min(steps, limit); k > 1; --k)
        if (steps % k == 0) return k;
    return 1;
}

EpochGeometry one_step_geometry(const WindowRequest& request, int64_t batch)
{
    EpochGeometry g;
    g.steps_per_epoch = 1;
    g.batch = batch;
    g.chunk_epochs = request.window_by_rule ? kOneStepChunkSteps : divisor_chunk(request.steps, kOneStepChunkSteps);
    g.min_warmup_epochs = 1;
    g.fixed_warmup_epochs = request.warmup_by_rule ? 1 : std::max<int64_t>(request.warmup_steps, 0);
    g.fixed_timed_epochs = request.window_by_rule ? epochs_for_images(g, request.min_images) : request.steps;
    return g;
}

Halves halves(const std::vector<double>& chunk_seconds, int64_t images_per_chunk, double tolerance)
{
    Halves h;
    const size_t n = chunk_seconds.size();
    if (n < 2) return h;
    double first = 0, second = 0;
    for (size_t i = 0; i < n; ++i) (i < n / 2 ? first : second) += chunk_seconds[i];
    if (first <= 0 || second <= 0) return h;
    h.first_ips = double(images_per_chunk) * double(n / 2) / first;
    h.second_ips = double(images_per_chunk) * double(n - n / 2) / second;
    h.change = (*h.second_ips - *h.first_ips) / *h.first_ips;
    h.steady = std::fabs(*h.change) <= tolerance;
    return h;
}

double unix_offset_now()
{
    const double unix_now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const double steady_now = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
    return unix_now - steady_now;
}

// ------------------------------------------------------------------------------ controller

WindowController::WindowController(WindowRequest request, EpochGeometry geometry)
    : request_(std::move(request)), geometry_(geometry)
{
    // The adaptive warm-up measures its bound from the end of the engine's minimum: at least one epoch.
    if (geometry_.steps_per_epoch < 1 || geometry_.batch < 1 || geometry_.chunk_epochs < 1 ||
        geometry_.min_warmup_epochs < 1 || geometry_.fixed_warmup_epochs < 0 || geometry_.fixed_timed_epochs < 1)
        throw TrialError("internal: invalid epoch geometry for the throughput window");
    if (!request_.warmup_by_rule && geometry_.fixed_warmup_epochs == 0) warmup_epochs_ = 0;
}

int64_t WindowController::initial_maximum_epochs() const
{
    if (!request_.window_by_rule && !request_.warmup_by_rule)
        return geometry_.fixed_warmup_epochs + geometry_.fixed_timed_epochs;
    return kEpochCap;
}

void WindowController::epoch_started(int64_t epoch, Clock::time_point when) { started_.emplace(epoch, when); }

void WindowController::end_warmup(int64_t after_epoch, std::optional<bool> converged)
{
    warmup_epochs_ = after_epoch + 1;
    converged_ = converged;
}

double WindowController::seconds_between(int64_t from_epoch_start, Clock::time_point to) const
{
    const auto it = started_.find(from_epoch_start);
    if (it == started_.end())
        throw TrialError("cannot time the chunks: epoch " + std::to_string(from_epoch_start) + " was never announced");
    return seconds(to - it->second);
}

bool WindowController::epoch_finished(int64_t epoch, Clock::time_point when)
{
    if (finished_.count(epoch)) return last_epoch_ && *last_epoch_ == epoch;
    finished_.emplace(epoch, when);
    if (last_epoch_) return false;  // training went on past the window's end: not ours to stop

    if (!warmup_epochs_)
    {
        const int64_t done = epoch + 1;
        if (!request_.warmup_by_rule)
        {
            if (done >= geometry_.fixed_warmup_epochs) end_warmup(epoch, std::nullopt);
            return false;
        }
        if (done < geometry_.min_warmup_epochs) return false;
        if (done == geometry_.min_warmup_epochs)
        {
            adaptive_from_ = when;
            if (request_.max_warmup_seconds <= 0) end_warmup(epoch, false);
            return false;
        }
        const int64_t adaptive = done - geometry_.min_warmup_epochs;
        if (adaptive % geometry_.chunk_epochs != 0) return false;
        const int64_t chunk_first = epoch + 1 - geometry_.chunk_epochs;
        const double s = seconds_between(chunk_first, when);
        rates_.push_back(s > 0 ? double(geometry_.images_per_epoch() * geometry_.chunk_epochs) / s : 0.0);
        if (rates_.size() >= 2)
        {
            const double a = rates_[rates_.size() - 2], b = rates_.back();
            const double mean = (a + b) / 2;
            if (mean > 0 && std::fabs(b - a) / mean <= request_.tolerance)
            {
                end_warmup(epoch, true);
                return false;
            }
        }
        if (adaptive_from_ && seconds(when - *adaptive_from_) >= request_.max_warmup_seconds) end_warmup(epoch, false);
        return false;
    }

    const int64_t first_timed = *warmup_epochs_;
    if (epoch < first_timed) return false;
    const int64_t timed = epoch + 1 - first_timed;
    bool close = false;
    if (!request_.window_by_rule)
        close = timed >= geometry_.fixed_timed_epochs;
    else if (timed % geometry_.chunk_epochs == 0)
        close = timed * geometry_.images_per_epoch() >= request_.min_images &&
                seconds_between(first_timed, when) >= request_.min_seconds;
    if (close) last_epoch_ = epoch;
    return close;
}

int64_t WindowController::timed_epochs() const
{
    if (!last_epoch_ || !warmup_epochs_) return 0;
    return *last_epoch_ + 1 - *warmup_epochs_;
}

std::vector<double> WindowController::chunk_seconds() const
{
    std::vector<double> out;
    if (!done()) return out;
    const int64_t first = *warmup_epochs_, last = *last_epoch_;
    const int64_t chunk = request_.window_by_rule ? geometry_.chunk_epochs
                                                  : (timed_epochs() % geometry_.chunk_epochs == 0 ? geometry_.chunk_epochs : 1);
    // Chunk boundaries: each chunk's first "Epoch:" line, then the last epoch's end.
    std::vector<Clock::time_point> bounds;
    for (int64_t e = first; e <= last; e += chunk)
    {
        const auto it = started_.find(e);
        if (it == started_.end())
            throw TrialError("cannot time the chunks: epoch " + std::to_string(e) + " was never announced");
        bounds.push_back(it->second);
    }
    bounds.push_back(finished_.at(last));  // epoch_finished(last) closed the window
    for (size_t i = 0; i + 1 < bounds.size(); ++i) out.push_back(seconds(bounds[i + 1] - bounds[i]));
    return out;
}

double WindowController::window_seconds() const
{
    if (!done()) return 0;
    return seconds_between(*warmup_epochs_, finished_.at(*last_epoch_));
}

Json WindowController::window_json(double unix_offset) const
{
    Json w = window_skeleton(request_);
    if (!done()) return w;
    const std::vector<double> chunks = chunk_seconds();
    const int64_t timed = timed_epochs();
    const int64_t chunk_epochs = timed / int64_t(chunks.size());
    const int64_t steps = timed * geometry_.steps_per_epoch;
    w.set("steps", steps);
    w.set("images", steps * geometry_.batch);
    w.set("seconds", window_seconds());
    w.set("chunk_steps", chunk_epochs * geometry_.steps_per_epoch);
    Json list = Json::array();
    for (double s : chunks) list.push_back(s);
    w.set("chunk_seconds", list);
    w.set("chunk_device_seconds", nullptr);  // no device-side timing inside OpenNN's train()
    const double start = std::chrono::duration<double>(started_.at(*warmup_epochs_).time_since_epoch()).count();
    const double end = std::chrono::duration<double>(finished_.at(*last_epoch_).time_since_epoch()).count();
    w.set("start_unix", start + unix_offset);
    w.set("end_unix", end + unix_offset);
    const Halves h = halves(chunks, chunk_epochs * geometry_.images_per_epoch(), request_.tolerance);
    w.set("first_half_ips", h.first_ips ? Json(*h.first_ips) : Json());
    w.set("second_half_ips", h.second_ips ? Json(*h.second_ips) : Json());
    w.set("halves_change", h.change ? Json(*h.change) : Json());
    w.set("steady", h.steady ? Json(*h.steady) : Json());
    return w;
}

Json WindowController::warmup_json(Clock::time_point train_start) const
{
    Json w = warmup_skeleton(request_);
    if (!warmup_epochs_) return w;
    w.set("steps", *warmup_epochs_ * geometry_.steps_per_epoch);
    const auto begin = started_.find(*warmup_epochs_);
    w.set("seconds", begin != started_.end() ? Json(seconds(begin->second - train_start)) : Json());
    w.set("converged", converged_ ? Json(*converged_) : Json());
    Json rates = Json::array();
    for (double r : rates_) rates.push_back(r);
    w.set("chunk_rates", rates);
    return w;
}

// ------------------------------------------------------------------------------ feed

EpochLineFeed::EpochLineFeed(EpochTimeline& timeline, WindowController& controller, EpochCallback on_epoch,
                             EpochCallback stop_after)
    : timeline_(timeline), controller_(controller), on_epoch_(std::move(on_epoch)), stop_after_(std::move(stop_after))
{
}

void EpochLineFeed::on_line(std::string_view line, Clock::time_point when)
{
    const std::optional<int64_t> before = timeline_.current_epoch();
    const bool was_finished = before && timeline_.finished(*before).has_value();
    timeline_.on_line(line, when);
    const std::optional<int64_t> now = timeline_.current_epoch();
    if (!now) return;
    if (now != before)
    {
        controller_.epoch_started(*now, when);
        if (on_epoch_) on_epoch_(*now);
        return;
    }
    if (!was_finished && timeline_.finished(*now))
        if (controller_.epoch_finished(*now, *timeline_.finished(*now)) && stop_after_) stop_after_(*now);
}

std::string window_not_closed(const WindowController& c, int64_t epochs_trained)
{
    return "OpenNN stopped after " + std::to_string(epochs_trained) + " epochs, before the throughput window closed (" +
           (c.warmup_epochs() ? "window: " + c.request().window_rule() : "warm-up: " + c.request().warmup_rule()) + ")";
}

void record_window(Json& result, const Args& args, const WindowController& c, const EpochTimeline& timeline,
                   Clock::time_point train_start, double unix_offset, std::optional<double> loss_warmup,
                   std::optional<double> loss_final)
{
    if (!c.done()) throw TrialError(window_not_closed(c, timeline.epochs_started()));
    const StepWindow w = step_window(timeline, train_start, *c.warmup_epochs(), c.timed_epochs());
    if (args.benchmark == "throughput")
    {
        result.set("window", c.window_json(unix_offset));
        result.set("warmup", c.warmup_json(train_start));
    }
    record_steps(result, args, w.warmup_seconds, w.window_seconds, c.timed_epochs() * c.geometry().steps_per_epoch,
                 loss_warmup, loss_final);
}

}  // namespace kit
