#include "kit_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <system_error>

namespace kit
{

Json Json::array(std::vector<Json> items)
{
    Json j;
    j.kind_ = Kind::Array;
    j.array_ = std::move(items);
    return j;
}

Json Json::object()
{
    Json j;
    j.kind_ = Kind::Object;
    return j;
}

Json& Json::operator[](std::string_view key)
{
    if (kind_ == Kind::Null) kind_ = Kind::Object;
    if (kind_ != Kind::Object) throw std::logic_error("kit::Json: operator[] on a non-object");
    for (auto& [k, v] : object_)
        if (k == key) return v;
    object_.emplace_back(std::string(key), Json());
    return object_.back().second;
}

Json& Json::set(std::string_view key, Json value)
{
    Json& slot = (*this)[key];
    slot = std::move(value);
    return slot;
}

bool Json::contains(std::string_view key) const { return find(key) != nullptr; }

const Json* Json::find(std::string_view key) const
{
    if (kind_ != Kind::Object) return nullptr;
    for (const auto& [k, v] : object_)
        if (k == key) return &v;
    return nullptr;
}

Json& Json::push_back(Json value)
{
    if (kind_ == Kind::Null) kind_ = Kind::Array;
    if (kind_ != Kind::Array) throw std::logic_error("kit::Json: push_back on a non-array");
    array_.push_back(std::move(value));
    return array_.back();
}

namespace
{

void append_u16(std::string& out, unsigned unit)
{
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", unit & 0xFFFFu);
    out += buf;
}

void append_code_point(std::string& out, char32_t cp)
{
    if (cp < 0x10000)
        append_u16(out, unsigned(cp));
    else
    {
        cp -= 0x10000;
        append_u16(out, 0xD800u + unsigned(cp >> 10));
        append_u16(out, 0xDC00u + unsigned(cp & 0x3FF));
    }
}

// Length of the valid UTF-8 sequence at s[i] and its code point, or 0 if invalid.
size_t decode_utf8(std::string_view s, size_t i, char32_t& cp)
{
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char b0 = byte(i);
    size_t len;
    char32_t min;
    if (b0 >= 0xC2 && b0 <= 0xDF) { len = 2; cp = b0 & 0x1F; min = 0x80; }
    else if (b0 >= 0xE0 && b0 <= 0xEF) { len = 3; cp = b0 & 0x0F; min = 0x800; }
    else if (b0 >= 0xF0 && b0 <= 0xF4) { len = 4; cp = b0 & 0x07; min = 0x10000; }
    else return 0;
    if (i + len > s.size()) return 0;
    for (size_t k = 1; k < len; ++k)
    {
        const unsigned char b = byte(i + k);
        if ((b & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

}  // namespace

std::string json_quote(std::string_view text)
{
    std::string out;
    out.reserve(text.size() + 2);
    out += '"';
    for (size_t i = 0; i < text.size();)
    {
        const unsigned char c = static_cast<unsigned char>(text[i]);
        if (c < 0x80)
        {
            switch (c)
            {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) append_u16(out, c);
                else out += char(c);
            }
            ++i;
            continue;
        }
        char32_t cp = 0;
        const size_t len = decode_utf8(text, i, cp);
        if (len == 0)
        {
            append_u16(out, 0xFFFD);  // an invalid byte, as Python's errors="replace" shows it
            ++i;
        }
        else
        {
            append_code_point(out, cp);
            i += len;
        }
    }
    out += '"';
    return out;
}

std::string json_number(double value)
{
    if (!std::isfinite(value)) return "null";
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
    if (ec != std::errc()) return "null";
    return std::string(buf, end);
}

void Json::dump_to(std::string& out) const
{
    switch (kind_)
    {
    case Kind::Null: out += "null"; return;
    case Kind::Bool: out += bool_ ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(int_); return;
    case Kind::Double: out += json_number(double_); return;
    case Kind::String: out += json_quote(string_); return;
    case Kind::Array:
    {
        out += '[';
        bool first = true;
        for (const Json& item : array_)
        {
            if (!first) out += ',';
            first = false;
            item.dump_to(out);
        }
        out += ']';
        return;
    }
    case Kind::Object:
    {
        out += '{';
        bool first = true;
        for (const auto& [key, value] : object_)
        {
            if (!first) out += ',';
            first = false;
            out += json_quote(key);
            out += ':';
            value.dump_to(out);
        }
        out += '}';
        return;
    }
    }
}

std::string Json::dump() const
{
    std::string out;
    dump_to(out);
    return out;
}

}  // namespace kit
