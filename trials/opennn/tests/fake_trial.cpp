// kit-fake-trial: the OpenNN trial's protocol driver (kit::run) around a fake engine, so the
// C++ side of trial protocol v1 can be tested where OpenNN cannot be built. It takes the same
// flags, names the same engines (opennn-pool1 / -default / -graph / -resident), prepares the same data and
// image tree (and checks every image decodes back), prints OpenNN-style epoch lines that it
// times the way the real trial does, and prints its KIT-RESULT line the same way.
//
// KIT_FAKE_OUTCOME picks how the "training" ends:
//   ok (default)  finite losses
//   oom           OpenNN's text for a failed cudaMalloc ("CUDA Error: 2 in ...")
//   cudnn_oom     a cudnn-frontend allocation failure
//   bad_alloc     std::bad_alloc
//   nested_oom    std::bad_alloc nested in a runtime_error
//   error         a runtime_error with a two-line message
//   swallowed_oom OpenNN at the edge of the card: "cudnn-frontend path unavailable (CUDA Error: 2
//                 ...)" printed to std::cerr, then "requires SM 8.0+" thrown
// KIT_TRIAL_FAULT works as in every trial (nan makes the final loss NaN).
//
// Modes graph / resident (opennn-graph / opennn-resident) follow the real trial's throughput
// path without OpenNN: the epoch plan over a dataset of KIT_FAKE_DATASET_IMAGES images (default
// 50,000, synthetic or CIFAR-10, no image tree), whole-epoch display lines, and the CUDA graph
// audit fed with the launches KIT_FAKE_GRAPH names:
//   full (default)  one full 8-step graph per group, as a correct graph path launches them
//   short           the one-step warm-up graph standing in for every even group
//   none            no graph (what `resident`, CUDA graphs off, launches)
//
// Every mode's "training" is OpenNN's epoch loop as optimizer.cpp runs it (for epoch = 0 ..
// maximum_epochs: "Epoch: k", the epoch, "Training error: x", stop when epoch + 1 >=
// maximum_epochs), driven by the same window controller as the real trial, which lowers
// maximum_epochs when the window closes. KIT_FAKE_EPOCH_MS sets how long each epoch sleeps:
// "a,b,c" gives epoch 0 a ms, epoch 1 b ms, every later one c ms (default 2).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "kit_data.h"
#include "kit_protocol.h"
#include "kit_resident.h"
#include "kit_window.h"

namespace
{

void fake_training(const kit::Args& args, kit::Json& result);

std::vector<int64_t> epoch_milliseconds()
{
    std::vector<int64_t> ms;
    const char* env = std::getenv("KIT_FAKE_EPOCH_MS");
    std::stringstream in(env ? env : "2");
    for (std::string part; std::getline(in, part, ',');) ms.push_back(std::stoll(part));
    if (ms.empty()) ms.push_back(2);
    return ms;
}

// OpenNN's epoch loop (Optimizer::train): `epoch_body` runs one epoch and returns its loss;
// `maximum_epochs` is read at every epoch's end, as check_stopping_condition reads it.
std::vector<double> epoch_loop(const int64_t& maximum_epochs, const std::function<double(int64_t)>& epoch_body)
{
    const std::vector<int64_t> ms = epoch_milliseconds();
    std::vector<double> history;
    for (int64_t epoch = 0; epoch <= maximum_epochs; ++epoch)
    {
        std::cout << "Epoch: " << epoch << "\n";
        const double loss = epoch_body(epoch);
        std::this_thread::sleep_for(std::chrono::milliseconds(ms[std::min<size_t>(size_t(epoch), ms.size() - 1)]));
        history.push_back(loss);
        std::cout << "Training error: " << loss << "\n" << "Elapsed time: 00:00:00\n";
        if (epoch + 1 >= maximum_epochs)
        {
            std::cout << "Epoch " << epoch << "\nMaximum epochs number reached: " << epoch + 1 << "\n";
            break;
        }
    }
    return history;
}

void fake_resident(const kit::Args& args, kit::Json& result)
{
    const bool cuda_graph = args.mode == "graph";
    const std::string engine = "opennn-" + args.mode;
    result["versions"].set("framework", "fake");
    if (args.benchmark != "throughput")
        throw kit::TrialError(engine + " runs the throughput benchmark only");
    if (const auto refusal = kit::resident_side_refusal(engine, args.image_size)) throw kit::TrialError(*refusal);
    result.set("opennn_figures", kit::opennn_figures_null());
    const char* env_images = std::getenv("KIT_FAKE_DATASET_IMAGES");
    const int64_t images = env_images ? std::stoll(env_images) : kit::kResidentDatasetImages;
    const kit::WindowRequest request = kit::window_request(args);
    kit::EpochPlan plan = kit::plan_epochs(images, args.batch, request);
    kit::Json& settings = result["settings"];
    settings.set("epoch_plan", plan.json());
    const kit::ImageBatch data = kit::load_batch(args.dataset, args.data_dir, images, args.seed, args.image_size);
    kit::Json info = data.info;
    info.set("images", images);
    info.set("digest", kit::batch_digest(data));
    settings.set("data", info);
    result.set("parameters", 1234);
    kit::fault_point();

    const std::string graphs = std::getenv("KIT_FAKE_GRAPH") ? std::getenv("KIT_FAKE_GRAPH") : (cuda_graph ? "full" : "none");
    int handles[3] = {};
    kit::EpochTimeline timeline;
    kit::WindowController window(request, plan.geometry());
    int64_t maximum_epochs = window.initial_maximum_epochs();
    kit::graph_audit().reset();
    kit::EpochLineFeed feed(timeline, window, [](int64_t epoch) { kit::graph_audit().begin_epoch(epoch); },
                            [&maximum_epochs](int64_t epoch) { maximum_epochs = epoch + 1; });
    kit::set_line_observer([&](std::string_view line, kit::Clock::time_point t) { feed.on_line(line, t); });
    try
    {
        const double unix_offset = kit::unix_offset_now();
        const auto start = kit::Clock::now();
        if (graphs == "short") kit::graph_audit().on_instantiate(&handles[0], 100);  // the warm-up's
        const std::vector<double> history = epoch_loop(maximum_epochs, [&](int64_t epoch) {
            for (int64_t g = 0; g < plan.graph_launches_per_epoch() && graphs != "none"; ++g)
            {
                const void* exec = graphs == "short" && g % 2 == 0 ? &handles[0] : &handles[1 + g % 2];
                if (epoch == 0 && g < 2 && exec != &handles[0]) kit::graph_audit().on_instantiate(exec, 800);
                else kit::graph_audit().on_launch(exec);
            }
            return 2.3 - 0.01 * double(epoch);
        });
        const double train_seconds = std::chrono::duration<double>(kit::Clock::now() - start).count();
        kit::set_line_observer(nullptr);
        settings.set("train_seconds", train_seconds);
        if (!window.done() || int64_t(history.size()) != *window.last_epoch() + 1)
            throw kit::TrialError(kit::window_not_closed(window, int64_t(history.size())));
        plan.settle(window);
        settings.set("epoch_plan", plan.json());
        const kit::GraphAudit::Window audit =
            kit::graph_audit().window(plan.warmup_epochs, plan.epochs() - 1, plan.steps_per_graph());
        kit::Json audit_info = kit::audit_json(audit, plan, cuda_graph);
        audit_info.set("graphs", kit::graph_audit().json());
        settings.set("cuda_graph_audit", audit_info);
        double loss_final = history.back();
        if (kit::fault_requested("nan")) loss_final = std::nan("");
        kit::record_window(result, args, window, timeline, start, unix_offset, history[size_t(plan.warmup_epochs - 1)],
                           loss_final);
        const int64_t train_epochs = int64_t(history.size());
        result.set("opennn_figures", kit::opennn_figures_json(kit::opennn_figures(
                                         audit, plan, cuda_graph, window.window_seconds(), train_seconds, train_epochs)));
        settings.set("opennn_figures", kit::opennn_figures_inputs(audit, plan, cuda_graph, window.window_seconds(),
                                                                  train_seconds, train_epochs));
        if (const auto failure = kit::audit_failure(audit, plan, cuda_graph)) throw kit::TrialError(*failure);
    }
    catch (...)
    {
        kit::set_line_observer(nullptr);
        kit::finish_now(result, std::current_exception());
    }
    kit::finish_now(result);
}

void fake_body(const kit::Args& args, kit::Json& result)
{
    if (args.mode == "graph" || args.mode == "resident") return fake_resident(args, result);

    kit::Json& settings = result["settings"];
    kit::Json& versions = result["versions"];
    versions.set("framework", "fake");
    if (!kit::batch_side_supported(args.image_size))
        throw kit::TrialError(kit::unsupported_side("opennn-" + args.mode, args.image_size));

    // Whatever a library prints must end up on stderr.
    std::cout << "fake: diagnostics through std::cout" << std::endl;
    std::printf("fake: diagnostics through printf\n");
    std::fflush(stdout);
    if (std::system("echo fake: diagnostics from a child process") != 0)
        throw std::runtime_error("could not run a child process");

    kit::ImageBatch data = kit::load_batch(args.dataset, args.data_dir, args.batch, args.seed, args.image_size);
    kit::Json info = data.info;
    info.set("digest", kit::batch_digest(data));
    info.set("shape_hwc", kit::Json::array({data.side, data.side, 3}));

    {
        kit::ImageTree tree(data);
        // Read every image back the way OpenNN's BMP decoder does and check pixels, size and class.
        int64_t checked = 0;
        for (int64_t i = 0; i < data.count; ++i)
        {
            const auto path = kit::image_path(tree.root(), data.labels[size_t(i)], i);
            std::FILE* f = std::fopen(path.c_str(), "rb");
            if (!f) throw std::runtime_error("missing " + path.string());
            std::vector<uint8_t> bytes;
            for (int c; (c = std::fgetc(f)) != EOF;) bytes.push_back(uint8_t(c));
            std::fclose(f);
            int h = 0, w = 0;
            if (kit::decode_bmp24(bytes, h, w) != std::vector<uint8_t>(data.image(i), data.image(i) + data.image_bytes()) ||
                h != data.side || w != data.side)
                throw std::runtime_error("image " + std::to_string(i) + " does not decode back");
            ++checked;
        }
        info.set("tree", tree.root().string());
        info.set("tree_format", tree.format());
        info.set("classes_in_tree", tree.classes());
        info.set("images_checked", checked);
        tree.remove();
    }
    settings.set("data", info);
    result.set("parameters", 1234);

    kit::fault_point();

    // Failures are reported from inside the body, as the real trial does around train().
    try
    {
        fake_training(args, result);
    }
    catch (...)
    {
        kit::set_line_observer(nullptr);
        kit::finish_now(result, std::current_exception());
    }
    kit::finish_now(result);
}

void fake_training(const kit::Args& args, kit::Json& result)
{
    const std::string outcome = std::getenv("KIT_FAKE_OUTCOME") ? std::getenv("KIT_FAKE_OUTCOME") : "ok";
    if (outcome == "oom") throw std::runtime_error("CUDA Error: 2 in /src/opennn/opennn/device_backend.cpp:94");
    if (outcome == "cudnn_oom")
        throw std::runtime_error("cudnn-frontend forward execute: cudnnBackendExecute failed with message: , "
                                 "and code: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED");
    if (outcome == "bad_alloc") throw std::bad_alloc();
    if (outcome == "nested_oom")
    {
        try { throw std::bad_alloc(); }
        catch (...) { std::throw_with_nested(std::runtime_error("while allocating the batch pool")); }
    }
    if (outcome == "error") throw std::runtime_error("boom\n  on two lines");
    if (outcome == "swallowed_oom")
    {
        kit::watch_for_cause("cudnn-frontend path unavailable (");
        std::cerr << "ConvolutionOperator: cudnn-frontend path unavailable (CUDA Error: 2 in "
                     "/src/opennn/opennn/device_backend.cpp:95).\n";
        throw std::runtime_error("ConvolutionOperator: GPU convolution backward requires SM 8.0+ (Ampere).");
    }
    if (outcome != "ok") throw kit::TrialError("unknown KIT_FAKE_OUTCOME=" + outcome);

    // "Training": OpenNN-style display lines, timed through std::cout like the real trial.
    const kit::WindowRequest request = kit::window_request(args);
    kit::WindowController window(request, kit::one_step_geometry(request, args.batch));
    int64_t maximum_epochs = window.initial_maximum_epochs();
    kit::EpochTimeline timeline;
    kit::EpochLineFeed feed(timeline, window, nullptr, [&maximum_epochs](int64_t epoch) { maximum_epochs = epoch + 1; });
    kit::set_line_observer([&](std::string_view line, kit::Clock::time_point t) { feed.on_line(line, t); });
    const double unix_offset = kit::unix_offset_now();
    const auto start = kit::Clock::now();
    const std::vector<double> history =
        epoch_loop(maximum_epochs, [](int64_t epoch) { return 2.3 / double(epoch + 1); });
    kit::set_line_observer(nullptr);
    if (!window.done() || int64_t(history.size()) != *window.last_epoch() + 1)
        throw kit::TrialError(kit::window_not_closed(window, int64_t(history.size())));

    const int64_t warmup = *window.warmup_epochs();
    std::optional<double> loss_warmup;
    if (warmup > 0) loss_warmup = history[size_t(warmup - 1)];
    double loss_final = history.back();
    if (kit::fault_requested("nan")) loss_final = std::nan("");
    result.set("host_peak_rss_mib", kit::peak_rss_mib());
    kit::record_window(result, args, window, timeline, start, unix_offset, loss_warmup, loss_final);
}

}  // namespace

int main(int argc, char** argv)
{
    const kit::Engine engine{{"pool1", "default", "graph", "resident"},
                             [](const std::string& mode) { return "opennn-" + mode; }};
    kit::exit_now(kit::run(argc, argv, engine, fake_body));
}
