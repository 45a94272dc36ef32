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
// or the defaults above (kittrial.step_counts).
std::pair<int64_t, int64_t> step_counts(const Args& args);

}  // namespace kit
