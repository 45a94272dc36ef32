#include "kit_protocol.h"

#include "kit_window.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <fcntl.h>
#include <iostream>
#include <mutex>
#include <new>
#include <sys/resource.h>
#include <thread>
#include <typeinfo>
#include <unistd.h>

namespace kit
{

// ------------------------------------------------------------------------------ result

namespace
{

// Every protocol key, in the protocol's order, so the host's parser accepts any result line.
Json skeleton(Json engine, Json mode, Json precision, Json batch, const std::string& error)
{
    Json r = Json::object();
    r.set("protocol", kProtocol);
    r.set("engine", std::move(engine));
    r.set("mode", std::move(mode));
    r.set("precision", std::move(precision));
    r.set("batch", std::move(batch));
    r.set("status", "error");
    r.set("loss_warmup", nullptr);
    r.set("loss_final", nullptr);
    r.set("parameters", nullptr);
    r.set("step_seconds", nullptr);
    r.set("framework_peak_mib", nullptr);
    Json versions = Json::object();
    versions.set("compiler", compiler_version());
    versions.set("trial_protocol", kProtocol);
    r.set("versions", versions);
    r.set("error", error);
    return r;
}

}  // namespace

Json base_result(const Args& args, const std::string& engine)
{
    const auto [warmup, steps] = step_counts(args);
    Json r = skeleton(engine, args.mode, args.precision, args.batch, "trial finished without a result");
    r.set("benchmark", args.benchmark);
    Json settings = Json::object();
    settings.set("model", args.model);
    settings.set("dataset", args.dataset);
    settings.set("data_dir", args.data_dir ? Json(*args.data_dir) : Json());
    settings.set("device", args.device);
    settings.set("seed", args.seed);
    // A count the window rule decides is null here: the result's window/warmup say what ran.
    settings.set("warmup_steps", warmup_by_rule(args) ? Json() : Json(warmup));
    settings.set("steps", window_by_rule(args) ? Json() : Json(steps));
    settings.set("memory_budget_mib", args.memory_budget_mib ? Json(*args.memory_budget_mib) : Json());
    settings.set("cudnn_benchmark", args.cudnn_benchmark);
    settings.set("image_size", args.image_size);
    settings.set("window_images", args.window_images ? Json(*args.window_images) : Json());
    settings.set("window_seconds", args.window_seconds ? Json(*args.window_seconds) : Json());
    settings.set("steady_tolerance", args.steady_tolerance);
    settings.set("max_warmup_seconds", args.max_warmup_seconds ? Json(*args.max_warmup_seconds) : Json());
    r.set("settings", settings);
    if (args.benchmark == "throughput")
    {
        r.set("images", nullptr);
        r.set("window_seconds", nullptr);
        r.set("warmup_seconds", nullptr);
        r.set("images_per_second", nullptr);
        const WindowRequest request = window_request(args);
        r.set("window", window_skeleton(request));
        r.set("warmup", warmup_skeleton(request));
    }
    return r;
}

Json bad_arguments_result(const std::string& message)
{
    return skeleton(nullptr, nullptr, nullptr, nullptr, "invalid arguments: " + message);
}

namespace
{

std::string loss_text(double v)
{
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return json_number(v);
}

}  // namespace

void set_losses(Json& result, std::optional<double> loss_warmup, std::optional<double> loss_final)
{
    result.set("loss_warmup", loss_warmup ? Json(*loss_warmup) : Json());
    result.set("loss_final", loss_final ? Json(*loss_final) : Json());
    std::string bad;
    for (const auto& [name, value] : {std::pair{"loss_warmup", loss_warmup}, std::pair{"loss_final", loss_final}})
        if (value && !std::isfinite(*value))
            bad += (bad.empty() ? "" : ", ") + std::string(name) + "=" + loss_text(*value);
    if (!bad.empty())
    {
        result.set("status", "nonfinite");
        result.set("error", "non-finite loss: " + bad);
    }
    else
    {
        result.set("status", "ok");
        result.set("error", nullptr);
    }
}

void record_steps(Json& result, const Args& args, double warmup_seconds, double window_seconds,
                  int64_t steps, std::optional<double> loss_warmup, std::optional<double> loss_final)
{
    result.set("warmup_seconds", warmup_seconds);
    result.set("step_seconds", window_seconds / double(steps));
    if (args.benchmark == "throughput")
    {
        const int64_t images = args.batch * steps;
        result.set("images", images);
        result.set("window_seconds", window_seconds);
        result.set("images_per_second", window_seconds > 0 ? Json(double(images) / window_seconds) : Json());
    }
    set_losses(result, loss_warmup, loss_final);
}

std::string result_line(const Json& result) { return std::string(kResultPrefix) + result.dump(); }

std::string compiler_version()
{
#if defined(__clang__)
    return "Clang " __clang_version__;
#elif defined(__GNUC__)
    return "GCC " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
           std::to_string(__GNUC_PATCHLEVEL__);
#else
    return "unknown";
#endif
}

double peak_rss_mib()
{
    struct rusage usage;
    if (getrusage(RUSAGE_SELF, &usage) != 0) return -1;
    return std::round(double(usage.ru_maxrss) / 1024.0 * 10.0) / 10.0;  // ru_maxrss: KiB on Linux
}

// ------------------------------------------------------------------- failure classification

const std::vector<std::string>& oom_markers()
{
    static const std::vector<std::string> markers = {
        // kittrial.OOM_MARKERS
        "out of memory",
        "CUDNN_STATUS_ALLOC_FAILED",
        "CUBLAS_STATUS_ALLOC_FAILED",
        "DefaultCPUAllocator: can't allocate memory",
        // cuDNN 9: CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED (4003, which the deprecated
        // CUDNN_STATUS_ALLOC_FAILED now aliases) and ..._DEVICE_ALLOCATION_FAILED (4004), as
        // cudnnGetErrorString names them inside cudnn-frontend's messages.
        "_ALLOCATION_FAILED",
        "cudaErrorMemoryAllocation",
        "CUDA_ERROR_OUT_OF_MEMORY",
        "std::bad_alloc",
        // OpenNN's check_cuda_status(): "<CUDA|cuDNN|CuBLAS> Error: <int status> in <file>:<line>"
        "CUDA Error: 2 in ",
        "cuDNN Error: 4003 in ",
        "cuDNN Error: 4004 in ",
        "CuBLAS Error: 3 in ",
    };
    return markers;
}

bool is_oom_message(std::string_view message)
{
    for (const std::string& m : oom_markers())
        if (message.find(m) != std::string_view::npos) return true;
    return false;
}

namespace
{

std::string demangle(const char* name)
{
    int status = 0;
    char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string text = (status == 0 && out) ? out : name;
    std::free(out);
    // std::throw_with_nested's wrapper type: name the exception it wraps.
    const std::string wrapper = "std::_Nested_exception<";
    if (text.rfind(wrapper, 0) == 0 && text.back() == '>')
        text = text.substr(wrapper.size(), text.size() - wrapper.size() - 1);
    return text;
}

struct Described
{
    std::string type;
    std::string message;
    bool trial_error = false;
    bool bad_alloc = false;
};

// The exception and its nested causes, outermost first.
std::vector<Described> unwind(const std::exception_ptr& error)
{
    std::vector<Described> chain;
    std::exception_ptr current = error;
    for (int depth = 0; current && depth < 16; ++depth)
    {
        std::exception_ptr next;
        try
        {
            std::rethrow_exception(current);
        }
        catch (const TrialError& e)
        {
            chain.push_back({"kit::TrialError", e.what(), true, false});
            if (auto* nested = dynamic_cast<const std::nested_exception*>(&e)) next = nested->nested_ptr();
        }
        catch (const std::bad_alloc& e)
        {
            chain.push_back({demangle(typeid(e).name()), e.what(), false, true});
            if (auto* nested = dynamic_cast<const std::nested_exception*>(&e)) next = nested->nested_ptr();
        }
        catch (const std::exception& e)
        {
            chain.push_back({demangle(typeid(e).name()), e.what(), false, false});
            if (auto* nested = dynamic_cast<const std::nested_exception*>(&e)) next = nested->nested_ptr();
        }
        catch (...)
        {
            chain.push_back({"unknown exception", "", false, false});
        }
        current = next;
    }
    return chain;
}

std::string collapse(const std::string& text)
{
    std::string out;
    bool space = false;
    for (char c : text)
    {
        if (std::isspace(static_cast<unsigned char>(c)))
        {
            space = !out.empty();
            continue;
        }
        if (space) out += ' ';
        space = false;
        out += c;
    }
    if (out.size() > kMaxErrorChars) out.resize(kMaxErrorChars);
    return out;
}

}  // namespace

bool is_oom(const std::exception_ptr& error)
{
    for (const Described& d : unwind(error))
        if (d.bad_alloc || is_oom_message(d.message)) return true;
    return false;
}

std::string classify(const std::exception_ptr& error) { return is_oom(error) ? "oom" : "error"; }

namespace
{

constexpr size_t kMaxCauses = 8;
std::mutex g_cause_mutex;
std::vector<std::string> g_cause_needles;
std::vector<std::string> g_causes;

void note_line(std::string_view line)
{
    std::lock_guard<std::mutex> lock(g_cause_mutex);
    if (g_causes.size() >= kMaxCauses) return;
    for (const std::string& needle : g_cause_needles)
        if (line.find(needle) != std::string_view::npos)
        {
            g_causes.emplace_back(line);
            return;
        }
}

bool is_trial_error(const std::exception_ptr& error)
{
    const std::vector<Described> chain = unwind(error);
    return !chain.empty() && chain.front().trial_error;
}

}  // namespace

void watch_for_cause(std::string needle)
{
    std::lock_guard<std::mutex> lock(g_cause_mutex);
    g_cause_needles.push_back(std::move(needle));
}

const std::vector<std::string>& causes_seen() { return g_causes; }

void clear_causes()
{
    std::lock_guard<std::mutex> lock(g_cause_mutex);
    g_causes.clear();
}

std::string failure_status(const std::exception_ptr& error)
{
    if (is_oom(error)) return "oom";
    if (is_trial_error(error)) return "error";
    std::lock_guard<std::mutex> lock(g_cause_mutex);
    for (const std::string& cause : g_causes)
        if (is_oom_message(cause)) return "oom";
    return "error";
}

std::string failure_message(const std::exception_ptr& error)
{
    std::string text = one_line(error);
    std::lock_guard<std::mutex> lock(g_cause_mutex);
    for (size_t i = 0; i < g_causes.size(); ++i)
        text += (i == 0 ? " <- after: " : " | ") + g_causes[i];
    return collapse(text);
}

std::string one_line(const std::exception_ptr& error)
{
    std::string text;
    for (const Described& d : unwind(error))
    {
        const std::string part = d.trial_error ? d.message
                                               : (d.message.empty() ? d.type : d.type + ": " + d.message);
        text += (text.empty() ? "" : " <- caused by: ") + part;
    }
    return collapse(text.empty() ? "no exception" : text);
}

// ----------------------------------------------------------------------------------- stdout

namespace
{

int g_result_fd = 1;
bool g_claimed = false;
LineTap* g_tap = nullptr;  // never deleted: std::cout may be used by static destructors
std::mutex g_tap_mutex;

void write_all(int fd, const char* data, size_t n)
{
    while (n > 0)
    {
        const ssize_t w = ::write(fd, data, n);
        if (w < 0)
        {
            if (errno == EINTR) continue;
            return;
        }
        data += w;
        n -= size_t(w);
    }
}

}  // namespace

void LineTap::set_observer(LineObserver observer)
{
    std::lock_guard<std::mutex> lock(g_tap_mutex);
    observer_ = std::move(observer);
}

void LineTap::take(const char* s, size_t n)
{
    std::lock_guard<std::mutex> lock(g_tap_mutex);
    write_all(fd_, s, n);
    for (size_t i = 0; i < n; ++i)
    {
        if (s[i] == '\n' || s[i] == '\r')
        {
            if (!line_.empty()) note_line(line_);
            if (observer_ && !line_.empty()) observer_(line_, Clock::now());
            line_.clear();
        }
        else if (line_.size() < 4096)
            line_ += s[i];
    }
}

LineTap::int_type LineTap::overflow(int_type c)
{
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    take(&ch, 1);
    return c;
}

std::streamsize LineTap::xsputn(const char* s, std::streamsize n)
{
    take(s, size_t(n));
    return n;
}

void claim_stdout()
{
    if (g_claimed) return;
    std::cout.flush();
    std::fflush(stdout);
    const int dup_fd = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
    if (dup_fd >= 0)
    {
        g_result_fd = dup_fd;
        ::dup2(2, 1);
    }
    g_tap = new LineTap(2);
    std::cout.rdbuf(g_tap);
    std::cerr.rdbuf(new LineTap(2));  // never deleted either; std::cerr stays unit-buffered
    g_claimed = true;
}

int result_fd() { return g_result_fd; }

void set_line_observer(LineObserver observer)
{
    if (g_tap) g_tap->set_observer(std::move(observer));
}

void write_result_stream(std::string_view text)
{
    std::cout.flush();
    std::fflush(stdout);
    write_all(g_result_fd, text.data(), text.size());
}

void emit(const Json& result) { write_result_stream(result_line(result) + "\n"); }

// -------------------------------------------------------------------------- EpochTimeline

namespace
{

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

}  // namespace

void EpochTimeline::on_line(std::string_view line, Clock::time_point when)
{
    constexpr std::string_view epoch_prefix = "Epoch: ";
    constexpr std::string_view error_prefix = "Training error: ";
    if (starts_with(line, epoch_prefix))
    {
        std::string_view rest = line.substr(epoch_prefix.size());
        int64_t k = 0;
        size_t digits = 0;
        while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9')
            k = k * 10 + (rest[digits++] - '0');
        if (digits == 0 || digits != rest.size()) return;  // e.g. "Epoch 3\nLoss goal reached"
        current_ = k;
        started_[k] = when;
    }
    else if (starts_with(line, error_prefix) && current_ && !finished_.count(*current_))
        finished_[*current_] = when;
}

void EpochTimeline::reset()
{
    started_.clear();
    finished_.clear();
    current_.reset();
}

std::optional<Clock::time_point> EpochTimeline::started(int64_t epoch) const
{
    const auto it = started_.find(epoch);
    if (it == started_.end()) return std::nullopt;
    return it->second;
}

std::optional<Clock::time_point> EpochTimeline::finished(int64_t epoch) const
{
    const auto it = finished_.find(epoch);
    if (it == finished_.end()) return std::nullopt;
    return it->second;
}

StepWindow step_window(const EpochTimeline& timeline, Clock::time_point train_start,
                       int64_t warmup_epochs, int64_t steps)
{
    const int64_t last = warmup_epochs + steps - 1;
    const auto begin = timeline.started(warmup_epochs);
    const auto end = timeline.finished(last);
    if (!begin || !end)
        throw TrialError("cannot time the steps: the optimizer displayed " +
                         std::to_string(timeline.epochs_started()) + " epoch start(s); missing " +
                         (!begin ? "'Epoch: " + std::to_string(warmup_epochs) + "'"
                                 : "'Training error' after epoch " + std::to_string(last)));
    StepWindow w;
    w.warmup_seconds = std::chrono::duration<double>(*begin - train_start).count();
    w.window_seconds = std::chrono::duration<double>(*end - *begin).count();
    return w;
}

// ------------------------------------------------------------------------------ test hooks

bool fault_requested(std::string_view name)
{
    const char* value = std::getenv(kFaultEnv);
    return value && name == value;
}

void fault_point()
{
    const char* env = std::getenv(kFaultEnv);
    const std::string fault = env ? env : "";
    if (fault.empty()) return;
    if (fault != "hang" && fault != "crash" && fault != "garbage" && fault != "nan")
        throw TrialError(std::string("unknown ") + kFaultEnv + "='" + fault + "' (known: hang, crash, garbage, nan)");
    if (fault == "hang")
    {
        std::cerr << kFaultEnv << "=hang: sleeping forever" << std::endl;
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    if (fault == "crash") std::abort();
    if (fault == "garbage")
    {
        write_result_stream(std::string(kResultPrefix) + "{this is not json\n");
        exit_now(0);
    }
}

// ------------------------------------------------------------------------------------- run

namespace
{

void record_failure(Json& result, const std::exception_ptr& error)
{
    const std::string message = failure_message(error);
    std::cout.flush();
    std::cerr << "kit: trial failed: " << message << std::endl;
    result.set("status", failure_status(error));
    result.set("error", message);
}

int exit_code(const Json& result)
{
    const Json* status = result.find("status");
    return status && status->kind() == Json::Kind::String && status->as_string() == "ok" ? 0 : 1;
}

}  // namespace

int run(int argc, char** argv, const Engine& engine, const Body& body)
{
    const std::string program = argc > 0 && argv[0] ? argv[0] : "trial";
    const std::vector<std::string> arguments(argv + (argc > 0 ? 1 : 0), argv + argc);
    const ParseResult parsed = parse_args(arguments, engine.modes);
    if (parsed.help)
    {
        std::fputs(usage(program, engine.modes).c_str(), stdout);
        std::fflush(stdout);
        return 0;
    }
    if (!parsed.ok)
    {
        // Bad flags still get a result line, so the host records `error`, not `crash`.
        std::fprintf(stderr, "%s: error: %s\n", program.c_str(), parsed.error.c_str());
        emit(bad_arguments_result(parsed.error));
        return 1;
    }

    claim_stdout();
    Json result = base_result(parsed.args, engine.engine_of(parsed.args.mode));
    try
    {
        body(parsed.args, result);
    }
    catch (...)
    {
        record_failure(result, std::current_exception());
    }
    emit(result);
    return exit_code(result);
}

void finish_now(Json& result, const std::exception_ptr& error)
{
    if (error) record_failure(result, error);
    emit(result);
    exit_now(exit_code(result));
}

void exit_now(int code)
{
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    std::_Exit(code);
}

}  // namespace kit
