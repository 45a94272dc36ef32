// kit-opennn-trial: kitctl's OpenNN trial (trial protocol v1). One candidate in, one
// `KIT-RESULT <json>` line out, written the way an OpenNN user writes an application:
//
//   Configuration::set(Device, Type)  ->  ImageDataset over a class-folder tree (BinaryFile
//   image cache)  ->  ResNet({3,4,6,3}, {64,128,256,512}, bottleneck)  ->  TrainingStrategy
//   (CrossEntropy, no regularization, AdaptiveMomentEstimation)  ->  train().
//
// One epoch is one step: the dataset holds exactly `batch` images (--image-size N: N x N BMPs,
// 32 or 224) and the batch size is `batch`. train() runs warm-up + measured epochs in one call
// (on CUDA OpenNN first runs one more full step of its own and rolls its update back). The
// optimizer's display (on, period 1) goes to stderr through kit::LineTap, and the trial times
// the measured steps from its "Epoch: k" / "Training error: x" lines (kit::EpochTimeline): the
// window starts when its first epoch is announced and ends when its last epoch's loss, read
// back from the device, is printed. Fixed counts (--warmup-steps/--steps) set maximum_epochs up
// front; under the window rule (--window-images/--window-seconds) kit::WindowController decides
// at each epoch's end and the trial lowers maximum_epochs, which train() reads at every epoch's
// end (kit_window.h).
//
// Modes `graph` and `resident` (engines opennn-graph / opennn-resident) are OpenNN's throughput
// path instead, as its own runner docs/benchmarks/throughput/resnet50/opennn_resnet50_speed.cpp
// trains: a 50,000-image dataset kept on the GPU (StorageMode::GPUPersistantData), batch 128,
// whole epochs, conv autotune with --cudnn-benchmark, and CUDA graphs on (`graph`) or off (`resident`, the
// control). See train_resident() and kit_resident.h for how steps map onto epochs.
//
// Everything that is not OpenNN (flags, data, image tree, result line, failure
// classification) is kit_core (trials/opennn/core), which builds and is tested without OpenNN.
#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <string>

#include "kit_build_info.h"
#include "kit_data.h"
#include "kit_protocol.h"
#include "kit_resident.h"
#include "kit_window.h"

#include "opennn/adaptive_moment_estimation.h"
#include "opennn/configuration.h"
#include "opennn/device_backend.h"
#include "opennn/image_dataset.h"
#include "opennn/memory_debug.h"
#include "opennn/random_utilities.h"
#include "opennn/standard_networks.h"
#include "opennn/training_strategy.h"

extern char** environ;

namespace
{

constexpr float kLearningRate = 0.001f;

kit::Json shape_json(const opennn::Shape& shape)
{
    kit::Json dims = kit::Json::array();
    for (const Eigen::Index d : shape) dims.push_back(static_cast<long long>(d));
    return dims;
}

[[maybe_unused]] std::string version_text(int v)  // CUDA's 13000 -> "13.0"
{
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// The Adam settings every mode records (OpenNN's defaults for the betas and epsilon).
kit::Json optimizer_settings(const opennn::AdaptiveMomentEstimation& adam, int64_t batch)
{
    kit::Json optimizer = kit::Json::object();
    optimizer.set("name", "AdaptiveMomentEstimation");
    optimizer.set("lr", double(adam.get_learning_rate()));
    optimizer.set("beta_1", 0.9);
    optimizer.set("beta_2", 0.999);
    optimizer.set("epsilon", double(FLT_EPSILON));
    optimizer.set("batch_size", batch);
    return optimizer;
}

// OPENNN_* variables change what OpenNN does (profiling, sync, legacy conv, ...): record them.
kit::Json opennn_environment()
{
    kit::Json env = kit::Json::object();
    for (char** e = environ; e && *e; ++e)
    {
        const std::string entry = *e;
        if (entry.rfind("OPENNN_", 0) != 0) continue;
        const size_t eq = entry.find('=');
        env.set(entry.substr(0, eq), eq == std::string::npos ? "" : entry.substr(eq + 1));
    }
    return env;
}

void describe_device(const kit::Args& args, kit::Json& versions, kit::Json& settings)
{
#ifdef OPENNN_HAS_CUDA
    int runtime = 0, driver = 0;
    if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) versions.set("cuda", version_text(runtime));
    if (cudaDriverGetVersion(&driver) == cudaSuccess) versions.set("cuda_driver", version_text(driver));
    versions.set("cudnn", static_cast<long long>(cudnnGetVersion()));
    versions.set("cudnn_header", KIT_CUDNN_HEADER_VERSION);
    versions.set("cuda_architectures", KIT_CUDA_ARCHITECTURES);
    if (args.device == "cuda")
    {
        cudaDeviceProp props{};
        if (cudaGetDeviceProperties(&props, 0) == cudaSuccess)
        {
            versions.set("device", props.name);
            versions.set("compute_capability", std::to_string(props.major) + "." + std::to_string(props.minor));
            settings.set("device_total_mib", std::round(double(props.totalGlobalMem) / 1048576.0 * 10) / 10);
        }
        cudaGetLastError();
    }
#else
    (void)settings;
    versions.set("cuda", nullptr);
    if (args.device == "cuda")
        throw kit::TrialError("--device cuda, but this OpenNN was built without CUDA (OPENNN_HAS_CUDA unset)");
#endif
}

void describe_build(const kit::Args& args, kit::Json& result)
{
    kit::Json& versions = result["versions"];
    versions.set("framework", "opennn");
    versions.set("opennn", KIT_OPENNN_VERSION);
    versions.set("opennn_commit", KIT_OPENNN_COMMIT);
    versions.set("compiler", KIT_CXX_COMPILER);
    versions.set("cuda_compiler", std::string(KIT_CUDA_COMPILER).empty() ? kit::Json() : kit::Json(KIT_CUDA_COMPILER));
    describe_device(args, versions, result["settings"]);
}

void train_opennn(const kit::Args& args, kit::Json& result)
{
    using namespace opennn;

    // OpenNN's cudnn-frontend wrapper (run_frontend) catches a failure, prints it as
    // "<Op>: cudnn-frontend path unavailable (<cause>)" and the operator then throws "requires SM
    // 8.0+ (Ampere)": on the H200 the cause was "CUDA Error: 2" (cudaErrorMemoryAllocation) at
    // the edge of the card. Keep such lines so the failure is classified by its cause.
    kit::watch_for_cause("cudnn-frontend path unavailable (");

    kit::Json& settings = result["settings"];
    describe_build(args, result);
    if (!kit::batch_side_supported(args.image_size))
        throw kit::TrialError(kit::unsupported_side("opennn-" + args.mode, args.image_size));

    const bool on_cuda = args.device == "cuda";
    const kit::WindowRequest request = kit::window_request(args);
    kit::WindowController window(request, kit::one_step_geometry(request, args.batch));

    // ---- configuration: device and training type, before the network is built (compile()
    // snapshots it). resolve() throws for a missing GPU or bf16 below compute capability 8.0.
    Configuration::instance().set(on_cuda ? Device::CUDA : Device::CPU,
                                  args.precision == "bf16" ? Type::BF16 : Type::FP32);
    const Configuration::Resolved resolved = Configuration::instance().resolve();
    set_seed(static_cast<unsigned>(args.seed));

    // --cudnn-benchmark: OpenNN's counterpart of cuDNN autotuning is its cudnn-frontend conv
    // autotune, which only runs with the workspace cap off. Without the flag the library
    // default stays (heuristic plan under the AUTO workspace cap), explicitly.
    if (args.cudnn_benchmark)
    {
        device::set_conv_autotune(true);
        device::set_conv_workspace_cap(0);
    }
    else
        device::set_conv_autotune(false);

    settings.set("memory_budget_enforced",
                 on_cuda ? "no: OpenNN has no allocator cap (host VRAM gate only)"
                         : "no: OpenNN has no allocator cap; on cpu the host limits memory");

    // ---- data: exactly `batch` images in a temporary class-folder tree, read by ImageDataset
    // into its BinaryFile image cache (<tree>/.cache/images.bin).
    kit::ImageBatch data = kit::load_batch(args.dataset, args.data_dir, args.batch, args.seed, args.image_size);
    kit::Json data_info = data.info;
    data_info.set("digest", kit::batch_digest(data));
    data_info.set("shape_hwc", kit::Json::array({data.side, data.side, 3}));

    kit::ImageTree tree(data);
    data_info.set("tree", tree.root().string());
    data_info.set("tree_format", tree.format());
    data_info.set("classes_in_tree", tree.classes());

    ImageDataset dataset(tree.root());
    dataset.set_display(false);
    dataset.set_sample_roles("Training");  // read_images() split the samples at random

    if (dataset.get_samples_number("Training") != args.batch)
        throw kit::TrialError("OpenNN's ImageDataset found " + std::to_string(dataset.get_samples_number("Training")) +
                              " training images in " + tree.root().string() + ", expected " +
                              std::to_string(args.batch));
    if (dataset.get_storage_mode() != Dataset::StorageMode::BinaryFile)
        throw kit::TrialError("ImageDataset is not in BinaryFile storage mode: " + dataset.get_storage_mode_string());
    // ImageDataset takes its input shape from the first image it reads: the side written.
    if (shape_json(dataset.get_shape("Input")).dump() != kit::Json::array({data.side, data.side, 3}).dump())
        throw kit::TrialError("OpenNN's ImageDataset reads input shape " + shape_json(dataset.get_shape("Input")).dump() +
                              ", expected [" + std::to_string(data.side) + "," + std::to_string(data.side) + ",3]");
    data_info.set("input_shape", shape_json(dataset.get_shape("Input")));
    data_info.set("target_shape", shape_json(dataset.get_shape("Target")));
    data_info.set("storage_mode", dataset.get_storage_mode_string());
    data_info.set("normalization", "OpenNN's Scaling layer (ImageMinMax: x/255), applied when batches are filled");
    // The cache file is open (ImageDataset reads it with pread from then on); nothing reads
    // the tree again, so it goes now and cannot outlive a killed trial.
    tree.remove();
    data_info.set("tree_removed_after_cache_open", true);
    settings.set("data", data_info);

    // ---- model: ResNet-50 v1.5 (bottleneck, stride on the 3x3), ImageNet stem.
    ResNet network(dataset.get_shape("Input"),
                   {3, 4, 6, 3},
                   Shape{64, 128, 256, 512},
                   dataset.get_shape("Target"),
                   /*use_bottleneck=*/true);
    result.set("parameters", static_cast<long long>(network.get_parameters_number()));
    settings.set("model_impl", "opennn::ResNet(input, {3,4,6,3}, {64,128,256,512}, target, use_bottleneck=true): "
                               "ResNet-50 v1.5, 7x7/2 stem + 3x3/2 max-pool, batch norm, softmax classifier");
    settings.set("layers", static_cast<long long>(network.get_layers_number()));

    if (kit::fault_requested("nan"))  // test hook: real non-finite losses from the engine
        network.set_parameters(VectorR::Constant(network.get_parameters_size(),
                                                 std::numeric_limits<float>::quiet_NaN()));

    // ---- training strategy.
    TrainingStrategy training_strategy(&network, &dataset);
    training_strategy.set_loss("CrossEntropy");
    training_strategy.get_loss()->set_regularization("NoRegularization");
    training_strategy.set_optimization_algorithm("AdaptiveMomentEstimation");

    auto* adam = dynamic_cast<AdaptiveMomentEstimation*>(training_strategy.get_optimization_algorithm());
    if (!adam) throw kit::TrialError("OpenNN did not create an AdaptiveMomentEstimation optimizer");

    // One epoch = one step. Fixed counts: exactly W + S epochs. The window rule: an upper bound
    // that the window controller lowers once the window closes (train() sizes its loss history
    // by it, so it may only go down).
    const int64_t maximum_epochs = window.initial_maximum_epochs();
    adam->set_learning_rate(kLearningRate);
    adam->set_batch_size(Eigen::Index(args.batch));
    adam->set_update_period(1);
    adam->set_maximum_epochs(Eigen::Index(maximum_epochs));
    adam->set_maximum_time(std::numeric_limits<float>::max());
    adam->set_loss_goal(-std::numeric_limits<float>::infinity());
    adam->set_maximum_validation_failures(std::numeric_limits<Eigen::Index>::max());
    adam->set_gradient_clip_norm(0.0f);
    adam->set_shuffle(false);
    adam->set_cuda_graph(false);
    adam->set_restore_best(false);
    adam->set_batch_pool_size(args.mode == "pool1" ? 1 : 0);  // 0 = OpenNN's default depth
    adam->set_display(true);          // to stderr; the epoch lines time the steps
    adam->set_display_period(1);

    const int workers = adam->get_workers_number();
    kit::Json opennn_settings = kit::Json::object();
    opennn_settings.set("device", on_cuda ? "CUDA" : "CPU");
    opennn_settings.set("training_type", resolved.training_type == Type::BF16 ? "BF16" : "FP32");
    opennn_settings.set("loss", "CrossEntropy");
    opennn_settings.set("regularization", "NoRegularization");
    opennn_settings.set("maximum_epochs", maximum_epochs);
    opennn_settings.set("maximum_epochs_lowered_when_the_window_closes", maximum_epochs == kit::kEpochCap);
    opennn_settings.set("epoch_is_one_step", true);
    opennn_settings.set("chunk_steps", window.geometry().chunk_epochs);
    opennn_settings.set("builtin_cuda_warmup_step", on_cuda);
    opennn_settings.set("batch_pool_size", args.mode == "pool1" ? kit::Json(1) : kit::Json("library default"));
    opennn_settings.set("batch_pool_size_effective",
                        args.mode == "pool1" ? 1 : (on_cuda ? std::max(workers + 1, 3) : 1));
    opennn_settings.set("batch_workers", workers);
    opennn_settings.set("shuffle", adam->get_shuffle());
    opennn_settings.set("cuda_graph", adam->get_cuda_graph());
    opennn_settings.set("gradient_clip_norm", double(adam->get_gradient_clip_norm()));
    opennn_settings.set("conv_autotune", device::conv_autotune_enabled());
    opennn_settings.set("conv_workspace_cap", args.cudnn_benchmark ? "off (autotune)" : "AUTO (library default)");
    opennn_settings.set("display", "on, every epoch, to stderr (the step timing reads it)");
    opennn_settings.set("timing", "from OpenNN's display lines: the first timed epoch's 'Epoch: k' announced .. the last "
                                  "one's 'Training error' printed (the loss is read back from the device first)");
    opennn_settings.set("march", KIT_OPENNN_MARCH);
    opennn_settings.set("lto", KIT_OPENNN_LTO);
    opennn_settings.set("environment", opennn_environment());
    settings.set("opennn", opennn_settings);

    settings.set("optimizer", optimizer_settings(*adam, args.batch));
    settings.set("loss", "cross_entropy");

    kit::fault_point();

    // ---- train: warm-up epochs, then the measured ones, in one train() call. The result is
    // printed from here, OpenNN's objects still alive: neither a failure's nor a success's
    // teardown (CUDA/cuDNN frees, destructors syncing streams) can turn it into a crash.
    kit::EpochTimeline timeline;
    kit::EpochLineFeed feed(timeline, window, nullptr,
                            [adam](int64_t epoch) { adam->set_maximum_epochs(Eigen::Index(epoch + 1)); });
    kit::set_line_observer([&feed](std::string_view line, kit::Clock::time_point when) { feed.on_line(line, when); });
    try
    {
        const double unix_offset = kit::unix_offset_now();
        const kit::Clock::time_point start = kit::Clock::now();
        const TrainingResult training = training_strategy.train();
        const double train_seconds = std::chrono::duration<double>(kit::Clock::now() - start).count();
        kit::set_line_observer(nullptr);
        memory_debug::print(std::cerr);  // prints only with OPENNN_MEMORY_DEBUG=1

        const Eigen::Index done = training.get_epochs_number();
        settings.set("opennn_stopping_condition", training.write_stopping_condition());
        settings.set("train_seconds", train_seconds);
        if (!window.done()) throw kit::TrialError(kit::window_not_closed(window, int64_t(done)));
        const int64_t epochs = *window.last_epoch() + 1;
        if (done != epochs)
            throw kit::TrialError("OpenNN trained " + std::to_string(done) + " of " + std::to_string(epochs) +
                                  " epochs (stopping condition: " + training.write_stopping_condition() + ")");
        settings["opennn"].set("epochs_trained", epochs);

        const int64_t warmup_epochs = *window.warmup_epochs();
        std::optional<double> loss_warmup;
        if (warmup_epochs > 0)
            loss_warmup = double(training.training_error_history(Eigen::Index(warmup_epochs - 1)));
        const double loss_final = double(training.training_error_history(Eigen::Index(epochs - 1)));

        result.set("host_peak_rss_mib", kit::peak_rss_mib());
        kit::record_window(result, args, window, timeline, start, unix_offset, loss_warmup, loss_final);
    }
    catch (...)
    {
        kit::set_line_observer(nullptr);
        result.set("host_peak_rss_mib", kit::peak_rss_mib());
        kit::finish_now(result, std::current_exception());
    }
    kit::finish_now(result);
}

// ---------------------------------------------------------------------- throughput path

// OpenNN's throughput path, set up as its own runner sets it up (opennn_resnet50_speed.cpp at the
// pinned commit, "the runner" below) and timed the kit's way: one train() call of warm-up +
// timed epochs; the window runs from the announcement of the first timed epoch to the display of
// the last one's loss (read back from the device after the epoch's final synchronize). Under the
// window rule the warm-up and the window end where kit::WindowController says, at an epoch's
// end: setup, dataset upload, OpenNN's warm-up step and the graph capture (epoch 0) stay in the
// warm-up, before the window.
void train_resident(const kit::Args& args, kit::Json& result)
{
    using namespace opennn;

    kit::watch_for_cause("cudnn-frontend path unavailable (");
    kit::watch_for_cause("CUDA graph capture failed (");  // OpenNN then continues without graphs

    kit::Json& settings = result["settings"];
    describe_build(args, result);

    const bool cuda_graph = args.mode == "graph";
    const std::string engine_name = "opennn-" + args.mode;
    if (args.benchmark != "throughput")
        throw kit::TrialError(engine_name + " runs the throughput benchmark only (its dataset of many batches "
                              "is no max-batch candidate): use opennn-pool1 or opennn-default for maxbatch");
    if (args.device != "cuda")
        throw kit::TrialError(engine_name + " needs --device cuda: GPU-resident data and CUDA graphs are CUDA paths");
    if (const std::optional<std::string> refusal = kit::resident_side_refusal(engine_name, args.image_size))
        throw kit::TrialError(*refusal);
    // Beside the naive figure, whatever the audit says (null until the window is timed).
    result.set("opennn_figures", kit::opennn_figures_null());

    const kit::WindowRequest request = kit::window_request(args);
    kit::EpochPlan plan = kit::plan_epochs(kit::kResidentDatasetImages, args.batch, request);
    settings.set("epoch_plan", plan.json());
    kit::WindowController window(request, plan.geometry());

    // ---- configuration (the runner: set_seed, Configuration::set(CUDA, FP32|BF16)).
    Configuration::instance().set(Device::CUDA, args.precision == "bf16" ? Type::BF16 : Type::FP32);
    const Configuration::Resolved resolved = Configuration::instance().resolve();
    set_seed(static_cast<unsigned>(args.seed));
    // --cudnn-benchmark: the runner's default workspace argument "off" (conv autotune on, workspace
    // cap off). Without it the library default (heuristic plans, AUTO cap): on the H200 autotune
    // kept OpenNN's first step busy for minutes (trials/opennn/README.md), so it is the kit's choice.
    if (args.cudnn_benchmark)
    {
        device::set_conv_autotune(true);
        device::set_conv_workspace_cap(0);
    }
    else
        device::set_conv_autotune(false);
    settings.set("memory_budget_enforced", "no: OpenNN has no allocator cap (host VRAM gate only)");

    // ---- data: the whole dataset as a class-folder tree, read by ImageDataset into its image
    // cache, then kept on the GPU: train() uploads it (Optimizer::setup_device_training ->
    // ImageDataset::enable_device_residency, scaled pixels + one-hot targets as one fp32 matrix)
    // and every batch is a device-side gather.
    kit::ImageBatch data = kit::load_batch(args.dataset, args.data_dir, plan.dataset_images, args.seed, args.image_size);
    kit::Json data_info = data.info;
    data_info.set("images", plan.dataset_images);
    data_info.set("digest", kit::batch_digest(data));
    data_info.set("shape_hwc", kit::Json::array({data.side, data.side, 3}));

    kit::ImageTree tree(data);
    data = kit::ImageBatch{};  // the pixels live in OpenNN's cache (and on the GPU) from here on
    data_info.set("tree_format", tree.format());
    data_info.set("classes_in_tree", tree.classes());

    ImageDataset dataset(tree.root());
    dataset.set_display(false);
    dataset.set_sample_roles("Training");
    if (dataset.get_samples_number("Training") != plan.dataset_images)
        throw kit::TrialError("OpenNN's ImageDataset found " + std::to_string(dataset.get_samples_number("Training")) +
                              " training images, expected " + std::to_string(plan.dataset_images));
    dataset.set_storage_mode(Dataset::StorageMode::GPUPersistantData);  // the runner, line 92
    if (dataset.get_storage_mode() != Dataset::StorageMode::GPUPersistantData)
        throw kit::TrialError("ImageDataset is not in GPUPersistantData storage mode: " + dataset.get_storage_mode_string());
    data_info.set("input_shape", shape_json(dataset.get_shape("Input")));
    data_info.set("target_shape", shape_json(dataset.get_shape("Target")));
    data_info.set("storage_mode", dataset.get_storage_mode_string());
    data_info.set("normalization", "OpenNN's default image scaling (x/255), applied when the resident matrix is staged");
    tree.remove();  // the image cache stays open (pread), which is all train() reads
    data_info.set("tree_removed_after_cache_open", true);
    settings.set("data", data_info);

    // ---- model: as the runner builds it.
    ResNet network(dataset.get_shape("Input"), {3, 4, 6, 3}, Shape{64, 128, 256, 512}, dataset.get_shape("Target"),
                   /*use_bottleneck=*/true);
    result.set("parameters", static_cast<long long>(network.get_parameters_number()));
    settings.set("model_impl", "opennn::ResNet(input, {3,4,6,3}, {64,128,256,512}, target, use_bottleneck=true): "
                               "ResNet-50 v1.5, as docs/benchmarks/throughput/resnet50/opennn_resnet50_speed.cpp");
    settings.set("layers", static_cast<long long>(network.get_layers_number()));
    if (kit::fault_requested("nan"))
        network.set_parameters(VectorR::Constant(network.get_parameters_size(),
                                                 std::numeric_limits<float>::quiet_NaN()));

    // ---- training strategy: the runner's calls, plus what the kit needs to time whole epochs.
    TrainingStrategy training_strategy(&network, &dataset);
    training_strategy.set_loss("CrossEntropy");
    training_strategy.get_loss()->set_regularization("NoRegularization");
    training_strategy.set_optimization_algorithm("AdaptiveMomentEstimation");
    auto* adam = dynamic_cast<AdaptiveMomentEstimation*>(training_strategy.get_optimization_algorithm());
    if (!adam) throw kit::TrialError("OpenNN did not create an AdaptiveMomentEstimation optimizer");

    adam->set_learning_rate(kLearningRate);  // OpenNN's default too
    adam->set_batch_size(Eigen::Index(args.batch));
    adam->set_gradient_clip_norm(0.0f);
    adam->set_cuda_graph(cuda_graph);  // the runner, line 123 (on by default there)
    // Fixed counts: exactly the planned epochs. The window rule: an upper bound the window
    // controller lowers when the window closes (train() sizes its loss history by it and reads
    // it at every epoch's end, optimizer.cpp l. 869, 1096).
    const int64_t maximum_epochs = window.initial_maximum_epochs();
    adam->set_maximum_epochs(Eigen::Index(maximum_epochs));
    // Stopping only by epochs: no time limit, no loss goal (the library's defaults could stop early).
    adam->set_maximum_time(std::numeric_limits<float>::max());
    adam->set_loss_goal(-std::numeric_limits<float>::infinity());
    adam->set_display(true);  // to stderr: "Epoch: k" / "Training error: x" time the epochs
    adam->set_display_period(1);
    // Left at the library's defaults, as the runner leaves them: shuffle (on), batch workers,
    // batch pool depth, update period (1: the graph path refuses gradient accumulation),
    // restore_best (no validation set, so nothing to restore).

    kit::Json path = kit::Json::object();
    path.set("gpu_resident_data", true);
    path.set("storage_mode", "GPUPersistantData");
    path.set("cuda_graphs", adam->get_cuda_graph());
    path.set("dataset_images", plan.dataset_images);
    path.set("dataset", args.dataset);
    path.set("batch", args.batch);
    path.set("maximum_epochs", maximum_epochs);
    path.set("maximum_epochs_lowered_when_the_window_closes", maximum_epochs == kit::kEpochCap);
    path.set("epochs", plan.epochs());  // planned (a rule-decided part: its minimum); settled after training
    path.set("warmup_epochs", plan.warmup_epochs);
    path.set("timed_epochs", plan.timed_epochs);
    path.set("precision", args.precision);
    path.set("training_type", resolved.training_type == Type::BF16 ? "BF16" : "FP32");
    path.set("bf16", "Configuration Type::BF16: bf16 compute with fp32 master parameters (the Adam kernel refreshes "
                     "their bf16 mirror); the resident matrix stays fp32 and the device gather writes bf16 batches");
    path.set("conv_autotune", device::conv_autotune_enabled());
    path.set("conv_workspace_cap", args.cudnn_benchmark ? "off (autotune: --cudnn-benchmark, the runner's default)"
                                                         : "AUTO (library default; the runner autotunes)");
    path.set("shuffle", adam->get_shuffle());
    path.set("batch_workers", adam->get_workers_number());
    path.set("batch_pool_size", "library default");
    path.set("gradient_clip_norm", double(adam->get_gradient_clip_norm()));
    path.set("restore_best", adam->get_restore_best());
    path.set("builtin_cuda_warmup_step", "one training step before epoch 0, rolled back (Optimizer::warmup_device_training)");
    path.set("graph_capture", cuda_graph ? "during epoch 0 (warm-up): each 8-step group runs eagerly once, then is "
                                           "captured; later epochs replay the graphs"
                                         : "none (CUDA graphs off: the control)");
    path.set("warmup", "train() setup (buffers, dataset upload), the built-in warm-up step and the warm-up epochs "
                       "(epoch 0 captures the graphs; " + request.warmup_rule() + "): warmup_seconds");
    path.set("timing", "one train() call; window = the first timed epoch's 'Epoch: k' announced .. the last timed "
                       "epoch's 'Training error' printed (" + request.window_rule() + ", whole epochs; under the rule "
                       "decided at each epoch's end, then OpenNN's maximum_epochs is lowered so train() stops there); "
                       "images = timed epochs x steps per epoch x batch (trained images only)");
    path.set("runner_timing_difference",
             "the runner trains 2 untimed epochs in one train() call, then times a second train() call whole "
             "(its setup, dataset upload, warm-up step and graph capture included) and divides all 50,000 images "
             "(80 dropped per epoch at batch 128) by the epoch time");
    path.set("runner", "docs/benchmarks/throughput/resnet50/opennn_resnet50_speed.cpp @ OpenNN " KIT_OPENNN_COMMIT);
    path.set("march", KIT_OPENNN_MARCH);
    path.set("lto", KIT_OPENNN_LTO);
    path.set("environment", opennn_environment());
    settings.set("opennn", path);

    settings.set("optimizer", optimizer_settings(*adam, args.batch));
    settings.set("loss", "cross_entropy");

    kit::fault_point();

    // ---- train. The observer books graph launches to the epoch announced last and notes that
    // the dataset is on the GPU when the first timed epoch starts (train() releases it at the end).
    kit::EpochTimeline timeline;
    bool resident_in_window = false;
    kit::graph_audit().reset();
    kit::EpochLineFeed feed(
        timeline, window,
        [&](int64_t epoch) {
            kit::graph_audit().begin_epoch(epoch);
            // The warm-up's end was decided at the previous epoch's end: is this the first timed one?
            if (window.warmup_epochs() && epoch == *window.warmup_epochs())
                resident_in_window = dataset.is_device_resident();
        },
        [adam](int64_t epoch) { adam->set_maximum_epochs(Eigen::Index(epoch + 1)); });
    kit::set_line_observer([&feed](std::string_view line, kit::Clock::time_point when) { feed.on_line(line, when); });
    try
    {
        const double unix_offset = kit::unix_offset_now();
        const kit::Clock::time_point start = kit::Clock::now();
        const TrainingResult training = training_strategy.train();
        const double train_seconds = std::chrono::duration<double>(kit::Clock::now() - start).count();
        kit::set_line_observer(nullptr);
        memory_debug::print(std::cerr);

        const Eigen::Index done = training.get_epochs_number();
        settings.set("opennn_stopping_condition", training.write_stopping_condition());
        settings.set("train_seconds", train_seconds);
        if (!window.done()) throw kit::TrialError(kit::window_not_closed(window, int64_t(done)));
        plan.settle(window);
        settings.set("epoch_plan", plan.json());
        settings["opennn"].set("epochs", plan.epochs());
        settings["opennn"].set("warmup_epochs", plan.warmup_epochs);
        settings["opennn"].set("timed_epochs", plan.timed_epochs);
        if (done != plan.epochs())
            throw kit::TrialError("OpenNN trained " + std::to_string(done) + " of " + std::to_string(plan.epochs()) +
                                  " epochs (stopping condition: " + training.write_stopping_condition() + ")");

        kit::Json epochs = kit::Json::array();
        for (int64_t e = 0; e < plan.epochs(); ++e)
        {
            kit::Json row = kit::Json::object();
            row.set("epoch", e);
            row.set("timed", e >= plan.warmup_epochs);
            const auto s = timeline.started(e), f = timeline.finished(e);
            row.set("seconds", s && f ? kit::Json(std::chrono::duration<double>(*f - *s).count()) : kit::Json());
            row.set("training_error", double(training.training_error_history(Eigen::Index(e))));
            epochs.push_back(row);
        }
        settings.set("epochs", epochs);
        settings["opennn"].set("dataset_on_gpu_at_first_timed_epoch", resident_in_window);

        const kit::GraphAudit::Window audit =
            kit::graph_audit().window(plan.warmup_epochs, plan.epochs() - 1, plan.steps_per_graph());
        kit::Json audit_info = kit::audit_json(audit, plan, cuda_graph);
        audit_info.set("graphs", kit::graph_audit().json());
        settings.set("cuda_graph_audit", audit_info);

        const double loss_warmup = double(training.training_error_history(Eigen::Index(plan.warmup_epochs - 1)));
        const double loss_final = double(training.training_error_history(Eigen::Index(plan.epochs() - 1)));
        result.set("host_peak_rss_mib", kit::peak_rss_mib());
        kit::record_window(result, args, window, timeline, start, unix_offset, loss_warmup, loss_final);
        // The corrected figures beside the naive one (kit_resident.h: opennn_figures), set before
        // the audit's verdict so a refused run carries them too.
        const int64_t train_epochs = int64_t(done);
        result.set("opennn_figures",
                   kit::opennn_figures_json(kit::opennn_figures(audit, plan, cuda_graph, window.window_seconds(),
                                                                train_seconds, train_epochs)));
        settings.set("opennn_figures", kit::opennn_figures_inputs(audit, plan, cuda_graph, window.window_seconds(),
                                                                  train_seconds, train_epochs));

        // Checked last, so a refused run still carries every figure above.
        if (!resident_in_window)
            throw kit::TrialError("the dataset was not resident on the GPU when the timed epochs started");
        if (const std::optional<std::string> failure = kit::audit_failure(audit, plan, cuda_graph))
            throw kit::TrialError(*failure);
    }
    catch (...)
    {
        kit::set_line_observer(nullptr);
        result.set("host_peak_rss_mib", kit::peak_rss_mib());
        kit::finish_now(result, std::current_exception());
    }
    kit::finish_now(result);
}

}  // namespace

int main(int argc, char** argv)
{
    const kit::Engine engine{{"pool1", "default", "graph", "resident"},
                             [](const std::string& mode) { return "opennn-" + mode; }};
    const auto body = [](const kit::Args& args, kit::Json& result) {
        if (args.mode == "graph" || args.mode == "resident")
            train_resident(args, result);
        else
            train_opennn(args, result);
    };
    // Failures before training come back here; skip static destructors (CUDA/cuDNN teardown).
    kit::exit_now(kit::run(argc, argv, engine, body));
}
