#include "kit_data.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <stdexcept>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

namespace fs = std::filesystem;

namespace kit
{

// ------------------------------------------------------------------------------- synthetic

uint64_t SplitMix64::next()
{
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

ImageBatch synthetic_batch(int64_t count, int64_t seed, int side)
{
    ImageBatch b;
    b.count = count;
    b.side = side;
    b.pixels.resize(size_t(count) * size_t(b.image_bytes()));
    b.labels.resize(size_t(count));
    SplitMix64 rng(static_cast<uint64_t>(seed));
    for (size_t i = 0; i < b.pixels.size(); i += 8)
    {
        uint64_t v = rng.next();
        for (size_t k = 0; k < 8 && i + k < b.pixels.size(); ++k, v >>= 8)
            b.pixels[i + k] = uint8_t(v & 0xFF);
    }
    for (int64_t i = 0; i < count; ++i) b.labels[size_t(i)] = int(i % kNumClasses);
    b.info = Json::object();
    b.info.set("name", "synthetic");
    b.info.set("generator", "splitmix64(seed): pixel bytes (HWC, image after image) are the "
                            "little-endian bytes of successive 64-bit draws; label i = i mod 10");
    b.info.set("image_size", side);
    return b;
}

// ---------------------------------------------------------------------------------- CIFAR-10

namespace
{

constexpr int64_t kRecordBytes = 1 + kImageBytes;
const char* const kBinDir = "cifar-10-batches-bin";
const char* const kPyDir = "cifar-10-batches-py";

bool is_file(const fs::path& p)
{
    std::error_code ec;
    return fs::is_regular_file(p, ec);
}

}  // namespace

ImageBatch load_cifar10(const std::string& data_dir_text, int64_t count)
{
    const fs::path data_dir(data_dir_text);
    fs::path folder;
    std::string layout;
    for (const fs::path& candidate : {data_dir, data_dir / kBinDir, data_dir / kPyDir})
    {
        if (is_file(candidate / "data_batch_1.bin")) { folder = candidate; layout = "bin"; break; }
        if (is_file(candidate / "data_batch_1")) { folder = candidate; layout = "py"; break; }
    }
    if (layout.empty())
        throw TrialError("CIFAR-10 not found in " + data_dir.string() + ": expected " + kBinDir +
                         "/data_batch_1.bin or " + kPyDir +
                         "/data_batch_1 there or in a subfolder of that name");
    if (layout == "py")
        throw TrialError(folder.string() + ": the CIFAR-10 python (pickle) layout is not read by the "
                         "C++ trial; point --data-dir at the binary version (" + kBinDir + ")");

    std::vector<uint8_t> chw;  // records as read: CHW pixels
    std::vector<int> labels;
    Json files = Json::array();
    int64_t have = 0;
    for (int k = 1; k <= 5; ++k)
    {
        const fs::path path = folder / ("data_batch_" + std::to_string(k) + ".bin");
        if (have >= count || !is_file(path)) break;
        std::error_code ec;
        const uintmax_t size = fs::file_size(path, ec);
        if (ec)
            throw TrialError("cannot read CIFAR-10 from " + folder.string() + ": " + path.string() +
                             ": " + ec.message());
        if (size == 0 || size % kRecordBytes)
            throw TrialError(path.string() + ": size " + std::to_string(size) +
                             " is not a multiple of " + std::to_string(kRecordBytes) + "-byte records");
        const int64_t take = std::min<int64_t>(count - have, int64_t(size) / kRecordBytes);
        std::vector<uint8_t> raw(size_t(take * kRecordBytes));
        std::ifstream in(path, std::ios::binary);
        if (!in.read(reinterpret_cast<char*>(raw.data()), std::streamsize(raw.size())))
            throw TrialError("cannot read CIFAR-10 from " + folder.string() + ": " + path.string() +
                             ": short read");
        for (int64_t r = 0; r < take; ++r)
        {
            const uint8_t* rec = raw.data() + r * kRecordBytes;
            labels.push_back(rec[0]);
            chw.insert(chw.end(), rec + 1, rec + kRecordBytes);
        }
        files.push_back(path.filename().string());
        have += take;
    }
    if (have == 0) throw TrialError(folder.string() + ": CIFAR-10 batches hold no records");
    for (int label : labels)
        if (label < 0 || label >= kNumClasses)
            throw TrialError(folder.string() + ": labels outside 0.." + std::to_string(kNumClasses - 1));

    ImageBatch b;
    b.count = count;
    b.pixels.resize(size_t(count) * kImageBytes);
    b.labels.resize(size_t(count));
    const int plane = kImageHeight * kImageWidth;
    for (int64_t i = 0; i < count; ++i)
    {
        const int64_t src = i % have;  // wrap: record i = dataset[i % size]
        b.labels[size_t(i)] = labels[size_t(src)];
        const uint8_t* in = chw.data() + src * kImageBytes;
        uint8_t* out = b.pixels.data() + i * kImageBytes;
        for (int p = 0; p < plane; ++p)
            for (int c = 0; c < kImageChannels; ++c)
                out[p * kImageChannels + c] = in[c * plane + p];  // stored CHW -> HWC
    }
    b.info = Json::object();
    b.info.set("name", "cifar10");
    b.info.set("folder", folder.string());
    b.info.set("layout", layout);
    b.info.set("files", files);
    b.info.set("records_read", have);
    b.info.set("wrapped", have < count);
    b.info.set("image_size", kImageHeight);
    return b;
}

std::string batch_digest(const ImageBatch& batch)
{
    uint64_t h = 0xCBF29CE484222325ull;
    auto add = [&](uint8_t byte) { h = (h ^ byte) * 0x100000001B3ull; };
    for (uint8_t p : batch.pixels) add(p);
    for (int label : batch.labels) add(uint8_t(label));
    char buf[32];
    std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", (unsigned long long)h);
    return buf;
}

// --------------------------------------------------------------------------------------- BMP

namespace
{

void put16(std::vector<uint8_t>& out, size_t at, uint32_t v)
{
    out[at] = uint8_t(v);
    out[at + 1] = uint8_t(v >> 8);
}

void put32(std::vector<uint8_t>& out, size_t at, uint32_t v)
{
    for (int k = 0; k < 4; ++k) out[at + size_t(k)] = uint8_t(v >> (8 * k));
}

uint32_t get32(const std::vector<uint8_t>& in, size_t at)
{
    return uint32_t(in[at]) | uint32_t(in[at + 1]) << 8 | uint32_t(in[at + 2]) << 16 | uint32_t(in[at + 3]) << 24;
}

}  // namespace

std::vector<uint8_t> encode_bmp24(const uint8_t* hwc, int height, int width)
{
    const uint32_t stride = (uint32_t(width) * 3 + 3) / 4 * 4;
    const uint32_t image_bytes = stride * uint32_t(height);
    const uint32_t offset = 14 + 40;
    std::vector<uint8_t> f(offset + image_bytes, 0);
    f[0] = 'B';
    f[1] = 'M';
    put32(f, 2, offset + image_bytes);  // file size
    put32(f, 10, offset);               // bfOffBits
    put32(f, 14, 40);                   // BITMAPINFOHEADER
    put32(f, 18, uint32_t(width));
    put32(f, 22, uint32_t(height));     // positive: bottom-up rows
    put16(f, 26, 1);                    // planes
    put16(f, 28, 24);                   // bits per pixel
    put32(f, 30, 0);                    // BI_RGB, no compression
    put32(f, 34, image_bytes);
    put32(f, 38, 2835);                 // 72 dpi
    put32(f, 42, 2835);
    for (int y = 0; y < height; ++y)
    {
        const uint8_t* src = hwc + size_t(height - 1 - y) * size_t(width) * 3;  // bottom row first
        uint8_t* dst = f.data() + offset + size_t(y) * stride;
        for (int x = 0; x < width; ++x)
        {
            dst[3 * x + 0] = src[3 * x + 2];  // B
            dst[3 * x + 1] = src[3 * x + 1];  // G
            dst[3 * x + 2] = src[3 * x + 0];  // R
        }
    }
    return f;
}

std::vector<uint8_t> decode_bmp24(const std::vector<uint8_t>& f, int& height, int& width)
{
    if (f.size() < 54 || f[0] != 'B' || f[1] != 'M' || get32(f, 14) != 40)
        throw std::runtime_error("not a BMP with a 40-byte info header");
    const int32_t w = int32_t(get32(f, 18));
    const int32_t h_signed = int32_t(get32(f, 22));
    const uint32_t bits = get32(f, 28) & 0xFFFF;
    if (w <= 0 || h_signed == 0 || bits != 24 || get32(f, 30) != 0)
        throw std::runtime_error("unsupported BMP");
    const int32_t h = h_signed < 0 ? -h_signed : h_signed;
    const bool top_down = h_signed < 0;
    const uint32_t offset = get32(f, 10);
    const size_t stride = (size_t(w) * 3 + 3) / 4 * 4;
    if (offset + stride * size_t(h) > f.size()) throw std::runtime_error("BMP pixel data exceeds file");
    std::vector<uint8_t> out(size_t(w) * size_t(h) * 3);
    for (int32_t y = 0; y < h; ++y)
    {
        const int32_t ty = top_down ? y : h - 1 - y;
        const uint8_t* row = f.data() + offset + size_t(y) * stride;
        for (int32_t x = 0; x < w; ++x)
        {
            uint8_t* px = out.data() + (size_t(ty) * size_t(w) + size_t(x)) * 3;
            px[0] = row[3 * x + 2];
            px[1] = row[3 * x + 1];
            px[2] = row[3 * x + 0];
        }
    }
    height = h;
    width = w;
    return out;
}

// ---------------------------------------------------------------------------------- the tree

namespace
{

const ImageTree* g_signal_tree = nullptr;
struct sigaction g_previous[3];
const int kCleanupSignals[3] = {SIGTERM, SIGINT, SIGHUP};

void cleanup_and_reraise(int sig)
{
    if (const ImageTree* tree = g_signal_tree) tree->remove_signal_safe();
    for (int k = 0; k < 3; ++k)
        if (kCleanupSignals[k] == sig) sigaction(sig, &g_previous[k], nullptr);
    // The previous disposition runs now (normally: terminate by this signal).
    raise(sig);
}

void install_cleanup(const ImageTree* tree)
{
    g_signal_tree = tree;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = cleanup_and_reraise;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    for (int k = 0; k < 3; ++k) sigaction(kCleanupSignals[k], &sa, &g_previous[k]);
}

void uninstall_cleanup(const ImageTree* tree)
{
    if (g_signal_tree != tree) return;
    for (int k = 0; k < 3; ++k) sigaction(kCleanupSignals[k], &g_previous[k], nullptr);
    g_signal_tree = nullptr;
}

std::string class_dir(int label)
{
    char buf[16];
    std::snprintf(buf, sizeof buf, "c%d", label);
    return buf;
}


// Async-signal-safe path building: appends to a fixed buffer, no allocation.
struct PathBuf
{
    char data[4096];
    size_t len = 0;
    bool ok = true;
    void append(const char* s)
    {
        for (; *s; ++s)
        {
            if (len + 1 >= sizeof data) { ok = false; return; }
            data[len++] = *s;
        }
        data[len] = '\0';
    }
    void append_uint(unsigned long long v, int min_digits)
    {
        char tmp[24];
        int n = 0;
        do { tmp[n++] = char('0' + v % 10); v /= 10; } while (v);
        while (n < min_digits) tmp[n++] = '0';
        char out[24];
        for (int k = 0; k < n; ++k) out[k] = tmp[n - 1 - k];
        out[n] = '\0';
        append(out);
    }
};

}  // namespace

fs::path image_path(const fs::path& root, int label, int64_t index)
{
    char name[32];
    std::snprintf(name, sizeof name, "%09lld.bmp", (long long)index);
    return root / class_dir(label) / name;
}

ImageTree::ImageTree(const ImageBatch& batch, const fs::path& parent_in)
    : labels_(batch.labels)
{
    const fs::path parent = parent_in.empty() ? fs::temp_directory_path() : parent_in;
    std::string templ = (parent / "kit-opennn-XXXXXX").string();
    if (!mkdtemp(templ.data()))
        throw TrialError("cannot create the image tree under " + parent.string() + ": " + std::strerror(errno));
    root_ = templ;
    install_cleanup(this);

    try
    {
        bool used[kNumClasses] = {};
        for (int label : labels_) used[label] = true;
        for (int c = 0; c < kNumClasses; ++c)
            if (used[c])
            {
                fs::create_directory(root_ / class_dir(c));
                ++classes_;
            }
        for (int64_t i = 0; i < batch.count; ++i)
        {
            const std::vector<uint8_t> bmp = encode_bmp24(batch.image(i), batch.side, batch.side);
            const fs::path path = image_path(root_, batch.labels[size_t(i)], i);
            FILE* f = std::fopen(path.c_str(), "wb");
            const bool written = f && std::fwrite(bmp.data(), 1, bmp.size(), f) == bmp.size();
            const int saved_errno = errno;
            if (f && std::fclose(f) != 0 && written)
                throw TrialError("cannot write " + path.string() + ": " + std::strerror(errno));
            if (!written)
                throw TrialError("cannot write " + path.string() + ": " + std::strerror(saved_errno));
        }
    }
    catch (...)
    {
        remove();
        throw;
    }
}

ImageTree::~ImageTree() { remove(); }

void ImageTree::remove() noexcept
{
    if (removed_) return;
    removed_ = true;
    uninstall_cleanup(this);
    std::error_code ec;
    fs::remove_all(root_, ec);
    if (ec) std::fprintf(stderr, "kit: could not remove %s: %s\n", root_.c_str(), ec.message().c_str());
}

void ImageTree::remove_signal_safe() const noexcept
{
    const std::string& root = root_.native();
    // Images.
    for (size_t i = 0; i < labels_.size(); ++i)
    {
        PathBuf p;
        p.append(root.c_str());
        p.append("/c");
        p.append_uint((unsigned long long)labels_[i], 1);
        p.append("/");
        p.append_uint(i, 9);
        p.append(".bmp");
        if (p.ok) unlink(p.data);
    }
    // OpenNN's image cache (ImageDataset: <data_path>/.cache/images.bin, written via .tmp).
    for (const char* leaf : {"/.cache/images.bin", "/.cache/images.bin.tmp"})
    {
        PathBuf p;
        p.append(root.c_str());
        p.append(leaf);
        if (p.ok) unlink(p.data);
    }
    // Folders, deepest first.
    {
        PathBuf p;
        p.append(root.c_str());
        p.append("/.cache");
        if (p.ok) rmdir(p.data);
    }
    for (int c = 0; c < kNumClasses; ++c)
    {
        PathBuf p;
        p.append(root.c_str());
        p.append("/c");
        p.append_uint((unsigned long long)c, 1);
        if (p.ok) rmdir(p.data);
    }
    rmdir(root.c_str());
}

ImageBatch load_batch(const std::string& dataset, const std::optional<std::string>& data_dir, int64_t count,
                      int64_t seed, int64_t side)
{
    if (dataset != "cifar10") return synthetic_batch(count, seed, int(side));
    if (side != kImageHeight)
        throw TrialError("--dataset cifar10 has 32x32 images: --image-size " + std::to_string(side) +
                         " needs --dataset synthetic");
    if (!data_dir) throw TrialError("--dataset cifar10 needs --data-dir");
    return load_cifar10(*data_dir, count);
}

bool batch_side_supported(int64_t side) { return side == 32 || side == 224; }

std::string unsupported_side(const std::string& engine, int64_t side)
{
    return engine + " runs --image-size 32 (CIFAR-10's geometry) or 224 (ImageNet's), got " + std::to_string(side);
}

}  // namespace kit
