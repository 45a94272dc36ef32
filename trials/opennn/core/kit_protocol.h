// kit_protocol: trial protocol v1 for C++ trials, the counterpart of trials/common/kittrial.py.
//
// run() parses the flags, claims stdout, builds the result skeleton, runs the engine's body,
// turns any exception into status "oom" or "error" with a one-line message, and prints the
// single `KIT-RESULT <json>` line as the last line of the real stdout. Exit code 0 only for
// status "ok"; bad flags still get a result line (status error, exit 1).
//
// Stdout: the real stdout is duplicated for the result line, then fd 1 is pointed at stderr,
// so nothing a library prints (printf, std::cout, child processes) can follow the result line.
// std::cout additionally goes through a LineTap that copies it to stderr unbuffered and hands
// every complete line, with the time it was completed, to the line observer: the OpenNN trial
// reads OpenNN's per-epoch display lines from there to time its steps.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

#include "kit_args.h"
#include "kit_error.h"
#include "kit_json.h"

namespace kit
{

inline constexpr int kProtocol = 1;
inline constexpr std::string_view kResultPrefix = "KIT-RESULT ";
inline constexpr size_t kMaxErrorChars = 2000;

using Clock = std::chrono::steady_clock;

// ------------------------------------------------------------------------------ result

// Every protocol key, as kittrial.base_result: status "error" until the body says otherwise.
Json base_result(const Args& args, const std::string& engine);

// The line for flags that could not be parsed: every protocol key, null where unknown.
Json bad_arguments_result(const std::string& message);

// kittrial.set_losses: status ok, or nonfinite naming the non-finite loss(es).
void set_losses(Json& result, std::optional<double> loss_warmup, std::optional<double> loss_final);

// kittrial.record_steps: warmup_seconds, step_seconds = window / steps, and for throughput
// images = batch * steps, window_seconds, images_per_second = images / window; then losses.
void record_steps(Json& result, const Args& args, double warmup_seconds, double window_seconds,
                  int64_t steps, std::optional<double> loss_warmup, std::optional<double> loss_final);

std::string result_line(const Json& result);  // "KIT-RESULT {...}" without the newline

// The compiler this code was built with, e.g. "GCC 13.3.0" or "Clang 18.1.8".
std::string compiler_version();

// Peak resident memory of this process so far (getrusage ru_maxrss), MiB.
double peak_rss_mib();

// ------------------------------------------------------------------- failure classification

// Messages that mean "an allocator ran out", whatever exception carries them: kittrial's
// markers, the cuDNN 9 / CUDA names, and the numeric forms OpenNN's CHECK_CUDA / CHECK_CUDNN /
// CHECK_CUBLAS write ("CUDA Error: 2 in ..." = cudaErrorMemoryAllocation, "cuDNN Error: 4003|4004"
// = CUDNN_STATUS_INTERNAL_ERROR_{HOST,DEVICE}_ALLOCATION_FAILED, "CuBLAS Error: 3" =
// CUBLAS_STATUS_ALLOC_FAILED).
const std::vector<std::string>& oom_markers();
bool is_oom_message(std::string_view message);

// True when the exception, or one nested in it (std::throw_with_nested), is std::bad_alloc or
// carries an OOM marker.
bool is_oom(const std::exception_ptr& error);

// "oom" or "error".
std::string classify(const std::exception_ptr& error);

// Causes a library swallowed. Some libraries catch a failure, print it and carry on down another
// path, then fail there with an unrelated message: OpenNN's cudnn-frontend wrapper prints
// "<Op>: cudnn-frontend path unavailable (CUDA Error: 2 in ...)" and then throws "GPU convolution
// backward requires SM 8.0+" — an out-of-memory reported as an architecture error. A trial names
// the lines that carry such causes (a substring); every complete stdout/stderr line containing
// one is kept (the first 8), and a failure is then classified and described with them.
void watch_for_cause(std::string needle);
const std::vector<std::string>& causes_seen();
void clear_causes();

// The result's status and error for a failure, the kept causes included: "oom" when the
// exception is one (is_oom) or, unless it is a kit::TrialError (the trial's own checks), when a
// kept cause carries an OOM marker; the error is one_line(error) followed by
// " <- after: <cause> | <cause>".
std::string failure_status(const std::exception_ptr& error);
std::string failure_message(const std::exception_ptr& error);

// The result's `error` for an exception: a TrialError's message as is, otherwise
// "<type>: <message>" (with nested causes appended), whitespace collapsed, at most 2000 chars.
std::string one_line(const std::exception_ptr& error);

// ----------------------------------------------------------------------------------- stdout

// Duplicates fd 1 (close-on-exec) as the result stream, points fd 1 at stderr and std::cout at
// a LineTap on stderr; std::cerr also goes through a LineTap (no observer: only the causes
// watch_for_cause names are read from it). Idempotent.
void claim_stdout();

// The fd the result line goes to (the real stdout once claimed).
int result_fd();

// Writes result_line(result) + "\n" to result_fd(), after flushing everything else.
void emit(const Json& result);

// Writes raw text to the result stream (the "garbage" fault).
void write_result_stream(std::string_view text);

using LineObserver = std::function<void(std::string_view line, Clock::time_point completed)>;
void set_line_observer(LineObserver observer);

// A streambuf that writes everything straight to `fd` and reports each complete line.
class LineTap : public std::streambuf
{
public:
    explicit LineTap(int fd) : fd_(fd) {}
    void set_observer(LineObserver observer);

protected:
    int_type overflow(int_type c) override;
    std::streamsize xsputn(const char* s, std::streamsize n) override;
    int sync() override { return 0; }

private:
    void take(const char* s, size_t n);
    int fd_;
    std::string line_;
    LineObserver observer_;
};

// The training timeline as OpenNN's optimizer displays it with display on and a display period
// of 1: "Epoch: <k>" before epoch k starts, then, after the epoch (its loss read back to the
// host, so the device is done), "Training error: <x>". Collects when each was printed.
class EpochTimeline
{
public:
    void on_line(std::string_view line, Clock::time_point when);
    void reset();

    std::optional<Clock::time_point> started(int64_t epoch) const;
    std::optional<Clock::time_point> finished(int64_t epoch) const;
    int64_t epochs_started() const { return int64_t(started_.size()); }
    std::optional<int64_t> current_epoch() const { return current_; }  // the epoch announced last

private:
    std::map<int64_t, Clock::time_point> started_;
    std::map<int64_t, Clock::time_point> finished_;
    std::optional<int64_t> current_;
};

// The timed window of a training run read from its timeline: epochs [0, warmup_epochs) are the
// warm-up, the next `steps` epochs are measured. window = finished(last measured) -
// started(first measured); warmup_seconds = started(first measured) - train_start. A missing
// marker is a TrialError naming it.
struct StepWindow
{
    double warmup_seconds = 0;
    double window_seconds = 0;
};
StepWindow step_window(const EpochTimeline& timeline, Clock::time_point train_start,
                       int64_t warmup_epochs, int64_t steps);

// ------------------------------------------------------------------------------ test hooks

// KIT_TRIAL_FAULT, as kittrial: hang (sleep forever before training), crash (abort before any
// result), garbage (a malformed result line, exit 0), nan (the engine makes its loss
// non-finite). An unknown value is a TrialError.
inline constexpr const char* kFaultEnv = "KIT_TRIAL_FAULT";
bool fault_requested(std::string_view name);
void fault_point();  // call once model and data are set up, just before training

// ------------------------------------------------------------------------------------- run

struct Engine
{
    std::vector<std::string> modes;
    std::function<std::string(const std::string& mode)> engine_of;
};

using Body = std::function<void(const Args& args, Json& result)>;

int run(int argc, char** argv, const Engine& engine, const Body& body);

// Ends the trial from inside the body while the engine's objects are still alive: with an
// error, status and message as run() would set them; then the result line, then exit_now(0 only
// for status ok). No destructor runs, so an engine's teardown after a failure (or after a
// success) cannot turn a finished candidate into a crash.
[[noreturn]] void finish_now(Json& result, const std::exception_ptr& error = nullptr);

// Flushes std::cout/std::cerr/stdio and ends the process without running static destructors
// (a CUDA library's teardown can hang or crash after the result line is out).
[[noreturn]] void exit_now(int code);

}  // namespace kit
