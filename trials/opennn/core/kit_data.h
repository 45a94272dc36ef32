// kit_data: the batch a trial trains on, and the class-folder image tree OpenNN's ImageDataset
// reads it from.
//
// Data (same rules as kittrial.load_data): `batch` N x N x 3 uint8 images in HWC order
// (N = --image-size: 32 is CIFAR-10's geometry, 224 ImageNet's) with labels 0..9, either
//   synthetic  splitmix64(seed) bytes (documented below; not numpy's generator), labels i mod 10
//   cifar10    (N = 32 only) the first `batch` training records in file order from the binary layout
//              (cifar-10-batches-bin/data_batch_N.bin; --data-dir is that folder or its parent),
//              record i = dataset[i % size] when the dataset is smaller. The python (pickle)
//              layout is refused with one line.
//
// Image tree: <tmp>/kit-opennn-XXXXXX/c<label>/<index, 9 digits>.bmp, 24-bit uncompressed BMP
// (BITMAPINFOHEADER, bottom-up rows, BGR): a lossless format OpenNN decodes itself
// (image_processing.cpp: BMP 8/24/32-bit with a 40-byte header, PNG, JPEG). Only classes that
// occur get a folder, because OpenNN ignores empty ones.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kit_error.h"
#include "kit_json.h"

namespace kit
{

// CIFAR-10's geometry (the default side, and the only one --dataset cifar10 has).
inline constexpr int kImageHeight = 32;
inline constexpr int kImageWidth = 32;
inline constexpr int kImageChannels = 3;
inline constexpr int kImageBytes = kImageHeight * kImageWidth * kImageChannels;
inline constexpr int kNumClasses = 10;

struct ImageBatch
{
    int64_t count = 0;
    int side = kImageHeight;      // images are side x side x 3
    std::vector<uint8_t> pixels;  // count x side x side x 3, HWC, RGB
    std::vector<int> labels;      // count, each 0..9
    Json info = Json::object();   // for result.settings.data

    int64_t image_bytes() const { return int64_t(side) * side * kImageChannels; }
    const uint8_t* image(int64_t i) const { return pixels.data() + i * image_bytes(); }
};

// splitmix64 (Steele, Lea, Flood 2014), the generator behind --dataset synthetic.
struct SplitMix64
{
    uint64_t state;
    explicit SplitMix64(uint64_t seed) : state(seed) {}
    uint64_t next();
};

// Synthetic batch: state = uint64(seed); the pixel bytes, image after image in HWC order, are
// the little-endian bytes of successive next() values (8 per draw); label i = i mod 10.
ImageBatch synthetic_batch(int64_t count, int64_t seed, int side = kImageHeight);

// The CIFAR-10 batch; throws TrialError with one clear line on any problem.
ImageBatch load_cifar10(const std::string& data_dir, int64_t count);

// The batch a trial trains on: --dataset cifar10 (needs data_dir; side 32 only, else a
// TrialError) or synthetic from the seed at side x side.
ImageBatch load_batch(const std::string& dataset, const std::optional<std::string>& data_dir, int64_t count,
                      int64_t seed, int64_t side = kImageHeight);

// The sides the OpenNN trial's one-batch modes (maxbatch; throughput pool1/default) run: 32
// (CIFAR-10's geometry) and 224 (ImageNet's). OpenNN's ImageDataset takes its input shape from
// the first image it reads, so the tree is simply written at that side. The message for others.
bool batch_side_supported(int64_t side);
std::string unsupported_side(const std::string& engine, int64_t side);

// 64-bit FNV-1a over the pixels, then the labels as bytes: a fingerprint the tests compare
// with one computed in Python on kittrial's arrays.
std::string batch_digest(const ImageBatch& batch);

// One HWC RGB image as a complete 24-bit BMP file.
std::vector<uint8_t> encode_bmp24(const uint8_t* hwc_rgb, int height, int width);

// Decodes what encode_bmp24 writes (and only that), the way OpenNN's decode_bmp_pixels reads
// it, back to HWC RGB; throws std::runtime_error on anything else. For tests and self-checks.
std::vector<uint8_t> decode_bmp24(const std::vector<uint8_t>& file, int& height, int& width);

// Where the tree keeps image `index` of class `label`: root/c<label>/<index, 9 digits>.bmp.
std::filesystem::path image_path(const std::filesystem::path& root, int label, int64_t index);

// The class-folder tree of one batch, removed by the destructor, by remove(), and (while it is
// being written and read into the dataset's cache) by a SIGTERM/SIGINT/SIGHUP handler that
// uses only async-signal-safe calls before the signal's default action runs.
class ImageTree
{
public:
    // Writes the tree under `parent` (default: std::filesystem::temp_directory_path(), i.e.
    // $TMPDIR or /tmp).
    explicit ImageTree(const ImageBatch& batch, const std::filesystem::path& parent = {});
    ~ImageTree();

    ImageTree(const ImageTree&) = delete;
    ImageTree& operator=(const ImageTree&) = delete;

    const std::filesystem::path& root() const { return root_; }
    int classes() const { return classes_; }
    std::string format() const { return "bmp (24-bit BGR, uncompressed, lossless)"; }

    // Deletes the tree now (idempotent). Safe once OpenNN has opened its image cache: the open
    // file stays readable after its name is gone.
    void remove() noexcept;

    // The signal handler's removal, exposed for tests: unlinks every file the tree can hold
    // and removes its folders using only async-signal-safe calls.
    void remove_signal_safe() const noexcept;

private:
    std::filesystem::path root_;
    std::vector<int> labels_;
    int classes_ = 0;
    bool removed_ = false;
};

}  // namespace kit
