#include "kit_args.h"

#include "kit_json.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <sstream>

namespace kit
{

namespace
{

struct Option
{
    std::string name;                  // "--batch"
    std::string metavar;               // "BATCH"; empty for a flag without a value
    std::vector<std::string> choices;  // empty: any value
    bool required = false;
    // Stores the value; returns an error message ("" = fine).
    std::function<std::string(Args&, const std::string&)> store;
};

// Python's int(): surrounding whitespace, an optional sign, digits with single underscores
// between them. Returns false on anything else or on overflow.
bool python_int(const std::string& text, int64_t& value)
{
    size_t b = 0, e = text.size();
    while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
    bool negative = false;
    if (b < e && (text[b] == '+' || text[b] == '-')) negative = text[b++] == '-';
    if (b == e) return false;
    unsigned long long magnitude = 0;
    bool last_digit = false;
    for (size_t i = b; i < e; ++i)
    {
        const char c = text[i];
        if (c == '_')
        {
            if (!last_digit || i + 1 == e) return false;
            last_digit = false;
            continue;
        }
        if (c < '0' || c > '9') return false;
        const unsigned digit = unsigned(c - '0');
        if (magnitude > (std::numeric_limits<unsigned long long>::max() - digit) / 10) return false;
        magnitude = magnitude * 10 + digit;
        last_digit = true;
    }
    const unsigned long long limit = negative
        ? (unsigned long long)std::numeric_limits<int64_t>::max() + 1
        : (unsigned long long)std::numeric_limits<int64_t>::max();
    if (magnitude > limit) return false;
    value = negative ? (int64_t)(0 - magnitude) : (int64_t)magnitude;
    return true;
}

// Python's float(): surrounding whitespace, an optional sign, a decimal or exponent literal with
// single underscores between digits, or inf/infinity/nan in any case. Hexadecimal (which strtod
// takes and Python's float() does not) is refused.
bool python_float(const std::string& text, double& value)
{
    size_t b = 0, e = text.size();
    while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
    if (b == e) return false;
    std::string plain;
    for (size_t i = b; i < e; ++i)
    {
        const char c = text[i];
        if (c == 'x' || c == 'X' || c == 'p' || c == 'P') return false;
        if (c == '_')
        {
            const bool digit_before = i > b && std::isdigit(static_cast<unsigned char>(text[i - 1]));
            const bool digit_after = i + 1 < e && std::isdigit(static_cast<unsigned char>(text[i + 1]));
            if (!digit_before || !digit_after) return false;
            continue;
        }
        plain += c;
    }
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(plain.c_str(), &end);
    if (end != plain.c_str() + plain.size()) return false;
    // strtod's ERANGE on underflow still returns the (tiny or zero) value Python returns;
    // on overflow both give inf.
    value = v;
    return true;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// kittrial._positive_int / _non_negative_int: the message argparse shows after "argument X: ".
std::string bounded_int(const std::string& text, int64_t minimum, int64_t& out)
{
    int64_t value = 0;
    if (!python_int(text, value) || value < minimum)
        return std::string("must be an integer >= ") + std::to_string(minimum) + ", got " + quoted(text);
    out = value;
    return "";
}

// A finite number in [low, high] ((low, high] when low_open): kittrial._float_in's message.
std::string ranged_float(const std::string& text, double low, double high, bool low_open, double& out)
{
    double value = 0;
    if (!python_float(text, value) || !std::isfinite(value) || value > high || (low_open ? value <= low : value < low))
        return std::string("must be a number ") + (low_open ? "> " : ">= ") + json_number(low) + " and <= " +
               json_number(high) + ", got " + quoted(text);
    out = value;
    return "";
}

std::vector<Option> options(const std::vector<std::string>& modes)
{
    std::vector<Option> o;
    auto choice = [](std::string Args::*field) {
        return [field](Args& a, const std::string& v) { a.*field = v; return std::string(); };
    };
    auto at_least = [](std::optional<int64_t> Args::*field, int64_t minimum) {
        return [field, minimum](Args& a, const std::string& v) {
            int64_t x = 0;
            std::string err = bounded_int(v, minimum, x);
            if (err.empty()) a.*field = x;
            return err;
        };
    };
    o.push_back({"--benchmark", "", {"maxbatch", "throughput"}, true, choice(&Args::benchmark)});
    o.push_back({"--batch", "BATCH", {}, true,
                 [](Args& a, const std::string& v) { return bounded_int(v, 1, a.batch); }});
    o.push_back({"--precision", "", {"fp32", "bf16"}, false, choice(&Args::precision)});
    o.push_back({"--mode", "", modes, true, choice(&Args::mode)});
    o.push_back({"--model", "", {"resnet50"}, false, choice(&Args::model)});
    o.push_back({"--dataset", "", {"synthetic", "cifar10"}, false, choice(&Args::dataset)});
    o.push_back({"--data-dir", "DATA_DIR", {}, false,
                 [](Args& a, const std::string& v) { a.data_dir = v; return std::string(); }});
    o.push_back({"--memory-budget-mib", "MEMORY_BUDGET_MIB", {}, false, at_least(&Args::memory_budget_mib, 1)});
    o.push_back({"--device", "", {"cuda", "cpu"}, false, choice(&Args::device)});
    o.push_back({"--seed", "SEED", {}, false,
                 [](Args& a, const std::string& v) {
                     int64_t x = 0;
                     if (!python_int(v, x)) return "invalid int value: " + quoted(v);
                     a.seed = x;
                     return std::string();
                 }});
    o.push_back({"--warmup-steps", "WARMUP_STEPS", {}, false, at_least(&Args::warmup_steps, 0)});
    o.push_back({"--steps", "STEPS", {}, false, at_least(&Args::steps, 1)});
    o.push_back({"--cudnn-benchmark", "", {}, false, nullptr});  // store_true
    o.push_back({"--image-size", "IMAGE_SIZE", {}, false, [](Args& a, const std::string& v) {
                     int64_t x = 0;
                     std::string err = bounded_int(v, 1, x);
                     if (err.empty() && (x < kMinImageSize || x > kMaxImageSize))
                         err = "must be between " + std::to_string(kMinImageSize) + " and " +
                               std::to_string(kMaxImageSize) + " pixels, got " + quoted(v);
                     if (err.empty()) a.image_size = x;
                     return err;
                 }});
    o.push_back({"--window-images", "WINDOW_IMAGES", {}, false, at_least(&Args::window_images, 1)});
    o.push_back({"--window-seconds", "WINDOW_SECONDS", {}, false,
                 [](Args& a, const std::string& v) {
                     double x = 0;
                     std::string err = ranged_float(v, 0, kMaxSeconds, true, x);
                     if (err.empty()) a.window_seconds = x;
                     return err;
                 }});
    o.push_back({"--steady-tolerance", "STEADY_TOLERANCE", {}, false,
                 [](Args& a, const std::string& v) { return ranged_float(v, 0, 1, true, a.steady_tolerance); }});
    o.push_back({"--max-warmup-seconds", "MAX_WARMUP_SECONDS", {}, false, [](Args& a, const std::string& v) {
                     double x = 0;
                     std::string err = ranged_float(v, 0, kMaxSeconds, false, x);
                     if (err.empty()) a.max_warmup_seconds = x;
                     return err;
                 }});
    // Options with choices show them as the metavar, as argparse does.
    for (Option& opt : o)
        if (opt.metavar.empty() && !opt.choices.empty())
        {
            std::string m = "{";
            for (size_t i = 0; i < opt.choices.size(); ++i) m += (i ? "," : "") + opt.choices[i];
            opt.metavar = m + "}";
        }
    return o;
}

bool takes_value(const Option& o) { return o.name != "--cudnn-benchmark"; }

// argparse: "-5" or "-.5" is a value, not an option, when no option looks like a number.
bool looks_negative_number(const std::string& s)
{
    if (s.size() < 2 || s[0] != '-') return false;
    size_t i = 1;
    bool digits = false, dot = false;
    for (; i < s.size(); ++i)
    {
        if (std::isdigit(static_cast<unsigned char>(s[i]))) digits = true;
        else if (s[i] == '.' && !dot) dot = true;
        else return false;
    }
    return digits;
}

bool is_option_token(const std::string& s)
{
    return s.size() > 1 && s[0] == '-' && !looks_negative_number(s);
}

}  // namespace

std::string usage(const std::string& program, const std::vector<std::string>& modes)
{
    std::ostringstream u;
    u << "usage: " << program << " [-h]";
    for (const Option& o : options(modes))
    {
        std::string part = o.name + (takes_value(o) ? " " + o.metavar : "");
        u << " " << (o.required ? part : "[" + part + "]");
    }
    u << "\n\nkitctl trial: runs one candidate, prints one KIT-RESULT line\n";
    return u.str();
}

ParseResult parse_args(const std::vector<std::string>& argv, const std::vector<std::string>& modes)
{
    ParseResult r;
    const std::vector<Option> opts = options(modes);
    std::vector<bool> seen(opts.size(), false);
    std::vector<std::string> extras;

    auto fail = [&](std::string message) {
        r.ok = false;
        r.error = std::move(message);
        return r;
    };

    for (size_t i = 0; i < argv.size(); ++i)
    {
        const std::string& token = argv[i];
        if (token == "--")
        {
            extras.insert(extras.end(), argv.begin() + long(i) + 1, argv.end());
            break;
        }
        if (!is_option_token(token))
        {
            extras.push_back(token);
            continue;
        }

        std::string name = token;
        std::optional<std::string> inline_value;
        if (const size_t eq = token.find('='); eq != std::string::npos && token.rfind("--", 0) == 0)
        {
            name = token.substr(0, eq);
            inline_value = token.substr(eq + 1);
        }

        // Exact name, else a unique prefix (argparse allow_abbrev); --help takes part too.
        const bool is_help = name == "-h" || name == "--help"
            || (name.size() > 2 && std::string("--help").rfind(name, 0) == 0
                && std::none_of(opts.begin(), opts.end(),
                                [&](const Option& o) { return o.name.rfind(name, 0) == 0; }));
        if (is_help)
        {
            r.help = true;
            r.ok = true;
            return r;
        }

        int match = -1;
        for (size_t k = 0; k < opts.size(); ++k)
            if (opts[k].name == name) match = int(k);
        if (match < 0 && name.rfind("--", 0) == 0 && name.size() > 2)
        {
            std::vector<std::string> names;
            for (size_t k = 0; k < opts.size(); ++k)
                if (opts[k].name.rfind(name, 0) == 0)
                {
                    names.push_back(opts[k].name);
                    match = int(k);
                }
            if (std::string("--help").rfind(name, 0) == 0) names.insert(names.begin(), "--help");
            if (names.size() > 1)
            {
                std::string list;
                for (size_t c = 0; c < names.size(); ++c) list += (c ? ", " : "") + names[c];
                return fail("ambiguous option: " + name + " could match " + list);
            }
        }
        if (match < 0)
        {
            extras.push_back(token);
            continue;
        }

        const Option& opt = opts[size_t(match)];
        seen[size_t(match)] = true;
        if (!takes_value(opt))
        {
            if (inline_value)
                return fail("argument " + opt.name + ": ignored explicit argument " + quoted(*inline_value));
            r.args.cudnn_benchmark = true;
            continue;
        }

        std::string value;
        if (inline_value)
            value = *inline_value;
        else if (i + 1 < argv.size() && !is_option_token(argv[i + 1]) && argv[i + 1] != "--")
            value = argv[++i];
        else
            return fail("argument " + opt.name + ": expected one argument");

        if (!opt.choices.empty())
        {
            bool valid = false;
            for (const std::string& c : opt.choices) valid = valid || c == value;
            if (!valid)
            {
                std::string list;
                for (size_t c = 0; c < opt.choices.size(); ++c) list += (c ? ", " : "") + quoted(opt.choices[c]);
                return fail("argument " + opt.name + ": invalid choice: " + quoted(value) + " (choose from " + list + ")");
            }
        }
        if (std::string err = opt.store(r.args, value); !err.empty())
            return fail("argument " + opt.name + ": " + err);
    }

    std::string missing;
    for (size_t k = 0; k < opts.size(); ++k)
        if (opts[k].required && !seen[k]) missing += (missing.empty() ? "" : ", ") + opts[k].name;
    if (!missing.empty()) return fail("the following arguments are required: " + missing);

    if (!extras.empty())
    {
        std::string list;
        for (size_t k = 0; k < extras.size(); ++k) list += (k ? " " : "") + extras[k];
        return fail("unrecognized arguments: " + list);
    }

    r.ok = true;
    return r;
}

std::pair<int64_t, int64_t> step_counts(const Args& args)
{
    if (args.benchmark == "maxbatch") return {1, 1};
    return {args.warmup_steps.value_or(kThroughputWarmupSteps), args.steps.value_or(kThroughputSteps)};
}

namespace
{

bool window_flags(const Args& args) { return args.window_images.has_value() || args.window_seconds.has_value(); }

}  // namespace

bool window_by_rule(const Args& args)
{
    return args.benchmark == "throughput" && !args.steps && window_flags(args);
}

bool warmup_by_rule(const Args& args)
{
    return args.benchmark == "throughput" && !args.warmup_steps &&
           (window_by_rule(args) || args.max_warmup_seconds.has_value());
}

}  // namespace kit
