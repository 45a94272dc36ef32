// Unit tests of kit_core (no OpenNN, no network). A self-contained runner: each TEST registers
// itself, CHECK records a failure and goes on, and the last line is "N passed, N failed".
//
//   kit-core-tests            run every test
//   kit-core-tests NAME...    run the tests whose names contain NAME
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <new>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "kit_args.h"
#include "kit_data.h"
#include "kit_json.h"
#include "kit_protocol.h"
#include "kit_resident.h"
#include "kit_window.h"

namespace fs = std::filesystem;
using namespace kit;

namespace
{

struct Test
{
    const char* name;
    std::function<void()> body;
};

std::vector<Test>& registry()
{
    static std::vector<Test> tests;
    return tests;
}

struct Register
{
    Register(const char* name, std::function<void()> body) { registry().push_back({name, std::move(body)}); }
};

int g_failures = 0;

#define TEST(name)                                   \
    static void test_##name();                       \
    static Register register_##name(#name, test_##name); \
    static void test_##name()

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            ++g_failures;                                                              \
            std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK failed: " #cond "\n"; \
        }                                                                              \
    } while (0)

#define CHECK_EQ(a, b)                                                                       \
    do {                                                                                     \
        const auto& _a = (a);                                                                \
        const auto& _b = (b);                                                                \
        if (!(_a == _b)) {                                                                   \
            ++g_failures;                                                                    \
            std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK_EQ failed: " #a " == " #b   \
                      << "\n    left:  " << _a << "\n    right: " << _b << "\n";            \
        }                                                                                    \
    } while (0)

#define CHECK_THROWS_WITH(expr, fragment)                                                        \
    do {                                                                                         \
        bool _threw = false;                                                                     \
        try { (void)(expr); } catch (const std::exception& _e) {                                 \
            _threw = true;                                                                       \
            if (std::string(_e.what()).find(fragment) == std::string::npos) {                    \
                ++g_failures;                                                                    \
                std::cerr << __FILE__ << ":" << __LINE__ << ": message '" << _e.what()           \
                          << "' lacks '" << fragment << "'\n";                                   \
            }                                                                                    \
        }                                                                                        \
        if (!_threw) {                                                                           \
            ++g_failures;                                                                        \
            std::cerr << __FILE__ << ":" << __LINE__ << ": no exception from " #expr "\n";       \
        }                                                                                        \
    } while (0)

// A scratch folder removed at the end of the test.
struct TempDir
{
    fs::path path;
    TempDir()
    {
        std::string templ = (fs::temp_directory_path() / "kit-core-test-XXXXXX").string();
        path = mkdtemp(templ.data());
    }
    ~TempDir()
    {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

const std::vector<std::string> kModes = {"pool1", "default"};

ParseResult parse(std::vector<std::string> argv) { return parse_args(argv, kModes); }

std::vector<std::string> base_argv()
{
    return {"--benchmark", "maxbatch", "--batch", "4", "--mode", "pool1"};
}

std::vector<std::string> keys(const Json& object)
{
    std::vector<std::string> out;
    for (const auto& [k, v] : object.items()) out.push_back(k);
    return out;
}

std::string join(const std::vector<std::string>& v)
{
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
    return out;
}

// A tiny CIFAR-10 in the binary layout, as tests/cifar_files.py writes it: record i has
// channel planes filled with i, 100 + i, 200 - i and label i % 10.
fs::path write_cifar_bin(const fs::path& parent, std::vector<int> sizes)
{
    const fs::path folder = parent / "cifar-10-batches-bin";
    fs::create_directories(folder);
    int index = 0;
    for (size_t k = 0; k < sizes.size(); ++k)
    {
        std::ofstream out(folder / ("data_batch_" + std::to_string(k + 1) + ".bin"), std::ios::binary);
        for (int r = 0; r < sizes[k]; ++r, ++index)
        {
            out.put(char(index % 10));
            for (int c = 0; c < 3; ++c)
            {
                const uint8_t v = uint8_t(c == 0 ? index : c == 1 ? 100 + index : 200 - index);
                for (int p = 0; p < 1024; ++p) out.put(char(v));
            }
        }
    }
    return folder;
}

std::vector<uint8_t> read_file(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

// ------------------------------------------------------------------------------------- JSON

TEST(json_strings_are_escaped_to_ascii)
{
    CHECK_EQ(json_quote("plain"), "\"plain\"");
    CHECK_EQ(json_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
    CHECK_EQ(json_quote("tab\tnl\ncr\r"), "\"tab\\tnl\\ncr\\r\"");
    CHECK_EQ(json_quote(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
    CHECK_EQ(json_quote("caf\xc3\xa9"), "\"caf\\u00e9\"");             // 2-byte UTF-8
    CHECK_EQ(json_quote("\xe2\x82\xac"), "\"\\u20ac\"");                // 3-byte
    CHECK_EQ(json_quote("\xf0\x9f\x98\x80"), "\"\\ud83d\\ude00\"");     // 4-byte: surrogates
    CHECK_EQ(json_quote("bad\xff\xc3"), "\"bad\\ufffd\\ufffd\"");       // invalid bytes
    CHECK_EQ(json_quote("\xc0\x80"), "\"\\ufffd\\ufffd\"");             // overlong
    CHECK_EQ(json_quote(std::string("nul\0x", 5)), "\"nul\\u0000x\"");
}

TEST(json_numbers_round_trip_and_non_finite_is_null)
{
    CHECK_EQ(json_number(0.1), "0.1");
    CHECK_EQ(json_number(2.0), "2");
    CHECK_EQ(json_number(-1.5e-7), "-1.5e-07");
    CHECK_EQ(json_number(std::nan("")), "null");
    CHECK_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
    CHECK_EQ(json_number(-std::numeric_limits<double>::infinity()), "null");
    CHECK_EQ(std::stod(json_number(2.3025850929940455)), 2.3025850929940455);
    CHECK_EQ(Json(int64_t(-3)).dump(), "-3");
    CHECK_EQ(Json(size_t(7)).dump(), "7");
}

TEST(json_objects_keep_order_and_replace_in_place)
{
    Json o = Json::object();
    o.set("b", 1);
    o.set("a", Json::array({Json(true), Json(), Json("x")}));
    o["c"]["d"] = 2.5;
    o.set("b", "again");
    CHECK_EQ(o.dump(), "{\"b\":\"again\",\"a\":[true,null,\"x\"],\"c\":{\"d\":2.5}}");
    CHECK(o.contains("c") && !o.contains("z"));
    CHECK_EQ(Json::object().dump(), "{}");
    CHECK_EQ(Json::array().dump(), "[]");
}

// ------------------------------------------------------------------------------------- flags

TEST(args_defaults_and_required)
{
    const ParseResult r = parse(base_argv());
    CHECK(r.ok);
    CHECK_EQ(r.args.benchmark, "maxbatch");
    CHECK_EQ(r.args.batch, 4);
    CHECK_EQ(r.args.mode, "pool1");
    CHECK_EQ(r.args.precision, "fp32");
    CHECK_EQ(r.args.dataset, "synthetic");
    CHECK_EQ(r.args.device, "cuda");
    CHECK_EQ(r.args.model, "resnet50");
    CHECK_EQ(r.args.seed, 0);
    CHECK(!r.args.data_dir && !r.args.memory_budget_mib && !r.args.warmup_steps && !r.args.steps);
    CHECK(!r.args.cudnn_benchmark);
    CHECK(step_counts(r.args) == std::make_pair(int64_t(1), int64_t(1)));

    const ParseResult missing = parse({"--batch", "3"});
    CHECK(!missing.ok);
    CHECK_EQ(missing.error, "the following arguments are required: --benchmark, --mode");
}

TEST(args_all_flags_both_spellings)
{
    const ParseResult r = parse({"--benchmark=throughput", "--batch", "128", "--precision", "bf16",
                                 "--mode=default", "--model", "resnet50", "--dataset", "cifar10",
                                 "--data-dir", "/data/c", "--memory-budget-mib", "1000", "--device", "cpu",
                                 "--seed", "-4", "--warmup-steps", "0", "--steps", "7", "--cudnn-benchmark"});
    CHECK(r.ok);
    CHECK_EQ(r.args.benchmark, "throughput");
    CHECK_EQ(r.args.precision, "bf16");
    CHECK_EQ(r.args.mode, "default");
    CHECK_EQ(*r.args.data_dir, "/data/c");
    CHECK_EQ(*r.args.memory_budget_mib, 1000);
    CHECK_EQ(r.args.device, "cpu");
    CHECK_EQ(r.args.seed, -4);
    CHECK(r.args.cudnn_benchmark);
    CHECK(step_counts(r.args) == std::make_pair(int64_t(0), int64_t(7)));

    const ParseResult defaults = parse({"--benchmark", "throughput", "--batch", "2", "--mode", "pool1"});
    CHECK(step_counts(defaults.args) == std::make_pair(int64_t(10), int64_t(50)));
}

TEST(args_errors_read_like_argparse)
{
    auto error_of = [](std::vector<std::string> extra) {
        std::vector<std::string> argv = base_argv();
        argv.insert(argv.end(), extra.begin(), extra.end());
        const ParseResult r = parse(argv);
        return r.ok ? std::string("<ok>") : r.error;
    };
    // The same texts kittrial.build_parser's argparse produces for these argvs.
    CHECK_EQ(error_of({"--batch", "0"}), "argument --batch: must be an integer >= 1, got '0'");
    CHECK_EQ(error_of({"--batch", "-1"}), "argument --batch: must be an integer >= 1, got '-1'");
    CHECK_EQ(error_of({"--batch", "two"}), "argument --batch: must be an integer >= 1, got 'two'");
    CHECK_EQ(error_of({"--mode", "x"}), "argument --mode: invalid choice: 'x' (choose from 'pool1', 'default')");
    CHECK_EQ(error_of({"--seed", "x"}), "argument --seed: invalid int value: 'x'");
    CHECK_EQ(error_of({"--steps", "0"}), "argument --steps: must be an integer >= 1, got '0'");
    CHECK_EQ(error_of({"--warmup-steps", "-2"}), "argument --warmup-steps: must be an integer >= 0, got '-2'");
    CHECK_EQ(error_of({"--memory-budget-mib", "0"}), "argument --memory-budget-mib: must be an integer >= 1, got '0'");
    CHECK_EQ(error_of({"--cudnn-benchmark=1"}), "argument --cudnn-benchmark: ignored explicit argument '1'");
    CHECK_EQ(error_of({"foo", "--zzz"}), "unrecognized arguments: foo --zzz");
    CHECK_EQ(error_of({"--s", "3"}), "ambiguous option: --s could match --seed, --steps, --steady-tolerance");
    CHECK_EQ(error_of({"--seed"}), "argument --seed: expected one argument");
    CHECK_EQ(parse({"--benchmark", "maxbatch", "--batch", "--mode", "pool1"}).error,
             "argument --batch: expected one argument");
    CHECK_EQ(error_of({"--device", "tpu"}), "argument --device: invalid choice: 'tpu' (choose from 'cuda', 'cpu')");
}

TEST(args_python_int_prefixes_and_last_wins)
{
    std::vector<std::string> argv = base_argv();
    for (const char* s : {"--bat", " +8 ", "--see", "1_0", "--batch", "9", "--cudnn"}) argv.push_back(s);
    const ParseResult r = parse(argv);
    CHECK(r.ok);
    CHECK_EQ(r.args.batch, 9);
    CHECK_EQ(r.args.seed, 10);
    CHECK(r.args.cudnn_benchmark);
    CHECK(!parse({"--benchmark", "maxbatch", "--batch", "1__0", "--mode", "pool1"}).ok);
    CHECK(!parse({"--benchmark", "maxbatch", "--batch", "99999999999999999999", "--mode", "pool1"}).ok);
}

TEST(args_window_flags_defaults_values_and_rule)
{
    const ParseResult d = parse({"--benchmark", "throughput", "--batch", "2", "--mode", "pool1"});
    CHECK(d.ok);
    CHECK_EQ(d.args.image_size, 32);
    CHECK(!d.args.window_images && !d.args.window_seconds);
    CHECK_EQ(d.args.steady_tolerance, 0.02);
    CHECK(!d.args.max_warmup_seconds.has_value());
    CHECK(!window_by_rule(d.args) && !warmup_by_rule(d.args));  // old hosts: W 10, S 50

    const ParseResult r = parse({"--benchmark", "throughput", "--batch", "2", "--mode", "pool1", "--image-size=224",
                                 "--window-images", "99_840", "--window-seconds", " 5 ", "--steady-tolerance", "5e-2",
                                 "--max-warmup-seconds=1_0.5"});
    CHECK(r.ok);
    CHECK_EQ(r.args.image_size, 224);
    CHECK_EQ(*r.args.window_images, 99840);
    CHECK_EQ(*r.args.window_seconds, 5.0);
    CHECK_EQ(r.args.steady_tolerance, 0.05);
    CHECK_EQ(*r.args.max_warmup_seconds, 10.5);
    CHECK(window_by_rule(r.args) && warmup_by_rule(r.args));

    // --steps / --warmup-steps override their own part of the rule.
    auto with = [](std::vector<std::string> extra) {
        std::vector<std::string> argv = {"--benchmark", "throughput", "--batch", "2", "--mode", "pool1"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        return parse(argv).args;
    };
    CHECK(!window_by_rule(with({"--window-seconds", "5", "--steps", "7"})));
    CHECK(!warmup_by_rule(with({"--window-seconds", "5", "--steps", "7"})));  // kittrial.adaptive_warmup
    CHECK(warmup_by_rule(with({"--max-warmup-seconds", "30", "--steps", "7"})));  // the bound turns it on
    CHECK(window_by_rule(with({"--window-images", "9", "--warmup-steps", "3"})));
    CHECK(!warmup_by_rule(with({"--window-images", "9", "--warmup-steps", "3"})));
    CHECK(!window_by_rule(with({"--steady-tolerance", "0.1"})));  // tolerance alone is no rule
    Args maxbatch = parse(base_argv()).args;
    maxbatch.window_seconds = 5;
    CHECK(!window_by_rule(maxbatch) && !warmup_by_rule(maxbatch));

    auto error_of = [](std::vector<std::string> extra) {
        std::vector<std::string> argv = base_argv();
        argv.insert(argv.end(), extra.begin(), extra.end());
        const ParseResult p = parse(argv);
        return p.ok ? std::string("<ok>") : p.error;
    };
    CHECK_EQ(error_of({"--image-size", "0"}), "argument --image-size: must be an integer >= 1, got '0'");
    CHECK_EQ(error_of({"--window-images", "0"}), "argument --window-images: must be an integer >= 1, got '0'");
    CHECK_EQ(error_of({"--window-images", "1e5"}), "argument --window-images: must be an integer >= 1, got '1e5'");
    CHECK_EQ(error_of({"--window-seconds", "-1"}), "argument --window-seconds: must be a number > 0 and <= 86400, got '-1'");
    CHECK_EQ(error_of({"--window-seconds", "abc"}), "argument --window-seconds: must be a number > 0 and <= 86400, got 'abc'");
    CHECK_EQ(error_of({"--window-seconds", "inf"}), "argument --window-seconds: must be a number > 0 and <= 86400, got 'inf'");
    CHECK_EQ(error_of({"--steady-tolerance", "nan"}), "argument --steady-tolerance: must be a number > 0 and <= 1, got 'nan'");
    CHECK_EQ(error_of({"--steady-tolerance", "0x10"}), "argument --steady-tolerance: must be a number > 0 and <= 1, got '0x10'");
    CHECK_EQ(error_of({"--max-warmup-seconds", "1__0"}),
             "argument --max-warmup-seconds: must be a number >= 0 and <= 86400, got '1__0'");
    CHECK_EQ(error_of({"--max-warmup-seconds"}), "argument --max-warmup-seconds: expected one argument");
    CHECK_EQ(error_of({"--window", "5"}), "ambiguous option: --window could match --window-images, --window-seconds");
    CHECK_EQ(error_of({"--window-s", ".5"}), "<ok>");
    CHECK_EQ(error_of({"--max-warmup-seconds", "0"}), "<ok>");
    CHECK_EQ(error_of({"--steady-tolerance", ".5"}), "<ok>");
    CHECK_EQ(error_of({"--image-size", "16"}), "argument --image-size: must be between 32 and 512 pixels, got '16'");
    CHECK_EQ(error_of({"--window-seconds", "0"}), "argument --window-seconds: must be a number > 0 and <= 86400, got '0'");
}

TEST(args_help)
{
    CHECK(parse({"--help"}).help);
    CHECK(parse({"-h"}).help);
    CHECK(parse({"--he"}).help);
    const std::string u = usage("kit-opennn-trial", kModes);
    CHECK(u.find("--mode {pool1,default}") != std::string::npos);
    CHECK(u.find("[--cudnn-benchmark]") != std::string::npos);
}

// ------------------------------------------------------------------------------------ result

TEST(base_result_has_every_protocol_key_in_kittrials_order)
{
    Args a = parse(base_argv()).args;
    const Json r = base_result(a, "opennn-pool1");
    CHECK_EQ(join(keys(r)), "protocol,engine,mode,precision,batch,status,loss_warmup,loss_final,"
                            "parameters,step_seconds,framework_peak_mib,versions,error,benchmark,settings");
    CHECK_EQ(join(keys(*r.find("settings"))), "model,dataset,data_dir,device,seed,warmup_steps,steps,"
                                              "memory_budget_mib,cudnn_benchmark,image_size,window_images,"
                                              "window_seconds,steady_tolerance,max_warmup_seconds");
    CHECK(!r.contains("window") && !r.contains("warmup"));  // throughput only
    CHECK_EQ(r.find("status")->as_string(), "error");
    CHECK_EQ(r.find("versions")->find("trial_protocol")->as_int(), 1);

    a.benchmark = "throughput";
    const Json t = base_result(a, "opennn-default");
    CHECK(t.contains("images") && t.contains("window_seconds") && t.contains("warmup_seconds") &&
          t.contains("images_per_second"));
    CHECK_EQ(t.find("settings")->find("steps")->as_int(), 50);
    // Every window/warmup key is there, null until measured; the rule and tolerance are known.
    CHECK_EQ(join(keys(*t.find("window"))), "rule,steps,images,seconds,chunk_steps,chunk_seconds,chunk_device_seconds,"
                                            "start_unix,end_unix,first_half_ips,second_half_ips,halves_change,"
                                            "tolerance,steady");
    CHECK_EQ(join(keys(*t.find("warmup"))), "rule,steps,seconds,converged,chunk_rates");
    CHECK_EQ(t.find("window")->find("rule")->as_string(), "fixed: 50 steps");
    CHECK_EQ(t.find("warmup")->find("rule")->as_string(), "fixed: 10 steps");
    CHECK(t.find("window")->find("steps")->is_null() && t.find("window")->find("steady")->is_null());
    CHECK_EQ(t.find("window")->find("tolerance")->as_double(), 0.02);

    // Under the rule the step counts it decides are null in settings.
    const Args rule = parse({"--benchmark", "throughput", "--batch", "2", "--mode", "pool1", "--window-images", "99840",
                             "--window-seconds", "5"}).args;
    const Json w = base_result(rule, "opennn-pool1");
    CHECK(w.find("settings")->find("steps")->is_null() && w.find("settings")->find("warmup_steps")->is_null());
    CHECK_EQ(w.find("settings")->find("window_images")->as_int(), 99840);
    CHECK_EQ(w.find("window")->find("rule")->as_string(), "at least 99840 images and 5 s");
    CHECK_EQ(w.find("warmup")->find("rule")->as_string(), "until two successive chunks within 0.02 (at most 120 s)");
}

TEST(set_losses_and_record_steps_follow_kittrial)
{
    Args a = parse({"--benchmark", "throughput", "--batch", "8", "--mode", "pool1", "--steps", "4"}).args;
    Json r = base_result(a, "opennn-pool1");
    record_steps(r, a, 1.5, 2.0, 4, 2.3, 2.1);
    CHECK_EQ(r.find("status")->as_string(), "ok");
    CHECK(r.find("error")->is_null());
    CHECK_EQ(r.find("step_seconds")->as_double(), 0.5);
    CHECK_EQ(r.find("images")->as_int(), 32);
    CHECK_EQ(r.find("window_seconds")->as_double(), 2.0);
    CHECK_EQ(r.find("images_per_second")->as_double(), 16.0);
    CHECK_EQ(r.find("warmup_seconds")->as_double(), 1.5);

    Json n = base_result(a, "opennn-pool1");
    set_losses(n, std::nullopt, std::nan(""));
    CHECK_EQ(n.find("status")->as_string(), "nonfinite");
    CHECK_EQ(n.find("error")->as_string(), "non-finite loss: loss_final=nan");
    CHECK(n.dump().find("\"loss_final\":null") != std::string::npos);
    set_losses(n, std::numeric_limits<double>::infinity(), 1.0);
    CHECK_EQ(n.find("error")->as_string(), "non-finite loss: loss_warmup=inf");

    Args m = parse(base_argv()).args;  // maxbatch: no throughput keys, warmup_seconds as kittrial
    Json mr = base_result(m, "opennn-pool1");
    record_steps(mr, m, 0.25, 0.125, 1, 1.0, 2.0);
    CHECK(!mr.contains("images"));
    CHECK_EQ(mr.find("step_seconds")->as_double(), 0.125);
    CHECK(mr.contains("warmup_seconds"));
}

TEST(bad_arguments_line_has_every_required_key)
{
    const Json r = bad_arguments_result("argument --batch: expected one argument");
    for (const char* k : {"protocol", "engine", "mode", "precision", "batch", "status", "error"})
        CHECK(r.contains(k));
    CHECK_EQ(r.find("status")->as_string(), "error");
    CHECK_EQ(r.find("error")->as_string(), "invalid arguments: argument --batch: expected one argument");
    CHECK_EQ(result_line(r).rfind("KIT-RESULT {\"protocol\":1,", 0), size_t(0));
}

// ------------------------------------------------------------------------------- classifying

namespace
{

template <typename E>
std::exception_ptr make(E e) { return std::make_exception_ptr(e); }

}  // namespace

TEST(oom_classification)
{
    // OpenNN's check_cuda_status() texts.
    CHECK(is_oom(make(std::runtime_error("CUDA Error: 2 in /src/opennn/device_backend.cpp:94"))));
    CHECK(is_oom(make(std::runtime_error("cuDNN Error: 4004 in /src/opennn/batch_norm_operator.cpp:10"))));
    CHECK(is_oom(make(std::runtime_error("cuDNN Error: 4003 in x.cpp:1"))));
    CHECK(is_oom(make(std::runtime_error("CuBLAS Error: 3 in x.cpp:1"))));
    CHECK(!is_oom(make(std::runtime_error("CUDA Error: 20 in x.cpp:1"))));
    CHECK(!is_oom(make(std::runtime_error("CUDA Error: 700 in x.cpp:1"))));
    CHECK(!is_oom(make(std::runtime_error("cuDNN Error: 4000 in x.cpp:1"))));
    CHECK(!is_oom(make(std::runtime_error("CuBLAS Error: 13 in x.cpp:1"))));
    // cudnn-frontend (cudnnGetErrorString / cudaGetErrorString inside its messages).
    CHECK(is_oom(make(std::runtime_error(
        "cudnn-frontend forward execute: cudnnBackendExecute failed with message: , and code: "
        "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"))));
    CHECK(is_oom(make(std::runtime_error("cudaMalloc failed with out of memory"))));
    CHECK(is_oom(make(std::runtime_error("CUDNN_STATUS_ALLOC_FAILED"))));
    // By type, and through nesting.
    CHECK(is_oom(make(std::bad_alloc())));
    CHECK(is_oom(make(std::bad_array_new_length())));
    std::exception_ptr nested;
    try
    {
        try { throw std::bad_alloc(); }
        catch (...) { std::throw_with_nested(std::runtime_error("while building the batch pool")); }
    }
    catch (...) { nested = std::current_exception(); }
    CHECK(is_oom(nested));
    CHECK_EQ(classify(nested), "oom");
    CHECK_EQ(one_line(nested),
             "std::runtime_error: while building the batch pool <- caused by: std::bad_alloc: std::bad_alloc");
    // Not memory: OpenNN's steady-state allocation guard, plain logic errors.
    CHECK(!is_oom(make(std::runtime_error("CUDA alloc of 1024 bytes forbidden (warmup incomplete)."))));
    CHECK(!is_oom(make(std::logic_error("shape mismatch"))));
    CHECK_EQ(classify(make(std::runtime_error("x"))), "error");
}

TEST(one_line_messages)
{
    CHECK_EQ(one_line(make(TrialError("CIFAR-10 not found in /x"))), "CIFAR-10 not found in /x");
    CHECK_EQ(one_line(make(std::runtime_error("two\n  lines\there "))), "std::runtime_error: two lines here");
    CHECK_EQ(one_line(make(std::bad_alloc())), "std::bad_alloc: std::bad_alloc");
    std::exception_ptr nested;
    try
    {
        try { throw std::runtime_error("inner"); }
        catch (...) { std::throw_with_nested(TrialError("outer")); }
    }
    catch (...) { nested = std::current_exception(); }
    CHECK_EQ(one_line(nested), "outer <- caused by: std::runtime_error: inner");
    CHECK_EQ(one_line(make(std::runtime_error(std::string(5000, 'x')))).size(), kMaxErrorChars);
    CHECK_EQ(one_line(make(42)), "unknown exception");
}

// ------------------------------------------------------------------------------------- data

TEST(splitmix64_reference_values)
{
    SplitMix64 rng(0);
    CHECK_EQ(rng.next(), 0xE220A8397B1DCDAFull);
    CHECK_EQ(rng.next(), 0x6E789E6AA1B965F4ull);
}

TEST(synthetic_batch_is_deterministic_and_round_robin)
{
    const ImageBatch a = synthetic_batch(13, 7), b = synthetic_batch(13, 7), c = synthetic_batch(13, 8);
    CHECK(a.pixels == b.pixels);
    CHECK(a.pixels != c.pixels);
    CHECK_EQ(a.pixels.size(), size_t(13 * kImageBytes));
    for (int i = 0; i < 13; ++i) CHECK_EQ(a.labels[size_t(i)], i % 10);
    // First bytes: the little-endian bytes of splitmix64(seed=0)'s first draw.
    const ImageBatch z = synthetic_batch(1, 0);
    CHECK_EQ(int(z.pixels[0]), 0xAF);
    CHECK_EQ(int(z.pixels[7]), 0xE2);
    CHECK_EQ(int(z.pixels[8]), 0xF4);
    CHECK_EQ(batch_digest(a), batch_digest(b));
    CHECK(batch_digest(a) != batch_digest(c));
    CHECK_EQ(a.info.find("name")->as_string(), "synthetic");
    // Negative seeds are fine (uint64 of the value).
    CHECK(synthetic_batch(2, -1).pixels != synthetic_batch(2, 1).pixels);
}

TEST(bmp_round_trip_and_layout)
{
    std::vector<uint8_t> img(5 * 3 * 3);  // odd width: rows padded to 4 bytes
    for (size_t i = 0; i < img.size(); ++i) img[i] = uint8_t(i * 7 + 1);
    const std::vector<uint8_t> f = encode_bmp24(img.data(), 3, 5);
    CHECK_EQ(f.size(), size_t(54 + 16 * 3));
    CHECK(f[0] == 'B' && f[1] == 'M');
    CHECK_EQ(int(f[28]), 24);
    // Bottom-up: the file's first pixel is the image's bottom-left one, stored B, G, R.
    CHECK_EQ(int(f[54 + 0]), int(img[(2 * 5) * 3 + 2]));
    CHECK_EQ(int(f[54 + 2]), int(img[(2 * 5) * 3 + 0]));
    int h = 0, w = 0;
    CHECK(decode_bmp24(f, h, w) == img);
    CHECK(h == 3 && w == 5);

    const ImageBatch b = synthetic_batch(3, 1);
    const std::vector<uint8_t> g = encode_bmp24(b.image(2), 32, 32);
    CHECK_EQ(g.size(), size_t(54 + 32 * 32 * 3));
    CHECK(decode_bmp24(g, h, w) == std::vector<uint8_t>(b.image(2), b.image(2) + kImageBytes));
    CHECK_THROWS_WITH(decode_bmp24(std::vector<uint8_t>(10), h, w), "not a BMP");
}

TEST(cifar10_layouts_wrap_and_errors)
{
    TempDir tmp;
    const fs::path folder = write_cifar_bin(tmp.path, {12, 8});
    for (const fs::path& dir : {folder, tmp.path})
    {
        const ImageBatch b = load_cifar10(dir.string(), 25);
        CHECK_EQ(b.count, 25);
        CHECK_EQ(b.labels[24], (24 % 20) % 10);
        CHECK_EQ(int(b.image(3)[0]), 3);      // R plane of record 3
        CHECK_EQ(int(b.image(3)[1]), 103);    // G
        CHECK_EQ(int(b.image(3)[2]), 197);    // B
        CHECK_EQ(int(b.image(21)[0]), 1);     // wrapped: record 21 = record 1
        CHECK_EQ(b.info.find("records_read")->as_int(), 20);
        CHECK(b.info.find("wrapped")->as_bool());
        CHECK_EQ(b.info.find("files")->dump(), "[\"data_batch_1.bin\",\"data_batch_2.bin\"]");
        CHECK_EQ(b.info.find("layout")->as_string(), "bin");
    }
    const ImageBatch small = load_cifar10(folder.string(), 3);  // only what is needed
    CHECK_EQ(small.info.find("records_read")->as_int(), 3);
    CHECK_EQ(small.info.find("files")->dump(), "[\"data_batch_1.bin\"]");
    CHECK(!small.info.find("wrapped")->as_bool());

    CHECK_THROWS_WITH(load_cifar10((tmp.path / "absent").string(), 2), "CIFAR-10 not found in");

    TempDir py;
    fs::create_directories(py.path / "cifar-10-batches-py");
    std::ofstream(py.path / "cifar-10-batches-py" / "data_batch_1") << "pickle";
    CHECK_THROWS_WITH(load_cifar10(py.path.string(), 2), "python (pickle) layout is not read");

    TempDir bad;
    fs::create_directories(bad.path / "cifar-10-batches-bin");
    std::ofstream(bad.path / "cifar-10-batches-bin" / "data_batch_1.bin") << "short";
    CHECK_THROWS_WITH(load_cifar10(bad.path.string(), 2), "is not a multiple of 3073-byte records");

    TempDir labels;
    const fs::path lf = write_cifar_bin(labels.path, {2});
    {
        std::fstream f(lf / "data_batch_1.bin", std::ios::in | std::ios::out | std::ios::binary);
        f.put(char(11));
    }
    CHECK_THROWS_WITH(load_cifar10(labels.path.string(), 2), "labels outside 0..9");
}

TEST(image_tree_writes_decodable_class_folders_and_cleans_up)
{
    TempDir tmp;
    const ImageBatch b = synthetic_batch(23, 3);
    fs::path root;
    {
        ImageTree tree(b, tmp.path);
        root = tree.root();
        CHECK(fs::is_directory(root));
        CHECK_EQ(root.parent_path(), tmp.path);
        CHECK_EQ(tree.classes(), 10);
        size_t files = 0;
        for (int i = 0; i < 23; ++i)
        {
            const fs::path p = image_path(root, b.labels[size_t(i)], i);
            const std::string want_dir{'c', char('0' + i % 10)};
            CHECK_EQ(p.parent_path().filename().string(), want_dir);
            CHECK(fs::is_regular_file(p));
            int h = 0, w = 0;
            CHECK(decode_bmp24(read_file(p), h, w) ==
                  std::vector<uint8_t>(b.image(i), b.image(i) + kImageBytes));
            ++files;
        }
        CHECK_EQ(files, size_t(23));
        tree.remove();
        CHECK(!fs::exists(root));
        tree.remove();  // idempotent
    }
    {
        const ImageBatch three = synthetic_batch(3, 0);  // fewer images than classes
        ImageTree tree(three, tmp.path);
        CHECK_EQ(tree.classes(), 3);
        root = tree.root();
    }
    CHECK(!fs::exists(root));  // destructor
}

TEST(image_tree_signal_safe_removal_takes_opennns_cache_too)
{
    TempDir tmp;
    const ImageBatch b = synthetic_batch(12, 5);
    ImageTree tree(b, tmp.path);
    fs::create_directories(tree.root() / ".cache");
    std::ofstream(tree.root() / ".cache" / "images.bin") << "cache";
    std::ofstream(tree.root() / ".cache" / "images.bin.tmp") << "partial";
    tree.remove_signal_safe();
    CHECK(!fs::exists(tree.root()));
}

TEST(image_tree_removed_when_killed_by_sigterm)
{
    TempDir tmp;
    const fs::path marker = tmp.path / "root.txt";
    const pid_t pid = fork();
    if (pid == 0)
    {
        ImageTree tree(synthetic_batch(30, 1), tmp.path);
        std::ofstream(marker) << tree.root().string();
        for (;;) pause();
    }
    for (int i = 0; i < 500 && !fs::exists(marker); ++i) usleep(10000);
    usleep(20000);
    std::string root;
    std::getline(std::ifstream(marker), root);
    CHECK(!root.empty() && fs::is_directory(root));
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
    CHECK(!root.empty() && !fs::exists(root));
}

// ------------------------------------------------------------------------------------ timing

TEST(epoch_timeline_reads_opennn_display_lines)
{
    EpochTimeline t;
    const Clock::time_point t0 = Clock::now();
    auto at = [&](int ms) { return t0 + std::chrono::milliseconds(ms); };
    t.on_line("Training with adaptive moment estimation \"Adam\" CUDA...", at(0));
    t.on_line("Epoch: 0", at(10));
    t.on_line("Training error: 2.3", at(30));
    t.on_line("Elapsed time: 00:00:00", at(31));
    t.on_line("Epoch: 1", at(40));
    t.on_line("Training error: 2.2", at(60));
    t.on_line("Epoch 1", at(61));  // check_stopping_condition's line: not a start
    t.on_line("Maximum epochs number reached: 2", at(62));
    CHECK_EQ(t.epochs_started(), 2);
    CHECK(t.current_epoch() == std::optional<int64_t>(1));
    CHECK(*t.started(1) == at(40));
    CHECK(*t.finished(1) == at(60));
    const StepWindow w = step_window(t, t0, 1, 1);
    CHECK(std::abs(w.warmup_seconds - 0.040) < 1e-9);
    CHECK(std::abs(w.window_seconds - 0.020) < 1e-9);
    const StepWindow all = step_window(t, t0, 0, 2);
    CHECK(std::abs(all.window_seconds - 0.050) < 1e-9);
    CHECK_THROWS_WITH(step_window(t, t0, 1, 2), "missing 'Training error' after epoch 2");
    CHECK_THROWS_WITH(step_window(t, t0, 3, 1), "missing 'Epoch: 3'");
}

TEST(resident_epoch_plan_maps_steps_to_whole_epochs)
{
    // The reference's run: 50,000 images, batch 128 -> 390 steps (80 images dropped) per epoch.
    const EpochPlan p = plan_epochs(kResidentDatasetImages, 128, 10, 50);
    CHECK_EQ(p.steps_per_epoch, 390);
    CHECK_EQ(p.dropped_per_epoch, 80);
    CHECK_EQ(p.warmup_epochs, 1);
    CHECK_EQ(p.timed_epochs, 1);
    CHECK_EQ(p.timed_steps(), 390);
    CHECK_EQ(p.timed_images(), 390 * 128);
    CHECK_EQ(p.steps_per_graph(), 8);
    CHECK_EQ(p.graph_launches_per_epoch(), 48);
    CHECK_EQ(p.graph_steps_per_epoch(), 384);
    // The reference's --epochs 2 is --steps 780; one step more takes a third epoch.
    CHECK_EQ(plan_epochs(kResidentDatasetImages, 128, 10, 780).timed_epochs, 2);
    CHECK_EQ(plan_epochs(kResidentDatasetImages, 128, 10, 781).timed_epochs, 3);
    CHECK_EQ(plan_epochs(kResidentDatasetImages, 128, 391, 1).warmup_epochs, 2);
    CHECK_EQ(plan_epochs(kResidentDatasetImages, 128, 0, 1).warmup_epochs, 1);  // epoch 0 captures
    // Under 8 batches an epoch: one graph per step.
    const EpochPlan small = plan_epochs(100, 20, 1, 1);
    CHECK_EQ(small.steps_per_graph(), 1);
    CHECK_EQ(small.graph_launches_per_epoch(), 5);
    CHECK_THROWS_WITH(plan_epochs(100, 101, 1, 1), "batch 101 does not fit the 100-image dataset");
    const std::string j = p.json().dump();
    CHECK(j.find("\"timed_images\":49920") != std::string::npos);
    CHECK(j.find("\"images_dropped_per_epoch\":80") != std::string::npos);
}

TEST(graph_audit_books_launches_to_epochs_and_finds_short_graphs)
{
    const EpochPlan plan = plan_epochs(kResidentDatasetImages, 128, 10, 780);  // 1 warm-up + 2 timed
    int a = 0, b = 0, c = 0;
    const void* one_step = &a;
    const void* group_odd = &b;
    // What a static reading of OpenNN's run_graph_epoch predicts: the built-in warm-up captures a
    // one-step graph into exec[0], which then stands in for every even group.
    GraphAudit audit;
    audit.on_instantiate(one_step, 100);
    audit.begin_epoch(0);
    audit.on_instantiate(group_odd, 800);
    for (int g = 0; g < 24; ++g) audit.on_launch(one_step);
    for (int epoch = 1; epoch <= 2; ++epoch)
    {
        audit.begin_epoch(epoch);
        for (int g = 0; g < 24; ++g)
        {
            audit.on_launch(one_step);
            audit.on_launch(group_odd);
        }
    }
    const GraphAudit::Window w = audit.window(1, 2, plan.steps_per_graph());
    CHECK_EQ(w.launches, 96);
    CHECK_EQ(w.full_graph_nodes, 800);
    CHECK_EQ(w.short_launches, 48);
    CHECK_EQ(w.graph_steps_estimate, 2 * (24 * 1 + 24 * 8));
    const auto failure = audit_failure(w, plan, true);
    CHECK(failure.has_value());
    if (failure)
    {
        CHECK(failure->find("smaller than a full 8-step group 48 of 96 times") != std::string::npos);
        CHECK(failure->find("about 432 of 768 graph steps ran") != std::string::npos);
    }
    const std::string graphs = audit.json().dump();
    CHECK(graphs.find("{\"instantiated\":0,\"nodes\":100,\"launches_by_epoch\":{\"0\":24,\"1\":24,\"2\":24}}") !=
          std::string::npos);
    CHECK(audit_json(w, plan, true).dump().find("\"short_graph_launches\":48") != std::string::npos);

    // Every group a full graph: the check passes and the estimate is the plan's.
    GraphAudit good;
    good.on_instantiate(&a, 800);
    good.on_instantiate(&c, 801);
    for (int epoch = 0; epoch <= 2; ++epoch)
    {
        good.begin_epoch(epoch);
        for (int g = 0; g < 24; ++g)
        {
            good.on_launch(&a);
            good.on_launch(&c);
        }
    }
    const GraphAudit::Window gw = good.window(1, 2, plan.steps_per_graph());
    CHECK_EQ(gw.short_launches, 0);
    CHECK_EQ(gw.graph_steps_estimate, 768);
    CHECK(!audit_failure(gw, plan, true).has_value());
    CHECK_EQ(audit_json(gw, plan, true).find("check")->as_string(), std::string("ok"));
    // A launch too few (or many), none at all, or any with graphs off: refused.
    good.on_launch(&a);
    CHECK(audit_failure(good.window(1, 2, 8), plan, true)->find("launched 97 CUDA graphs") != std::string::npos);
    CHECK(audit_failure(GraphAudit::Window{}, plan, true)->find("launched no graph") != std::string::npos);
    CHECK(!audit_failure(GraphAudit::Window{}, plan, false).has_value());
    CHECK(audit_failure(gw, plan, false)->find("CUDA graphs were off") != std::string::npos);
    // A handle reused after its graph was destroyed starts over.
    good.on_instantiate(&a, 10);
    CHECK_EQ(good.window(0, 2, 8).full_graph_nodes, 801);
    good.reset();
    CHECK_EQ(good.window(0, 2, 8).launches, 0);
}

TEST(line_tap_writes_through_and_reports_lines)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    LineTap tap(fds[1]);
    std::vector<std::string> lines;
    tap.set_observer([&](std::string_view line, Clock::time_point) { lines.emplace_back(line); });
    std::ostream out(&tap);
    out << "Epoch: " << 3 << "\n" << "progress\r" << "partial";
    out.flush();
    close(fds[1]);
    std::string written;
    char buf[256];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) written.append(buf, size_t(n));
    close(fds[0]);
    CHECK_EQ(written, "Epoch: 3\nprogress\rpartial");
    CHECK_EQ(lines.size(), size_t(2));
    if (lines.size() == 2)
    {
        CHECK_EQ(lines[0], "Epoch: 3");
        CHECK_EQ(lines[1], "progress");
    }
}

TEST(swallowed_causes_classify_the_failure)
{
    clear_causes();
    watch_for_cause("cudnn-frontend path unavailable (");
    int fds[2];
    CHECK(pipe(fds) == 0);
    LineTap tap(fds[1]);
    std::ostream err(&tap);
    // OpenNN at 68,784 images on the H200: the cause it printed, then the error it threw.
    err << "Training with adaptive moment estimation \"Adam\" CUDA...\n"
        << "ConvolutionOperator: cudnn-frontend path unavailable (CUDA Error: 2 in /src/opennn/device_backend.cpp:95).\n"
        << "[=====>   ] 12 %\r";
    err.flush();
    close(fds[1]);
    close(fds[0]);
    CHECK_EQ(causes_seen().size(), size_t(1));
    const auto arch = make(std::runtime_error("ConvolutionOperator: GPU convolution backward requires SM 8.0+ (Ampere)."));
    CHECK_EQ(classify(arch), "error");  // the exception alone says nothing about memory
    CHECK_EQ(failure_status(arch), "oom");
    CHECK_EQ(failure_message(arch),
             "std::runtime_error: ConvolutionOperator: GPU convolution backward requires SM 8.0+ (Ampere). "
             "<- after: ConvolutionOperator: cudnn-frontend path unavailable (CUDA Error: 2 in "
             "/src/opennn/device_backend.cpp:95).");
    // The trial's own checks are not reclassified by what a library printed before.
    CHECK_EQ(failure_status(make(TrialError("training error is not finite: nan"))), "error");
    // A cause that is not a memory failure keeps the status "error" but is still reported.
    clear_causes();
    int fds2[2];
    CHECK(pipe(fds2) == 0);
    LineTap tap2(fds2[1]);
    std::ostream err2(&tap2);
    err2 << "BatchNormalizationOperator: cudnn-frontend path unavailable (cuDNN Error: 3000 in x.cpp:1).\n";
    err2.flush();
    close(fds2[1]);
    close(fds2[0]);
    CHECK_EQ(failure_status(arch), "error");
    CHECK(failure_message(arch).find("<- after: BatchNormalizationOperator: cudnn-frontend path unavailable (cuDNN Error: 3000") != std::string::npos);
    clear_causes();
    CHECK_EQ(failure_message(arch), one_line(arch));
}

// ------------------------------------------------------------------------------ the window rule

namespace
{

// A controller fed with synthetic epoch times: epoch k lasts ms[min(k, size-1)] milliseconds and
// the next one starts `gap_ms` after it ends (OpenNN's "Elapsed time" print, get_batches).
struct Driven
{
    WindowController controller;
    Clock::time_point t0{};
    int64_t epochs = 0;
    Driven(WindowRequest r, EpochGeometry g) : controller(std::move(r), g) {}
    // Runs epochs until the controller stops training (or `limit` epochs); returns epochs run.
    int64_t run(const std::vector<int>& ms, int gap_ms = 0, int64_t limit = 10000)
    {
        Clock::time_point t = t0 + std::chrono::milliseconds(5);  // setup before epoch 0
        for (int64_t e = 0; e < limit; ++e)
        {
            controller.epoch_started(e, t);
            t += std::chrono::milliseconds(ms[std::min<size_t>(size_t(e), ms.size() - 1)]);
            epochs = e + 1;
            if (controller.epoch_finished(e, t)) return epochs;
            t += std::chrono::milliseconds(gap_ms);
        }
        return epochs;
    }
};

WindowRequest rule(int64_t images, double seconds)
{
    WindowRequest r;
    r.window_by_rule = r.warmup_by_rule = true;
    r.min_images = images;
    r.min_seconds = seconds;
    return r;
}

EpochGeometry resident_geometry(const WindowRequest& r, int64_t images = kResidentDatasetImages, int64_t batch = 128)
{
    return plan_epochs(images, batch, r).geometry();
}

double sum(const std::vector<double>& v)
{
    double total = 0;
    for (double x : v) total += x;
    return total;
}

}  // namespace

TEST(window_fixed_counts_keep_todays_epochs)
{
    WindowRequest fixed;  // W 10, S 780 at batch 128: 1 warm-up + 2 timed epochs, as before
    fixed.steps = 780;
    Driven d(fixed, resident_geometry(fixed));
    CHECK_EQ(d.controller.initial_maximum_epochs(), 3);
    CHECK_EQ(d.run({100, 50}), 3);
    CHECK(d.controller.warmup_epochs() == std::optional<int64_t>(1) && d.controller.timed_epochs() == 2);
    CHECK(!d.controller.converged().has_value());
    const Json w = d.controller.window_json(1000.0);
    CHECK_EQ(w.find("rule")->as_string(), "fixed: 780 steps");
    CHECK_EQ(w.find("steps")->as_int(), 780);
    CHECK_EQ(w.find("images")->as_int(), 780 * 128);
    CHECK_EQ(w.find("chunk_steps")->as_int(), 390);
    CHECK(std::abs(w.find("seconds")->as_double() - 0.100) < 1e-9);
    CHECK(std::abs(w.find("start_unix")->as_double() - (1000.0 + 0.105)) < 1e-9);
    CHECK(std::abs(w.find("end_unix")->as_double() - (1000.0 + 0.205)) < 1e-9);
    CHECK(w.find("chunk_device_seconds")->is_null());
    const Json u = d.controller.warmup_json(d.t0);
    CHECK_EQ(u.find("rule")->as_string(), "fixed: 10 steps");
    CHECK_EQ(u.find("steps")->as_int(), 390);
    CHECK(std::abs(u.find("seconds")->as_double() - 0.105) < 1e-9);  // setup + epoch 0
    CHECK(u.find("converged")->is_null());
}

TEST(window_rule_images_take_the_fewest_whole_epochs)
{
    // 99,840 images at 49,920 trained images an epoch: 2 epochs (the 80 dropped per epoch do
    // not count); one image more: 3. No seconds minimum.
    WindowRequest r = rule(99840, 0);
    r.warmup_by_rule = false;
    r.warmup_steps = 0;
    Driven two(r, resident_geometry(r));
    CHECK_EQ(two.controller.initial_maximum_epochs(), kEpochCap);
    CHECK_EQ(two.run({40}), 3);
    CHECK_EQ(two.controller.timed_epochs(), 2);
    r.min_images = 99841;
    Driven three(r, resident_geometry(r));
    three.run({40});
    CHECK_EQ(three.controller.timed_epochs(), 3);
    CHECK_EQ(plan_epochs(kResidentDatasetImages, 128, r).timed_epochs_for_images, 3);
    CHECK_EQ(epochs_for_images(resident_geometry(r), 1), 1);
}

TEST(window_rule_seconds_are_measured_at_each_epochs_end)
{
    // 5 s at 0.9 s an epoch with 20 ms between epochs: the window closes at the first epoch end
    // at or past 5 s after the first timed epoch's start. 6 epochs: 5 x 0.92 + 0.9 = 5.5 s;
    // 5 epochs would be 4.58 s. The images minimum (2 epochs) is met long before.
    WindowRequest r = rule(99840, 5);
    r.warmup_by_rule = false;
    r.warmup_steps = 1;
    Driven d(r, resident_geometry(r));
    CHECK_EQ(d.run({3000, 900}, 20), 7);
    CHECK_EQ(d.controller.timed_epochs(), 6);
    const std::vector<double> chunks = d.controller.chunk_seconds();
    CHECK_EQ(chunks.size(), size_t(6));
    CHECK(std::abs(sum(chunks) - d.controller.window_seconds()) < 1e-9);  // contiguous
    CHECK(std::abs(d.controller.window_seconds() - 5.5) < 1e-9);
    CHECK(std::abs(chunks[0] - 0.92) < 1e-9 && std::abs(chunks[5] - 0.9) < 1e-9);
    CHECK(d.controller.window_seconds() - chunks.back() < 5);  // the fewest: one epoch less is short
    // Both minimums: at 0.1 s an epoch the images decide (2 epochs: 0.2 s >= 0.15 s).
    WindowRequest both = rule(99840, 0.15);
    both.warmup_by_rule = false;
    both.warmup_steps = 1;
    Driven fast(both, resident_geometry(both));
    fast.run({100});
    CHECK_EQ(fast.controller.timed_epochs(), 2);
    const Json fast_window = fast.controller.window_json(0);
    CHECK_EQ(fast_window.find("rule")->as_string(), "at least 99840 images and 0.15 s");
}

TEST(window_adaptive_warmup_converges_or_is_bounded)
{
    // Epoch 0 (graph capture) is the minimum; then epochs until two successive epoch rates differ
    // by <= 2 % of their mean: epochs 1..5 last 300, 200, 150, 101, 100 ms; 101 vs 100 ms is
    // within 1 %: the warm-up ends after epoch 5, and one timed epoch follows.
    WindowRequest r = rule(49920, 0);
    Driven d(r, resident_geometry(r));
    CHECK_EQ(d.run({1000, 300, 200, 150, 101, 100}), 7);
    CHECK_EQ(int64_t(*d.controller.warmup_epochs()), 6);
    CHECK_EQ(d.controller.timed_epochs(), 1);
    CHECK(d.controller.converged() == std::optional<bool>(true));
    const std::vector<double>& rates = d.controller.warmup_chunk_rates();
    CHECK_EQ(rates.size(), size_t(5));
    CHECK(std::abs(rates[0] - 49920 / 0.3) < 1e-6 && std::abs(rates[4] - 49920 / 0.1) < 1e-6);
    const Json u = d.controller.warmup_json(d.t0);
    CHECK_EQ(u.find("rule")->as_string(), "until two successive chunks within 0.02 (at most 120 s)");
    CHECK_EQ(u.find("steps")->as_int(), 6 * 390);
    CHECK(u.find("converged")->as_bool());
    CHECK_EQ(u.find("chunk_rates")->elements().size(), size_t(5));
    // A looser tolerance ends it earlier: 200 vs 150 ms is 28.6 % of their mean rate.
    WindowRequest loose = rule(49920, 0);
    loose.tolerance = 0.3;
    Driven l(loose, resident_geometry(loose));
    l.run({1000, 300, 200, 150, 101, 100});
    CHECK_EQ(int64_t(*l.controller.warmup_epochs()), 4);
    const Json loose_warmup = l.controller.warmup_json(l.t0);
    CHECK_EQ(loose_warmup.find("rule")->as_string(), "until two successive chunks within 0.3 (at most 120 s)");

    // Never within tolerance: bounded by max_warmup_seconds after the minimum. Alternating
    // 200/100 ms epochs: 0.2 + 0.1 + 0.2 = 0.5 s >= 0.5 s after epoch 3; then the window runs.
    WindowRequest bounded = rule(49920, 0);
    bounded.max_warmup_seconds = 0.5;
    Driven alternating(bounded, resident_geometry(bounded));
    std::vector<int> ms = {1000};
    for (int i = 0; i < 50; ++i) ms.push_back(i % 2 ? 100 : 200);
    CHECK_EQ(alternating.run(ms), 5);
    CHECK(alternating.controller.converged() == std::optional<bool>(false));
    CHECK_EQ(int64_t(*alternating.controller.warmup_epochs()), 4);
    CHECK_EQ(alternating.controller.warmup_chunk_rates().size(), size_t(3));
    CHECK(!alternating.controller.warmup_json(alternating.t0).find("converged")->as_bool());

    // --max-warmup-seconds 0: only the minimum, not converged, no chunks compared.
    WindowRequest none = rule(49920, 0);
    none.max_warmup_seconds = 0;
    Driven z(none, resident_geometry(none));
    CHECK_EQ(z.run({1000, 100}), 2);
    CHECK_EQ(int64_t(*z.controller.warmup_epochs()), 1);
    CHECK(z.controller.converged() == std::optional<bool>(false));
    CHECK(z.controller.warmup_chunk_rates().empty());
}

TEST(window_halves_compare_first_and_second_half_of_the_chunks)
{
    // 4 chunks of 1000 images: 1+1 s vs 1+0.5 s -> 1000 vs 1333.3 images/s, +33 %.
    Halves h = halves({1, 1, 1, 0.5}, 1000, 0.02);
    CHECK(std::abs(*h.first_ips - 1000) < 1e-9 && std::abs(*h.second_ips - 4000.0 / 3) < 1e-9);
    CHECK(std::abs(*h.change - 1.0 / 3) < 1e-12);
    CHECK(h.steady == std::optional<bool>(false));
    // Odd: the middle chunk goes to the second half (1 chunk vs 2).
    h = halves({2, 1, 1}, 100, 0.02);
    CHECK(std::abs(*h.first_ips - 50) < 1e-9 && std::abs(*h.second_ips - 100) < 1e-9);
    h = halves({1.0, 1.01}, 100, 0.02);
    CHECK(h.steady == std::optional<bool>(true));
    CHECK(std::abs(*h.change - (100 / 1.01 - 100) / 100) < 1e-12);
    // Fewer than 2 chunks: steadiness unknown.
    h = halves({1.0}, 100, 0.02);
    CHECK(!h.first_ips && !h.second_ips && !h.change && !h.steady);

    WindowRequest r = rule(4 * 49920, 0);
    r.warmup_by_rule = false;
    r.warmup_steps = 1;
    Driven d(r, resident_geometry(r));
    d.run({500, 100, 100, 100, 50});
    const Json w = d.controller.window_json(0);
    CHECK_EQ(w.find("chunk_seconds")->elements().size(), size_t(4));
    CHECK(std::abs(w.find("halves_change")->as_double() - 1.0 / 3) < 1e-9);
    CHECK(!w.find("steady")->as_bool());
}

TEST(window_one_step_epochs_group_into_chunks)
{
    // The one-batch modes: an epoch is one step. The rule: 50-step chunks; fixed S: the largest
    // divisor of S not over 50.
    CHECK_EQ(divisor_chunk(50, 50), 50);
    CHECK_EQ(divisor_chunk(780, 50), 39);
    CHECK_EQ(divisor_chunk(53, 50), 1);
    CHECK_EQ(divisor_chunk(7, 50), 7);
    WindowRequest r = rule(12800, 0);  // 12,800 images at batch 128: 100 steps = 2 chunks
    const EpochGeometry g = one_step_geometry(r, 128);
    CHECK_EQ(g.chunk_epochs, 50);
    CHECK_EQ(g.fixed_timed_epochs, 100);
    Driven d(r, g);
    std::vector<int> ms = {50};
    for (int i = 0; i < 500; ++i) ms.push_back(10);
    d.run(ms);
    CHECK(d.controller.converged() == std::optional<bool>(true));
    CHECK_EQ(int64_t(*d.controller.warmup_epochs()), 1 + 2 * 50);  // minimum + two equal 50-step chunks
    CHECK_EQ(d.controller.timed_epochs(), 100);
    const Json w = d.controller.window_json(0);
    CHECK_EQ(w.find("chunk_steps")->as_int(), 50);
    CHECK_EQ(w.find("steps")->as_int(), 100);
    CHECK_EQ(w.find("chunk_seconds")->elements().size(), size_t(2));
    CHECK(w.find("steady")->as_bool());

    WindowRequest fixed;
    fixed.warmup_steps = 0;
    fixed.steps = 780;
    Driven f(fixed, one_step_geometry(fixed, 128));
    CHECK_EQ(f.controller.initial_maximum_epochs(), 780);
    CHECK_EQ(f.run({10}), 780);
    CHECK_EQ(int64_t(*f.controller.warmup_epochs()), 0);
    const Json fixed_window = f.controller.window_json(0);
    CHECK_EQ(fixed_window.find("chunk_steps")->as_int(), 39);
    CHECK_EQ(f.controller.chunk_seconds().size(), size_t(20));
}

TEST(window_not_closed_and_feed_lowers_maximum_epochs)
{
    WindowRequest r = rule(99840, 0);
    r.warmup_by_rule = false;
    r.warmup_steps = 1;
    WindowController c(r, resident_geometry(r));
    EpochTimeline timeline;
    int64_t stop = -1;
    std::vector<int64_t> announced;
    EpochLineFeed feed(timeline, c, [&](int64_t e) { announced.push_back(e); }, [&](int64_t e) { stop = e; });
    const Clock::time_point t0{};
    auto at = [&](int ms) { return t0 + std::chrono::milliseconds(ms); };
    feed.on_line("Epoch: 0", at(0));
    feed.on_line("Training error: 2.3", at(10));
    feed.on_line("Elapsed time: 00:00:00", at(11));
    feed.on_line("Epoch: 1", at(12));
    feed.on_line("Training error: 2.2", at(22));
    CHECK_EQ(stop, -1);
    CHECK_EQ(window_not_closed(c, 2), "OpenNN stopped after 2 epochs, before the throughput window closed (window: at "
                                      "least 99840 images and 0 s)");
    feed.on_line("Training error: 2.2", at(23));  // a repeated line changes nothing
    feed.on_line("Epoch: 2", at(24));
    feed.on_line("Training error: 2.1", at(34));
    CHECK_EQ(stop, 2);
    CHECK(announced == std::vector<int64_t>({0, 1, 2}));
    CHECK(c.done() && *c.last_epoch() == 2);
    // record_window fills the result's keys and the naive rate.
    Args a = parse({"--benchmark", "throughput", "--batch", "128", "--mode", "graph", "--window-images", "99840",
                    "--warmup-steps", "1"}).args;
    Json result = base_result(a, "opennn-graph");
    record_window(result, a, c, timeline, t0, 0.0, 2.3, 2.1);
    CHECK_EQ(result.find("images")->as_int(), 2 * 390 * 128);
    CHECK(std::abs(result.find("window_seconds")->as_double() - 0.022) < 1e-9);
    CHECK_EQ(result.find("window")->find("images")->as_int(), 2 * 390 * 128);
    CHECK_EQ(result.find("warmup")->find("steps")->as_int(), 390);
    CHECK_EQ(result.find("status")->as_string(), "ok");
}

TEST(resident_plan_under_the_rule_and_the_side_it_runs)
{
    const EpochPlan p = plan_epochs(kResidentDatasetImages, 128, rule(99840, 5));
    CHECK_EQ(p.warmup_epochs, 1);  // the minimum until settled
    CHECK_EQ(p.timed_epochs, 2);
    CHECK(!p.settled);
    const std::string j = p.json().dump();
    CHECK(j.find("\"window_rule\":\"at least 99840 images and 5 s\"") != std::string::npos);
    CHECK(j.find("\"steps_requested\":null") != std::string::npos);
    CHECK(!resident_side_refusal("opennn-graph", 32).has_value());
    const auto refusal = resident_side_refusal("opennn-graph", 224);
    CHECK(refusal.has_value());
    if (refusal)
    {
        CHECK_EQ(refusal->find("opennn-graph runs --image-size 32 only: at 224"), size_t(0));
        CHECK(refusal->find("about 30 GB of GPU memory") != std::string::npos);
        CHECK(refusal->find("about 60 GB of host memory") != std::string::npos);
        CHECK(refusal->find("about 15 GB of temporary disk") != std::string::npos);
        CHECK(refusal->find('\n') == std::string::npos);
    }
}

TEST(opennn_figures_arithmetic_with_a_fake_audit)
{
    // 2 timed epochs of 390 steps at batch 128: 96 launches, half of them a one-step graph.
    const EpochPlan plan = plan_epochs(kResidentDatasetImages, 128, 10, 780);
    GraphAudit::Window w;
    w.launches = 96;
    w.full_graph_nodes = 800;
    w.short_launches = 48;
    w.graph_steps_estimate = 2 * (24 * 1 + 24 * 8);  // 432
    const OpenNNFigures f = opennn_figures(w, plan, true, 4.0, 10.0, 3);
    CHECK_EQ(f.executed_steps, 432 + 2 * 6);  // + the eager tail: 390 mod 8 = 6 steps an epoch
    CHECK(std::abs(f.naive_ips - 780.0 * 128 / 4) < 1e-9);
    CHECK(std::abs(f.executed_ips - 444.0 * 128 / 4) < 1e-9);
    CHECK_EQ(f.runner_style_ips, 15000);  // floor(50,000 x 3 / 10)
    CHECK_EQ(opennn_figures(w, plan, true, 4.0, 7.0, 3).runner_style_ips, 21428);  // 21428.57 truncated
    const std::string j = opennn_figures_json(f).dump();
    CHECK_EQ(j, "{\"naive_ips\":24960,\"executed_steps\":444,\"executed_ips\":14208,\"runner_style_ips\":15000}");
    // Full graphs: every step ran; no graph at all (capture failed): OpenNN ran them eagerly.
    GraphAudit::Window full = w;
    full.short_launches = 0;
    full.graph_steps_estimate = 768;
    CHECK_EQ(opennn_figures(full, plan, true, 4.0, 10.0, 3).executed_steps, 780);
    CHECK_EQ(opennn_figures(GraphAudit::Window{}, plan, true, 4.0, 10.0, 3).executed_steps, 780);
    CHECK_EQ(opennn_figures(GraphAudit::Window{}, plan, false, 4.0, 10.0, 3).executed_steps, 780);
    CHECK_EQ(opennn_figures_null().dump(),
             "{\"naive_ips\":null,\"executed_steps\":null,\"executed_ips\":null,\"runner_style_ips\":null}");
    const std::string inputs = opennn_figures_inputs(w, plan, true, 4.0, 10.0, 3).dump();
    CHECK(inputs.find("timed_graph_steps_estimate + timed_epochs x eager_tail_steps_per_epoch") != std::string::npos);
    CHECK(inputs.find("\"eager_tail_steps\":12") != std::string::npos);
}

TEST(imagenet_side_batches_and_trees)
{
    CHECK(batch_side_supported(32) && batch_side_supported(224) && !batch_side_supported(64));
    CHECK_EQ(unsupported_side("opennn-pool1", 64),
             "opennn-pool1 runs --image-size 32 (CIFAR-10's geometry) or 224 (ImageNet's), got 64");
    const ImageBatch b = synthetic_batch(3, 7, 224);
    CHECK_EQ(b.side, 224);
    CHECK_EQ(b.image_bytes(), int64_t(224 * 224 * 3));
    CHECK_EQ(b.pixels.size(), size_t(3 * 224 * 224 * 3));
    // The same stream of bytes as at 32: the first 32x32 image's bytes start the 224 batch.
    const ImageBatch small = synthetic_batch(1, 7);
    CHECK(std::equal(small.pixels.begin(), small.pixels.end(), b.pixels.begin()));
    TempDir tmp;
    {
        ImageTree tree(b, tmp.path);
        const std::vector<uint8_t> file = read_file(image_path(tree.root(), b.labels[2], 2));
        CHECK_EQ(file.size(), size_t(54 + 224 * 224 * 3));
        int h = 0, w = 0;
        CHECK(decode_bmp24(file, h, w) == std::vector<uint8_t>(b.image(2), b.image(2) + b.image_bytes()));
        CHECK(h == 224 && w == 224);
    }
    CHECK_THROWS_WITH(load_batch("cifar10", std::string("/nowhere"), 2, 0, 224),
                      "--dataset cifar10 has 32x32 images: --image-size 224 needs --dataset synthetic");
    CHECK_EQ(load_batch("synthetic", std::nullopt, 2, 0, 224).side, 224);
}

// -------------------------------------------------------------------------------------- main

int main(int argc, char** argv)
{
    int passed = 0, failed = 0;
    for (const Test& t : registry())
    {
        bool selected = argc < 2;
        for (int i = 1; i < argc; ++i) selected = selected || std::strstr(t.name, argv[i]);
        if (!selected) continue;
        const int before = g_failures;
        try
        {
            t.body();
        }
        catch (const std::exception& e)
        {
            ++g_failures;
            std::cerr << t.name << ": unexpected exception: " << e.what() << "\n";
        }
        const bool ok = g_failures == before;
        (ok ? passed : failed) += 1;
        std::cout << (ok ? "PASS " : "FAIL ") << t.name << "\n";
    }
    std::cout << passed << " passed, " << failed << " failed\n";
    return failed == 0 && passed > 0 ? 0 : 1;
}
