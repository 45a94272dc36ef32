// kit_json: the small JSON value the KIT-RESULT line is built from.
//
// Objects keep insertion order (the result line reads like kittrial's), set() on an existing
// key replaces its value in place. dump() writes compact, pure-ASCII JSON: non-ASCII text is
// escaped as \uXXXX (invalid UTF-8 bytes become U+FFFD) and non-finite doubles become null,
// because JSON has no NaN/inf (the result's status already says a loss was not finite).
// No parser: the host parses the line (kitctl.protocol.parse_result).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kit
{

class Json
{
public:
    enum class Kind { Null, Bool, Int, Double, String, Array, Object };

    Json() = default;  // null
    Json(std::nullptr_t) {}
    Json(bool value) : kind_(Kind::Bool), bool_(value) {}
    Json(int value) : kind_(Kind::Int), int_(value) {}
    Json(long value) : kind_(Kind::Int), int_(value) {}
    Json(long long value) : kind_(Kind::Int), int_(value) {}
    Json(unsigned value) : kind_(Kind::Int), int_(value) {}
    Json(unsigned long value) : kind_(Kind::Int), int_((long long)value) {}
    Json(unsigned long long value) : kind_(Kind::Int), int_((long long)value) {}
    Json(double value) : kind_(Kind::Double), double_(value) {}
    Json(const char* value) : kind_(Kind::String), string_(value) {}
    Json(std::string value) : kind_(Kind::String), string_(std::move(value)) {}
    Json(std::string_view value) : kind_(Kind::String), string_(value) {}

    static Json array(std::vector<Json> items = {});
    static Json object();

    Kind kind() const noexcept { return kind_; }
    bool is_null() const noexcept { return kind_ == Kind::Null; }
    bool is_object() const noexcept { return kind_ == Kind::Object; }

    // Objects. operator[] inserts null for a missing key (and turns a null into an object).
    Json& operator[](std::string_view key);
    Json& set(std::string_view key, Json value);
    bool contains(std::string_view key) const;
    const Json* find(std::string_view key) const;
    const std::vector<std::pair<std::string, Json>>& items() const { return object_; }

    // Arrays.
    Json& push_back(Json value);
    const std::vector<Json>& elements() const { return array_; }

    bool as_bool() const { return bool_; }
    long long as_int() const { return int_; }
    double as_double() const { return kind_ == Kind::Int ? double(int_) : double_; }
    const std::string& as_string() const { return string_; }

    std::string dump() const;
    void dump_to(std::string& out) const;

private:
    Kind kind_ = Kind::Null;
    bool bool_ = false;
    long long int_ = 0;
    double double_ = 0.0;
    std::string string_;
    std::vector<Json> array_;
    std::vector<std::pair<std::string, Json>> object_;
};

// `text` as a JSON string literal (quotes included), pure ASCII.
std::string json_quote(std::string_view text);

// Shortest text that reads back as `value`; "null" if it is not finite.
std::string json_number(double value);

}  // namespace kit
