// kit_args: the trial protocol's flags, parsed the way trials/common/kittrial.py's
// build_parser() (argparse) parses them: same names, defaults, choices and checks, `--flag value`
// and `--flag=value`, unambiguous prefixes (`--bat 4`), last occurrence wins, and argparse's
// wording in the error message.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kit
{

// Step counts when the host gives none (kittrial.THROUGHPUT_WARMUP_STEPS / THROUGHPUT_STEPS).
inline constexpr int64_t kThroughputWarmupSteps = 10;
inline constexpr int64_t kThroughputSteps = 50;

// The throughput window's defaults (protocol v1 additions): the input side, the tolerance that
// ends the adaptive warm-up and judges the window's halves, and the adaptive warm-up's bound.
inline constexpr int64_t kImageSize = 32;
inline constexpr double kSteadyTolerance = 0.02;
inline constexpr double kMaxWarmupSeconds = 120;  // the adaptive warm-up's bound when none is given
inline constexpr int64_t kMinImageSize = 32, kMaxImageSize = 512;  // kittrial.MIN_IMAGE_SIZE, MAX_IMAGE_SIZE
inline constexpr double kMaxSeconds = 86400;

struct Args
{
    std::string benchmark;              // maxbatch | throughput (required)
    int64_t batch = 0;                  // >= 1 (required)
    std::string precision = "fp32";     // fp32 | bf16
    std::string mode;                   // one of the engine's modes (required)
    std::string model = "resnet50";
    std::string dataset = "synthetic";  // synthetic | cifar10
    std::optional<std::string> data_dir;
    std::optional<int64_t> memory_budget_mib;  // >= 1
    std::string device = "cuda";        // cuda | cpu
    int64_t seed = 0;
    std::optional<int64_t> warmup_steps;  // >= 0
    std::optional<int64_t> steps;         // >= 1
    bool cudnn_benchmark = false;
    int64_t image_size = kImageSize;             // 32..512: input side (engines refuse what they cannot run)
    std::optional<int64_t> window_images;        // >= 1: the timed window holds at least this many images
    std::optional<double> window_seconds;        // (0, 86400]: ... and lasts at least this long
    double steady_tolerance = kSteadyTolerance;  // (0, 1]
    // [0, 86400]; given, it turns the adaptive warm-up on without the window rule (kittrial.adaptive_warmup)
    std::optional<double> max_warmup_seconds;
};

struct ParseResult
{
    bool ok = false;
    bool help = false;   // -h/--help: print usage(), exit 0, no result line (as argparse does)
    std::string error;   // argparse-style message when !ok
    Args args;
};

ParseResult parse_args(const std::vector<std::string>& argv, const std::vector<std::string>& modes);

std::string usage(const std::string& program, const std::vector<std::string>& modes);

// (warm-up steps, measured steps): max-batch is fixed at (1, 1); throughput takes the flags
// or the defaults above (kittrial.step_counts). Under the window rule (window_rule() below) a
// count the rule decides is the default here and means nothing: use the rule.
std::pair<int64_t, int64_t> step_counts(const Args& args);

// Which parts of a throughput run the window rule decides (protocol v1 additions): the window,
// when --window-images or --window-seconds is given and --steps is not; the warm-up (adaptive),
// when --window-images or --window-seconds is given and --warmup-steps is not. --steps and
// --warmup-steps, when given, override their part; with neither flag nor --window-*, the old
// fixed defaults (W 10, S 50) apply. Max-batch is always fixed.
bool window_by_rule(const Args& args);
bool warmup_by_rule(const Args& args);

}  // namespace kit
